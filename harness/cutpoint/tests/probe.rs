//! End-to-end tests of `cutpoint` against real `cutpoint-probe` child processes.
//!
//! Each test spawns the probe with a `TURNCUT_*` environment of its own and
//! follows it through its stdout (`passed <point>` per hit, then `done`), the
//! harness socket and its trace file. Synchronisation is by events only: a
//! line from the child, a message on the socket, or the child's exit, each
//! with a deadline. The one bounded wait that is expected to expire is for a
//! line that a held child must not print. These tests deliberately do not
//! cover the runner or the providers; they check the contract those rely on.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use cutpoint::{
    ENV_ARM, ENV_ROLE, ENV_SOCKET, ENV_TRACE, Error, Hit, IoFault, Listener, parse_arm,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Generous so that a loaded CI machine does not produce false failures; a
/// passing test never waits this long.
const DEADLINE: Duration = Duration::from_secs(20);
/// How long a held child is watched for progress it must not make.
const QUIET: Duration = Duration::from_millis(300);

/// The sequence used by the armed tests: the second `a.x.one` is the fourth
/// hit, so three `passed` lines precede it.
const ARMED_POINTS: &[&str] = &["a.x.one", "a.x.two", "b.y.z", "a.x.one", "c.w.v"];

#[derive(Debug, PartialEq)]
enum Next {
    Line(String),
    Eof,
    Quiet,
}

/// A running probe whose stdout lines arrive on a channel.
///
/// Dropping it kills and reaps the child, so a failing test never leaves a
/// probe blocked on a socket behind.
struct Probe {
    child: Child,
    lines: Receiver<String>,
    reaped: bool,
}

impl Probe {
    fn spawn<K, V>(points: &[&str], env: &[(K, V)]) -> Probe
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cutpoint-probe"));
        command
            .args(points)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The test process may itself run under a harness; only the variables
        // a test sets must reach the probe.
        for var in [ENV_ARM, ENV_SOCKET, ENV_TRACE, ENV_ROLE] {
            command.env_remove(var);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("the probe starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = mpsc::channel();
        // A reader thread turns the blocking pipe into a channel, whose
        // `recv_timeout` gives each wait a deadline. Its sender drops at EOF.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Probe {
            child,
            lines,
            reaped: false,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn next(&self, within: Duration) -> Next {
        match self.lines.recv_timeout(within) {
            Ok(line) => Next::Line(line),
            Err(RecvTimeoutError::Disconnected) => Next::Eof,
            Err(RecvTimeoutError::Timeout) => Next::Quiet,
        }
    }

    fn expect_lines(&self, expected: &[&str]) {
        for want in expected {
            assert_eq!(self.next(DEADLINE), Next::Line((*want).to_owned()));
        }
    }

    fn expect_passed(&self, points: &[&str]) {
        let lines: Vec<String> = points.iter().map(|p| format!("passed {p}")).collect();
        self.expect_lines(&lines.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// Reads the remaining stdout to EOF, then reaps the child; the EOF comes
    /// first so the blocking `wait` only ever waits for an exiting process.
    fn finish(mut self) -> (Vec<String>, ExitStatus, String) {
        let mut rest = Vec::new();
        loop {
            match self.next(DEADLINE) {
                Next::Line(line) => rest.push(line),
                Next::Eof => break,
                Next::Quiet => panic!("the probe did not close stdout; got {rest:?} so far"),
            }
        }
        let status = self.child.wait().expect("the probe can be reaped");
        self.reaped = true;
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .expect("stderr is piped")
            .read_to_string(&mut stderr)
            .expect("stderr is readable");
        (rest, status, stderr)
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn passed(points: &[&str]) -> Vec<String> {
    points.iter().map(|p| format!("passed {p}")).collect()
}

fn with_done(points: &[&str]) -> Vec<String> {
    let mut lines = passed(points);
    lines.push("done".to_owned());
    lines
}

fn hit(role: &str, pid: u32, point: &str, n: u64) -> Hit {
    Hit {
        role: role.to_owned(),
        pid,
        point: point.to_owned(),
        n,
    }
}

fn armed_env<'a>(listener: &'a Listener, arm: &'a str) -> Vec<(&'a str, &'a OsStr)> {
    vec![
        (ENV_ARM, OsStr::new(arm)),
        (ENV_SOCKET, listener.path().as_os_str()),
        (ENV_ROLE, OsStr::new("runner")),
    ]
}

fn bind(dir: &Path) -> Listener {
    Listener::bind(dir.join("cut.sock")).expect("the listener binds")
}

#[test]
fn traced_run_lists_every_hit_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let points = ["a.x.one", "a.x.two", "a.x.one", "b.y.z"];
    let probe = Probe::spawn(
        &points,
        &[
            (ENV_TRACE, trace.as_os_str()),
            (ENV_ROLE, OsStr::new("provider")),
        ],
    );
    let pid = probe.pid();
    let (lines, status, stderr) = probe.finish();
    assert_eq!(lines, with_done(&points));
    assert!(status.success(), "{status}: {stderr}");
    assert_eq!(
        cutpoint::trace_read(&trace).unwrap(),
        vec![
            hit("provider", pid, "a.x.one", 1),
            hit("provider", pid, "a.x.two", 1),
            hit("provider", pid, "a.x.one", 2),
            hit("provider", pid, "b.y.z", 1),
        ]
    );
}

#[test]
fn armed_child_blocks_at_its_occurrence_until_killed() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let trace = dir.path().join("trace.jsonl");
    let mut env = armed_env(&listener, "a.x.one#2");
    env.push((ENV_TRACE, trace.as_os_str()));
    let probe = Probe::spawn(ARMED_POINTS, &env);

    let held = listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives");
    assert_eq!(held.hit, hit("runner", probe.pid(), "a.x.one", 2));
    probe.expect_passed(&ARMED_POINTS[..3]);
    // The trace line of a held hit is written before it blocks, so a trace
    // shows where a killed process stopped.
    let traced: Vec<_> = cutpoint::trace_read(&trace)
        .unwrap()
        .into_iter()
        .map(|h| format!("{}#{}", h.point, h.n))
        .collect();
    assert_eq!(traced, ["a.x.one#1", "a.x.two#1", "b.y.z#1", "a.x.one#2"]);

    kill(Pid::from_raw(probe.pid() as i32), Signal::SIGKILL).expect("the probe can be killed");
    let (rest, status, _) = probe.finish();
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status}");
    assert!(rest.is_empty(), "the killed probe printed {rest:?}");
    drop(held);
}

#[test]
fn held_child_makes_no_progress_until_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let mut probe = Probe::spawn(ARMED_POINTS, &armed_env(&listener, "a.x.one#2"));

    let held = listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives");
    assert_eq!(held.hit, hit("runner", probe.pid(), "a.x.one", 2));
    probe.expect_passed(&ARMED_POINTS[..3]);
    assert_eq!(probe.next(QUIET), Next::Quiet);
    assert!(
        probe.child.try_wait().unwrap().is_none(),
        "the held probe exited"
    );

    held.resume().expect("the resume is sent");
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&ARMED_POINTS[3..]));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "a resumed probe logs nothing: {stderr}");
}

