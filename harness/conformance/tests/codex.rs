//! Codex app-server conformance: a realistic conversation passes, and each kind of broken
//! message is rejected with a violation that names what is wrong and where.
//!
//! Every case is one line over the shared `check_rejected` helper, run against the vendored
//! spec. These tests exercise the checker with hand-written messages; they deliberately do
//! not start the fake provider or the real `codex app-server`, whose transcripts are
//! checked by the crates that drive them.

use std::path::Path;
use std::time::Instant;

use conformance::{CallKind, CodexSchema, CodexSession, Direction, Violation, codex};
use serde_json::{Value, json};

use Direction::{ClientToServer as C2S, ServerToClient as S2C};

/// A thread with every field the spec requires, and plausible values.
fn thread() -> Value {
    json!({
        "id": "019a0000-0000-7000-8000-000000000001",
        "sessionId": "019a0000-0000-7000-8000-000000000002",
        "cliVersion": "0.171.0",
        "createdAt": 1_767_225_600,
        "updatedAt": 1_767_225_600,
        "cwd": "/tmp/x",
        "ephemeral": false,
        "modelProvider": "fake",
        "preview": "",
        "projectId": null,
        "source": "appServer",
        "status": {"type": "idle"},
        "turns": []
    })
}

fn thread_without(field: &str) -> Value {
    let mut thread = thread();
    thread.as_object_mut().unwrap().remove(field);
    thread
}

/// A turn in progress, as `turn/start` answers and `turn/started` announces.
fn turn() -> Value {
    json!({"id": "turn-1", "items": [], "status": "inProgress"})
}

/// The handshake, a thread, a turn, and one command approval round trip.
fn valid_exchange() -> Vec<(Direction, Value)> {
    vec![
        (
            C2S,
            json!({"id": 1, "method": "initialize",
                   "params": {"clientInfo": {"name": "turncut", "version": "0.1.0"}}}),
        ),
        (
            S2C,
            json!({"id": 1, "result": {"codexHome": "/tmp/x", "platformFamily": "unix",
                                       "platformOs": "linux", "userAgent": "x"}}),
        ),
        (C2S, json!({"method": "initialized"})),
        (
            C2S,
            json!({"id": 2, "method": "thread/start", "params": {}}),
        ),
        (
            S2C,
            json!({"method": "thread/started", "params": {"thread": thread()}}),
        ),
        (
            S2C,
            json!({"id": 2, "result": {
                "approvalPolicy": "never",
                "approvalsReviewer": "user",
                "cwd": "/tmp/x",
                "model": "gpt-5",
                "modelProvider": "fake",
                "sandbox": {"type": "dangerFullAccess"},
                "thread": thread()
            }}),
        ),
        (
            C2S,
            json!({"id": 3, "method": "turn/start", "params": {
                "threadId": thread()["id"],
                "input": [{"type": "text", "text": "hi", "text_elements": []}],
                "clientUserMessageId": "m1"
            }}),
        ),
        (S2C, json!({"id": 3, "result": {"turn": turn()}})),
        (
            S2C,
            json!({"method": "turn/started",
                   "params": {"threadId": thread()["id"], "turn": turn()}}),
        ),
        (
            S2C,
            json!({"id": 0, "method": "item/commandExecution/requestApproval", "params": {
                "threadId": thread()["id"],
                "turnId": "turn-1",
                "itemId": "item-1",
                "startedAtMs": 1_767_225_600_000_u64,
                "command": "ls",
                "cwd": "/tmp/x"
            }}),
        ),
        (C2S, json!({"id": 0, "result": {"decision": "accept"}})),
    ]
}

