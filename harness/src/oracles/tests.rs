//! Tests of the oracles: each one is made to fail by a broken runner's
//! evidence, built from one healthy cell (`good`).
use super::*;
use crate::evidence::{Exchange, ProviderTurn};
use crate::model::{CellSpec, Cut, Fault};
use serde_json::{Value, json};
use wire::journal::{Entry, EntryKind};
use wire::ledger::LedgerEntry;

fn entry(kind: EntryKind, fact: Option<&str>, data: Value) -> Entry {
    Entry {
        v: 1,
        generation: "g".into(),
        seq: 0,
        ts_ms: 0,
        kind,
        fact: fact.map(str::to_owned),
        data,
    }
}

fn turn_start(client: &str, text: &str) -> Entry {
    entry(
        EntryKind::In,
        None,
        json!({ "id": 3, "method": "turn/start", "params": { "threadId": "th", "clientUserMessageId": client, "input": [{ "type": "text", "text": text }] } }),
    )
}

fn recorded(turn: &str, client: &str, by: &str, cont: bool) -> Entry {
    entry(
        EntryKind::Fact,
        Some("turn.recorded"),
        json!({ "thread": "th", "turn": turn, "client_id": client, "authorized_by": by, "continuation": cont }),
    )
}

fn finished(turn: &str, status: &str) -> Entry {
    entry(
        EntryKind::Fact,
        Some("turn.finished"),
        json!({ "thread": "th", "turn": turn, "status": status }),
    )
}

fn ledger(key: &str, by: &str) -> LedgerEntry {
    LedgerEntry {
        v: 1,
        key: key.into(),
        by: by.into(),
        conversation: None,
        turn: None,
        pid: 1,
        saw_secret: false,
    }
}

fn pturn(turn: &str, client: &str, by: &str, status: &str, cont: bool) -> ProviderTurn {
    ProviderTurn {
        thread: "th".into(),
        turn: turn.into(),
        client_id: Some(client.into()),
        status: status.into(),
        continuation: cont,
        authorized_by: by.into(),
    }
}

fn event(seq: i64, kind: &str, data: Value) -> Value {
    json!({ "v": 1, "task_id": "task-1", "seq": seq, "run_id": "run-1", "ts_ms": seq, "kind": kind, "data": data })
}

fn turn_view(row: i64, message: &str, kind: &str, status: &str) -> Value {
    json!({ "turn_row": row, "run_id": "run-1", "message_id": message, "kind": kind,
            "client_id": message, "provider_turn_id": null, "status": status })
}

fn run_view(run: &str, kind: &str, status: &str, conversation: &str, turns: Vec<Value>) -> Value {
    json!({ "run_id": run, "task_id": "task-1", "kind": kind, "trigger_message_id": "m1",
            "status": status, "cause": null, "conversation_id": conversation,
            "owner_epoch": 1, "created_ms": 1, "turns": turns })
}

/// A healthy clean cell: one message, one turn, one effect, completed.
fn good() -> Evidence {
    Evidence {
        spec: Some(CellSpec {
            cell_id: "t001".into(),
            scenario_id: "s".into(),
            cut: Some(Cut {
                point: "runner.turn_intent.persisted".into(),
                n: 1,
            }),
            fault: Some(Fault::KillRunner),
            seed: 1,
            then: Vec::new(),
        }),
        fault: Some(Fault::KillRunner),
        reached_cut: true,
        exchanges: vec![Exchange {
            kind: "submit".into(),
            message_id: "m1".into(),
            text: "Create hello.txt".into(),
            status: 201,
            body: json!({ "run_id": "run-1" }),
        }],
        task: json!({
            "task_id": "task-1", "profile": "runner-codex", "workspace": "/ws",
            "state": "completed", "cause": null, "current_run": "run-1", "queued_messages": [],
            "runs": [run_view("run-1", "initial", "completed", "th",
                              vec![turn_view(1, "m1", "primary", "completed")])]
        }),
        events: vec![
            event(1, "task.admitted", json!({})),
            event(
                2,
                "turn.intent",
                json!({ "turn_row": 1, "client_id": "m1", "message_id": "m1", "kind": "primary" }),
            ),
            event(
                3,
                "turn.accepted",
                json!({ "turn_row": 1, "provider_turn_id": "pt1" }),
            ),
            event(
                4,
                "turn.finished",
                json!({ "turn_row": 1, "status": "completed" }),
            ),
            event(
                5,
                "run.settled",
                json!({ "state": "completed", "cause": null }),
            ),
        ],
        journal: vec![
            turn_start("m1", "Create hello.txt"),
            recorded("pt1", "m1", "m1", false),
            entry(
                EntryKind::Fact,
                Some("effect.exited"),
                json!({ "key": "write-hello", "by": "m1", "exit_code": 0 }),
            ),
            finished("pt1", "completed"),
        ],
        ledger: vec![ledger("write-hello", "m1")],
        provider_turns: vec![pturn("pt1", "m1", "m1", "completed", false)],
        canary: "turncut-canary-1".into(),
        ..Evidence::default()
    }
}