#[test]
fn closing_without_reply_lets_the_child_continue() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(ARMED_POINTS, &armed_env(&listener, "a.x.one#2"));

    let held = listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives");
    probe.expect_passed(&ARMED_POINTS[..3]);
    drop(held);

    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&ARMED_POINTS[3..]));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr,
        "cutpoint: harness closed the connection for a.x.one#2 without replying; continuing\n"
    );
}

#[test]
fn holding_guard_keeps_the_child_blocked_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(ARMED_POINTS, &armed_env(&listener, "b.y.z"));

    let holding = listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives")
        .hold_forever();
    assert_eq!(holding.hit(), &hit("runner", probe.pid(), "b.y.z", 1));
    probe.expect_passed(&ARMED_POINTS[..2]);
    assert_eq!(probe.next(QUIET), Next::Quiet);

    drop(holding);
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&ARMED_POINTS[2..]));
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn each_armed_occurrence_is_held_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(ARMED_POINTS, &armed_env(&listener, "c.w.v,a.x.one#1"));

    let first = listener
        .accept_hit(DEADLINE)
        .expect("the first hit arrives");
    assert_eq!(first.hit, hit("runner", probe.pid(), "a.x.one", 1));
    assert_eq!(probe.next(QUIET), Next::Quiet);
    first.resume().unwrap();
    probe.expect_passed(&ARMED_POINTS[..4]);

    let second = listener
        .accept_hit(DEADLINE)
        .expect("the second hit arrives");
    assert_eq!(second.hit, hit("runner", probe.pid(), "c.w.v", 1));
    second.resume().unwrap();
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&ARMED_POINTS[4..]));
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn a_fail_reply_fails_an_io_point_once_with_its_errno() {
    for (fault, failure) in [
        (IoFault::Eio, "errno 5"),
        (IoFault::Enospc, "errno 28"),
        (IoFault::Corrupt, "corrupt"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let listener = bind(dir.path());
        let points = ["io:w.x.write", "io:w.x.write", "b.y.z"];
        let probe = Probe::spawn(&points, &armed_env(&listener, "w.x.write#1"));

        let held = listener
            .accept_hit(DEADLINE)
            .expect("the armed hit arrives");
        assert_eq!(held.hit, hit("runner", probe.pid(), "w.x.write", 1));
        held.fail(fault).expect("the fault is sent");
        let (rest, status, stderr) = probe.finish();
        // Only the armed occurrence fails; what a fault means after it is
        // the caller's business (the runner's disk stays full).
        assert_eq!(
            rest,
            [
                format!("failed w.x.write {failure}"),
                "passed w.x.write".to_owned(),
                "passed b.y.z".to_owned(),
                "done".to_owned(),
            ]
        );
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert!(
            stderr.is_empty(),
            "a failed io point logs nothing: {stderr}"
        );
    }
}

#[test]
fn a_fail_reply_to_a_point_that_cannot_fail_is_logged_and_passed() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(ARMED_POINTS, &armed_env(&listener, "b.y.z"));
    listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives")
        .fail(IoFault::Enospc)
        .expect("the fault is sent");
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(ARMED_POINTS));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr,
        "cutpoint: b.y.z#1 cannot fail; ignoring ENOSPC and continuing\n"
    );
}