/// Runs `prefix`, which must conform, then `bad`, which must be rejected with a violation
/// whose text contains every one of `expected`.
fn check_rejected(prefix: &[(Direction, Value)], bad: (Direction, Value), expected: &[&str]) {
    let mut session = CodexSession::new();
    for (direction, message) in prefix {
        if let Err(violation) = session.check(*direction, message) {
            panic!("the setup message {message} should conform:\n{violation}");
        }
    }
    let (direction, message) = bad;
    let violation: Violation = match session.check(direction, &message) {
        Ok(()) => panic!("{direction} {message} should have been rejected"),
        Err(violation) => violation,
    };
    let text = violation.to_string();
    println!("{text}");
    assert_eq!(violation.direction, direction);
    assert!(
        !violation.errors.is_empty(),
        "a violation must say why:\n{text}"
    );
    for needle in expected {
        assert!(
            text.contains(needle),
            "the violation should mention {needle:?}:\n{text}"
        );
    }
}

/// The exchange up to and including the server's approval request, still unanswered.
fn until_approval_request() -> Vec<(Direction, Value)> {
    let mut exchange = valid_exchange();
    exchange.pop();
    exchange
}

#[test]
fn realistic_exchange_conforms() {
    let mut session = CodexSession::new();
    for (direction, message) in valid_exchange() {
        if let Err(violation) = session.check(direction, &message) {
            panic!("{violation}");
        }
    }
    let unanswered: Vec<_> = session.pending().collect();
    assert!(unanswered.is_empty(), "unanswered requests: {unanswered:?}");
}

#[test]
fn realistic_exchange_conforms_as_wire_lines() {
    let mut session = CodexSession::new();
    for (direction, message) in valid_exchange() {
        let line = serde_json::to_string(&message).unwrap();
        if let Err(violation) = session.check_line(direction, &line) {
            panic!("{violation}");
        }
    }
}

#[test]
fn turn_start_without_thread_id() {
    check_rejected(
        &valid_exchange(),
        (
            C2S,
            json!({"id": 9, "method": "turn/start",
                   "params": {"input": [{"type": "text", "text": "hi", "text_elements": []}]}}),
        ),
        &[
            "request `turn/start` (id 9)",
            "at /params",
            "\"threadId\" is a required property",
        ],
    );
}

#[test]
fn turn_start_with_a_text_input_missing_its_text() {
    // `UserInput` is a tagged `oneOf`; the violation must name the field the tagged
    // alternative lacks rather than say that no alternative matched.
    check_rejected(
        &valid_exchange(),
        (
            C2S,
            json!({"id": 9, "method": "turn/start",
                   "params": {"threadId": "t", "input": [{"type": "text", "text_elements": []}]}}),
        ),
        &["at /params/input/0", "\"text\" is a required property"],
    );
}

#[test]
fn jsonrpc_field() {
    check_rejected(
        &[],
        (
            C2S,
            json!({"jsonrpc": "2.0", "id": 1, "method": "thread/start", "params": {}}),
        ),
        &["at /jsonrpc", "no `jsonrpc` field"],
    );
}

#[test]
fn response_to_an_id_never_requested() {
    check_rejected(
        &valid_exchange(),
        (S2C, json!({"id": 42, "result": {}})),
        &["response (id 42)", "no client→server request with id 42"],
    );
}

#[test]
fn second_response_to_the_same_request() {
    let exchange = valid_exchange();
    let repeated = exchange[1].clone();
    check_rejected(&exchange, repeated, &["already answered"]);
}

#[test]
fn response_with_an_id_of_the_other_type() {
    // JSON-RPC ids compare by value and type, so the string "1" does not answer request 1.
    check_rejected(
        &valid_exchange()[..1],
        (
            S2C,
            json!({"id": "1", "result": {"codexHome": "/tmp/x", "platformFamily": "unix",
                                         "platformOs": "linux", "userAgent": "x"}}),
        ),
        &["no client→server request with id \"1\""],
    );
}

#[test]
fn notification_with_an_unknown_method() {
    check_rejected(
        &valid_exchange(),
        (S2C, json!({"method": "thread/exploded", "params": {}})),
        &[
            "notification `thread/exploded`",
            "not a server→client notification",
        ],
    );
}

