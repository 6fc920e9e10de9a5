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
//! `--like opencode` plays `opencode acp` where it differs at a crash
//! ([`Like::Opencode`]): no echo, the tool call `in_progress` before its
//! permission request, and tools run by the agent itself (`tools.rs`).
//! `--like codex` plays `codex-acp` where it differs at a failure of its
//! model API ([`Like::Codex`], `upstream.rs`).
//!
//! What it deliberately does not simulate: models, reasoning, plans, modes,
//! config options, authentication, MCP servers (accepted and ignored), images
//! and other non-text content (stored and echoed, never read), `fs/read_text_file`
//! (a script's `write-file` tool sends `fs/write_text_file`),
//! `terminal/output` and `terminal/kill`, `$/cancel_request`, and the unstable
//! methods (`session/list`, `session/resume`, `session/fork`, `session/close`,
//! providers, elicitation), which answer −32601. A line that is not JSON gets an
//! error with `id: null`, as JSON-RPC 2.0 says.
//!
//! Files: this one holds the agent (handshake, sessions, prompts, the end of
//! a turn); `tools.rs` the tool calls run on the client's side and the
//! answers to the agent's requests; `upstream.rs` its model requests and
//! their failures; `wire.rs` the wire forms; `store.rs` the durable
//! sessions.

pub mod store;
mod tools;
mod upstream;
pub mod wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use store::{SessionRecord, Store, TurnRecord, TurnStatus, recorded_turns};
pub use wire::{ALLOW_ALWAYS, ALLOW_ONCE, PROTOCOL_VERSION, REJECT_ONCE};

use crate::journal::Journal;
use crate::rpc::{
    INVALID_PARAMS, INVALID_REQUEST, Incoming, LineServer, METHOD_NOT_FOUND, Refusal, Sent, params,
};
use crate::serving::{Options, now_s};
pub use crate::stdio::LINE_BYTES_MAX;
use crate::turns::{self, LedgerSkip, Step};
pub use ::wire::marker::CONTINUE_MARKER;
use cutpoint::slug;
use tools::Waiting;
use wire::{
    CancelParams, INTERNAL_ERROR, InitializeParams, LoadSessionParams, NewSessionParams,
    PromptParams, RESOURCE_NOT_FOUND,
};

/// Which real ACP agent the fake plays where they differ at a crash or at a
/// failure of their model API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Like {
    /// The agent of `runner-acpx-claude`: the user message echoed with the
    /// client's message id, a tool call `pending` while its permission
    /// waits, commands run on the client's side in its terminals.
    #[default]
    Claude,
    /// `opencode acp` (measured against 1.18.33 by `turncut fidelity`): no
    /// echo (the replayed user message has the agent's own id), the tool
    /// call `in_progress` before the permission request, and the agent runs
    /// its commands and file writes itself: a command in a session of its
    /// own, so it outlives a kill of the agent's group and lands its effect.
    /// The agent reads nothing while its command runs.
    Opencode,
    /// `codex-acp` (measured against 0.16.0 by `turncut fidelity --moments
    /// upstream`) where it differs from Claude's agent at a failure of its
    /// model API: no echo of the user message, and no retry of its own
    /// (its retries are off as `runner-acpx-codex-real` runs it): every
    /// upstream fault fails the prompt with codex-acp's `-32603` error
    /// (`wire::upstream::codex_acp_prompt_error`). At a crash it plays as
    /// Claude's (codex-acp's own readings there are listed in
    /// `docs/real-providers.md`, not played).
    Codex,
}

