//! The cut-point clients for other languages (`docs/examples/cutpoint-clients/`:
//! Node and Python, standard library only) against the real harness listener
//! (`cutpoint::Listener`, what a cell listens with): each client's own test
//! script runs under `node` / `python3` with the `TURNCUT_*` environment a cell
//! sets; this side answers its armed hits `continue`, `fail EIO`, `fail ENOSPC`,
//! `corrupt`, or closes the connection, and then compares the script's output, its exit
//! code and its trace file with what the wire (`docs/cutpoints.md`) says. A
//! malformed environment must stop the script with exit 2 and the Rust crate's
//! own message. Without `node` or `python3` the test says why it skips, except
//! under CI (`CI` set), where both must be there.

mod common;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use cutpoint::{IoFault, Listener};
use harness::supervisor::GroupChild;

const WAIT: Duration = Duration::from_secs(20);

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/cutpoint-clients")
}

/// The interpreter, or `None` (with the reason printed) when it is missing
/// outside CI.
fn interpreter(name: &str) -> Option<&str> {
    let found = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(name);
    }
    common::skip(
        name,
        &format!("{name} is not on PATH (apt-get install nodejs / python3 to run this test)"),
    );
    None
}

/// A client's test script as a command, with the cell-like environment `env`.
fn script(lang: &str, env: &[(&str, &str)]) -> Option<Command> {
    let (program, file) = match lang {
        "node" => ("node", clients().join("node/cutpoint.test.mjs")),
        _ => ("python3", clients().join("python/test_cutpoint.py")),
    };
    let mut cmd = Command::new(interpreter(program)?);
    cmd.arg(file)
        .env_remove(cutpoint::ENV_SOCKET)
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_TRACE)
        .env_remove(cutpoint::ENV_ROLE)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Some(cmd)
}

/// Waits for the child with the test's deadline; its exit code, stdout and stderr.
fn finish(mut child: GroupChild) -> (i32, String, String) {
    let mut out = child.inner().stdout.take().expect("piped");
    let mut err = child.inner().stderr.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        let _ = out.read_to_string(&mut o);
        let _ = err.read_to_string(&mut e);
        let _ = tx.send((o, e));
    });
    let (o, e) = rx
        .recv_timeout(WAIT)
        .expect("the client script did not finish within the deadline");
    let status = child.wait().expect("wait for the client script");
    (status.code().unwrap_or(-1), o, e)
}

/// The expected lines of an armed run: what each reply makes of each step.
const ARMED_OUTPUT: &str = "a.b continued\na.b continued\na.b continued\nw.x EIO\nw.y ENOSPC\n\
r.c CORRUPT\nw.z continued\nt.q continued\nparse a#2,runner.write.*#0,b#1 true false\n";

