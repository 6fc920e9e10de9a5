//! `fake-provider codex`: a fake Codex app-server on stdio.
//!
//! What it simulates: the wire protocol of `codex app-server` (one JSON object
//! per line, no `jsonrpc` field): the `initialize`/`initialized` handshake and
//! the real "Not initialized" error; `thread/start`, `thread/resume`,
//! `thread/read {includeTurns}`, `turn/start {clientUserMessageId}` and
//! `turn/interrupt`; the notifications of a turn in the order Codex 0.171.0
//! sends them (`thread/started`, `thread/status/changed`, `turn/started`,
//! `item/started`/`item/completed` for `userMessage`, `agentMessage` with
//! `item/agentMessage/delta`, `commandExecution` with
//! `item/commandExecution/outputDelta`, `thread/tokenUsage/updated` after each
//! model response, and `turn/completed` with status completed, interrupted or
//! failed); the server request `item/commandExecution/requestApproval` with the
//! decisions `accept`, `decline` and `cancel`, followed by
//! `serverRequest/resolved`. Model items carry model-style ids (`msg_…`,
//! `call_…`) and commands read `/bin/bash -lc '<line>'`, as Codex reports them.
//! `harness/tests/real_codex.rs` compares all this with the real server.
//! Threads and turns are durable in `--state-dir` and crash as the real
//! product's do (measured on 0.171.0): a thread is written with its first
//! turn, a turn (without items) before the `turn/start` response, its user
//! message after it; a turn that was in progress when the process died reads
//! back `interrupted` (error null); commands run in a session of their own
//! and die of the hangup when the fake dies; a call issued and never
//! finished reads back `aborted` to a continuation's model.
//!
//! The model is the script (`crate::script`): a user turn plays the script turn
//! for its message from the top, naively, so a replayed message re-runs its
//! effects as a real model would. A continuation turn is a `turn/start` whose
//! first text input starts with [`CONTINUE_MARKER`]; it continues the thread's
//! latest user turn, skipping the calls whose outcome it saw and running the
//! `aborted` ones again, unless warned ([`CHECK_ABORTED_MARKER`]) that they
//! may have run (see `Server::continued_call`).
//!
//! What it deliberately does not simulate: models, reasoning, tokenization
//! (token usage is a byte estimate), sandboxes, exec policies, patches and
//! file-change approvals, MCP, accounts, config, more than one client
//! connection, and `turn/steer`; so it never sends the account and config
//! notifications (`account/rateLimits/updated`, `warning`, `configWarning`,
//! `remoteControl/status/changed`). Methods outside the list above answer
//! −32601 even though the real server knows them. A line that is not JSON gets
//! an error with `id: null` (JSON-RPC 2.0), which the real server would only log.

pub mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::mpsc;

use serde::Deserialize;
use serde_json::{Value, json};

pub use store::{Store, ThreadRecord, TurnRecord, TurnStatus};

use crate::faults::Faults;
use crate::journal::{Journal, now_ms};
use crate::ledger::{self, CREDENTIAL_VARS};
use crate::script::{Script, ScriptTool};
use crate::stdio::{Input, read_lines};

/// Text that marks a `turn/start` as a continuation of the thread's last user
/// turn rather than a new user message. The runner sends it as the first text
/// input of the continuation turn, never the original message.
pub const CONTINUE_MARKER: &str = "[turncut:continue]";

/// Text in a continuation that warns its model that a command reported
/// `aborted` may have run (see `Server::continued_call`).
pub const CHECK_ABORTED_MARKER: &str = "[turncut:check-aborted]";

/// Longest accepted input line, in bytes. Longer lines are discarded whole and
/// answered with an error.
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// The version string this fake reports as its CLI version.
pub const FAKE_CLI_VERSION: &str = "0.171.0";

/// `modelContextWindow` of the token usage: what Codex 0.171.0 reports for a
/// model it has no metadata for (95% of its 272,000-token fallback).
pub const MODEL_CONTEXT_WINDOW: i64 = 258_400;

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// Everything `fake-provider codex` needs to run.
#[derive(Debug)]
pub struct CodexOptions {
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
    /// The command line that reaches `fake-provider` (the standalone binary, or
    /// `turncut fake-provider`); tool commands run `<this> effect …`.
    pub self_cmd: Vec<OsString>,
}

/// Serves the protocol on stdin/stdout until stdin closes.
pub fn serve(opts: CodexOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.state_dir)?;
    let journal = Journal::open(opts.journal.as_deref())?;
    let store = Store::open(&opts.state_dir)?;
    journal.fact(
        "process.started",
        json!({ "pid": std::process::id(), "protocol": "codex" }),
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || read_lines(tx));
    let mut server = Server {
        opts,
        journal,
        store,
        initialized: false,
        next_request_id: 0,
        loaded: HashSet::new(),
        active: HashMap::new(),
        pending: HashMap::new(),
        usage: HashMap::new(),
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

/// Stdout is gone: the client hung up, so the server stops.
struct Closed;

type Sent = Result<(), Closed>;

struct Server {
    opts: CodexOptions,
    journal: Journal,
    store: Store,
    initialized: bool,
    next_request_id: i64,
    /// Threads started or resumed by this process; others read as `notLoaded`.
    loaded: HashSet<String>,
    /// Active turns by thread id.
    active: HashMap<String, ActiveTurn>,
    /// Server requests awaiting the client's answer: request id → thread id.
    pending: HashMap<i64, String>,
    /// Token usage per thread since this process started (not durable).
    usage: HashMap<String, Tokens>,
}

struct ActiveTurn {
    turn_id: String,
    steps: VecDeque<Step>,
    waiting: Option<Waiting>,
    /// Model items (agent messages, tool calls) begun so far: the ordinal of
    /// the next one's id (see [`model_item_id`]).
    items: u32,
    /// Bytes the model produced since the last `thread/tokenUsage/updated`.
    output_bytes: usize,
}

struct Waiting {
    request_id: i64,
    item: Value,
    tool: ScriptTool,
}

enum Step {
    Say(String),
    Tool(ScriptTool),
    /// The end of one model response: `thread/tokenUsage/updated`.
    Usage,
    Complete,
}

/// Token counts of one model response, or of the thread so far.
#[derive(Clone, Copy, Default)]
struct Tokens {
    input: i64,
    output: i64,
}

impl Tokens {
    fn json(self) -> Value {
        json!({
            "totalTokens": self.input + self.output,
            "inputTokens": self.input,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
            "outputTokens": self.output,
            "reasoningOutputTokens": 0,
        })
    }
}

/// Checked for shape only: the fake treats every client alike, but a client
/// that sends a malformed `initialize` must hear about it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    #[allow(dead_code)]
    client_info: ClientInfo,
}

