//! End-to-end tests of `fake-provider acp` as a real child process, driven
//! through `turncut fake-provider` (the multi-call path the harness uses): by a
//! small synchronous client in this file that validates every message both ways
//! against the vendored ACP schema, and by the official `agent-client-protocol`
//! crate as the client.
//!
//! Every wait has a deadline; nothing sleeps.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use conformance::{AcpSession, Direction};
use fake_provider::recorded::RecordedTurn;
use harness::supervisor::GroupChild;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(20);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

enum FromAgent {
    Msg(Value),
    Unparsable(String),
    Eof,
}

/// A running fake ACP agent and the client end of its stdio.
struct Agent {
    child: GroupChild,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<FromAgent>,
    inbox: VecDeque<Value>,
    next_id: i64,
    /// Every message both ways, in order.
    transcript: Vec<(Direction, Value)>,
    /// Running terminals by id, for `terminal/*` requests.
    terminals: HashMap<String, std::process::Child>,
}

impl Agent {
    fn start(state: &Path, extra: &[&str]) -> Agent {
        let mut cmd = Command::new(exe());
        cmd.args(["fake-provider", "acp", "--state-dir"])
            .arg(state)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = GroupChild::spawn(&mut cmd).expect("spawn the fake");
        let stdin = child.inner().stdin.take();
        let stdout = child.inner().stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let msg = match serde_json::from_str(&line) {
                    Ok(v) => FromAgent::Msg(v),
                    Err(_) => FromAgent::Unparsable(line),
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
            let _ = tx.send(FromAgent::Eof);
        });
        Agent {
            child,
            stdin,
            rx,
            inbox: VecDeque::new(),
            next_id: 0,
            transcript: Vec::new(),
            terminals: HashMap::new(),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, msg: Value) {
        self.send_raw(&serde_json::to_vec(&msg).unwrap());
        self.transcript.push((Direction::ClientToServer, msg));
    }