fn armed(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
    let trace = dir.path().join("trace.jsonl");
    let sock = listener.path().display().to_string();
    let trace_s = trace.display().to_string();
    let Some(mut cmd) = script(
        lang,
        &[
            (cutpoint::ENV_SOCKET, &sock),
            (cutpoint::ENV_ARM, "a.b#2, w.x, w.y#1,r.c,w.z#1,t.*#*"),
            (cutpoint::ENV_TRACE, &trace_s),
            (cutpoint::ENV_ROLE, "probe"),
        ],
    ) else {
        return;
    };
    let child = GroupChild::spawn(&mut cmd).unwrap();
    let pid = child.pid();
    // Each armed hit in order, and this side's answer to it.
    for (point, n, answer) in [
        ("a.b", 2, Some(None)),
        ("w.x", 1, Some(Some(IoFault::Eio))),
        ("w.y", 1, Some(Some(IoFault::Enospc))),
        ("r.c", 1, Some(Some(IoFault::Corrupt))),
        ("w.z", 1, Some(Some(IoFault::Eio))),
        ("t.q", 1, None),
    ] {
        let held = listener
            .accept_hit(WAIT)
            .unwrap_or_else(|e| panic!("{lang}: no hit {point}#{n}: {e}"));
        assert_eq!(
            (
                held.hit.point.as_str(),
                held.hit.n,
                held.hit.role.as_str(),
                held.hit.pid
            ),
            (point, n, "probe", pid),
            "{lang}"
        );
        match answer {
            Some(None) => held.resume().unwrap(),
            Some(Some(fault)) => held.fail(fault).unwrap(),
            // The harness closes the connection: the client goes on.
            None => drop(held),
        }
    }
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{lang}: {err}");
    assert_eq!(out, ARMED_OUTPUT, "{lang}: {err}");
    assert!(
        err.contains("w.z#1 cannot fail; ignoring EIO"),
        "{lang}: {err}"
    );
    assert!(
        err.contains("closed the connection for t.q#1"),
        "{lang}: {err}"
    );
    // Every hit traced, in order, as the Rust crate reads a trace.
    let hits: Vec<String> = cutpoint::trace_read(&trace)
        .unwrap()
        .into_iter()
        .map(|h| {
            assert_eq!((h.role.as_str(), h.pid), ("probe", pid), "{lang}");
            format!("{}#{}", h.point, h.n)
        })
        .collect();
    assert_eq!(
        hits,
        [
            "a.b#1", "a.b#2", "a.b#3", "w.x#1", "w.y#1", "r.c#1", "w.z#1", "t.q#1"
        ],
        "{lang}"
    );
    // Nothing else connected.
    assert!(listener.accept_hit(Duration::ZERO).is_err(), "{lang}");
}

fn disarmed_and_malformed(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
    let sock = listener.path().display().to_string();
    // Disarmed (a socket, nothing armed or traced): every hit goes on at once.
    let Some(mut cmd) = script(lang, &[(cutpoint::ENV_SOCKET, &sock)]) else {
        return;
    };
    let (code, out, err) = finish(GroupChild::spawn(&mut cmd).unwrap());
    assert_eq!(code, 0, "{lang}: {err}");
    assert_eq!(
        out,
        ARMED_OUTPUT
            .replace("EIO", "continued")
            .replace("ENOSPC", "continued")
            .replace("CORRUPT", "continued"),
        "{lang}"
    );
    assert!(
        listener.accept_hit(Duration::ZERO).is_err(),
        "{lang}: a disarmed hit connected"
    );
    // A malformed environment stops the script before any hit, with the
    // Rust crate's own words.
    let cases = [
        (
            vec![
                (cutpoint::ENV_SOCKET, sock.as_str()),
                (cutpoint::ENV_ARM, "a#0"),
            ],
            cutpoint::parse_arm("a#0").unwrap_err().to_string(),
        ),
        (
            vec![
                (cutpoint::ENV_SOCKET, sock.as_str()),
                (cutpoint::ENV_ARM, "a,,b"),
            ],
            cutpoint::parse_arm("a,,b").unwrap_err().to_string(),
        ),
        (
            vec![(cutpoint::ENV_ARM, "a#1")],
            cutpoint::ConfigError::MissingSocket.to_string(),
        ),
    ];
    for (env, message) in cases {
        let mut cmd = script(lang, &env).expect("the interpreter was found above");
        let (code, out, err) = finish(GroupChild::spawn(&mut cmd).unwrap());
        assert_eq!(code, 2, "{lang} {env:?}: {out} {err}");
        assert_eq!(
            err.trim(),
            format!("config error: {message}"),
            "{lang} {env:?}"
        );
        assert_eq!(out, "", "{lang} {env:?}");
    }
}

#[test]
fn the_node_client_speaks_the_wire_with_the_real_listener() {
    armed("node");
    disarmed_and_malformed("node");
}

#[test]
fn the_python_client_speaks_the_wire_with_the_real_listener() {
    armed("python");
    disarmed_and_malformed("python");
}