#[test]
fn an_answer_reply_reaches_an_answer_point_once_and_is_logged_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let points = ["answer:m.r.received", "answer:m.r.received", "b.y.z"];
    let probe = Probe::spawn(&points, &armed_env(&listener, "m.r.received#1"));
    let held = listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives");
    held.answer("rate-limit").expect("the answer is sent");
    let (rest, status, stderr) = probe.finish();
    assert_eq!(
        rest,
        [
            "answered m.r.received rate-limit".to_owned(),
            "passed m.r.received".to_owned(),
            "passed b.y.z".to_owned(),
            "done".to_owned(),
        ]
    );
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    // A plain point and an io point pass an answer by, saying so.
    for point in ["b.y.z", "io:b.y.z"] {
        let probe = Probe::spawn(&[point], &armed_env(&listener, "b.y.z"));
        let held = listener
            .accept_hit(DEADLINE)
            .expect("the armed hit arrives");
        held.answer("overload").expect("the answer is sent");
        let (rest, status, stderr) = probe.finish();
        assert_eq!(rest, with_done(&["b.y.z"]));
        assert_eq!(status.code(), Some(0), "{stderr}");
        assert_eq!(
            stderr,
            "cutpoint: b.y.z#1 answers no request; ignoring \"answer overload\" and continuing\n"
        );
    }
    // An answer point takes no errno: logged and passed.
    let probe = Probe::spawn(&["answer:b.y.z"], &armed_env(&listener, "b.y.z"));
    listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives")
        .fail(IoFault::Eio)
        .expect("the fault is sent");
    let (rest, _, stderr) = probe.finish();
    assert_eq!(rest, with_done(&["b.y.z"]));
    assert_eq!(
        stderr,
        "cutpoint: b.y.z#1 cannot fail; ignoring EIO and continuing\n"
    );
}

#[test]
fn an_io_point_resumed_or_disarmed_passes() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(
        &["io:w.x.write", "a.x.one"],
        &armed_env(&listener, "w.x.write"),
    );
    listener
        .accept_hit(DEADLINE)
        .expect("the armed hit arrives")
        .resume()
        .unwrap();
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&["w.x.write", "a.x.one"]));
    assert_eq!(status.code(), Some(0), "{stderr}");

    let probe = Probe::spawn::<&str, &str>(&["io:w.x.write"], &[]);
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&["w.x.write"]));
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn unreachable_harness_is_logged_and_passed() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody-listens.sock");
    let probe = Probe::spawn(
        &["a.x.one"],
        &[
            (ENV_ARM, OsStr::new("a.x.one")),
            (ENV_SOCKET, socket.as_os_str()),
        ],
    );
    let (rest, status, stderr) = probe.finish();
    assert_eq!(rest, with_done(&["a.x.one"]));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with("cutpoint: cannot reach harness at ") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[test]
