//! The rules added so that the wave's verdict follows the runner: content
//! replayed under a Retry's id, effects counted whole, the fence on both
//! sides, messages stranded without a word, a Retry that re-sends an
//! answered message, acceptance from the provider's side, a native final
//! answer asked twice, and every `[expect]` field. Each is made to fail.

use super::*;
use crate::model::ReplyExpect;
use crate::run_log::Kind;

/// An exchange of `kind` for `id`.
pub(super) fn exchange(kind: &str, id: &str, text: &str, status: u16, body: Value) -> Exchange {
    Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::parse(kind).unwrap(),
        message_id: id.into(),
        text: text.into(),
        status,
        body,
        state_before: None,
        expect: None,
        sent_at_ms: 0,

        answered_at_ms: 0,
        injected: false,
    }
}

/// `good()` with a Retry `r1` that re-sent m1's text under its own id in
/// `thread`.
fn retried_in(thread: &str) -> Evidence {
    let mut e = good();
    e.exchanges.push(exchange(
        "retry",
        "r1",
        "",
        201,
        json!({ "run_id": "run-1" }),
    ));
    e.journal.push(turn_start("r1", "Create hello.txt"));
    let mut t = pturn("pr1", "r1", "r1", "completed", false);
    t.thread = thread.into();
    e.provider_turns.push(t);
    e
}

#[test]
fn a_message_replayed_under_a_retry_id_in_one_conversation_is_caught() {
    let e = retried_in("th");
    assert_only_fails(&e, "no-replay.turn", "the same message ran 2 times");
    let e = retried_in("th-fresh");
    assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
    // Two follow-ups the harness sent with one text are two messages.
    let mut e = good();
    for id in ["fx1", "fx2"] {
        e.exchanges.push(exchange(
            "follow_up",
            id,
            "Also add a CHANGELOG",
            202,
            json!({}),
        ));
        e.journal.push(turn_start(id, "Also add a CHANGELOG"));
        e.provider_turns
            .push(pturn(&format!("p{id}"), id, id, "completed", false));
        e.ledger.push(ledger("write-changelog", id));
    }
    assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
    assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
}

#[test]
fn effects_are_counted_whole_across_ids_in_one_conversation() {
    let mut e = retried_in("th-fresh");
    let mut a = ledger("write-hello", "m1");
    a.conversation = Some("th-fresh".into());
    let mut b = ledger("write-hello", "r1");
    b.conversation = Some("th-fresh".into());
    e.ledger = vec![a.clone(), b.clone()];
    assert_only_fails(&e, "no-replay.effect", "ran 2 times");
    // The same effect in the old conversation (m1) and in the Retry's is
    // the Retry doing its work again: allowed.
    a.conversation = Some("th".into());
    e.ledger = vec![a, b];
    assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
}

#[test]
fn one_message_s_effect_in_two_conversations_without_a_retry_is_a_replay() {
    // The provider lost its thread (a power cut) and the runner sent m1
    // again in a fresh conversation: the effect ran twice, once in each.
    let mut e = good();
    let mut a = ledger("write-notes", "m1");
    a.conversation = Some("th".into());
    let mut b = ledger("write-notes", "m1");
    b.conversation = Some("th-fresh".into());
    let once = e.ledger.len();
    e.ledger.extend([a, b]);
    assert_only_fails(&e, "no-replay.effect", "in 2 conversations");
    // Found absent after the runner held an item of the turn: still a
    // replay (the runner knew a model saw it).
    let absent = json!({ "message_id": "m1", "provider_turn_id": "t1" });
    let seq = e.events.len() as i64 + 1;
    e.events
        .push(event(seq, "item.completed", json!({ "turn_row": 1 })));
    e.events
        .push(event(seq + 1, "turn.absent_at_provider", absent.clone()));
    assert_only_fails(&e, "no-replay.effect", "in 2 conversations");
    // Found absent before the runner held any output: the contract's
    // re-send, which a power cut can defeat; not judged.
    e.events.truncate(seq as usize - 1);
    e.events
        .insert(0, event(0, "turn.absent_at_provider", absent));
    assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
    // Once, in one conversation: nothing to say.
    e.events.remove(0);
    e.ledger.truncate(once + 1);
    assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
}

