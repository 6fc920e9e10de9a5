//! The fake OpenCode server's durable store: sessions, messages and parts as
//! JSON files under `<state-dir>/opencode/`.
//!
//! Layout: `sessions/<sessionID>.json`, `messages/<sessionID>/<messageID>.json`
//! and `parts/<messageID>/<partID>.json`, each replaced atomically (temporary
//! file renamed over it) and only when it changed, so a SIGKILL at any instant
//! leaves either the old or the new version of one object. Nothing is synced,
//! as the real server syncs nothing of a session ([`UNSYNCED`]): a power cut
//! loses what a crash of the process keeps. Unlike the Codex store, nothing is rewritten on open: an assistant
//! message whose process died stays without `time.completed`, exactly as the
//! real server leaves it. `live.json` names the process currently serving the
//! directory, so [`recorded_turns`] can tell a turn that is running from one
//! that was cut. This module knows the wire shapes it stores, not the HTTP
//! routes or the script; the file formats and their reader live in
//! `wire::stores::opencode`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use wire::stores::json_files;
use wire::stores::opencode::read_json;
pub use wire::stores::opencode::{
    LiveProcess, MessageRecord, STORE_DIR, STORE_VERSION, SessionRecord, UserMeta, recorded_turns,
};

use crate::recorded::{Durability, write_atomic};

/// How durable every write of the store is: the real `opencode serve`
/// 1.18.33 keeps sessions, messages and parts in SQLite in WAL mode and syncs
/// nothing after its start (no WAL sync during a turn nor at SIGTERM:
/// `docs/real-providers.md`), so a power cut loses every session it wrote.
const UNSYNCED: Durability = Durability::Unsynced;

impl crate::turns::PlayedTurn for UserMeta {
    fn continuation(&self) -> bool {
        self.continuation
    }
    fn authorized_by(&self) -> &str {
        &self.authorized_by
    }
}

/// The store, loaded in memory and written through.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    generation: String,
    sessions: BTreeMap<String, SessionRecord>,
    /// Messages per session, by id (ids sort in time order).
    messages: BTreeMap<String, BTreeMap<String, MessageRecord>>,
    /// Parts per message, by id, in creation order.
    parts: BTreeMap<String, BTreeMap<String, Value>>,
}

impl Store {
    /// Opens the store under `state_dir` and records this process as the live one.
    pub fn open(state_dir: &Path, generation: &str) -> std::io::Result<Store> {
        let dir = state_dir.join(STORE_DIR);
        for sub in ["sessions", "messages", "parts"] {
            crate::recorded::create_dir_durably(&dir.join(sub))?;
        }
        // The real server checkpoints its database at its start (its WAL
        // and database synced): what earlier processes wrote is durable now.
        crate::recorded::checkpoint(&dir)?;
        let mut store = Store {
            dir: dir.clone(),
            generation: generation.to_owned(),
            sessions: BTreeMap::new(),
            messages: BTreeMap::new(),
            parts: BTreeMap::new(),
        };
        for path in json_files(&dir.join("sessions"))? {
            let s: SessionRecord = read_json(&path)?;
            let id = s.info["id"].as_str().unwrap_or_default().to_owned();
            store.messages.entry(id.clone()).or_default();
            store.sessions.insert(id, s);
        }
        for session in store.sessions.keys().cloned().collect::<Vec<_>>() {
            for path in json_files(&dir.join("messages").join(&session))? {
                let m: MessageRecord = read_json(&path)?;
                let id = m.id().to_owned();
                let mut parts = BTreeMap::new();
                for p in json_files(&dir.join("parts").join(&id))? {
                    let part: Value = read_json(&p)?;
                    let pid = part["id"].as_str().unwrap_or_default().to_owned();
                    parts.insert(pid, part);
                }
                store.parts.insert(id.clone(), parts);
                store
                    .messages
                    .entry(session.clone())
                    .or_default()
                    .insert(id, m);
            }
        }
        crate::process::write_live(&dir, STORE_VERSION, generation)?;
        Ok(store)
    }

    /// This process's generation.
    pub fn generation(&self) -> &str {
        &self.generation
    }

    /// A session's wire form.
    pub fn session(&self, id: &str) -> Option<&Value> {
        self.sessions.get(id).map(|s| &s.info)
    }

    /// Inserts or replaces a session, written through (not synced: [`UNSYNCED`]).
    pub fn put_session(&mut self, info: Value) -> std::io::Result<()> {
        let id = info["id"].as_str().unwrap_or_default().to_owned();
        let record = SessionRecord {
            v: STORE_VERSION,
            info,
        };
        write_atomic(
            &self.dir.join("sessions"),
            &format!("{id}.json"),
            &serde_json::to_vec(&record).expect("serializes"),
            UNSYNCED,
        )?;
        self.messages.entry(id.clone()).or_default();
        self.sessions.insert(id, record);
        Ok(())
    }

