//! Tests of the oracles that follow a task over time: Retry, no loss,
//! liveness, secrecy, hygiene and vacuity, evidence that is missing or
//! unreadable, and the recovery path (fixtures in `super`).

use super::*;

#[test]
fn retry_works_catches_a_reused_conversation_and_a_reasonless_refusal() {
    let mut e = retried();
    task(&mut e)["runs"][1]["conversation_id"] = json!("th");
    assert_only_fails(&e, "retry.works", "fresh conversation");
    let mut e = good();
    e.exchanges.push(retry_r1(201, json!({})));
    assert_only_fails(&e, "retry.works", "without a run");
    let mut e = good();
    e.exchanges.push(retry_r1(500, json!({})));
    assert_only_fails(&e, "retry.works", "answered 500");
}

/// Retry `r1`, answered `status` with `body` (0: no answer).
fn retry_r1(status: u16, body: Value) -> Exchange {
    Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::Retry,
        message_id: "r1".into(),
        text: String::new(),
        status,
        body,
        state_before: None,
        expect: None,
        sent_at_ms: 0,

        answered_at_ms: 0,
        injected: false,
    }
}

/// Follow-up `f1`, accepted (202).
fn follow_up_f1() -> Exchange {
    Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::FollowUp,
        message_id: "f1".into(),
        text: "more".into(),
        status: 202,
        body: json!({}),
        state_before: None,
        expect: None,
        sent_at_ms: 0,

        answered_at_ms: 0,
        injected: false,
    }
}

#[test]
fn no_loss_catches_a_gap_a_vanished_event_and_a_lost_follow_up() {
    let mut e = good();
    e.events.remove(2);
    assert_only_fails(&e, "no-loss", "gap");
    let mut e = good();
    e.events_before_fault = Some(vec![event(6, "item.completed", json!({ "text": "gone" }))]);
    assert_only_fails(&e, "no-loss", "gone or changed");
    let mut e = good();
    e.exchanges.push(follow_up_f1());
    assert_only_fails(&e, "no-loss", "never consumed");
    task(&mut e)["queued_messages"] = json!(["f1"]);
    assert_only_fails(&e, "no-loss", "completed without consuming it");
    task(&mut e)["state"] = json!("failed");
    assert_only_fails(&e, "no-loss", "no run-log event names it");
    e.events.push(event(
        6,
        "message.stranded",
        json!({ "message_id": "f1", "cause": "storage_failed", "waits_for": "retry" }),
    ));
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    e.events.pop();
    task(&mut e)["state"] = json!("completed");
    task(&mut e)["queued_messages"] = json!([]);
    e.provider_turns
        .push(pturn("pf1", "f1", "f1", "completed", false));
    e.provider_turns
        .push(pturn("pf2", "f1", "f1", "completed", false));
    assert_only_fails(&e, "no-loss", "consumed 2 times");
}

#[test]
fn no_loss_is_unknown_when_the_run_log_or_the_queue_cannot_be_read() {
    let mut e = good();
    e.events_before_fault = Some(e.events.clone());
    e.events.clear();
    e.unreadable(Source::RunLog, "GET /events: connection refused");
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Unknown);
    let mut e = good();
    e.exchanges.push(follow_up_f1());
    e.unreadable(Source::Task, "GET /tasks: connection refused");
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Unknown);
    // A runner that answers 404 for a task it admitted has lost it.
    let mut e = good();
    e.unreadable(Source::Task, "GET task answered 404");
    e.ops.push(crate::evidence::Op {
        kind: crate::evidence::OpKind::ReadTask,
        message_id: String::new(),
        at_ms: 90,
        result: crate::evidence::OpResult::Fail,
        status: Some(404),
        error: None,
    });
    assert_only_fails(&e, "no-loss", "answered 404");
}

#[test]
fn liveness_secrecy_hygiene_and_vacuity_each_bite() {
    let mut e = good();
    task(&mut e)["state"] = json!("running");
    assert_only_fails(&e, "liveness", "still running");
    let mut e = good();
    e.canary_found_in.push("state/runner.sqlite3".into());
    assert_only_fails(&e, "secrecy", "runner.sqlite3");
    let mut e = good();
    e.ledger[0].saw_secret = true;
    assert_only_fails(&e, "secrecy", "saw a credential");
    let mut e = good();
    e.events.push(event(
        6,
        "provider.spawned",
        json!({ "env_key": "turncut-canary-1" }),
    ));
    assert_only_fails(&e, "secrecy", "run log");
    let mut e = good();
    e.survivors.push("provider pid 4242".into());
    assert_only_fails(&e, "hygiene", "4242");
    let mut e = good();
    e.reached_cut = false;
    assert_only_fails(&e, "vacuity", "never reached");
}