    fn send_request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    fn answer(&mut self, id: &Value, result: Value) {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }));
    }

    /// The next message from the agent, or a test failure at the deadline.
    fn next(&mut self, waiting_for: &str) -> Value {
        if let Some(m) = self.inbox.pop_front() {
            return m;
        }
        let deadline = Instant::now() + TIMEOUT;
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(FromAgent::Msg(m)) => {
                self.transcript.push((Direction::ServerToClient, m.clone()));
                m
            }
            Ok(FromAgent::Unparsable(line)) => panic!("the agent wrote a non-JSON line: {line}"),
            Ok(FromAgent::Eof) => {
                panic!("the agent closed stdout while we waited for {waiting_for}")
            }
            Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {waiting_for}"),
        }
    }

    /// Waits for the answer to request `id`, collecting the notifications
    /// before it; other messages are a test failure.
    fn response(&mut self, id: i64) -> (Result<Value, Value>, Vec<Value>) {
        let mut updates = Vec::new();
        loop {
            let m = self.next(&format!("the answer to request {id}"));
            if m.get("method").is_some() && m.get("id").is_none() {
                updates.push(m["params"]["update"].clone());
                continue;
            }
            assert_eq!(m["id"], json!(id), "unexpected message {m}");
            return match m.get("result") {
                Some(r) => (Ok(r.clone()), updates),
                None => (Err(m["error"].clone()), updates),
            };
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        match self.response(id).0 {
            Ok(r) => r,
            Err(e) => panic!("{method} failed: {e}"),
        }
    }

    fn error(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        match self.response(id).0 {
            Ok(r) => panic!("{method} succeeded with {r}, expected an error"),
            Err(e) => e,
        }
    }

    fn initialize(&mut self) -> Value {
        self.request(
            "initialize",
            json!({
                "protocolVersion": 1,
                "clientCapabilities": { "terminal": true },
                "clientInfo": { "name": "turncut-test", "version": "0" },
            }),
        )
    }

    fn new_session(&mut self, cwd: &Path) -> String {
        let r = self.request(
            "session/new",
            json!({ "cwd": cwd.display().to_string(), "mcpServers": [] }),
        );
        r["sessionId"].as_str().unwrap().to_owned()
    }

    /// Loads `session` and returns the replayed updates.
    fn load(&mut self, session: &str, cwd: &Path) -> Vec<Value> {
        let id = self.send_request(
            "session/load",
            json!({ "sessionId": session, "cwd": cwd.display().to_string(), "mcpServers": [] }),
        );
        let (result, updates) = self.response(id);
        result.expect("session/load succeeds");
        updates
    }

    fn prompt(&mut self, session: &str, text: &str, message_id: &str) -> i64 {
        self.send_request(
            "session/prompt",
            json!({
                "sessionId": session,
                "prompt": [{ "type": "text", "text": text }],
                "_meta": { "messageId": message_id },
            }),
        )
    }

    /// Plays the client's side of the prompt `id` until its answer: updates are
    /// collected, terminals run for real, and `permission` picks the outcome of
    /// each permission request (`None` leaves it unanswered and returns).
    fn drive(&mut self, id: i64, mut permission: impl FnMut(&Value) -> Option<Value>) -> Turn {
        let mut turn = Turn::default();
        loop {
            let m = self.next(&format!("the end of prompt {id}"));
            let method = m.get("method").and_then(Value::as_str).map(str::to_owned);
            match (method.as_deref(), m.get("id")) {
                (Some("session/update"), None) => turn.updates.push(m["params"]["update"].clone()),
                (Some(method), Some(rid)) => {
                    turn.requests.push(method.to_owned());
                    let rid = rid.clone();
                    let params = m["params"].clone();
                    let result = match method {
                        "session/request_permission" => match permission(&params) {
                            Some(outcome) => json!({ "outcome": outcome }),
                            None => {
                                turn.parked = Some(rid);
                                return turn;
                            }
                        },
                        "terminal/create" => self.create_terminal(&params),
                        "terminal/wait_for_exit" => {
                            let t = params["terminalId"].as_str().unwrap();
                            let status = self.terminals.get_mut(t).unwrap().wait().unwrap();
                            json!({ "exitCode": status.code(), "signal": null })
                        }
                        "terminal/release" => {
                            self.terminals
                                .remove(params["terminalId"].as_str().unwrap());
                            json!({})
                        }
                        other => panic!("unexpected request {other}: {m}"),
                    };
                    self.answer(&rid, result);
                }
                (None, Some(rid)) if *rid == json!(id) => {
                    turn.stop_reason = m["result"]["stopReason"].as_str().map(str::to_owned);
                    turn.error = m.get("error").cloned();
                    return turn;
                }
                _ => panic!("unexpected message while driving prompt {id}: {m}"),
            }
        }
    }

    fn create_terminal(&mut self, params: &Value) -> Value {
        let args: Vec<&str> = params["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let mut cmd = Command::new(params["command"].as_str().unwrap());
        cmd.args(&args).stdout(Stdio::null()).stdin(Stdio::null());
        if let Some(cwd) = params["cwd"].as_str() {
            cmd.current_dir(cwd);
        }
        let id = format!("term-{}", self.terminals.len() + 1);
        self.terminals.insert(id.clone(), cmd.spawn().unwrap());
        json!({ "terminalId": id })
    }

    /// Validates every message of the transcript against the ACP schema.
    fn assert_conformant(&self) {
        let mut session = AcpSession::new();
        for (direction, msg) in &self.transcript {
            if let Err(v) = session.check(*direction, msg) {
                panic!("message does not conform to the ACP schema:\n{v}\nmessage: {msg}");
            }
        }
    }

    fn close(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the fake exited with {status}");
    }
}

#[derive(Debug, Default)]
struct Turn {
    updates: Vec<Value>,
    requests: Vec<String>,
    stop_reason: Option<String>,
    error: Option<Value>,
    /// The id of a permission request left unanswered.
    parked: Option<Value>,
}

fn kinds(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .map(|u| {
            let kind = u["sessionUpdate"].as_str().unwrap();
            match u["status"].as_str() {
                Some(status) if kind == "tool_call_update" => format!("{kind}:{status}"),
                _ => kind.to_owned(),
            }
        })
        .collect()
}

fn allow(_: &Value) -> Option<Value> {
    Some(json!({ "outcome": "selected", "optionId": "allow" }))
}

fn park(_: &Value) -> Option<Value> {
    None
}

struct Dirs {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    cwd: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let cwd = tmp.path().join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    Dirs {
        state,
        cwd,
        _tmp: tmp,
    }
}

fn ledger(d: &Dirs) -> Vec<(String, String, Option<String>)> {
    wire::ledger::read(&d.state.join("ledger.jsonl"))
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.by, e.turn))
        .collect()
}

