//! The provider's journal as the oracles read it: the turn starts it
//! received in any protocol, the runner's answers to its requests, the
//! writes it asked for, and its facts. The journal's messages are each
//! protocol's own JSON; they are read here, once per question, so the
//! oracles see typed answers and never the protocols' JSON.

use serde_json::Value;
use wire::journal::{Entry, EntryKind};

use super::{Evidence, controller_id};

/// A turn start the provider received, in any protocol.
pub struct TurnStart<'a> {
    /// 1-based journal line.
    pub line: usize,
    /// The journal entry.
    pub entry: &'a Entry,
    /// The controller message id it carries (translated), if any.
    pub client_id: Option<String>,
    /// Its text input.
    pub text: String,
    /// The conversation it was sent to (Codex's thread, ACP's session,
    /// OpenCode's session), if the entry names one.
    pub conversation: Option<String>,
}

/// ACP's "Resource not found", an agent's answer for a session it does not
/// have.
const ACP_RESOURCE_NOT_FOUND: i64 = -32002;

fn text_of(blocks: Option<&Value>) -> String {
    blocks
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

impl Evidence {
    /// Turn starts received by the provider: Codex `turn/start`, ACP
    /// `session/prompt`, OpenCode `POST …/prompt_async`.
    pub fn turn_starts(&self) -> Vec<TurnStart<'_>> {
        turn_starts_in(&self.journal)
    }

    /// Journal facts by name, with line numbers.
    pub fn facts(&self, name: &str) -> Vec<(usize, &Value)> {
        self.journal
            .iter()
            .enumerate()
            .filter(|(_, e)| e.fact.as_deref() == Some(name))
            .map(|(i, e)| (i + 1, &e.data))
            .collect()
    }

    /// Whether the provider answered a `session/load` (ACP) of `session`
    /// with ACP's `-32002` Resource not found: the agent said it has no such
    /// session. The answer is the first response with the request's id
    /// after it (ids restart with every process).
    pub fn session_not_found(&self, session: &str) -> bool {
        let journal = &self.journal;
        journal.iter().enumerate().any(|(i, load)| {
            load.kind == EntryKind::In
                && load.data["method"] == "session/load"
                && load
                    .data
                    .pointer("/params/sessionId")
                    .and_then(Value::as_str)
                    == Some(session)
                && journal[i + 1..]
                    .iter()
                    .find(|r| {
                        r.kind == EntryKind::Out
                            && r.data.get("method").is_none()
                            && r.data["id"] == load.data["id"]
                    })
                    .is_some_and(|r| {
                        r.data.pointer("/error/code").and_then(Value::as_i64)
                            == Some(ACP_RESOURCE_NOT_FOUND)
                    })
        })
    }

    /// Whether a `session/load` replay of `session` left one of `tools`
    /// (ACP tool call ids) without its end (`completed` or `failed`): the
    /// agent's record lacks the end of a command the runner saw end
    /// (Claude Code writes its transcript on a timer).
    pub fn replay_lacks_a_tool_end(&self, session: &str, tools: &[String]) -> bool {
        let journal = &self.journal;
        journal.iter().enumerate().any(|(i, load)| {
            let is_load = load.kind == EntryKind::In
                && load.data["method"] == "session/load"
                && load
                    .data
                    .pointer("/params/sessionId")
                    .and_then(Value::as_str)
                    == Some(session);
            if !is_load {
                return false;
            }
            let replay: Vec<&Value> = journal[i + 1..]
                .iter()
                .filter(|r| r.kind == EntryKind::Out)
                .take_while(|r| r.data.get("method").is_some() || r.data["id"] != load.data["id"])
                .map(|r| &r.data)
                .collect();
            tools.iter().any(|tool| {
                !replay.iter().any(|m| {
                    let u = &m["params"]["update"];
                    u["toolCallId"] == tool.as_str()
                        && matches!(u["status"].as_str(), Some("completed" | "failed"))
                })
            })
        })
    }

    /// The runner's answers to a provider's requests, with their 0-based
    /// journal index: a JSON-RPC response (an id and a result or error, no
    /// method), or an OpenCode permission reply.
    pub fn runner_answers(&self) -> impl Iterator<Item = (usize, &Entry)> + '_ {
        self.journal
            .iter()
            .enumerate()
            .filter(|(_, e)| is_runner_answer(e))
    }

    /// What the provider asked to write to `path`: the `content` of every
    /// `fs/write_text_file` request it journaled as sent, and of every
    /// `Write` call the model API streamed, naming it.
    pub fn writes_asked(&self, path: &str) -> Vec<String> {
        self.journal
            .iter()
            .filter(|j| j.kind == EntryKind::Out)
            .filter_map(|j| write_request(&j.data))
            .filter(|(p, _)| p == path)
            .map(|(_, content)| content)
            .collect()
    }
}