/// Breaks one source of a healthy cell; the oracles that read it must
/// not pass, and at least one must say unknown naming the source.
fn assert_unknown_without(source: Source, oracles: &[&str], break_it: impl Fn(&mut Evidence)) {
    let mut e = good();
    break_it(&mut e);
    let results = judge(&e);
    assert_ne!(worst(&results), Verdict::Pass, "{source:?}: {results:#?}");
    for name in oracles {
        assert_ne!(
            verdict(&results, name).0,
            Verdict::Pass,
            "{name} without {source:?}"
        );
    }
    assert!(
        results
            .iter()
            .any(|r| r.verdict == Verdict::Unknown && r.message.contains(source.as_str())),
        "{source:?}: no unknown names it: {results:#?}"
    );
}

#[test]
fn an_unreadable_empty_or_truncated_source_is_never_a_pass() {
    use Source::*;
    let task_oracles = [
        "cause.structured",
        "contract",
        "retry.works",
        "no-loss",
        "liveness",
    ];
    assert_unknown_without(Task, &task_oracles, |e| {
        e.unreadable(Task, "GET task answered 404")
    });
    assert_unknown_without(Task, &task_oracles, |e| e.task = None);
    assert_unknown_without(Task, &task_oracles, |e| {
        e.task = Some(TaskRead::read(json!({ "error": "x" })))
    });
    let log_oracles = [
        "cause.structured",
        "contract",
        "retry.works",
        "no-loss",
        "secrecy",
    ];
    assert_unknown_without(RunLog, &log_oracles, |e| {
        e.unreadable(RunLog, "GET events: reset")
    });
    assert_unknown_without(RunLog, &log_oracles, |e| e.events.clear());
    // Cut off the tail: the task is settled, its run.settled is gone.
    assert_unknown_without(RunLog, &log_oracles, |e| {
        e.events.pop();
    });
    let journal_oracles = ["no-replay.turn", "contract"];
    assert_unknown_without(Journal, &journal_oracles, |e| {
        e.unreadable(Journal, "bad line")
    });
    assert_unknown_without(Journal, &journal_oracles, |e| e.journal.clear());
    let ledger_oracles = ["no-replay.effect", "secrecy"];
    assert_unknown_without(Ledger, &ledger_oracles, |e| e.unreadable(Ledger, "EISDIR"));
    assert_unknown_without(Ledger, &ledger_oracles, |e| e.ledger.clear());
    let store_oracles = ["no-replay.turn", "contract", "no-loss"];
    assert_unknown_without(ProviderStore, &store_oracles, |e| {
        e.unreadable(ProviderStore, "th.json: not a whole JSON document")
    });
    assert_unknown_without(ProviderStore, &store_oracles, |e| e.provider_turns.clear());
    assert_unknown_without(Processes, &["hygiene"], |e| {
        e.unreadable(Processes, "/proc/self/stat: EACCES")
    });
    assert_unknown_without(Files, &["secrecy"], |e| {
        e.unreadable(Files, "state: EACCES")
    });
}