fn facts(d: &Dirs, name: &str) -> Vec<Value> {
    wire::journal::read(&d.state.join("journal.jsonl"))
        .unwrap()
        .into_iter()
        .filter(|e| e.fact.as_deref() == Some(name))
        .map(|e| e.data)
        .collect()
}

fn turns(d: &Dirs) -> Vec<(String, Option<String>, String, bool, String)> {
    wire::stores::acp::recorded_turns(&d.state)
        .into_iter()
        .map(|t: RecordedTurn| {
            (
                t.turn,
                t.client_id,
                t.status,
                t.continuation,
                t.authorized_by,
            )
        })
        .collect()
}

const FULL_TURN: [&str; 6] = [
    "user_message_chunk",
    "agent_message_chunk",
    "tool_call",
    "tool_call_update:in_progress",
    "tool_call_update:completed",
    "agent_message_chunk",
];

#[test]
fn full_turn_with_permission_and_terminal_conforms_both_ways() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &[]);
    let init = agent.initialize();
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Create hello.txt", "m-1");
    let turn = agent.drive(id, allow);
    assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"), "{turn:?}");
    assert_eq!(kinds(&turn.updates), FULL_TURN);
    assert_eq!(
        turn.requests,
        [
            "session/request_permission",
            "terminal/create",
            "terminal/wait_for_exit",
            "terminal/release"
        ]
    );
    let echo = &turn.updates[0];
    assert_eq!(echo["messageId"], "m-1");
    assert_eq!(echo["_meta"]["messageId"], "m-1");
    assert_eq!(echo["content"]["text"], "Create hello.txt");
    assert_eq!(turn.updates[2]["toolCallId"], "call_1");
    assert_eq!(turn.updates[2]["kind"], "execute");

    // Loading again replays the whole conversation, in order, every time.
    for _ in 0..2 {
        let replay = agent.load(&session, &d.cwd);
        assert_eq!(replay, turn.updates);
    }
    agent.assert_conformant();
    agent.close();

    assert_eq!(
        ledger(&d),
        [("write-hello".into(), "m-1".into(), Some("m-1".into()))]
    );
    assert_eq!(
        turns(&d),
        [(
            "m-1".into(),
            Some("m-1".into()),
            "completed".into(),
            false,
            "m-1".into()
        )]
    );
    assert_eq!(facts(&d, "turn.recorded").len(), 1);
    assert_eq!(facts(&d, "turn.finished")[0]["stop_reason"], "end_turn");
}

#[test]
fn sigkill_mid_turn_then_load_replays_the_user_message_of_the_interrupted_turn() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &[]);
    agent.initialize();
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Create hello.txt", "m-1");
    let turn = agent.drive(id, park);
    assert!(turn.parked.is_some(), "{turn:?}");
    assert_eq!(turn.requests, ["session/request_permission"]);
    assert_eq!(turns(&d)[0].2, "inProgress");
    agent.child.kill().unwrap();

    let mut agent = Agent::start(&d.state, &[]);
    agent.initialize();
    let replay = agent.load(&session, &d.cwd);
    assert_eq!(
        kinds(&replay),
        ["user_message_chunk", "agent_message_chunk", "tool_call"]
    );
    assert_eq!(replay[0]["messageId"], "m-1");
    assert_eq!(replay[0]["_meta"]["messageId"], "m-1");
    agent.assert_conformant();
    agent.close();
    assert_eq!(
        turns(&d),
        [(
            "m-1".into(),
            Some("m-1".into()),
            "interrupted".into(),
            false,
            "m-1".into()
        )]
    );
    assert!(ledger(&d).is_empty());
}