#[derive(Deserialize)]
struct ClientInfo {
    #[allow(dead_code)]
    name: String,
    #[allow(dead_code)]
    version: String,
}

#[derive(Deserialize, Default)]
struct ThreadStartParams {
    cwd: Option<String>,
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThreadIdParams {
    thread_id: String,
    #[serde(default)]
    include_turns: bool,
    #[serde(default)]
    exclude_turns: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnStartParams {
    thread_id: String,
    input: Vec<Value>,
    client_user_message_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TurnInterruptParams {
    thread_id: String,
    turn_id: String,
}

pub use cutpoint::slug;

fn params<T: for<'de> Deserialize<'de>>(value: &Value) -> Result<T, String> {
    let v = value.get("params").cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| format!("Invalid params: {e}"))
}

fn now_s() -> i64 {
    (now_ms() / 1000) as i64
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
        self.write(&json!({ "id": id, "result": result }))?;
        self.point(&format!("codex.{}.responded", slug(method)));
        Ok(())
    }

    fn send_error(&self, id: Value, code: i64, message: &str) -> Sent {
        self.write(&json!({ "id": id, "error": { "code": code, "message": message } }))
    }

    fn notify(&self, method: &str, params: Value) -> Sent {
        self.write(&json!({ "method": method, "params": params }))?;
        self.point(&format!("codex.{}.notified", slug(method)));
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
        match (obj.get("method"), id) {
            (Some(Value::String(method)), Some(id)) => {
                let method = method.clone();
                self.point(&format!("codex.{}.received", slug(&method)));
                self.on_request(&id, &method, &msg)
            }
            (Some(Value::String(method)), None) => {
                let method = method.clone();
                self.point(&format!("codex.{}.received", slug(&method)));
                // Client notifications (`initialized`) need no answer.
                Ok(())
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
            return self.send_error(id.clone(), INVALID_REQUEST, "Not initialized");
        }
        let outcome = match method {
            "initialize" => self.initialize(id, msg),
            "thread/start" => self.thread_start(id, msg),
            "thread/resume" => self.thread_resume(id, msg),
            "thread/read" => self.thread_read(id, msg),
            "turn/start" => self.turn_start(id, msg),
            "turn/interrupt" => self.turn_interrupt(id, msg),
            _ => Err((METHOD_NOT_FOUND, format!("Method not found: {method}"))),
        };
        match outcome {
            Ok(sent) => sent,
            Err((code, message)) => self.send_error(id.clone(), code, &message),
        }
    }

    fn initialize(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        if self.initialized {
            return Err((INVALID_REQUEST, "Already initialized".to_owned()));
        }
        let _: InitializeParams = params(msg).map_err(|e| (INVALID_PARAMS, e))?;
        self.initialized = true;
        let home = std::path::absolute(&self.opts.state_dir)
            .unwrap_or_else(|_| self.opts.state_dir.clone());
        Ok(self.respond(
            id,
            "initialize",
            json!({
                "codexHome": home.display().to_string(),
                "platformFamily": "unix",
                "platformOs": std::env::consts::OS,
                "userAgent": format!("codex_cli_rs/{FAKE_CLI_VERSION} (turncut fake-provider)"),
            }),
        ))
    }

    fn thread_start(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        let p: ThreadStartParams = if msg.get("params").is_some_and(|p| !p.is_null()) {
            params(msg).map_err(|e| (INVALID_PARAMS, e))?
        } else {
            ThreadStartParams::default()
        };
        let cwd = match p.cwd {
            Some(c) if std::path::Path::new(&c).is_absolute() => c,
            Some(c) => return Err((INVALID_PARAMS, format!("cwd must be absolute: {c}"))),
            None => std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|_| "/".to_owned()),
        };
        let now = now_s();
        let thread = ThreadRecord {
            v: store::STORE_VERSION,
            id: uuid::Uuid::now_v7().to_string(),
            session_id: uuid::Uuid::now_v7().to_string(),
            created_at: now,
            updated_at: now,
            cwd,
            model: p.model.unwrap_or_else(|| "fake-model".to_owned()),
            preview: String::new(),
            turns: Vec::new(),
        };
        let thread_id = thread.id.clone();
        // Not durable yet: the real server writes a thread's rollout only
        // when its first turn starts.
        self.store.insert(thread);
        self.loaded.insert(thread_id.clone());
        self.journal
            .fact("thread.started", json!({ "thread": thread_id }));
        let response = self.session_response(&thread_id, false);
        Ok(self.respond(id, "thread/start", response).and_then(|()| {
            self.notify(
                "thread/started",
                json!({ "thread": self.thread_json(&thread_id, false) }),
            )
        }))
    }

    fn thread_resume(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        let p: ThreadIdParams = params(msg).map_err(|e| (INVALID_PARAMS, e))?;
        if self.store.get(&p.thread_id).is_none() {
            return Err((
                INVALID_REQUEST,
                format!("no rollout found for thread id {}", p.thread_id),
            ));
        }
        let newly = self.loaded.insert(p.thread_id.clone());
        let response = self.session_response(&p.thread_id, !p.exclude_turns);
        // As the real server: a thread resumed into this process is
        // announced `idle`.
        let announce = newly;
        Ok(self
            .respond(id, "thread/resume", response)
            .and_then(|()| match announce {
                true => self.status_changed(&p.thread_id),
                false => Ok(()),
            }))
    }

    fn thread_read(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        let p: ThreadIdParams = params(msg).map_err(|e| (INVALID_PARAMS, e))?;
        if self.store.get(&p.thread_id).is_none() {
            return Err((
                INVALID_REQUEST,
                format!("thread not loaded: {}", p.thread_id),
            ));
        }
        // Measured on Codex 0.171.0: a thread not yet written (no turn)
        // cannot list its turns.
        let unwritten = self
            .store
            .get(&p.thread_id)
            .is_some_and(|t| t.turns.is_empty());
        if p.include_turns && unwritten {
            return Err((
                METHOD_NOT_FOUND,
                "list_turns is not supported yet".to_owned(),
            ));
        }
        let thread = self.thread_json(&p.thread_id, p.include_turns);
        Ok(self.respond(id, "thread/read", json!({ "thread": thread })))
    }

    fn thread_exists(&self, thread_id: &str) -> Result<(), (i64, String)> {
        match self.store.get(thread_id) {
            Some(_) => Ok(()),
            None => Err((INVALID_REQUEST, format!("thread not found: {thread_id}"))),
        }
    }

    fn session_response(&self, thread_id: &str, include_turns: bool) -> Value {
        let t = self.store.get(thread_id).expect("thread exists");
        json!({
            "approvalPolicy": "on-request",
            "approvalsReviewer": "user",
            "cwd": t.cwd,
            "model": t.model,
            "modelProvider": "openai",
            "reasoningEffort": null,
            "sandbox": { "type": "workspaceWrite", "writableRoots": [], "networkAccess": false },
            "serviceTier": null,
            "thread": self.thread_json(thread_id, include_turns),
        })
    }

    /// The thread's `ThreadStatus`: `active` (waiting on an approval or not)
    /// while a turn runs, `idle` once loaded, else `notLoaded`.
    fn thread_status(&self, thread_id: &str) -> Value {
        match self.active.get(thread_id) {
            Some(a) => {
                let flags: Vec<&str> = if a.waiting.is_some() {
                    vec!["waitingOnApproval"]
                } else {
                    vec![]
                };
                json!({ "type": "active", "activeFlags": flags })
            }
            None if self.loaded.contains(thread_id) => json!({ "type": "idle" }),
            None => json!({ "type": "notLoaded" }),
        }
    }

    /// `thread/status/changed` with the thread's current status. The real
    /// server sends it when a turn starts (`active`), when an approval is
    /// asked (`waitingOnApproval`) and answered, and before `turn/completed`
    /// (`idle`).
    fn status_changed(&self, thread_id: &str) -> Sent {
        self.notify(
            "thread/status/changed",
            json!({ "threadId": thread_id, "status": self.thread_status(thread_id) }),
        )
    }

    fn thread_json(&self, thread_id: &str, include_turns: bool) -> Value {
        let t = self.store.get(thread_id).expect("thread exists");
        let status = self.thread_status(thread_id);
        let turns: Vec<Value> = if include_turns {
            t.turns
                .iter()
                .map(|turn| turn_json(turn, ItemsView::Full))
                .collect()
        } else {
            Vec::new()
        };
        json!({
            "id": t.id,
            "sessionId": t.session_id,
            "createdAt": t.created_at,
            "updatedAt": t.updated_at,
            "cwd": t.cwd,
            "ephemeral": false,
            "model": t.model,
            "modelProvider": "openai",
            "cliVersion": FAKE_CLI_VERSION,
            "preview": t.preview,
            "projectId": null,
            "name": null,
            "path": null,
            "source": "appServer",
            "status": status,
            "turns": turns,
        })
    }

    fn turn_start(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        let p: TurnStartParams = params(msg).map_err(|e| (INVALID_PARAMS, e))?;
        self.thread_exists(&p.thread_id)?;
        if self.active.contains_key(&p.thread_id) {
            return Err((
                INVALID_REQUEST,
                format!("thread {} already has an active turn", p.thread_id),
            ));
        }
        let text: String = p
            .input
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|i| i.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let continuation = text.starts_with(CONTINUE_MARKER);
        let turn_id = uuid::Uuid::now_v7().to_string();
        let thread = self.store.get(&p.thread_id).expect("checked above");
        // What the model of a continuation knows about the turn it continues.
        let mut target_calls: Option<(Vec<String>, Vec<String>)> = None;
        let mut nothing_to_continue = false;
        let (authorized_by, script_index) = if continuation {
            let Some(target) = thread.turns.iter().rev().find(|t| !t.continuation) else {
                return Err((
                    INVALID_REQUEST,
                    format!("thread {} has no user turn to continue", p.thread_id),
                ));
            };
            target_calls = Some((target.issued.clone(), target.finished.clone()));
            if has_user_message(target) {
                (target.authorized_by.clone(), target.script_index)
            } else {
                // The user message was never recorded: the model never saw
                // it, so the continuation authorizes nothing of it.
                nothing_to_continue = true;
                let by = p.client_user_message_id.clone().unwrap_or_default();
                (by, target.script_index)
            }
        } else {
            let by = p
                .client_user_message_id
                .clone()
                .unwrap_or_else(|| turn_id.clone());
            // The naive model: the same message plays the same script turn
            // again; a new message plays the next one.
            let mut seen: Vec<&str> = Vec::new();
            for t in thread.turns.iter().filter(|t| !t.continuation) {
                if !seen.contains(&t.authorized_by.as_str()) {
                    seen.push(&t.authorized_by);
                }
            }
            let index = seen.iter().position(|s| *s == by).unwrap_or(seen.len());
            (by, index)
        };
        let mut script_turn = self.opts.script.turn(script_index).clone();
        if nothing_to_continue {
            script_turn = crate::script::ScriptTurn {
                say: Vec::new(),
                tools: Vec::new(),
                final_message: "There is nothing to continue.".to_owned(),
            };
            self.journal.fact(
                "continuation.empty",
                json!({ "thread": p.thread_id, "reason": "the continued turn has no user message" }),
            );
        }
        let mut steps: VecDeque<Step> = script_turn.say.into_iter().map(Step::Say).collect();
        let mut tools = false;
        for tool in script_turn.tools {
            let skip = match &target_calls {
                Some((issued, finished)) => {
                    self.continued_call(&tool.key, &authorized_by, &text, issued, finished)?
                }
                None => false,
            };
            if !skip {
                steps.push_back(Step::Tool(tool));
                tools = true;
            }
        }
        // The model's responses, as Codex samples them from a model that calls
        // every tool of a turn in one response (`parallel_tool_calls`): the
        // `say` messages and the tool calls, then the final message. Codex
        // reports each response's token usage once its tool calls are settled.
        if tools {
            steps.push_back(Step::Usage);
        }
        steps.push_back(Step::Say(script_turn.final_message));
        steps.push_back(Step::Usage);
        steps.push_back(Step::Complete);

        // As in the real server, the turn is durable before the `turn/start`
        // response and its user message only after it (31-58 ms later in
        // Codex 0.171.0): a restarted server reads back an interrupted turn
        // with no items, found by turn id but not by `clientId`.
        let user_item = json!({
            "type": "userMessage",
            "id": uuid::Uuid::now_v7().to_string(),
            "content": p.input,
            "clientId": p.client_user_message_id,
        });
        let record = TurnRecord {
            id: turn_id.clone(),
            client_id: p.client_user_message_id.clone(),
            input: p.input.clone(),
            continuation,
            authorized_by: authorized_by.clone(),
            script_index,
            status: TurnStatus::InProgress,
            error: None,
            items: Vec::new(),
            issued: Vec::new(),
            finished: Vec::new(),
            started_at: now_s(),
            completed_at: None,
        };
        {
            let thread = self.store.get_mut(&p.thread_id).expect("checked above");
            if thread.preview.is_empty() && !continuation {
                thread.preview = text.chars().take(200).collect();
            }
            thread.updated_at = now_s();
            thread.turns.push(record);
        }
        self.store.save(&p.thread_id).map_err(storage_error)?;
        self.journal.fact(
            "turn.recorded",
            json!({
                "thread": p.thread_id,
                "turn": turn_id,
                "client_id": p.client_user_message_id,
                "continuation": continuation,
                "authorized_by": authorized_by,
            }),
        );
        self.point("codex.turn.recorded");
        self.loaded.insert(p.thread_id.clone());
        self.active.insert(
            p.thread_id.clone(),
            ActiveTurn {
                turn_id: turn_id.clone(),
                steps,
                waiting: None,
                items: 0,
                output_bytes: 0,
            },
        );
        let turn = turn_json(
            self.turn_record(&p.thread_id, &turn_id),
            ItemsView::NotLoaded,
        );
        Ok(self
            .respond(id, "turn/start", json!({ "turn": turn }))
            .and_then(|()| {
                self.record_item(&p.thread_id, &turn_id, user_item.clone());
                self.point("codex.user_message.recorded");
                self.status_changed(&p.thread_id)?;
                self.notify(
                    "turn/started",
                    json!({ "threadId": p.thread_id, "turn": turn }),
                )?;
                self.item_started(&p.thread_id, &turn_id, &user_item)?;
                self.notify_item_completed(&p.thread_id, &turn_id, user_item)?;
                self.pump(&p.thread_id)
            }))
    }

    fn turn_record(&self, thread_id: &str, turn_id: &str) -> &TurnRecord {
        let thread = self.store.get(thread_id).expect("thread exists");
        thread
            .turns
            .iter()
            .find(|t| t.id == turn_id)
            .expect("turn exists")
    }

    fn item_started(&self, thread_id: &str, turn_id: &str, item: &Value) -> Sent {
        self.notify(
            "item/started",
            json!({ "threadId": thread_id, "turnId": turn_id, "item": item, "startedAtMs": now_ms() }),
        )
    }

    fn item_completed(&mut self, thread_id: &str, turn_id: &str, item: Value) -> Sent {
        self.record_item(thread_id, turn_id, item.clone());
        self.point("codex.item.recorded");
        self.notify_item_completed(thread_id, turn_id, item)
    }

    /// Appends a completed item to the turn, durably.
    fn record_item(&mut self, thread_id: &str, turn_id: &str, item: Value) {
        self.update_turn(thread_id, turn_id, |turn| turn.items.push(item));
    }

    /// Changes a stored turn and saves its thread.
    fn update_turn(&mut self, thread_id: &str, turn_id: &str, f: impl FnOnce(&mut TurnRecord)) {
        if let Some(thread) = self.store.get_mut(thread_id)
            && let Some(turn) = thread.turns.iter_mut().find(|t| t.id == turn_id)
        {
            f(turn);
        }
        if let Err(e) = self.store.save(thread_id) {
            self.fail_storage(&e);
        }
    }

    /// Whether a continuation's model skips the tool `key` of the turn it
    /// continues. It saw the outcome of a finished call, so it skips it; a
    /// call it never issued it makes now. A call issued and never finished
    /// reads back `aborted`, as the real Codex tells its model after a
    /// restart: a model that takes that at its word runs it again, effect or
    /// not, unless the continuation `text` warns that an aborted command may
    /// have run ([`CHECK_ABORTED_MARKER`]); then it checks the ledger first.
    fn continued_call(
        &self,
        key: &str,
        by: &str,
        text: &str,
        issued: &[String],
        finished: &[String],
    ) -> Result<bool, (i64, String)> {
        let fact = json!({ "key": key, "by": by });
        if finished.iter().any(|k| k == key) {
            self.journal
                .fact("effect.skipped", with(fact, "reason", "finished"));
            return Ok(true);
        }
        if !issued.iter().any(|k| k == key) {
            return Ok(false);
        }
        if !text.contains(CHECK_ABORTED_MARKER) {
            self.journal
                .fact("call.aborted", with(fact, "action", "run again"));
            return Ok(false);
        }
        let done = ledger::read(&self.opts.ledger)
            .map_err(|e| (INVALID_REQUEST, format!("failed to read ledger: {e}")))?
            .iter()
            .any(|e| e.by == by && e.key == key);
        let action = if done {
            "already in ledger"
        } else {
            "run again"
        };
        self.journal
            .fact("call.aborted", with(fact, "action", action));
        Ok(done)
    }

    fn notify_item_completed(&self, thread_id: &str, turn_id: &str, item: Value) -> Sent {
        self.notify(
            "item/completed",
            json!({ "threadId": thread_id, "turnId": turn_id, "item": item, "completedAtMs": now_ms() }),
        )
    }

    /// Plays the active turn of `thread_id` until it completes or waits for the
    /// client.
    fn pump(&mut self, thread_id: &str) -> Sent {
        loop {
            let Some(active) = self.active.get_mut(thread_id) else {
                return Ok(());
            };
            if active.waiting.is_some() {
                return Ok(());
            }
            let turn_id = active.turn_id.clone();
            let Some(step) = active.steps.pop_front() else {
                return Ok(());
            };
            match step {
                Step::Say(text) => self.agent_message(thread_id, &turn_id, &text)?,
                Step::Tool(tool) => self.tool(thread_id, &turn_id, tool)?,
                Step::Usage => self.token_usage(thread_id, &turn_id)?,
                Step::Complete => {
                    return self.finish_turn(thread_id, TurnStatus::Completed, None);
                }
            }
        }
    }

    /// The id of the active turn's next model item (`msg_…` or `call_…`),
    /// counting the turn's model items; `output` is what the model wrote for
    /// it (for the token usage).
    fn next_item_id(&mut self, thread_id: &str, prefix: &str, output: &str) -> String {
        let active = self.active.get_mut(thread_id).expect("turn is active");
        let n = active.items;
        active.items += 1;
        active.output_bytes += output.len();
        model_item_id(prefix, &active.turn_id, n)
    }

    /// `thread/tokenUsage/updated` for the model response that just ended:
    /// byte estimates (four bytes a token), the input being every item of
    /// the thread so far and the output what the response produced.
    fn token_usage(&mut self, thread_id: &str, turn_id: &str) -> Sent {
        let output = self
            .active
            .get_mut(thread_id)
            .map(|a| std::mem::take(&mut a.output_bytes))
            .unwrap_or_default();
        let context: usize = self
            .store
            .get(thread_id)
            .expect("thread exists")
            .turns
            .iter()
            .flat_map(|t| &t.items)
            .map(|i| i.to_string().len())
            .sum();
        let last = Tokens {
            input: context.div_ceil(4) as i64,
            output: output.div_ceil(4) as i64,
        };
        let total = self.usage.entry(thread_id.to_owned()).or_default();
        total.input += last.input;
        total.output += last.output;
        let total = *total;
        self.notify(
            "thread/tokenUsage/updated",
            json!({
                "threadId": thread_id,
                "turnId": turn_id,
                "tokenUsage": {
                    "total": total.json(),
                    "last": last.json(),
                    "modelContextWindow": MODEL_CONTEXT_WINDOW,
                },
            }),
        )
    }

    fn agent_message(&mut self, thread_id: &str, turn_id: &str, text: &str) -> Sent {
        let item_id = self.next_item_id(thread_id, "msg", text);
        self.item_started(
            thread_id,
            turn_id,
            &json!({ "type": "agentMessage", "id": item_id, "text": "" }),
        )?;
        self.notify(
            "item/agentMessage/delta",
            json!({ "threadId": thread_id, "turnId": turn_id, "itemId": item_id, "delta": text }),
        )?;
        self.item_completed(
            thread_id,
            turn_id,
            json!({ "type": "agentMessage", "id": item_id, "text": text }),
        )
    }

    fn effect_argv(&self, thread_id: &str, turn_id: &str, key: &str, by: &str) -> Vec<OsString> {
        let mut argv = self.opts.self_cmd.clone();
        for a in [
            "effect",
            "--ledger",
            &self.opts.ledger.display().to_string(),
            "--key",
            key,
            "--by",
            by,
            "--conversation",
            thread_id,
            "--turn",
            turn_id,
        ] {
            argv.push(a.into());
        }
        argv.extend(
            crate::script::duration_args(&self.opts.script, key)
                .into_iter()
                .map(OsString::from),
        );
        argv
    }

    /// The tool's command line as the model would write it: the effect argv,
    /// shell-quoted.
    fn tool_line(&self, thread_id: &str, turn_id: &str, key: &str) -> String {
        let by = &self.turn_record(thread_id, turn_id).authorized_by;
        let argv = self.effect_argv(thread_id, turn_id, key, by);
        let words: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        crate::shell::join(words.iter().map(String::as_str))
    }

    fn command_item(&self, thread_id: &str, item_id: &str, line: &str) -> Value {
        let cwd = &self.store.get(thread_id).expect("thread exists").cwd;
        json!({
            "type": "commandExecution",
            "id": item_id,
            "command": shell_command(line),
            "commandActions": [{ "type": "unknown", "command": line }],
            "cwd": cwd,
            "status": "inProgress",
            "aggregatedOutput": null,
            "exitCode": null,
            "durationMs": null,
            "processId": null,
            "source": "agent",
        })
    }

    fn tool(&mut self, thread_id: &str, turn_id: &str, tool: ScriptTool) -> Sent {
        let line = self.tool_line(thread_id, turn_id, &tool.key);
        let item_id = self.next_item_id(thread_id, "call", &line);
        let item = self.command_item(thread_id, &item_id, &line);
        // The model's call is durable before anything runs, as the real
        // rollout records a `function_call` first.
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| t.issued.push(key));
        if !tool.approval {
            self.item_started(thread_id, turn_id, &item)?;
            return self.run_tool(thread_id, turn_id, item, &tool);
        }
        let reason = format!("The script asks to run the effect {}.", tool.key);
        // Server request ids start at 0, as in the real app-server.
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        self.pending.insert(request_id, thread_id.to_owned());
        let active = self.active.get_mut(thread_id).expect("turn is active");
        active.waiting = Some(Waiting {
            request_id,
            item: item.clone(),
            tool,
        });
        // The real order: the thread waits on the approval before the item starts.
        self.status_changed(thread_id)?;
        self.item_started(thread_id, turn_id, &item)?;
        let method = "item/commandExecution/requestApproval";
        self.write(&json!({
            "id": request_id,
            "method": method,
            "params": {
                "threadId": thread_id,
                "turnId": turn_id,
                "itemId": item_id,
                "startedAtMs": now_ms(),
                "command": item["command"],
                "cwd": item["cwd"],
                "commandActions": item["commandActions"],
                "kind": "command",
                "environmentId": "local",
                "reason": reason,
            },
        }))?;
        self.point(&format!("codex.{}.requested", slug(method)));
        Ok(())
    }