#[test]
fn a_renamed_or_unknown_field_is_unknown_not_a_pass() {
    // The runner renames `runs`: the oracles must not judge zero runs.
    assert_unknown_without(Source::Task, &["contract", "retry.works", "no-loss"], |e| {
        let mut t = task(e);
        let runs = t.as_object_mut().unwrap().remove("runs").unwrap();
        t["run_list"] = runs;
    });
    // A turn's `kind` becomes `type`.
    assert_unknown_without(Source::Task, &["contract"], |e| {
        let mut view = task(e);
        let t = view["runs"][0]["turns"][0].as_object_mut().unwrap();
        let kind = t.remove("kind").unwrap();
        t.insert("type".into(), kind);
    });
    // A run-log event of another version, or with a renamed envelope field.
    assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
        json_of(&mut e.events[0])["v"] = json!(2)
    });
    assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
        let mut j = json_of(&mut e.events[1]);
        let ev = j.as_object_mut().unwrap();
        let kind = ev.remove("kind").unwrap();
        ev.insert("type".into(), kind);
    });
    // A payload field an oracle reads is renamed, or of another type: the
    // oracles that read the run log say unknown, naming the event and the
    // field, never pass.
    let payload_oracles = ["cause.structured", "contract", "no-loss", "retry.works"];
    assert_unknown_without(Source::RunLog, &payload_oracles, |e| {
        let mut j = json_of(&mut e.events[2]);
        let row = j["data"]
            .as_object_mut()
            .unwrap()
            .remove("turn_row")
            .unwrap();
        j["data"]["row"] = row;
    });
    assert_unknown_without(Source::RunLog, &payload_oracles, |e| {
        json_of(&mut e.events[4])["data"]["state"] = json!("done")
    });
    let mut e = good();
    json_of(&mut e.events[2])["data"]["turn_row"] = json!("one");
    let (v, m) = verdict(&judge(&e), "contract");
    assert_eq!(v, Verdict::Unknown);
    assert!(
        m.contains("run-log event 3 (turn.accepted) does not parse: data.turn_row: invalid type"),
        "{m}"
    );
}

#[test]
fn an_indeterminate_follow_up_may_be_absent_but_is_consumed_once_if_present() {
    let info = |e: &mut Evidence| {
        e.exchanges.push(Exchange {
            task: crate::scenario::FIRST_TASK.to_owned(),
            kind: RequestKind::FollowUp,
            message_id: "f1".into(),
            text: "more".into(),
            status: 0,
            body: json!({ "error": "connection reset" }),
            state_before: None,
            expect: None,
            sent_at_ms: 0,

            answered_at_ms: 0,
            injected: false,
        });
    };
    // Absent: the cut POST never reached the runner.
    let mut e = good();
    info(&mut e);
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    // Present once: it was applied, and consumed once.
    e.provider_turns
        .push(pturn("pf1", "f1", "f1", "completed", false));
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    // Present twice.
    e.provider_turns
        .push(pturn("pf2", "f1", "f1", "completed", false));
    assert_only_fails(&e, "no-loss", "consumed 2 times");
    // Present, queued, and stranded in a completed task.
    let mut e = good();
    info(&mut e);
    task(&mut e)["queued_messages"] = json!(["f1"]);
    assert_only_fails(&e, "no-loss", "completed without consuming it");
}

#[test]
fn ops_record_ok_fail_and_info() {
    use crate::evidence::{Op, OpResult};
    let of = |a: anyhow::Result<(u16, ())>| {
        Op::of(OpKind::Request(RequestKind::FollowUp), "f1", 5, &a).result
    };
    assert_eq!(of(Ok((202, ()))), OpResult::Ok);
    assert_eq!(of(Ok((409, ()))), OpResult::Fail);
    assert_eq!(of(Ok((503, ()))), OpResult::Info);
    assert_eq!(of(Err(anyhow::anyhow!("connection reset"))), OpResult::Info);
}

#[test]
fn a_refused_follow_up_that_reaches_the_provider_is_caught() {
    let mut e = good();
    e.exchanges.push(Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::FollowUp,
        message_id: "f1".into(),
        text: "more".into(),
        status: 409,
        body: json!({ "reason": "prior_owner_fence_refused" }),
        state_before: Some(crate::model::TaskState::Failed),
        expect: None,
        sent_at_ms: 0,

        answered_at_ms: 0,
        injected: false,
    });
    e.events.push(event(
        6,
        "prior_owner_fence_refused",
        json!({ "message_id": "f1", "reason": "prior_owner_fence_refused" }),
    ));
    assert_eq!(verdict(&judge(&e), "fence").0, Verdict::Pass);
    e.journal.push(turn_start("f1", "more"));
    assert_only_fails(&e, "fence", "was refused");
    // The same follow-up sent again once the task completed after a Retry,
    // and admitted (202): the provider got that request's content.
    let mut again = follow_up_f1();
    again.state_before = Some(crate::model::TaskState::Completed);
    again.sent_at_ms = 9;
    e.exchanges.push(again);
    assert_ne!(
        verdict(&judge(&e), "fence").0,
        Verdict::Fail,
        "{:#?}",
        judge(&e)
    );
    // Refused as id_conflict (the runner holds f1 with another text), its
    // text reaches nothing: the provider's f1 carried the admitted text.
    let mut e = good();
    e.exchanges.push(follow_up_f1());
    let mut conflict = follow_up_f1();
    conflict.text = "other".into();
    conflict.status = 409;
    conflict.body = json!({ "reason": "id_conflict" });
    e.exchanges.push(conflict);
    e.journal.push(turn_start("f1", "more"));
    assert_ne!(
        verdict(&judge(&e), "fence").0,
        Verdict::Fail,
        "{:#?}",
        judge(&e)
    );
}

