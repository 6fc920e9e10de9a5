"""The Python client's own test script, run by harness/tests/cutpoint_clients.rs
against the real harness listener (the Rust `cutpoint::Listener`), which sets the
TURNCUT_* environment, answers each armed hit as the test plans and then compares
this script's output and the trace file with what it expects. Each step prints
`<point> <outcome>`: `continued`, `EIO`, `ENOSPC` or `CORRUPT`."""

import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cutpoint  # noqa: E402

try:
    cutpoint.init()
except cutpoint.ConfigError as e:
    print(f"config error: {e}", file=sys.stderr)
    sys.exit(2)


def step(point, can_fail):
    try:
        (cutpoint.hit_io if can_fail else cutpoint.hit)(point)
        print(f"{point} continued", flush=True)
    except cutpoint.CorruptRead:
        print(f"{point} CORRUPT", flush=True)
    except OSError as e:
        print(f"{point} {errno.errorcode[e.errno]}", flush=True)


for _ in range(3):
    step("a.b", False)
step("w.x", True)
step("w.y", True)
step("r.c", True)
step("w.z", False)
step("t.q", False)
arms = cutpoint.parse_arm(" a#2 , runner.write.*#* ,b")
print("parse {} {} {}".format(
    ",".join(f"{p}#{n}" for p, n in arms),
    str(cutpoint.arm_matches(arms[1], "runner.write.turn_intent", 7)).lower(),
    str(cutpoint.arm_matches(arms[1], "runner.writex", 1)).lower(),
))