/// `--like opencode` plays `opencode acp`: no echo, the tool call
/// `in_progress` before its permission request, the command run by the
/// agent itself (no `terminal/*`), in a session of its own; the replay holds
/// the user message under an id of the agent's own.
#[test]
fn like_opencode_runs_its_own_command_after_an_in_progress_permission() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &["--like", "opencode"]);
    agent.initialize();
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Create hello.txt", "m-1");
    let turn = agent.drive(id, allow);
    assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"), "{turn:?}");
    assert_eq!(
        kinds(&turn.updates),
        [
            "agent_message_chunk",
            "tool_call",
            "tool_call_update:in_progress",
            "tool_call_update:completed",
            "agent_message_chunk",
        ]
    );
    assert_eq!(turn.requests, ["session/request_permission"]);
    let replay = agent.load(&session, &d.cwd);
    assert_eq!(kinds(&replay)[0], "user_message_chunk");
    assert_ne!(replay[0]["messageId"], "m-1", "the agent's own id");
    agent.assert_conformant();
    agent.close();
    assert_eq!(
        ledger(&d),
        [("write-hello".into(), "m-1".into(), Some("m-1".into()))]
    );
    let spawned = facts(&d, "effect.spawned");
    assert_eq!(spawned.len(), 1, "the agent ran the command itself");
}

#[test]
fn continuation_skips_effects_already_in_the_ledger() {
    let d = dirs();
    let script = d.cwd.join("script.toml");
    std::fs::write(
        &script,
        r#"
[[turn]]
say = ["Two steps."]
tools = [{ key = "first" }, { key = "second", approval = true }]
final = "Both done."
"#,
    )
    .unwrap();
    let script = script.display().to_string();
    let args = ["--script", script.as_str()];
    let mut agent = Agent::start(&d.state, &args);
    agent.initialize();
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Do both", "m-1");
    let turn = agent.drive(id, park);
    assert!(turn.parked.is_some(), "{turn:?}");
    agent.child.kill().unwrap();
    assert_eq!(
        ledger(&d),
        [("first".into(), "m-1".into(), Some("m-1".into()))]
    );

    let mut agent = Agent::start(&d.state, &args);
    agent.initialize();
    agent.load(&session, &d.cwd);
    let text = format!("{} go on", fake_provider::codex::CONTINUE_MARKER);
    let id = agent.prompt(&session, &text, "c-1");
    let turn = agent.drive(id, allow);
    assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"), "{turn:?}");
    // Only the second tool runs; tool call ids restart with the process.
    let calls: Vec<&Value> = turn
        .updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["toolCallId"], "call_1");
    agent.assert_conformant();
    agent.close();

    assert_eq!(
        ledger(&d),
        [
            ("first".into(), "m-1".into(), Some("m-1".into())),
            ("second".into(), "m-1".into(), Some("c-1".into()))
        ]
    );
    let skipped = facts(&d, "effect.skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["key"], "first");
    assert_eq!(
        turns(&d),
        [
            (
                "m-1".into(),
                Some("m-1".into()),
                "interrupted".into(),
                false,
                "m-1".into()
            ),
            (
                "c-1".into(),
                Some("c-1".into()),
                "completed".into(),
                true,
                "m-1".into()
            )
        ]
    );
}

#[test]
fn cancel_ends_the_turn_and_a_second_prompt_is_refused_meanwhile() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &[]);
    agent.initialize();
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Create hello.txt", "m-1");
    let turn = agent.drive(id, park);
    let permission = turn.parked.expect("a permission request");

    let second = agent.prompt(&session, "Another", "m-2");
    let (result, _) = agent.response(second);
    let error = result.expect_err("a concurrent prompt is refused");
    assert!(
        error["message"].as_str().unwrap().contains("in progress"),
        "{error}"
    );

    agent.notify("session/cancel", json!({ "sessionId": session }));
    let (result, updates) = agent.response(id);
    assert_eq!(result.unwrap()["stopReason"], "cancelled");
    assert_eq!(kinds(&updates), ["tool_call_update:failed"]);
    // The client answers the abandoned permission request as the spec says.
    agent.answer(
        &permission,
        json!({ "outcome": { "outcome": "cancelled" } }),
    );

    // The agent keeps serving, and the session takes a new prompt.
    let id = agent.prompt(&session, "Again", "m-3");
    let turn = agent.drive(id, allow);
    assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"));
    agent.assert_conformant();
    agent.close();

    let statuses: Vec<String> = turns(&d).into_iter().map(|t| t.2).collect();
    assert_eq!(statuses, ["interrupted", "completed"]);
    assert_eq!(
        ledger(&d),
        [("write-hello".into(), "m-3".into(), Some("m-3".into()))]
    );
    assert_eq!(facts(&d, "response.abandoned").len(), 1);
}

