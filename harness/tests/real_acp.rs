//! The real ACP agent of `runner-acpx-opencode-real`: `opencode acp` (npm
//! `opencode-ai`, the pinned version of `opencode serve`) driven by `turncut
//! runnerd` through its ACP driver, its model `turncut fake-provider
//! model-api` on loopback: a whole task offline, the `bash` permission
//! answered by the runner, the effect in the ledger once, the key served
//! through the runner's FIFO twice (the agent reads it at start and at
//! `session/new`) and never seen by the tool. Then `turncut fidelity`'s ACP
//! differential against `fake-provider acp --like opencode` at its four
//! crash moments.
//!
//! `opencode` is looked up on `PATH` (at the pinned version), then in
//! `<workspace>/target/npm`; with `TURNCUT_INSTALL_REAL=1` it is installed
//! first. Without it the tests print `skipped: …` and pass. Every wait has a
//! deadline; nothing sleeps to synchronize.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::fidelity;
use harness::supervisor::GroupChild;
use serde_json::Value;

/// How long a whole task may take (`opencode acp` starts in 2-10 s here).
const TASK_WAIT: Duration = Duration::from_secs(180);

const WAIT: Duration = Duration::from_secs(30);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn real() -> &'static wire::profiles::Real {
    wire::profiles::real("runner-acpx-opencode-real").expect("the ACP real profile")
}

/// The opencode binary, or `None` after printing why the test skips.
fn opencode_or_skip() -> Option<PathBuf> {
    harness::real::locate_or_install(real(), &harness::report::console(Default::default()))
        .map_err(|reason| common::skip("real", &reason))
        .ok()
}

/// The fake model API, its state, journal and ledger in `dir`.
fn start_model_api(dir: &Path) -> (GroupChild, String) {
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--port", "0", "--state-dir"])
        .arg(dir.join("model"))
        .arg("--journal")
        .arg(dir.join("journal.jsonl"))
        .arg("--ledger")
        .arg(dir.join("ledger.jsonl"))
        .stdin(Stdio::piped());
    harness::real::spawn_listening(&mut cmd, "model api listening on ", WAIT)
        .expect("a listening line")
}

#[test]
fn the_real_opencode_acp_completes_a_task_through_the_runner() {
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (_model, model_url) = start_model_api(dir.path());
    let product = harness::real::Product {
        real: real(),
        bin: opencode,
        home: dir.path().join("opencode-home"),
    };
    let runner = common::start_real_runner(
        dir.path(),
        &product,
        ("runner-acpx-opencode-real", "acp"),
        &model_url,
        "real-acp",
    );
    let client = runner.client();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", real().name, &ws)
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let stderr_log = dir.path().join("runnerd.stderr");
    let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    let task = client
        .wait_settled("t1", TASK_WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", log()));
    assert_eq!(task["state"], "completed", "{task}\n{}", log());
    let events = client.events("t1", 0).unwrap();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in [
        "turn.intent",
        "turn.accepted",
        "provider_request",
        "turn.finished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in the run log: {kinds:?}");
    }
    // The turn was named by the agent's answer (it echoes no user message).
    let accepted = events
        .iter()
        .find(|e| e["kind"] == "turn.accepted")
        .unwrap();
    let turn = accepted
        .pointer("/data/provider_turn_id")
        .and_then(Value::as_str);
    assert!(turn.is_some_and(|t| t.starts_with("msg_")), "{accepted}");
    let ledger = wire::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(
        !ledger[0].saw_secret,
        "the tool saw the provider credential"
    );
    // Only the agent itself read the key's FIFO (a stranger is logged).
    assert!(!log().contains("other than the provider"), "{}", log());
}

/// The crash-semantics differential of `turncut fidelity` on the ACP
/// profile: at each moment the fake ACP agent (`--like opencode`) reads
/// back what the real `opencode acp` does.
#[test]
fn at_each_crash_moment_the_fake_acp_agent_recovers_like_opencode_acp() {
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rows = fidelity::acp::rows(
        exe(),
        real(),
        &opencode,
        dir.path(),
        1,
        fidelity::Moments::Crash,
    )
    .unwrap();
    println!("{}", fidelity::render(&rows));
    let differs: Vec<_> = rows.iter().filter(|r| r.differs()).collect();
    assert!(differs.is_empty(), "{differs:#?}");
}

/// The runner decision the real agent once took apart from its fake: the
/// agent stored the prompt and asked the model, the runner and the agent
/// were killed before the runner read any output. The agent keeps message
/// ids of its own, so the runner used to find no turn by its client id and
/// send the prompt again (the model saw it twice: `no-replay.turn`, 8 of
/// 40 sampled one-cut cells). It now finds the turn by its text and fails
/// closed; the follow-up is refused and the Retry completes, as on the
/// fake (`cut-turn-start-retry`, which runs on both; the fake's side is
/// `tests/runnerd/acp.rs`).
#[test]
fn a_prompt_the_real_agent_stored_before_any_output_is_not_sent_again() {
    if opencode_or_skip().is_none() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(exe())
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env_remove("GITHUB_STEP_SUMMARY")
        .args([
            "run",
            "restart-chaos.runner-acpx-opencode-real.local.cut-turn-start-retry",
            "--cut",
            "model.turn.recorded#1",
            "--fault",
            "kill-both",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let wave = harness::report::read_wave(&out.path().join("wave.json")).unwrap();
    let [cell] = &wave.cells[..] else {
        panic!("one cell: {stderr}");
    };
    assert_eq!(
        cell.verdict,
        harness::model::Verdict::Pass,
        "{}",
        harness::report::cell_line(cell)
    );
    assert!(
        cell.outcome.path.starts_with("failed ambiguous_turn_start"),
        "{}",
        cell.outcome.path
    );
    assert!(output.status.success(), "{stderr}");
}
