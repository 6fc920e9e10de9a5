//! The ACP driver: Agent Client Protocol v1, JSON-RPC 2.0 over the provider's
//! stdio, one JSON object per line. The runner is the ACP *client*.
//!
//! - A turn is a `session/prompt` carrying the controller's id in
//!   `_meta.messageId`. ACP has no turn ids and the prompt's response only
//!   comes at the end of the turn, so the turn counts as accepted when the
//!   agent echoes the user message (`user_message_chunk` with that
//!   `messageId`); the provider turn id is the client id itself. An agent
//!   that echoes nothing and keeps its own message ids (the real `opencode
//!   acp` 1.18.33) is accepted at its first output for the turn, and the
//!   output's `messageId` (its answer's) names the turn.
//! - "Was this turn recorded?" is a `session/load`: the agent replays the
//!   conversation, and the turn is recorded iff a replayed `user_message_chunk`
//!   carries its client id or a replayed update carries its turn id. The
//!   replay does not say whether the turn completed, so a recorded turn is
//!   reported `interrupted`: the engine then continues once instead of
//!   adopting (the safe side; see docs/recovery-contract.md).
//! - Tools run on the client side: `terminal/*` and `fs/*` requests are
//!   reported as [`ProviderEvent::ClientTool`] and the engine executes them
//!   under the write-ahead rules. A provider process that restored a session
//!   with `session/load` restarts its request ids, so keys from such a process
//!   are prefixed with a per-process namespace (`r<proc>:<id>`): they can never
//!   collide with ids answered before the restart. Fresh sessions keep raw ids.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tokio::process::Child;

use super::budget::{Bounds, Pending};
use super::jsonrpc::{Rpc, is_response_to, result_of};
use super::{
    ClientCall, DriverError, FoundTurn, ProviderEvent, ProviderTurnStatus, Sent, TurnLookup,
};

/// The ACP protocol version this driver speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// A live ACP agent process and the client end of its stdio.
pub struct AcpDriver {
    rpc: Rpc,
    namespace: String,
    /// Whether this process restored a session (its ids get the namespace).
    restored: bool,
    loaded: HashSet<String>,
    /// The working directory each known session was opened or loaded with.
    cwds: HashMap<String, String>,
    /// The open `session/prompt`: its request id and client id.
    active: Option<(i64, String)>,
    /// Permission options by request id: (allow option, reject option).
    permissions: HashMap<String, (Option<String>, Option<String>)>,
    /// The `session/load` replay of the last lookup.
    replay: Vec<Value>,
}

impl AcpDriver {
    /// Takes over a spawned child's stdio (both must be piped).
    pub fn attach(child: &mut Child, bounds: Bounds, namespace: &str) -> AcpDriver {
        AcpDriver {
            rpc: Rpc::attach(child, bounds, "acp", true),
            namespace: namespace.to_owned(),
            restored: false,
            loaded: HashSet::new(),
            cwds: HashMap::new(),
            active: None,
            permissions: HashMap::new(),
            replay: Vec::new(),
        }
    }

    async fn send(&mut self, msg: &Value) -> Result<(), DriverError> {
        self.rpc.send(msg).await
    }

    /// Sends a request and waits for its result. Messages that arrive
    /// meanwhile are queued for [`AcpDriver::next_event`], except while
    /// `replay` is given: then `session/update` notifications go there.
    async fn request(
        &mut self,
        method: &str,
        params: Value,
        replay: Option<&mut Vec<Value>>,
    ) -> Result<Value, DriverError> {
        self.rpc.request(method, params, replay).await
    }