fn verdict(results: &[OracleResult], name: &str) -> (Verdict, String) {
    let r = results.iter().find(|r| r.oracle == name).unwrap();
    (r.verdict, r.message.clone())
}

fn assert_only_fails(e: &Evidence, name: &str, needle: &str) {
    let results = judge(e);
    let (v, m) = verdict(&results, name);
    assert_eq!(v, Verdict::Fail, "{name} must fail: {results:#?}");
    assert!(m.contains(needle), "{name}: {m}");
}

#[test]
fn contract_catches_a_turn_started_without_its_durable_intent() {
    // The provider got a turn start for m2, which has no intent in the run
    // log (its intent write failed, and the runner sent it anyway).
    let mut e = good();
    e.journal.push(turn_start("m2", "more"));
    let results = judge(&e);
    let (v, m) = verdict(&results, "contract");
    assert_eq!(v, Verdict::Fail, "{results:#?}");
    assert!(m.contains("write-ahead record"), "{m}");
    // A re-send that the run log explains (the provider never recorded
    // the accepted turn) is covered.
    let mut e = good();
    e.journal.push(turn_start("m1", "Create hello.txt"));
    assert_only_fails(&e, "contract", "2 turn start(s) for m1");
    e.events.push(event(
        9,
        "turn.absent_at_provider",
        json!({ "message_id": "m1" }),
    ));
    assert_ne!(verdict(&judge(&e), "contract").0, Verdict::Fail);
}

#[test]
fn a_healthy_cell_passes_every_oracle() {
    let results = judge(&good());
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
    assert_eq!(results.len(), ORACLES.len());
}

#[test]
fn no_replay_turn_catches_a_replayed_message() {
    let mut e = good();
    e.journal.push(turn_start("m1", "Create hello.txt"));
    e.provider_turns
        .push(pturn("pt2", "m1", "m1", "completed", false));
    assert_only_fails(&e, "no-replay.turn", "started 2 primary turns");
    // A delivery the provider never recorded is not a turn: re-sending
    // it after the provider died is the contract's "start it once".
    let mut e = good();
    e.journal.push(turn_start("m1", "Create hello.txt"));
    assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
}

#[test]
fn no_replay_turn_catches_a_second_continuation_and_a_resent_message() {
    let mut e = good();
    e.journal
        .push(turn_start("m1#continuation", "[turncut:continue] go on"));
    e.journal
        .push(turn_start("m1#continuation", "[turncut:continue] go on"));
    e.provider_turns
        .push(pturn("pc1", "m1#continuation", "m1", "interrupted", true));
    e.provider_turns
        .push(pturn("pc2", "m1#continuation", "m1", "completed", true));
    assert_only_fails(&e, "no-replay.turn", "2 continuations");
    let mut e = good();
    e.journal
        .push(turn_start("m1#continuation", "Create hello.txt"));
    assert_only_fails(&e, "no-replay.turn", "re-sends the message");
    let mut e = good();
    e.journal.push(turn_start("who-knows", "x"));
    assert_only_fails(&e, "no-replay.turn", "never issued");
}

