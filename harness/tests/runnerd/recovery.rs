//! The recovery contract's rows: a turn cut at each stage of its life is
//! started once, continued once, adopted, or closed with its cause.

use crate::*;

#[test]
fn intent_only_and_turn_absent_starts_the_turn_once_after_a_restart() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_intent.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.turn_intent.persisted");
    rig.kill_runner();
    drop(held);
    assert_eq!(rig.turn_starts("m1"), 0);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    rig.assert_effects_once();
    assert!(event_kinds(&client, "t1").contains(&"turn.absent_at_provider".to_owned()));
}

/// The seed scenario (background: codex-cut-turn-start-retry): the provider
/// recorded `turn/start` with its user message, but the runner died before
/// persisting the acceptance (held as the `turn/start` response, its third,
/// arrived, while the provider records the user message).
#[test]
fn a_recorded_turn_never_seen_accepted_fails_closed_and_retry_works() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some(
        "runner.codex.response.received#3,codex.user_message.recorded",
    ));
    submit(&client, &rig, "t1", "m1");
    let holds = [rig.hold(), rig.hold()];
    let held = holds
        .iter()
        .find(|h| h.hit.role == "provider")
        .expect("the provider is held");
    let orphan = held.hit.pid;
    rig.kill_runner();
    // The provider is alive, blocked at its cut: an orphan of the dead runner.
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(orphan as i32), None).is_ok());

    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(holds);
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "ambiguous_turn_start");
    assert_eq!(task.pointer("/cause/recoverable"), Some(&json!(false)));
    assert_eq!(rig.turn_starts("m1"), 1, "never replayed");
    assert!(rig.ledger().is_empty(), "never adopted");

    // Old provider first: the orphan was stopped and proven gone before the
    // new provider touched the conversation.
    let events = client.events("t1", 0).unwrap();
    let first = |kind: &str, pred: &dyn Fn(&Value) -> bool| {
        events
            .iter()
            .position(|e| e["kind"] == kind && pred(e))
            .unwrap_or_else(|| panic!("no {kind} event"))
    };
    let stopped = first("provider.stopped", &|e| {
        e.pointer("/data/identity/pid") == Some(&json!(orphan))
    });
    let respawned = first("provider.spawned", &|e| {
        e.pointer("/data/pid") != Some(&json!(orphan))
    });
    assert!(
        stopped < respawned,
        "the orphan is stopped before a new provider starts"
    );
    assert!(
        dead(orphan),
        "the orphan is gone (or a zombie awaiting its reaper)"
    );

    // The fence: a follow-up is refused and launches nothing.
    let threads_before = rig.count_in("thread/start");
    let (status, body) = client.follow_up("t1", "f1", "also add a README").unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "prior_owner_fence_refused");
    assert!(event_kinds(&client, "t1").contains(&"prior_owner_fence_refused".to_owned()));

    // Retry: admitted after the stop proof, a fresh thread, one new turn.
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let retry_run = body["run_id"].as_str().unwrap().to_owned();
    let (again, body2) = client.retry("t1", "r1").unwrap();
    assert_eq!(
        (again, body2["run_id"].as_str()),
        (201, Some(retry_run.as_str())),
        "idempotent"
    );
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(event_kinds(&client, "t1").contains(&"stopped_conversation_verified".to_owned()));
    assert_eq!(rig.count_in("thread/start"), threads_before + 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        0,
        "the refused follow-up launched nothing"
    );
    assert_eq!(rig.turn_starts("m1"), 1);
    let runs = task["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_ne!(
        runs[0]["conversation_id"], runs[1]["conversation_id"],
        "a fresh conversation"
    );
    rig.assert_effects_once();
}

/// User messages the provider recorded for `client_id` (a turn without
/// one delivered nothing).
fn recorded_messages(rig: &Rig, client_id: &str) -> usize {
    wire::stores::codex::recorded_turns(&rig.path("state/providers/t1"))
        .iter()
        .filter(|t| t.client_id.as_deref() == Some(client_id))
        .count()
}

/// Codex writes a turn's user message after the `turn/start` response: a
/// provider that died before it (the turn `interrupted`, no items) reached no
/// model, whether or not the runner saw the acceptance, so the message is
/// sent again, once, and never continued into an empty turn.
#[test]
fn a_turn_whose_user_message_was_never_recorded_is_sent_again() {
    for point in ["codex.turn.recorded", "codex.turn_start.responded"] {
        let mut rig = Rig::new(&["--exit", point]);
        let client = rig.start(None);
        submit(&client, &rig, "t1", "m1");
        let task = client.wait_settled("t1", WAIT).unwrap();
        assert_eq!(state(&task), "completed", "{point}: {task}\n{}", rig.log());
        assert!(event_kinds(&client, "t1").contains(&"provider_exited".to_owned()));
        assert_eq!(rig.turn_starts("m1"), 2, "{point}");
        assert_eq!(recorded_messages(&rig, "m1"), 1, "{point}: delivered once");
        assert_eq!(rig.continuations(), 0, "{point}: nothing to continue");
        assert_eq!(rig.ledger().len(), 1, "{point}: the task was done");
        rig.assert_effects_once();
    }
}

