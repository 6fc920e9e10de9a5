//! The `upstream` oracle made to fail: a cause that does not match the
//! injected failure, a wrong `recoverable`, an automatic retry after an
//! expired credential, a retry sooner than `Retry-After`.

use serde_json::{Value, json};
use wire::journal::{Entry, EntryKind};

use super::*;
use crate::evidence::{Action, ActionKind, Evidence, Op, OpKind, OpResult, RequestKind, TaskRead};
use crate::model::Verdict;

fn entry(kind: EntryKind, fact: Option<&str>, ts_ms: u64, data: Value) -> Entry {
    Entry {
        v: 1,
        generation: "g".into(),
        seq: 0,
        ts_ms,
        kind,
        fact: fact.map(str::to_owned),
        data,
    }
}

fn request(ts_ms: u64) -> Entry {
    entry(
        EntryKind::In,
        None,
        ts_ms,
        json!({ "method": "POST", "path": "/v1/responses", "body": {} }),
    )
}

fn answered(ts_ms: u64, status: u16) -> Entry {
    entry(
        EntryKind::Out,
        None,
        ts_ms,
        json!({ "method": "POST", "path": "/v1/responses", "status": status, "body": {} }),
    )
}

fn injected(ts_ms: u64, point: &str, fault: &str) -> Entry {
    entry(
        EntryKind::Fact,
        Some("fault.answer"),
        ts_ms,
        json!({ "point": point, "answer": fault }),
    )
}

/// A task whose one run (created at 1) ended `status` with `cause`.
fn evidence(status: &str, cause: Option<(&str, bool)>, journal: Vec<Entry>) -> Evidence {
    created_at(1, status, cause, journal)
}

/// As [`evidence`], its run created at `created_ms`.
fn created_at(
    created_ms: u64,
    status: &str,
    cause: Option<(&str, bool)>,
    journal: Vec<Entry>,
) -> Evidence {
    let cause = cause.map(|(c, r)| json!({ "code": c, "recoverable": r, "message": "m" }));
    Evidence {
        task: Some(TaskRead::read(json!({
            "task_id": "task-1", "profile": "runner-native-openai", "workspace": "/ws",
            "state": status, "cause": cause, "current_run": "run-1", "queued_messages": [],
            "runs": [{ "run_id": "run-1", "task_id": "task-1", "kind": "initial",
                       "trigger_message_id": "m1", "status": status, "cause": cause,
                       "conversation_id": "c", "owner_epoch": 1, "created_ms": created_ms, "turns": [] }]
        }))),
        journal,
        ..Default::default()
    }
}

fn verdict(e: &Evidence) -> (Verdict, String) {
    let r = upstream(e);
    (r.verdict, r.message)
}

#[test]
fn a_rate_limit_closed_as_a_protocol_error_fails_and_its_own_cause_passes() {
    let journal = || {
        vec![
            request(100),
            injected(101, "model.responses.received", "rate-limit"),
            answered(102, 429),
        ]
    };
    let bad = evidence(
        "failed",
        Some(("provider_protocol_error", false)),
        journal(),
    );
    let (v, m) = verdict(&bad);
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("upstream_rate_limited"), "{m}");
    let wrong_flag = evidence("failed", Some(("upstream_rate_limited", false)), journal());
    assert_eq!(verdict(&wrong_flag).0, Verdict::Fail);
    let good = evidence("failed", Some(("upstream_rate_limited", true)), journal());
    assert_eq!(verdict(&good).0, Verdict::Pass);
}

#[test]
fn a_transient_failure_may_be_retried_to_completion_but_not_before_retry_after() {
    let mut journal = vec![
        request(100),
        injected(101, "model.responses.received", "rate-limit"),
        answered(102, 429),
        request(1103),
    ];
    assert_eq!(
        verdict(&evidence("completed", None, journal.clone())).0,
        Verdict::Pass
    );
    journal[3] = request(400);
    let (v, m) = verdict(&evidence("completed", None, journal));
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("Retry-After"), "{m}");
}

#[test]
fn an_expired_credential_is_never_retried_by_the_runner() {
    let journal = vec![
        request(100),
        injected(101, "model.responses.received", "auth-expired"),
        answered(102, 401),
        request(400),
        answered(401, 401),
    ];
    let e = evidence(
        "failed",
        Some(("upstream_unauthorized", false)),
        journal.clone(),
    );
    let (v, m) = verdict(&e);
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("by itself"), "{m}");
    // After the controller's Retry, a request is the Retry's.
    let mut e = evidence("failed", Some(("upstream_unauthorized", false)), journal);
    e.ops.push(Op {
        kind: OpKind::Request(RequestKind::Retry),
        message_id: "r1".into(),
        at_ms: 300,
        result: OpResult::Ok,
        status: Some(201),
        error: None,
    });
    assert_eq!(verdict(&e).0, Verdict::Pass);
    // Completing after an expired credential is impossible without a retry.
    let done = evidence(
        "completed",
        None,
        vec![
            request(100),
            injected(101, "model.responses.received", "auth-expired"),
        ],
    );
    assert_eq!(verdict(&done).0, Verdict::Fail);
}

