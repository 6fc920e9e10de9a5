//! End-to-end tests of `fake-provider model-api` as a real child process, through
//! `turncut fake-provider`: the Responses SSE events in their real order and
//! shapes, a full two-request turn whose tool command the test runs with `sh -c`
//! (as a client would), retries of uncertain calls against the ledger, the store,
//! a SIGKILL mid-stream, and bad input.
//!
//! Every wait has a deadline and waits on an event (a stdout line, the end of a
//! stream, a process exit); nothing sleeps to synchronize.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use harness::supervisor::GroupChild;
use serde_json::{Value, json};
use wire::journal::EntryKind;

/// How long any single wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(20);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// A running fake; killed (as a process group) on drop.
struct Fake {
    child: GroupChild,
    url: String,
    state: PathBuf,
}

fn start(state: &Path, extra: &[&str]) -> Fake {
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--state-dir"])
        .arg(state)
        .args(extra)
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
    let line = rx
        .recv_timeout(WAIT)
        .expect("the fake prints its listening line");
    let url = line
        .strip_prefix("model api listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    Fake {
        child,
        url,
        state: state.to_owned(),
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(WAIT))
        .build()
        .into()
}

/// One SSE event: the `event:` line and the parsed `data:`.
#[derive(Debug)]
struct Sse {
    event: String,
    data: Value,
}

impl Fake {
    /// POSTs a raw body; the status and the body text (whatever arrived before
    /// the connection ended, for a cut stream).
    fn post_raw(&self, body: &str) -> (u16, String) {
        let r = agent()
            .post(format!("{}/v1/responses", self.url))
            .header("Content-Type", "application/json")
            .send(body)
            .expect("the fake answers");
        let status = r.status().as_u16();
        let mut text = String::new();
        let mut reader = BufReader::new(r.into_body().into_reader());
        let mut line = String::new();
        // A killed server leaves a truncated chunked body: read what came.
        while let Ok(n) = reader.read_line(&mut line) {
            if n == 0 {
                break;
            }
            text.push_str(&line);
            line.clear();
        }
        (status, text)
    }

    /// POSTs a streaming request and parses the events.
    fn stream(&self, body: &Value) -> Vec<Sse> {
        let (status, text) = self.post_raw(&body.to_string());
        assert_eq!(status, 200, "{text}");
        parse_sse(&text)
    }

    fn journal(&self) -> Vec<wire::journal::Entry> {
        wire::journal::read(&self.state.join("journal.jsonl")).unwrap()
    }

    fn facts(&self, name: &str) -> usize {
        self.journal()
            .iter()
            .filter(|e| e.kind == EntryKind::Fact && e.fact.as_deref() == Some(name))
            .count()
    }

    fn ledger(&self) -> Vec<wire::ledger::LedgerEntry> {
        wire::ledger::read(&self.state.join("ledger.jsonl")).unwrap()
    }
}

fn parse_sse(text: &str) -> Vec<Sse> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .filter_map(|block| {
            let mut event = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).ok();
                }
            }
            Some(Sse {
                event: event?,
                data: data?,
            })
        })
        .collect()
}

fn request(message_id: &str, input: Vec<Value>) -> Value {
    json!({
        "model": "fake", "stream": true, "input": input,
        "metadata": { "turncut_message_id": message_id, "turncut_conversation": "c1" },
        "tools": [{ "type": "function", "name": "Bash", "parameters": {
            "type": "object", "properties": { "command": { "type": "string" } } } }],
    })
}

fn user(text: &str) -> Value {
    json!({ "type": "message", "role": "user", "content": [{ "type": "input_text", "text": text }] })
}

/// The output items of `response.completed`.
fn output(events: &[Sse]) -> Vec<Value> {
    let last = events.last().expect("events");
    assert_eq!(last.event, "response.completed");
    last.data["response"]["output"]
        .as_array()
        .expect("output")
        .clone()
}

fn calls(events: &[Sse]) -> Vec<Value> {
    output(events)
        .into_iter()
        .filter(|i| i["type"] == "function_call")
        .collect()
}

/// Runs a function call's Bash command as a client would: `sh -c`, output and exit code.
fn run_call(call: &Value) -> (String, i32) {
    let arguments: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(arguments["command"].as_str().expect("a command string"))
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (text, out.status.code().unwrap_or(-1))
}

