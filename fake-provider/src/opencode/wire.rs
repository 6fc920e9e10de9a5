//! The wire forms of the fake OpenCode server: its ids, request bodies as
//! they parse, error bodies, and the `Session`, message and part objects it
//! serves and stores, in the shapes of the vendored OpenAPI document. Pure
//! functions, apart from the clock and the id counter.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use serde_json::{Value, json};

use crate::journal::now_ms;

/// The OpenCode version this fake reports.
pub const FAKE_OPENCODE_VERSION: &str = "1.18.33";

/// Time-ordered ids: `<prefix>_<16 hex of (unix ms << 12 | counter)><10 random>`,
/// strictly increasing within the process.
#[derive(Default)]
pub(super) struct Ids {
    last: AtomicU64,
}

impl Ids {
    pub fn next(&self, prefix: &str) -> String {
        self.after(prefix, None)
    }

    /// A new id that also sorts after `floor`.
    pub fn after(&self, prefix: &str, floor: Option<&str>) -> String {
        let floor_value = floor
            .and_then(|f| f.get(prefix.len() + 1..prefix.len() + 17))
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        let now = now_ms() << 12;
        let mut value = 0;
        let _ = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                value = now.max(last + 1).max(floor_value + 1);
                Some(value)
            });
        let random = uuid::Uuid::now_v7().simple().to_string();
        let id = format!("{prefix}_{value:016x}{}", &random[random.len() - 10..]);
        match floor {
            // A client id in another format: extend it so the new id still sorts after it.
            Some(f) if id.as_str() <= f => format!("{f}{}", &random[random.len() - 10..]),
            _ => id,
        }
    }
}

/// The script's notion of "which message": the embedded id of a runner-encoded
/// `msg_<16 hex>_<id>`, otherwise the whole id.
pub(super) fn logical_message_id(id: &str) -> &str {
    ::wire::client_id::opencode_tail(id).unwrap_or(id)
}

pub(super) fn not_found(message: String) -> Value {
    json!({ "name": "NotFoundError", "data": { "message": message } })
}

pub(super) fn invalid(message: String, field: Option<&str>) -> Value {
    let mut v = json!({ "_tag": "InvalidRequestError", "message": message, "kind": "Body" });
    if let Some(f) = field {
        v["field"] = json!(f);
    }
    v
}

pub(super) fn aborted_error() -> Value {
    json!({ "name": "MessageAbortedError", "data": { "message": "The operation was aborted." } })
}

/// Parses a JSON object body; an empty body reads as `{}` when `empty_ok`.
pub(super) fn object_body(
    body: &Bytes,
    empty_ok: bool,
) -> Result<serde_json::Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) && empty_ok {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("the request body must be a JSON object".to_owned()),
        Err(e) => Err(format!("the request body is not valid JSON: {e}")),
    }
}

/// A valid `prompt_async` body: the client's message id, if any, and the
/// text of each part.
pub(super) struct Prompt {
    pub message_id: Option<String>,
    pub texts: Vec<String>,
}

/// Parses a `prompt_async` body; the error is the 400 body.
pub(super) fn prompt(body: &Bytes) -> Result<Prompt, Value> {
    let req = object_body(body, false).map_err(|e| invalid(e, None))?;
    let message_id = match req.get("messageID") {
        Some(Value::String(m)) if m.starts_with("msg") => Some(m.clone()),
        None => None,
        Some(_) => {
            return Err(invalid(
                "`messageID` must be a string starting with \"msg\"".into(),
                Some("messageID"),
            ));
        }
    };
    let Some(Value::Array(parts)) = req.get("parts") else {
        return Err(invalid("`parts` must be an array".into(), Some("parts")));
    };
    let mut texts = Vec::new();
    for p in parts {
        match (p.get("type").and_then(Value::as_str), p.get("text")) {
            (Some("text"), Some(Value::String(t))) => texts.push(t.clone()),
            _ => {
                return Err(invalid(
                    "this fake accepts only text parts `{type: \"text\", text}`".into(),
                    Some("parts"),
                ));
            }
        }
    }
    Ok(Prompt { message_id, texts })
}

