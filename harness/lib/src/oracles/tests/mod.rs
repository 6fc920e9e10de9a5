//! Tests of the oracles: each one is made to fail by a broken runner's
//! evidence, built from one healthy cell (`good`).
use super::*;
use crate::evidence::{Exchange, OpKind, ProviderTurn, RequestKind, TaskRead};
use crate::model::{CellSpec, Cut, Event, Fault, ScenarioId, TaskState};
use crate::run_log::{Kind, RunLogEvent};
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
        model_requests: None,
    }
}

fn event(seq: i64, kind: &str, data: Value) -> RunLogEvent {
    RunLogEvent::read(
        1,
        json!({ "v": 1, "task_id": "task-1", "seq": seq, "run_id": "run-1", "ts_ms": seq, "kind": kind, "data": data }),
    )
}

/// The JSON of something the evidence holds parsed (the task view, a
/// run-log event), to edit as a runner would have written it: read again
/// when the edit is done (the guard is dropped).
struct Edit<'a, T> {
    target: &'a mut T,
    json: Value,
    read: fn(Value) -> T,
}

impl<T> std::ops::Deref for Edit<'_, T> {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.json
    }
}

impl<T> std::ops::DerefMut for Edit<'_, T> {
    fn deref_mut(&mut self) -> &mut Value {
        &mut self.json
    }
}

impl<T> Drop for Edit<'_, T> {
    fn drop(&mut self) {
        *self.target = (self.read)(self.json.take());
    }
}

/// The task view of `e` as JSON, read again after the edit.
fn task(e: &mut Evidence) -> Edit<'_, Option<TaskRead>> {
    let json = e
        .task
        .as_ref()
        .map_or(Value::Null, |t| t.as_written().clone());
    Edit {
        target: &mut e.task,
        json,
        read: |v| Some(TaskRead::read(v)),
    }
}

/// The task view of `e` as the runner wrote it.
fn task_json(e: &Evidence) -> Value {
    e.task
        .as_ref()
        .map_or(Value::Null, |t| t.as_written().clone())
}

/// A run-log event as JSON, read again after the edit.
fn json_of(ev: &mut RunLogEvent) -> Edit<'_, RunLogEvent> {
    let json = ev.as_written().clone();
    Edit {
        target: ev,
        json,
        read: |v| RunLogEvent::read(1, v),
    }
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
            seed: 1,
            events: vec![Event {
                cut: Cut {
                    point: "runner.turn_intent.persisted".into(),
                    n: 1,
                },
                fault: Fault::KillRunner,
            }],
        }),
        fault: Some(Fault::KillRunner),
        reached_cut: true,
        exchanges: vec![Exchange {
            task: crate::scenario::FIRST_TASK.to_owned(),
            kind: RequestKind::Submit,
            message_id: "m1".into(),
            text: "Create hello.txt".into(),
            status: 201,
            body: json!({ "run_id": "run-1" }),
            state_before: None,
            expect: None,
            sent_at_ms: 0,

            answered_at_ms: 0,
            injected: false,
        }],
        task: Some(TaskRead::read(json!({
            "task_id": "task-1", "profile": "runner-codex", "workspace": "/ws",
            "state": "completed", "cause": null, "current_run": "run-1", "queued_messages": [],
            "runs": [run_view("run-1", "initial", "completed", "th",
                              vec![turn_view(1, "m1", "primary", "completed")])]
        }))),
        events: vec![
            event(
                1,
                "task.admitted",
                json!({ "message_id": "m1", "profile": "runner-codex", "run_id": "run-1" }),
            ),
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
    let r = results.iter().find(|r| r.oracle.as_str() == name).unwrap();
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
    let names: Vec<&str> = results.iter().map(|r| r.oracle.as_str()).collect();
    assert_eq!(names, ORACLES, "every oracle, once, in report order");
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
    task(&mut e)["state"] = json!("failed");
    assert_only_fails(&e, "cause.structured", "has no cause");
    task(&mut e)["cause"] =
        json!({ "code": "something_went_wrong", "recoverable": false, "message": "x" });
    assert_only_fails(&e, "cause.structured", "outside the closed set");
    task(&mut e)["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": true, "message": "x" });
    assert_only_fails(&e, "cause.structured", "recoverable: false");
    let mut e = good();
    e.events.push(event(6, "turn.failed", json!({ "turn_row": 1, "cause": { "code": "provider_turn_lost_on_restore", "recoverable": false, "message": "x" } })));
    assert_only_fails(&e, "cause.structured", "recoverable: true");
    let mut e = good();
    e.exchanges.push(Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::FollowUp,
        message_id: "f1".into(),
        text: "x".into(),
        status: 409,
        body: json!({ "reason": "nope" }),
        state_before: None,
        expect: None,
        sent_at_ms: 0,

        answered_at_ms: 0,
        injected: false,
    });
    assert_only_fails(&e, "cause.structured", "without a listed reason");
}

