//! The fake Codex app-server's durable thread store.
//!
//! One JSON file per thread under `<state-dir>/threads/`, replaced atomically
//! (a temporary file renamed over it) on every change, so a SIGKILL at any
//! instant leaves either the old or the new version. Nothing is synced until
//! the process exits on a closed stdin ([`Store::checkpoint`]), as the real
//! app-server syncs its thread database only when it closes it: a power cut
//! before that loses what a SIGKILL keeps.
//! As in the real app-server, a new thread lives in memory only until its
//! first turn starts (the real one writes its rollout then), so a thread
//! started by a process that died before any turn is gone. Its first turn
//! writes it in three steps, as the real rollout is: the file created empty
//! ([`Store::create_empty`]; read back, the thread cannot be resumed: "rollout
//! at … is empty"), the thread without a turn, then the turn. A turn survives
//! a crash of the process once `save` returns; its user message is saved
//! after that, separately. On
//! load, a turn that was still in progress becomes `interrupted` with no
//! error, as the real app-server reports a turn whose process died.
//! Whole-thread rewrites are fine for a fake; the runner's store is the one
//! that must not grow its cost with history. The file format and its reader
//! live in `wire::stores::codex`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

pub use wire::stores::codex::{
    STORE_VERSION, THREADS_DIR, ThreadRecord, TurnRecord, TurnStatus, recorded_turns,
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
    threads: BTreeMap<String, ThreadRecord>,
    /// Threads whose file exists (possibly empty): written at least once.
    written: std::collections::BTreeSet<String>,
    /// Threads whose file is empty: created, never written.
    empty: std::collections::BTreeSet<String>,
}

impl Store {
    /// Opens the store under `state_dir`, loading every thread and marking turns
    /// that were in progress as interrupted.
    pub fn open(state_dir: &Path) -> std::io::Result<Store> {
        let dir = state_dir.join(THREADS_DIR);
        crate::recorded::create_dir_durably(&dir)?;
        let mut store = Store {
            dir,
            threads: BTreeMap::new(),
            written: Default::default(),
            empty: Default::default(),
        };
        let mut interrupted = Vec::new();
        for entry in fs::read_dir(&store.dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let text = fs::read_to_string(&path)?;
            if text.is_empty() {
                let id = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default();
                store.empty.insert(id.to_owned());
                continue;
            }
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
                    turn.error_info = None;
                    changed = true;
                }
            }
            if changed {
                interrupted.push(thread.id.clone());
            }
            store.written.insert(thread.id.clone());
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

    /// Writes the current state of thread `id`: it survives a crash of the
    /// process, not a power cut until [`Store::checkpoint`] (the real codex
    /// 0.171 commits its threads to SQLite in WAL mode and syncs the WAL only
    /// when it closes the database: `docs/real-providers.md`).
    pub fn save(&mut self, id: &str) -> std::io::Result<()> {
        let thread = &self.threads[id];
        let bytes = serde_json::to_vec(thread).expect("threads serialize");
        let unsynced = crate::recorded::Durability::Unsynced;
        crate::recorded::write_atomic(&self.dir, &format!("{id}.json"), &bytes, unsynced)?;
        self.written.insert(id.to_owned());
        Ok(())
    }

    /// Creates thread `id`'s file empty, as the real server creates a
    /// rollout file before it writes into it (unsynced, like [`Store::save`]).
    pub fn create_empty(&mut self, id: &str) -> std::io::Result<()> {
        let unsynced = crate::recorded::Durability::Unsynced;
        crate::recorded::write_atomic(&self.dir, &format!("{id}.json"), b"", unsynced)
    }

    /// Whether thread `id` has been written (its file holds the thread).
    pub fn is_written(&self, id: &str) -> bool {
        self.written.contains(id)
    }

    /// The path of thread `id`'s file, if it was created and never written.
    pub fn empty_file(&self, id: &str) -> Option<PathBuf> {
        self.empty
            .contains(id)
            .then(|| self.dir.join(format!("{id}.json")))
    }

    /// Makes every thread durable, as the real codex's clean exit does; the
    /// state directory too, which names the store's (as the real codex's
    /// database files are named in its `CODEX_HOME`, which SQLite syncs).
    pub fn checkpoint(&self) -> std::io::Result<()> {
        checkpoint(&self.dir)
    }

    /// Makes every thread of the store under `state_dir` durable when
    /// SIGTERM arrives, as the real codex does when it is terminated; call it
    /// before any other thread starts.
    pub fn checkpoint_on_sigterm(state_dir: &Path) -> std::io::Result<()> {
        let dir = state_dir.join(THREADS_DIR);
        crate::recorded::sync_on_sigterm(move || checkpoint(&dir))
    }
}

fn checkpoint(dir: &Path) -> std::io::Result<()> {
    crate::recorded::checkpoint(dir)?;
    match dir.parent() {
        Some(state) => fs::File::open(state)?.sync_all(),
        None => Ok(()),
    }
}
