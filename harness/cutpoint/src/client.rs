//! The in-process side: [`hit`], [`hit_io`], [`init`] and the once-per-process
//! configuration.
//!
//! The configuration is read from the environment exactly once, either eagerly
//! by [`init`] or lazily by the first [`hit`], and is summarised in a single
//! atomic state byte so that a disarmed process pays one relaxed load per hit.
//! This module deliberately never re-reads the environment, never retries a
//! failed connection to the harness and never exits the process itself: a
//! harness that is unreachable or gone is logged once per hit to stderr and
//! the hit continues, because the harness is expected to notice a missing hold
//! through its own deadline.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use serde::Serialize;

use crate::{
    Arm, ConfigError, ENV_ARM, ENV_ROLE, ENV_SOCKET, ENV_TRACE, Error, IoFault, parse_arm,
};

/// The environment has not been read yet.
const UNINIT: u8 = 0;
/// Neither a trace nor an arm is configured: hits do nothing.
const DISARMED: u8 = 1;
/// Hits are counted, and traced or held as configured.
const ACTIVE: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Hits of this process currently blocked on the harness.
static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a thread of this process is blocked at an armed hit right now.
///
/// A process held at a cut is frozen at that boundary, as if it had crashed
/// there; multi-threaded fakes use this to stay frozen (not exit on a closed
/// stdin, for one) until the harness lets the hit go.
pub fn held() -> bool {
    HELD.load(Ordering::SeqCst) > 0
}
static RUNTIME: OnceLock<Result<Option<Runtime>, ConfigError>> = OnceLock::new();

/// Marks the boundary `point`, e.g. `hit("runner.turn_intent.persisted")`.
///
/// Disarmed, this is one relaxed atomic load. With `TURNCUT_CUT_TRACE` set, the
/// hit is appended to the trace file; when it is the armed occurrence, the
/// process reports it to the harness and blocks until the harness replies
/// `continue` or kills it. Nothing at this point can fail: a `fail <ERRNO>`
/// or `corrupt` reply is logged to stderr and treated as `continue`.
///
/// # Panics
///
/// If this is the first hit of the process, [`init`] was not called and the
/// `TURNCUT_*` environment is malformed: the harness set up the process wrongly,
/// and carrying on would produce a run that silently never cuts.
#[inline]
pub fn hit(point: &str) {
    // A point that cannot fail never returns a fault (the reply is logged).
    let _ = dispatch(point, Kind::Plain);
}

/// Marks the boundary where a process has received a request and is about
/// to answer it, e.g. `hit_answer("model.responses.received")`.
///
/// Like [`hit`], but when the harness answers the armed occurrence with
/// `answer NAME` this returns `NAME`, and the caller answers the request it
/// just received with the error that name stands for (its protocol's error
/// form: a JSON-RPC error, an HTTP status with its body, a cut stream)
/// instead of its real answer. A `fail <ERRNO>` reply here is logged and
/// treated as `continue`. Disarmed, it is one relaxed atomic load and `None`.
///
/// # Panics
///
/// As [`hit`].
#[inline]
pub fn hit_answer(point: &str) -> Option<String> {
    match dispatch(point, Kind::Answer)? {
        Reply::Answer(name) => Some(name),
        Reply::Fail(_) => None,
    }
}

/// Marks the boundary before an operation that can fail, e.g.
/// `hit_io("runner.write.turn_intent")` before a durable write.
///
/// Like [`hit`], but when the harness answers the armed occurrence with
/// `fail EIO` or `fail ENOSPC` this returns that errno as an
/// [`io::Error`] (`raw_os_error` set), and the caller fails the operation as
/// if the kernel had; answered `corrupt`, it returns an
/// [`io::ErrorKind::InvalidData`] error ([`IoFault::of_error`] names either),
/// and the caller fails the read as if what it read did not decode.
/// Disarmed, it is one relaxed atomic load and `Ok(())`.
///
/// # Panics
///
/// As [`hit`].
#[inline]
pub fn hit_io(point: &str) -> io::Result<()> {
    match dispatch(point, Kind::Io) {
        Some(Reply::Fail(fault)) => Err(fault.to_io_error()),
        _ => Ok(()),
    }
}