/// Found by `turncut explore` (codex `file-change`, schedule
/// `codex.turn_start.responded#1/kill-provider+runner.write.turn_accepted#2/kill-runner`):
/// an accepted turn the provider never recorded is an intent again once
/// `turn.absent_at_provider` says so, until its re-send is accepted; a cut
/// before that acceptance fails closed like any intent the provider
/// recorded, and that is no "persisted acceptance".
#[test]
fn an_acceptance_withdrawn_by_an_absent_turn_does_not_forbid_failing_closed() {
    let failed_closed = |e: &mut Evidence| {
        task(e)["state"] = json!("failed");
        task(e)["cause"] =
            json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
        task(e)["runs"][0]["status"] = json!("failed");
        task(e)["runs"][0]["cause"] = task_json(e)["cause"].clone();
    };
    let mut e = good();
    failed_closed(&mut e);
    let (v, m) = verdict(&judge(&e), "contract");
    assert_eq!(v, Verdict::Fail);
    assert!(m.contains("persisted the acceptance"), "{m}");
    let next = e.events.len() as i64 + 1;
    e.events.push(event(
        next,
        "turn.absent_at_provider",
        json!({ "message_id": "m1", "provider_turn_id": "pt1" }),
    ));
    let (_, m) = verdict(&judge(&e), "contract");
    assert!(!m.contains("persisted the acceptance"), "{m}");
}

#[test]
fn contract_catches_an_unjustified_fail_closed_and_a_false_adoption() {
    let mut e = good();
    e.journal.truncate(0);
    e.provider_turns.clear();
    task(&mut e)["state"] = json!("failed");
    task(&mut e)["cause"] =
        json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] = task_json(&e)["cause"].clone();
    e.events.retain(|ev| ev.kind() != Kind::TurnAccepted);
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
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] =
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
        json_of(ev)["seq"] = json!(i + 1);
    }
    json_of(&mut e.events[5])["data"]["adopted"] = json!(true);
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
    e.events.retain(|ev| ev.kind() != Kind::TurnAccepted);
    for (i, ev) in e.events.iter_mut().enumerate() {
        json_of(ev)["seq"] = json!(i + 1);
    }
    let finished = e
        .events
        .iter()
        .position(|ev| ev.kind() == Kind::TurnFinished)
        .unwrap();
    json_of(&mut e.events[finished])["data"]["adopted"] = json!(true);
    let (_, message) = verdict(&judge(&e), "contract");
    assert!(!message.contains("did not complete it"), "{message}");
    e.provider_turns[0].status = "interrupted".into();
    let (_, message) = verdict(&judge(&e), "contract");
    assert!(message.contains("adopted turn Some(\"pt1\")"), "{message}");
}

/// A fault cut the cell, and the run closed `active_turn_recovery_closed`.
fn closed_active(e: &mut Evidence) {
    e.events_applied = 1;
    task(e)["state"] = json!("failed");
    task(e)["runs"][0]["status"] = json!("failed");
    task(e)["runs"][0]["cause"] =
        json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
}

