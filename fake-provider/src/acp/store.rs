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
//! one that must not grow its cost with history. The file format and its
//! reader live in `wire::stores::acp`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wire::stores::acp::read_sessions;
pub use wire::stores::acp::{
    SESSIONS_DIR, STORE_VERSION, SessionRecord, TurnRecord, TurnStatus, recorded_turns,
};

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
        crate::recorded::create_dir_durably(&dir)?;
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
        // No real ACP agent is measured: the fake keeps its sessions durable.
        let synced = crate::recorded::Durability::Synced;
        crate::recorded::write_atomic(&self.dir, &format!("{id}.json"), &bytes, synced)
    }
}