    /// The handshake; the agent must be able to load sessions.
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        let result = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": { "readTextFile": true, "writeTextFile": true },
                        "terminal": true,
                    },
                    "clientInfo": { "name": "runnerd", "version": env!("CARGO_PKG_VERSION") },
                }),
                None,
            )
            .await?;
        if result.pointer("/agentCapabilities/loadSession") != Some(&Value::Bool(true)) {
            return Err(DriverError::Protocol(
                "the agent cannot load sessions (agentCapabilities.loadSession), so a lost turn could never be looked up".to_owned(),
            ));
        }
        Ok(())
    }

    /// `session/new` in `cwd`.
    pub async fn open_conversation(&mut self, cwd: &str) -> Result<String, DriverError> {
        let result = self
            .request("session/new", json!({ "cwd": cwd, "mcpServers": [] }), None)
            .await?;
        let id = result
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| DriverError::Protocol("session/new: missing sessionId".to_owned()))?;
        self.loaded.insert(id.clone());
        self.cwds.insert(id.clone(), cwd.to_owned());
        Ok(id)
    }

    async fn load(&mut self, session: &str, cwd: &str) -> Result<Vec<Value>, DriverError> {
        let mut replay = Vec::new();
        self.request(
            "session/load",
            json!({ "sessionId": session, "cwd": cwd, "mcpServers": [] }),
            Some(&mut replay),
        )
        .await?;
        self.loaded.insert(session.to_owned());
        self.cwds.insert(session.to_owned(), cwd.to_owned());
        self.restored = true;
        Ok(replay)
    }

    /// `session/load` unless this process already has the session.
    pub async fn resume_conversation(
        &mut self,
        session: &str,
        cwd: &str,
    ) -> Result<(), DriverError> {
        if self.loaded.contains(session) {
            return Ok(());
        }
        self.load(session, cwd).await.map(drop)
    }

    /// `session/prompt` with `_meta.messageId`; returns once the agent echoed
    /// the user message. The echo is waited for like the answer to a
    /// request: what arrives before it is held and is no progress.
    pub async fn start_turn(
        &mut self,
        session: &str,
        text: &str,
        client_id: &str,
    ) -> Result<String, DriverError> {
        let id = self
            .rpc
            .send_request(
                "session/prompt",
                json!({
                    "sessionId": session,
                    "prompt": [{ "type": "text", "text": text }],
                    "_meta": { "messageId": client_id },
                }),
            )
            .await?;
        self.active = Some((id, client_id.to_owned()));
        let mut pending = Pending::new("session/prompt", self.rpc.bounds());
        loop {
            let (msg, bytes) = self.rpc.receive_for(&pending).await?;
            if is_response_to(&msg, id) {
                // The turn ended (or was refused) before it was echoed or
                // answered: a refusal is an error, an end is read as such.
                // An error naming a model API failure is an end: the agent
                // took the message to its model (Claude Code answers a
                // context overflow so, with no echo).
                if msg.get("error").and_then(acp_error_cause).is_none() {
                    result_of("session/prompt", &msg)?;
                }
                self.rpc.hold(msg, bytes)?;
                return Ok(client_id.to_owned());
            }
            if user_message_id(&msg) == Some(client_id) {
                return Ok(client_id.to_owned());
            }
            if let Some(turn) = first_output(&msg, session) {
                // No echo: the agent's answer started, so it took the
                // message; its answer's id names the turn in a replay.
                let turn = turn.unwrap_or(client_id).to_owned();
                self.active = Some((id, turn.clone()));
                self.rpc.hold(msg, bytes)?;
                return Ok(turn);
            }
            pending.other();
            self.rpc.hold(msg, bytes)?;
        }
    }

    /// Was the turn recorded? A fresh `session/load` replay, searched for the
    /// user message id; an agent that stores the message under an id of its
    /// own is searched for its text after the turns it accepted before
    /// ([`replayed_after`]). Recorded turns are reported `interrupted`: a
    /// replay cannot prove completion.
    pub async fn lookup_turn(
        &mut self,
        session: &str,
        by: &TurnLookup,
    ) -> Result<Option<FoundTurn>, DriverError> {
        let cwd = match self.cwds.get(session) {
            Some(c) => c.clone(),
            None => std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "/".to_owned()),
        };
        let replay = self.load(session, &cwd).await?;
        let found = match by {
            TurnLookup::ClientId { id, sent } => replay
                .iter()
                .any(|m| user_message_id(m) == Some(id.as_str()))
                .then(|| id.clone())
                .or_else(|| replayed_after(&replay, sent)),
            TurnLookup::TurnId(id) => replay
                .iter()
                .any(|m| {
                    user_message_id(m) == Some(id.as_str())
                        || m.pointer("/params/update/messageId")
                            .and_then(Value::as_str)
                            == Some(id.as_str())
                })
                .then(|| id.clone()),
        };
        self.replay = replay;
        Ok(found.map(interrupted))
    }

    /// Whether the last lookup's replay names no user message
    /// ([`names_nothing`]).
    pub fn replay_names_nothing(&self) -> bool {
        names_nothing(&self.replay)
    }

    /// The accepted turn `id` of an agent that names nothing, in the last
    /// lookup's replay ([`recorded_unnamed`]).
    pub fn recorded_unnamed(&self, id: &str, sent: &Sent) -> Option<FoundTurn> {
        recorded_unnamed(&self.replay, id, sent)
    }

    fn key(&self, request_id: &Value) -> String {
        let raw = match request_id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if self.restored {
            format!("r{}:{raw}", self.namespace)
        } else {
            raw
        }
    }

    /// The next event of the turn in progress.
    pub async fn next_event(&mut self) -> Result<ProviderEvent, DriverError> {
        let msg = self.rpc.next().await?;
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let turn_id = self
            .active
            .as_ref()
            .map(|(_, c)| c.clone())
            .unwrap_or_default();
        if method.is_empty() {
            return self.response_event(&msg);
        }
        let Some(request_id) = msg.get("id").cloned() else {
            if method == "session/update" {
                return Ok(update_event(&params, turn_id));
            }
            return Ok(ProviderEvent::Other(method));
        };
        if method == "session/request_permission" {
            return Ok(self.permission_event(request_id, method, &params, turn_id));
        }
        let Some(call) = client_call(&method, &params) else {
            return Ok(ProviderEvent::UnsupportedRequest { request_id, method });
        };
        let key = self.key(&request_id);
        Ok(ProviderEvent::ClientTool {
            request_id,
            key,
            call,
        })
    }

    /// A response: the end of the open `session/prompt` (its `stopReason`
    /// read as the turn's status), or nothing of the turn.
    fn response_event(&mut self, msg: &Value) -> Result<ProviderEvent, DriverError> {
        let active = self.active.clone();
        let Some((_, client)) = active.filter(|(id, _)| is_response_to(msg, *id)) else {
            return Ok(ProviderEvent::Other(String::new()));
        };
        self.active = None;
        // An agent whose model API failed answers the prompt with an error
        // naming the failure: the turn failed upstream.
        if let Some(upstream) = msg.get("error").and_then(acp_error_cause) {
            return Ok(ProviderEvent::TurnCompleted {
                turn_id: client,
                end: super::TurnEnd {
                    status: "failed".to_owned(),
                    upstream: Some(upstream),
                },
            });
        }
        let result = result_of("session/prompt", msg)?;
        let status = match result.get("stopReason").and_then(Value::as_str) {
            Some("end_turn") => "completed",
            Some("cancelled") => "interrupted",
            Some(_) => "failed",
            None => {
                return Err(DriverError::Protocol(
                    "session/prompt: missing stopReason".to_owned(),
                ));
            }
        };
        Ok(ProviderEvent::TurnCompleted {
            turn_id: client,
            end: super::TurnEnd {
                status: status.to_owned(),
                upstream: None,
            },
        })
    }

    /// `session/request_permission`: its allow and reject options are kept
    /// for the answer.
    fn permission_event(
        &mut self,
        request_id: Value,
        method: String,
        params: &Value,
        turn_id: String,
    ) -> ProviderEvent {
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pick = |kinds: &[&str]| {
            kinds.iter().find_map(|k| {
                options
                    .iter()
                    .find(|o| o.get("kind").and_then(Value::as_str) == Some(k))
                    .and_then(|o| o.get("optionId").and_then(Value::as_str))
                    .map(str::to_owned)
            })
        };
        let allow = pick(&["allow_once", "allow_always"]);
        let reject = pick(&["reject_once", "reject_always"]);
        self.permissions
            .insert(request_id.to_string(), (allow, reject));
        let summary = params
            .pointer("/toolCall/title")
            .cloned()
            .or_else(|| params.pointer("/toolCall/toolCallId").cloned())
            .unwrap_or(Value::Null);
        ProviderEvent::Request {
            request_id,
            method,
            turn_id,
            summary,
            item_id: None,
        }
    }

    /// Answers a permission request: `accept` picks the allow option,
    /// `decline` the reject option.
    pub async fn answer(&mut self, request_id: &Value, decision: &str) -> Result<(), DriverError> {
        let (allow, reject) = self
            .permissions
            .remove(&request_id.to_string())
            .unwrap_or_default();
        let option = if decision == "accept" { allow } else { reject };
        let outcome = match option {
            Some(id) => json!({ "outcome": "selected", "optionId": id }),
            None => json!({ "outcome": "cancelled" }),
        };
        self.send(&json!({ "jsonrpc": "2.0", "id": request_id, "result": { "outcome": outcome } }))
            .await
    }

    /// Answers a client tool request.
    pub async fn respond_tool(
        &mut self,
        request_id: &Value,
        result: Result<Value, String>,
    ) -> Result<(), DriverError> {
        let msg = match result {
            Ok(v) => json!({ "jsonrpc": "2.0", "id": request_id, "result": v }),
            Err(message) => json!({
                "jsonrpc": "2.0",
                "id": request_id,
                "error": { "code": -32603, "message": message },
            }),
        };
        self.send(&msg).await
    }

    /// Answers an unsupported request with `method not found`.
    pub async fn reject(&mut self, request_id: &Value, method: &str) -> Result<(), DriverError> {
        self.send(&json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "error": { "code": -32601, "message": format!("runnerd does not handle {method}") },
        }))
        .await
    }
}