    fn run_tool(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        mut item: Value,
        tool: &ScriptTool,
    ) -> Sent {
        let by = self.turn_record(thread_id, turn_id).authorized_by.clone();
        let argv = self.effect_argv(thread_id, turn_id, &tool.key, &by);
        self.point("codex.effect.starting");
        let started = std::time::Instant::now();
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // As the real server, a command runs in a session of its own (the
        // real one on a pseudo-terminal): a SIGKILL of the provider's
        // process group misses it, and the command itself dies of the
        // terminal's hangup (here: SIGHUP when the fake dies) while
        // anything it started lives on.
        // SAFETY: setsid and prctl are async-signal-safe and touch only the child.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGHUP)?;
                Ok(())
            });
        }
        // A careful provider never hands its credentials to a tool shell.
        for var in CREDENTIAL_VARS {
            cmd.env_remove(var);
        }
        for var in ["TURNCUT_CUT_SOCKET", "TURNCUT_CUT_ARM", "TURNCUT_CUT_TRACE"] {
            cmd.env_remove(var);
        }
        let cwd = &self.store.get(thread_id).expect("thread exists").cwd;
        if std::path::Path::new(cwd).is_dir() {
            cmd.current_dir(cwd);
        }
        let spawned = cmd.spawn().inspect(|child| {
            self.journal.fact(
                "effect.spawned",
                json!({ "key": tool.key, "pid": child.id(), "start_time": start_time(child.id()) }),
            );
            self.point("codex.effect.spawned");
        });
        let (status, output) = match spawned.and_then(std::process::Child::wait_with_output) {
            Ok(out) => {
                let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                (out.status.code(), text)
            }
            Err(e) => (None, format!("failed to spawn tool: {e}")),
        };
        let ok = status == Some(0);
        self.journal.fact(
            "effect.exited",
            json!({ "key": tool.key, "by": by, "thread": thread_id, "turn": turn_id, "exit_code": status }),
        );
        self.point("codex.effect.exited");
        self.notify(
            "item/commandExecution/outputDelta",
            json!({ "threadId": thread_id, "turnId": turn_id, "itemId": item["id"], "delta": output }),
        )?;
        item["status"] = json!(if ok { "completed" } else { "failed" });
        item["exitCode"] = json!(status);
        item["aggregatedOutput"] = json!(output);
        item["durationMs"] = json!(started.elapsed().as_millis() as i64);
        // The item and the model's sight of the outcome, in one write.
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| {
            t.items.push(item.clone());
            t.finished.push(key);
        });
        self.point("codex.item.recorded");
        self.notify_item_completed(thread_id, turn_id, item)
    }

    fn on_response(&mut self, id: &Value, msg: &Value) -> Sent {
        let Some(request_id) = id.as_i64() else {
            self.journal
                .fact("response.unexpected", json!({ "id": id }));
            return Ok(());
        };
        let Some(thread_id) = self.pending.remove(&request_id) else {
            self.journal
                .fact("response.unexpected", json!({ "id": id }));
            return Ok(());
        };
        self.point("codex.approval.received");
        let Some(active) = self.active.get_mut(&thread_id) else {
            return Ok(());
        };
        let Some(waiting) = active.waiting.take() else {
            return Ok(());
        };
        debug_assert_eq!(waiting.request_id, request_id);
        let turn_id = active.turn_id.clone();
        // An error answer counts as a refusal, as in the real server.
        let decision = match msg.pointer("/result/decision") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) if o.keys().any(|k| k.starts_with("accept")) => "accept".into(),
            Some(Value::Object(_)) => "accept".into(),
            _ => "decline".into(),
        };
        self.journal.fact(
            "approval.decided",
            json!({ "thread": thread_id, "turn": turn_id, "key": waiting.tool.key, "decision": decision }),
        );
        self.notify(
            "serverRequest/resolved",
            json!({ "threadId": thread_id, "requestId": request_id }),
        )?;
        // As the real server: an accepted command's thread is active again
        // before the command runs; a refused one is declined first, and is
        // not part of the turn's history (`thread/read` leaves it out).
        if !matches!(decision.as_str(), "accept" | "acceptForSession") {
            let key = waiting.tool.key.clone();
            self.update_turn(&thread_id, &turn_id, |t| t.finished.push(key));
        }
        match decision.as_str() {
            "accept" | "acceptForSession" => {
                self.status_changed(&thread_id)?;
                self.run_tool(&thread_id, &turn_id, waiting.item, &waiting.tool)?;
                self.pump(&thread_id)
            }
            "cancel" => {
                let mut item = waiting.item;
                item["status"] = json!("declined");
                self.notify_item_completed(&thread_id, &turn_id, item)?;
                self.status_changed(&thread_id)?;
                self.token_usage(&thread_id, &turn_id)?;
                self.finish_turn(
                    &thread_id,
                    TurnStatus::Interrupted,
                    Some("cancelled by the user"),
                )
            }
            _ => {
                let mut item = waiting.item;
                item["status"] = json!("declined");
                self.notify_item_completed(&thread_id, &turn_id, item)?;
                self.status_changed(&thread_id)?;
                self.pump(&thread_id)
            }
        }
    }

    fn turn_interrupt(&mut self, id: &Value, msg: &Value) -> Result<Sent, (i64, String)> {
        let p: TurnInterruptParams = params(msg).map_err(|e| (INVALID_PARAMS, e))?;
        self.thread_exists(&p.thread_id)?;
        match self.active.get(&p.thread_id) {
            Some(a) if a.turn_id == p.turn_id => {}
            _ => {
                return Err((
                    INVALID_REQUEST,
                    format!("no active turn {} on thread {}", p.turn_id, p.thread_id),
                ));
            }
        }
        let pending = self
            .active
            .get_mut(&p.thread_id)
            .and_then(|a| a.waiting.take());
        Ok(self.interrupt(id, &p.thread_id, &p.turn_id, pending))
    }

    /// Ends a turn the client interrupted. As the real server: the model
    /// response whose tool call waited is over (its token usage comes first),
    /// the command item is never completed, and the pending approval request
    /// is resolved only after `turn/completed`.
    fn interrupt(
        &mut self,
        id: &Value,
        thread_id: &str,
        turn_id: &str,
        pending: Option<Waiting>,
    ) -> Sent {
        if let Some(w) = &pending {
            self.pending.remove(&w.request_id);
            self.token_usage(thread_id, turn_id)?;
        }
        self.respond(id, "turn/interrupt", json!({}))?;
        self.finish_turn(
            thread_id,
            TurnStatus::Interrupted,
            Some("interrupted by the client"),
        )?;
        if let Some(w) = pending {
            self.notify(
                "serverRequest/resolved",
                json!({ "threadId": thread_id, "requestId": w.request_id }),
            )?;
        }
        Ok(())
    }

    fn finish_turn(&mut self, thread_id: &str, status: TurnStatus, error: Option<&str>) -> Sent {
        let Some(active) = self.active.remove(thread_id) else {
            return Ok(());
        };
        {
            let thread = self.store.get_mut(thread_id).expect("thread exists");
            thread.updated_at = now_s();
            let turn = thread
                .turns
                .iter_mut()
                .find(|t| t.id == active.turn_id)
                .expect("turn exists");
            turn.status = status;
            turn.error = error.map(str::to_owned);
            turn.completed_at = Some(now_s());
        }
        if let Err(e) = self.store.save(thread_id) {
            self.fail_storage(&e);
        }
        self.journal.fact(
            "turn.finished",
            json!({ "thread": thread_id, "turn": active.turn_id, "status": status }),
        );
        self.point("codex.turn_completed.recorded");
        self.status_changed(thread_id)?;
        let view = if status == TurnStatus::Completed {
            ItemsView::Summary
        } else {
            ItemsView::NotLoaded
        };
        let turn = turn_json(self.turn_record(thread_id, &active.turn_id), view);
        self.notify(
            "turn/completed",
            json!({ "threadId": thread_id, "turn": turn }),
        )
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        // The store is the fake's durable truth; carrying on after a failed
        // write would make it lie about what is recorded.
        self.journal
            .fact("storage.failed", json!({ "error": e.to_string() }));
        eprintln!("fake-provider: failed to save thread store: {e}");
        std::process::exit(3);
    }
}