/// The `reply` of a `permission/{id}/reply` body; the error is the 400 body.
pub(super) fn permission_reply(body: &Bytes) -> Result<String, Value> {
    let o = object_body(body, false).map_err(|e| invalid(e, None))?;
    match o.get("reply").and_then(Value::as_str) {
        Some(r @ ("once" | "always" | "reject")) => Ok(r.to_owned()),
        _ => Err(invalid(
            "`reply` must be one of \"once\", \"always\", \"reject\"".to_owned(),
            Some("reply"),
        )),
    }
}

/// The process's working directory, as sessions and answers report it.
pub(super) fn cwd() -> String {
    std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| "/".to_owned())
}

/// A new `Session` with id `id` (a `POST /session` body's `title`, if any).
pub(super) fn session_info(id: &str, req: &serde_json::Map<String, Value>) -> Value {
    let now = now_ms();
    let title = match req.get("title") {
        Some(Value::String(t)) => t.clone(),
        _ => format!("New session - {now}"),
    };
    json!({
        "id": id,
        "slug": format!("fake-{}", &id[id.len() - 6..]),
        "projectID": "global",
        "directory": cwd(),
        "title": title,
        "version": FAKE_OPENCODE_VERSION,
        "time": { "created": now, "updated": now },
    })
}

/// A user message's `UserMessage`, created at `created` (ms).
pub(super) fn user_info(session: &str, message_id: &str, created: u64) -> Value {
    json!({
        "id": message_id,
        "sessionID": session,
        "role": "user",
        "time": { "created": created },
        "agent": "build",
        "model": { "providerID": "turncut", "modelID": "fake-model" },
    })
}

/// A new `AssistantMessage` answering `parent`.
pub(super) fn assistant_info(id: &str, session: &str, parent: &str) -> Value {
    let cwd = cwd();
    json!({
        "id": id,
        "sessionID": session,
        "role": "assistant",
        "time": { "created": now_ms() },
        "parentID": parent,
        "modelID": "fake-model",
        "providerID": "turncut",
        "mode": "build",
        "agent": "build",
        "path": { "cwd": cwd, "root": cwd },
        "cost": 0,
        "tokens": { "input": 0, "output": 0, "reasoning": 0, "cache": { "read": 0, "write": 0 } },
    })
}

/// A text part of message `message_id`; `time` when the model wrote it.
pub(super) fn text_part(
    id: &str,
    session: &str,
    message_id: &str,
    text: &str,
    time: bool,
) -> Value {
    let mut part = json!({
        "id": id,
        "sessionID": session,
        "messageID": message_id,
        "type": "text",
        "text": text,
    });
    if time {
        let now = now_ms();
        part["time"] = json!({ "start": now, "end": now });
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_time_ordered_and_sort_after_a_floor() {
        let ids = Ids::default();
        let a = ids.next("msg");
        let b = ids.next("msg");
        assert!(a < b, "{a} < {b}");
        assert!(a.starts_with("msg_") && a.len() == 4 + 16 + 10, "{a}");
        let floor = "msg_ffffffffffffff00_m-1";
        let c = ids.after("msg", Some(floor));
        assert!(c.as_str() > floor, "{c} > {floor}");
        let odd = "msg_zzzz";
        let d = ids.after("msg", Some(odd));
        assert!(d.as_str() > odd, "{d} > {odd}");
    }

    #[test]
    fn logical_ids_decode_the_runner_encoding() {
        assert_eq!(logical_message_id("msg_0019f2a3b4c5d6e7_m-1"), "m-1");
        assert_eq!(
            logical_message_id("msg_0019f2a3b4c5d6e7_m-1__continuation"),
            "m-1__continuation"
        );
        assert_eq!(logical_message_id("msg_abc"), "msg_abc");
        assert_eq!(
            logical_message_id("msg_0019f2a3b4c5d6eZ_x"),
            "msg_0019f2a3b4c5d6eZ_x"
        );
    }
}
