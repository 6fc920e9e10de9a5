//! Each runner change the wave once passed is now caught, through real
//! processes: `turncut run` with a runnerd that carries the change (a
//! seeded bug, `docs/seeded-bugs.md`) fails the named oracle at the named
//! cell, and the reference runner passes the same cell.
//!
//! The seeded runnerd is built with `--features seeded-bugs`; `.ci/run`
//! builds it before the tests and names it in `TURNCUT_SEEDED_RUNNERD`.
//! Without it each test prints `skipped: …` and passes, unless
//! `TURNCUT_REQUIRE` lists `seeded` (CI sets it): then a skip fails.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::exe;
use serde_json::Value;

/// The seeded runnerd, or why there is none.
fn seeded_runnerd() -> Option<PathBuf> {
    let from_env = std::env::var_os("TURNCUT_SEEDED_RUNNERD").map(PathBuf::from);
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/seeded/release/runnerd");
    let found = from_env.or(Some(built)).filter(|p| p.is_file());
    if found.is_none() {
        let why = "skipped: no seeded runnerd (cargo build -p runner --features seeded-bugs --bin runnerd, then TURNCUT_SEEDED_RUNNERD=its path; .ci/run does it)";
        let required = std::env::var("TURNCUT_REQUIRE").unwrap_or_default();
        assert!(
            !required.split(',').any(|r| r.trim() == "seeded"),
            "TURNCUT_REQUIRE lists seeded, but {why}"
        );
        println!("{why}");
    }
    found
}

/// Runs one cell (`cell` is `--cut P --fault F` or `--schedule S`) with
/// `runner` (and the seeded `bug`); the wave report's one cell.
fn run_cell(id: &str, cell: &[&str], runner: Option<(&PathBuf, &str)>) -> Value {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(exe());
    cmd.args(["run", id])
        .args(cell)
        .arg("--out")
        .arg(out.path());
    if let Some((bin, bug)) = runner {
        cmd.arg("--runner-cmd")
            .arg(bin)
            .arg(format!("--runner-arg=--seeded-bug={bug}"));
    }
    let run = cmd.output().expect("turncut runs");
    let report = std::fs::read(out.path().join("wave.json")).unwrap_or_else(|e| {
        panic!(
            "no wave.json ({e}); turncut exited {:?}: {}",
            run.status.code(),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let status = run.status;
    let wave: Value = serde_json::from_slice(&report).unwrap();
    let cells = wave["cells"].as_array().expect("cells").clone();
    assert_eq!(cells.len(), 1, "one cell: {wave}");
    let c = cells[0].clone();
    let pass = c["verdict"] == "pass";
    assert_eq!(
        status.success(),
        pass,
        "exit status follows the verdict: {c}"
    );
    c
}

/// The cell fails `oracle` with a message containing `needle` under the
/// seeded `bug`, and passes on the reference runner.
fn caught(bug: &str, id: &str, cell: &[&str], oracle: &str, needle: &str) {
    let Some(bin) = seeded_runnerd() else { return };
    let c = run_cell(id, cell, Some((&bin, bug)));
    let o = c["oracles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["oracle"] == oracle)
        .unwrap_or_else(|| panic!("no oracle {oracle}: {c}"));
    assert_eq!(o["verdict"], "fail", "{bug}: {oracle} must fail: {c:#}");
    let msg = o["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{bug}: {oracle}: {msg}");
    assert!(c["error"].is_null(), "a harness error is no catch: {c}");
    let reference = run_cell(id, cell, None);
    assert_eq!(
        reference["verdict"], "pass",
        "the reference runner passes the same cell: {reference:#}"
    );
}

#[test]
fn row_1_a_retry_that_re_sends_a_queued_prompt_runs_it_twice() {
    caught(
        "retry-resends-queued",
        "restart-chaos.runner-codex.local.storage-faults",
        &[
            "--cut",
            "runner.write.conversation#1",
            "--fault",
            "fail-write",
        ],
        "no-replay.turn",
        "the same message ran 2 times",
    );
}

#[test]
fn row_2_a_follow_up_to_a_failed_task_is_refused() {
    caught(
        "fence-reopens-failed",
        "restart-chaos.runner-acpx-claude.local.cut-turn-start-retry",
        &["--cut", "acp.turn.recorded#1", "--fault", "kill-runner"],
        "fence",
        "the fence must refuse it",
    );
}

#[test]
fn row_2b_acceptance_is_judged_from_the_provider_side() {
    caught(
        "accept-at-turn-end",
        "everyday-workflows.runner-codex.local.single-task",
        &[
            "--cut",
            "runner.approval_answer.persisted#1",
            "--fault",
            "kill-runner",
        ],
        "contract",
        "acted on turn m1's output",
    );
}

#[test]
fn row_3_a_native_turn_answered_before_the_cut_is_not_asked_again() {
    caught(
        "native-reasks-final",
        "everyday-workflows.runner-native-openai.local.single-task",
        &[
            "--cut",
            "runner.model_output.persisted#2",
            "--fault",
            "kill-runner",
        ],
        "contract",
        "recorded its final answer 2 times",
    );
}

#[test]
fn row_4_a_message_left_queued_by_a_failed_run_is_named() {
    caught(
        "strand-silently",
        "everyday-workflows.runner-codex.local.recover-controller",
        &[
            "--cut",
            "runner.approval_intent.persisted#1",
            "--fault",
            "kill-provider",
        ],
        "no-loss",
        "no message.stranded event names it",
    );
}

#[test]
fn row_5_a_lookup_error_inside_a_recovery_is_not_read_as_absent() {
    caught(
        "lookup-error-as-absent",
        "restart-chaos.runner-acpx-claude.local.cut-turn-start-retry",
        // The restarted runner's second session/load is its lookup (the
        // first resumes the session).
        &[
            "--schedule",
            "acp.turn.recorded#1/kill-runner+acp.session_load.received#2/kill-provider",
        ],
        "no-replay.turn",
        "started 2 primary turns",
    );
}

#[test]
fn row_6_a_retry_cut_between_admission_and_current_still_runs() {
    caught(
        "retry-current-in-second-write",
        "restart-chaos.runner-acpx-claude.local.cut-turn-start-retry",
        &[
            "--schedule",
            "acp.turn.recorded#1/kill-runner+runner.retry_admitted.persisted#1/kill-runner",
        ],
        "retry.works",
        "ended running",
    );
}

#[test]
fn row_7_a_retry_does_not_re_send_a_message_answered_by_its_continuation() {
    caught(
        "retry-decides-by-primary-turn",
        "everyday-workflows.runner-codex.local.recover-controller",
        &[
            "--schedule",
            "runner.codex.item_completed.received#3/kill-runner+runner.write.turn_intent#2/fail-write",
        ],
        "retry.works",
        "re-sent m1, whose last turn",
    );
}
