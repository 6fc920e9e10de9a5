//! The fake OpenCode server's store: sessions, messages and parts as JSON
//! files under `<state-dir>/opencode/`, laid out as
//! `sessions/<sessionID>.json`, `messages/<sessionID>/<messageID>.json` and
//! `parts/<messageID>/<partID>.json`, with the [`LIVE_FILE`] note naming the
//! process that serves the directory.
//!
//! [`LIVE_FILE`]: crate::stores::LIVE_FILE

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recorded::RecordedTurn;
pub use crate::stores::LiveProcess;
use crate::stores::{json_files, live_generation};

/// Version of the stored formats.
pub const STORE_VERSION: u32 = 1;

/// The directory under the state directory that holds the store.
pub const STORE_DIR: &str = "opencode";

/// A stored session: the wire `Session` object.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Format version.
    pub v: u32,
    /// The `Session` as served.
    pub info: Value,
}

/// What the fake keeps about a user message besides its wire form.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UserMeta {
    /// Whether the prompt text started with the continue marker.
    pub continuation: bool,
    /// The message id whose authority its effects run under.
    pub authorized_by: String,
    /// Which script turn it plays.
    pub script_index: usize,
}

/// A stored message: the wire `Message` plus the fake's own bookkeeping.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MessageRecord {
    /// Format version.
    pub v: u32,
    /// The `UserMessage` or `AssistantMessage` as served.
    pub info: Value,
    /// For user messages, the turn bookkeeping; absent for assistant messages.
    #[serde(default)]
    pub user: Option<UserMeta>,
    /// The process generation that wrote it last.
    pub generation: String,
}

impl MessageRecord {
    /// `info.id`.
    pub fn id(&self) -> &str {
        self.info["id"].as_str().unwrap_or_default()
    }

    /// Whether this is an assistant message.
    pub fn is_assistant(&self) -> bool {
        self.info["role"] == "assistant"
    }
}

/// Every user message of the store under `state_dir`, as a turn: thread is the
/// session id, turn and client id the message id. A turn is `completed` when
/// its assistant message has `time.completed` and no error, `inProgress` when
/// the process that recorded it is still the live one and it is not finished,
/// and `interrupted` otherwise (no answer, an aborted answer, or an answer left
/// unfinished by a process that is gone). An unreadable store reads as empty.
pub fn recorded_turns(state_dir: &Path) -> Vec<RecordedTurn> {
    let dir = state_dir.join(STORE_DIR);
    let live_generation = live_generation(&dir);
    let Ok(sessions) = json_files(&dir.join("sessions")) else {
        return Vec::new();
    };
    let mut turns = Vec::new();
    for path in sessions {
        let Some(session) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let Ok(files) = json_files(&dir.join("messages").join(session)) else {
            continue;
        };
        let messages: Vec<MessageRecord> = files.iter().filter_map(|f| read_json(f).ok()).collect();
        for m in &messages {
            let Some(user) = &m.user else { continue };
            let answer = messages
                .iter()
                .find(|a| a.is_assistant() && a.info["parentID"] == m.info["id"]);
            let finished = answer.is_some_and(|a| !a.info["time"]["completed"].is_null());
            let errored =
                answer.is_some_and(|a| !a.info["error"].is_null() || unstored_error(&a.info));
            let live = live_generation.as_deref().is_some_and(|g| {
                let writer = answer.map_or(&m.generation, |a| &a.generation);
                writer == g
            });
            let status = match (finished, errored) {
                (true, false) => "completed",
                (false, _) if live => "inProgress",
                _ => "interrupted",
            };
            turns.push(RecordedTurn {
                thread: session.to_owned(),
                turn: m.id().to_owned(),
                client_id: Some(m.id().to_owned()),
                status: status.to_owned(),
                continuation: user.continuation,
                authorized_by: user.authorized_by.clone(),
                model_requests: None,
            });
        }
    }
    turns
}

/// Reads one store file; one that does not parse is `InvalidData`.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<T> {
    let text = fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: bad store file: {e}", path.display()),
        )
    })
}