fn call_and_output(call: &Value, output: &str) -> [Value; 2] {
    [
        json!({ "type": "function_call", "call_id": call["call_id"], "name": call["name"],
                "arguments": call["arguments"] }),
        json!({ "type": "function_call_output", "call_id": call["call_id"], "output": output }),
    ]
}

/// The event types in order, and every event's shape: `type` equal to the
/// `event:` line, `sequence_number` gapless from 0, the fields each type has in
/// the OpenAI Responses streaming API.
fn check_shapes(events: &[Sse]) -> Vec<String> {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.data["type"], e.event.as_str(), "{:?}", e);
        assert_eq!(e.data["sequence_number"], json!(i), "{:?}", e);
        let has = |keys: &[&str]| {
            for k in keys {
                assert!(
                    e.data.get(*k).is_some(),
                    "{} lacks {k}: {}",
                    e.event,
                    e.data
                );
            }
        };
        match e.event.as_str() {
            "response.created" | "response.in_progress" | "response.completed" => {
                has(&["response"]);
                let r = &e.data["response"];
                assert_eq!(r["object"], "response");
                assert!(r["id"].as_str().unwrap().starts_with("resp_"));
            }
            "response.output_item.added" | "response.output_item.done" => {
                has(&["output_index", "item"]);
            }
            "response.content_part.added" | "response.content_part.done" => {
                has(&["item_id", "output_index", "content_index", "part"]);
            }
            "response.output_text.delta" => {
                has(&["item_id", "output_index", "content_index", "delta"])
            }
            "response.output_text.done" => {
                has(&["item_id", "output_index", "content_index", "text"])
            }
            "response.function_call_arguments.delta" => has(&["item_id", "output_index", "delta"]),
            "response.function_call_arguments.done" => {
                has(&["item_id", "output_index", "arguments", "name"]);
            }
            other => panic!("unexpected event {other}"),
        }
    }
    let mut kinds: Vec<String> = events.iter().map(|e| e.event.clone()).collect();
    // Several deltas collapse into one for the order check.
    kinds.dedup();
    kinds
}