#[test]
fn malformed_input_gets_errors_and_the_agent_keeps_serving() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &[]);
    let expect_error = |agent: &mut Agent, bytes: &[u8], code: i64| {
        agent.send_raw(bytes);
        let m = agent.next("an error");
        assert_eq!(m["jsonrpc"], "2.0", "{m}");
        assert_eq!(m["error"]["code"], code, "{m}");
        m
    };
    expect_error(&mut agent, b"this is not json", -32700);
    expect_error(&mut agent, b"[1, 2]", -32600);
    expect_error(
        &mut agent,
        br#"{"jsonrpc":"2.0","id":{},"method":"initialize"}"#,
        -32600,
    );
    expect_error(
        &mut agent,
        br#"{"id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
        -32600,
    );
    let huge = vec![b'x'; (1 << 20) + 10];
    expect_error(&mut agent, &huge, -32600);
    let m = expect_error(
        &mut agent,
        br#"{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#,
        -32600,
    );
    assert_eq!(m["id"], 3, "requests before initialize are refused: {m}");

    agent.initialize();
    let e = agent.error("session/new", json!({ "cwd": 5, "mcpServers": [] }));
    assert_eq!(e["code"], -32602, "{e}");
    let e = agent.error(
        "session/new",
        json!({ "cwd": "relative", "mcpServers": [] }),
    );
    assert_eq!(e["code"], -32602, "{e}");
    let e = agent.error("session/prompt", json!({ "sessionId": [], "prompt": "x" }));
    assert_eq!(e["code"], -32602, "{e}");
    let e = agent.error("session/list", json!({}));
    assert_eq!(e["code"], -32601, "{e}");
    // A response to nothing is journaled and otherwise ignored.
    agent.answer(&json!(99), json!({}));
    let session = agent.new_session(&d.cwd);
    assert!(!session.is_empty());
    agent.close();
    assert_eq!(facts(&d, "response.unexpected").len(), 1);
}

#[test]
fn unknown_sessions_are_named_in_the_error() {
    let d = dirs();
    let mut agent = Agent::start(&d.state, &[]);
    agent.initialize();
    let e = agent.error(
        "session/load",
        json!({ "sessionId": "no-such-session", "cwd": d.cwd.display().to_string(), "mcpServers": [] }),
    );
    assert!(
        e["message"].as_str().unwrap().contains("no-such-session"),
        "{e}"
    );
    let e = agent.error(
        "session/prompt",
        json!({ "sessionId": "other-session", "prompt": [{ "type": "text", "text": "x" }] }),
    );
    assert!(
        e["message"].as_str().unwrap().contains("other-session"),
        "{e}"
    );
    agent.assert_conformant();
    agent.close();
}