#[test]
fn no_replay_effect_catches_a_double_effect() {
    let mut e = good();
    e.ledger.push(ledger("write-hello", "m1"));
    assert_only_fails(&e, "no-replay.effect", "ran 2 times");
    // A Retry is a new authorization: the same key under r1 is fine.
    let mut e = good();
    e.ledger.push(ledger("write-hello", "r1"));
    assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
}

#[test]
fn cause_structured_catches_null_unknown_and_mislabelled_causes() {
    let mut e = good();
    e.task["state"] = json!("failed");
    assert_only_fails(&e, "cause.structured", "has no cause");
    e.task["cause"] =
        json!({ "code": "something_went_wrong", "recoverable": false, "message": "x" });
    assert_only_fails(&e, "cause.structured", "outside the closed set");
    e.task["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": true, "message": "x" });
    assert_only_fails(&e, "cause.structured", "recoverable: false");
    let mut e = good();
    e.events.push(event(6, "turn.failed", json!({ "cause": { "code": "provider_turn_lost_on_restore", "recoverable": false, "message": "x" } })));
    assert_only_fails(&e, "cause.structured", "recoverable: true");
    let mut e = good();
    e.exchanges.push(Exchange {
        kind: "follow_up".into(),
        message_id: "f1".into(),
        text: "x".into(),
        status: 409,
        body: json!({ "reason": "nope" }),
    });
    assert_only_fails(&e, "cause.structured", "without a listed reason");
}

