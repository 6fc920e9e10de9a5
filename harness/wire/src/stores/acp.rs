//! The fake ACP agent's session store: one JSON file per session under
//! `<state-dir>/sessions/`, holding the session and its prompt turns, each
//! with every `session/update` sent for it.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recorded::RecordedTurn;
pub use crate::stores::TurnStatus;
use crate::stores::json_files;

/// Version of the stored session format.
pub const STORE_VERSION: u32 = 1;

/// The directory under the state directory that holds the session files.
pub const SESSIONS_DIR: &str = "sessions";

/// A stored session.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Format version.
    pub v: u32,
    /// Session id (UUIDv7).
    pub id: String,
    /// Working directory given to `session/new`.
    pub cwd: String,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
    /// Last update, seconds since the epoch.
    pub updated_at: i64,
    /// Turns in order.
    pub turns: Vec<TurnRecord>,
}

/// A stored prompt turn. ACP has no turn ids: a turn is named by the client's
/// message id (`_meta.messageId` of `session/prompt`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The client's message id, or a generated one when the client sent none.
    pub id: String,
    /// The client's message id as sent, if any.
    pub client_id: Option<String>,
    /// The prompt content blocks as received.
    pub prompt: Vec<Value>,
    /// Whether this turn is a continuation (see `CONTINUE_MARKER`).
    pub continuation: bool,
    /// The message id that authorizes this turn's effects.
    pub authorized_by: String,
    /// Which script turn it plays.
    pub script_index: usize,
    /// Current status.
    pub status: TurnStatus,
    /// The `stopReason` the prompt was answered with, once it was.
    pub stop_reason: Option<String>,
    /// Every `session/update` payload (`update`) sent for this turn, in order.
    pub updates: Vec<Value>,
    /// Start time, seconds.
    pub started_at: i64,
    /// Completion time, seconds.
    pub completed_at: Option<i64>,
}

/// Every turn the fake ACP agent durably recorded under `state_dir`, session by
/// session (in id order) and turn by turn, as the files say right now. A turn
/// still `inProgress` here belongs to a live process, or to a dead one that no
/// new process has opened the store since. An unreadable file is skipped: this
/// is evidence for an oracle, which reports what it cannot see as unknown.
pub fn recorded_turns(state_dir: &Path) -> Vec<RecordedTurn> {
    let Ok(paths) = json_files(&state_dir.join(SESSIONS_DIR)) else {
        return Vec::new();
    };
    let mut turns = Vec::new();
    for session in paths.iter().filter_map(|p| read_session(p).ok()) {
        for turn in session.turns {
            turns.push(RecordedTurn {
                thread: session.id.clone(),
                turn: turn.id,
                client_id: turn.client_id,
                status: turn.status.wire_name(),
                continuation: turn.continuation,
                authorized_by: turn.authorized_by,
                model_requests: None,
            });
        }
    }
    turns
}

/// Reads every session file of `dir` (in id order); a bad file is an error.
pub fn read_sessions(dir: &Path) -> std::io::Result<Vec<SessionRecord>> {
    json_files(dir)?.iter().map(|p| read_session(p)).collect()
}

fn read_session(path: &Path) -> std::io::Result<SessionRecord> {
    let text = fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: bad session file: {e}", path.display()),
        )
    })
}
