//! The Anthropic Messages wire format of the fake model API (`POST
//! /v1/messages`), beside the OpenAI Responses one: a request is translated
//! into the Responses request the model already reads (one model, one store,
//! one script for both formats), and the model's plan is answered as the
//! Messages API streams it: `message_start`, per content block
//! `content_block_start`, `content_block_delta` (`text_delta`, or
//! `input_json_delta` for a `tool_use`) and `content_block_stop`, then
//! `message_delta` (`stop_reason` `tool_use` or `end_turn`, usage) and
//! `message_stop`; `stream: false` answers the final message object.
//!
//! Mapping: a user message's text blocks are a user message, its
//! `tool_result` blocks `function_call_output`s (by `tool_use_id`); an
//! assistant message's text a message, its `tool_use` blocks
//! `function_call`s (by `id`, arguments the JSON of `input`); `tools`
//! (`{name, input_schema}`) become functions (`Bash {command}` is the
//! command tool the Claude Agent SDK offers); the conversation is the
//! `session_id` of `metadata.user_id` (JSON from Claude Code), else that
//! string, else `default`; a text block that starts with the runner's
//! message-id marker goes first (Claude Code puts `<system-reminder>`
//! blocks before the user's text).
//!
//! Deliberately not simulated: thinking blocks, images, prompt caching (the
//! usage's cache fields are 0), `tool_choice`, token counting, the beta
//! headers (ignored), `ping` events.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::model::Plan;
use super::wire::{CallBody, Request, random_hex};

/// An Anthropic error body: `{type: "error", error: {type, message}}`.
pub(super) fn error_body(kind: &str, message: &str) -> Value {
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// The error type the Messages API names for an HTTP status.
pub(super) fn error_type(code: u16) -> &'static str {
    match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// A Messages request as the Responses request the model reads; the error
/// is a message and the offending parameter.
pub(super) fn translate(body: &[u8]) -> Result<Value, (String, Option<&'static str>)> {
    let raw: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Err(("The request body must be a JSON object.".to_owned(), None)),
        Err(e) => return Err((format!("invalid JSON body: {e}"), None)),
    };
    let Some(messages) = raw.get("messages").and_then(Value::as_array) else {
        return Err(("messages: Field required".to_owned(), Some("messages")));
    };
    let mut input = Vec::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role != "user" && role != "assistant" {
            return Err((
                format!("messages: unexpected role {role:?}"),
                Some("messages"),
            ));
        }
        translate_message(role, m.get("content"), &mut input)?;
    }
    let tools: Vec<Value> = raw
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?;
            Some(json!({ "type": "function", "name": name, "parameters": t.get("input_schema").cloned().unwrap_or(json!({})) }))
        })
        .collect();
    let parallel = !raw
        .pointer("/tool_choice/disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut out = json!({
        "model": raw.get("model").cloned().unwrap_or(Value::Null),
        "stream": raw.get("stream").cloned().unwrap_or(json!(false)),
        "input": input,
        "tools": tools,
        "parallel_tool_calls": parallel,
    });
    if let Some(user) = raw.pointer("/metadata/user_id").and_then(Value::as_str) {
        // Claude Code's is JSON with its `session_id`; another client's, itself.
        let session = serde_json::from_str::<Value>(user).ok().and_then(|v| {
            v.get("session_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        out["prompt_cache_key"] = json!(session.unwrap_or_else(|| user.to_owned()));
    }
    Ok(out)
}

fn translate_message(
    role: &str,
    content: Option<&Value>,
    input: &mut Vec<Value>,
) -> Result<(), (String, Option<&'static str>)> {
    let blocks = match content {
        Some(Value::String(text)) => vec![json!({ "type": "text", "text": text })],
        Some(Value::Array(blocks)) => blocks.clone(),
        _ => {
            return Err((
                "messages: content must be a string or a list of blocks".to_owned(),
                Some("messages"),
            ));
        }
    };
    let mut text = Vec::new();
    for b in &blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = b.get("text").and_then(Value::as_str).unwrap_or_default();
                if !claude_code_context(t) {
                    text.push(t.to_owned());
                }
            }
            Some("tool_use") => input.push(json!({
                "type": "function_call",
                "call_id": call_id(b.get("id")),
                "name": b.get("name").and_then(Value::as_str).unwrap_or_default(),
                "arguments": b.get("input").cloned().unwrap_or(json!({})).to_string(),
            })),
            Some("tool_result") => input.push(json!({
                "type": "function_call_output",
                "call_id": call_id(b.get("tool_use_id")),
                "output": result_text(b.get("content")),
            })),
            _ => {}
        }
    }
    // Claude Code puts its context (`<system-reminder>` blocks) before the
    // user's text: a block that names the runner's message id goes first,
    // where the model looks for it.
    if let Some(i) = text
        .iter()
        .position(|t| t.starts_with(::wire::marker::MESSAGE_MARKER))
    {
        let marked = text.remove(i);
        text.insert(0, marked);
    }
    // A message of context alone (Claude Code adds `<system-reminder>`
    // blocks beside tool results) is no new user message.
    if text.is_empty() {
        return Ok(());
    }
    input.push(json!({ "type": "message", "role": role, "content": text.join("\n") }));
    Ok(())
}