#[test]
fn contract_catches_an_unjustified_fail_closed_and_a_false_adoption() {
    let mut e = good();
    e.journal.truncate(0);
    e.provider_turns.clear();
    e.task["state"] = json!("failed");
    e.task["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
    e.task["runs"][0]["status"] = json!("failed");
    e.task["runs"][0]["cause"] = e.task["cause"].clone();
    e.events.retain(|ev| ev["kind"] != "turn.accepted");
    e.ledger.clear();
    assert_only_fails(&e, "contract", "provably safe");

    let mut e = good();
    e.provider_turns = vec![pturn("pt1", "m1", "m1", "interrupted", false)];
    e.events.insert(
        3,
        event(
            4,
            "turn.finished",
            json!({ "turn_row": 1, "status": "completed", "adopted": true }),
        ),
    );
    assert_only_fails(&e, "contract", "did not complete it");

    let mut e = good();
    e.task["runs"][0]["status"] = json!("failed");
    e.task["runs"][0]["cause"] =
        json!({ "code": "continuation_exhausted", "recoverable": false, "message": "x" });
    assert_only_fails(&e, "contract", "without a continuation");
}

/// Found by `turncut explore`: a turn whose message the provider never
/// recorded is sent again and accepted under a new provider turn id; a
/// later adoption is of that turn, not of the first.
#[test]
fn an_adoption_is_judged_against_the_rows_latest_acceptance() {
    // good(): m1 accepted as pt1, which the provider completed.
    let mut e = good();
    e.provider_turns
        .insert(0, pturn("pt0", "m1", "m1", "interrupted", false));
    let first = event(
        0,
        "turn.accepted",
        json!({ "turn_row": 1, "provider_turn_id": "pt0" }),
    );
    let absent = event(
        0,
        "turn.absent_at_provider",
        json!({ "message_id": "m1", "provider_turn_id": "pt0" }),
    );
    e.events.splice(2..2, [first, absent]);
    for (i, ev) in e.events.iter_mut().enumerate() {
        ev["seq"] = json!(i + 1);
    }
    e.events[5]["data"]["adopted"] = json!(true);
    let (_, message) = verdict(&judge(&e), "contract");
    assert!(!message.contains("did not complete it"), "{message}");
    e.provider_turns[1].status = "interrupted".into();
    assert!(verdict(&judge(&e), "contract").1.contains("pt1"));
}

#[test]
fn an_adoption_of_a_row_never_accepted_is_judged_by_its_client_id() {
    // The runner sent m1, was cut before recording the acceptance, and the
    // restarted runner found the turn by its client id, completed (pt1).
    let mut e = good();
    e.events.retain(|ev| ev["kind"] != "turn.accepted");
    for (i, ev) in e.events.iter_mut().enumerate() {
        ev["seq"] = json!(i + 1);
    }
    let finished = e
        .events
        .iter()
        .position(|ev| ev["kind"] == "turn.finished")
        .unwrap();
    e.events[finished]["data"]["adopted"] = json!(true);
    let (_, message) = verdict(&judge(&e), "contract");
    assert!(!message.contains("did not complete it"), "{message}");
    e.provider_turns[0].status = "interrupted".into();
    let (_, message) = verdict(&judge(&e), "contract");
    assert!(message.contains("adopted turn Some(\"pt1\")"), "{message}");
}

#[test]
fn closing_an_active_turn_needs_a_pending_approval_or_an_approved_command_left_unfinished() {
    // The run closed after answering `accept` for command call_x.
    let closed = |item_completed: bool| {
        let mut e = good();
        e.task["state"] = json!("failed");
        e.task["runs"][0]["status"] = json!("failed");
        e.task["runs"][0]["cause"] =
            json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
        e.events.insert(
            3,
            event(
                0,
                "provider_request",
                json!({ "turn_row": 1, "request_id": "0", "status": "answered", "decision": "accept", "item_id": "call_x" }),
            ),
        );
        if item_completed {
            e.events.insert(
                4,
                event(
                    0,
                    "item.completed",
                    json!({ "turn_row": 1, "item": { "type": "commandExecution", "id": "call_x" } }),
                ),
            );
        }
        for (i, ev) in e.events.iter_mut().enumerate() {
            ev["seq"] = json!(i + 1);
        }
        e
    };
    assert_eq!(verdict(&judge(&closed(false)), "contract").0, Verdict::Pass);
    assert_only_fails(
        &closed(true),
        "contract",
        "no approved command was left unfinished",
    );
}

#[test]
fn continuing_a_completed_turn_is_wrong_except_where_the_protocol_cannot_tell() {
    // The runner continued turn pt1 although the provider completed it.
    let continued = |profile: &str| {
        let mut e = good();
        e.spec.as_mut().unwrap().scenario_id = format!("everyday.{profile}.local.single");
        e.events.insert(
            3,
            event(
                4,
                "turn.failed",
                json!({ "turn_row": 1, "provider_turn_id": "pt1", "cause": { "code": "provider_turn_lost_on_restore", "recoverable": true, "message": "x" } }),
            ),
        );
        for (i, ev) in e.events.iter_mut().enumerate() {
            ev["seq"] = json!(i + 1);
        }
        e
    };
    assert_only_fails(&continued("runner-codex"), "contract", "should be adopted");
    assert_only_fails(
        &continued("runner-opencode"),
        "contract",
        "should be adopted",
    );
    // ACP's session/load replay cannot show completion: continuing is the
    // documented safe side there.
    let results = judge(&continued("runner-acpx-claude"));
    assert_eq!(
        verdict(&results, "contract").0,
        Verdict::Pass,
        "{results:#?}"
    );
}

#[test]
fn contract_catches_a_tool_outcome_not_persisted_before_moving_on() {
    let tool =
        |seq: i64, kind: &str, key: &str| event(seq, kind, json!({ "turn_row": 1, "key": key }));
    let mut e = good();
    e.events.truncate(3);
    e.events.extend([
        tool(4, "tool.executing", "call_a"),
        tool(5, "tool.outcome", "call_a"),
        tool(6, "tool.executing", "call_b"),
        tool(7, "tool_outcome_uncertain", "call_b"),
        tool(8, "model.output", ""),
        event(
            9,
            "turn.finished",
            json!({ "turn_row": 1, "status": "completed" }),
        ),
        event(
            10,
            "run.settled",
            json!({ "state": "completed", "cause": null }),
        ),
    ]);
    let results = judge(&e);
    assert_eq!(
        verdict(&results, "contract").0,
        Verdict::Pass,
        "{results:#?}"
    );
    // B starts before A's outcome is durable.
    e.events.remove(4);
    for (i, ev) in e.events.iter_mut().enumerate() {
        ev["seq"] = json!(i + 1);
    }
    assert_only_fails(
        &e,
        "contract",
        "before persisting the outcome of tool call call_a",
    );
}

#[test]
fn evidence_reads_turn_starts_of_every_protocol() {
    let mut e = good();
    e.journal = vec![
        turn_start("m1", "Create hello.txt"),
        entry(
            EntryKind::In,
            None,
            json!({ "jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": { "sessionId": "s", "prompt": [{ "type": "text", "text": "hi" }], "_meta": { "messageId": "m2" } } }),
        ),
        entry(
            EntryKind::In,
            None,
            json!({ "method": "POST", "path": "/session/ses_1/prompt_async", "body": { "messageID": "msg_0190a1b2c3d4e5f6_m3__continuation", "parts": [{ "type": "text", "text": "[turncut:continue] go" }] } }),
        ),
    ];
    let starts: Vec<(Option<String>, String)> = e
        .turn_starts()
        .into_iter()
        .map(|s| (s.client_id, s.text))
        .collect();
    assert_eq!(
        starts,
        vec![
            (Some("m1".into()), "Create hello.txt".into()),
            (Some("m2".into()), "hi".into()),
            (
                Some("m3#continuation".into()),
                "[turncut:continue] go".into()
            ),
        ]
    );
    assert_eq!(crate::evidence::controller_id("msg_zz_m1"), "msg_zz_m1");
}

#[test]
fn retry_works_catches_a_reused_conversation_and_a_reasonless_refusal() {
    let mut e = retried();
    e.task["runs"][1]["conversation_id"] = json!("th");
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
        kind: "retry".into(),
        message_id: "r1".into(),
        text: String::new(),
        status,
        body,
    }
}