/// Codex writes a thread only with its first turn: a provider lost right
/// after `thread/start` leaves none, and the run opens a fresh one.
#[test]
fn a_thread_lost_before_its_first_turn_is_opened_afresh() {
    let mut rig = Rig::new(&["--exit", "codex.thread_start.responded"]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.count_in("thread/start"), 2);
    assert!(event_kinds(&client, "t1").contains(&"conversation.lost".to_owned()));
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// One command that needs no approval.
const UNAPPROVED: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = false }]
final = "Created hello.txt."
"#;

/// The continuation warns the model that a command reported `aborted` may
/// have run, so the fake's model checks before running it again.
#[test]
fn an_accepted_turn_lost_with_the_runner_gets_exactly_one_continuation() {
    let mut rig = Rig::with_script(&[], Some(UNAPPROVED));
    // Hold the provider right after its effect ran, then kill the runner.
    let client = rig.start(Some("codex.effect.exited"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1, "the message is never re-sent");
    assert_eq!(rig.continuations(), 1);
    assert_eq!(
        rig.ledger().len(),
        1,
        "the continuation skipped the done effect"
    );
    rig.assert_effects_once();
    let events = client.events("t1", 0).unwrap();
    let lost = events
        .iter()
        .find(|e| e.pointer("/data/cause/code") == Some(&json!("provider_turn_lost_on_restore")))
        .expect("a turn.failed event with the recoverable cause");
    assert_eq!(lost["kind"], "turn.failed");
    assert_eq!(lost.pointer("/data/cause/recoverable"), Some(&json!(true)));
}

#[test]
fn a_turn_completed_at_the_provider_is_adopted_without_a_new_turn() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("codex.turn_completed.recorded"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    let events = client.events("t1", 0).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "turn.finished"
                && e.pointer("/data/adopted") == Some(&json!(true)))
    );
    rig.assert_effects_once();
}

/// An approved command whose item never completed may have run: the turn
/// is closed, never continued (the real Codex would tell the model the call
/// was `aborted`), and Retry works.
#[test]
fn a_lost_turn_whose_approved_command_never_completed_is_closed() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("codex.effect.exited"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(
        cause(&task),
        "active_turn_recovery_closed",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(rig.continuations(), 0);
    assert_eq!(rig.ledger().len(), 1);
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    rig.assert_effects_once();
}

#[test]
fn a_lost_turn_with_a_pending_approval_is_closed_and_retry_works() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.approval_request.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "active_turn_recovery_closed",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(task.pointer("/cause/recoverable"), Some(&json!(false)));
    assert!(rig.ledger().is_empty());
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    rig.assert_effects_once();
}

#[test]
fn a_persisted_completion_settles_after_a_restart_without_a_new_turn() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_ended.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    assert_eq!(rig.ledger().len(), 1);
}

#[test]
fn a_cut_continuation_ends_with_continuation_exhausted() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_accepted.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    // The first acceptance in the new runner is the continuation's.
    let client = rig.start(Some("runner.turn_accepted.persisted"));
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let _ = client;
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "continuation_exhausted",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(rig.continuations(), 1, "never a second continuation");
    assert_eq!(rig.turn_starts("m1"), 1);
    let (status, _) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}");
}

#[test]
fn a_hung_provider_is_killed_as_unresponsive_and_the_turn_continues() {
    let mut rig = Rig::new(&["--hang", "codex.turn_started.notified"]);
    rig.runner_extra = vec!["--provider-idle-timeout-ms".into(), "300".into()];
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(event_kinds(&client, "t1").contains(&"provider_unresponsive".to_owned()));
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 1);
    rig.assert_effects_once();
}

#[test]
fn a_runner_killed_between_marking_a_turn_lost_and_continuing_it_still_continues() {
    let mut rig = Rig::new(&[]);
    // First cut: the turn is accepted, its tool has not run yet.
    let client = rig.start(Some("runner.item.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    // Second cut, during recovery: where the lost turn is marked and its
    // continuation recorded (once two writes, now one).
    rig.start(Some(
        "runner.turn_ended.persisted#1,runner.turn_intent.persisted#1",
    ));
    let held = rig.hold();
    let point = held.hit.point.clone();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    match state(&task) {
        "completed" => {
            assert_eq!(
                rig.continuations(),
                1,
                "completed without continuing its lost turn (recovery cut at {point})\n{task}"
            );
            assert_eq!(rig.ledger().len(), 1, "the lost turn's tool ran");
        }
        "failed" => assert_eq!(cause(&task), "continuation_exhausted", "{task}"),
        other => panic!("unexpected {other}: {task}"),
    }
    assert_eq!(rig.turn_starts("m1"), 1, "the message is never re-sent");
    rig.assert_effects_once();
}