// How a turn reads from served messages (`GET /session/{id}/message`), the
// real server's and the fake's alike: the runner's OpenCode driver and the
// harness's reading of the real server both use these.

/// The status of the turn of the user message `message_id`, from the session's messages
/// (`GET /session/{id}/message`): that of its **last** answer. OpenCode writes one
/// assistant message per model step, all with `parentID` = the user message: a turn that
/// ran a tool has a first answer that completed with `finish: "tool-calls"` and a later one
/// with the final text, so the first one says nothing about the end of the turn (measured on
/// 1.18.33 by `turncut fidelity`). No answer at all is `interrupted`.
pub fn turn_status(messages: &[Value], message_id: &str) -> &'static str {
    match last_answer(messages, message_id) {
        Some(info) => answer_status(info, None),
        None => "interrupted",
    }
}

/// `completed` for an answer with `time.completed`, no error and a final `finish` (a step
/// that ended in `tool-calls` or `unknown` is followed by another, as OpenCode's loop
/// goes on after it); `interrupted` for an aborted or unfinished one; `failed` for any
/// other error, and for an answer closed with neither `finish` nor `error`
/// ([`unstored_error`]).
pub fn answer_status(info: &Value, session_error: Option<&Value>) -> &'static str {
    let error = match &info["error"] {
        Value::Null => session_error.cloned().unwrap_or(Value::Null),
        e => e.clone(),
    };
    let step_only = matches!(info["finish"].as_str(), Some("tool-calls" | "unknown"));
    match (&error, info["time"]["completed"].is_null()) {
        (Value::Null, false) if step_only => "interrupted",
        (Value::Null, false) if unstored_error(info) => "failed",
        (Value::Null, false) => "completed",
        (Value::Null, true) => "interrupted",
        (e, _) if e["name"] == "MessageAbortedError" => "interrupted",
        _ => "failed",
    }
}

/// Whether the answer `info` was closed (`time.completed`) with neither a `finish` nor an
/// `error`: a step that failed with an error stored on no message. OpenCode 1.18.33
/// closes so the step its model API refused with a context overflow (it names the
/// `ContextOverflowError` in a `session.error` only, then compacts the session; measured by
/// `turncut fidelity --moments upstream`); every other end of a step stores a `finish` or
/// an `error`.
pub fn unstored_error(info: &Value) -> bool {
    !info["time"]["completed"].is_null() && info["finish"].is_null() && info["error"].is_null()
}

/// The error a turn failed with, from the session's messages: its last answer's
/// `error`; or, for a last answer closed without one ([`unstored_error`]), the
/// `ContextOverflowError` OpenCode named only in its `session.error`
/// ([`UNSTORED_OVERFLOW`]): the compaction it starts next (a user message with a
/// `compaction` part, `overflow: true`) is written a few ms later, so a server killed
/// in between leaves the closed answer alone, and the closed answer is what says it.
/// `None` for a turn with no error to read.
pub fn turn_error(messages: &[Value], message_id: &str) -> Option<Value> {
    let last = last_answer(messages, message_id)?;
    if !last["error"].is_null() {
        return Some(last["error"].clone());
    }
    unstored_error(last).then(|| {
        serde_json::json!({ "name": "ContextOverflowError", "data": { "message": UNSTORED_OVERFLOW } })
    })
}

/// The message of the error [`turn_error`] reads from an overflow OpenCode stored on no
/// message (a `ContextOverflowError`, the name its `session.error` carried).
pub const UNSTORED_OVERFLOW: &str = "stored on no message: the answer was closed without \
    finish or error, as OpenCode 1.18.33 closes a context overflow";