#[test]
fn closing_an_active_turn_needs_a_pending_approval_or_an_approved_command_left_unfinished() {
    // The run closed after answering `accept` for command call_x, when a
    // fault cut it.
    let closed = |item_completed: bool| {
        let mut e = good();
        closed_active(&mut e);
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
            json_of(ev)["seq"] = json!(i + 1);
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

/// Claude Code's `session/load` replay can lack the end of a command the
/// runner saw end (its transcript is written on a timer): a continuation
/// would run it again, so the run closes, and that justifies the close.
#[test]
fn a_close_is_justified_when_the_agent_s_replay_lacks_a_command_the_runner_saw_end() {
    let closed = |replayed_status: &str| {
        let mut e = good();
        closed_active(&mut e);
        e.events.insert(
            3,
            event(
                0,
                "item.completed",
                json!({ "turn_row": 1, "item": { "type": "toolCall", "toolCallId": "toolu_1", "status": "completed" } }),
            ),
        );
        for (i, ev) in e.events.iter_mut().enumerate() {
            json_of(ev)["seq"] = json!(i + 1);
        }
        let update = json!({ "jsonrpc": "2.0", "method": "session/update", "params": { "sessionId": "th",
            "update": { "sessionUpdate": "tool_call", "toolCallId": "toolu_1", "status": replayed_status } } });
        e.journal = vec![
            entry(
                EntryKind::In,
                None,
                json!({ "jsonrpc": "2.0", "id": 2, "method": "session/load", "params": { "sessionId": "th" } }),
            ),
            entry(EntryKind::Out, None, update),
            entry(
                EntryKind::Out,
                None,
                json!({ "jsonrpc": "2.0", "id": 2, "result": {} }),
            ),
        ];
        e
    };
    assert_eq!(
        verdict(&judge(&closed("pending")), "contract").0,
        Verdict::Pass
    );
    assert_only_fails(
        &closed("completed"),
        "contract",
        "no approved command was left unfinished",
    );
}

/// ACP's row "turn accepted | user message absent": a real agent killed
/// right after the prompt was accepted stored nothing of it (codex-acp,
/// `runner-acpx-codex-real` wave, seed 44), and the run closes. On Codex
/// the same close is wrong (it re-sends: the turn reached no model).
#[test]
fn an_acp_turn_accepted_and_absent_from_the_agent_s_store_justifies_the_close() {
    let closed = |profile: &str, recorded: bool| {
        let mut e = good();
        e.spec.as_mut().unwrap().scenario_id =
            ScenarioId::new("everyday", profile, "local", "single");
        closed_active(&mut e);
        task(&mut e)["runs"][0]["turns"][0]["provider_turn_id"] = json!("m1");
        task(&mut e)["runs"][0]["turns"][0]["status"] = json!("accepted");
        if !recorded {
            // Nothing of it in the agent's store, and no fact of it in its
            // journal (a real agent's is the tap's wire alone).
            e.provider_turns.clear();
            e.journal
                .retain(|en| en.fact.as_deref() != Some("turn.recorded"));
        }
        e
    };
    let acp = closed("runner-acpx-claude", false);
    assert!(
        !verdict(&judge(&acp), "contract")
            .1
            .contains("no approved command"),
        "{:?}",
        verdict(&judge(&acp), "contract")
    );
    for e in [
        closed("runner-acpx-claude", true),
        closed("runner-codex", false),
    ] {
        let (_, m) = verdict(&judge(&e), "contract");
        assert!(m.contains("no approved command was left unfinished"), "{m}");
    }
}

#[test]
fn continuing_a_completed_turn_is_wrong_except_where_the_protocol_cannot_tell() {
    // The runner continued turn pt1 although the provider completed it.
    let continued = |profile: &str| {
        let mut e = good();
        e.spec.as_mut().unwrap().scenario_id =
            ScenarioId::new("everyday", profile, "local", "single");
        e.events.insert(
            3,
            event(
                4,
                "turn.failed",
                json!({ "turn_row": 1, "provider_turn_id": "pt1", "cause": { "code": "provider_turn_lost_on_restore", "recoverable": true, "message": "x" } }),
            ),
        );
        for (i, ev) in e.events.iter_mut().enumerate() {
            json_of(ev)["seq"] = json!(i + 1);
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
        json_of(ev)["seq"] = json!(i + 1);
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

mod detection;
mod durable;
mod model;
mod read_faults;
mod runs;
mod tasks;