#[test]
fn a_full_turn_with_a_tool_runs_the_effect_once_in_the_real_event_order() {
    let dir = tempfile::tempdir().unwrap();
    let fake = start(dir.path(), &[]);

    let first = fake.stream(&request("m1", vec![user("Create hello.txt")]));
    assert_eq!(
        check_shapes(&first),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let deltas = first
        .iter()
        .filter(|e| e.event == "response.output_text.delta")
        .count();
    assert!(deltas > 1, "several text deltas, got {deltas}");
    let added = &first
        .iter()
        .filter(|e| e.event == "response.output_item.added")
        .nth(1)
        .expect("a second output item")
        .data["item"];
    assert_eq!(added["type"], "function_call");
    assert_eq!(added["arguments"], "");
    assert_eq!(added["name"], "Bash");
    assert!(added["call_id"].as_str().unwrap().starts_with("call_"));
    let completed = &first.last().unwrap().data["response"];
    assert_eq!(completed["status"], "completed");
    let usage = &completed["usage"];
    for k in ["input_tokens", "output_tokens", "total_tokens"] {
        assert!(usage[k].as_u64().is_some(), "usage.{k}: {usage}");
    }
    assert!(usage["input_tokens_details"]["cached_tokens"].is_u64());
    assert!(usage["output_tokens_details"]["reasoning_tokens"].is_u64());
    let out = output(&first);
    assert_eq!(out[0]["type"], "message");
    assert_eq!(out[0]["content"][0]["text"], "Looking at the workspace.");
    let calls1 = calls(&first);
    assert_eq!(calls1.len(), 1);
    let turns = wire::stores::model_api::recorded_turns(dir.path());
    assert_eq!(turns.len(), 1);
    assert_eq!(
        (
            turns[0].thread.as_str(),
            turns[0].turn.as_str(),
            turns[0].status.as_str()
        ),
        ("c1", "m1", "inProgress")
    );

    let (text, code) = run_call(&calls1[0]);
    assert_eq!(code, 0, "{text}");
    let mut input = vec![user("Create hello.txt"), out[0].clone()];
    input.extend(call_and_output(&calls1[0], &text));
    let second = fake.stream(&request("m1", input));
    assert_eq!(
        check_shapes(&second),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(
        output(&second)[0]["content"][0]["text"],
        "Created hello.txt."
    );
    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(
        (ledger[0].key.as_str(), ledger[0].by.as_str()),
        ("write-hello", "m1")
    );
    assert_eq!(ledger[0].conversation.as_deref(), Some("c1"));
    let turns = wire::stores::model_api::recorded_turns(dir.path());
    assert_eq!(turns[0].status, "completed");
    assert_eq!(turns[0].client_id.as_deref(), Some("m1"));
    assert_eq!(turns[0].authorized_by, "m1");
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("model-api/turns.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["turns"][0]["requests"], 2);
    assert_eq!(stored["turns"][0]["status"], "completed");

    // Every request in and every event out is journaled, in order.
    let journal = fake.journal();
    let ins = journal.iter().filter(|e| e.kind == EntryKind::In).count();
    let events_out = journal
        .iter()
        .filter(|e| e.kind == EntryKind::Out && e.data.get("event").is_some())
        .count();
    assert_eq!((ins, events_out), (2, first.len() + second.len()));
    assert_eq!(fake.facts("turn.recorded"), 2);
    assert_eq!(fake.facts("turn.finished"), 1);

    // The same message id again plays the same script turn from the top (naive).
    let replay = fake.stream(&request("m1", vec![user("Create hello.txt")]));
    assert_eq!(calls(&replay).len(), 1);
    // A new message id in the conversation plays the next script turn (the last repeats).
    let next = fake.stream(&request(
        "m2",
        vec![user("Create hello.txt"), user("again")],
    ));
    assert_eq!(calls(&next).len(), 1);
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("model-api/turns.json")).unwrap(),
    )
    .unwrap();
    // The built-in script has one turn: the second message plays it again
    // (`Script::index_for` keeps a position within the script).
    assert_eq!(stored["turns"][1]["message_id"], "m2");
    assert_eq!(stored["turns"][1]["script_index"], 0);
}

#[test]
fn uncertain_calls_are_repeated_only_when_the_effect_is_not_in_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let fake = start(dir.path(), &[]);
    let first = fake.stream(&request("m1", vec![user("go")]));
    let call1 = calls(&first).remove(0);

    // The client lost the call's outcome and never ran it: the model calls again.
    let mut input = vec![user("go")];
    input.extend(call_and_output(&call1, "uncertain: the runner restarted"));
    let second = fake.stream(&request("m1", input.clone()));
    let retried = calls(&second);
    assert_eq!(retried.len(), 1, "one new call");
    assert_ne!(retried[0]["call_id"], call1["call_id"]);
    assert_eq!(fake.facts("effect.retried"), 1);

    // This time it ran, but its outcome is uncertain again: the ledger has it,
    // so the model does not repeat it and answers.
    let (text, code) = run_call(&retried[0]);
    assert_eq!(code, 0, "{text}");
    input.extend(call_and_output(
        &retried[0],
        "uncertain: the runner restarted",
    ));
    let third = fake.stream(&request("m1", input));
    assert!(calls(&third).is_empty());
    assert_eq!(
        output(&third)[0]["content"][0]["text"],
        "Created hello.txt."
    );
    assert_eq!(fake.facts("effect.skipped"), 1);
    assert_eq!(fake.ledger().len(), 1);
}

#[test]
fn an_exit_mid_stream_leaves_a_truncated_stream_and_an_interrupted_turn() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = start(
        dir.path(),
        &["--exit", "model.response_output_item_added.sent#2"],
    );
    let (status, text) = fake.post_raw(&request("m1", vec![user("go")]).to_string());
    assert_eq!(status, 200);
    let events = parse_sse(&text);
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert!(!kinds.contains(&"response.completed"), "{kinds:?}");
    assert!(kinds.contains(&"response.output_item.done"), "{kinds:?}");
    assert!(
        !kinds.contains(&"response.function_call_arguments.done"),
        "{kinds:?}"
    );
    let exit = fake.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(exit.signal(), Some(9), "the fake SIGKILLed itself");
    let turns = wire::stores::model_api::recorded_turns(dir.path());
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].status, "interrupted");

    // The fault fired once per state directory: a restarted fake answers in full.
    let fake = start(
        dir.path(),
        &["--exit", "model.response_output_item_added.sent#2"],
    );
    let events = fake.stream(&request("m1", vec![user("go")]));
    assert_eq!(events.last().unwrap().event, "response.completed");
    assert_eq!(
        wire::stores::model_api::recorded_turns(dir.path())[0].status,
        "inProgress"
    );
}

