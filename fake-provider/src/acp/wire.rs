//! The wire forms of the fake ACP agent: request parameters as they parse,
//! its error codes and permission options, and the `session/update`
//! payloads and request params it sends. Pure functions: no state, no I/O.

use serde::Deserialize;
use serde_json::{Value, json};

/// The ACP protocol version this fake speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// The permission option ids offered for every tool call needing approval.
pub const ALLOW_ONCE: &str = "allow";
/// See [`ALLOW_ONCE`].
pub const ALLOW_ALWAYS: &str = "allow-always";
/// See [`ALLOW_ONCE`].
pub const REJECT_ONCE: &str = "reject";

pub(super) const INTERNAL_ERROR: i64 = -32603;
pub(super) const RESOURCE_NOT_FOUND: i64 = -32002;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeParams {
    #[allow(dead_code)]
    protocol_version: u16,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NewSessionParams {
    pub cwd: String,
    #[allow(dead_code)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LoadSessionParams {
    pub session_id: String,
    #[allow(dead_code)]
    cwd: String,
    #[allow(dead_code)]
    mcp_servers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptParams {
    pub session_id: String,
    pub prompt: Vec<Value>,
    #[serde(rename = "_meta", default)]
    pub meta: Option<PromptMeta>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptMeta {
    #[serde(default)]
    pub message_id: Option<String>,
}

impl PromptParams {
    /// The text blocks of the prompt, joined by newlines.
    pub fn text(&self) -> String {
        self.prompt
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The client's message id: `_meta.messageId`, else the id a
    /// `[turncut:message ID]` prefix of the text names (a client such as
    /// acpx sends no `_meta` of the runner's), else none.
    pub fn client_id(&self) -> Option<String> {
        let meta = self.meta.as_ref().and_then(|m| m.message_id.clone());
        meta.or_else(|| {
            ::wire::marker::split_message_id(&self.text())
                .0
                .map(str::to_owned)
        })
    }

    /// The runner's text, without a message-id prefix.
    pub fn runner_text(&self) -> String {
        let text = self.text();
        ::wire::marker::split_message_id(&text).1.to_owned()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CancelParams {
    pub session_id: String,
}

/// The `initialize` result.
pub(super) fn initialize_result() -> Value {
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
    })
}

pub(super) fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

/// The echo of one prompt block, carrying the message id both ways.
pub(super) fn user_message_chunk(block: &Value, message_id: &str) -> Value {
    json!({
        "sessionUpdate": "user_message_chunk",
        "content": block,
        "messageId": message_id,
        "_meta": { "messageId": message_id },
    })
}

pub(super) fn agent_message_chunk(text: &str) -> Value {
    json!({
        "sessionUpdate": "agent_message_chunk",
        "content": text_block(text),
        "messageId": uuid::Uuid::now_v7().to_string(),
    })
}

/// A `tool_call_update` to `status`.
pub(super) fn tool_status(call_id: &str, status: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": status,
    })
}

/// A `tool_call_update` that fails the call, saying `why`.
pub(super) fn tool_failed(call_id: &str, why: &str) -> Value {
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed",
        "content": [{ "type": "content", "content": text_block(why) }],
    })
}

/// The `tool_call_update` that ends a call run in terminal `terminal_id`.
pub(super) fn tool_exited(
    call_id: &str,
    terminal_id: &str,
    exit_code: Option<u64>,
    signal: Option<&str>,
) -> Value {
    let status = if exit_code == Some(0) {
        "completed"
    } else {
        "failed"
    };
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": status,
        "content": [{ "type": "terminal", "terminalId": terminal_id }],
        "rawOutput": { "exitCode": exit_code, "signal": signal },
    })
}

/// A pending tool call (the body of `tool_call`, and of the permission
/// request's `toolCall`).
pub(super) fn tool_call(call_id: &str, title: &str, raw_input: &Value) -> Value {
    json!({
        "toolCallId": call_id,
        "title": title,
        "kind": "execute",
        "status": "pending",
        "rawInput": raw_input,
    })
}

/// The `session/update` announcing a pending tool call.
pub(super) fn tool_call_update(call_id: &str, title: &str, raw_input: &Value) -> Value {
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": title,
        "kind": "execute",
        "status": "pending",
        "rawInput": raw_input,
    })
}

/// The params of `session/request_permission` for a pending tool call.
pub(super) fn permission_params(session_id: &str, tool_call: Value) -> Value {
    json!({
        "sessionId": session_id,
        "toolCall": tool_call,
        "options": [
            { "optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once" },
            { "optionId": ALLOW_ALWAYS, "name": "Always allow", "kind": "allow_always" },
            { "optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once" },
        ],
    })
}

/// The decision in an answer to `session/request_permission`: the selected
/// option id, `cancelled`, or `error` (an error or a malformed answer counts
/// as a refusal).
pub(super) fn permission_decision(result: Option<&Value>, error: Option<&String>) -> String {
    let outcome = result.and_then(|r| r.pointer("/outcome/outcome"));
    match (outcome.and_then(Value::as_str), error) {
        (Some("selected"), None) => result
            .and_then(|r| r.pointer("/outcome/optionId"))
            .and_then(Value::as_str)
            .unwrap_or(REJECT_ONCE)
            .to_owned(),
        (Some("cancelled"), None) => "cancelled".to_owned(),
        _ => "error".to_owned(),
    }
}

/// The message of an error answer, if the answer is one.
pub(super) fn error_message(msg: &Value) -> Option<String> {
    msg.get("error").map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .unwrap_or("the client answered with an error")
            .to_owned()
    })
}