/// Whether a user text block is Claude Code's own context, not the user's
/// words: its `<system-reminder>`s, the log of the SDK's `/model` command
/// (`<local-command-caveat>`, `<command-name>`, `<local-command-stdout>`),
/// and the message it adds when it resumes an interrupted session ("Continue
/// from where you left off.", measured with claude-agent-acp 0.23.1). Read
/// as the user's, a continuation after a restart (the runner's text after
/// that context) was taken for a new message and its script played again:
/// the command ran twice.
fn claude_code_context(text: &str) -> bool {
    const TAGS: [&str; 4] = [
        "<system-reminder>",
        "<local-command-caveat>",
        "<command-name>",
        "<local-command-stdout>",
    ];
    let t = text.trim_start();
    TAGS.iter().any(|tag| t.starts_with(tag)) || t.trim_end() == "Continue from where you left off."
}

/// The model's call id of a `tool_use` id: the model names its calls
/// `call_<hex>`, the Messages API `toolu_<hex>` (the same hex).
fn call_id(id: Option<&Value>) -> String {
    let id = id.and_then(Value::as_str).unwrap_or_default();
    id.strip_prefix("toolu_")
        .map_or_else(|| id.to_owned(), |hex| format!("call_{hex}"))
}

/// The text of a `tool_result`'s content: a string, or text blocks.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The Messages answer to `req` playing `plan`: its SSE events (each with
/// `type`) and the final message object.
pub(super) fn build(
    req: &Request,
    plan: &Plan,
    calls: &[(String, String)],
    approvals: &HashSet<String>,
    input_bytes: usize,
    body: impl Fn(&str) -> CallBody,
) -> super::wire::Built {
    let id = format!("msg_{}", random_hex());
    let model = req
        .raw
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(super::wire::FAKE_MODEL);
    let input_tokens = (input_bytes / 4).max(1) as u64;
    let usage = |output: u64| {
        json!({ "input_tokens": input_tokens, "output_tokens": output,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 })
    };
    let mut message = json!({
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": usage(1),
    });
    let mut events = vec![json!({ "type": "message_start", "message": message })];
    let mut content: Vec<Value> = Vec::new();
    let text = match plan {
        Plan::Tools { say, .. } if !say.is_empty() => Some(say.join("\n\n")),
        Plan::Tools { .. } => None,
        Plan::Final(text) => Some(text.clone()),
    };
    let mut output_chars = 0;
    if let Some(text) = text {
        output_chars += text.len();
        text_block(&mut events, content.len(), &text);
        content.push(json!({ "type": "text", "text": text }));
    }
    for (call_id, key) in calls {
        let index = content.len();
        let (name, arguments) = super::wire::call_arguments(req, key, body(key), approvals);
        output_chars += arguments.len();
        let input: Value = serde_json::from_str(&arguments).unwrap_or(json!({}));
        let id = format!("toolu_{}", call_id.trim_start_matches("call_"));
        events.push(json!({ "type": "content_block_start", "index": index,
            "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }));
        events.push(json!({ "type": "content_block_delta", "index": index,
            "delta": { "type": "input_json_delta", "partial_json": arguments } }));
        events.push(json!({ "type": "content_block_stop", "index": index }));
        content.push(json!({ "type": "tool_use", "id": id, "name": name, "input": input }));
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    let output_tokens = (output_chars / 4).max(1) as u64;
    events.push(
        json!({ "type": "message_delta", "delta": { "stop_reason": stop, "stop_sequence": null },
        "usage": { "output_tokens": output_tokens } }),
    );
    events.push(json!({ "type": "message_stop" }));
    message["content"] = json!(content);
    message["stop_reason"] = json!(stop);
    message["usage"] = usage(output_tokens);
    super::wire::Built {
        events,
        response: message,
    }
}

/// The events of a text block at `index`, word by word.
fn text_block(events: &mut Vec<Value>, index: usize, text: &str) {
    events.push(json!({ "type": "content_block_start", "index": index,
        "content_block": { "type": "text", "text": "" } }));
    for delta in text.split_inclusive(' ') {
        events.push(json!({ "type": "content_block_delta", "index": index,
            "delta": { "type": "text_delta", "text": delta } }));
    }
    events.push(json!({ "type": "content_block_stop", "index": index }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> Request {
        let translated = translate(body.to_string().as_bytes()).expect("translate");
        Request::parse(translated).expect("parse")
    }

    #[test]
    fn a_claude_request_reads_as_its_responses_request() {
        let req = request(json!({
            "model": "claude-sonnet", "max_tokens": 100, "stream": true,
            "metadata": { "user_id": "{\"device_id\":\"d\",\"session_id\":\"s1\"}" },
            "tools": [{ "name": "Bash", "input_schema": { "type": "object", "properties": { "command": { "type": "string" } } } }],
            "messages": [
                { "role": "user", "content": [{ "type": "text", "text": "<system-reminder>context</system-reminder>" },
                                              { "type": "text", "text": "[turncut:message m1] Create hello.txt" }] },
                { "role": "assistant", "content": [{ "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": { "command": "true" } }] },
                { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "toolu_1", "content": "ok" }] },
            ],
        }));
        assert!(req.stream);
        assert_eq!(req.conversation, "s1");
        assert_eq!(req.message_id, "m1", "the marked block names the message");
        assert_eq!(req.tool.name, "Bash");
        assert_eq!(req.outputs().get("call_1"), Some(&"ok"));
    }

    /// The continuation claude-agent-acp 0.23.1 sends after a restart
    /// (measured: `everyday-workflows.runner-acpx-claude-real.local.single-task
    /// --cut model.message_delta.sent#2 --fault kill-runner`): Claude Code's
    /// resume message and the `/model` log before the runner's text.
    #[test]
    fn a_continuation_after_claude_code_s_context_continues_the_prompt() {
        let ctx = |t: &str| json!({ "type": "text", "text": t });
        let prompt = || {
            json!({ "role": "user", "content": [ctx("<system-reminder>skills</system-reminder>"),
            ctx("<command-name>/model</command-name>"), ctx("<local-command-stdout>Set model</local-command-stdout>"),
            ctx("Create hello.txt")] })
        };
        let first = request(json!({ "model": "m", "max_tokens": 1, "messages": [prompt()] }));
        let again = request(json!({ "model": "m", "max_tokens": 1, "messages": [
            prompt(),
            { "role": "assistant", "content": [{ "type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {} }] },
            { "role": "user", "content": [{ "type": "tool_result", "tool_use_id": "toolu_1", "content": "ok" }] },
            { "role": "user", "content": [ctx("Continue from where you left off.")] },
            { "role": "assistant", "content": [ctx("No response requested.")] },
            { "role": "user", "content": [ctx("<local-command-caveat>Caveat</local-command-caveat>"),
                ctx("<command-name>/model</command-name>"), ctx("[turncut:continue] Continue it.")] },
        ] }));
        assert_eq!(first.user_text, "Create hello.txt");
        assert!(again.continuation, "the runner's continuation is one");
        assert_eq!(
            again.message_id, first.message_id,
            "it runs under the prompt's id"
        );
    }

    #[test]
    fn a_plan_streams_as_the_messages_api_sends_it() {
        let req = request(
            json!({ "model": "m", "max_tokens": 1, "messages": [{ "role": "user", "content": "hi" }],
            "tools": [{ "name": "Bash", "input_schema": {} }] }),
        );
        let plan = Plan::Tools {
            say: vec!["Looking.".into()],
            keys: vec!["k".into()],
        };
        let built = build(
            &req,
            &plan,
            &[("call_ab".into(), "k".into())],
            &HashSet::new(),
            40,
            |_| CallBody::Command("echo".into()),
        );
        let kinds: Vec<&str> = built
            .events
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(built.response["stop_reason"], "tool_use");
        assert_eq!(built.response["content"][1]["input"]["command"], "echo");
        assert_eq!(built.events[5]["delta"]["type"], "input_json_delta");
        let done = build(
            &req,
            &Plan::Final("Done.".into()),
            &[],
            &HashSet::new(),
            4,
            |_| CallBody::Command(String::new()),
        );
        assert_eq!(done.response["stop_reason"], "end_turn");
    }

    #[test]
    fn bad_requests_name_the_parameter() {
        assert_eq!(translate(b"{}").unwrap_err().1, Some("messages"));
        assert!(translate(br#"{"messages":[{"role":"system","content":"x"}]}"#).is_err());
        assert_eq!(error_type(529), "overloaded_error");
    }
}