    /// The messages of a session in id order.
    pub fn messages(&self, session: &str) -> impl Iterator<Item = &MessageRecord> {
        self.messages
            .get(session)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// One message.
    pub fn message(&self, session: &str, id: &str) -> Option<&MessageRecord> {
        self.messages.get(session)?.get(id)
    }

    /// The largest message id of a session.
    pub fn last_message_id(&self, session: &str) -> Option<&str> {
        self.messages
            .get(session)?
            .keys()
            .next_back()
            .map(String::as_str)
    }

    /// Inserts or replaces a message, written through (not synced: [`UNSYNCED`]).
    pub fn put_message(
        &mut self,
        session: &str,
        info: Value,
        user: Option<UserMeta>,
    ) -> std::io::Result<()> {
        let record = MessageRecord {
            v: STORE_VERSION,
            info,
            user,
            generation: self.generation.clone(),
        };
        let id = record.id().to_owned();
        let dir = self.dir.join("messages").join(session);
        fs::create_dir_all(&dir)?;
        write_atomic(
            &dir,
            &format!("{id}.json"),
            &serde_json::to_vec(&record).expect("serializes"),
            UNSYNCED,
        )?;
        self.parts.entry(id.clone()).or_default();
        self.messages
            .entry(session.to_owned())
            .or_default()
            .insert(id, record);
        Ok(())
    }

    /// The parts of a message in id order.
    pub fn parts(&self, message: &str) -> Vec<Value> {
        self.parts
            .get(message)
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Inserts or replaces a part, written through (not synced: [`UNSYNCED`]).
    pub fn put_part(&mut self, part: Value) -> std::io::Result<()> {
        let id = part["id"].as_str().unwrap_or_default().to_owned();
        let message = part["messageID"].as_str().unwrap_or_default().to_owned();
        let dir = self.dir.join("parts").join(&message);
        fs::create_dir_all(&dir)?;
        write_atomic(
            &dir,
            &format!("{id}.json"),
            &serde_json::to_vec(&part).expect("serializes"),
            UNSYNCED,
        )?;
        self.parts.entry(message).or_default().insert(id, part);
        Ok(())
    }

    /// The assistant message answering user message `parent`, if any.
    pub fn answer_to(&self, session: &str, parent: &str) -> Option<&MessageRecord> {
        self.messages(session)
            .find(|m| m.is_assistant() && m.info["parentID"] == parent)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(id: &str) -> Value {
        json!({ "id": id, "sessionID": "ses_1", "role": "user", "time": { "created": 1 } })
    }

    fn answer(parent: &str, completed: bool, error: bool) -> Value {
        let mut info = json!({
            "id": format!("{parent}a"), "sessionID": "ses_1", "role": "assistant",
            "parentID": parent, "time": { "created": 2 },
        });
        if completed && !error {
            info["finish"] = json!("stop");
        }
        if completed {
            info["time"]["completed"] = json!(3);
        }
        if error {
            info["error"] = json!({ "name": "MessageAbortedError", "data": { "message": "x" } });
        }
        info
    }

    fn meta(by: &str) -> Option<UserMeta> {
        Some(UserMeta {
            continuation: false,
            authorized_by: by.to_owned(),
            script_index: 0,
        })
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
        store.put_session(json!({ "id": "ses_1" })).unwrap();
        for m in ["msg_1", "msg_2", "msg_3", "msg_4"] {
            store.put_message("ses_1", user(m), meta(m)).unwrap();
        }
        store
            .put_message("ses_1", answer("msg_1", true, false), None)
            .unwrap();
        store
            .put_message("ses_1", answer("msg_2", true, true), None)
            .unwrap();
        store
            .put_message("ses_1", answer("msg_3", false, false), None)
            .unwrap();
        let s = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            statuses(dir.path()),
            [
                s("msg_1", "completed"),
                s("msg_2", "interrupted"),
                s("msg_3", "inProgress"),
                s("msg_4", "inProgress"),
            ]
        );

        // A new process on the same state: what the old one left running was cut.
        let store = Store::open(dir.path(), "g2").unwrap();
        assert_eq!(store.messages("ses_1").count(), 7);
        assert_eq!(store.last_message_id("ses_1"), Some("msg_4"));
        assert_eq!(
            statuses(dir.path()),
            [
                s("msg_1", "completed"),
                s("msg_2", "interrupted"),
                s("msg_3", "interrupted"),
                s("msg_4", "interrupted"),
            ]
        );
        assert!(recorded_turns(&dir.path().join("missing")).is_empty());
    }
}
