//! The real `opencode serve` (npm `opencode-ai`, pinned to the version the
//! fake OpenCode mimics) driven by `turncut runnerd`, its model being
//! `turncut fake-provider model-api` on loopback: a whole task, offline, with
//! a `bash` permission answered by the runner and the effect in the ledger
//! once, the provider key kept out of the tool's environment. Then the crash
//! moments: the same turn on the real server and on `fake-provider opencode`,
//! the server's process group SIGKILLed at a named moment, restarted on the
//! same data, and read back the way a recovering runner reads it; every
//! difference is either fixed in the fake or listed as known, with its reason.
//! And two upstream failures (`turncut fidelity --moments upstream` plays
//! all nine): the model API refuses the turn's first request with a context
//! overflow, then with an expired credential, on the real server and on the
//! fake, compared the same way.
//!
//! OpenCode is looked up on `PATH` (only at the pinned version), then in
//! `<workspace>/target/npm`; with `TURNCUT_INSTALL_REAL=1` and `npm`
//! present it is installed there first. Without it the tests print
//! `skipped: …` and pass. `TURNCUT_OPENCODE_PROBE_RUNS=N` plays each crash
//! moment N times on the real server and prints how often each reading came
//! up. Every wait has a deadline; nothing sleeps to synchronize.
//!
//! The functions up to the first test are the reusable part (lookup,
//! install, configuration, command line): plain functions meant to move into
//! library code as they are.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::fidelity::{self, opencode::Moment};
use harness::supervisor::GroupChild;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use wire::journal::EntryKind;

/// The real OpenCode of the `runner-opencode-real` profile, with its home
/// (`harness::real`: the one command line the cells run it with).
fn product(opencode: &Path, home: &Path) -> harness::real::Product {
    harness::real::Product {
        real: wire::profiles::real("runner-opencode-real").expect("the opencode real profile"),
        bin: opencode.to_owned(),
        home: home.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

/// How long a whole task may take (OpenCode answers its first prompt in
/// about 2 s here).
const TASK_WAIT: Duration = Duration::from_secs(120);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// The opencode binary, or `None` after printing why the test skips.
fn opencode_or_skip() -> Option<PathBuf> {
    let real = wire::profiles::real("runner-opencode-real").expect("the opencode real profile");
    harness::real::locate_or_install(real, &harness::report::console(Default::default()))
        .map_err(|reason| common::skip("real", &reason))
        .ok()
}

/// The fake model API playing `script` (the built-in one when `None`); its
/// state, journal and ledger in `dir`. Killed (as a process group) on drop.
fn start_model_api(dir: &Path, script: Option<&Path>, extra: &[&str]) -> (GroupChild, String) {
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--port", "0"])
        .arg("--state-dir")
        .arg(dir.join("model"))
        .arg("--journal")
        .arg(dir.join("journal.jsonl"))
        .arg("--ledger")
        .arg(dir.join("ledger.jsonl"));
    if let Some(s) = script {
        cmd.arg("--script").arg(s);
    }
    cmd.args(extra);
    let (child, line) = spawn_listening(&mut cmd, "model api listening on ");
    (child, line)
}

/// Spawns `cmd` in its own process group with stdin piped (it serves until
/// stdin closes) and returns it with the URL its listening line names.
fn spawn_listening(cmd: &mut Command, marker: &str) -> (GroupChild, String) {
    cmd.stdin(Stdio::piped());
    harness::real::spawn_listening(cmd, marker, TASK_WAIT).expect("a listening line")
}

/// The process groups of the providers a runner spawned for `task` (from its
/// run log), SIGKILLed on drop: runnerd leaves a provider in a group of its
/// own, and `opencode serve`, unlike a stdio provider, does not end when the
/// runner's pipe closes.
struct ProviderGroups(Vec<i32>);

impl ProviderGroups {
    fn of(events: &[Value]) -> ProviderGroups {
        ProviderGroups(
            events
                .iter()
                .filter(|e| e["kind"] == "provider.spawned")
                .filter_map(|e| e.pointer("/data/pid").and_then(Value::as_i64))
                .map(|p| p as i32)
                .collect(),
        )
    }
}

impl Drop for ProviderGroups {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn the_real_opencode_serve_completes_a_task_through_the_runner() {
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let home = dir.path().join("opencode-home");
    std::fs::create_dir_all(&ws).unwrap();
    let (_model, model_url) = start_model_api(dir.path(), None, &[]);
    // The key through the runner's one-shot FIFO, as in a cell.
    let product = product(&opencode, &home);
    let runner = common::start_real_runner(
        dir.path(),
        &product,
        ("runner-opencode-real", "opencode"),
        &model_url,
        "real-opencode",
    );
    let client = runner.client();

    let started = Instant::now();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", "runner-opencode-real", &ws)
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let settled = client.wait_settled("t1", TASK_WAIT);
    let events = client.events("t1", 0).unwrap();
    let _providers = ProviderGroups::of(&events);
    let stderr_log = dir.path().join("runnerd.stderr");
    let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    let task = settled.unwrap_or_else(|e| panic!("{e}\n{}", log()));
    eprintln!(
        "real opencode task settled in {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(task["state"], "completed", "{task}\n{}", log());
    assert!(
        task.get("cause").is_none_or(Value::is_null),
        "no cause: {task}"
    );

    // The runner answered OpenCode's bash permission and saw the turn through.
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in [
        "turn.intent",
        "turn.accepted",
        "provider_request",
        "turn.finished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in the run log: {kinds:?}");
    }
    let request = events
        .iter()
        .find(|e| e["kind"] == "provider_request")
        .unwrap();
    assert!(
        request.to_string().contains("permission.asked"),
        "{request}"
    );

    // The effect ran exactly once, and its shell never saw the key.
    let ledger = wire::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].key, "write-hello");
    assert!(
        !ledger[0].saw_secret,
        "the approved command saw the provider credential in its environment"
    );

    // The model saw the tool's output, and answered one turn (no title
    // request: the title agent is disabled).
    let journal = wire::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    let requests: Vec<&Value> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::In)
        .map(|e| &e.data)
        .collect();
    assert_eq!(requests.len(), 2, "model requests: {requests:?}");
    let offered: Vec<&str> = requests[0]
        .pointer("/body/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(offered.contains(&"bash"), "offered tools: {offered:?}");
    let last_input = requests[1]
        .pointer("/body/input")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        last_input
            .iter()
            .any(|i| i["type"] == "function_call_output"),
        "the last request carries the tool output"
    );
    let turns = wire::stores::model_api::recorded_turns(&dir.path().join("model"));
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "completed");
}