/// A `session/update` notification: a finished tool call is an item,
/// anything else is named only.
fn update_event(params: &Value, turn_id: String) -> ProviderEvent {
    let update = params.get("update").cloned().unwrap_or(Value::Null);
    let kind = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let done = matches!(
        update.get("status").and_then(Value::as_str),
        Some("completed" | "failed")
    );
    if kind == "tool_call_update" && done {
        let mut item = serde_json::Map::new();
        item.insert("type".into(), json!("toolCall"));
        for k in ["toolCallId", "status", "title"] {
            if let Some(v) = update.get(k) {
                item.insert(k.into(), v.clone());
            }
        }
        return ProviderEvent::ItemCompleted {
            turn_id,
            item: Value::Object(item),
        };
    }
    ProviderEvent::Other(format!("session/update {kind}"))
}

/// The client-side tool a request asks for (`terminal/*`, `fs/*`), if it
/// is one.
fn client_call(method: &str, params: &Value) -> Option<ClientCall> {
    let s = |k: &str| {
        params
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_default()
    };
    Some(match method {
        "terminal/create" => ClientCall::TerminalCreate {
            command: s("command"),
            args: params
                .get("args")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            env: params
                .get("env")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|e| {
                            Some((
                                e.get("name")?.as_str()?.to_owned(),
                                e.get("value")?.as_str()?.to_owned(),
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            cwd: params.get("cwd").and_then(Value::as_str).map(str::to_owned),
        },
        "terminal/wait_for_exit" => ClientCall::TerminalWait {
            terminal_id: s("terminalId"),
        },
        "terminal/output" => ClientCall::TerminalOutput {
            terminal_id: s("terminalId"),
        },
        "terminal/kill" => ClientCall::TerminalKill {
            terminal_id: s("terminalId"),
        },
        "terminal/release" => ClientCall::TerminalRelease {
            terminal_id: s("terminalId"),
        },
        "fs/write_text_file" => ClientCall::WriteTextFile {
            path: s("path"),
            content: s("content"),
        },
        "fs/read_text_file" => ClientCall::ReadTextFile { path: s("path") },
        _ => return None,
    })
}

/// Whether `msg` is the agent's first output of a turn in `session` (its
/// answer, a thought, a plan, a tool call, or a permission request), and
/// then the id of the message it belongs to, if it names one.
fn first_output<'a>(msg: &'a Value, session: &str) -> Option<Option<&'a str>> {
    let method = msg.get("method").and_then(Value::as_str)?;
    if msg.pointer("/params/sessionId").and_then(Value::as_str) != Some(session) {
        return None;
    }
    match method {
        "session/request_permission" => Some(None),
        "session/update" => {
            let update = msg.pointer("/params/update")?;
            let kind = update.get("sessionUpdate").and_then(Value::as_str)?;
            let output = matches!(
                kind,
                "agent_message_chunk" | "agent_thought_chunk" | "tool_call" | "plan"
            );
            output.then(|| update.get("messageId").and_then(Value::as_str))
        }
        _ => None,
    }
}

/// The message id of a `user_message_chunk` update (`messageId`, or
/// `_meta.messageId`), if `msg` is one.
fn user_message_id(msg: &Value) -> Option<&str> {
    if !is_user_chunk(msg) {
        return None;
    }
    let update = msg.pointer("/params/update")?;
    update
        .get("messageId")
        .and_then(Value::as_str)
        .or_else(|| update.pointer("/_meta/messageId").and_then(Value::as_str))
}

/// The id of a user message of `sent.text` that the replay holds after the
/// last output of a turn the runner saw accepted before (`sent.earlier`),
/// the chunks of one message joined: such a message is the turn's, stored
/// under the agent's own id.
fn replayed_after(replay: &[Value], sent: &Sent) -> Option<String> {
    if sent.text.is_empty() {
        return None;
    }
    let start = replay
        .iter()
        .rposition(|m| {
            m.pointer("/params/update/messageId")
                .and_then(Value::as_str)
                .is_some_and(|id| sent.earlier.iter().any(|e| e == id))
        })
        .map_or(0, |i| i + 1);
    let mut messages: Vec<(&str, Vec<&str>)> = Vec::new();
    let mut contiguous = false;
    for m in &replay[start..] {
        if !is_user_chunk(m) {
            contiguous = false;
            continue;
        }
        let id = user_message_id(m).unwrap_or_default();
        let text = m
            .pointer("/params/update/content/text")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match messages.last_mut() {
            Some((last, chunks)) if contiguous && *last == id => chunks.push(text),
            _ => messages.push((id, vec![text])),
        }
        contiguous = true;
    }
    let (id, _) = messages.into_iter().find(|(id, chunks)| {
        if id.is_empty() {
            // Chunks without ids do not say where one message ends:
            // `claude-agent-acp` replays the log of the SDK's `/model`
            // command as user chunks right before the prompt's. The turn
            // is there when its text is the last chunks'.
            (0..chunks.len()).any(|i| chunks[i..].concat() == sent.text)
        } else {
            chunks.concat() == sent.text
        }
    })?;
    Some(if id.is_empty() { "(unnamed)" } else { id }.to_owned())
}

/// Whether `replay` holds user messages and names none of them.
fn names_nothing(replay: &[Value]) -> bool {
    let mut users = replay.iter().filter(|m| is_user_chunk(m)).peekable();
    users.peek().is_some() && users.all(|m| user_message_id(m).is_none())
}

/// The accepted turn `id` of an agent that names nothing, in `replay`: a
/// user message of its text after the turns accepted before it
/// ([`replayed_after`]), with every tool call of the turn the runner saw
/// completed ended there too. codex-acp's replay holds the whole turn;
/// Claude Code's can lack a command's end (its transcript is written on a
/// timer), and a continuation of such a turn ran the command again, so
/// that turn is not found (the run closes `active_turn_recovery_closed`).
fn recorded_unnamed(replay: &[Value], id: &str, sent: &Sent) -> Option<FoundTurn> {
    replayed_after(replay, sent)?;
    sent.completed_tools
        .iter()
        .all(|tool| ended_in(replay, tool))
        .then(|| interrupted(id.to_owned()))
}

/// A turn a replay shows recorded, as a replay can show it: interrupted.
fn interrupted(id: String) -> FoundTurn {
    FoundTurn {
        id,
        status: ProviderTurnStatus::Interrupted,
        upstream: None,
    }
}

/// Whether `replay` shows the tool call `tool` ended (`completed` or
/// `failed`, in its `tool_call` or a `tool_call_update`).
fn ended_in(replay: &[Value], tool: &str) -> bool {
    replay.iter().any(|m| {
        let Some(update) = m.pointer("/params/update") else {
            return false;
        };
        update.get("toolCallId").and_then(Value::as_str) == Some(tool)
            && matches!(
                update.get("status").and_then(Value::as_str),
                Some("completed" | "failed")
            )
    })
}

/// A `user_message_chunk` update, whatever ids it carries.
fn is_user_chunk(msg: &Value) -> bool {
    msg.get("method").and_then(Value::as_str) == Some("session/update")
        && msg
            .pointer("/params/update/sessionUpdate")
            .and_then(Value::as_str)
            == Some("user_message_chunk")
}

/// The contract's cause for a `session/prompt` an ACP agent answered with
/// an error because its model API failed, as the real agents name it
/// (measured, `docs/real-providers.md`): codex-acp 0.16 passes Codex's
/// error on (`data.codex_error_info` and `data.message`, Codex's own
/// `TurnError` in snake case); claude-agent-acp 0.23 says it in the message
/// ("Internal error: Prompt is too long", "… API Error: 401 {…}").
pub fn acp_error_cause(error: &Value) -> Option<crate::causes::CauseCode> {
    use crate::causes::CauseCode;
    let message = error
        .pointer("/data/message")
        .or_else(|| error.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(info) = error.pointer("/data/codex_error_info") {
        let codex = json!({ "codexErrorInfo": camel_keys(info), "message": message });
        if let Some(cause) = super::codex::codex_error_cause(&codex) {
            return Some(cause);
        }
    }
    if message.contains("Prompt is too long") || message.contains("context_length_exceeded") {
        return Some(CauseCode::ContextWindowExceeded);
    }
    let status = ["unexpected status ", "API Error: "].iter().find_map(|p| {
        let at = message.find(p)? + p.len();
        message.get(at..at + 3)?.parse::<u16>().ok()
    })?;
    super::upstream_cause(status, message)
}

/// `value` with its object keys in camel case, as Codex's app-server
/// spells the `CodexErrorInfo` that codex-acp passes on in snake case.
fn camel_keys(value: &Value) -> Value {
    let camel = |k: &str| {
        let mut out = String::new();
        let mut up = false;
        for c in k.chars() {
            match (c, up) {
                ('_', _) => up = true,
                (c, true) => {
                    out.extend(c.to_uppercase());
                    up = false;
                }
                (c, false) => out.push(c),
            }
        }
        out
    };
    match value {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (camel(k), camel_keys(v))).collect())
        }
        Value::String(s) => Value::String(camel(s)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `session/prompt` errors the real codex-acp 0.16.0 and
    /// claude-agent-acp 0.23.1 answered when their model API failed
    /// (measured, `docs/real-providers.md`), read as the contract's causes.
    #[test]
    fn the_real_acp_agents_upstream_errors_read_as_the_contract_s_causes() {
        use crate::causes::CauseCode as C;
        let codex = |info: Value, message: &str| {
            json!({ "code": -32603, "message": "Internal error",
                    "data": { "codex_error_info": info, "message": message } })
        };
        let claude = |message: &str| json!({ "code": -32603, "message": message });
        let cases = [
            (
                codex(
                    json!({"response_too_many_failed_attempts": {"http_status_code": 429}}),
                    "exceeded retry limit, last status: 429 Too Many Requests",
                ),
                Some(C::UpstreamRateLimited),
            ),
            (
                codex(
                    json!("other"),
                    "unexpected status 401 Unauthorized: Your authentication token has expired., url: http://127.0.0.1:1/v1/responses",
                ),
                Some(C::UpstreamUnauthorized),
            ),
            (
                codex(
                    json!("other"),
                    "{\"error\":{\"code\":\"context_length_exceeded\",\"param\":\"input\"}}",
                ),
                Some(C::ContextWindowExceeded),
            ),
            (
                codex(
                    json!("other"),
                    "stream disconnected before completion: Transport error: network error: error decoding response body",
                ),
                Some(C::UpstreamStreamBroken),
            ),
            (
                claude("Internal error: Prompt is too long"),
                Some(C::ContextWindowExceeded),
            ),
            (
                claude("Internal error: Failed to authenticate. API Error: 401 {\"error\":{}}"),
                Some(C::UpstreamUnauthorized),
            ),
            (claude("Internal error"), None),
            (
                json!({ "code": -32603, "message": "Internal error", "data": { "details": "session/prompt failed" } }),
                None,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(acp_error_cause(&error), want, "{error}");
        }
    }

    #[test]
    fn user_message_ids_are_read_from_either_place() {
        let m = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"x"},"messageId":"m1"}}});
        assert_eq!(user_message_id(&m), Some("m1"));
        let m = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"x"},"_meta":{"messageId":"m2"}}}});
        assert_eq!(user_message_id(&m), Some("m2"));
        let m = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"messageId":"m1"}}});
        assert_eq!(user_message_id(&m), None);
    }

    #[test]
    fn an_agents_first_output_names_its_turn() {
        let answer = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"messageId":"msg_a"}}});
        assert_eq!(first_output(&answer, "s"), Some(Some("msg_a")));
        assert_eq!(first_output(&answer, "other"), None);
        let commands = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"available_commands_update","availableCommands":[]}}});
        assert_eq!(first_output(&commands, "s"), None);
        let ask = json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{},"options":[]}});
        assert_eq!(first_output(&ask, "s"), Some(None));
    }

    fn chunk(kind: &str, id: &str, text: &str) -> Value {
        json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":kind,"content":{"type":"text","text":text},"messageId":id}}})
    }

    #[test]
    fn a_turn_stored_under_the_agents_own_id_is_found_by_its_text_after_the_earlier_turns() {
        let replay = [
            chunk("user_message_chunk", "msg_u1", "fix the "),
            chunk("user_message_chunk", "msg_u1", "build"),
            chunk("agent_message_chunk", "msg_a1", "done"),
            chunk("user_message_chunk", "msg_u2", "fix the build"),
        ];
        let sent = |earlier: &[&str]| Sent {
            text: "fix the build".into(),
            earlier: earlier.iter().map(|e| e.to_string()).collect(),
            completed_tools: vec![],
        };
        // The first message's chunks are one message of the text.
        assert_eq!(replayed_after(&replay, &sent(&[])), Some("msg_u1".into()));
        // After the accepted turn msg_a1, only the second one is the turn's.
        assert_eq!(replayed_after(&replay[..3], &sent(&["msg_a1"])), None);
        assert_eq!(
            replayed_after(&replay, &sent(&["msg_a1"])),
            Some("msg_u2".into())
        );
        // Another text, or no text at all, is never the turn.
        let other = Sent {
            text: "fix the".into(),
            earlier: vec![],
            completed_tools: vec![],
        };
        assert_eq!(replayed_after(&replay, &other), None);
        assert_eq!(replayed_after(&replay, &Sent::default()), None);
    }

    /// `claude-agent-acp` 0.23.1 replays a session's first prompt after the
    /// log of the SDK's `/model` command, every chunk without an id: read
    /// as one message, the prompt was not found, and the runner sent it
    /// again after a kill (the model saw it twice: `no-replay.turn`).
    #[test]
    fn a_prompt_after_unnamed_context_chunks_is_found_by_its_text() {
        let unnamed = |text: &str| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":text}}}});
        let replay = [
            unnamed("<command-name>/model</command-name>"),
            unnamed("<local-command-stdout>Set model</local-command-stdout>"),
            unnamed("Create "),
            unnamed("hello.txt"),
        ];
        let sent = |text: &str| Sent {
            text: text.into(),
            earlier: vec![],
            completed_tools: vec![],
        };
        assert_eq!(
            replayed_after(&replay, &sent("Create hello.txt")),
            Some("(unnamed)".into())
        );
        assert_eq!(replayed_after(&replay, &sent("Create")), None);
    }

    /// codex-acp 0.16.0 replays a turn with no id on anything (measured,
    /// `runner-acpx-codex-real`: user chunk, answer, the command's
    /// `tool_call` and `tool_call_update` both `completed`); the runner's
    /// own id for the accepted turn was never found, and every cut after
    /// the first output closed the run.
    #[test]
    fn an_accepted_turn_of_an_agent_that_names_nothing_is_found_when_its_commands_ended() {
        let unnamed = |kind: &str, text: &str| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":kind,"content":{"type":"text","text":text}}}});
        let tool = |kind: &str, status: &str| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":kind,"toolCallId":"call_1","status":status}}});
        let mut replay = vec![
            unnamed("user_message_chunk", "Create hello.txt"),
            unnamed("agent_message_chunk", "Working on it."),
            tool("tool_call", "completed"),
            tool("tool_call_update", "completed"),
        ];
        assert!(names_nothing(&replay));
        let sent = |text: &str, tools: &[&str]| Sent {
            text: text.into(),
            earlier: vec!["m0".into()],
            completed_tools: tools.iter().map(|t| t.to_string()).collect(),
        };
        let found = recorded_unnamed(&replay, "f1", &sent("Create hello.txt", &["call_1"]));
        assert_eq!(
            found.map(|f| (f.id, f.status)),
            Some(("f1".into(), ProviderTurnStatus::Interrupted))
        );
        // Another text, or a command the runner saw end that the replay
        // does not show ended (Claude Code's lagging transcript): not found.
        assert_eq!(recorded_unnamed(&replay, "f1", &sent("Other", &[])), None);
        assert_eq!(
            recorded_unnamed(&replay, "f1", &sent("Create hello.txt", &["call_2"])),
            None
        );
        replay[2] = tool("tool_call", "pending");
        replay.pop();
        assert_eq!(
            recorded_unnamed(&replay, "f1", &sent("Create hello.txt", &["call_1"])),
            None
        );
        // An agent that names its user messages is looked up by id only.
        replay[0] = chunk("user_message_chunk", "m1", "Create hello.txt");
        assert!(!names_nothing(&replay));
        assert!(!names_nothing(&[]));
    }
}