/// A healthy cell plus an admitted Retry whose run completed in a fresh
/// conversation `th2` after a recorded stop proof.
fn retried() -> Evidence {
    let mut e = good();
    e.exchanges
        .push(retry_r1(201, json!({ "run_id": "run-2" })));
    task(&mut e)["runs"].as_array_mut().unwrap().push(run_view(
        "run-2",
        "retry",
        "completed",
        "th2",
        vec![],
    ));
    e.events
        .push(event(6, "stopped_conversation_verified", json!({})));
    e
}

/// The Retry `r1` was sent at 100 ms and a later event of the schedule
/// was reached at 150 ms: its run may have been cut.
fn cut_after_retry(e: &mut Evidence) {
    e.ops.push(crate::evidence::Op::of(
        OpKind::Request(RequestKind::Retry),
        "r1",
        100,
        &Ok::<_, anyhow::Error>((201, ())),
    ));
    e.actions.push(crate::evidence::Action {
        at_ms: 150,
        what: crate::evidence::ActionKind::EventReached,
        detail: json!({ "event": 2 }),
    });
}

#[test]
fn a_retry_run_cut_by_a_later_event_may_fail_only_with_a_contract_cause() {
    let mut e = retried();
    task(&mut e)["runs"][1]["status"] = json!("failed");
    task(&mut e)["runs"][1]["cause"] =
        json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
    // No event after the Retry: its run had no excuse to fail.
    assert_only_fails(&e, "retry.works", "ended failed");
    cut_after_retry(&mut e);
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // Cut, it still needs a cause the contract lists.
    task(&mut e)["runs"][1]["cause"] =
        json!({ "code": "made_up", "recoverable": false, "message": "x" });
    assert!(verdict(&judge(&e), "retry.works").0 == Verdict::Fail);
}

#[test]
fn a_retry_run_cut_before_its_conversation_has_none_and_an_unanswered_retry_is_unknown() {
    let mut e = retried();
    task(&mut e)["runs"][1]["status"] = json!("failed");
    task(&mut e)["runs"][1]["conversation_id"] = Value::Null;
    task(&mut e)["runs"][1]["cause"] =
        json!({ "code": "storage_failed", "recoverable": false, "message": "x" });
    // Not cut: a Retry run without a conversation is wrong.
    assert_only_fails(&e, "retry.works", "fresh conversation");
    cut_after_retry(&mut e);
    e.actions.push(crate::evidence::Action {
        at_ms: 150,
        what: crate::evidence::ActionKind::Fault(Fault::FailWrite),
        detail: json!({}),
    });
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    let mut e = good();
    e.exchanges
        .push(retry_r1(0, json!({ "error": "io: Peer disconnected" })));
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Unknown);
}