// ---------------------------------------------------------------------------
// Crash moments: `turncut fidelity`'s OpenCode differential
// (`harness::fidelity::opencode`): the same turn on the real OpenCode and on
// the fake, the server's process group SIGKILLed at a named moment,
// restarted on the same data and read back the way a recovering runner
// reads it.
// ---------------------------------------------------------------------------

/// How many times each moment is played on the real server
/// (`TURNCUT_OPENCODE_PROBE_RUNS`, 1 by default).
fn probe_runs() -> u32 {
    std::env::var("TURNCUT_OPENCODE_PROBE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The fake alone reaches each moment and reads back a recovered server
/// (without the real product this is all that runs).
#[test]
fn the_fake_opencode_is_cut_at_each_crash_moment() {
    let dir = tempfile::tempdir().unwrap();
    for moment in Moment::ALL {
        let seen =
            fidelity::opencode::fake_at(exe(), moment, &dir.path().join(format!("{moment:?}")))
                .unwrap_or_else(|e| panic!("{moment:?}: {e}"));
        println!("{moment:?}: the fake: {seen:?}");
        assert_eq!(seen.session, 200, "{moment:?}: {seen:?}");
        let ran = matches!(moment, Moment::CommandRunning | Moment::AnswerStreaming);
        assert_eq!(seen.effects, usize::from(ran), "{moment:?}: {seen:?}");
    }
}

/// At each moment the fake reads back what the real server does, or the
/// difference is a listed one.
#[test]
fn at_each_crash_moment_the_fake_opencode_recovers_like_the_real_one() {
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let crash = fidelity::Moments::Crash;
    let rows = fidelity::opencode::rows(exe(), &opencode, dir.path(), probe_runs(), crash).unwrap();
    println!("{}", fidelity::render(&rows));
    let differs: Vec<_> = rows.iter().filter(|r| r.differs()).collect();
    assert!(differs.is_empty(), "{differs:#?}");
}

/// A context overflow (the compaction that follows, the error stored on no
/// message, read by the runner's driver as a context overflow) and an
/// expired credential (OpenCode's `APIError` with the model API's headers),
/// on the real server and the fake: no unexplained difference. About 25 s
/// (35 s on a loaded machine).
#[test]
fn at_an_upstream_failure_the_fake_opencode_reacts_like_the_real_one() {
    use wire::upstream::UpstreamFault;
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let faults = [UpstreamFault::ContextOverflow, UpstreamFault::AuthExpired];
    let started = Instant::now();
    let rows = fidelity::opencode::upstream_rows(exe(), &opencode, dir.path(), 1, &faults).unwrap();
    let table = fidelity::render(&rows);
    println!("{table}in {} ms", started.elapsed().as_millis());
    let overflow = rows
        .iter()
        .find(|r| r.field == "turn error (driver)" && r.moment.contains("context-overflow"))
        .expect("the overflow's driver reading");
    assert_eq!(
        overflow.real, "ContextOverflowError (stored on no message)",
        "{table}"
    );
    assert!(!rows.iter().any(fidelity::Row::differs), "{table}");
}
