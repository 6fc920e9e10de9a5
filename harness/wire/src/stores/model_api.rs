//! The fake model API's store: one record per (conversation, message id) in
//! `<state-dir>/model-api/turns.json`, with the [`LIVE_FILE`] note naming the
//! process that serves the directory. Records are never rewritten on open, so
//! [`recorded_turns`] tells a turn a live process is still on from one whose
//! process died by that note.
//!
//! [`LIVE_FILE`]: crate::stores::LIVE_FILE

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::recorded::RecordedTurn;
use crate::stores::live_generation;

/// Version of the stored formats.
pub const STORE_VERSION: u32 = 1;

/// The directory under the state directory that holds the store.
pub const STORE_DIR: &str = "model-api";

/// The file in [`STORE_DIR`] that holds the turns.
pub const TURNS_FILE: &str = "turns.json";

/// A turn's status as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    /// Recorded; the final answer was not streamed yet.
    InProgress,
    /// The final answer was streamed.
    Completed,
}

/// One function call the fake issued for a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The `call_id` sent to the client.
    pub call_id: String,
    /// The script effect key it runs.
    pub key: String,
}

/// One turn: a user message of a conversation and what the fake did for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// The conversation (`metadata.turncut_conversation`, `prompt_cache_key` or `default`).
    pub conversation: String,
    /// The turn's message id (`metadata.turncut_message_id` or a hash of the message).
    pub message_id: String,
    /// Which script turn it plays (0-based).
    pub script_index: usize,
    /// In progress or completed.
    pub status: TurnStatus,
    /// How many `POST /v1/responses` requests answered it.
    pub requests: u64,
    /// The generation of the process that wrote it last.
    pub generation: String,
    /// The function calls issued, oldest first.
    #[serde(default)]
    pub calls: Vec<CallRecord>,
}

/// The whole of [`TURNS_FILE`].
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TurnsFile {
    /// Format version.
    pub v: u32,
    /// Every turn, in the order first recorded.
    pub turns: Vec<TurnRecord>,
}

/// Every turn of the store under `state_dir`: thread is the conversation, turn
/// and client id the message id. `completed` once its final answer was
/// streamed; `inProgress` while the live process last wrote it; `interrupted`
/// when the process that last wrote it is gone. An unreadable store reads as empty.
pub fn recorded_turns(state_dir: &Path) -> Vec<RecordedTurn> {
    let dir = state_dir.join(STORE_DIR);
    let Ok(text) = fs::read_to_string(dir.join(TURNS_FILE)) else {
        return Vec::new();
    };
    let Ok(file) = serde_json::from_str::<TurnsFile>(&text) else {
        return Vec::new();
    };
    let live_generation = live_generation(&dir);
    file.turns
        .into_iter()
        .map(|t| {
            let status = match t.status {
                TurnStatus::Completed => "completed",
                TurnStatus::InProgress if live_generation.as_deref() == Some(&t.generation) => {
                    "inProgress"
                }
                TurnStatus::InProgress => "interrupted",
            };
            RecordedTurn {
                thread: t.conversation,
                turn: t.message_id.clone(),
                client_id: Some(t.message_id.clone()),
                status: status.to_owned(),
                continuation: false,
                authorized_by: t.message_id,
                model_requests: Some(t.requests),
            }
        })
        .collect()
}