/// Whether a journaled message from the runner answers a provider request.
fn is_runner_answer(entry: &Entry) -> bool {
    if entry.kind != EntryKind::In {
        return false;
    }
    let d = &entry.data;
    let rpc_response = d.get("method").is_none()
        && d.get("id").is_some()
        && (d.get("result").is_some() || d.get("error").is_some());
    let permission_reply = d["method"] == "POST"
        && d["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/permission/") && p.ends_with("/reply"));
    rpc_response || permission_reply
}

/// The `(path, content)` of a journaled write request: an ACP
/// `fs/write_text_file`, or a finished `Write` function call of the model
/// API (its arguments are a JSON string).
fn write_request(data: &Value) -> Option<(String, String)> {
    let text = |v: &Value, at: &str| v.pointer(at).and_then(Value::as_str).map(str::to_owned);
    if data["method"] == "fs/write_text_file" {
        return Some((text(data, "/params/path")?, text(data, "/params/content")?));
    }
    let item = data.pointer("/event/item")?;
    let done =
        data.pointer("/event/type").and_then(Value::as_str) == Some("response.output_item.done");
    if !done || item["type"] != "function_call" || item["name"] != "Write" {
        return None;
    }
    let arguments: Value = serde_json::from_str(item["arguments"].as_str()?).ok()?;
    Some((text(&arguments, "/path")?, text(&arguments, "/content")?))
}

/// The turn starts of a provider's `journal` ([`Evidence::turn_starts`]).
pub fn turn_starts_in(journal: &[Entry]) -> Vec<TurnStart<'_>> {
    journal
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::In)
        .filter_map(|(i, e)| turn_start(i + 1, e))
        .collect()
}

/// The turn start in entry `e` (line `line`), if it is one.
fn turn_start(line: usize, e: &Entry) -> Option<TurnStart<'_>> {
    let d = &e.data;
    let (cid, text, conversation) = if d["method"] == "turn/start" {
        (
            d.pointer("/params/clientUserMessageId"),
            text_of(d.pointer("/params/input")),
            d.pointer("/params/threadId").and_then(Value::as_str),
        )
    } else if d["method"] == "session/prompt" {
        (
            d.pointer("/params/_meta/messageId")
                .or_else(|| d.pointer("/params/messageId")),
            text_of(d.pointer("/params/prompt")),
            d.pointer("/params/sessionId").and_then(Value::as_str),
        )
    } else if d["method"] == "POST" {
        let path = d["path"].as_str()?;
        let session = path.strip_suffix("/prompt_async")?;
        (
            d.pointer("/body/messageID"),
            text_of(d.pointer("/body/parts")),
            session.rsplit('/').next(),
        )
    } else {
        return None;
    };
    // A client that sends only the prompt's text (acpx) names the message
    // by a prefix of it instead (`wire::marker`).
    let (marked, body) = wire::marker::split_message_id(&text);
    let client_id = cid.and_then(Value::as_str).or(marked).map(controller_id);
    Some(TurnStart {
        line,
        entry: e,
        client_id,
        text: body.to_owned(),
        conversation: conversation.map(str::to_owned),
    })
}