/// The official Rust SDK as the client: a full turn with a permission and a
/// terminal whose command really runs, with the effect in the ledger once.
#[test]
fn the_official_rust_sdk_drives_a_full_turn() {
    use agent_client_protocol::schema::ProtocolVersion;
    use agent_client_protocol::v1::ConnectionTo;
    use agent_client_protocol::v1::schema::{
        ClientCapabilities, ContentBlock, CreateTerminalRequest, CreateTerminalResponse,
        InitializeRequest, NewSessionRequest, PermissionOptionKind, PromptRequest,
        ReleaseTerminalRequest, ReleaseTerminalResponse, RequestPermissionOutcome,
        RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
        SessionNotification, SessionUpdate, StopReason, TerminalExitStatus, TextContent,
        WaitForTerminalExitRequest, WaitForTerminalExitResponse,
    };
    use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent as AgentRole};
    use std::sync::{Arc, Mutex};

    let d = dirs();
    let config = AcpAgentConfig::new(exe()).args([
        "fake-provider".to_owned(),
        "acp".to_owned(),
        "--state-dir".to_owned(),
        d.state.display().to_string(),
    ]);
    let lines = Arc::new(Mutex::new(Vec::<(Direction, String)>::new()));
    let agent = {
        let lines = Arc::clone(&lines);
        AcpAgent::new(config).with_debug(move |line, direction| {
            let direction = match direction {
                agent_client_protocol::LineDirection::Stdin => Direction::ClientToServer,
                agent_client_protocol::LineDirection::Stdout => Direction::ServerToClient,
                agent_client_protocol::LineDirection::Stderr => return,
            };
            lines.lock().unwrap().push((direction, line.to_owned()));
        })
    };
    let updates = Arc::new(Mutex::new(Vec::<String>::new()));
    let terminals = Arc::new(Mutex::new(HashMap::<String, std::process::Child>::new()));
    let cwd = d.cwd.clone();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let run = async {
        let updates_seen = Arc::clone(&updates);
        let created = Arc::clone(&terminals);
        let waited = Arc::clone(&terminals);
        let released = Arc::clone(&terminals);
        agent_client_protocol::Client
            .v1()
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    let kind = match &notification.update {
                        SessionUpdate::UserMessageChunk(c) => {
                            format!("user_message_chunk:{:?}", c.message_id)
                        }
                        SessionUpdate::AgentMessageChunk(_) => "agent_message_chunk".to_owned(),
                        SessionUpdate::ToolCall(_) => "tool_call".to_owned(),
                        SessionUpdate::ToolCallUpdate(_) => "tool_call_update".to_owned(),
                        other => format!("{other:?}"),
                    };
                    updates_seen.lock().unwrap().push(kind);
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest, responder, _cx| {
                    let option = request
                        .options
                        .iter()
                        .find(|o| o.kind == PermissionOptionKind::AllowOnce)
                        .map(|o| o.option_id.clone());
                    let outcome = match option {
                        Some(id) => {
                            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
                        }
                        None => RequestPermissionOutcome::Cancelled,
                    };
                    responder.respond(RequestPermissionResponse::new(outcome))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: CreateTerminalRequest, responder, _cx| {
                    let mut cmd = Command::new(&request.command);
                    cmd.args(&request.args)
                        .stdout(Stdio::null())
                        .stdin(Stdio::null());
                    if let Some(cwd) = &request.cwd {
                        cmd.current_dir(cwd);
                    }
                    let child = cmd.spawn().expect("spawn the terminal command");
                    let mut map = created.lock().unwrap();
                    let id = format!("term-{}", map.len() + 1);
                    map.insert(id.clone(), child);
                    responder.respond(CreateTerminalResponse::new(id))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: WaitForTerminalExitRequest, responder, _cx| {
                    let child = waited
                        .lock()
                        .unwrap()
                        .remove(&request.terminal_id.to_string());
                    let code = child.map(|mut c| c.wait().expect("wait").code());
                    let status =
                        TerminalExitStatus::new().exit_code(code.flatten().map(|c| c as u32));
                    responder.respond(WaitForTerminalExitResponse::new(status))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: ReleaseTerminalRequest, responder, _cx| {
                    released
                        .lock()
                        .unwrap()
                        .remove(&request.terminal_id.to_string());
                    responder.respond(ReleaseTerminalResponse::new())
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(agent, async move |connection: ConnectionTo<AgentRole>| {
                let init = connection
                    .send_request(
                        InitializeRequest::new(ProtocolVersion::V1)
                            .client_capabilities(ClientCapabilities::new().terminal(true)),
                    )
                    .block_task()
                    .await?;
                assert!(init.agent_capabilities.load_session);
                let session = connection
                    .send_request(NewSessionRequest::new(cwd))
                    .block_task()
                    .await?
                    .session_id;
                let mut meta = serde_json::Map::new();
                meta.insert("messageId".to_owned(), json!("sdk-1"));
                let response = connection
                    .send_request(
                        PromptRequest::new(
                            session,
                            vec![ContentBlock::Text(TextContent::new("Create hello.txt"))],
                        )
                        .meta(meta),
                    )
                    .block_task()
                    .await?;
                assert_eq!(response.stop_reason, StopReason::EndTurn);
                Ok(())
            })
            .await
    };
    let outcome = runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, run)
            .await
            .expect("the SDK client finished before the deadline")
    });
    outcome.expect("the SDK client ran the turn");

    let updates = updates.lock().unwrap().clone();
    assert_eq!(
        updates,
        [
            "user_message_chunk:Some(MessageId(\"sdk-1\"))",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    assert_eq!(
        ledger(&d),
        [("write-hello".into(), "sdk-1".into(), Some("sdk-1".into()))]
    );
    // What the SDK and the fake said to each other conforms too.
    let mut session = AcpSession::new();
    for (direction, line) in lines.lock().unwrap().iter() {
        if let Err(v) = session.check_line(*direction, line) {
            panic!("SDK exchange does not conform:\n{v}\nline: {line}");
        }
    }
}

/// One prompt of the default script on a fake played `like`, its first
/// model request failed with `fault` (`--answer`): the turn as the client
/// saw it, what a fresh process replays, and the model requests journaled.
fn fail_upstream(like: &str, fault: &str) -> (Turn, Vec<Value>, usize) {
    let d = dirs();
    let answer = format!("acp.model.requested#1={fault}");
    let mut agent = Agent::start(&d.state, &["--like", like, "--answer", &answer]);
    agent.initialize();
    let session = agent.new_session(&d.cwd);
    let id = agent.prompt(&session, "Create hello.txt", "m-1");
    let turn = agent.drive(id, allow);
    agent.assert_conformant();
    agent.close();
    let mut again = Agent::start(&d.state, &["--like", like]);
    again.initialize();
    let replay = again.load(&session, &d.cwd);
    again.close();
    (turn, replay, facts(&d, "model.requested").len())
}

/// The agent's text in `updates`.
fn text_of(updates: &[Value]) -> Vec<&str> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// The fake fails a prompt upstream as the agent it plays does (`turncut
/// fidelity --moments upstream` compares it with the real ones): as
/// Claude's agent, an expired credential is asked ten times more, then the
/// prompt fails unechoed with Claude's error, which `session/load` replays
/// as the turn's text; after a broken stream the response asked again is
/// not streamed (its text only replayed); as codex-acp every fault fails
/// the prompt at once with codex-acp's error, and nothing but the prompt is
/// replayed.
#[test]
fn an_upstream_fault_fails_or_retries_the_prompt_as_the_agent_it_plays() {
    use wire::upstream::{UpstreamFault, claude_acp_prompt_error, codex_acp_prompt_error};
    let (turn, replay, requests) = fail_upstream("claude", "auth-expired");
    let error = claude_acp_prompt_error(UpstreamFault::AuthExpired).unwrap();
    assert_eq!(turn.error.as_ref(), Some(&error), "{turn:?}");
    assert_eq!(kinds(&turn.updates), Vec::<String>::new());
    assert_eq!(requests, 11);
    let message = error["message"].as_str().unwrap();
    let kept = message.strip_prefix("Internal error: ").unwrap();
    assert_eq!(text_of(&replay), [kept], "{replay:?}");
    assert_eq!(kinds(&replay)[0], "user_message_chunk");

    let (turn, replay, requests) = fail_upstream("claude", "stream-cut");
    assert_eq!(turn.stop_reason.as_deref(), Some("end_turn"), "{turn:?}");
    assert_eq!(text_of(&turn.updates), ["Created hello.txt."]);
    let whole = ["Looking at the workspace.", "Created hello.txt."];
    assert_eq!(text_of(&replay), whole, "{replay:?}");
    assert_eq!(
        requests, 3,
        "the broken request, its retry, the one after the tool"
    );

    for fault in ["rate-limit", "stream-cut"] {
        let (turn, replay, requests) = fail_upstream("codex", fault);
        let error = codex_acp_prompt_error(UpstreamFault::parse(fault).unwrap());
        assert_eq!(turn.error.as_ref(), Some(&error), "{fault}: {turn:?}");
        assert!(!error["data"]["codex_error_info"].is_null());
        assert!(turn.updates.is_empty(), "{fault}: {turn:?}");
        assert_eq!(kinds(&replay), ["user_message_chunk"], "{fault}");
        assert_eq!(requests, 1, "{fault}");
    }
}