/// [`hit`] for a caller that must not block where it runs (an async
/// executor's worker): the hit is counted and traced here, and only the
/// armed occurrence, which blocks until the harness answers, runs inside
/// `off` (e.g. `|hold| tokio::task::block_in_place(hold)`). Moving every
/// hit off the worker handed the worker's queue to a new thread each time,
/// most of the threads a runner started in a wave.
///
/// # Panics
///
/// As [`hit`].
pub fn hit_off(point: &str, off: impl FnOnce(&mut dyn FnMut())) {
    let _ = dispatch_off(point, Kind::Plain, off);
}

/// What a point can be told besides `continue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Nothing: [`hit`].
    Plain,
    /// `fail <ERRNO>`: [`hit_io`].
    Io,
    /// `answer NAME`: [`hit_answer`].
    Answer,
}

/// A reply other than `continue` that the point's [`Kind`] takes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reply {
    Fail(IoFault),
    Answer(String),
}

/// The common fast path of [`hit`], [`hit_io`] and [`hit_answer`]: the
/// reply the harness injected, if the point takes it.
#[inline]
fn dispatch(point: &str, can_fail: Kind) -> Option<Reply> {
    dispatch_off(point, can_fail, |hold| hold())
}

/// [`dispatch`], with the hold of an armed occurrence run inside `off`
/// ([`hit_off`]).
#[inline]
fn dispatch_off(point: &str, can_fail: Kind, off: impl FnOnce(&mut dyn FnMut())) -> Option<Reply> {
    // Relaxed is enough: the value only selects a path, and the active path
    // reaches the configuration through `OnceLock`, which synchronises itself.
    match STATE.load(Ordering::Relaxed) {
        DISARMED => None,
        ACTIVE => active_hit(point, can_fail, off),
        _ => first_hit(point, can_fail, off),
    }
}

/// Whether hits do anything in this process (tracing or arming is on).
///
/// One relaxed atomic load after initialisation. Async callers use it to move
/// a possibly blocking [`hit`] off their executor's worker only when needed.
pub fn active() -> bool {
    match STATE.load(Ordering::Relaxed) {
        DISARMED => false,
        ACTIVE => true,
        _ => init().is_ok() && STATE.load(Ordering::Relaxed) == ACTIVE,
    }
}

/// Reads the `TURNCUT_*` environment now instead of at the first [`hit`].
///
/// Binaries call this at start and exit with code 2 on error, so that a
/// malformed environment is reported before any work instead of as a panic in
/// the middle of a turn. Calling it again returns the same outcome without
/// reading the environment again.
pub fn init() -> Result<(), Error> {
    match RUNTIME.get_or_init(|| Runtime::from_lookup(|name| std::env::var_os(name))) {
        Ok(runtime) => {
            let state = if runtime.is_some() { ACTIVE } else { DISARMED };
            STATE.store(state, Ordering::Release);
            Ok(())
        }
        Err(e) => Err(Error::Config(e.clone())),
    }
}

#[cold]
#[inline(never)]
fn first_hit(point: &str, can_fail: Kind, off: impl FnOnce(&mut dyn FnMut())) -> Option<Reply> {
    if let Err(e) = init() {
        panic!("cutpoint: {e}");
    }
    // `init` succeeded, so the state is now disarmed or active and this
    // re-dispatch cannot come back here.
    dispatch_off(point, can_fail, off)
}

#[inline(never)]
fn active_hit(point: &str, can_fail: Kind, off: impl FnOnce(&mut dyn FnMut())) -> Option<Reply> {
    // The relaxed load in `dispatch` does not order us after the thread that
    // stored the configuration, so reach it through `OnceLock`, whose fast
    // path is a single acquire load and whose slow path waits for the writer.
    if let Some(Ok(Some(runtime))) = RUNTIME.get() {
        runtime.hit(point, can_fail, off)
    } else {
        first_hit(point, can_fail, off)
    }
}

/// The wire form of a hit, borrowing instead of allocating on every hit.
#[derive(Serialize)]
struct HitLine<'a> {
    role: &'a str,
    pid: u32,
    point: &'a str,
    n: u64,
}

/// Where and at which occurrences to block.
struct Armed {
    socket: PathBuf,
    arms: Vec<Arm>,
}

struct Trace {
    path: PathBuf,
    file: File,
}

/// The active configuration of a process plus its per-point counters.
pub(crate) struct Runtime {
    role: String,
    armed: Option<Armed>,
    trace: Option<Trace>,
    counts: Mutex<HashMap<String, u64>>,
}

