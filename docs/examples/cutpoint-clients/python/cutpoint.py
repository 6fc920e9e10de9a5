"""turncut's cut points for a runner written in Python, standard library only.

The wire is docs/cutpoints.md; this is the Python twin of the Rust crate
`cutpoint` (harness/cutpoint). `hit("runner.turn_intent.persisted")` marks a
boundary; `hit_io("runner.write.turn_intent")` marks one before an operation
that can fail and raises `OSError(errno.EIO)` or `OSError(errno.ENOSPC)` when the
harness says so, or `CorruptRead` (an `OSError` with no errno) when it says the
data read there is corrupt. The environment is read once. Disarmed, a hit is one test of a
module variable. Traced, every hit appends one JSON line to the trace file in one
os.write on an O_APPEND descriptor. At the armed occurrence the calling thread
connects to the harness, sends its line and blocks until the reply (other
threads go on, as in a crash at that boundary) or until it is killed. A harness
that cannot be reached is logged to stderr and the hit continues: the harness
notices a missing hold by its own deadline.
"""

import errno
import json
import os
import re
import socket
import sys
import threading

ENV_SOCKET = "TURNCUT_CUT_SOCKET"
ENV_ARM = "TURNCUT_CUT_ARM"
ENV_TRACE = "TURNCUT_CUT_TRACE"
ENV_ROLE = "TURNCUT_ROLE"
EVERY = 0  # the occurrence of an arm written `#*`: every hit of its point

__all__ = ["ConfigError", "init", "active", "hit", "hit_io", "parse_arm", "arm_matches"]


class ConfigError(Exception):
    """A malformed TURNCUT_* environment."""


def parse_arm(spec):
    """Parses a TURNCUT_CUT_ARM value (`a.b#2,runner.write.*#*`) into (point, n) pairs."""
    arms = []
    for i, raw in enumerate(spec.split(",")):
        entry = raw.strip()
        if not entry:
            raise ConfigError(f'empty entry {i + 1} in TURNCUT_CUT_ARM "{spec}"')
        point, sep, occurrence = entry.partition("#")
        if not point:
            raise ConfigError(f'empty point name in TURNCUT_CUT_ARM entry "{entry}"')
        if re.search(r"\s", point):
            raise ConfigError(f'whitespace inside the point name of TURNCUT_CUT_ARM entry "{entry}"')
        if not sep:
            n = 1
        elif occurrence == "*":
            n = EVERY
        elif re.fullmatch(r"[0-9]+", occurrence) and 0 < int(occurrence) < 2**64:
            n = int(occurrence)
        else:
            # Only plain digits: a typo must not turn a crash test into a run that never cuts.
            raise ConfigError(
                f'bad occurrence "{occurrence}" in TURNCUT_CUT_ARM entry "{entry}": expected a positive integer'
            )
        arms.append((point, n))
    return arms


def arm_matches(arm, point, n):
    """Whether arm (point, n) holds the n-th hit of point."""
    arm_point, arm_n = arm
    if arm_point.endswith(".*"):
        point_ok = point.startswith(arm_point[:-1])
    else:
        point_ok = arm_point == point
    return point_ok and (arm_n == EVERY or arm_n == n)


_UNSET = object()
_config = _UNSET  # _UNSET: not read; None: disarmed; a ConfigError; or a dict
_lock = threading.Lock()


def _env(name):
    value = os.environ.get(name)
    return None if value is None or not value.strip() else value


def init():
    """Reads the environment now (once); raises ConfigError when it is malformed."""
    global _config
    with _lock:
        if _config is _UNSET:
            try:
                _config = _read_config()
            except ConfigError as e:
                _config = e
        if isinstance(_config, ConfigError):
            raise _config


def _read_config():
    spec = _env(ENV_ARM)
    arms = None if spec is None else parse_arm(spec)
    sock = _env(ENV_SOCKET)
    if arms is not None and sock is None:
        raise ConfigError("missing TURNCUT_CUT_SOCKET while TURNCUT_CUT_ARM is set")
    trace = _env(ENV_TRACE)
    trace_fd = None
    if trace is not None:
        try:
            trace_fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(f"cannot open TURNCUT_CUT_TRACE file {trace}: {e.strerror}") from None
    if arms is None and trace_fd is None:
        return None
    return {
        "role": _env(ENV_ROLE) or "unknown",
        "arms": arms,
        "socket": sock,
        "trace_fd": trace_fd,
        "trace": trace,
        "counts": {},
    }


def active():
    """Whether hits do anything in this process (tracing or arming is on)."""
    init()
    return _config is not None


def hit(point):
    """Marks the boundary `point`; a `fail ...` or `corrupt` reply is logged and ignored."""
    _dispatch(point, False)


class CorruptRead(OSError):
    """What `hit_io` raises when the harness says the data read at the point is
    corrupt (reply `corrupt`): the kernel returned the bytes and only the reader
    finds them wrong, so it carries no errno."""


# The fault each reply injects: its name, and its errno (None for a corrupt read).
_FAULTS = {"fail EIO": ("EIO", errno.EIO), "fail ENOSPC": ("ENOSPC", errno.ENOSPC),
           "corrupt": ("corrupt", None)}


def hit_io(point):
    """Marks the boundary before an operation that can fail; raises OSError with
    errno EIO or ENOSPC when the harness injects that fault, or CorruptRead when
    what the operation reads is to be corrupt."""
    fault = _dispatch(point, True)
    if fault is not None:
        name, code = fault
        if code is None:
            raise CorruptRead(f"the data read is corrupt (injected by the harness at {point})")
        raise OSError(code, f"{os.strerror(code)} (injected by the harness at {point})")


def _dispatch(point, can_fail):
    if _config is _UNSET:
        init()
    cfg = _config
    if cfg is None:
        return None
    # Count and trace under one lock so the trace lists each point's
    # occurrences in order across threads; block on the harness outside it.
    with _lock:
        n = cfg["counts"].get(point, 0) + 1
        cfg["counts"][point] = n
        armed = cfg["arms"] is not None and any(arm_matches(a, point, n) for a in cfg["arms"])
        if cfg["trace_fd"] is None and not armed:
            return None
        line = (json.dumps({"role": cfg["role"], "pid": os.getpid(), "point": point, "n": n},
                           separators=(",", ":")) + "\n").encode()
        if cfg["trace_fd"] is not None:
            try:
                if os.write(cfg["trace_fd"], line) != len(line):
                    print(f"cutpoint: short write to trace {cfg['trace']}", file=sys.stderr)
            except OSError as e:
                print(f"cutpoint: cannot append to trace {cfg['trace']}: {e}", file=sys.stderr)
    return _hold(cfg, line, point, n, can_fail) if armed else None


def _hold(cfg, line, point, n, can_fail):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(cfg["socket"])
            s.sendall(line)
            reply = s.makefile("rb").readline().decode("utf-8", "replace")
    except OSError as e:
        print(f"cutpoint: cannot reach harness at {cfg['socket']} for {point}#{n}: {e}; continuing",
              file=sys.stderr)
        return None
    reply = reply.rstrip("\r\n")
    if reply == "continue":
        return None
    fault = _FAULTS.get(reply)
    if fault is not None and can_fail:
        return fault
    if fault is not None:
        print(f"cutpoint: {point}#{n} cannot fail; ignoring {fault[0]} and continuing", file=sys.stderr)
    elif reply == "":
        print(f"cutpoint: harness closed the connection for {point}#{n} without replying; continuing",
              file=sys.stderr)
    else:
        print(f"cutpoint: unexpected harness reply {reply!r} for {point}#{n}; continuing", file=sys.stderr)
    return None
