//! The fake model API's durable store: one record per (conversation, message
//! id) in `<state-dir>/model-api/turns.json`.
//!
//! The whole file is replaced atomically (temporary file, fsync, rename, fsync
//! of the directory) on every change, so a SIGKILL at any instant leaves
//! either the old or the new version. `live.json` names the process serving
//! the directory (pid, start time, generation), so [`recorded_turns`] can tell
//! a turn a live process is still on from one whose process died: records are
//! never rewritten on open. This module knows nothing about HTTP or the
//! Responses wire format; the file format and its reader live in
//! `wire::stores::model_api`.

use std::fs;
use std::path::{Path, PathBuf};

pub use wire::stores::model_api::{
    CallRecord, STORE_DIR, STORE_VERSION, TURNS_FILE, TurnRecord, TurnStatus, TurnsFile,
    recorded_turns,
};

use crate::recorded::{Durability, write_atomic};

/// The store, loaded in memory and written through.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    generation: String,
    turns: Vec<TurnRecord>,
}

impl Store {
    /// Opens the store under `state_dir` and records this process as the live one.
    pub fn open(state_dir: &Path, generation: &str) -> std::io::Result<Store> {
        let dir = state_dir.join(STORE_DIR);
        crate::recorded::create_dir_durably(&dir)?;
        let turns = match fs::read_to_string(dir.join(TURNS_FILE)) {
            Ok(text) => {
                serde_json::from_str::<TurnsFile>(&text)
                    .map_err(|e| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{}: bad store file: {e}", dir.join(TURNS_FILE).display()),
                        )
                    })?
                    .turns
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        crate::process::write_live(&dir, STORE_VERSION, generation)?;
        Ok(Store {
            dir,
            generation: generation.to_owned(),
            turns,
        })
    }

    /// The record of a turn.
    pub fn turn(&self, conversation: &str, message_id: &str) -> Option<&TurnRecord> {
        self.turns
            .iter()
            .find(|t| t.conversation == conversation && t.message_id == message_id)
    }

    /// How many distinct message ids the conversation has recorded.
    pub fn turn_count(&self, conversation: &str) -> usize {
        self.turns
            .iter()
            .filter(|t| t.conversation == conversation)
            .count()
    }

    /// Inserts or replaces the record of `(conversation, message_id)`, stamped
    /// with this process's generation, durably.
    pub fn put(&mut self, mut record: TurnRecord) -> std::io::Result<()> {
        record.generation = self.generation.clone();
        let mut turns = self.turns.clone();
        match turns
            .iter_mut()
            .find(|t| t.conversation == record.conversation && t.message_id == record.message_id)
        {
            Some(t) => *t = record,
            None => turns.push(record),
        }
        let file = TurnsFile {
            v: STORE_VERSION,
            turns,
        };
        // The model API's record stands for a remote service's: a power cut
        // of the runner's machine does not touch it.
        write_atomic(
            &self.dir,
            TURNS_FILE,
            &serde_json::to_vec_pretty(&file).expect("serializes"),
            Durability::Synced,
        )?;
        // Memory follows the disk only once the disk has it.
        self.turns = file.turns;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(conversation: &str, id: &str, status: TurnStatus) -> TurnRecord {
        TurnRecord {
            conversation: conversation.to_owned(),
            message_id: id.to_owned(),
            script_index: 0,
            status,
            requests: 1,
            generation: String::new(),
            calls: Vec::new(),
        }
    }

    fn statuses(dir: &Path) -> Vec<(String, String)> {
        recorded_turns(dir)
            .into_iter()
            .map(|t| (t.turn, t.status))
            .collect()
    }

    #[test]
    fn turns_read_back_with_their_status_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), "g1").unwrap();
        store.put(record("c", "m1", TurnStatus::Completed)).unwrap();
        store
            .put(record("c", "m2", TurnStatus::InProgress))
            .unwrap();
        store
            .put(record("d", "m1", TurnStatus::InProgress))
            .unwrap();
        assert_eq!(store.turn_count("c"), 2);
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            statuses(dir.path()),
            [
                s("m1", "completed"),
                s("m2", "inProgress"),
                s("m1", "inProgress")
            ]
        );

        // A new process on the same state: what the old one left running was cut,
        // until the new one takes the turn up again.
        let mut store = Store::open(dir.path(), "g2").unwrap();
        assert_eq!(store.turn("c", "m2").unwrap().generation, "g1");
        assert_eq!(
            statuses(dir.path()),
            [
                s("m1", "completed"),
                s("m2", "interrupted"),
                s("m1", "interrupted")
            ]
        );
        store
            .put(record("c", "m2", TurnStatus::InProgress))
            .unwrap();
        assert_eq!(statuses(dir.path())[1], s("m2", "inProgress"));
        assert!(recorded_turns(&dir.path().join("missing")).is_empty());
    }
}
