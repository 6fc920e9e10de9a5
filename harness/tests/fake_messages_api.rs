//! End-to-end tests of the Anthropic Messages API of `fake-provider
//! model-api` (`POST /v1/messages`) as a real child process: a full
//! two-request turn in the events and order the real API streams (text, a
//! `tool_use` whose command the test runs with `sh -c`, as an agent would,
//! then its `tool_result` and `end_turn`), and the upstream faults
//! (`wire::upstream`) injected as a cell injects them, through the cut-point
//! reply `answer NAME` at `model.messages.received` and after a stream's
//! events: a 429 with `retry-after` in the API's error body, a stream reset
//! after its second event, a malformed event, an expired credential that
//! stays expired for its conversation.
//!
//! Every wait has a deadline and waits on an event (a stdout line, the end of
//! a stream); nothing sleeps to synchronize.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use harness::supervisor::GroupChild;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

struct Fake {
    _child: GroupChild,
    url: String,
    state: PathBuf,
}

fn start(state: &Path, env: &[(&str, &str)]) -> Fake {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turncut"));
    cmd.args(["fake-provider", "model-api", "--state-dir"])
        .arg(state)
        .env_remove(cutpoint::ENV_SOCKET)
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_TRACE)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = GroupChild::spawn(&mut cmd).expect("spawn the fake");
    let stdout = child.inner().stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = rx.recv_timeout(WAIT).expect("the listening line");
    let url = line
        .strip_prefix("model api listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    Fake {
        _child: child,
        url,
        state: state.to_owned(),
    }
}

/// POSTs `body` to `/v1/messages`: the status, the `retry-after` header and
/// the body text (what arrived before the connection ended, for a cut stream).
fn post(fake: &Fake, body: &Value) -> (u16, Option<String>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(WAIT))
        .build()
        .into();
    let r = agent
        .post(format!("{}/v1/messages", fake.url))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .send(body.to_string())
        .expect("the fake answers");
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut text = String::new();
    let mut reader = BufReader::new(r.into_body().into_reader());
    let mut line = String::new();
    while let Ok(n) = reader.read_line(&mut line) {
        if n == 0 {
            break;
        }
        text.push_str(&line);
        line.clear();
    }
    (status, retry, text)
}

/// The SSE blocks of a stream: `(event, data text)`.
fn blocks(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let field = |p: &str| {
                b.lines()
                    .find_map(|l| l.strip_prefix(p))
                    .unwrap_or_default()
                    .to_owned()
            };
            (field("event: "), field("data: "))
        })
        .collect()
}

fn request(messages: Value) -> Value {
    request_in("s1", messages)
}

/// A streaming request of Claude Code's session `session` (its
/// `metadata.user_id` is JSON naming it: the fake's conversation).
fn request_in(session: &str, messages: Value) -> Value {
    let user_id = json!({ "device_id": "d", "session_id": session }).to_string();
    json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": true,
        "metadata": { "user_id": user_id },
        "tools": [{ "name": "Bash", "description": "Run a command",
                    "input_schema": { "type": "object", "properties": { "command": { "type": "string" } }, "required": ["command"] } }],
        "messages": messages,
    })
}

#[test]
fn a_tool_turn_streams_as_the_messages_api_and_its_tool_result_ends_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = start(dir.path(), &[]);
    let user = json!({ "role": "user", "content": "[turncut:message m1] Create hello.txt" });
    let (status, _, text) = post(&fake, &request(json!([user])));
    assert_eq!(status, 200, "{text}");
    let events = blocks(&text);
    let kinds: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"message_start"), "{kinds:?}");
    assert_eq!(&kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .zip(&data)
            .all(|((e, _), d)| d["type"] == *e.as_str())
    );
    let tool = data
        .iter()
        .find(|d| d["type"] == "content_block_start" && d["content_block"]["type"] == "tool_use")
        .expect("a tool_use block");
    let id = tool["content_block"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("toolu_"), "{id}");
    let json_delta = data
        .iter()
        .find(|d| d["delta"]["type"] == "input_json_delta")
        .expect("the tool's input");
    let input: Value =
        serde_json::from_str(json_delta["delta"]["partial_json"].as_str().unwrap()).unwrap();
    let delta = data.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    // Run the tool as an agent would, then answer with its result.
    let ran = Command::new("sh")
        .args(["-c", input["command"].as_str().unwrap()])
        .status()
        .unwrap();
    assert!(ran.success());
    let ledger = wire::ledger::read(&fake.state.join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "the command appended its effect");
    assert_eq!(
        ledger[0].by, "m1",
        "the effect runs under the marked message id"
    );
    let assistant = json!({ "role": "assistant", "content": [{ "type": "tool_use", "id": id, "name": "Bash", "input": input }] });
    let result = json!({ "role": "user", "content": [{ "type": "tool_result", "tool_use_id": id, "content": "ok" }] });
    let (status, _, text) = post(&fake, &request(json!([user, assistant, result])));
    assert_eq!(status, 200, "{text}");
    let last: Vec<Value> = blocks(&text)
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let delta = last.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn", "{text}");
}