#[test]
fn an_error_answer_to_a_lookup_must_close_provider_lookup_failed() {
    let journal = || vec![injected(50, "codex.thread_read.received", "error-answer")];
    let absent = evidence("completed", None, journal());
    assert_eq!(verdict(&absent).0, Verdict::Fail);
    let closed = evidence("failed", Some(("provider_lookup_failed", false)), journal());
    assert_eq!(verdict(&closed).0, Verdict::Pass);
    let other = evidence(
        "failed",
        Some(("provider_protocol_error", false)),
        journal(),
    );
    assert_eq!(verdict(&other).0, Verdict::Fail);
    assert!(justifies(&closed, "provider_lookup_failed"));
    assert!(!justifies(&closed, "provider_protocol_error"));
}

#[test]
fn no_injection_judges_nothing_and_no_run_is_unknown() {
    assert_eq!(
        verdict(&evidence("completed", None, vec![request(1)])).0,
        Verdict::Pass
    );
    let e = created_at(
        5,
        "failed",
        None,
        vec![injected(0, "model.responses.received", "overload")],
    );
    assert_eq!(verdict(&e).0, Verdict::Unknown);
}

#[test]
fn without_the_model_api_s_journal_the_harness_s_action_names_the_fault() {
    let acted = |cause: (&str, bool)| {
        let mut e = evidence("failed", Some(cause), vec![]);
        e.started_ms = 10;
        e.actions.push(Action {
            at_ms: 5,
            what: ActionKind::Fault(crate::model::Fault::ContextOverflow),
            detail: json!({ "point": "model.responses.received" }),
        });
        e
    };
    let (v, m) = verdict(&acted(("provider_protocol_error", false)));
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("context_window_exceeded"), "{m}");
    // The cause is right; whether the runner retried is not judged.
    assert_eq!(
        verdict(&acted(("context_window_exceeded", false))).0,
        Verdict::Unknown
    );
}

/// A real product's cell: its model API journals apart from the product
/// (`model_journal`), and the oracle judges from there, naming that
/// journal. The product's own retries of the failure (Claude Code retries
/// a 401 ten times) are not the runner's; a turn the runner starts after it
/// recorded the failure is.
#[test]
fn a_real_product_s_model_api_journal_is_judged_and_named() {
    let model = vec![
        request(100),
        injected(101, "model.responses.received", "auth-expired"),
        answered(102, 401),
        request(400),
    ];
    let mut e = evidence(
        "failed",
        Some(("upstream_protocol_error", false)),
        Vec::new(),
    );
    e.model_journal = model;
    let r = upstream(&e);
    assert_eq!(r.verdict, Verdict::Fail, "{}", r.message);
    assert!(
        r.evidence.iter().any(|x| x == "model-journal:2"),
        "{:?}",
        r.evidence
    );
    let mut e = evidence("failed", Some(("upstream_unauthorized", false)), Vec::new());
    e.model_journal = vec![
        injected(101, "model.responses.received", "auth-expired"),
        request(400),
    ];
    assert_eq!(verdict(&e).0, Verdict::Pass, "the product's own retry");
    e.events.push(crate::run_log::RunLogEvent::read(
        1,
        json!({ "v": 1, "task_id": "task-1", "seq": 1, "run_id": "run-1", "ts_ms": 500,
                "kind": "turn.failed", "data": { "turn_row": 1,
                "cause": { "code": "upstream_unauthorized", "recoverable": false, "message": "m" } } }),
    ));
    e.journal.push(entry(
        EntryKind::In,
        None,
        600,
        json!({ "method": "turn/start", "params": { "threadId": "th", "input": [] } }),
    ));
    let (v, m) = verdict(&e);
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("started a turn again by itself"), "{m}");
}