fn malformed_arm_is_rejected_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    for (spec, named) in [
        ("a#0", r#"entry "a#0""#),
        ("a#x", r#"entry "a#x""#),
        ("#3", r##"entry "#3""##),
        ("a,,b", "empty entry 2"),
        (",a", "empty entry 1"),
        ("b.y.z#1,", "empty entry 2"),
    ] {
        let err = parse_arm(spec).expect_err(spec);
        assert!(matches!(err, Error::Config(_)), "{spec}: {err:?}");
        assert!(err.to_string().contains(named), "{spec}: {err}");

        let probe = Probe::spawn(&["a.x.one"], &armed_env(&listener, spec));
        let (lines, status, stderr) = probe.finish();
        assert_eq!(status.code(), Some(2), "{spec}: {status}");
        assert!(lines.is_empty(), "{spec}: the probe ran: {lines:?}");
        assert!(
            stderr.contains("TURNCUT_CUT_ARM") && stderr.contains(named),
            "{spec}: {stderr}"
        );
    }
    assert_eq!(
        parse_arm("a#x").unwrap_err().to_string(),
        r#"bad occurrence "x" in TURNCUT_CUT_ARM entry "a#x": expected a positive integer"#
    );
}

#[test]
fn arm_without_socket_is_rejected() {
    let probe = Probe::spawn(&["a.x.one"], &[(ENV_ARM, "a.x.one")]);
    let (lines, status, stderr) = probe.finish();
    assert_eq!(status.code(), Some(2), "{status}");
    assert!(lines.is_empty());
    assert_eq!(
        stderr,
        "cutpoint-probe: missing TURNCUT_CUT_SOCKET while TURNCUT_CUT_ARM is set\n"
    );
}

#[test]
fn lazy_first_hit_panics_on_a_malformed_arm() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let probe = Probe::spawn(&["--lazy", "a.x.one"], &armed_env(&listener, "a#x"));
    let (lines, status, stderr) = probe.finish();
    assert_eq!(status.code(), Some(101), "a panic exits with 101: {status}");
    assert!(lines.is_empty(), "{lines:?}");
    assert!(
        stderr.contains(r#"cutpoint: bad occurrence "x" in TURNCUT_CUT_ARM entry "a#x""#),
        "{stderr}"
    );
}

#[test]
fn disarmed_child_passes_every_point() {
    let points = ["a.x.one", "a.x.two", "a.x.one", "b.y.z"];
    let probe = Probe::spawn::<&str, &str>(&points, &[]);
    let (lines, status, stderr) = probe.finish();
    assert_eq!(lines, with_done(&points));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn socket_without_arm_never_connects() {
    let dir = tempfile::tempdir().unwrap();
    let listener = bind(dir.path());
    let points = ["a.x.one", "a.x.two", "a.x.one", "b.y.z"];
    let probe = Probe::spawn(&points, &[(ENV_SOCKET, listener.path().as_os_str())]);
    let (lines, status, stderr) = probe.finish();
    assert_eq!(lines, with_done(&points));
    assert_eq!(status.code(), Some(0), "{stderr}");
    // The probe has exited, so any connection it made is already queued and
    // would be accepted at once; a zero deadline checks without waiting.
    let err = listener
        .accept_hit(Duration::ZERO)
        .expect_err("no connection");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
}

#[test]
fn concurrent_processes_share_a_trace_without_tearing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let points: Vec<String> = (0..300).map(|i| format!("p.hit.{}", i % 7)).collect();
    let points: Vec<&str> = points.iter().map(String::as_str).collect();
    let probes: Vec<Probe> = (0..4)
        .map(|_| Probe::spawn(&points, &[(ENV_TRACE, trace.as_os_str())]))
        .collect();
    let pids: Vec<u32> = probes.iter().map(Probe::pid).collect();
    for probe in probes {
        let (lines, status, stderr) = probe.finish();
        assert_eq!(lines.last().map(String::as_str), Some("done"));
        assert!(status.success(), "{status}: {stderr}");
    }
    let hits = cutpoint::trace_read(&trace).expect("every line is whole");
    assert_eq!(hits.len(), 4 * points.len());
    for pid in pids {
        let own: Vec<&str> = hits
            .iter()
            .filter(|h| h.pid == pid)
            .map(|h| h.point.as_str())
            .collect();
        assert_eq!(own, points, "pid {pid} hits out of order");
        assert!(hits.iter().all(|h| h.role == "unknown"));
    }
}
