//! `fake-provider acp`: a fake Agent Client Protocol (v1) agent on stdio.
//!
//! What it simulates: the wire protocol of an ACP agent (JSON-RPC 2.0 with
//! `"jsonrpc": "2.0"`, one object per line): `initialize` (protocol version 1,
//! `loadSession: true`), `session/new`, `session/load` (replays the whole stored
//! conversation as `session/update` notifications, then answers),
//! `session/prompt` and the `session/cancel` notification. A prompt turn is
//! recorded durably, then its user message is echoed as a `user_message_chunk`
//! carrying the client's message id (`_meta.messageId` of the prompt) both as
//! `messageId` and as `_meta.messageId`, then the script plays:
//! `agent_message_chunk`s, and per tool a `tool_call`, an optional
//! `session/request_permission`, and the command run on the client side through
//! `terminal/create`, `terminal/wait_for_exit` and `terminal/release`, with
//! `tool_call_update`s in between. The `session/prompt` response (`stopReason`)
//! ends the turn, as ACP has no turn ids. Sessions and every update sent are
//! durable in `--state-dir`, so a restarted fake replays them on `session/load`
//! like the real products, and a turn in progress when the process died reads
//! back as `interrupted`.
//!
//! The model is the script (`crate::script`), with the same rules as the fake
//! Codex: a user turn plays the script turn for its message id from the top,
//! naively; a prompt whose text starts with [`CONTINUE_MARKER`] continues the
//! session's latest user turn and skips the effects its message already caused.
//! Tool call ids (`call_1`, …) and this agent's JSON-RPC request ids are
//! per-process counters, so a restarted agent reuses them, as real ones do.
//!
//! What it deliberately does not simulate: models, reasoning, plans, modes,
//! config options, authentication, MCP servers (accepted and ignored), images
//! and other non-text content (stored and echoed, never read), `fs/read_text_file`
//! (a script's `write-file` tool sends `fs/write_text_file`),
//! `terminal/output` and `terminal/kill`, `$/cancel_request`, and the unstable
//! methods (`session/list`, `session/resume`, `session/fork`, `session/close`,
//! providers, elicitation), which answer −32601. A line that is not JSON gets an
//! error with `id: null`, as JSON-RPC 2.0 says.

pub mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::mpsc;

use serde::Deserialize;
use serde_json::{Value, json};

pub use store::{SessionRecord, Store, TurnRecord, TurnStatus, recorded_turns};

pub use crate::codex::{CONTINUE_MARKER, LINE_BYTES_MAX};
use crate::faults::Faults;
use crate::journal::{Journal, now_ms};
use crate::ledger;
use crate::script::{Script, ScriptTool};
use crate::stdio::{Input, read_lines};
use cutpoint::slug;

/// The ACP protocol version this fake speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// The permission option ids offered for every tool call needing approval.
pub const ALLOW_ONCE: &str = "allow";
/// See [`ALLOW_ONCE`].
pub const ALLOW_ALWAYS: &str = "allow-always";
/// See [`ALLOW_ONCE`].
pub const REJECT_ONCE: &str = "reject";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const RESOURCE_NOT_FOUND: i64 = -32002;

/// Everything `fake-provider acp` needs to run.
#[derive(Debug)]
pub struct AcpOptions {
    /// Durable store directory.
    pub state_dir: PathBuf,
    /// Journal file.
    pub journal: Option<PathBuf>,
    /// Effect ledger file.
    pub ledger: PathBuf,
    /// The scripted model.
    pub script: Script,
    /// Armed `--exit`/`--hang` points.
    pub faults: Faults,
    /// The command line that reaches `fake-provider`; tool commands, run by the
    /// client, are `<this> effect …`.
    pub self_cmd: Vec<OsString>,
}

