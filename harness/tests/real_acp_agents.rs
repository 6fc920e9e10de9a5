//! The two real ACP agents the seed platform drives, offline, as turncut
//! profiles: `runner-acpx-codex-real` (`codex-acp`, npm
//! `@zed-industries/codex-acp`, its model the fake Responses API) and
//! `runner-acpx-claude-real` (`claude-agent-acp`, npm
//! `@zed-industries/claude-agent-acp`: the Claude Agent SDK's Claude Code,
//! its model the fake Messages API). Each completes a whole task through
//! `turncut runnerd`'s ACP driver, the permission answered by the runner,
//! the effect in the ledger once and the key never seen by the tool (each
//! agent's crash semantics are `turncut fidelity`'s and the sampled waves',
//! `docs/real-providers.md`). Then a few of `turncut fidelity --moments
//! upstream`'s faults on each: the fake ACP agent fails the prompt as the
//! real agent does.
//!
//! Each agent is looked up on `PATH` (at the pinned version), then in
//! `<workspace>/target/npm`; with `TURNCUT_INSTALL_REAL=1` it is installed
//! there first (`.ci/run` sets it when npm is here: ~5 s each). Without it
//! the tests print `skipped: …` and pass, unless `TURNCUT_REQUIRE` lists
//! `real`. Every wait has a deadline; nothing sleeps to synchronize.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::supervisor::GroupChild;

/// How long a whole task may take (Claude Code starts in ~1 s per session
/// on an idle machine; a loaded one takes several times that).
const TASK_WAIT: Duration = Duration::from_secs(180);

const WAIT: Duration = Duration::from_secs(30);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn real(name: &str) -> &'static wire::profiles::Real {
    wire::profiles::real(name).expect("a real ACP profile")
}

/// The agent's program, or `None` after printing why the test skips.
fn agent_or_skip(name: &str) -> Option<PathBuf> {
    harness::real::locate_or_install(real(name), &harness::report::console(Default::default()))
        .map_err(|reason| common::skip("real", &reason))
        .ok()
}

/// The fake model API (both routes), its state, journal and ledger in `dir`.
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

/// One task on the agent of profile `name` through runnerd: it completes,
/// its one approved command landed its effect once, unseen by the key.
fn a_task_completes(name: &str) {
    let Some(bin) = agent_or_skip(name) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let (_model, model_url) = start_model_api(dir.path());
    let product = harness::real::Product {
        real: real(name),
        bin,
        home: dir.path().join("agent-home"),
    };
    let runner = common::start_real_runner(
        dir.path(),
        &product,
        (name, "acp"),
        &model_url,
        "real-acp-agent",
    );
    let client = runner.client();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", name, &ws)
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
    let ledger = wire::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(
        !ledger[0].saw_secret,
        "the tool saw the provider credential: {ledger:?}"
    );
}

#[test]
fn the_real_codex_acp_completes_a_task_through_the_runner() {
    a_task_completes("runner-acpx-codex-real");
}

#[test]
fn the_real_claude_agent_acp_completes_a_task_through_the_runner() {
    a_task_completes("runner-acpx-claude-real");
}

/// `turncut fidelity --moments upstream` on a few of the nine faults (the
/// whole table is `turncut fidelity`'s: Claude Code retries an expired
/// credential for three minutes): the fake ACP agent fails the prompt as
/// the real agent of profile `name` does, every field the same or a listed
/// variant.
fn the_fake_fails_upstream_like(name: &str, faults: &[wire::upstream::UpstreamFault]) {
    let Some(bin) = agent_or_skip(name) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rows =
        harness::fidelity::acp::upstream_rows(exe(), real(name), &bin, dir.path(), 1, faults)
            .unwrap();
    let table = harness::fidelity::render(&rows);
    println!("{table}");
    for fault in faults {
        let moment = format!("Upstream {}", fault.as_str());
        assert!(rows.iter().any(|r| r.moment == moment), "{moment}\n{table}");
    }
    assert!(!rows.iter().any(harness::fidelity::Row::differs), "{table}");
}

#[test]
fn the_fake_acp_agent_fails_upstream_like_codex_acp() {
    use wire::upstream::UpstreamFault::{ContextOverflow, RateLimit, StreamTruncated};
    the_fake_fails_upstream_like(
        "runner-acpx-codex-real",
        &[RateLimit, ContextOverflow, StreamTruncated],
    );
}

#[test]
fn the_fake_acp_agent_fails_upstream_like_claude_agent_acp() {
    use wire::upstream::UpstreamFault::{ContextOverflow, StreamCut};
    the_fake_fails_upstream_like("runner-acpx-claude-real", &[ContextOverflow, StreamCut]);
}
