//! The fake ACP agent's durable session store.
//!
//! One JSON file per session under `<state-dir>/sessions/`, replaced atomically
//! (write a temporary file, fsync it, rename, fsync the directory) on every
//! change, so a SIGKILL at any instant leaves either the old or the new version.
//! A turn is durable ("recorded") once `save` returns. Each turn keeps every
//! `session/update` the agent sent for it, in order, starting with the echo of
//! the user's message, because that is exactly what `session/load` replays. On
//! open, a turn that was still in progress becomes `interrupted`: its process
//! died. Whole-session rewrites are fine for a fake; the runner's store is the
//! one that must not grow its cost with history.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recorded::RecordedTurn;
pub use crate::turns::TurnStatus;

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

impl crate::turns::PlayedTurn for TurnRecord {
    fn continuation(&self) -> bool {
        self.continuation
    }
    fn authorized_by(&self) -> &str {
        &self.authorized_by
    }
}

/// The durable store.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    sessions: BTreeMap<String, SessionRecord>,
}

impl Store {
    /// Opens the store under `state_dir`, loading every session and marking
    /// turns that were in progress as interrupted.
    pub fn open(state_dir: &Path) -> std::io::Result<Store> {
        let dir = state_dir.join(SESSIONS_DIR);
        fs::create_dir_all(&dir)?;
        let mut store = Store {
            dir,
            sessions: BTreeMap::new(),
        };
        let mut interrupted = Vec::new();
        for mut session in read_sessions(&store.dir)? {
            let mut changed = false;
            for turn in &mut session.turns {
                if turn.status == TurnStatus::InProgress {
                    turn.status = TurnStatus::Interrupted;
                    changed = true;
                }
            }
            if changed {
                interrupted.push(session.id.clone());
            }
            store.sessions.insert(session.id.clone(), session);
        }
        for id in interrupted {
            store.save(&id)?;
        }
        Ok(store)
    }

    /// A session by id.
    pub fn get(&self, id: &str) -> Option<&SessionRecord> {
        self.sessions.get(id)
    }

    /// A session by id, for changing it; call [`Store::save`] afterwards.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut SessionRecord> {
        self.sessions.get_mut(id)
    }

    /// Inserts a new session and saves it.
    pub fn insert(&mut self, session: SessionRecord) -> std::io::Result<()> {
        let id = session.id.clone();
        self.sessions.insert(id.clone(), session);
        self.save(&id)
    }

    /// Makes the current state of session `id` durable.
    pub fn save(&self, id: &str) -> std::io::Result<()> {
        let Some(session) = self.sessions.get(id) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no session {id} in memory"),
            ));
        };
        let bytes = serde_json::to_vec(session).expect("sessions serialize");
        crate::recorded::write_atomic(&self.dir, &format!("{id}.json"), &bytes)
    }
}

/// Every turn the fake ACP agent durably recorded under `state_dir`, session by
/// session (in id order) and turn by turn, as the files say right now. A turn
/// still `inProgress` here belongs to a live process, or to a dead one that no
/// new process has opened the store since. An unreadable file is skipped: this
/// is evidence for an oracle, which reports what it cannot see as unknown.
pub fn recorded_turns(state_dir: &Path) -> Vec<RecordedTurn> {
    let Ok(paths) = session_paths(&state_dir.join(SESSIONS_DIR)) else {
        return Vec::new();
    };
    let mut turns = Vec::new();
    for session in paths.iter().filter_map(|p| read_session(p).ok()) {
        for turn in session.turns {
            let status = serde_json::to_value(turn.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            turns.push(RecordedTurn {
                thread: session.id.clone(),
                turn: turn.id,
                client_id: turn.client_id,
                status,
                continuation: turn.continuation,
                authorized_by: turn.authorized_by,
            });
        }
    }
    turns
}

/// Reads every session file of `dir`; a bad file is an error.
fn read_sessions(dir: &Path) -> std::io::Result<Vec<SessionRecord>> {
    session_paths(dir)?
        .iter()
        .map(|p| read_session(p))
        .collect()
}

/// The `*.json` session files of `dir`, sorted by name (the session id).
fn session_paths(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
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
