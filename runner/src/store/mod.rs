//! The runner's durable state: SQLite in WAL mode with `synchronous=FULL`,
//! owned by one writer thread.
//!
//! Every read and write runs on that thread, in order, through [`Store::call`],
//! so there is exactly one writer and each call sees the effects of the calls
//! before it. A call that changes state runs in one transaction and returns
//! only after the commit is durable; the engine passes a cut point only after
//! that. Rows are appended (messages, turns, provider requests, provider
//! processes, run-log events); the few status columns that change (task state,
//! run status, turn status) are updated in place with one small statement, so a
//! save writes only what changed and its cost does not grow with history.
//! Bindings (a task's profile, a message's text) are checked inside the write
//! that would create them. Credentials never reach this module: nothing here
//! has a field that could hold one.
//!
//! Storage faults: every named write first passes the cut point
//! `runner.write.<write name>` with `cutpoint::hit_io` (only when cut points
//! are active, so production pays one atomic load). The harness answers an
//! armed one `fail EIO` (`fail-write`: this one write fails, later ones
//! succeed) or `fail ENOSPC` (`disk-full`: this write and every later write of
//! this process fail, until a restart brings the disk back). A test hook,
//! `TURNCUT_RUNNER_FAIL_WRITE=<write name>`, makes every write of that name
//! fail as a full disk would, without a harness.
//!
//! Read faults: each read the engine decides from first passes the cut point
//! `runner.read.<read>` with `cutpoint::hit_io` ([`Db::check_read`]): the
//! snapshot's parts (`task`, `turns`, `queue`, `providers`), the tasks to
//! resume (`tasks`) and the recovery lookups (`message`, `turn_output`,
//! `turns_before`, `native_checkpoint`, `native_history`). The harness answers
//! an armed one `fail EIO` (`fail-read`) or `corrupt` (`corrupt-read`), and the
//! read fails as SQLite would report it (`SQLITE_IOERR_READ`,
//! `SQLITE_CORRUPT`); the next read goes to the disk again. The control API's
//! own reads (a task's view, the run log) pass no point: a client polls them
//! as often as it likes, so their hits would not count the same in two runs.
//!
//! One file per concept, each with its rows, its reads and its writes:
//! `schema` (the tables and the owner epoch), `events` (the run log every
//! write appends to), `tasks` (task state, the engine's snapshot,
//! settlement), `admission` (tasks, follow-ups and Retries entering),
//! `messages` (the queue), `runs` (runs and their conversation), `turns`
//! (turns and provider requests), `providers` (spawn intents, process
//! identities, stop proofs), `tools` (client-side tool calls), `native`
//! (native checkpoints) and `kinds` (the closed sets of the text columns).

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use tokio::sync::{broadcast, oneshot};

mod admission;
mod cached;
mod events;
mod kinds;
mod messages;
mod native;
mod providers;
mod runs;
mod schema;
mod tasks;
mod tools;
mod turns;

pub use admission::{Admission, FollowUpOutcome, RetryDelivery};
pub use events::Event;
pub use kinds::{
    MessageKind, RequestStatus, RunKind, RunStatus, ToolCallStatus, TurnKind, TurnStatus,
};
pub use messages::{Message, RETRY_RESUME};
pub use providers::{ProviderProc, SpawnIntent};
pub use runs::Run;
pub use tasks::{Snapshot, Task, TaskState};
pub use turns::TurnRow;

/// Name of the environment variable that makes one named write fail.
pub const FAIL_WRITE_ENV: &str = "TURNCUT_RUNNER_FAIL_WRITE";

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file-system operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The writer thread is gone.
    #[error("the store's writer thread has stopped")]
    Closed,
    /// A stored value did not decode.
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// The fault-injection hook failed this write.
    #[error("injected failure of write {0} (database or disk is full)")]
    Injected(String),
    /// The write failed before it started, as the disk reported (a storage
    /// fault injected at its `runner.write.<write>` cut point).
    #[error("write {write} failed: {source}")]
    Write {
        write: String,
        #[source]
        source: std::io::Error,
    },
    /// The read failed, as SQLite reports a read the disk failed
    /// (`SQLITE_IOERR_READ`) or a page that does not decode
    /// (`SQLITE_CORRUPT`): a read fault injected at its `runner.read.<read>`
    /// cut point.
    #[error("read {read} failed: {source}")]
    Read {
        read: &'static str,
        #[source]
        source: rusqlite::Error,
    },
}

type Job = Box<dyn FnOnce(&mut Db) + Send>;

/// The handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: std::sync::mpsc::Sender<Job>,
    events: broadcast::Sender<(String, i64)>,
    path: PathBuf,
}