fn has_user_message(turn: &TurnRecord) -> bool {
    turn.items.iter().any(|i| i["type"] == "userMessage")
}

fn with(mut fact: Value, key: &str, value: &str) -> Value {
    fact[key] = json!(value);
    fact
}

/// Field 22 of `/proc/<pid>/stat` (start time in clock ticks), so the
/// harness can tell this process from a later one with its pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19)?.parse().ok()
}

fn storage_error(e: std::io::Error) -> (i64, String) {
    (INVALID_REQUEST, format!("failed to save thread: {e}"))
}

/// How much of a turn's items a turn in wire form carries (`TurnItemsView`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemsView {
    /// None (`turn/start`, `turn/started`, and `turn/completed` of a turn that
    /// did not complete).
    NotLoaded,
    /// The last agent message (`turn/completed` of a completed turn).
    Summary,
    /// Every stored item (`thread/read`, `thread/resume`).
    Full,
}

/// A turn in wire form, with the items `view` asks for, as the real server
/// sends it.
pub fn turn_json(turn: &TurnRecord, view: ItemsView) -> Value {
    let (items, view) = match view {
        ItemsView::Full => (turn.items.clone(), "full"),
        ItemsView::Summary => {
            let last = turn
                .items
                .iter()
                .rev()
                .find(|i| i["type"] == "agentMessage");
            (last.into_iter().cloned().collect(), "summary")
        }
        ItemsView::NotLoaded => (Vec::new(), "notLoaded"),
    };
    json!({
        "id": turn.id,
        "items": items,
        "itemsView": view,
        "status": turn.status,
        "error": turn.error.as_ref().map(|m| json!({ "message": m })),
        "startedAt": turn.started_at,
        "completedAt": turn.completed_at,
        "durationMs": turn.completed_at.map(|c| (c - turn.started_at) * 1000),
    })
}