impl Runtime {
    /// Builds the configuration from a variable lookup; `None` means disarmed.
    ///
    /// Empty variables count as unset so that a harness can disarm a child by
    /// blanking a variable as well as by removing it.
    pub(crate) fn from_lookup(
        lookup: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Option<Runtime>, ConfigError> {
        let var = |name: &'static str| -> Result<Option<String>, ConfigError> {
            match lookup(name) {
                None => Ok(None),
                Some(value) => match value.into_string() {
                    Ok(text) if text.trim().is_empty() => Ok(None),
                    Ok(text) => Ok(Some(text)),
                    Err(_) => Err(ConfigError::NotUnicode { var: name }),
                },
            }
        };
        let role = var(ENV_ROLE)?.unwrap_or_else(|| "unknown".to_owned());
        let armed = match var(ENV_ARM)? {
            None => None,
            Some(spec) => {
                let arms = parse_arm(&spec).map_err(|e| match e {
                    Error::Config(config) => config,
                    other => unreachable!("parse_arm only returns config errors, got {other}"),
                })?;
                let socket = var(ENV_SOCKET)?.ok_or(ConfigError::MissingSocket)?;
                Some(Armed {
                    socket: socket.into(),
                    arms,
                })
            }
        };
        let trace = match var(ENV_TRACE)? {
            None => None,
            Some(path) => {
                let path = PathBuf::from(path);
                // O_APPEND makes each single write land whole at the end of
                // the file, so lines from concurrent processes never tear.
                let file = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)
                    .map_err(|e| ConfigError::Trace {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                Some(Trace { path, file })
            }
        };
        if armed.is_none() && trace.is_none() {
            return Ok(None);
        }
        Ok(Some(Runtime {
            role,
            armed,
            trace,
            counts: Mutex::new(HashMap::new()),
        }))
    }

    /// Counts, traces and (at an armed occurrence) holds one hit, the hold
    /// run inside `off`; returns the reply the harness gave when the
    /// point's kind (`can_fail`) takes it.
    fn hit(
        &self,
        point: &str,
        can_fail: Kind,
        off: impl FnOnce(&mut dyn FnMut()),
    ) -> Option<Reply> {
        // Counting and tracing happen under one lock so that the trace lists
        // each point's occurrences in increasing order even across threads.
        // The lock is released before blocking on the harness, so other
        // threads keep running while one of them is held, as they would up to
        // a real crash.
        let held = {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            let n = match counts.get_mut(point) {
                Some(count) => {
                    *count += 1;
                    *count
                }
                None => {
                    counts.insert(point.to_owned(), 1);
                    1
                }
            };
            let armed = self
                .armed
                .as_ref()
                .filter(|armed| armed.arms.iter().any(|a| a.matches(point, n)));
            if self.trace.is_none() && armed.is_none() {
                return None;
            }
            // The pid is taken per hit rather than cached so that a forked
            // child reports itself.
            let line = HitLine {
                role: &self.role,
                pid: std::process::id(),
                point,
                n,
            };
            let mut bytes = serde_json::to_vec(&line).expect("a hit always serialises");
            bytes.push(b'\n');
            if let Some(trace) = &self.trace {
                trace.append(&bytes);
            }
            armed.map(|armed| (armed, bytes, n))
        };
        let (armed, bytes, n) = held?;
        let mut fault = None;
        off(&mut || {
            HELD.fetch_add(1, Ordering::SeqCst);
            fault = armed.hold(&bytes, point, n, can_fail);
            HELD.fetch_sub(1, Ordering::SeqCst);
        });
        fault
    }
}

impl Trace {
    fn append(&self, line: &[u8]) {
        // One write(2) per line: a second write to finish a short one could
        // interleave with another process, so a short write is reported
        // rather than completed.
        let result = loop {
            match (&self.file).write(line) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        match result {
            Ok(written) if written == line.len() => {}
            Ok(written) => eprintln!(
                "cutpoint: short write to trace {} ({written} of {} bytes)",
                self.path.display(),
                line.len()
            ),
            Err(e) => eprintln!(
                "cutpoint: cannot append to trace {}: {e}",
                self.path.display()
            ),
        }
    }
}

impl Armed {
    /// Reports the armed hit, blocks until the harness answers and returns
    /// the reply it injected (only where the point's kind takes it).
    fn hold(&self, line: &[u8], point: &str, n: u64, can_fail: Kind) -> Option<Reply> {
        let reply = match exchange(&self.socket, line) {
            Ok(reply) => reply,
            Err(e) => {
                eprintln!(
                    "cutpoint: cannot reach harness at {} for {point}#{n}: {e}; continuing",
                    self.socket.display()
                );
                return None;
            }
        };
        let reply = reply.trim_end();
        let answer = crate::answer_of_reply(reply);
        match IoFault::from_reply(reply) {
            _ if reply == "continue" => None,
            Some(fault) if can_fail == Kind::Io => Some(Reply::Fail(fault)),
            Some(fault) => {
                eprintln!("cutpoint: {point}#{n} cannot fail; ignoring {fault} and continuing");
                None
            }
            None if answer.is_some() && can_fail == Kind::Answer => {
                answer.map(|a| Reply::Answer(a.to_owned()))
            }
            None if answer.is_some() => {
                eprintln!(
                    "cutpoint: {point}#{n} answers no request; ignoring {reply:?} and continuing"
                );
                None
            }
            None if reply.is_empty() => {
                eprintln!(
                    "cutpoint: harness closed the connection for {point}#{n} without replying; continuing"
                );
                None
            }
            None => {
                eprintln!(
                    "cutpoint: unexpected harness reply {reply:?} for {point}#{n}; continuing"
                );
                None
            }
        }
    }
}

/// Sends one line and returns the reply line, empty if the peer closed first.
fn exchange(socket: &std::path::Path, line: &[u8]) -> io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(line)?;
    let mut reply = String::new();
    // `read_line` retries on EINTR, so only the harness (or a kill) ends this.
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn runtime(vars: &[(&str, &str)]) -> Result<Option<Runtime>, ConfigError> {
        let vars: BTreeMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        Runtime::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn no_variables_means_disarmed() {
        assert!(runtime(&[]).unwrap().is_none());
        assert!(runtime(&[(ENV_ROLE, "runner")]).unwrap().is_none());
        assert!(runtime(&[(ENV_SOCKET, "/tmp/x.sock")]).unwrap().is_none());
        assert!(
            runtime(&[(ENV_ARM, ""), (ENV_TRACE, " ")])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn arm_without_socket_is_rejected() {
        let err = runtime(&[(ENV_ARM, "a#1")]).err().unwrap();
        assert_eq!(err, ConfigError::MissingSocket);
        assert_eq!(
            err.to_string(),
            "missing TURNCUT_CUT_SOCKET while TURNCUT_CUT_ARM is set"
        );
    }

    #[test]
    fn unopenable_trace_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir/trace.jsonl");
        let err = runtime(&[(ENV_TRACE, path.to_str().unwrap())])
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .starts_with("cannot open TURNCUT_CUT_TRACE file"),
            "{err}"
        );
    }

    #[test]
    fn counts_and_trace_order_agree_across_threads() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("trace.jsonl");
        let runtime = Arc::new(
            runtime(&[(ENV_TRACE, trace.to_str().unwrap()), (ENV_ROLE, "t")])
                .unwrap()
                .unwrap(),
        );
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let runtime = Arc::clone(&runtime);
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        runtime.hit("shared.point.hit", Kind::Plain, |h| h());
                        runtime.hit(&format!("own.point.{t}"), Kind::Io, |h| h());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let hits = crate::trace_read(&trace).unwrap();
        assert_eq!(hits.len(), 4000);
        let mut last: HashMap<String, u64> = HashMap::new();
        for hit in hits {
            let previous = last.insert(hit.point.clone(), hit.n).unwrap_or(0);
            assert_eq!(hit.n, previous + 1, "out of order: {hit}");
            assert_eq!(hit.role, "t");
            assert_eq!(hit.pid, std::process::id());
        }
        assert_eq!(last["shared.point.hit"], 2000);
        assert_eq!(last["own.point.3"], 500);
    }

    /// `hit_off` moves only the armed occurrence's hold into `off`: the
    /// other hits are counted where they are. (The socket is absent, so the
    /// hold reports that and continues.)
    #[test]
    fn only_the_armed_occurrence_runs_off_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("absent.sock");
        let runtime = runtime(&[(ENV_ARM, "p#2"), (ENV_SOCKET, socket.to_str().unwrap())])
            .unwrap()
            .unwrap();
        let mut moved = Vec::new();
        for n in 1..=3 {
            let mut held = false;
            runtime.hit("p", Kind::Plain, |hold| {
                hold();
                held = true;
            });
            if held {
                moved.push(n);
            }
        }
        assert_eq!(moved, vec![2]);
    }
}