#[test]
fn a_follow_up_to_a_failed_task_must_be_refused_with_its_proof() {
    let mut e = good();
    let mut x = exchange("follow_up", "f1", "more", 202, json!({}));
    x.state_before = Some(TaskState::Failed);
    e.exchanges.push(x.clone());
    assert_only_fails(
        &e,
        "fence",
        "follow_up f1 was answered 202 (the task was failed when read just before), the contract allows 409 prior_owner_fence_refused",
    );
    e.exchanges.pop();
    x.status = 409;
    x.body = json!({ "reason": "prior_owner_fence_refused" });
    e.exchanges.push(x);
    assert_only_fails(&e, "fence", "without its run-log event");
    e.events.push(event(
        6,
        "prior_owner_fence_refused",
        json!({ "message_id": "f1", "reason": "prior_owner_fence_refused" }),
    ));
    assert_eq!(verdict(&judge(&e), "fence").0, Verdict::Pass);
}

#[test]
fn a_step_expectation_of_its_own_reply_is_judged() {
    let with = |expect, state: Option<&str>, status| {
        let mut e = good();
        let mut x = exchange("follow_up", "f1", "more", status, json!({}));
        x.expect = Some(expect);
        x.state_before = state.map(|s| serde_json::from_value(json!(s)).unwrap());
        e.exchanges.push(x);
        e.provider_turns
            .push(pturn("pf1", "f1", "f1", "completed", false));
        e
    };
    let e = with(ReplyExpect::Refused, Some("completed"), 202);
    assert_only_fails(&e, "fence", "expects Refused");
    let e = with(ReplyExpect::Accepted, Some("completed"), 202);
    assert_eq!(verdict(&judge(&e), "fence").0, Verdict::Pass);
    let e = with(ReplyExpect::Fenced, Some("completed"), 202);
    assert_eq!(verdict(&judge(&e), "fence").0, Verdict::Pass);
    let e = with(ReplyExpect::Fenced, None, 202);
    assert_eq!(verdict(&judge(&e), "fence").0, Verdict::Unknown);
}

/// `good()` with follow-up f1 accepted, its turn never started, and Retry
/// r1 that ran with f1's text.
fn f1_resent_by_r1(named: bool) -> Evidence {
    let mut e = good();
    e.exchanges
        .push(exchange("follow_up", "f1", "more", 202, json!({})));
    e.exchanges.push(exchange(
        "retry",
        "r1",
        "",
        201,
        json!({ "run_id": "run-1" }),
    ));
    let mut admitted = json!({ "message_id": "r1", "run_id": "run-1", "resends": true });
    if named {
        admitted["resends_message"] = json!("f1");
    }
    e.events.push(event(6, "retry.admitted", admitted));
    e.journal.push(turn_start("r1", "more"));
    let mut t = pturn("pr1", "r1", "r1", "completed", false);
    t.thread = "th-fresh".into();
    e.provider_turns.push(t);
    e
}

#[test]
fn a_retry_consumes_the_message_it_names_and_only_that() {
    // Without the field, the follow-up looks lost (the old false alarm).
    let e = f1_resent_by_r1(false);
    assert_only_fails(&e, "no-loss", "never consumed");
    let e = f1_resent_by_r1(true);
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    let mut e = f1_resent_by_r1(true);
    e.journal.pop();
    e.journal.push(turn_start("r1", "something else"));
    assert_only_fails(&e, "no-loss", "says it re-sends f1");
}