#[test]
fn notification_sent_the_wrong_way() {
    check_rejected(
        &valid_exchange(),
        (
            C2S,
            json!({"method": "thread/started", "params": {"thread": thread()}}),
        ),
        &[
            "not a client→server notification",
            "the spec has it as a server→client notification",
        ],
    );
}

#[test]
fn approval_response_with_an_unknown_decision() {
    check_rejected(
        &until_approval_request(),
        (C2S, json!({"id": 0, "result": {"decision": "maybe"}})),
        &[
            "to `item/commandExecution/requestApproval`",
            "at /result/decision",
            "\"maybe\"",
            "expected one of \"accept\", \"acceptForSession\"",
        ],
    );
}

#[test]
fn thread_started_with_a_thread_missing_session_id() {
    check_rejected(
        &valid_exchange()[..4],
        (
            S2C,
            json!({"method": "thread/started",
                   "params": {"thread": thread_without("sessionId")}}),
        ),
        &[
            "notification `thread/started`",
            "at /params/thread",
            "\"sessionId\" is a required property",
        ],
    );
}

#[test]
fn thread_start_response_with_a_thread_missing_session_id() {
    let mut response = valid_exchange()[5].1.clone();
    response["result"]["thread"] = thread_without("sessionId");
    check_rejected(
        &valid_exchange()[..4],
        (S2C, response),
        &["to `thread/start`", "at /result/thread", "\"sessionId\""],
    );
}

#[test]
fn notification_breaking_a_rule_of_the_whole_union() {
    // `ServerNotification` declares `emittedAtMs` for every notification, next to its
    // per-method alternatives.
    let mut delta = json!({"method": "item/agentMessage/delta", "params": {
        "threadId": "t", "turnId": "u", "itemId": "i", "delta": "x"
    }});
    delta["emittedAtMs"] = json!(1_767_225_600_000_u64);
    CodexSession::new().check(S2C, &delta).unwrap();
    delta["emittedAtMs"] = json!("yesterday");
    check_rejected(&[], (S2C, delta), &["at /emittedAtMs", "\"yesterday\""]);
}

#[test]
fn request_without_required_params() {
    check_rejected(
        &[],
        (C2S, json!({"id": 1, "method": "initialize"})),
        &["\"params\" is a required property"],
    );
}

#[test]
fn reused_request_id_while_pending() {
    check_rejected(
        &valid_exchange()[..1],
        (
            C2S,
            json!({"id": 1, "method": "thread/start", "params": {}}),
        ),
        &["id 1 is already used"],
    );
}

#[test]
fn message_that_is_no_json_rpc_shape() {
    check_rejected(
        &[],
        (S2C, json!({"id": 1})),
        &["not a request, notification, response or error"],
    );
    check_rejected(&[], (S2C, json!([1, 2])), &["must be a JSON object"]);
}

#[test]
fn line_that_is_not_json() {
    let mut session = CodexSession::new();
    let violation = session.check_line(S2C, "{\"method\":").unwrap_err();
    assert!(
        violation.to_string().contains("not one JSON value"),
        "{violation}"
    );
}

#[test]
fn error_responses() {
    let mut session = CodexSession::new();
    let request = json!({"id": 7, "method": "thread/start", "params": {}});
    session.check(C2S, &request).unwrap();
    let error = json!({"id": 7, "error": {"code": -32600, "message": "bad"}});
    session.check(S2C, &error).unwrap();

    // A peer that could not parse a line answers with a null id; only the error object can
    // be checked then.
    let parse_error = json!({"id": null, "error": {"code": -32700, "message": "parse error"}});
    session.check(S2C, &parse_error).unwrap();

    check_rejected(
        &[],
        (
            S2C,
            json!({"id": null, "error": {"code": "oops", "message": "x"}}),
        ),
        &["at /error/code", "\"oops\""],
    );
    check_rejected(
        &[],
        (S2C, json!({"id": 5, "error": {"code": -1, "message": "x"}})),
        &[
            "error response (id 5)",
            "no client→server request with id 5",
        ],
    );
}