/// Serves the protocol on stdin/stdout until stdin closes.
pub fn serve(opts: AcpOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.state_dir)?;
    let journal = Journal::open(opts.journal.as_deref())?;
    let store = Store::open(&opts.state_dir)?;
    journal.fact(
        "process.started",
        json!({ "pid": std::process::id(), "protocol": "acp" }),
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || read_lines(tx));
    let mut server = Server {
        opts,
        journal,
        store,
        initialized: false,
        next_request_id: 0,
        next_call: 0,
        loaded: HashSet::new(),
        active: HashMap::new(),
        pending: HashMap::new(),
        abandoned: HashSet::new(),
    };
    // One loop owns all state; the reader thread only forwards lines.
    loop {
        let input = rx.recv().unwrap_or(Input::Eof);
        let result = match input {
            Input::Line(bytes) => server.on_line(&bytes),
            Input::Oversized(n) => server.send_error(
                Value::Null,
                INVALID_REQUEST,
                &format!("message of {n} bytes exceeds the {LINE_BYTES_MAX}-byte line limit"),
            ),
            Input::Eof => {
                server.journal.fact("process.stdin_closed", json!({}));
                return Ok(());
            }
        };
        if let Err(Closed) = result {
            return Ok(());
        }
    }
}

/// Stdout is gone: the client hung up, so the agent stops.
struct Closed;

type Sent = Result<(), Closed>;

/// A request's failure: JSON-RPC error code and message.
type Refusal = (i64, String);

struct Server {
    opts: AcpOptions,
    journal: Journal,
    store: Store,
    initialized: bool,
    /// This agent's JSON-RPC request ids; restart at 1 in every process.
    next_request_id: i64,
    /// Tool call ids (`call_N`); restart at 1 in every process.
    next_call: u64,
    /// Sessions created or loaded by this process; only these take prompts.
    loaded: HashSet<String>,
    /// Active prompt turns by session id.
    active: HashMap<String, ActiveTurn>,
    /// Requests to the client awaiting an answer: request id → session id.
    pending: HashMap<i64, String>,
    /// Requests whose turn ended (cancelled) before the client answered.
    abandoned: HashSet<i64>,
}

struct ActiveTurn {
    /// Index of the turn in its session's `turns`, which only ever grow.
    index: usize,
    /// The JSON-RPC id of the `session/prompt` request, answered at the end.
    prompt_id: Value,
    steps: VecDeque<Step>,
    waiting: Option<Waiting>,
}

enum Step {
    Say(String),
    Tool(ScriptTool),
    Complete,
}

/// A tool call of the active turn, waiting for the client's answer to one of
/// this agent's requests.
struct Waiting {
    request_id: i64,
    call: ToolRun,
    stage: Stage,
}

struct ToolRun {
    call_id: String,
    key: String,
    argv: Vec<String>,
    cwd: String,
    /// A `write-file` tool: the path the client is asked to write.
    write: Option<String>,
}