/// Serves the protocol on stdin/stdout until stdin closes. `finish_lag`
/// (zero: none) puts off the write of a turn's end until that long after
/// the `session/prompt` answer, as Claude Code writes its transcript on a
/// timer after answering: see [`Server::finish_turn`].
pub fn serve(opts: Options, like: Like, finish_lag: Duration) -> anyhow::Result<()> {
    let (journal, store) = crate::serving::start(&opts, "acp", None, |dir, _| Store::open(dir))?;
    let mut server = Server {
        like,
        finish_lag,
        unwritten: None,
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
    crate::rpc::serve_lines(&mut server)
}

struct Server {
    /// Which real agent it plays.
    like: Like,
    /// How long after its answer the end of a turn is written.
    finish_lag: Duration,
    /// The end of a turn answered and not yet written: when it is due, and
    /// the session and the fact to journal once it is.
    unwritten: Option<(Instant, String, Value)>,
    opts: Options,
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
    /// The model was asked for the response being played (at the turn's
    /// start, and again once the tools of a response ran).
    asked: bool,
    /// A tool ran since the model was last asked.
    tools_ran: bool,
    /// The response being played came after a broken stream, which Claude
    /// Code asks again without streaming: its text is stored, not sent.
    unstreamed: bool,
}

/// What a prompt plays: under whose authority, which script turn, and the steps.
struct Planned {
    authorized_by: String,
    script_index: usize,
    steps: VecDeque<Step>,
}

impl LineServer for Server {
    fn journal(&self) -> &Journal {
        &self.journal
    }

    fn on_line(&mut self, bytes: &[u8]) -> Sent {
        let (msg, incoming) = match crate::rpc::read_message(bytes, &self.journal, true) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err((id, code, message)) => return self.send_error(id, code, &message),
        };
        match incoming {
            Incoming::Request { id, method } => {
                let point = format!("acp.{}.received", slug(&method));
                if self
                    .opts
                    .faults
                    .answer_point_in(
                        &point,
                        msg.pointer("/params/sessionId").and_then(Value::as_str),
                        msg.pointer("/params/cwd").and_then(Value::as_str),
                        &self.journal,
                    )
                    .is_some()
                {
                    // Fault `error-answer`: the request fails inside, as an
                    // agent's does, before anything of it is done.
                    let error = ::wire::upstream::acp_error_answer(&method);
                    return self.write(&json!({ "jsonrpc": "2.0", "id": id, "error": error }));
                }
                self.on_request(&id, &method, &msg)
            }
            Incoming::Notification { method } => {
                self.point(&format!("acp.{}.received", slug(&method)));
                self.on_notification(&method, &msg)
            }
            Incoming::Response { id } => self.on_response(&id, &msg),
        }
    }

    fn send_error(&self, id: Value, code: i64, message: &str) -> Sent {
        self.write(&json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": code, "message": message },
        }))
    }

    fn due(&self) -> Option<Instant> {
        self.unwritten.as_ref().map(|(due, _, _)| *due)
    }

    fn on_due(&mut self) {
        if let Some((_, session_id, fact)) = self.unwritten.take() {
            self.write_finish(&session_id, fact);
        }
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
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))?;
        self.point(&format!("acp.{}.responded", slug(method)));
        Ok(())
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
        if self.store_update(session_id, &update) {
            self.send_update(session_id, &update)
        } else {
            Ok(())
        }
    }

    /// Stores `update` in the active turn of `session_id`, durably, without
    /// sending it (a `session/load` replays it); false with no active turn.
    fn store_update(&mut self, session_id: &str, update: &Value) -> bool {
        let Some(index) = self.active.get(session_id).map(|a| a.index) else {
            return false;
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
        true
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
        Ok(self.respond(id, "initialize", wire::initialize_result()))
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
        let client_id = p.client_id();
        let continuation = turns::is_continuation(&p.runner_text());
        let turn_id = client_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let planned = self.plan_prompt(&p.session_id, &turn_id, &p.runner_text(), continuation)?;
        // The user message is part of the turn from the moment it is recorded:
        // a restarted agent replays it with its message id on `session/load`,
        // which is what "was this turn recorded?" asks.
        // `opencode acp` keeps its own message ids: a lost turn cannot be
        // found by the client's.
        let message_id = match self.like {
            Like::Claude | Like::Codex => turn_id.clone(),
            Like::Opencode => uuid::Uuid::now_v7().to_string(),
        };
        let echoes: Vec<Value> = p
            .prompt
            .iter()
            .map(|block| wire::user_message_chunk(block, &message_id))
            .collect();
        let live = match self.like {
            Like::Claude => echoes.clone(),
            Like::Opencode | Like::Codex => Vec::new(),
        };
        let record = TurnRecord {
            id: turn_id,
            client_id,
            prompt: p.prompt,
            continuation,
            authorized_by: planned.authorized_by,
            script_index: planned.script_index,
            status: TurnStatus::InProgress,
            stop_reason: None,
            updates: echoes,
            started_at: now_s(),
            completed_at: None,
        };
        self.record_turn(&p.session_id, id, record, planned.steps)?;
        // Claude Code asks its model before it echoes the message: a model
        // that fails for good (a context overflow) ends the prompt unechoed.
        if let Some(error) = self.first_model_request(&p.session_id) {
            return Ok(self.fail_upstream(&p.session_id, error));
        }
        Ok(self
            .send_updates(&p.session_id, &live)
            .and_then(|()| self.pump(&p.session_id)))
    }

    /// Which script turn a prompt plays, under whose authority, and its
    /// steps: the naive model's (the same message plays the same script turn
    /// again; a new message plays the next one), or, for a continuation, the
    /// turn it continues with the effects already in the ledger skipped.
    fn plan_prompt(
        &self,
        session_id: &str,
        turn_id: &str,
        text: &str,
        continuation: bool,
    ) -> Result<Planned, Refusal> {
        let session = self.store.get(session_id).expect("checked above");
        let (authorized_by, script_index) = if continuation {
            let Some(target) = turns::continued(session.turns.iter()) else {
                // Nothing to continue: a real agent takes any prompt, and its
                // model, seeing no earlier message, has nothing to do.
                self.journal.fact(
                    "continuation.empty",
                    json!({ "session": session_id, "reason": "no user message to continue" }),
                );
                let nothing = turns::nothing_to_continue();
                return Ok(Planned {
                    authorized_by: turn_id.to_owned(),
                    script_index: 0,
                    steps: turns::plan(nothing, |_| Ok::<_, Refusal>(true))?,
                });
            };
            (target.authorized_by.clone(), target.script_index)
        } else {
            let script = &self.opts.script;
            let index =
                turns::script_index(script, session.turns.iter(), turn_id, text, turns::as_sent);
            (turn_id.to_owned(), index)
        };
        let script_turn = self.opts.script.turn(script_index).clone();
        let skip = LedgerSkip::read(&self.opts.ledger, &authorized_by, continuation)
            .map_err(|e| (INTERNAL_ERROR, format!("failed to read ledger: {e}")))?;
        let steps = turns::plan(script_turn, |tool| {
            Ok::<_, Refusal>(skip.keeps(tool, &self.journal))
        })?;
        Ok(Planned {
            authorized_by,
            script_index,
            steps,
        })
    }

    /// Makes the new turn durable, journals `turn.recorded` and makes it the
    /// session's active turn, answered at its end to `prompt_id`.
    fn record_turn(
        &mut self,
        session_id: &str,
        prompt_id: &Value,
        record: TurnRecord,
        steps: VecDeque<Step>,
    ) -> Result<(), Refusal> {
        let fact = json!({
            "session": session_id,
            "turn": record.id,
            "client_id": record.client_id,
            "continuation": record.continuation,
            "authorized_by": record.authorized_by,
            "script_index": record.script_index,
        });
        let index = {
            let session = self.store.get_mut(session_id).expect("checked above");
            session.updated_at = now_s();
            session.turns.push(record);
            session.turns.len() - 1
        };
        if let Err(e) = self.store.save(session_id) {
            // Nothing was acknowledged yet, so the prompt can still be refused.
            if let Some(session) = self.store.get_mut(session_id) {
                session.turns.pop();
            }
            return Err((INTERNAL_ERROR, format!("failed to save turn: {e}")));
        }
        self.journal.fact("turn.recorded", fact);
        self.point("acp.turn.recorded");
        self.active.insert(
            session_id.to_owned(),
            ActiveTurn {
                index,
                prompt_id: prompt_id.clone(),
                steps,
                waiting: None,
                asked: false,
                tools_ran: false,
                unstreamed: false,
            },
        );
        Ok(())
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
            if !active.asked && !active.steps.is_empty() {
                active.asked = true;
                if let Some(error) = self.ask_model(session_id) {
                    return self.fail_upstream(session_id, error);
                }
                continue;
            }
            let unstreamed = active.unstreamed;
            let Some(step) = active.steps.pop_front() else {
                return Ok(());
            };
            match step {
                Step::Say(text) if unstreamed => {
                    self.store_update(session_id, &wire::agent_message_chunk(&text));
                }
                Step::Say(text) => {
                    self.record_update(session_id, wire::agent_message_chunk(&text))?;
                }
                Step::Tool(tool) => {
                    active.tools_ran = true;
                    self.tool(session_id, &tool)?;
                }
                // ACP reports no token usage; a response that called tools
                // ends here, and the model is asked again.
                Step::Usage => {
                    if let Some(a) = self.active.get_mut(session_id) {
                        a.asked = !std::mem::take(&mut a.tools_ran);
                    }
                }
                Step::Complete => {
                    return self.finish_turn(session_id, TurnStatus::Completed, "end_turn");
                }
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
        let fact = self.end_turn(session_id, active.index, status, Some(stop_reason));
        if self.finish_lag.is_zero() {
            self.write_finish(session_id, fact);
        } else {
            // `--finish-lag-ms`: answered first, written when the lag is
            // over (or with the session's next write); a process stopped in
            // between keeps the turn in progress, read back `interrupted`.
            if let Some((_, earlier, fact)) = self.unwritten.take() {
                self.write_finish(&earlier, fact);
            }
            let due = Instant::now() + self.finish_lag;
            self.unwritten = Some((due, session_id.to_owned(), fact));
        }
        self.respond(
            &active.prompt_id,
            "session/prompt",
            json!({ "stopReason": stop_reason }),
        )
    }

    /// Ends turn `index` of `session_id` in the store (not yet durable):
    /// the fact that `turn.finished` journals once it is.
    fn end_turn(
        &mut self,
        session_id: &str,
        index: usize,
        status: TurnStatus,
        stop_reason: Option<&str>,
    ) -> Value {
        let mut turn_id = None;
        if let Some(session) = self.store.get_mut(session_id) {
            session.updated_at = now_s();
            if let Some(turn) = session.turns.get_mut(index) {
                turn.status = status;
                turn.stop_reason = stop_reason.map(str::to_owned);
                turn.completed_at = Some(now_s());
                turn_id = Some(turn.id.clone());
            }
        }
        json!({ "session": session_id, "turn": turn_id, "status": status, "stop_reason": stop_reason })
    }

    /// Makes the end of a turn durable and journals `turn.finished` (`fact`).
    fn write_finish(&self, session_id: &str, fact: Value) {
        if let Err(e) = self.store.save(session_id) {
            self.fail_storage(&e);
        }
        self.journal.fact("turn.finished", fact);
        self.point("acp.turn_completed.recorded");
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        crate::serving::fail_storage(
            &self.journal,
            e,
            "fake-provider: failed to save session store",
        )
    }
}