#[test]
fn a_retry_that_re_sends_a_retry_consumes_what_that_one_stood_for() {
    // r1 stood for f1 and its run failed before its turn; r2 re-sent r1:
    // f1's text reached the provider under r2 (found by `explore
    // --workflows --seed 5` on the native profile, two storage faults).
    let chained = |stands_for_r1: bool| {
        let mut e = f1_resent_by_r1(true);
        e.journal.pop();
        e.provider_turns.pop();
        e.exchanges.push(exchange(
            "retry",
            "r2",
            "",
            201,
            json!({ "run_id": "run-2" }),
        ));
        let resent = if stands_for_r1 { "r1" } else { "m1" };
        e.events.push(event(
            7,
            "retry.admitted",
            json!({ "message_id": "r2", "run_id": "run-2", "resends": true, "resends_message": resent }),
        ));
        e.journal.push(turn_start("r2", "more"));
        let mut t = pturn("pr2", "r2", "r2", "completed", false);
        t.thread = "th-fresh".into();
        e.provider_turns.push(t);
        e
    };
    let (v, m) = verdict(&judge(&chained(true)), "no-loss");
    assert!(!m.contains("f1 was accepted"), "{v:?} {m}");
    // A later Retry that stands for another message consumes nothing of f1.
    let (_, m) = verdict(&judge(&chained(false)), "no-loss");
    assert!(
        m.contains("follow_up f1 was accepted but it was never consumed"),
        "{m}"
    );
}

#[test]
fn a_run_that_settles_failed_names_every_message_it_leaves_queued() {
    let mut e = good();
    e.events
        .insert(4, event(5, "message.queued", json!({ "message_id": "f1" })));
    for (i, ev) in e.events.iter_mut().enumerate() {
        json_of(ev)["seq"] = json!(i + 1);
    }
    e.events.push(event(
        7,
        "run.settled",
        json!({ "state": "failed", "cause": { "code": "storage_failed" } }),
    ));
    assert_only_fails(&e, "no-loss", "leaving message f1 queued");
    e.events.push(event(
        8,
        "message.stranded",
        json!({ "message_id": "f1", "cause": "storage_failed", "waits_for": "retry" }),
    ));
    let (v, m) = verdict(&judge(&e), "no-loss");
    assert!(!m.contains("leaving message"), "{v:?} {m}");
    // Written in the settlement's write, before its run.settled: named too.
    let stranded = e.events.pop().expect("the stranded event");
    e.events.insert(e.events.len() - 1, stranded.clone());
    let (v, m) = verdict(&judge(&e), "no-loss");
    assert!(!m.contains("leaving message"), "{v:?} {m}");
    // Named only later, after something else happened: not at the settle.
    e.events.remove(e.events.len() - 2);
    e.events
        .push(event(8, "provider_exited", json!({ "pid": 1 })));
    e.events.push(stranded);
    assert_only_fails(&e, "no-loss", "leaving message f1 queued");
}

#[test]
fn a_retry_that_re_sends_an_answered_message_while_others_wait_is_caught() {
    let mut e = good();
    task(&mut e)["runs"][0]["turns"] = json!([
        turn_view(1, "m1", "primary", "interrupted"),
        turn_view(2, "m1", "continuation", "completed"),
    ]);
    e.events = vec![
        event(1, "task.admitted", json!({ "message_id": "m1" })),
        event(
            2,
            "turn.intent",
            json!({ "client_id": "m1", "message_id": "m1", "kind": "primary" }),
        ),
        event(3, "message.queued", json!({ "message_id": "f1" })),
        event(
            4,
            "turn.failed",
            json!({ "turn_row": 1, "status": "interrupted" }),
        ),
        event(
            5,
            "turn.finished",
            json!({ "turn_row": 2, "status": "completed" }),
        ),
        event(6, "run.settled", json!({ "state": "failed" })),
        event(
            7,
            "retry.admitted",
            json!({ "message_id": "r1", "resends": true, "resends_message": "m1" }),
        ),
    ];
    e.exchanges.push(exchange(
        "retry",
        "r1",
        "",
        201,
        json!({ "run_id": "run-1" }),
    ));
    assert_only_fails(&e, "retry.works", "re-sent m1, whose last turn");
    // Nothing waiting: re-sending the latest message is what a Retry does.
    e.events.remove(2);
    let (_, m) = verdict(&judge(&e), "retry.works");
    assert!(!m.contains("whose last turn"), "{m}");
}