#[test]
fn a_retry_admitted_then_refused_when_sent_again_fails_retry_works() {
    // The harness sent r1 again after a restart cut its first request; the
    // run log says the first was admitted, the second was refused.
    let mut e = retried();
    e.exchanges.pop();
    let mut again = retry_r1(409, json!({ "block_reason": "execution_active" }));
    again.answered_at_ms = 160;
    e.exchanges.push(again);
    for (at_ms, answer) in [
        (100, Err(anyhow::anyhow!("io: Peer disconnected"))),
        (160, Ok((409, ()))),
    ] {
        e.ops.push(crate::evidence::Op::of(
            OpKind::Request(RequestKind::Retry),
            "r1",
            at_ms,
            &answer,
        ));
    }
    let mut refused = good();
    refused.exchanges.push(e.exchanges.last().unwrap().clone());
    refused.ops.extend(e.ops.iter().cloned());
    e.events.push(event(
        7,
        "retry.admitted",
        json!({ "message_id": "r1", "run_id": "run-2", "resends": true, "resends_message": "m1" }),
    ));
    assert_only_fails(
        &e,
        "retry.works",
        "admitted (events#7) but answered 409 when sent again (2 requests)",
    );
    // Refused both times, with a listed reason: no problem of Retry's.
    let (v, why) = verdict(&judge(&refused), "retry.works");
    assert_ne!(v, Verdict::Fail, "{why:?}");
    // Refused before it was admitted (nothing to retry yet; the same id
    // admitted later, once there was): no re-send of an admitted Retry.
    let mut early = e.clone();
    early.events.last_mut().unwrap().ts_ms = 161;
    let (v, why) = verdict(&judge(&early), "retry.works");
    assert_ne!(v, Verdict::Fail, "{why:?}");
}

#[test]
fn a_retry_turn_sent_again_in_its_own_conversation_is_no_reuse() {
    let mut e = retried();
    // The Retry's first turn was lost before its message was recorded
    // (no client id), and sent again in the Retry's own conversation.
    let mut lost = pturn("pr0", "", "r1", "interrupted", false);
    lost.client_id = None;
    lost.thread = "th2".into();
    let mut again = pturn("pr1", "r1", "r1", "completed", false);
    again.thread = "th2".into();
    e.provider_turns.push(lost);
    e.provider_turns.push(again);
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // The real codex's store names no one for a turn without its user
    // message: such a turn held nothing either.
    e.provider_turns[1].authorized_by = String::new();
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // A turn of another message in that conversation is reuse.
    e.provider_turns[1].authorized_by = "m1".into();
    assert_only_fails(&e, "retry.works", "already held turn pr0 of m1");
}

#[test]
fn retry_works_catches_an_old_provider_alive_at_the_retry() {
    let mut e = retried();
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // The runner's event says stopped; the process table says otherwise.
    e.alive_at_retry
        .push("pid 4242 (fake-provider codex)".into());
    assert_only_fails(&e, "retry.works", "still running (process table)");
}

#[test]
fn retry_works_catches_a_reused_conversation_in_the_provider_store() {
    // The runner claims a fresh conversation.
    let mut e = retried();
    let mut fresh = pturn("pr1", "r1", "r1", "completed", false);
    fresh.thread = "th2".into();
    e.provider_turns.push(fresh);
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // The provider recorded the Retry's turn in the old thread.
    e.provider_turns[1].thread = "th".into();
    assert_only_fails(&e, "retry.works", "already held turn pt1");
}

#[test]
fn the_path_names_each_run_and_its_recovery_in_run_log_order() {
    let mut e = good();
    assert_eq!(e.path(), "completed");
    // A continuation, then adoption of the continuation.
    task(&mut e)["runs"][0]["turns"]
        .as_array_mut()
        .unwrap()
        .push(turn_view(2, "m1", "continuation", "completed"));
    e.events.insert(
        4,
        event(
            5,
            "turn.intent",
            json!({ "message_id": "m1", "kind": "continuation", "client_id": "m1#continuation" }),
        ),
    );
    e.events.insert(
        5,
        event(
            6,
            "turn.finished",
            json!({ "turn_row": 2, "adopted": true }),
        ),
    );
    assert_eq!(e.path(), "continued → adopted → completed");
    // An accepted turn the provider never recorded, sent again; an intent
    // found absent is its first send, no recovery word.
    let mut e = good();
    let absent = |data| event(4, "turn.absent_at_provider", data);
    e.events.insert(3, absent(json!({ "message_id": "m1" })));
    assert_eq!(e.path(), "completed");
    e.events.insert(
        3,
        absent(json!({ "message_id": "m1", "provider_turn_id": "pt0" })),
    );
    assert_eq!(e.path(), "re-sent → completed");
    // Failed closed, then a Retry run.
    let mut e = good();
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
    task(&mut e)["runs"].as_array_mut().unwrap().push(run_view(
        "run-2",
        "retry",
        "completed",
        "th2",
        vec![],
    ));
    assert_eq!(e.path(), "failed ambiguous_turn_start → retry → completed");
    e.task = Some(TaskRead::read(json!({ "renamed": true })));
    assert_eq!(e.path(), "unknown");
}

