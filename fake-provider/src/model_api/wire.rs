//! The wire forms of the fake model API: a `POST /v1/responses` body as it
//! parses (input items, identity, the shell tool offered), OpenAI-style
//! error bodies, and the response object with its SSE events, in the real
//! order and shapes. Pure functions, apart from random ids and the clock.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use serde_json::{Value, json};

use super::model::Plan;
use crate::journal::now_ms;

/// The model name reported when a request names none.
pub const FAKE_MODEL: &str = "turncut-fake-model";

/// An OpenAI-style error body.
pub(super) fn error_body(message: &str, kind: &str, param: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": param, "code": null } })
}

/// An input item, reduced to what the model looks at.
pub(super) enum Item {
    Message { role: String, text: String },
    Call { call_id: String, arguments: String },
    Output { call_id: String, text: String },
    Other,
}

/// A validated `POST /v1/responses` body.
pub(super) struct Request {
    pub raw: Value,
    pub stream: bool,
    pub items: Vec<Item>,
    pub message_id: String,
    /// The text of the user message this request's turn answers: the latest
    /// one that is not a continuation (a continuation answers the message it
    /// continues).
    pub user_text: String,
    pub conversation: String,
    /// The latest user message continues an interrupted turn (it starts
    /// with the continuation marker).
    pub continuation: bool,
    pub parallel: bool,
    pub tool: ToolShape,
}

/// How the request's tools want a shell command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ToolShape {
    /// The function's name.
    pub name: String,
    /// How the command line travels.
    pub param: CommandParam,
    /// Whether the function takes `sandbox_permissions` (Codex's
    /// `exec_command`): a tool that needs approval then asks for
    /// `require_escalated`, which makes Codex ask its client.
    pub escalation: bool,
    /// Whether the request offers a `Write {path, content}` function (the
    /// native runner's): a `write-file` tool is then a call of it.
    pub write: bool,
}

