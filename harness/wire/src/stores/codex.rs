//! The fake Codex app-server's thread store: one JSON file per thread under
//! `<state-dir>/threads/`, holding the thread and its turns in order.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recorded::RecordedTurn;
pub use crate::stores::TurnStatus;

/// Version of the stored thread format.
pub const STORE_VERSION: u32 = 1;

/// The directory under the state directory that holds the thread files.
pub const THREADS_DIR: &str = "threads";

/// A stored thread.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadRecord {
    /// Format version.
    pub v: u32,
    /// Thread id (UUIDv7).
    pub id: String,
    /// Session id shared by the thread tree.
    pub session_id: String,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// Last update, seconds since the epoch.
    pub updated_at: i64,
    /// Working directory captured at start.
    pub cwd: String,
    /// The model name reported back.
    pub model: String,
    /// First user message, if any.
    pub preview: String,
    /// The approval policy the thread was given (`untrusted`, `on-request`,
    /// …), durable only once a turn's context was written with it, as in
    /// the real rollout (`turn_context`); none reads as the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<String>,
    /// Turns in order.
    pub turns: Vec<TurnRecord>,
}

/// A stored turn.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Turn id (UUIDv7).
    pub id: String,
    /// The client's `clientUserMessageId`, if given.
    pub client_id: Option<String>,
    /// The user input items as received.
    pub input: Vec<Value>,
    /// Whether this turn is a continuation (see `CONTINUE_MARKER`).
    pub continuation: bool,
    /// The message id that authorizes this turn's effects.
    pub authorized_by: String,
    /// Which script turn it plays.
    pub script_index: usize,
    /// Current status.
    pub status: TurnStatus,
    /// Error message for failed or interrupted turns.
    pub error: Option<String>,
    /// The `codexErrorInfo` of a turn that failed upstream (its model API
    /// failed), as the real Codex names the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_info: Option<serde_json::Value>,
    /// Completed thread items, in wire form.
    pub items: Vec<Value>,
    /// Keys of the tool calls the model issued in this turn (the real
    /// rollout records a `function_call` before running it).
    #[serde(default)]
    pub issued: Vec<String>,
    /// Keys of the issued calls whose outcome the model saw (completed,
    /// failed or declined). An issued call without one was `aborted`.
    #[serde(default)]
    pub finished: Vec<String>,
    /// Start time, seconds.
    pub started_at: i64,
    /// Completion time, seconds.
    pub completed_at: Option<i64>,
}

/// Every turn in the thread store of the fake whose state dir is `state_dir`
/// (none if it has no `threads/`). Unreadable files are skipped: this is
/// evidence, read after the fact.
pub fn recorded_turns(state_dir: &Path) -> Vec<RecordedTurn> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(state_dir.join(THREADS_DIR)) else {
        return out;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .collect();
    files.sort();
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let Ok(thread) = serde_json::from_str::<ThreadRecord>(&text) else {
            continue;
        };
        for t in thread.turns {
            // Only a recorded user message delivered the client's message: a
            // turn without one reached no model, whatever its clientId was.
            let client_id = t
                .items
                .iter()
                .find(|i| i["type"] == "userMessage")
                .and_then(|i| i["clientId"].as_str())
                .map(str::to_owned);
            out.push(RecordedTurn {
                thread: thread.id.clone(),
                turn: t.id,
                client_id,
                status: t.status.wire_name(),
                continuation: t.continuation,
                authorized_by: t.authorized_by,
                model_requests: None,
            });
        }
    }
    out
}
