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
//! `item/commandExecution/outputDelta`, `fileChange` with
//! `turn/diff/updated`, `thread/tokenUsage/updated` after each model response,
//! and `turn/completed` with status completed, interrupted or failed); the
//! server requests `item/commandExecution/requestApproval` and
//! `item/fileChange/requestApproval` with the decisions `accept`, `decline`
//! and `cancel`, followed by `serverRequest/resolved`; a thread's approval
//! policy; a `turn/start` during an active turn taken into it. Model items carry model-style ids (`msg_…`,
//! `call_…`) and commands read `/bin/bash -lc '<line>'`, as Codex reports them.
//! `harness/tests/real_codex.rs` compares all this with the real server.
//! Threads and turns are durable in `--state-dir` and crash as the real
//! product's do (measured on 0.171.0): a thread is written with its first
//! turn (its file created empty, then the thread, then the turn), a turn
//! (without items) before the `turn/start` response, its user message (and
//! the thread's approval policy, the real turn context) after it; a turn
//! that was in progress when the process died reads back `interrupted`
//! (error null); commands run as `bash -c` in a session of their own, every
//! signal at its default, and the shell dies of SIGTERM when the fake dies
//! (a compound command's children live on); a call issued and never
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
//! Files: this one holds the server (handshake, threads, sending, the end of
//! a turn); `turn.rs` plays turns (planning, items, tools, approvals,
//! queued messages, interrupts); `patch.rs` plays `apply_patch`; `wire.rs`
//! holds the wire forms; `store.rs` the durable threads.
//!
//! What it deliberately does not simulate: models, reasoning, tokenization
//! (token usage is a byte estimate), sandboxes (a patch asks as under a
//! read-only one), exec policies, patches other than one added file, MCP,
//! accounts, config, more than one client connection, and `turn/steer`; so it never sends the account and config
//! notifications (`account/rateLimits/updated`, `warning`, `configWarning`,
//! `remoteControl/status/changed`). Methods outside the list above answer
//! −32601 even though the real server knows them. A line that is not JSON gets
//! an error with `id: null` (JSON-RPC 2.0), which the real server would only log.

mod patch;
pub mod store;
mod turn;
mod upstream;
pub mod wire;

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{Value, json};

pub use store::{Store, ThreadRecord, TurnRecord, TurnStatus};
pub use wire::{
    FAKE_CLI_VERSION, ItemsView, MODEL_CONTEXT_WINDOW, model_item_id, shell_command, turn_json,
};

use crate::journal::{Journal, now_ms};
use crate::rpc::{
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Incoming, LineServer, METHOD_NOT_FOUND,
    Refusal, Sent, params,
};
use crate::script::ScriptTool;
use crate::serving::{Options, now_s};
pub use crate::stdio::LINE_BYTES_MAX;
use crate::turns::Step;
use wire::{InitializeParams, ThreadIdParams, ThreadStartParams, Tokens};

/// Text that marks a `turn/start` as a continuation of the thread's last user
/// turn rather than a new user message, and the warning in a continuation
/// that a command reported `aborted` may have run (see `Server::continued_call`).
pub use ::wire::marker::{CHECK_ABORTED_MARKER, CONTINUE_MARKER};

pub use cutpoint::slug;

/// Serves the protocol on stdin/stdout until stdin closes.
pub fn serve(opts: Options) -> anyhow::Result<()> {
    // SIGTERM (runnerd's stop) syncs the store, as the real codex's does.
    Store::checkpoint_on_sigterm(&opts.state_dir)?;
    let (journal, store) = crate::serving::start(&opts, "codex", None, |dir, _| Store::open(dir))?;
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
        policies: HashMap::new(),
        dead_credentials: HashSet::new(),
    };
    let served = crate::rpc::serve_lines(&mut server);
    // Stdin closed: the real codex closes its databases, which syncs them.
    server.store.checkpoint()?;
    served
}

struct Server {
    opts: Options,
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
    /// The approval policy each thread was given in this process (by
    /// `thread/start`, `thread/resume` or `turn/start`): durable only with
    /// the next turn context written (`begin_turn`).
    policies: HashMap<String, String>,
    /// Threads whose model API credential expired (fault `auth-expired`):
    /// their every later model request fails so, as the model API's would.
    dead_credentials: HashSet<String>,
}

/// The approval policy of a thread that was given none, or whose policy
/// was lost: the real server's configured default (`approval_policy` in
/// the real profile's configuration).
pub const DEFAULT_APPROVAL_POLICY: &str = "on-request";