/// The connection and its caches, owned by the writer thread.
pub struct Db {
    conn: Connection,
    last_seq: HashMap<String, i64>,
    fail_write: Option<String>,
    /// Set by a `disk-full` fault: every later write of this process fails
    /// with `ENOSPC`.
    disk_full: bool,
    notify: Vec<(String, i64)>,
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let context = context.into();
    move |source| StoreError::Io { context, source }
}

impl Store {
    /// Opens (creating) the store in `dir` (mode 0700; files 0600) and bumps
    /// the owner epoch. Returns the store and the new epoch.
    pub fn open(dir: &Path) -> Result<(Store, i64), StoreError> {
        crate::workspace::create_dir_all_durably(dir, 0o700).map_err(io_err(format!(
            "failed to create state dir {}",
            dir.display()
        )))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("failed to restrict {}", dir.display())))?;
        let path = dir.join("runner.sqlite3");
        // Create the database file 0600 before SQLite does, so it never exists
        // with a looser mode; the WAL and shm files follow the main file's mode.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err(format!("failed to create {}", path.display())))?;
        let (conn, epoch) = schema::open_db(&path)?;
        let fail_write = std::env::var(FAIL_WRITE_ENV).ok().filter(|s| !s.is_empty());
        let mut db = Db {
            conn,
            last_seq: HashMap::new(),
            fail_write,
            disk_full: false,
            notify: Vec::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (events, _) = broadcast::channel(1024);
        let sender = events.clone();
        std::thread::Builder::new()
            .name("store-writer".to_owned())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&mut db);
                    for n in db.notify.drain(..) {
                        let _ = sender.send(n);
                    }
                }
            })
            .map_err(io_err("failed to start the store writer"))?;
        Ok((Store { tx, events, path }, epoch))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Subscribes to `(task_id, seq)` of every committed event.
    pub fn subscribe(&self) -> broadcast::Receiver<(String, i64)> {
        self.events.subscribe()
    }

    /// Runs `f` on the writer thread and returns its result.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Box::new(move |db: &mut Db| {
                let _ = tx.send(f(db));
            }))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Like [`Store::call`], from a thread that is not in the runtime.
    pub fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx
            .send(Box::new(move |db: &mut Db| {
                let _ = tx.send(f(db));
            }))
            .map_err(|_| StoreError::Closed)?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }
}

impl Db {
    /// Fails `write` before it starts when a storage fault says so: the
    /// environment hook names it, the harness answers its cut point
    /// `runner.write.<write>` with `fail EIO` / `fail ENOSPC`, or the disk is
    /// full (an `ENOSPC` answer fills it for the rest of the process). The
    /// point is passed even on a full disk, so a harness sees every write
    /// attempted there. Runs on the writer thread: a held point stalls every
    /// store call behind it, as a stalled disk would.
    pub fn check_fail(&mut self, write: &str) -> Result<(), StoreError> {
        if self.fail_write.as_deref() == Some(write) {
            return Err(StoreError::Injected(write.to_owned()));
        }
        let failed = |source| StoreError::Write {
            write: write.to_owned(),
            source,
        };
        if cutpoint::active()
            && let Err(e) = cutpoint::hit_io(&format!("runner.write.{write}"))
        {
            self.disk_full |= cutpoint::IoFault::of_error(&e) == Some(cutpoint::IoFault::Enospc);
            return Err(failed(e));
        }
        if self.disk_full {
            return Err(failed(cutpoint::IoFault::Enospc.to_io_error()));
        }
        Ok(())
    }

    /// Fails the read `read` before it starts when the harness answers its
    /// cut point `runner.read.<read>` with `fail EIO` (the disk failed the
    /// read: `SQLITE_IOERR_READ`) or `corrupt` (what came back does not
    /// decode: `SQLITE_CORRUPT`), as SQLite itself would report either. A
    /// failed read changes nothing, so the next one simply goes to the disk
    /// again. Runs on the writer thread, like [`Db::check_fail`].
    pub fn check_read(&self, read: &'static str) -> Result<(), StoreError> {
        if !cutpoint::active() {
            return Ok(());
        }
        let Err(e) = cutpoint::hit_io(&format!("runner.read.{read}")) else {
            return Ok(());
        };
        let (code, text) = match cutpoint::IoFault::of_error(&e) {
            Some(cutpoint::IoFault::Corrupt) => (
                rusqlite::ffi::SQLITE_CORRUPT,
                "database disk image is malformed",
            ),
            _ => (rusqlite::ffi::SQLITE_IOERR_READ, "disk I/O error"),
        };
        Err(StoreError::Read {
            read,
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                Some(format!("{text} ({e})")),
            ),
        })
    }

    /// Read access.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }
}