/// The id of a turn's `n`th model item: `<prefix>_<32 hex>`, the form of the
/// model's own ids that Codex reports (`call_…` is a tool call's `call_id`,
/// `msg_…` a message's id). The fake has no model, so the hex is a hash of the
/// turn id and `n`: deterministic, unique within a thread (turn ids are), and
/// never reused by a restarted fake.
pub fn model_item_id(prefix: &str, turn_id: &str, n: u32) -> String {
    // 128-bit FNV-1a.
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in format!("{turn_id}/{n}").bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("{prefix}_{h:032x}")
}

/// A command line as Codex reports it: its shell's `-lc` around the line
/// the model wrote (`/bin/bash -lc '<line>'`), joined like Codex's `shlex`.
pub fn shell_command(line: &str) -> String {
    crate::shell::bash_lc(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_like_shlex() {
        // Pairs from the shlex crate's own tests, plus the form Codex showed
        // for a path with a quote and a dollar sign.
        for (word, quoted) in [
            ("", "''"),
            ("foobar", "foobar"),
            ("foo bar", "'foo bar'"),
            ("\"foo bar'\"", r#""\"foo bar'\"""#),
            ("'foo bar'", r#""'foo bar'""#),
            ("\"", r#"'"'"#),
            ("\"'", r#""\"'""#),
            ("hello!world", "'hello!world'"),
            ("'hello!world", r#""'hello"'!world'"#),
            ("'hello!", r#""'hello"'!'"#),
            ("hello ^ world", "'hello ''^ world'"),
            ("hello^", "hello'^'"),
            ("!world'", r#"'!world'"'""#),
            ("{a, b}", "'{a, b}'"),
            ("\n", "'\n'"),
            ("^", "'^'"),
            ("foo^bar", "foo'^bar'"),
            ("\nx^", "'\nx''^'"),
            ("\n^x", "'\n''^x'"),
            ("a=b", "'a=b'"),
            ("caf\u{e9}", "'caf\u{e9}'"),
            ("x\\y", r#""x\\y""#),
            (
                "--ledger '/tmp/it'\\''s $x/l'",
                r#""--ledger '/tmp/it'\\''s "'$x/l'"'""#,
            ),
        ] {
            assert_eq!(crate::shell::join([word]), quoted, "{word:?}");
        }
        assert_eq!(
            shell_command("fake-provider effect --key k"),
            "/bin/bash -lc 'fake-provider effect --key k'"
        );
    }

    #[test]
    fn model_item_ids_are_deterministic_and_distinct() {
        let a = model_item_id("call", "turn-a", 1);
        assert_eq!(a, model_item_id("call", "turn-a", 1));
        assert!(a.starts_with("call_") && a.len() == 5 + 32, "{a}");
        assert!(a[5..].bytes().all(|b| b.is_ascii_hexdigit()));
        let mut all = std::collections::HashSet::new();
        for turn in ["turn-a", "turn-b"] {
            for n in 0..100 {
                assert!(all.insert(model_item_id("call", turn, n)));
            }
        }
    }
}