/// A Retry run cut by a later power cut that took turns the provider never
/// synced may fail closed `provider_protocol_error` (the contract's row "a
/// conversation with a completed turn, or with a turn whose output the
/// runner holds | no thread"), as `contract` allows any run; cut with the
/// provider's store intact, that cause has no excuse. Found by a generated
/// program of `explore --workflows` once it drew power cuts (seed 101).
#[test]
fn a_retry_run_whose_provider_lost_its_turns_to_a_power_cut_may_fail_closed() {
    let mut e = retried();
    task(&mut e)["runs"][1]["status"] = json!("failed");
    task(&mut e)["runs"][1]["cause"] = json!({ "code": "provider_protocol_error",
        "recoverable": false, "message": "the provider lost conversation th2" });
    cut_after_retry(&mut e);
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Fail);
    // The cut took turn pt1 (journaled at 0 ms) from the provider's store.
    e.provider_turns.clear();
    e.actions.push(crate::evidence::Action {
        at_ms: 160,
        what: crate::evidence::ActionKind::Fault(Fault::PowerCut),
        detail: json!({ "dead_at_epoch_ms": 10 }),
    });
    assert_eq!(e.turns_lost_to_power_cut().len(), 1);
    let (v, why) = verdict(&judge(&e), "retry.works");
    assert_eq!(v, Verdict::Pass, "{why}");
}

/// A failed task whose current run's last turn (follow-up f1's) was
/// accepted and never answered: a Retry re-sends it, so it is not lost,
/// though no provider recorded it and nothing names it stranded (the native
/// profile accepts a turn with its checkpoint, before any model request).
/// Found by the default wave's generated program seed1-p0 on the native
/// profile (a kill at `runner.write.follow_up#4`, then a failed write).
#[test]
fn a_failed_runs_unanswered_last_turn_waits_for_the_retry_that_resends_it() {
    let mut e = good();
    e.exchanges.push(follow_up_f1());
    task(&mut e)["state"] = json!("failed");
    task(&mut e)["runs"][0]["turns"]
        .as_array_mut()
        .unwrap()
        .push(turn_view(2, "f1", "primary", "accepted"));
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    // Answered (completed) with no provider turn, it was lost.
    task(&mut e)["runs"][0]["turns"][1]["status"] = json!("completed");
    assert!(verdict(&judge(&e), "no-loss").1.contains("never consumed"));
    // Nor does an unanswered turn excuse a task that did not fail.
    task(&mut e)["runs"][0]["turns"][1]["status"] = json!("accepted");
    task(&mut e)["state"] = json!("completed");
    assert!(verdict(&judge(&e), "no-loss").1.contains("never consumed"));
}

/// A Retry whose run failed before its turn (a provider that would not
/// start) is superseded by the next Retry, which re-sends what it would
/// have: once that one is admitted, the first is no longer queued, so a
/// failed settle need not name it (found by `explore --workflows --only
/// runner-codex --seed 1` on the reference runner: program s1-w14, no-loss
/// "leaving message r1 queued").
#[test]
fn a_retry_superseded_by_a_later_one_is_no_longer_queued() {
    let retry = |seq, id: &str| {
        let data =
            json!({ "message_id": id, "resends": true, "resends_message": "m1", "delivers": [] });
        event(seq, "retry.admitted", data)
    };
    let settled = |seq| {
        event(
            seq,
            "run.settled",
            json!({ "state": "failed", "cause": null }),
        )
    };
    let mut e = good();
    e.events = vec![
        event(1, "task.admitted", json!({ "message_id": "m1" })),
        event(
            2,
            "turn.intent",
            json!({ "message_id": "m1", "kind": "primary", "client_id": "m1" }),
        ),
        settled(3),
        retry(4, "r1"),
        settled(5),
        retry(6, "r2"),
        event(
            7,
            "turn.intent",
            json!({ "message_id": "r2", "kind": "primary", "client_id": "r2" }),
        ),
        settled(8),
    ];
    assert_eq!(e.queued_before(5), ["r1"]);
    assert_eq!(e.queued_before(7), ["r2"]);
    assert!(e.queued_before(8).is_empty(), "{:?}", e.queued_before(8));
}