/// What one function call of the model does.
pub(super) enum CallBody {
    /// Runs a command line, in the shape of the request's command tool.
    Command(String),
    /// Writes `content` to `path` with the request's `Write` function.
    Write { path: String, content: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CommandParam {
    /// `{"command": "<command line>"}`, like `Bash`.
    CommandString,
    /// `{"command": ["sh", "-c", "<command line>"]}`, like Codex's `shell`.
    CommandArgv,
    /// `{"cmd": "<command line>"}`, like Codex's `exec_command`.
    Cmd,
}

impl Request {
    /// Parses and validates a request body; the error is a message and the
    /// offending parameter.
    pub fn from_body(body: &Bytes) -> Result<Request, (String, Option<&'static str>)> {
        let raw: Value = match serde_json::from_slice(body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return Err(("The request body must be a JSON object.".to_owned(), None)),
            Err(e) => {
                return Err((
                    format!("We could not parse the JSON body of your request: {e}"),
                    None,
                ));
            }
        };
        Request::parse(raw)
    }

    pub(super) fn parse(raw: Value) -> Result<Request, (String, Option<&'static str>)> {
        let stream = match raw.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(("'stream' must be a boolean.".to_owned(), Some("stream"))),
        };
        let items = parse_input(raw.get("input"))?;
        let metadata = |key: &str| {
            raw.pointer(&format!("/metadata/{key}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let users: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Item::Message { role, text } if role == "user" => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if users.is_empty() {
            return Err((
                "The input has no user message to answer.".to_owned(),
                Some("input"),
            ));
        }
        let conversation = metadata("turncut_conversation")
            .or_else(|| {
                raw.get("prompt_cache_key")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "default".to_owned());
        let message_id = metadata("turncut_message_id")
            .or_else(|| marked_message_id(&users))
            .unwrap_or_else(|| derived_message_id(&conversation, &users));
        // The runner's own texts, without a message-id marker.
        let users: Vec<&str> = users
            .iter()
            .map(|u| wire::marker::split_message_id(u).1)
            .collect();
        let continuation = users
            .last()
            .is_some_and(|u| wire::marker::is_continuation(u));
        let user_text = answered_text(&users);
        let parallel = raw
            .get("parallel_tool_calls")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let tool = tool_shape(raw.get("tools").and_then(Value::as_array));
        Ok(Request {
            raw,
            stream,
            items,
            message_id,
            user_text,
            conversation,
            continuation,
            parallel,
            tool,
        })
    }

    /// The items after the latest user message: this turn's calls and outputs.
    pub fn tail(&self) -> &[Item] {
        let last_user = self
            .items
            .iter()
            .rposition(|i| matches!(i, Item::Message { role, .. } if role == "user"))
            .map_or(0, |p| p + 1);
        &self.items[last_user..]
    }
}

/// The message id a runner that can send only text (acpx, through an agent)
/// names by a prefix of the latest user message (`wire::marker`); a
/// continuation runs under the message it continues.
fn marked_message_id(users: &[&str]) -> Option<String> {
    let id = wire::marker::split_message_id(users.last()?).0?;
    Some(
        id.strip_suffix(wire::client_id::CONTINUATION)
            .unwrap_or(id)
            .to_owned(),
    )
}

/// The request's `input`: a string is one user message.
fn parse_input(input: Option<&Value>) -> Result<Vec<Item>, (String, Option<&'static str>)> {
    match input {
        Some(Value::String(text)) => Ok(vec![Item::Message {
            role: "user".to_owned(),
            text: text.clone(),
        }]),
        Some(Value::Array(items)) => items.iter().map(parse_item).collect(),
        _ => Err((
            "'input' must be a string or an array of input items.".to_owned(),
            Some("input"),
        )),
    }
}

fn parse_item(item: &Value) -> Result<Item, (String, Option<&'static str>)> {
    let bad = |what: &str| Err((format!("Invalid input item: {what}."), Some("input")));
    let str_field = |key: &str| item.get(key).and_then(Value::as_str);
    let kind = str_field("type").or(item.get("role").map(|_| "message"));
    match kind {
        Some("message") => {
            let Some(role) = str_field("role") else {
                return bad("a message needs a 'role'");
            };
            let text = match item.get("content") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return bad("a message's 'content' must be a string or an array of parts"),
            };
            Ok(Item::Message {
                role: role.to_owned(),
                text,
            })
        }
        Some("function_call") => match (str_field("call_id"), str_field("arguments")) {
            (Some(call_id), Some(arguments)) => Ok(Item::Call {
                call_id: call_id.to_owned(),
                arguments: arguments.to_owned(),
            }),
            _ => bad("a function_call needs 'call_id' and 'arguments' strings"),
        },
        Some("function_call_output") => {
            let Some(call_id) = str_field("call_id") else {
                return bad("a function_call_output needs a 'call_id' string");
            };
            Ok(Item::Output {
                call_id: call_id.to_owned(),
                text: output_text(item.get("output").unwrap_or(&Value::Null)),
            })
        }
        Some(_) => Ok(Item::Other),
        None => bad("an item needs a 'type'"),
    }
}

/// The text of a `function_call_output.output`: a string, or content parts.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other
            .get("content")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

/// The shell tool the request offers, by preference: `Bash`/`bash` with a
/// `command` string, Codex's `shell` with a `command` array, `shell_command`
/// with a `command` string, `exec_command` with `cmd`; `Bash` when none is offered.
/// The name of the file-writing function a request may offer.
const WRITE_FUNCTION: &str = "Write";

fn tool_shape(tools: Option<&Vec<Value>>) -> ToolShape {
    let functions: Vec<(&str, &Value)> = tools
        .into_iter()
        .flatten()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .filter_map(|t| {
            let name = t.get("name").and_then(Value::as_str)?;
            Some((
                name,
                t.pointer("/parameters/properties").unwrap_or(&Value::Null),
            ))
        })
        .collect();
    let kind = |props: &Value, key: &str| {
        props
            .pointer(&format!("/{key}/type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let write = functions.iter().any(|(name, props)| {
        *name == WRITE_FUNCTION
            && kind(props, "path") == "string"
            && kind(props, "content") == "string"
    });
    let preferences = [
        ("Bash", "command", "string", CommandParam::CommandString),
        ("bash", "command", "string", CommandParam::CommandString),
        ("shell", "command", "array", CommandParam::CommandArgv),
        (
            "shell_command",
            "command",
            "string",
            CommandParam::CommandString,
        ),
        ("exec_command", "cmd", "string", CommandParam::Cmd),
    ];
    for (wanted, key, key_type, param) in preferences {
        if let Some((_, props)) = functions
            .iter()
            .find(|(name, props)| *name == wanted && kind(props, key) == key_type)
        {
            let escalation = props
                .pointer("/sandbox_permissions/enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.contains(&json!("require_escalated")));
            return ToolShape {
                name: wanted.to_owned(),
                param,
                escalation,
                write,
            };
        }
    }
    ToolShape {
        name: "Bash".to_owned(),
        param: CommandParam::CommandString,
        escalation: false,
        write,
    }
}

impl Request {
    /// The outputs of this turn's calls, by call id.
    pub fn outputs(&self) -> HashMap<&str, &str> {
        self.tail()
            .iter()
            .filter_map(|i| match i {
                Item::Output { call_id, text } => Some((call_id.as_str(), text.as_str())),
                _ => None,
            })
            .collect()
    }

    /// A call of this turn that has no output, if any.
    pub fn unanswered_call(&self, outputs: &HashMap<&str, &str>) -> Option<&str> {
        self.tail().iter().find_map(|item| match item {
            Item::Call { call_id, .. } if !outputs.contains_key(call_id.as_str()) => {
                Some(call_id.as_str())
            }
            _ => None,
        })
    }
}

/// A response to one request.
pub(super) struct Built {
    /// The SSE events, each with `type` and `sequence_number`.
    pub events: Vec<Value>,
    /// The final response object.
    pub response: Value,
}

/// SSE events in the making, numbered as they are pushed.
#[derive(Default)]
struct Events {
    events: Vec<Value>,
    seq: u64,
}

impl Events {
    fn push(&mut self, mut event: Value) {
        event["sequence_number"] = json!(self.seq);
        self.seq += 1;
        self.events.push(event);
    }
}

/// The response to `req` that plays `plan`: a message (the `say` chunks or
/// the final message), then a `function_call` per call `(call_id, key)`,
/// whose body is `body(key)`; the keys in `approvals` ask for escalation
/// where the tool takes it. Usage is a byte estimate.
pub(super) fn build_response(
    req: &Request,
    plan: &Plan,
    calls: &[(String, String)],
    approvals: &HashSet<String>,
    input_bytes: usize,
    body: impl Fn(&str) -> CallBody,
) -> Built {
    let mut response = response_object(req);
    let mut events = Events::default();
    events.push(json!({ "type": "response.created", "response": response }));
    events.push(json!({ "type": "response.in_progress", "response": response }));
    let mut output: Vec<Value> = Vec::new();
    let mut output_chars = 0usize;
    let text = match plan {
        Plan::Tools { say, .. } if !say.is_empty() => Some(say.join("\n\n")),
        Plan::Tools { .. } => None,
        Plan::Final(text) => Some(text.clone()),
    };
    if let Some(text) = text {
        output_chars += text.len();
        let item = message_item(&mut events, output.len(), &text);
        output.push(item);
    }
    for (call_id, key) in calls {
        let index = output.len();
        let item_id = format!("fc_{}", random_hex());
        let (name, arguments) = call_arguments(req, key, body(key), approvals);
        output_chars += arguments.len();
        let item = call_item(&mut events, index, &item_id, call_id, name, &arguments);
        output.push(item);
    }
    let input_tokens = (input_bytes / 4).max(1) as u64;
    let output_tokens = (output_chars / 4).max(1) as u64;
    response["status"] = json!("completed");
    response["output"] = json!(output);
    response["usage"] = json!({
        "input_tokens": input_tokens,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": output_tokens,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": input_tokens + output_tokens,
    });
    events.push(json!({ "type": "response.completed", "response": response }));
    Built {
        events: events.events,
        response,
    }
}

/// The response object in progress, before any output.
fn response_object(req: &Request) -> Value {
    let id = format!("resp_{}", random_hex());
    json!({
        "id": id,
        "object": "response",
        "created_at": now_ms() / 1000,
        "status": "in_progress",
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": req.raw.get("model").and_then(Value::as_str).unwrap_or(FAKE_MODEL),
        "output": [],
        "parallel_tool_calls": req.parallel,
        "previous_response_id": null,
        "reasoning": { "effort": null, "summary": null },
        "store": req.raw.get("store").and_then(Value::as_bool).unwrap_or(false),
        "temperature": 1.0,
        "text": { "format": { "type": "text" } },
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": null,
        "user": null,
        "metadata": req.raw.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// The events of an assistant message saying `text` at output `index`,
/// word by word; the item.
fn message_item(events: &mut Events, index: usize, text: &str) -> Value {
    let item_id = format!("msg_{}", random_hex());
    events.push(json!({
        "type": "response.output_item.added", "output_index": index,
        "item": { "id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": [] },
    }));
    events.push(json!({
        "type": "response.content_part.added", "item_id": item_id, "output_index": index,
        "content_index": 0, "part": { "type": "output_text", "text": "", "annotations": [] },
    }));
    for delta in text.split_inclusive(' ') {
        events.push(json!({
            "type": "response.output_text.delta", "item_id": item_id, "output_index": index,
            "content_index": 0, "delta": delta, "logprobs": [],
        }));
    }
    events.push(json!({
        "type": "response.output_text.done", "item_id": item_id, "output_index": index,
        "content_index": 0, "text": text, "logprobs": [],
    }));
    let part = json!({ "type": "output_text", "text": text, "annotations": [] });
    events.push(json!({
        "type": "response.content_part.done", "item_id": item_id, "output_index": index,
        "content_index": 0, "part": part,
    }));
    let item = json!({
        "id": item_id, "type": "message", "status": "completed", "role": "assistant",
        "content": [part],
    });
    events
        .push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
    item
}

/// The function and arguments of the call of `key` doing `body`, in the
/// shape the request's tools want.
pub(super) fn call_arguments<'r>(
    req: &'r Request,
    key: &str,
    body: CallBody,
    approvals: &HashSet<String>,
) -> (&'r str, String) {
    let command = match body {
        CallBody::Write { path, content } => {
            let arguments = json!({ "path": path, "content": content });
            return (WRITE_FUNCTION, arguments.to_string());
        }
        CallBody::Command(command) => command,
    };
    let mut arguments = match req.tool.param {
        CommandParam::CommandString => json!({ "command": command }),
        CommandParam::CommandArgv => json!({ "command": ["sh", "-c", command] }),
        CommandParam::Cmd => json!({ "cmd": command }),
    };
    if req.tool.escalation && approvals.contains(key) {
        arguments["sandbox_permissions"] = json!("require_escalated");
        arguments["justification"] = json!(format!("Run the effect {key}?"));
    }
    (&req.tool.name, arguments.to_string())
}

/// The events of a `function_call` item at output `index`; the item.
fn call_item(
    events: &mut Events,
    index: usize,
    item_id: &str,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> Value {
    let mut item = json!({
        "id": item_id, "type": "function_call", "status": "in_progress",
        "arguments": "", "call_id": call_id, "name": name,
    });
    events
        .push(json!({ "type": "response.output_item.added", "output_index": index, "item": item }));
    events.push(json!({
        "type": "response.function_call_arguments.delta", "item_id": item_id,
        "output_index": index, "delta": arguments,
    }));
    events.push(json!({
        "type": "response.function_call_arguments.done", "item_id": item_id,
        "output_index": index, "name": name, "arguments": arguments,
    }));
    item["status"] = json!("completed");
    item["arguments"] = json!(arguments);
    events
        .push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
    item
}

/// The text of the user message a request's turn answers: the latest one
/// that is not a continuation (a continuation answers the message it
/// continues).
fn answered_text(users: &[&str]) -> String {
    users
        .iter()
        .rev()
        .find(|u| !wire::marker::is_continuation(u))
        .copied()
        .unwrap_or_default()
        .to_owned()
}

/// The message id of a request without `turncut_message_id` (a real
/// product between the client and this fake): a hash of the conversation,
/// the user message's position and its text. A continuation runs under the
/// message it continues (the last user message that is not one), as the
/// runner's continuation does, so its effects are judged under that
/// authority; a Retry, in a fresh conversation, gets an id of its own.
fn derived_message_id(conversation: &str, users: &[&str]) -> String {
    let at = users
        .iter()
        .rposition(|u| !wire::marker::is_continuation(u))
        .unwrap_or(users.len().saturating_sub(1));
    let text = users.get(at).copied().unwrap_or_default();
    format!(
        "m_{:016x}",
        fnv1a(&format!("{conversation}\n{}\n{text}", at + 1))
    )
}

/// 64-bit FNV-1a: a hash that stays the same across builds and processes.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn random_hex() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_shapes_follow_the_offered_tools() {
        let tools = |v: Value| {
            let t = tool_shape(v.as_array());
            (t.name, t.param, t.escalation)
        };
        let shell = json!({ "type": "function", "name": "shell",
            "parameters": { "properties": { "command": { "type": "array" } } } });
        let exec = json!({ "type": "function", "name": "exec_command",
            "parameters": { "properties": { "cmd": { "type": "string" },
                "sandbox_permissions": { "type": "string", "enum": ["use_default", "require_escalated"] } } } });
        let bash = json!({ "type": "function", "name": "Bash",
            "parameters": { "properties": { "command": { "type": "string" } } } });
        use CommandParam::*;
        assert_eq!(tools(json!(null)), ("Bash".into(), CommandString, false));
        assert_eq!(
            tools(json!([exec, shell])),
            ("shell".into(), CommandArgv, false)
        );
        assert_eq!(tools(json!([exec])), ("exec_command".into(), Cmd, true));
        assert_eq!(
            tools(json!([shell, bash])),
            ("Bash".into(), CommandString, false)
        );
    }

    #[test]
    fn a_continuation_runs_under_the_message_it_continues() {
        let req = |key: &str, input: Value| {
            Request::parse(json!({ "input": input, "prompt_cache_key": key }))
                .ok()
                .unwrap()
        };
        let first = req("c1", json!([{ "role": "user", "content": "hi" }]));
        let cont = req(
            "c1",
            json!([
                { "role": "user", "content": "hi" },
                { "role": "user", "content": wire::marker::CONTINUE_TEXT },
            ]),
        );
        let elsewhere = req("c2", json!([{ "role": "user", "content": "hi" }]));
        assert_eq!(first.message_id, cont.message_id);
        assert_ne!(first.message_id, elsewhere.message_id);
    }

    #[test]
    fn message_ids_hash_text_and_count() {
        let req = |input: Value| Request::parse(json!({ "input": input })).ok().unwrap();
        let one = req(json!("hi"));
        let again = req(json!([{ "role": "user", "content": "hi" }]));
        let second =
            req(json!([{ "role": "user", "content": "hi" }, { "role": "user", "content": "hi" }]));
        assert_eq!(one.message_id, again.message_id);
        assert_ne!(one.message_id, second.message_id);
        assert_eq!(one.conversation, "default");
        let tagged = Request::parse(json!({
            "input": "hi", "prompt_cache_key": "c1",
            "metadata": { "turncut_message_id": "m-1" },
        }))
        .ok()
        .unwrap();
        assert_eq!(
            (tagged.message_id.as_str(), tagged.conversation.as_str()),
            ("m-1", "c1")
        );
        assert!(Request::parse(json!({ "input": [] })).is_err());
        assert!(Request::parse(json!({ "input": 3 })).is_err());
    }
}