/// Follow-up `f1`, accepted (202).
fn follow_up_f1() -> Exchange {
    Exchange {
        kind: "follow_up".into(),
        message_id: "f1".into(),
        text: "more".into(),
        status: 202,
        body: json!({}),
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
    e.task["queued_messages"] = json!(["f1"]);
    assert_only_fails(&e, "no-loss", "completed without consuming it");
    e.task["state"] = json!("failed");
    assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
    e.task["state"] = json!("completed");
    e.task["queued_messages"] = json!([]);
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
        kind: "read.task".into(),
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
    e.task["state"] = json!("running");
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
    assert_unknown_without(Task, &task_oracles, |e| e.task = Value::Null);
    assert_unknown_without(Task, &task_oracles, |e| e.task = json!({ "error": "x" }));
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
        let runs = e.task.as_object_mut().unwrap().remove("runs").unwrap();
        e.task["run_list"] = runs;
    });
    // A turn's `kind` becomes `type`.
    assert_unknown_without(Source::Task, &["contract"], |e| {
        let t = e.task["runs"][0]["turns"][0].as_object_mut().unwrap();
        let kind = t.remove("kind").unwrap();
        t.insert("type".into(), kind);
    });
    // A run-log event of another version, or with a renamed envelope field.
    assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
        e.events[0]["v"] = json!(2)
    });
    assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
        let ev = e.events[1].as_object_mut().unwrap();
        let kind = ev.remove("kind").unwrap();
        ev.insert("type".into(), kind);
    });
}