#[test]
fn an_armed_answer_fails_a_request_with_its_status_or_its_stream_without_a_harness() {
    // `--answer` at the request point: 429 with `Retry-After` and OpenAI's
    // body, once per state directory (the next request is served).
    let dir = tempfile::tempdir().unwrap();
    let fake = start(
        dir.path(),
        &["--answer", "model.responses.received#1=rate-limit"],
    );
    let r = agent()
        .post(format!("{}/v1/responses", fake.url))
        .header("Content-Type", "application/json")
        .send(request("m1", vec![user("go")]).to_string())
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = serde_json::from_reader(r.into_body().into_reader()).unwrap();
    assert_eq!(body, wire::upstream::UpstreamFault::RateLimit.openai_body());
    assert_eq!(fake.facts("fault.answer"), 1);
    let events = fake.stream(&request("m1", vec![user("go")]));
    assert_eq!(events.last().unwrap().event, "response.completed");

    // At a `.sent` point, a stream fault: the stream ends after its first
    // event, without `response.completed`.
    let dir = tempfile::tempdir().unwrap();
    let fake = start(
        dir.path(),
        &["--answer", "model.response_created.sent#1=stream-truncated"],
    );
    let (status, text) = fake.post_raw(&request("m1", vec![user("go")]).to_string());
    assert_eq!(status, 200);
    let kinds: Vec<String> = parse_sse(&text).into_iter().map(|e| e.event).collect();
    assert_eq!(kinds, ["response.created"], "{text}");
    assert_eq!(fake.facts("stream.broken"), 1);
    // The response called a tool, so it did not end the turn; its fault
    // still names the request's conversation, which tells a cell of
    // several tasks whose run met it.
    let answered: Vec<Value> = fake
        .journal()
        .into_iter()
        .filter(|e| e.fact.as_deref() == Some("fault.answer"))
        .map(|e| e.data)
        .collect();
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["thread"], "c1", "{answered:?}");

    // A name that is no answer is bad input.
    let out = Command::new(exe())
        .args(["fake-provider", "model-api", "--state-dir"])
        .arg(dir.path().join("bad"))
        .args(["--answer", "model.responses.received=teapot"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("use one of rate-limit"), "{stderr}");
}

#[test]
fn a_hang_mid_stream_keeps_the_connection_open_and_silent() {
    let dir = tempfile::tempdir().unwrap();
    let fake = start(dir.path(), &["--hang", "model.response_in_progress.sent"]);
    let r = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_millis(1500)))
        .build()
        .new_agent()
        .post(format!("{}/v1/responses", fake.url))
        .send(request("m1", vec![user("go")]).to_string())
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut reader = BufReader::new(r.into_body().into_reader());
    let mut seen = String::new();
    let mut line = String::new();
    // The read ends by the client's own deadline, not by the server.
    let ended = loop {
        match reader.read_line(&mut line) {
            Ok(0) => break "eof",
            Ok(_) => {
                seen.push_str(&line);
                line.clear();
            }
            Err(_) => break "timeout",
        }
    };
    assert_eq!(ended, "timeout", "{seen}");
    let kinds: Vec<String> = parse_sse(&seen).into_iter().map(|e| e.event).collect();
    assert_eq!(kinds, ["response.created", "response.in_progress"]);
    assert_eq!(fake.facts("fault.hang"), 1);
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let fake = start(dir.path(), &[]);
    let error = |body: &str| {
        let (status, text) = fake.post_raw(body);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let e = &v["error"];
        assert!(e["message"].is_string() && e["type"].is_string(), "{text}");
        assert!(
            e.get("param").is_some() && e.get("code").is_some(),
            "{text}"
        );
        (status, e["message"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(error("{not json").0, 400);
    assert_eq!(error("[1]").0, 400);
    assert_eq!(error(r#"{"input": 7}"#).0, 400);
    let call =
        json!({ "type": "function_call", "call_id": "call_x", "name": "Bash", "arguments": "{}" });
    let (status, message) = error(&request("m1", vec![user("go"), call]).to_string());
    assert_eq!(status, 400);
    assert!(message.contains("call_x"), "{message}");

    // `stream: false` answers the final response object as JSON.
    let mut body = request("m2", vec![user("go")]);
    body["stream"] = json!(false);
    let (status, text) = fake.post_raw(&body.to_string());
    assert_eq!(status, 200, "{text}");
    let response: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][1]["type"], "function_call");

    let r = agent()
        .get(format!("{}/v1/models", fake.url))
        .call()
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[test]
fn a_port_in_use_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = Command::new(exe())
        .args(["fake-provider", "model-api", "--port", &port, "--state-dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}