#[test]
fn method_tables_come_from_the_spec() {
    let schema = codex();
    let response_of = |direction, method| {
        schema
            .method(direction, CallKind::Request, method)
            .unwrap_or_else(|| panic!("{method} should be a {direction} request"))
            .response_schema()
            .map(str::to_owned)
    };
    assert_eq!(
        response_of(C2S, "turn/start").as_deref(),
        Some("#/definitions/v2/TurnStartResponse")
    );
    assert_eq!(
        response_of(C2S, "initialize").as_deref(),
        Some("#/definitions/InitializeResponse")
    );
    assert_eq!(
        response_of(S2C, "item/commandExecution/requestApproval").as_deref(),
        Some("#/definitions/CommandExecutionRequestApprovalResponse")
    );
    assert!(
        schema
            .method(C2S, CallKind::Notification, "initialized")
            .is_some()
    );
    assert!(
        schema
            .method(S2C, CallKind::Notification, "item/agentMessage/delta")
            .is_some()
    );
    assert!(
        schema
            .method(
                C2S,
                CallKind::Request,
                "item/commandExecution/requestApproval"
            )
            .is_none()
    );

    for (direction, kind) in [
        (C2S, CallKind::Request),
        (S2C, CallKind::Request),
        (S2C, CallKind::Notification),
        (C2S, CallKind::Notification),
    ] {
        let methods: Vec<_> = schema.methods(direction, kind).collect();
        let typed = methods
            .iter()
            .filter(|m| m.response_schema().is_some())
            .count();
        println!(
            "{direction} {kind:?}: {} methods, {typed} with a result type",
            methods.len()
        );
        assert!(!methods.is_empty());
    }
}

#[test]
fn validate_as_checks_one_type() {
    let schema = codex();
    schema
        .validate_as("#/definitions/v2/Thread", &thread())
        .unwrap();
    schema.validate_as("v2/Thread", &thread()).unwrap();

    let errors = schema
        .validate_as("#/definitions/v2/Thread", &thread_without("sessionId"))
        .unwrap_err();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("\"sessionId\" is a required property")),
        "{errors:?}"
    );

    let errors = schema
        .validate_as("#/definitions/v2/NoSuchType", &json!({}))
        .unwrap_err();
    assert!(
        errors[0].contains("no schema at this pointer"),
        "{errors:?}"
    );
}

#[test]
fn missing_spec_file_is_a_typed_error() {
    let error = CodexSchema::load_from(Path::new("/nonexistent/codex.schemas.json")).unwrap_err();
    assert!(
        matches!(error, conformance::Error::Read { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "read spec file /nonexistent/codex.schemas.json"
    );
}

#[test]
fn violation_text_is_readable() {
    let violation = Violation::new(
        S2C,
        "notification `thread/started`",
        (0..20).map(|i| format!("error {i}")).collect(),
    );
    assert_eq!(violation.errors.len(), Violation::ERRORS_MAX);
    let text = violation.to_string();
    assert!(text.starts_with("protocol violation in server→client notification `thread/started`"));
    assert!(text.contains("\n  - error 0"));
}

#[test]
fn many_deltas_reuse_compiled_validators() {
    let mut session = CodexSession::new();
    let deltas: Vec<Value> = (0..1_000)
        .map(|i| {
            json!({"method": "item/agentMessage/delta", "params": {
                "threadId": "thr-1", "turnId": "turn-1", "itemId": "item-1",
                "delta": format!("token {i} ")
            }})
        })
        .collect();
    // The first message compiles the validators; the rest must only run them.
    session.check(S2C, &deltas[0]).unwrap();
    let started = Instant::now();
    for delta in &deltas[1..] {
        if let Err(violation) = session.check(S2C, delta) {
            panic!("{violation}");
        }
    }
    println!(
        "validated 999 item/agentMessage/delta notifications in {:?}",
        started.elapsed()
    );
}
