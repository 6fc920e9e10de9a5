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
        common::skip(
            "seeded",
            "no seeded runnerd (cargo build -p runner --features seeded-bugs --bin runnerd, then TURNCUT_SEEDED_RUNNERD=its path; .ci/run does it)",
        );
    }
    found
}

/// Runs one cell (`cell` is `--cut P --fault F` or `--schedule S`) with
/// `runner` (and the seeded `bug`); the wave report's one cell.
fn run_cell(id: &str, cell: &[&str], runner: Option<(&PathBuf, &str)>) -> Value {
    let out = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(exe());
    // Kept, so that its evidence is in the report for a `missed` check
    // (`caught_where`); the kept directory is removed below.
    cmd.args(["run", id])
        .args(cell)
        .arg("--keep")
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
    let mut c = cells[0].clone();
    let cell_id = c["spec"]["cell_id"].as_str().unwrap_or_default().to_owned();
    let evidence = out
        .path()
        .join("cells")
        .join(&cell_id)
        .join("evidence.json");
    if let Ok(bytes) = std::fs::read(&evidence) {
        c["evidence"] = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    }
    // `kept t001: REPORT (its directory: DIR; turncut judge REPORT)`.
    let said = [run.stdout.as_slice(), run.stderr.as_slice()].concat();
    for line in String::from_utf8_lossy(&said).lines() {
        if let Some(dir) = line
            .strip_prefix("kept ")
            .and_then(|l| l.split_once("(its directory: "))
            .and_then(|(_, rest)| rest.split(';').next())
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
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
    caught_where(bug, id, cell, oracle, needle, |_| None);
}

/// How many times [`caught_where`] runs a cell whose precondition the
/// machine's timing decides.
const PRECONDITION_ATTEMPTS: usize = 5;

/// [`caught`] for a cell whose path depends on timing: `missed` says why a
/// run did not reach the place the bug lives (`None` when it did); such a
/// run is printed, counted and run again, up to [`PRECONDITION_ATTEMPTS`].
fn caught_where(
    bug: &str,
    id: &str,
    cell: &[&str],
    oracle: &str,
    needle: &str,
    missed: impl Fn(&Value) -> Option<String>,
) {
    let Some(bin) = seeded_runnerd() else { return };
    let mut c = run_cell(id, cell, Some((&bin, bug)));
    for attempt in 1..PRECONDITION_ATTEMPTS {
        let Some(why) = missed(&c) else { break };
        eprintln!("{bug}: run {attempt} missed the bug's place ({why}); running it again");
        c = run_cell(id, cell, Some((&bin, bug)));
    }
    if let Some(why) = missed(&c) {
        panic!("{bug}: {PRECONDITION_ATTEMPTS} runs missed the bug's place; the last: {why}");
    }
    let o = c["oracles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["oracle"] == oracle)
        .unwrap_or_else(|| panic!("no oracle {oracle}: {c}"));
    assert_eq!(o["verdict"], "fail", "{bug}: {oracle} must fail: {c:#}");
    let msg = o["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{bug}: {oracle}: {msg}");
    // As `harness::wave::caught` counts a catch: a harness error is none,
    // but a cell whose deadline the runner let pass (a stranded task,
    // which liveness judges) stopped by the runner's doing.
    assert!(
        c["error"].is_null() || c["outcome"]["deadline_passed"] == true,
        "a harness error is no catch: {c}"
    );
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
        "the contract allows 409 prior_owner_fence_refused",
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

/// Found by the recovery cuts of stage 2: a Retry's run takes the message
/// it re-sends off the queue with its turn intent, and its acceptance write
/// fails; the run settles failed with nothing sent, and the message, queued
/// nowhere and answered by no one, must still be named as waiting.
#[test]
fn row_4b_a_message_whose_retry_turn_never_started_is_named() {
    caught(
        "strand-silently",
        "restart-chaos.runner-native-openai.local.follow-up-race",
        &[
            "--schedule",
            "runner.write.provider_spawn_intent#1/fail-write+runner.write.turn_accepted#1/fail-write",
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
fn row_11_a_429_is_closed_as_a_rate_limit_not_a_protocol_error() {
    caught(
        "rate-limit-unrecoverable",
        "restart-chaos.runner-native-openai.local.upstream-faults",
        &[
            "--cut",
            "model.responses.received#1",
            "--fault",
            "rate-limit",
        ],
        "upstream",
        "the contract's cause is upstream_rate_limited",
    );
}

#[test]
fn row_11b_a_rate_limited_request_waits_out_retry_after() {
    caught(
        "ignore-retry-after",
        "restart-chaos.runner-native-openai.local.upstream-faults",
        &[
            "--cut",
            "model.responses.received#1",
            "--fault",
            "rate-limit",
        ],
        "upstream",
        "Retry-After",
    );
}

#[test]
fn row_12_a_broken_stream_after_a_tool_call_does_not_run_the_tool_again() {
    caught(
        "retry-turn-after-stream-cut",
        "restart-chaos.runner-native-openai.local.upstream-faults",
        &[
            "--cut",
            "model.response_created.sent#2",
            "--fault",
            "stream-cut",
        ],
        "no-replay.effect",
        "",
    );
}

#[test]
fn row_13_an_expired_credential_is_not_retried_by_the_runner() {
    caught(
        "retry-unauthorized",
        "restart-chaos.runner-native-openai.local.upstream-faults",
        &[
            "--cut",
            "model.responses.received#1",
            "--fault",
            "auth-expired",
        ],
        "upstream",
        "by itself",
    );
}

#[test]
fn row_14_a_lookup_answered_with_an_error_is_not_read_as_absent() {
    caught(
        "lookup-error-answer-as-absent",
        "restart-chaos.runner-codex.local.upstream-faults",
        &[
            "--schedule",
            "runner.turn_accepted.persisted#1/kill-runner+codex.thread_read.received#1/error-answer",
        ],
        "no-replay.turn",
        "started 2 primary turns",
    );
}

#[test]
fn row_19_a_turn_the_provider_failed_upstream_is_not_continued_after_a_restart() {
    caught(
        "continue-upstream-failure",
        "restart-chaos.runner-codex.local.upstream-faults",
        &[
            "--schedule",
            "codex.model.requested#1/auth-expired+runner.write.turn_ended#1/kill-runner",
        ],
        "upstream",
        "started a turn again by itself",
    );
}

/// OpenCode 1.18.33 stores a context overflow on no message: the answer is
/// closed with neither finish nor error, then the session compacted
/// (measured by `turncut fidelity --moments upstream`; the fake OpenCode
/// does the same). A runner killed before it saw the turn end reads the
/// closed answer back as the overflow after its restart, not as a turn the
/// provider completed, to adopt (`upstream` excuses a run whose schedule
/// went on after the fault; `contract` holds the adoption against the
/// fake's store, which reads the closed answer as not completed).
#[test]
fn row_21_an_overflow_opencode_stored_on_no_message_is_not_adopted_after_a_restart() {
    caught(
        "overflow-read-completed",
        "restart-chaos.runner-opencode.local.upstream-faults",
        &[
            "--schedule",
            "opencode.model.requested#1/context-overflow+runner.write.turn_ended#1/kill-runner",
        ],
        "contract",
        "but the provider did not complete it",
    );
}

/// A Retry the controller sent while the run settled, cut by a restart
/// before its answer: the cell sends it again to the restarted runner (as
/// the contract asks of a controller), and the answer must be its run.
/// Before the cell re-sent such a request, this cell was `unknown`.
#[test]
fn row_20_a_retry_sent_again_after_a_restart_answers_its_run() {
    caught(
        "resent-retry-refused",
        "restart-chaos.runner-codex.local.upstream-faults",
        &[
            "--schedule",
            "codex.model.requested#1/auth-expired+runner.run_settled.persisted#1/retry+runner.retry_admitted.persisted#1/kill-runner",
        ],
        "retry.works",
        "answered 409 when sent again",
    );
}

/// Found by `turncut explore --seed 32 --only runner-codex` in runnerd
/// itself: the provider lost an accepted turn's message, the runner sent it
/// again, and was killed before that send's acceptance was durable.
#[test]
fn row_5b_a_re_sent_turn_cut_before_its_acceptance_is_not_sent_a_third_time() {
    // The bug lives where the re-send started before the runner was
    // stopped: the provider recorded its turn with the user message in it.
    // The fake Codex, as the real one, records a turn, answers `turn/start`
    // and only then records the user message; a runner stopped in between
    // leaves a turn that delivered nothing (no user message: no model saw
    // it), and a third send is then the contract's. Fresh-clone CI runs had
    // such cells, once before the turn was recorded and once after it.
    caught_where(
        "absent-keeps-acceptance",
        "everyday-workflows.runner-codex.local.file-change",
        &[
            "--schedule",
            "codex.turn_start.responded#1/kill-provider+runner.write.turn_accepted#2/kill-runner",
        ],
        "no-replay.turn",
        "started 2 primary turns",
        |c| {
            (started_before_second_event(c, "m1") == 0).then(|| {
                "the re-send had not started at the provider (no turn with its user message) when the runner was stopped".into()
            })
        },
    );
}

/// The provider turns of `message` recorded (journal `turn.recorded`)
/// between the cell's first event and its second that the provider's
/// store holds with the message's user message in them (a turn without
/// one delivered nothing): the re-send, started before the runner was
/// stopped.
fn started_before_second_event(c: &Value, message: &str) -> usize {
    let ev = &c["evidence"];
    let started = ev["started_ms"].as_u64().unwrap_or_default();
    let at = |what: &str, event: u64| {
        ev["actions"].as_array().and_then(|actions| {
            actions
                .iter()
                .find(|a| a["what"] == what && a["detail"]["event"] == event)
                .and_then(|a| a["at_ms"].as_u64())
        })
    };
    let (Some(first), Some(second)) = (at("cut.reached", 1), at("event.reached", 2)) else {
        return 0;
    };
    // After the first event's hit (the first send's record is at or before
    // it), up to the second's.
    let window = started + first + 1..=started + second;
    let recorded: Vec<&Value> = ev["journal"]
        .as_array()
        .map(|j| {
            j.iter()
                .filter(|e| e["fact"] == "turn.recorded" && e["data"]["authorized_by"] == message)
                .filter(|e| e["ts_ms"].as_u64().is_some_and(|t| window.contains(&t)))
                .map(|e| &e["data"]["turn"])
                .collect()
        })
        .unwrap_or_default();
    ev["provider_turns"]
        .as_array()
        .map(|turns| {
            turns
                .iter()
                .filter(|t| t["client_id"] == message && recorded.contains(&&t["turn"]))
                .count()
        })
        .unwrap_or_default()
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

/// Why a power-cut cell cannot run here (no FUSE), said; `None` when it can.
fn no_fuse() -> Option<String> {
    let why = lazyfs::unavailable()?;
    common::skip("fuse", &format!("a power-cut cell needs FUSE: {why}"));
    Some(why)
}

#[test]
fn row_8_a_workspace_file_the_run_log_holds_as_written_survives_a_power_cut() {
    if no_fuse().is_some() {
        return;
    }
    caught(
        "atomic-write-without-fsync",
        "restart-chaos.runner-acpx-claude.local.power-cut",
        &[
            "--cut",
            "runner.tool_outcome.persisted#1",
            "--fault",
            "power-cut",
        ],
        "durable.effect",
        "holds 0 bytes no write asked for",
    );
}

#[test]
fn row_8_native_the_write_tool_s_file_survives_a_power_cut_too() {
    if no_fuse().is_some() {
        return;
    }
    caught(
        "rename-without-dir-sync",
        "restart-chaos.runner-native-openai.local.power-cut",
        &[
            "--cut",
            "runner.tool_outcome.persisted#1",
            "--fault",
            "power-cut",
        ],
        "durable.effect",
        "the file is not in the workspace after the power cut",
    );
}

/// Row 9 has its own check: the lost task leaves the cell's steps waiting
/// for a task the runner no longer knows, so the cell also ends with the
/// deadline passed; the catch is `no-loss`'s, from the runner's own 404.
/// Found in the power-cut snapshot's `re-sent` entries: the provider lost
/// its unsynced thread with the turn's record, the runner (which holds the
/// turn's items) read "no record" as "no model saw it", opened a fresh
/// conversation and sent the message again: write-notes ran twice.
#[test]
fn row_10_a_turn_whose_output_the_runner_holds_is_not_sent_again_after_a_power_cut() {
    if no_fuse().is_some() {
        return;
    }
    // The power cut takes the provider's thread only when the provider had
    // not synced it yet; a run where it kept it continues the turn, and the
    // bug (what the runner does with a lost thread) is not reached.
    caught_where(
        "resend-lost-output",
        "restart-chaos.runner-codex.local.power-cut",
        &["--cut", "runner.item.persisted#3", "--fault", "power-cut"],
        "no-replay.effect",
        "in 2 conversations",
        |c| {
            let path = c["outcome"]["path"].as_str().unwrap_or_default();
            path.starts_with("continued")
                .then(|| format!("the provider kept its thread: {path}"))
        },
    );
}

#[test]
fn row_9_a_store_that_commits_without_syncing_loses_the_task_to_a_power_cut() {
    if no_fuse().is_some() {
        return;
    }
    let Some(bin) = seeded_runnerd() else { return };
    let id = "restart-chaos.runner-codex.local.power-cut";
    let cell = [
        "--cut",
        "runner.turn_accepted.persisted#1",
        "--fault",
        "power-cut",
    ];
    let c = run_cell(id, &cell, Some((&bin, "wal-synchronous-normal")));
    let no_loss = c["oracles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["oracle"] == "no-loss")
        .unwrap_or_else(|| panic!("no no-loss: {c}"));
    assert_eq!(no_loss["verdict"], "fail", "{c:#}");
    let msg = no_loss["message"].as_str().unwrap_or_default();
    assert!(msg.contains("the task is lost"), "{msg}");
    assert!(
        c["error"].is_null() || c["error"] == "the deadline passed",
        "only the wait on the lost task may end the cell early: {c}"
    );
    let reference = run_cell(id, &cell, None);
    assert_eq!(reference["verdict"], "pass", "{reference:#}");
}

/// Issue 47: a failed read of the turns inside a recovery, read as "no
/// turn": the restarted runner's second snapshot (the first starts a
/// provider) is where it decides what to do with the cut turn.
#[test]
fn row_15_a_failed_read_inside_a_recovery_is_not_read_as_no_turn() {
    caught(
        "failed-read-as-no-turn",
        "restart-chaos.runner-codex.local.read-faults",
        &[
            "--schedule",
            "runner.turn_accepted.persisted#1/kill-runner+runner.read.turns#2/fail-read",
        ],
        "contract",
        "completed but the provider never completed a turn",
    );
}

/// Issue 47: an actor that ends on a failed read leaves its task running
/// with no one to run it.
#[test]
fn row_16_a_failed_read_does_not_end_the_task_s_actor() {
    caught(
        "actor-returns-on-failed-read",
        "restart-chaos.runner-codex.local.read-faults",
        &["--cut", "runner.read.task#3", "--fault", "corrupt-read"],
        "liveness",
        "still running",
    );
}

/// Issue 42: a Retry that never ran, delivered again after a later Retry
/// re-sent the same prompt. A generated program of the default wave
/// (`--seed 22`; the generator that found it first drew it at `--seed 1`,
/// before programs ran several tasks), drawn again from its id (no file).
#[test]
fn row_17_a_retry_superseded_by_a_later_one_is_not_delivered() {
    caught(
        "deliver-stale-retry",
        "generated.runner-acpx-claude.local.seed22-p0",
        &[
            "--schedule",
            "runner.write.turn_accepted#1/disk-full+runner.write.turn_intent#1/fail-write",
        ],
        "no-replay.turn",
        "the same message ran 2 times",
    );
}

/// Issue 42: after a restart only the first of two unsettled tasks is
/// resumed; the second stays `running` with no actor. Only a cell of
/// several tasks reaches it (with one task, the first is every task).
#[test]
fn row_18_every_task_a_restart_cut_is_resumed() {
    // The bug lives where the runner is killed with both tasks unsettled:
    // the first task may have completed before the second acceptance.
    caught_where(
        "resume-first-task-only",
        "everyday-workflows.runner-codex.local.two-tasks",
        &[
            "--cut",
            "runner.turn_accepted.persisted#2",
            "--fault",
            "kill-runner",
        ],
        "liveness",
        "still running",
        |c| {
            // Settled by the kill, not by the cut: the runner is held at
            // the cut only in the thread that hit it, and the other task
            // may settle before the kill lands (seen in CI).
            let ev = &c["evidence"];
            let killed_ms = ev["actions"].as_array().and_then(|a| {
                a.iter()
                    .find(|a| a["what"] == "fault.kill-runner")
                    .and_then(|a| a["at_ms"].as_u64())
            });
            let Some(killed) = killed_ms.and_then(|k| Some(ev["started_ms"].as_u64()? + k)) else {
                return Some("the runner was not killed".into());
            };
            let lanes = [&ev["events"], &ev["other_tasks"][0]["events"]];
            let settled = lanes.iter().filter(|evs| {
                evs.as_array().is_none_or(|evs| {
                    evs.iter().any(|e| {
                        e["kind"] == "run.settled"
                            && e["ts_ms"].as_u64().is_none_or(|t| t <= killed)
                    })
                })
            });
            (settled.count() > 0)
                .then(|| "a task had settled (or was not read) when the runner was killed".into())
        },
    );
}

/// A runner whose idle timer is far shorter than it was told
/// (`idle-timeout-in-micros`) fails with `provider_unresponsive` on a
/// provider nothing hung: timing's shape. The timing reruns (idle ×4,
/// twice) would make it pass once 8 ms is enough; the runner says it gave
/// up after 0 ms of the 500 it was given, so the cell fails at once, with
/// no rerun, and the clean run's failure is a failed cell, not a planning
/// abort.
#[test]
fn a_timing_shaped_bug_is_not_hidden_by_timing_reruns() {
    let Some(bin) = seeded_runnerd() else { return };
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(exe())
        .args(["run", "everyday-workflows.runner-codex.local.single-task"])
        .args(["--max-fail", "1", "--jobs", "1", "--out"])
        .arg(out.path())
        .arg("--runner-cmd")
        .arg(&bin)
        .arg("--runner-arg=--seeded-bug=idle-timeout-in-micros")
        .output()
        .expect("turncut runs");
    assert_eq!(
        run.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let wave: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("wave.json")).unwrap()).unwrap();
    let failed: Vec<&Value> = wave["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .collect();
    assert!(!failed.is_empty(), "{wave:#}");
    for c in failed {
        let reruns = c["reruns"].as_array().map_or(0, Vec::len);
        assert_eq!(
            reruns, 0,
            "no timing rerun for a timer the runner cut short: {c:#}"
        );
        // As `harness::wave::caught` counts a catch: a harness error is none,
        // but a cell whose deadline the runner let pass (a stranded task,
        // which liveness judges) stopped by the runner's doing.
        assert!(
            c["error"].is_null() || c["outcome"]["deadline_passed"] == true,
            "a harness error is no catch: {c}"
        );
    }
}

/// No false alarm from content: two follow-ups injected by one schedule are
/// two messages, each with its own text. They once carried one text, and
/// `no-replay.turn`, which judges content under any id, read the Retry's
/// re-send of the first and the second as one message run twice (the
/// control of `turncut mutants` failed here on the reference runner).
#[test]
fn two_injected_follow_ups_are_two_messages_not_one_replayed() {
    let c = run_cell(
        "restart-chaos.runner-acpx-claude.local.storage-faults",
        &[
            "--schedule",
            "runner.acp.session_update.received#2/follow-up+runner.write.turn_accepted#1/fail-write+runner.write.tool_outcome#1/kill-runner+acp.session_update.notified#2/follow-up",
        ],
        None,
    );
    assert_eq!(c["verdict"], "pass", "{c:#}");
    assert_eq!(
        c["outcome"]["events_applied"], 4,
        "every event landed: {c:#}"
    );
}