/// The approval policies the fake plays: `untrusted` asks before every
/// command, `on-request` and `on-failure` before the ones the model asks to
/// run unsandboxed (a tool with `approval`) and before every patch (the
/// fake's sandbox is read-only, as the real profile's), `never` asks nothing
/// and runs everything.
const APPROVAL_POLICIES: [&str; 4] = ["untrusted", "on-failure", "on-request", "never"];

struct ActiveTurn {
    turn_id: String,
    steps: VecDeque<Step>,
    waiting: Option<Waiting>,
    /// Messages sent by `turn/start` while this turn was active: the real
    /// server answers with this turn and hands them to the model at its next
    /// request, in this turn. Not durable until then.
    queued: Vec<Queued>,
    /// The message id the turn's effects run under after a queued message
    /// was taken up (else the turn record's `authorized_by`).
    authorized_by: Option<String>,
    /// A tool was played since the last end of a model response: the next
    /// one ends a response that called tools, after which the model is
    /// asked again and takes up the queued messages.
    tools_pending: bool,
    /// The model was asked for the response being played (at the turn's
    /// start, and again after a response that called tools).
    asked: bool,
    /// The turn's diff (`turn/diff/updated`) once a patch applied.
    diff: Option<String>,
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

/// A user message queued into the active turn.
struct Queued {
    client_id: Option<String>,
    input: Vec<Value>,
}

impl LineServer for Server {
    fn journal(&self) -> &Journal {
        &self.journal
    }

    fn on_line(&mut self, bytes: &[u8]) -> Sent {
        let (msg, incoming) = match crate::rpc::read_message(bytes, &self.journal, false) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err((id, code, message)) => return self.send_error(id, code, &message),
        };
        match incoming {
            Incoming::Request { id, method } => {
                let point = format!("codex.{}.received", slug(&method));
                if self
                    .opts
                    .faults
                    .answer_point_in(
                        &point,
                        msg.pointer("/params/threadId").and_then(Value::as_str),
                        msg.pointer("/params/cwd").and_then(Value::as_str),
                        &self.journal,
                    )
                    .is_some()
                {
                    // Fault `error-answer`: the request fails inside, as an
                    // app-server's does, before anything of it is done.
                    let error = ::wire::upstream::codex_error_answer(&method);
                    return self.write(&json!({ "id": id, "error": error }));
                }
                self.on_request(&id, &method, &msg)
            }
            Incoming::Notification { method } => {
                self.point(&format!("codex.{}.received", slug(&method)));
                // Client notifications (`initialized`) need no answer.
                Ok(())
            }
            Incoming::Response { id } => self.on_response(&id, &msg),
        }
    }

    fn send_error(&self, id: Value, code: i64, message: &str) -> Sent {
        self.write(&json!({ "id": id, "error": { "code": code, "message": message } }))
    }
}

impl Server {
    fn point(&self, name: &str) {
        self.opts.faults.point(name, &self.journal);
    }

    fn write(&self, msg: &Value) -> Sent {
        crate::rpc::write(&self.journal, msg)
    }

    fn respond(&self, id: &Value, method: &str, result: Value) -> Sent {
        self.write(&json!({ "id": id, "result": result }))?;
        self.point(&format!("codex.{}.responded", slug(method)));
        Ok(())
    }