/// Answers each armed hit as `answers` says, in the order they come: the
/// harness's side of a cell that injects upstream faults. Returns the hits
/// as `point#n answer`.
fn answer_hits(listener: cutpoint::Listener, answers: &[&str]) -> Vec<String> {
    let mut seen = Vec::new();
    for answer in answers {
        let held = listener.accept_hit(WAIT).expect("an armed hit");
        seen.push(format!("{}#{} {answer}", held.hit.point, held.hit.n));
        held.answer(answer).expect("answer the hit");
    }
    seen
}

#[test]
fn upstream_faults_answer_as_the_messages_api_fails() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("cut.sock");
    let listener = cutpoint::Listener::bind(&socket).unwrap();
    let arm = "model.messages.received#1,model.content_block_start.sent#1,\
               model.message_start.sent#2,model.messages.received#4";
    let state = dir.path().join("state");
    let fake = start(
        &state,
        &[
            (cutpoint::ENV_SOCKET, socket.to_str().unwrap()),
            (cutpoint::ENV_ARM, arm),
        ],
    );
    let answers = [
        "rate-limit",
        "stream-cut",
        "malformed-event",
        "auth-expired",
    ];
    let harness = std::thread::spawn(move || answer_hits(listener, &answers));
    let body = request(json!([{ "role": "user", "content": "hi" }]));
    // A status fault at the request point: Anthropic's status, body and
    // `retry-after`, before the model sees the request.
    let (status, retry, text) = post(&fake, &body);
    assert_eq!((status, retry.as_deref()), (429, Some("1")), "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        error,
        wire::upstream::UpstreamFault::RateLimit.anthropic_body()
    );
    // A stream reset after its second event: no `message_stop`.
    let (status, _, text) = post(&fake, &body);
    assert_eq!(status, 200);
    let cut: Vec<String> = blocks(&text).into_iter().map(|(e, _)| e).collect();
    assert_eq!(cut, ["message_start", "content_block_start"], "{text}");
    // A malformed event after the first, then the end.
    let (_, _, text) = post(&fake, &body);
    let sent = blocks(&text);
    assert_eq!(sent.len(), 2, "{text}");
    assert_eq!(sent[1].0, "content_block_delta");
    assert!(
        serde_json::from_str::<Value>(&sent[1].1).is_err(),
        "malformed: {}",
        sent[1].1
    );
    // An expired credential: 401 now and for every later request of its
    // conversation; another conversation (a Retry's) is served.
    let (status, _, text) = post(&fake, &body);
    assert_eq!(status, 401, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["type"],
        "authentication_error"
    );
    assert_eq!(post(&fake, &body).0, 401, "auth-expired is sticky");
    let other = request_in("s2", json!([{ "role": "user", "content": "hi" }]));
    let (status, _, text) = post(&fake, &other);
    assert_eq!(status, 200, "a fresh conversation is served: {text}");
    assert!(blocks(&text).iter().any(|(e, _)| e == "message_stop"));
    let hits = harness.join().unwrap();
    assert_eq!(
        hits,
        [
            "model.messages.received#1 rate-limit",
            "model.content_block_start.sent#1 stream-cut",
            "model.message_start.sent#2 malformed-event",
            "model.messages.received#4 auth-expired",
        ]
    );
    let journal = wire::journal::read(&state.join("journal.jsonl")).unwrap();
    let facts = |name: &str| {
        journal
            .iter()
            .filter(|e| e.fact.as_deref() == Some(name))
            .count()
    };
    assert_eq!(
        facts("fault.answer"),
        4,
        "each injected answer is journaled"
    );
    assert_eq!(
        facts("stream.broken"),
        2,
        "the cut and the malformed stream"
    );
}