/// A cell of `profile` whose provider's model failed with `fault` at its
/// model point (t=100), the provider failed the turn (t=110), and the
/// runner sent `turn/start` at `start_ms`; `recorded` adds the runner's
/// own `turn.failed` with `cause` at t=120.
fn provider_failed(profile: &str, fault: &str, start_ms: u64, recorded: Option<&str>) -> Evidence {
    let point = if profile.contains("acpx") {
        "acp.model.requested"
    } else {
        "codex.model.requested"
    };
    let journal = vec![
        injected(100, point, fault),
        entry(
            EntryKind::Fact,
            Some("turn.finished"),
            110,
            json!({ "status": "failed" }),
        ),
        entry(
            EntryKind::In,
            None,
            start_ms,
            json!({ "method": "turn/start", "params": { "threadId": "th", "input": [] } }),
        ),
    ];
    let mut e = evidence("failed", Some(("upstream_unauthorized", false)), journal);
    e.spec = Some(crate::model::CellSpec {
        cell_id: "t001".into(),
        scenario_id: format!("restart-chaos.{profile}.local.upstream-faults")
            .as_str()
            .into(),
        seed: 1,
        events: Vec::new(),
    });
    if let Some(code) = recorded {
        let cause = json!({ "code": code, "recoverable": false, "message": "m" });
        e.events.push(crate::run_log::RunLogEvent::read(
            1,
            json!({ "v": 1, "task_id": "task-1", "seq": 1, "run_id": "run-1", "ts_ms": 120,
                    "kind": "turn.failed", "data": { "turn_row": 1, "cause": cause } }),
        ));
    }
    e
}

/// A turn the runner starts after the provider failed one upstream is its
/// retry where the provider's lookup tells why (Codex), and on ACP once the
/// runner recorded the failure itself; before it, on ACP, a continuation
/// after a restart is the contract's recovery of a turn it cannot tell lost.
#[test]
fn a_turn_started_after_a_provider_failed_one_upstream_is_the_runner_s_retry() {
    let codex = provider_failed("runner-codex", "auth-expired", 200, None);
    let (v, m) = verdict(&codex);
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(m.contains("started a turn again by itself"), "{m}");
    let acp_unknown = provider_failed("runner-acpx-claude", "auth-expired", 200, None);
    assert_eq!(verdict(&acp_unknown).0, Verdict::Pass);
    let acp_known = provider_failed(
        "runner-acpx-claude",
        "auth-expired",
        200,
        Some("upstream_unauthorized"),
    );
    assert_eq!(verdict(&acp_known).0, Verdict::Fail);
    // A 429: a start sooner than its Retry-After is a retry; one after it
    // is allowed (the cells' cause is wrong for a 429: that fails apart).
    let (_, soon) = verdict(&provider_failed("runner-codex", "rate-limit", 300, None));
    assert!(soon.contains("sooner than its Retry-After"), "{soon}");
    let (_, late) = verdict(&provider_failed("runner-codex", "rate-limit", 1200, None));
    assert!(!late.contains("by itself"), "{late}");
}

/// A Retry counts from when its first request was sent: a turn started
/// after that may be the Retry's, whenever its answer came.
#[test]
fn a_turn_started_after_a_retry_was_sent_is_the_retry_s_even_before_its_answer() {
    let mut e = provider_failed("runner-codex", "auth-expired", 200, None);
    e.ops.push(Op {
        kind: OpKind::Request(RequestKind::Retry),
        message_id: "r1".into(),
        at_ms: 250,
        result: OpResult::Ok,
        status: Some(201),
        error: None,
    });
    assert_eq!(verdict(&e).0, Verdict::Fail, "answered after the start");
    e.exchanges.push(crate::evidence::Exchange {
        kind: RequestKind::Retry,
        task: "task-1".into(),
        message_id: "r1".into(),
        text: String::new(),
        status: 201,
        body: json!({}),
        state_before: None,
        expect: None,
        sent_at_ms: 150,
        answered_at_ms: 250,
        injected: false,
    });
    let (v, m) = verdict(&e);
    assert_eq!(v, Verdict::Pass, "sent before the start: {m}");
}

/// A provider held at the fault's cut answers it only once released: here
/// after the second event killed the runner (t=688), journaled at t=741.
/// The restarted runner stopped the provider before it recorded the
/// failure, and the turn it found interrupted was closed
/// `ambiguous_turn_start`: the kill decides, as it came after the fault was
/// reached (t=181). Found under `--stress 8`, seed 2.
#[test]
fn an_event_after_the_fault_was_reached_may_decide_the_run_whenever_the_answer_was_journaled() {
    let held = |reached: bool| {
        let journal = vec![injected(741, "codex.model.requested", "auth-expired")];
        let mut e = evidence("failed", Some(("ambiguous_turn_start", false)), journal);
        if reached {
            e.actions.push(Action {
                at_ms: 181,
                what: ActionKind::CutReached,
                detail: json!({ "fault": "auth-expired", "point": "codex.model.requested" }),
            });
        }
        e.actions.push(Action {
            at_ms: 688,
            what: ActionKind::EventReached,
            detail: json!({ "fault": "kill-runner", "point": "runner.write.turn_accepted" }),
        });
        e
    };
    let (v, m) = verdict(&held(true));
    assert_eq!(v, Verdict::Pass, "{m}");
    let (v, m) = verdict(&held(false));
    assert_eq!(v, Verdict::Fail, "{m}");
    assert!(
        m.contains("the contract's cause is upstream_unauthorized"),
        "{m}"
    );
}