    fn notify(&self, method: &str, params: Value) -> Sent {
        self.write(&json!({ "method": method, "params": params }))?;
        self.point(&format!("codex.{}.notified", slug(method)));
        Ok(())
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

    fn initialize(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        if self.initialized {
            return Err((INVALID_REQUEST, "Already initialized".to_owned()));
        }
        let _: InitializeParams = params(msg)?;
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

    fn thread_start(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: ThreadStartParams = if msg.get("params").is_some_and(|p| !p.is_null()) {
            params(msg)?
        } else {
            ThreadStartParams::default()
        };
        let policy = checked_policy(p.approval_policy)?;
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
            approval_policy: None,
            turns: Vec::new(),
        };
        let thread_id = thread.id.clone();
        if let Some(policy) = policy {
            self.policies.insert(thread_id.clone(), policy);
        }
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

    fn thread_resume(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: ThreadIdParams = params(msg)?;
        self.thread_readable(&p.thread_id)?;
        if self.store.get(&p.thread_id).is_none() {
            return Err((
                INVALID_REQUEST,
                format!("no rollout found for thread id {}", p.thread_id),
            ));
        }
        if let Some(policy) = checked_policy(p.approval_policy.clone())? {
            self.policies.insert(p.thread_id.clone(), policy);
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

    fn thread_read(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: ThreadIdParams = params(msg)?;
        self.thread_readable(&p.thread_id)?;
        if self.store.get(&p.thread_id).is_none() {
            return Err((
                INVALID_REQUEST,
                format!("thread not loaded: {}", p.thread_id),
            ));
        }
        // Measured on Codex 0.171.0: a thread not yet written (no turn
        // started) cannot list its turns; one written without a turn lists
        // none.
        if p.include_turns && !self.store.is_written(&p.thread_id) {
            return Err((
                METHOD_NOT_FOUND,
                "list_turns is not supported yet".to_owned(),
            ));
        }
        let thread = self.thread_json(&p.thread_id, p.include_turns);
        Ok(self.respond(id, "thread/read", json!({ "thread": thread })))
    }

    /// The error of reading a thread whose file was created and never
    /// written, as the real server words it (the path is the fake's file).
    fn thread_readable(&self, thread_id: &str) -> Result<(), Refusal> {
        match self.store.empty_file(thread_id) {
            None => Ok(()),
            Some(path) => Err((
                INTERNAL_ERROR,
                format!(
                    "failed to read thread: thread-store internal error: failed to read session \
                     metadata {0}: rollout at {0} is empty",
                    path.display()
                ),
            )),
        }
    }

    /// The thread's approval policy: given in this process, else durable
    /// with its last turn context, else the default.
    fn approval_policy(&self, thread_id: &str) -> &str {
        self.policies
            .get(thread_id)
            .map(String::as_str)
            .or_else(|| {
                self.store
                    .get(thread_id)
                    .and_then(|t| t.approval_policy.as_deref())
            })
            .unwrap_or(DEFAULT_APPROVAL_POLICY)
    }

    fn thread_exists(&self, thread_id: &str) -> Result<(), Refusal> {
        match self.store.get(thread_id) {
            Some(_) => Ok(()),
            None => Err((INVALID_REQUEST, format!("thread not found: {thread_id}"))),
        }
    }

    fn session_response(&self, thread_id: &str, include_turns: bool) -> Value {
        let t = self.store.get(thread_id).expect("thread exists");
        wire::session_response(
            t,
            self.approval_policy(thread_id),
            self.thread_json(thread_id, include_turns),
        )
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
        wire::thread_json(t, self.thread_status(thread_id), include_turns)
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

    fn notify_item_completed(&self, thread_id: &str, turn_id: &str, item: Value) -> Sent {
        self.notify(
            "item/completed",
            json!({ "threadId": thread_id, "turnId": turn_id, "item": item, "completedAtMs": now_ms() }),
        )
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

    fn finish_turn(&mut self, thread_id: &str, status: TurnStatus, error: Option<&str>) -> Sent {
        let error = error.map(|m| json!({ "message": m }));
        self.finish_turn_with(thread_id, status, error)
    }

    /// Ends the active turn of `thread_id` with `status` and `error` (a
    /// `TurnError`: `message`, and `codexErrorInfo` when it failed upstream).
    fn finish_turn_with(
        &mut self,
        thread_id: &str,
        status: TurnStatus,
        error: Option<Value>,
    ) -> Sent {
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
            turn.error = error
                .as_ref()
                .and_then(|e| e["message"].as_str())
                .map(str::to_owned);
            turn.error_info = error
                .and_then(|mut e| e.get_mut("codexErrorInfo").map(Value::take))
                .filter(|i| !i.is_null());
            turn.completed_at = Some(now_s());
        }
        if let Err(e) = self.store.save(thread_id) {
            self.fail_storage(&e);
        }
        if let Some(diff) = &active.diff {
            self.notify(
                "turn/diff/updated",
                json!({ "threadId": thread_id, "turnId": active.turn_id, "diff": diff }),
            )?;
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
        crate::serving::fail_storage(
            &self.journal,
            e,
            "fake-provider: failed to save thread store",
        )
    }
}

fn storage_error(e: std::io::Error) -> Refusal {
    (INVALID_REQUEST, format!("failed to save thread: {e}"))
}

/// An approval policy the fake plays, or the error the client gets.
fn checked_policy(policy: Option<String>) -> Result<Option<String>, Refusal> {
    match policy {
        Some(p) if !APPROVAL_POLICIES.contains(&p.as_str()) => Err((
            INVALID_PARAMS,
            format!(
                "approvalPolicy {p:?} is not simulated; use one of {}",
                APPROVAL_POLICIES.join(", ")
            ),
        )),
        other => Ok(other),
    }
}