#[test]
fn an_indeterminate_follow_up_may_be_absent_but_is_consumed_once_if_present() {
    let info = |e: &mut Evidence| {
        e.exchanges.push(Exchange {
            kind: "follow_up".into(),
            message_id: "f1".into(),
            text: "more".into(),
            status: 0,
            body: json!({ "error": "connection reset" }),
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
    e.task["queued_messages"] = json!(["f1"]);
    assert_only_fails(&e, "no-loss", "completed without consuming it");
}

#[test]
fn ops_record_ok_fail_and_info() {
    use crate::evidence::{Op, OpResult};
    let of = |a: anyhow::Result<(u16, ())>| Op::of("follow_up", "f1", 5, &a).result;
    assert_eq!(of(Ok((202, ()))), OpResult::Ok);
    assert_eq!(of(Ok((409, ()))), OpResult::Fail);
    assert_eq!(of(Ok((503, ()))), OpResult::Info);
    assert_eq!(of(Err(anyhow::anyhow!("connection reset"))), OpResult::Info);
}

#[test]
fn a_refused_follow_up_that_reaches_the_provider_is_caught() {
    let mut e = good();
    e.exchanges.push(Exchange {
        kind: "follow_up".into(),
        message_id: "f1".into(),
        text: "more".into(),
        status: 409,
        body: json!({ "reason": "prior_owner_fence_refused" }),
    });
    assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
    e.journal.push(turn_start("f1", "more"));
    assert_only_fails(&e, "no-replay.turn", "was refused");
}

/// A healthy cell plus an admitted Retry whose run completed in a fresh
/// conversation `th2` after a recorded stop proof.
fn retried() -> Evidence {
    let mut e = good();
    e.exchanges
        .push(retry_r1(201, json!({ "run_id": "run-2" })));
    e.task["runs"].as_array_mut().unwrap().push(run_view(
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
        "retry",
        "r1",
        100,
        &Ok::<_, anyhow::Error>((201, ())),
    ));
    e.actions.push(crate::evidence::Action {
        at_ms: 150,
        what: "event.reached".into(),
        detail: json!({ "event": 2 }),
    });
}

#[test]
fn a_retry_run_cut_by_a_later_event_may_fail_only_with_a_contract_cause() {
    let mut e = retried();
    e.task["runs"][1]["status"] = json!("failed");
    e.task["runs"][1]["cause"] =
        json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
    // No event after the Retry: its run had no excuse to fail.
    assert_only_fails(&e, "retry.works", "ended failed");
    cut_after_retry(&mut e);
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    // Cut, it still needs a cause the contract lists.
    e.task["runs"][1]["cause"] = json!({ "code": "made_up", "recoverable": false, "message": "x" });
    assert!(verdict(&judge(&e), "retry.works").0 == Verdict::Fail);
}

#[test]
fn a_retry_run_cut_before_its_conversation_has_none_and_an_unanswered_retry_is_unknown() {
    let mut e = retried();
    e.task["runs"][1]["status"] = json!("failed");
    e.task["runs"][1]["conversation_id"] = Value::Null;
    e.task["runs"][1]["cause"] =
        json!({ "code": "storage_failed", "recoverable": false, "message": "x" });
    // Not cut: a Retry run without a conversation is wrong.
    assert_only_fails(&e, "retry.works", "fresh conversation");
    cut_after_retry(&mut e);
    e.actions.push(crate::evidence::Action {
        at_ms: 150,
        what: "fault.fail-write".into(),
        detail: json!({}),
    });
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
    let mut e = good();
    e.exchanges
        .push(retry_r1(0, json!({ "error": "io: Peer disconnected" })));
    assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Unknown);
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
    e.task["runs"][0]["turns"]
        .as_array_mut()
        .unwrap()
        .push(turn_view(2, "m1", "continuation", "completed"));
    e.events.insert(
        4,
        event(
            5,
            "turn.intent",
            json!({ "message_id": "m1", "kind": "continuation" }),
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
    // Failed closed, then a Retry run.
    let mut e = good();
    e.task["runs"][0]["status"] = json!("failed");
    e.task["runs"][0]["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
    e.task["runs"].as_array_mut().unwrap().push(run_view(
        "run-2",
        "retry",
        "completed",
        "th2",
        vec![],
    ));
    assert_eq!(e.path(), "failed ambiguous_turn_start → retry → completed");
    e.task = json!({ "renamed": true });
    assert_eq!(e.path(), "unknown");
}