/// `good()` with the runner's answer to an approval of m1's turn in the
/// journal at `ts_ms`.
fn acted_at(ts_ms: u64) -> Evidence {
    let mut e = good();
    let mut answer = entry(
        EntryKind::In,
        None,
        json!({ "id": 0, "result": { "decision": "accept" } }),
    );
    answer.ts_ms = ts_ms;
    e.journal.insert(2, answer);
    e
}

#[test]
fn acceptance_is_judged_from_the_provider_side() {
    // good()'s turn.accepted is at ts 3.
    let e = acted_at(10);
    assert_eq!(verdict(&judge(&e), "contract").0, Verdict::Pass);
    let e = acted_at(2);
    assert_only_fails(&e, "contract", "before recording its acceptance");
    let mut e = acted_at(10);
    e.events.retain(|ev| ev.kind() != Kind::TurnAccepted);
    assert_only_fails(&e, "contract", "never recorded the turn accepted");
    let mut e = acted_at(10);
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
    assert_only_fails(&e, "contract", "had seen the turn accepted");
}

#[test]
fn a_native_final_answer_is_recorded_once_and_matches_the_model_api() {
    let mut e = good();
    for seq in [6, 7] {
        e.events.push(event(
            seq,
            "model.output",
            json!({ "turn_row": 1, "calls": 0, "response_id": "r" }),
        ));
    }
    assert_only_fails(&e, "contract", "recorded its final answer 2 times");
    let mut e = good();
    e.events.push(event(
        6,
        "model.output",
        json!({ "turn_row": 1, "calls": 0 }),
    ));
    e.provider_turns[0].model_requests = Some(1);
    assert_eq!(verdict(&judge(&e), "contract").0, Verdict::Pass);
    // One fault may lose one answer; three requests for one output is more.
    e.events_applied = 1;
    e.provider_turns[0].model_requests = Some(3);
    assert_only_fails(&e, "contract", "the model API answered 3 request(s)");
}

#[test]
fn every_expect_field_is_judged_on_a_clean_cell() {
    let clean = || {
        let mut e = good();
        e.spec.as_mut().unwrap().events.clear();
        e.fault = None;
        e
    };
    let mut e = clean();
    e.expect.effects = Some(2);
    assert_only_fails(&e, "contract", "left 1 effect(s)");
    let mut e = clean();
    e.expect.final_state = Some("failed".into());
    assert_only_fails(&e, "contract", "the scenario expects failed");
    let mut e = clean();
    e.expect.follow_ups_consumed = Some(1);
    assert_only_fails(&e, "contract", "consumed 0 follow-up(s)");
    let mut e = clean();
    e.expect = crate::model::Expect {
        follow_ups_consumed: Some(0),
        final_state: Some("completed".into()),
        effects: Some(1),
    };
    assert_eq!(verdict(&judge(&e), "contract").0, Verdict::Pass);
}

#[test]
fn a_later_event_that_met_a_dead_process_and_never_came_again_is_unknown() {
    use crate::evidence::Action;
    let mut e = good();
    let act = |at_ms, what: &str, detail| Action {
        at_ms,
        what: crate::evidence::ActionKind::parse(what).unwrap(),
        detail,
    };
    e.actions.push(act(
        5,
        "event.not-applied",
        json!({ "event": 2, "point": "runner.write.tool_executing", "pid": 42 }),
    ));
    let (v, m) = verdict(&judge(&e), "vacuity");
    assert_eq!(v, Verdict::Unknown, "{m}");
    assert!(m.contains("already gone"), "{m}");
    e.actions
        .push(act(9, "event.reached", json!({ "event": 2 })));
    assert_eq!(verdict(&judge(&e), "vacuity").0, Verdict::Pass);
}