/// The info of the last answer to user message `message_id` in a message list.
fn last_answer<'m>(messages: &'m [Value], message_id: &str) -> Option<&'m Value> {
    messages
        .iter()
        .map(|m| &m["info"])
        .rfind(|i| i["role"] == "assistant" && i["parentID"] == message_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_come_from_the_answer() {
        let done = json!({ "time": { "created": 1, "completed": 2 }, "finish": "stop" });
        assert_eq!(answer_status(&done, None), "completed");
        // Closed with neither finish nor error: an error stored nowhere.
        let closed = json!({ "time": { "created": 1, "completed": 2 } });
        assert_eq!(answer_status(&closed, None), "failed");
        let cut = json!({ "time": { "created": 1 } });
        assert_eq!(answer_status(&cut, None), "interrupted");
        let aborted = json!({ "time": { "created": 1, "completed": 2 },
            "error": { "name": "MessageAbortedError", "data": { "message": "x" } } });
        assert_eq!(answer_status(&aborted, None), "interrupted");
        let failed = json!({ "time": { "created": 1, "completed": 2 },
            "error": { "name": "UnknownError", "data": { "message": "x" } } });
        assert_eq!(answer_status(&failed, None), "failed");
        let step = json!({ "time": { "created": 1, "completed": 2 }, "finish": "tool-calls" });
        assert_eq!(answer_status(&step, None), "interrupted");
        let stop = json!({ "time": { "created": 1, "completed": 2 }, "finish": "stop" });
        assert_eq!(answer_status(&stop, None), "completed");
    }

    #[test]
    fn a_turn_is_as_finished_as_its_last_answer() {
        let user = json!({ "info": { "id": "msg_1", "role": "user" } });
        let answer = |id: &str, finish: Option<&str>, completed: Option<u64>| {
            json!({ "info": { "id": id, "role": "assistant", "parentID": "msg_1",
                "finish": finish, "time": { "created": 1, "completed": completed } } })
        };
        let step = answer("msg_2", Some("tool-calls"), Some(2));
        let open = answer("msg_3", None, None);
        let done = answer("msg_3", Some("stop"), Some(3));
        let cut = [user.clone(), step.clone(), open];
        assert_eq!(turn_status(&cut, "msg_1"), "interrupted");
        assert_eq!(
            turn_status(&[user.clone(), step.clone()], "msg_1"),
            "interrupted"
        );
        assert_eq!(
            turn_status(&[user.clone(), step, done], "msg_1"),
            "completed"
        );
        assert_eq!(turn_status(&[user], "msg_1"), "interrupted");
    }

    /// The real 1.18.33 after a context overflow (measured): the answer closed without
    /// finish or error, then a user message with an overflow `compaction` part and its
    /// summary answer, which failed on its own.
    #[test]
    fn an_overflow_stored_on_no_message_reads_from_its_closed_answer() {
        let user = json!({ "info": { "id": "msg_1", "role": "user" }, "parts": [] });
        let closed = json!({ "info": { "id": "msg_2", "role": "assistant", "parentID": "msg_1",
            "time": { "created": 1, "completed": 2 } }, "parts": [] });
        let compaction = json!({ "info": { "id": "msg_3", "role": "user" },
            "parts": [{ "type": "compaction", "auto": true, "overflow": true }] });
        let summary = json!({ "info": { "id": "msg_4", "role": "assistant", "parentID": "msg_3",
            "summary": true, "time": { "created": 3, "completed": 4 },
            "error": { "name": "UnknownError", "data": { "message": "x" } } }, "parts": [] });
        let all = [user.clone(), closed.clone(), compaction, summary];
        assert_eq!(turn_status(&all, "msg_1"), "failed");
        let error = turn_error(&all, "msg_1").expect("the overflow");
        assert_eq!(error["name"], "ContextOverflowError");
        assert_eq!(error["data"]["message"], UNSTORED_OVERFLOW);
        // Killed before the compaction, the closed answer says it alone.
        let alone = turn_error(&[user.clone(), closed], "msg_1").expect("the overflow");
        assert_eq!(alone["name"], "ContextOverflowError");
        let failed = json!({ "info": { "id": "msg_2", "role": "assistant", "parentID": "msg_1",
            "time": { "created": 1, "completed": 2 },
            "error": { "name": "APIError", "data": { "statusCode": 401 } } } });
        let error = turn_error(&[user, failed], "msg_1").expect("the stored error");
        assert_eq!(error["name"], "APIError");
    }
}