enum Stage {
    Permission,
    Write,
    Create,
    Wait {
        terminal_id: String,
    },
    Release {
        terminal_id: String,
        exit_code: Option<u64>,
        signal: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[allow(dead_code)]
    protocol_version: u16,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSessionParams {
    cwd: String,
    #[allow(dead_code)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadSessionParams {
    session_id: String,
    #[allow(dead_code)]
    cwd: String,
    #[allow(dead_code)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptParams {
    session_id: String,
    prompt: Vec<Value>,
    #[serde(rename = "_meta", default)]
    meta: Option<PromptMeta>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptMeta {
    #[serde(default)]
    message_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams {
    session_id: String,
}

fn params<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, Refusal> {
    let v = value.get("params").cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| (INVALID_PARAMS, format!("Invalid params: {e}")))
}

fn now_s() -> i64 {
    (now_ms() / 1000) as i64
}

fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

impl Server {
    fn point(&self, name: &str) {
        self.opts.faults.point(name, &self.journal);
    }

    fn write(&self, msg: &Value) -> Sent {
        let mut line = serde_json::to_vec(msg).expect("messages serialize");
        line.push(b'\n');
        let mut out = std::io::stdout().lock();
        // The journal line goes first: if the process dies between the two, the
        // journal over-reports a send, which the harness treats as uncertain
        // delivery, never as a send that did not happen.
        self.journal.message_out(msg);
        out.write_all(&line).map_err(|_| Closed)?;
        out.flush().map_err(|_| Closed)
    }

    fn respond(&self, id: &Value, method: &str, result: Value) -> Sent {
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))?;
        self.point(&format!("acp.{}.responded", slug(method)));
        Ok(())
    }

    fn send_error(&self, id: Value, code: i64, message: &str) -> Sent {
        self.write(&json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": code, "message": message },
        }))
    }

    /// Sends one `session/update` without storing it (replays, and updates that
    /// are already stored).
    fn send_update(&self, session_id: &str, update: &Value) -> Sent {
        let method = "session/update";
        self.write(&json!({
            "jsonrpc": "2.0",
            "method": method,
            "params": { "sessionId": session_id, "update": update },
        }))?;
        self.point(&format!("acp.{}.notified", slug(method)));
        Ok(())
    }

    fn send_updates(&self, session_id: &str, updates: &[Value]) -> Sent {
        updates
            .iter()
            .try_for_each(|update| self.send_update(session_id, update))
    }

    /// Stores `update` in the active turn of `session_id`, durably, then sends it.
    fn record_update(&mut self, session_id: &str, update: Value) -> Sent {
        let Some(index) = self.active.get(session_id).map(|a| a.index) else {
            return Ok(());
        };
        if let Some(turn) = self
            .store
            .get_mut(session_id)
            .and_then(|s| s.turns.get_mut(index))
        {
            turn.updates.push(update.clone());
        }
        if let Err(e) = self.store.save(session_id) {
            self.fail_storage(&e);
        }
        self.point("acp.item.recorded");
        self.send_update(session_id, &update)
    }

    /// Sends a request to the client on behalf of the active turn of
    /// `session_id`, which then waits for the answer at `stage`.
    fn request(
        &mut self,
        session_id: &str,
        method: &str,
        params: Value,
        call: ToolRun,
        stage: Stage,
    ) -> Sent {
        self.next_request_id += 1;
        let request_id = self.next_request_id;
        let Some(active) = self.active.get_mut(session_id) else {
            return Ok(());
        };
        active.waiting = Some(Waiting {
            request_id,
            call,
            stage,
        });
        self.pending.insert(request_id, session_id.to_owned());
        self.write(&json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": params,
        }))?;
        self.point(&format!("acp.{}.requested", slug(method)));
        Ok(())
    }

    fn on_line(&mut self, bytes: &[u8]) -> Sent {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let msg: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                self.journal.fact(
                    "message.malformed",
                    json!({ "error": e.to_string(), "bytes": bytes.len() }),
                );
                return self.send_error(Value::Null, PARSE_ERROR, &format!("Parse error: {e}"));
            }
        };
        self.journal.message_in(&msg);
        let Some(obj) = msg.as_object() else {
            return self.send_error(
                Value::Null,
                INVALID_REQUEST,
                "Invalid request: a message must be a JSON object",
            );
        };
        let id = obj.get("id").cloned();
        let valid_id = id.as_ref().is_some_and(|i| i.is_string() || i.is_i64());
        if id.is_some() && !valid_id {
            return self.send_error(
                Value::Null,
                INVALID_REQUEST,
                "Invalid request: `id` must be a string or an integer",
            );
        }
        let versioned = obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
        match (obj.get("method"), id) {
            (Some(Value::String(_)), id) if !versioned => self.send_error(
                id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "Invalid request: `jsonrpc` must be \"2.0\"",
            ),
            (Some(Value::String(method)), Some(id)) => {
                let method = method.clone();
                self.point(&format!("acp.{}.received", slug(&method)));
                self.on_request(&id, &method, &msg)
            }
            (Some(Value::String(method)), None) => {
                let method = method.clone();
                self.point(&format!("acp.{}.received", slug(&method)));
                self.on_notification(&method, &msg)
            }
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                self.on_response(&id, &msg)
            }
            (_, id) => self.send_error(
                id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "Invalid request: expected a request, a notification or a response",
            ),
        }
    }

    fn on_request(&mut self, id: &Value, method: &str, msg: &Value) -> Sent {
        if !self.initialized && method != "initialize" {
            return self.send_error(
                id.clone(),
                INVALID_REQUEST,
                "Not initialized: send `initialize` first",
            );
        }
        let outcome = match method {
            "initialize" => self.initialize(id, msg),
            "session/new" => self.session_new(id, msg),
            "session/load" => self.session_load(id, msg),
            "session/prompt" => self.session_prompt(id, msg),
            _ => Err((METHOD_NOT_FOUND, format!("Method not found: {method}"))),
        };
        match outcome {
            Ok(sent) => sent,
            Err((code, message)) => self.send_error(id.clone(), code, &message),
        }
    }

    fn on_notification(&mut self, method: &str, msg: &Value) -> Sent {
        match method {
            "session/cancel" => match params::<CancelParams>(msg) {
                Ok(p) => self.cancel(&p.session_id),
                Err((_, error)) => {
                    // A notification gets no answer, even a bad one.
                    self.journal.fact(
                        "notification.malformed",
                        json!({ "method": method, "error": error }),
                    );
                    Ok(())
                }
            },
            _ => {
                self.journal
                    .fact("notification.ignored", json!({ "method": method }));
                Ok(())
            }
        }
    }

    fn initialize(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let _: InitializeParams = params(msg)?;
        // A repeated initialize is answered like the first one.
        self.initialized = true;
        Ok(self.respond(
            id,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": true,
                    "promptCapabilities": { "image": false, "audio": false, "embeddedContext": false },
                    "mcpCapabilities": { "http": false, "sse": false },
                },
                "authMethods": [],
                "agentInfo": {
                    "name": "turncut-fake-acp",
                    "title": "turncut fake ACP agent",
                    "version": env!("CARGO_PKG_VERSION"),
                },
            }),
        ))
    }

    fn session_new(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: NewSessionParams = params(msg)?;
        if !std::path::Path::new(&p.cwd).is_absolute() {
            return Err((INVALID_PARAMS, format!("cwd must be absolute: {}", p.cwd)));
        }
        let now = now_s();
        let session = SessionRecord {
            v: store::STORE_VERSION,
            id: uuid::Uuid::now_v7().to_string(),
            cwd: p.cwd,
            created_at: now,
            updated_at: now,
            turns: Vec::new(),
        };
        let session_id = session.id.clone();
        self.store
            .insert(session)
            .map_err(|e| (INTERNAL_ERROR, format!("failed to save session: {e}")))?;
        self.loaded.insert(session_id.clone());
        self.journal
            .fact("session.recorded", json!({ "session": session_id }));
        self.point("acp.session.recorded");
        Ok(self.respond(id, "session/new", json!({ "sessionId": session_id })))
    }

    fn session_exists(&self, session_id: &str) -> Result<(), Refusal> {
        match self.store.get(session_id) {
            Some(_) => Ok(()),
            None => Err((
                RESOURCE_NOT_FOUND,
                format!("Resource not found: session {session_id}"),
            )),
        }
    }

    fn session_load(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: LoadSessionParams = params(msg)?;
        self.session_exists(&p.session_id)?;
        self.loaded.insert(p.session_id.clone());
        let updates: Vec<Value> = self
            .store
            .get(&p.session_id)
            .map(|s| s.turns.iter().flat_map(|t| t.updates.clone()).collect())
            .unwrap_or_default();
        self.journal.fact(
            "session.replayed",
            json!({ "session": p.session_id, "updates": updates.len() }),
        );
        Ok(self
            .send_updates(&p.session_id, &updates)
            .and_then(|()| self.respond(id, "session/load", json!({}))))
    }

    fn session_prompt(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: PromptParams = params(msg)?;
        self.session_exists(&p.session_id)?;
        if !self.loaded.contains(&p.session_id) {
            return Err((
                INVALID_REQUEST,
                format!(
                    "session {} is not loaded in this agent process; send session/load first",
                    p.session_id
                ),
            ));
        }
        if self.active.contains_key(&p.session_id) {
            return Err((
                INVALID_REQUEST,
                format!("session {} already has a prompt in progress", p.session_id),
            ));
        }
        let client_id = p.meta.and_then(|m| m.message_id);
        let text: String = p
            .prompt
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let continuation = text.starts_with(CONTINUE_MARKER);
        let turn_id = client_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let session = self.store.get(&p.session_id).expect("checked above");
        let (authorized_by, script_index) = if continuation {
            let Some(target) = session.turns.iter().rev().find(|t| !t.continuation) else {
                return Err((
                    INVALID_REQUEST,
                    format!("session {} has no user turn to continue", p.session_id),
                ));
            };
            (target.authorized_by.clone(), target.script_index)
        } else {
            // The naive model: the same message plays the same script turn
            // again; a new message plays the next one.
            let mut seen: Vec<&str> = Vec::new();
            for t in session.turns.iter().filter(|t| !t.continuation) {
                if !seen.contains(&t.authorized_by.as_str()) {
                    seen.push(&t.authorized_by);
                }
            }
            let index = seen
                .iter()
                .position(|s| *s == turn_id)
                .unwrap_or(seen.len());
            (turn_id.clone(), index)
        };
        let script_turn = self.opts.script.turn(script_index).clone();
        let mut steps: VecDeque<Step> = script_turn.say.into_iter().map(Step::Say).collect();
        let done: HashSet<String> = if continuation {
            ledger::read(&self.opts.ledger)
                .map_err(|e| (INTERNAL_ERROR, format!("failed to read ledger: {e}")))?
                .into_iter()
                .filter(|e| e.by == authorized_by)
                .map(|e| e.key)
                .collect()
        } else {
            HashSet::new()
        };
        for tool in script_turn.tools {
            if done.contains(&tool.key) {
                self.journal.fact(
                    "effect.skipped",
                    json!({ "key": tool.key, "by": authorized_by, "reason": "already in ledger" }),
                );
            } else {
                steps.push_back(Step::Tool(tool));
            }
        }
        steps.push_back(Step::Say(script_turn.final_message));
        steps.push_back(Step::Complete);

        // The user message is part of the turn from the moment it is recorded:
        // a restarted agent replays it with its message id on `session/load`,
        // which is what "was this turn recorded?" asks.
        let echoes: Vec<Value> = p
            .prompt
            .iter()
            .map(|block| {
                json!({
                    "sessionUpdate": "user_message_chunk",
                    "content": block,
                    "messageId": turn_id,
                    "_meta": { "messageId": turn_id },
                })
            })
            .collect();
        let record = TurnRecord {
            id: turn_id.clone(),
            client_id: client_id.clone(),
            prompt: p.prompt,
            continuation,
            authorized_by: authorized_by.clone(),
            script_index,
            status: TurnStatus::InProgress,
            stop_reason: None,
            updates: echoes.clone(),
            started_at: now_s(),
            completed_at: None,
        };
        let index = {
            let session = self.store.get_mut(&p.session_id).expect("checked above");
            session.updated_at = now_s();
            session.turns.push(record);
            session.turns.len() - 1
        };
        if let Err(e) = self.store.save(&p.session_id) {
            // Nothing was acknowledged yet, so the prompt can still be refused.
            if let Some(session) = self.store.get_mut(&p.session_id) {
                session.turns.pop();
            }
            return Err((INTERNAL_ERROR, format!("failed to save turn: {e}")));
        }
        self.journal.fact(
            "turn.recorded",
            json!({
                "session": p.session_id,
                "turn": turn_id,
                "client_id": client_id,
                "continuation": continuation,
                "authorized_by": authorized_by,
                "script_index": script_index,
            }),
        );
        self.point("acp.turn.recorded");
        self.active.insert(
            p.session_id.clone(),
            ActiveTurn {
                index,
                prompt_id: id.clone(),
                steps,
                waiting: None,
            },
        );
        Ok(self
            .send_updates(&p.session_id, &echoes)
            .and_then(|()| self.pump(&p.session_id)))
    }

    /// The active turn's record.
    fn turn(&self, session_id: &str) -> Option<&TurnRecord> {
        let index = self.active.get(session_id)?.index;
        self.store.get(session_id)?.turns.get(index)
    }

    /// Plays the active turn of `session_id` until it ends or waits for the
    /// client.
    fn pump(&mut self, session_id: &str) -> Sent {
        loop {
            let Some(active) = self.active.get_mut(session_id) else {
                return Ok(());
            };
            if active.waiting.is_some() {
                return Ok(());
            }
            let Some(step) = active.steps.pop_front() else {
                return Ok(());
            };
            match step {
                Step::Say(text) => {
                    let update = json!({
                        "sessionUpdate": "agent_message_chunk",
                        "content": text_block(&text),
                        "messageId": uuid::Uuid::now_v7().to_string(),
                    });
                    self.record_update(session_id, update)?;
                }
                Step::Tool(tool) => self.tool(session_id, &tool)?,
                Step::Complete => {
                    return self.finish_turn(session_id, TurnStatus::Completed, "end_turn");
                }
            }
        }
    }

    fn effect_argv(&self, session_id: &str, turn_id: &str, key: &str, by: &str) -> Vec<String> {
        let mut argv: Vec<String> = self
            .opts
            .self_cmd
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for a in [
            "effect",
            "--ledger",
            &self.opts.ledger.display().to_string(),
            "--key",
            key,
            "--by",
            by,
            "--conversation",
            session_id,
            "--turn",
            turn_id,
        ] {
            argv.push(a.to_owned());
        }
        argv
    }

    fn tool(&mut self, session_id: &str, tool: &ScriptTool) -> Sent {
        let Some(turn) = self.turn(session_id) else {
            return Ok(());
        };
        let argv = match &tool.argv {
            Some(argv) => argv.clone(),
            None => self.effect_argv(session_id, &turn.id, &tool.key, &turn.authorized_by),
        };
        let cwd = self
            .store
            .get(session_id)
            .map(|s| s.cwd.clone())
            .unwrap_or_default();
        self.next_call += 1;
        let call = ToolRun {
            call_id: format!("call_{}", self.next_call),
            key: tool.key.clone(),
            argv,
            cwd,
            write: tool.path.clone(),
        };
        let title = format!("Run {}", tool.key);
        let raw_input = json!({ "command": call.argv[0], "args": call.argv[1..], "cwd": call.cwd });
        self.record_update(
            session_id,
            json!({
                "sessionUpdate": "tool_call",
                "toolCallId": call.call_id,
                "title": title,
                "kind": "execute",
                "status": "pending",
                "rawInput": raw_input,
            }),
        )?;
        if !tool.approval {
            return self.run_tool(session_id, call);
        }
        let params = json!({
            "sessionId": session_id,
            "toolCall": {
                "toolCallId": call.call_id,
                "title": title,
                "kind": "execute",
                "status": "pending",
                "rawInput": raw_input,
            },
            "options": [
                { "optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once" },
                { "optionId": ALLOW_ALWAYS, "name": "Always allow", "kind": "allow_always" },
                { "optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once" },
            ],
        });
        self.request(
            session_id,
            "session/request_permission",
            params,
            call,
            Stage::Permission,
        )
    }

    /// Runs an approved tool on the client's side: a file write, or a command.
    fn run_tool(&mut self, session_id: &str, call: ToolRun) -> Sent {
        let Some(path) = call.write.clone() else {
            return self.start_terminal(session_id, call);
        };
        let params = json!({
            "sessionId": session_id,
            "path": path,
            "content": format!("written by {}\n", call.key),
        });
        self.request(session_id, "fs/write_text_file", params, call, Stage::Write)
    }

    /// Runs the tool on the client's side: the client spawns the effect command
    /// in a terminal of its own.
    fn start_terminal(&mut self, session_id: &str, call: ToolRun) -> Sent {
        self.record_update(
            session_id,
            json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": call.call_id,
                "status": "in_progress",
            }),
        )?;
        self.point("acp.effect.starting");
        let params = json!({
            "sessionId": session_id,
            "command": call.argv[0],
            "args": call.argv[1..],
            "cwd": call.cwd,
        });
        self.request(session_id, "terminal/create", params, call, Stage::Create)
    }

    /// Ends a tool call as failed and lets the turn go on.
    fn tool_failed(&mut self, session_id: &str, call: &ToolRun, why: &str) -> Sent {
        self.record_update(
            session_id,
            json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": call.call_id,
                "status": "failed",
                "content": [{ "type": "content", "content": text_block(why) }],
            }),
        )
    }

    fn on_response(&mut self, id: &Value, msg: &Value) -> Sent {
        let request_id = id.as_i64();
        let Some(session_id) = request_id.and_then(|r| self.pending.remove(&r)) else {
            let fact = if request_id.is_some_and(|r| self.abandoned.remove(&r)) {
                "response.abandoned"
            } else {
                "response.unexpected"
            };
            self.journal.fact(fact, json!({ "id": id }));
            return Ok(());
        };
        let Some(active) = self.active.get_mut(&session_id) else {
            return Ok(());
        };
        let Some(waiting) = active.waiting.take() else {
            return Ok(());
        };
        debug_assert_eq!(Some(waiting.request_id), request_id);
        let result = msg.get("result");
        let error = msg.get("error").map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or("the client answered with an error")
                .to_owned()
        });
        let call = waiting.call;
        match waiting.stage {
            Stage::Permission => {
                self.point("acp.permission.received");
                let outcome = result.and_then(|r| r.pointer("/outcome/outcome"));
                let decision = match (outcome.and_then(Value::as_str), &error) {
                    (Some("selected"), None) => result
                        .and_then(|r| r.pointer("/outcome/optionId"))
                        .and_then(Value::as_str)
                        .unwrap_or(REJECT_ONCE)
                        .to_owned(),
                    (Some("cancelled"), None) => "cancelled".to_owned(),
                    // An error or a malformed answer counts as a refusal.
                    _ => "error".to_owned(),
                };
                self.journal.fact(
                    "approval.decided",
                    json!({ "session": session_id, "key": call.key, "decision": decision }),
                );
                match decision.as_str() {
                    ALLOW_ONCE | ALLOW_ALWAYS => self.run_tool(&session_id, call),
                    "cancelled" => {
                        self.tool_failed(&session_id, &call, "Cancelled by the user.")?;
                        self.finish_turn(&session_id, TurnStatus::Interrupted, "cancelled")
                    }
                    _ => {
                        self.tool_failed(&session_id, &call, "Permission denied.")?;
                        self.pump(&session_id)
                    }
                }
            }
            Stage::Write => {
                let (status, fact) = match &error {
                    None => ("completed", "file.written"),
                    Some(_) => ("failed", "file.write_failed"),
                };
                self.journal.fact(
                    fact,
                    json!({ "key": call.key, "session": session_id, "path": call.write, "error": error }),
                );
                self.record_update(
                    &session_id,
                    json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call.call_id,
                        "status": status,
                    }),
                )?;
                self.pump(&session_id)
            }
            Stage::Create => {
                self.point("acp.terminal_create.answered");
                let terminal_id = result
                    .and_then(|r| r.get("terminalId"))
                    .and_then(Value::as_str);
                match (terminal_id, error) {
                    (Some(terminal_id), None) => {
                        let terminal_id = terminal_id.to_owned();
                        let params = json!({ "sessionId": session_id, "terminalId": terminal_id });
                        self.request(
                            &session_id,
                            "terminal/wait_for_exit",
                            params,
                            call,
                            Stage::Wait { terminal_id },
                        )
                    }
                    (_, error) => {
                        let why = error.unwrap_or_else(|| "no terminalId in the answer".into());
                        self.journal.fact(
                            "effect.failed",
                            json!({ "key": call.key, "session": session_id, "error": why }),
                        );
                        self.tool_failed(&session_id, &call, &format!("Terminal failed: {why}"))?;
                        self.pump(&session_id)
                    }
                }
            }
            Stage::Wait { terminal_id } => {
                self.point("acp.terminal_wait_for_exit.answered");
                let exit_code = result
                    .and_then(|r| r.get("exitCode"))
                    .and_then(Value::as_u64);
                let signal = result
                    .and_then(|r| r.get("signal"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let by = self
                    .turn(&session_id)
                    .map(|t| (t.id.clone(), t.authorized_by.clone()));
                self.journal.fact(
                    "effect.exited",
                    json!({
                        "key": call.key,
                        "by": by.as_ref().map(|b| &b.1),
                        "session": session_id,
                        "turn": by.as_ref().map(|b| &b.0),
                        "exit_code": exit_code,
                        "signal": signal,
                        "error": error,
                    }),
                );
                self.point("acp.effect.exited");
                let params = json!({ "sessionId": session_id, "terminalId": terminal_id });
                self.request(
                    &session_id,
                    "terminal/release",
                    params,
                    call,
                    Stage::Release {
                        terminal_id,
                        exit_code,
                        signal,
                    },
                )
            }
            Stage::Release {
                terminal_id,
                exit_code,
                signal,
            } => {
                self.point("acp.terminal_release.answered");
                let status = if exit_code == Some(0) {
                    "completed"
                } else {
                    "failed"
                };
                self.record_update(
                    &session_id,
                    json!({
                        "sessionUpdate": "tool_call_update",
                        "toolCallId": call.call_id,
                        "status": status,
                        "content": [{ "type": "terminal", "terminalId": terminal_id }],
                        "rawOutput": { "exitCode": exit_code, "signal": signal },
                    }),
                )?;
                self.pump(&session_id)
            }
        }
    }

    fn cancel(&mut self, session_id: &str) -> Sent {
        let Some(active) = self.active.get_mut(session_id) else {
            self.journal
                .fact("cancel.ignored", json!({ "session": session_id }));
            return Ok(());
        };
        let waiting = active.waiting.take();
        self.journal
            .fact("turn.cancelled", json!({ "session": session_id }));
        if let Some(w) = waiting {
            // The client still owes an answer (a permission request must be
            // answered `cancelled`); it is read and dropped.
            self.pending.remove(&w.request_id);
            self.abandoned.insert(w.request_id);
            self.tool_failed(session_id, &w.call, "Cancelled by the user.")?;
        }
        self.finish_turn(session_id, TurnStatus::Interrupted, "cancelled")
    }

    fn finish_turn(&mut self, session_id: &str, status: TurnStatus, stop_reason: &str) -> Sent {
        let Some(active) = self.active.remove(session_id) else {
            return Ok(());
        };
        let mut turn_id = None;
        if let Some(session) = self.store.get_mut(session_id) {
            session.updated_at = now_s();
            if let Some(turn) = session.turns.get_mut(active.index) {
                turn.status = status;
                turn.stop_reason = Some(stop_reason.to_owned());
                turn.completed_at = Some(now_s());
                turn_id = Some(turn.id.clone());
            }
        }
        if let Err(e) = self.store.save(session_id) {
            self.fail_storage(&e);
        }
        self.journal.fact(
            "turn.finished",
            json!({ "session": session_id, "turn": turn_id, "status": status, "stop_reason": stop_reason }),
        );
        self.point("acp.turn_completed.recorded");
        self.respond(
            &active.prompt_id,
            "session/prompt",
            json!({ "stopReason": stop_reason }),
        )
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        // The store is the fake's durable truth; carrying on after a failed
        // write would make it lie about what is recorded.
        self.journal
            .fact("storage.failed", json!({ "error": e.to_string() }));
        eprintln!("fake-provider: failed to save session store: {e}");
        std::process::exit(3);
    }
}
