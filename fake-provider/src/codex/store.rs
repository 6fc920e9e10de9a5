//! The fake Codex app-server's durable thread store.
//!
//! One JSON file per thread under `<state-dir>/threads/`, replaced atomically
//! (write a temporary file, fsync it, rename, fsync the directory) on every
//! change, so a SIGKILL at any instant leaves either the old or the new version.
//! As in the real app-server, a new thread lives in memory only until its
//! first turn is saved (the real one writes its rollout then), so a thread
//! started by a process that died before any turn is gone. A turn is durable
//! once `save` returns; its user message is saved after that, separately. On
//! load, a turn that was still in progress becomes `interrupted` with no
//! error, as the real app-server reports a turn whose process died.
//! Whole-thread rewrites are fine for a fake; the runner's store is the one
//! that must not grow its cost with history.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::turns::TurnStatus;

/// Version of the stored thread format.
pub const STORE_VERSION: u32 = 1;

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
    threads: BTreeMap<String, ThreadRecord>,
}

impl Store {
    /// Opens the store under `state_dir`, loading every thread and marking turns
    /// that were in progress as interrupted.
    pub fn open(state_dir: &Path) -> std::io::Result<Store> {
        let dir = state_dir.join("threads");
        fs::create_dir_all(&dir)?;
        let mut store = Store {
            dir,
            threads: BTreeMap::new(),
        };
        let mut interrupted = Vec::new();
        for entry in fs::read_dir(&store.dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let text = fs::read_to_string(&path)?;
            let mut thread: ThreadRecord = serde_json::from_str(&text).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: bad thread file: {e}", path.display()),
                )
            })?;
            let mut changed = false;
            for turn in &mut thread.turns {
                if turn.status == TurnStatus::InProgress {
                    turn.status = TurnStatus::Interrupted;
                    turn.error = None;
                    changed = true;
                }
            }
            if changed {
                interrupted.push(thread.id.clone());
            }
            store.threads.insert(thread.id.clone(), thread);
        }
        for id in interrupted {
            store.save(&id)?;
        }
        Ok(store)
    }

    /// A thread by id.
    pub fn get(&self, id: &str) -> Option<&ThreadRecord> {
        self.threads.get(id)
    }

    /// A thread by id, for changing it; call [`Store::save`] afterwards.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut ThreadRecord> {
        self.threads.get_mut(id)
    }

    /// Inserts a new thread in memory; its first [`Store::save`] (with its
    /// first turn) makes it durable.
    pub fn insert(&mut self, thread: ThreadRecord) {
        self.threads.insert(thread.id.clone(), thread);
    }

    /// Makes the current state of thread `id` durable.
    pub fn save(&self, id: &str) -> std::io::Result<()> {
        let thread = &self.threads[id];
        let bytes = serde_json::to_vec(thread).expect("threads serialize");
        crate::recorded::write_atomic(&self.dir, &format!("{id}.json"), &bytes)
    }
}

/// Every turn in the thread store of the fake whose state dir is `state_dir`
/// (none if it has no `threads/`). Unreadable files are skipped: this is
/// evidence, read after the fact.
pub fn recorded_turns(state_dir: &Path) -> Vec<crate::recorded::RecordedTurn> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(state_dir.join("threads")) else {
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
            let status = serde_json::to_value(t.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            out.push(crate::recorded::RecordedTurn {
                thread: thread.id.clone(),
                turn: t.id,
                client_id,
                status,
                continuation: t.continuation,
                authorized_by: t.authorized_by,
            });
        }
    }
    out
}
