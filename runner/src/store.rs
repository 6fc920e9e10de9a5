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

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use crate::causes::Cause;

/// The kind of a Retry message that re-sends nothing: the failure came
/// before the turn of a queued message, and the Retry run answers the queue
/// (see [`Db::admit_retry`]).
pub const RETRY_RESUME: &str = "retry_resume";

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
}

/// Task states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Admitted, no run started yet.
    Queued,
    /// A run is executing.
    Running,
    /// The last run completed.
    Completed,
    /// The last run failed; `cause` says why.
    Failed,
    /// A person must look (e.g. a process could not be proven stopped).
    NeedsHuman,
}

impl TaskState {
    fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::NeedsHuman => "needs_human",
        }
    }

    fn parse(s: &str) -> Result<TaskState, StoreError> {
        Ok(match s {
            "queued" => TaskState::Queued,
            "running" => TaskState::Running,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            "needs_human" => TaskState::NeedsHuman,
            other => {
                return Err(StoreError::Corrupt {
                    table: "tasks",
                    detail: format!("unknown state {other:?}"),
                });
            }
        })
    }

    /// Whether the task is settled (no run executing).
    pub fn settled(self) -> bool {
        !matches!(self, TaskState::Queued | TaskState::Running)
    }
}

/// A task row.
#[derive(Clone, Debug, Serialize)]
pub struct Task {
    pub task_id: String,
    pub profile: String,
    pub workspace: String,
    pub state: TaskState,
    pub cause: Option<Cause>,
    pub current_run: Option<String>,
    pub created_ms: i64,
}

/// A run row.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub run_id: String,
    pub task_id: String,
    /// `initial`, `follow_up` or `retry`.
    pub kind: String,
    /// The message that started the run.
    pub trigger_message_id: String,
    /// `running`, `completed` or `failed`.
    pub status: String,
    pub cause: Option<Cause>,
    pub conversation_id: Option<String>,
    pub owner_epoch: i64,
    pub created_ms: i64,
}

/// A turn row: one provider turn (or its intent).
#[derive(Clone, Debug, Serialize)]
pub struct TurnRow {
    pub turn_row: i64,
    pub run_id: String,
    pub message_id: String,
    /// `primary` or `continuation`.
    pub kind: String,
    /// The id sent as the provider's client message id.
    pub client_id: String,
    pub provider_turn_id: Option<String>,
    /// `intent`, `accepted`, `completed`, `interrupted` or `failed`.
    pub status: String,
}

impl TurnRow {
    /// Whether the turn still needs the provider (not settled).
    pub fn unsettled(&self) -> bool {
        matches!(self.status.as_str(), "intent" | "accepted")
    }
}

/// A message row.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    pub message_id: String,
    /// `prompt`, `follow_up` or `retry`.
    pub kind: String,
    pub text: String,
}

/// A recorded provider process.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderProc {
    pub proc_row: i64,
    pub run_id: String,
    pub identity: crate::supervisor::ProcessIdentity,
    pub stopped: bool,
    /// The spawn marker in the process's environment (absent for processes
    /// recorded before spawn intents existed).
    pub marker: Option<String>,
}

/// A durable spawn intent whose process identity was never recorded: the
/// runner stopped between writing the intent and recording the identity, so
/// whatever runs with its marker is unknown to the store.
#[derive(Clone, Debug, Serialize)]
pub struct SpawnIntent {
    pub spawn_row: i64,
    pub run_id: String,
    pub marker: String,
}

/// One run-log event.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Event {
    /// Format version.
    pub v: u32,
    pub task_id: String,
    /// Gapless per task, from 1.
    pub seq: i64,
    pub run_id: Option<String>,
    pub ts_ms: i64,
    pub kind: String,
    pub data: Value,
}

/// Everything the engine needs to decide a task's next step.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub task: Task,
    pub run: Option<Run>,
    /// Turns of the current run, in order.
    pub turns: Vec<TurnRow>,
    /// Messages not yet consumed by a primary turn, in admission order.
    pub queue: Vec<Message>,
    /// Provider processes of the task not yet proven stopped.
    pub live_procs: Vec<ProviderProc>,
    /// Spawn intents of the task with no recorded identity and no sweep.
    pub open_spawns: Vec<SpawnIntent>,
    /// Provider requests of the current run's latest turn still unanswered.
    pub pending_requests: usize,
}

/// Outcome of admitting a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Newly admitted, or the same ids again: the same answer.
    Admitted { run_id: String },
    /// The task id exists with other content.
    Conflict(String),
}

/// Outcome of a follow-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowUpOutcome {
    /// Queued (or already queued with the same text).
    Queued { new_run: Option<String> },
    /// Refused by the fence: the task failed closed.
    Fenced,
    /// The message id exists with other content.
    Conflict(String),
    /// No such task.
    UnknownTask,
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

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    task_id TEXT PRIMARY KEY,
    profile TEXT NOT NULL,
    workspace TEXT NOT NULL,
    first_message_id TEXT NOT NULL,
    state TEXT NOT NULL,
    cause TEXT,
    current_run TEXT,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    task_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    ord INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (task_id, message_id)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    trigger_message_id TEXT NOT NULL,
    status TEXT NOT NULL,
    cause TEXT,
    conversation_id TEXT,
    owner_epoch INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_task ON runs(task_id, created_ms);
CREATE UNIQUE INDEX IF NOT EXISTS runs_trigger ON runs(task_id, trigger_message_id);
CREATE TABLE IF NOT EXISTS turns (
    turn_row INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    client_id TEXT NOT NULL,
    provider_turn_id TEXT,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_run ON turns(run_id, turn_row);
CREATE UNIQUE INDEX IF NOT EXISTS turns_primary_once ON turns(task_id, message_id) WHERE kind = 'primary';
CREATE UNIQUE INDEX IF NOT EXISTS turns_one_active ON turns(run_id) WHERE status IN ('intent', 'accepted');
CREATE TABLE IF NOT EXISTS native_checkpoints (
    turn_row INTEGER PRIMARY KEY,
    conversation TEXT NOT NULL,
    checkpoint TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_by_conversation ON native_checkpoints(conversation, turn_row);
CREATE TABLE IF NOT EXISTS provider_requests (
    turn_row INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    method TEXT NOT NULL,
    status TEXT NOT NULL,
    decision TEXT,
    PRIMARY KEY (turn_row, request_id)
);
CREATE TABLE IF NOT EXISTS tool_calls (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    turn_row INTEGER NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS provider_procs (
    proc_row INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    pgid INTEGER NOT NULL,
    start_time INTEGER NOT NULL,
    spawned_ms INTEGER NOT NULL,
    stop_proof TEXT
);
CREATE INDEX IF NOT EXISTS procs_by_task ON provider_procs(task_id) WHERE stop_proof IS NULL;
CREATE TABLE IF NOT EXISTS provider_spawns (
    spawn_row INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    marker TEXT NOT NULL UNIQUE,
    proc_row INTEGER,
    sweep_proof TEXT,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS spawns_open ON provider_spawns(task_id) WHERE proc_row IS NULL AND sweep_proof IS NULL;
CREATE TABLE IF NOT EXISTS events (
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    run_id TEXT,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;
"#;

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
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(format!(
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
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(SCHEMA)?;
        let epoch: i64 = {
            let tx = conn.unchecked_transaction()?;
            let old: Option<String> = tx
                .query_row(
                    "SELECT value FROM meta WHERE key = 'owner_epoch'",
                    [],
                    |r| r.get(0),
                )
                .optional()?;
            let epoch = old.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) + 1;
            tx.execute(
                "INSERT INTO meta(key, value) VALUES('owner_epoch', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![epoch.to_string()],
            )?;
            tx.commit()?;
            epoch
        };
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

fn cause_json(c: &Option<Cause>) -> Option<String> {
    c.as_ref()
        .map(|c| serde_json::to_string(c).expect("causes serialize"))
}

fn parse_cause(s: Option<String>, table: &'static str) -> Result<Option<Cause>, StoreError> {
    s.map(|s| {
        serde_json::from_str(&s).map_err(|e| StoreError::Corrupt {
            table,
            detail: format!("bad cause {s:?}: {e}"),
        })
    })
    .transpose()
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
            self.disk_full |= e.raw_os_error() == Some(cutpoint::IoFault::Enospc.errno());
            return Err(failed(e));
        }
        if self.disk_full {
            return Err(failed(cutpoint::IoFault::Enospc.to_io_error()));
        }
        Ok(())
    }

    /// Read access.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Loads a task.
    pub fn task(&self, task_id: &str) -> Result<Option<Task>, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT task_id, profile, workspace, state, cause, current_run, created_ms
                 FROM tasks WHERE task_id = ?1",
                params![task_id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, i64>(6)?,
                    ))
                },
            )
            .optional()?;
        row.map(
            |(task_id, profile, workspace, state, cause, current_run, created_ms)| {
                Ok(Task {
                    task_id,
                    profile,
                    workspace,
                    state: TaskState::parse(&state)?,
                    cause: parse_cause(cause, "tasks")?,
                    current_run,
                    created_ms,
                })
            },
        )
        .transpose()
    }

    /// Loads a run.
    pub fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT run_id, task_id, kind, status, cause, conversation_id, owner_epoch, created_ms,
                        trigger_message_id
                 FROM runs WHERE run_id = ?1",
                params![run_id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, i64>(7)?,
                        r.get::<_, String>(8)?,
                    ))
                },
            )
            .optional()?;
        row.map(
            |(
                run_id,
                task_id,
                kind,
                status,
                cause,
                conversation_id,
                owner_epoch,
                created_ms,
                trigger_message_id,
            )| {
                Ok(Run {
                    run_id,
                    task_id,
                    kind,
                    trigger_message_id,
                    status,
                    cause: parse_cause(cause, "runs")?,
                    conversation_id,
                    owner_epoch,
                    created_ms,
                })
            },
        )
        .transpose()
    }

    /// All runs of a task, oldest first.
    pub fn runs(&self, task_id: &str) -> Result<Vec<Run>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT run_id FROM runs WHERE task_id = ?1 ORDER BY created_ms, rowid",
        )?;
        let ids: Vec<String> = stmt
            .query_map(params![task_id], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        ids.iter()
            .filter_map(|id| self.run(id).transpose())
            .collect()
    }

    /// Turns of a run, oldest first.
    pub fn turns(&self, run_id: &str) -> Result<Vec<TurnRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT turn_row, run_id, message_id, kind, client_id, provider_turn_id, status
             FROM turns WHERE run_id = ?1 ORDER BY turn_row",
        )?;
        let rows = stmt
            .query_map(params![run_id], |r| {
                Ok(TurnRow {
                    turn_row: r.get(0)?,
                    run_id: r.get(1)?,
                    message_id: r.get(2)?,
                    kind: r.get(3)?,
                    client_id: r.get(4)?,
                    provider_turn_id: r.get(5)?,
                    status: r.get(6)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Messages of a task not consumed by a primary turn, in admission order
    /// (a Retry that re-sends nothing, [`RETRY_RESUME`], is no message to answer).
    pub fn queue(&self, task_id: &str) -> Result<Vec<Message>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT m.message_id, m.kind, m.text FROM messages m
             WHERE m.task_id = ?1 AND m.kind != 'retry_resume' AND NOT EXISTS (
                 SELECT 1 FROM turns t WHERE t.task_id = m.task_id
                 AND t.message_id = m.message_id AND t.kind = 'primary')
             ORDER BY m.ord",
        )?;
        let rows = stmt
            .query_map(params![task_id], |r| {
                Ok(Message {
                    message_id: r.get(0)?,
                    kind: r.get(1)?,
                    text: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// A message by id.
    pub fn message(&self, task_id: &str, message_id: &str) -> Result<Option<Message>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT message_id, kind, text FROM messages WHERE task_id = ?1 AND message_id = ?2",
                params![task_id, message_id],
                |r| {
                    Ok(Message {
                        message_id: r.get(0)?,
                        kind: r.get(1)?,
                        text: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// Provider processes of a task not yet proven stopped.
    pub fn live_procs(&self, task_id: &str) -> Result<Vec<ProviderProc>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT p.proc_row, p.run_id, p.pid, p.pgid, p.start_time, s.marker
             FROM provider_procs p LEFT JOIN provider_spawns s ON s.proc_row = p.proc_row
             WHERE p.task_id = ?1 AND p.stop_proof IS NULL ORDER BY p.proc_row",
        )?;
        let rows = stmt
            .query_map(params![task_id], |r| {
                Ok(ProviderProc {
                    proc_row: r.get(0)?,
                    run_id: r.get(1)?,
                    identity: crate::supervisor::ProcessIdentity {
                        pid: r.get(2)?,
                        pgid: r.get(3)?,
                        start_time: r.get::<_, i64>(4)? as u64,
                    },
                    stopped: false,
                    marker: r.get(5)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Spawn intents of a task whose identity was never recorded and whose
    /// marker was never swept.
    pub fn open_spawns(&self, task_id: &str) -> Result<Vec<SpawnIntent>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT spawn_row, run_id, marker FROM provider_spawns
             WHERE task_id = ?1 AND proc_row IS NULL AND sweep_proof IS NULL ORDER BY spawn_row",
        )?;
        let rows = stmt
            .query_map(params![task_id], |r| {
                Ok(SpawnIntent {
                    spawn_row: r.get(0)?,
                    run_id: r.get(1)?,
                    marker: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    /// Unanswered provider requests of a turn.
    pub fn pending_requests(&self, turn_row: i64) -> Result<usize, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM provider_requests WHERE turn_row = ?1 AND status != 'answered'",
            params![turn_row],
            |r| r.get(0),
        )?;
        Ok(n as usize)
    }

    /// The snapshot the engine decides from.
    pub fn snapshot(&self, task_id: &str) -> Result<Option<Snapshot>, StoreError> {
        let Some(task) = self.task(task_id)? else {
            return Ok(None);
        };
        let run = match &task.current_run {
            Some(r) => self.run(r)?,
            None => None,
        };
        let turns = match &run {
            Some(r) => self.turns(&r.run_id)?,
            None => Vec::new(),
        };
        let pending_requests = match turns.last() {
            Some(t) => self.pending_requests(t.turn_row)?,
            None => 0,
        };
        Ok(Some(Snapshot {
            queue: self.queue(task_id)?,
            live_procs: self.live_procs(task_id)?,
            open_spawns: self.open_spawns(task_id)?,
            task,
            run,
            turns,
            pending_requests,
        }))
    }

    /// Tasks whose state says a run is executing (to resume after a restart).
    pub fn unsettled_tasks(&self) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT task_id FROM tasks WHERE state IN ('queued', 'running') ORDER BY created_ms",
        )?;
        let ids = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Run-log events of a task with `seq > after`, at most `limit`.
    pub fn events(&self, task_id: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, run_id, ts_ms, kind, data FROM events
             WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![task_id, after, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(seq, run_id, ts_ms, kind, data)| {
                Ok(Event {
                    v: 1,
                    task_id: task_id.to_owned(),
                    seq,
                    run_id,
                    ts_ms,
                    kind,
                    data: serde_json::from_str(&data).map_err(|e| StoreError::Corrupt {
                        table: "events",
                        detail: e.to_string(),
                    })?,
                })
            })
            .collect()
    }
}

/// The state-changing operations, each one transaction.
impl Db {
    /// Runs `body` and appends one run-log event in one durable transaction,
    /// after the fault-injection check for `write`. The task's last seq is
    /// cached, so the cost of an event does not grow with history.
    fn event_in(
        &mut self,
        write: &str,
        task_id: &str,
        run_id: Option<&str>,
        kind: &str,
        data: Value,
        body: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<i64, StoreError> {
        self.events_in(write, task_id, vec![(run_id, kind, data)], body)
    }

    /// [`Db::event_in`] with several events (each with its run), appended in
    /// order in the same transaction as `body`; returns the last event's seq.
    fn events_in(
        &mut self,
        write: &str,
        task_id: &str,
        events: Vec<(Option<&str>, &str, Value)>,
        body: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<i64, StoreError> {
        self.check_fail(write)?;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        body(&tx)?;
        let mut seq = match self.last_seq.get(task_id) {
            Some(s) => *s,
            None => tx.query_row(
                "SELECT coalesce(max(seq), 0) FROM events WHERE task_id = ?1",
                params![task_id],
                |r| r.get(0),
            )?,
        };
        for (run_id, kind, data) in events {
            seq += 1;
            tx.prepare_cached(
                "INSERT INTO events(task_id, seq, run_id, ts_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                task_id,
                seq,
                run_id,
                now_ms(),
                kind,
                serde_json::to_string(&data).expect("event data serializes")
            ])?;
        }
        tx.commit()?;
        // Only a committed transaction moves the cache forward.
        self.last_seq.insert(task_id.to_owned(), seq);
        self.notify.push((task_id.to_owned(), seq));
        Ok(seq)
    }

    /// Appends an event with no other change.
    pub fn append(
        &mut self,
        write: &str,
        task_id: &str,
        run_id: Option<&str>,
        kind: &str,
        data: Value,
    ) -> Result<i64, StoreError> {
        self.event_in(write, task_id, run_id, kind, data, |_| Ok(()))
    }

    /// Admits a task with its prompt and first run, idempotently: the same
    /// ids and content again return the same run.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &mut self,
        task_id: &str,
        message_id: &str,
        prompt: &str,
        profile: &str,
        workspace: &str,
        run_id: &str,
        epoch: i64,
    ) -> Result<Admission, StoreError> {
        if let Some(task) = self.task(task_id)? {
            let first: String = self.conn.query_row(
                "SELECT first_message_id FROM tasks WHERE task_id = ?1",
                params![task_id],
                |r| r.get(0),
            )?;
            let msg = self.message(task_id, message_id)?;
            let same = first == message_id
                && task.profile == profile
                && task.workspace == workspace
                && msg.is_some_and(|m| m.text == prompt);
            if !same {
                return Ok(Admission::Conflict(format!(
                    "task {task_id} exists with another prompt, profile, workspace or message id"
                )));
            }
            let run: String = self.conn.query_row(
                "SELECT run_id FROM runs WHERE task_id = ?1 AND trigger_message_id = ?2",
                params![task_id, message_id],
                |r| r.get(0),
            )?;
            return Ok(Admission::Admitted { run_id: run });
        }
        let now = now_ms();
        self.event_in(
            "task_admitted",
            task_id,
            Some(run_id),
            "task.admitted",
            serde_json::json!({ "message_id": message_id, "profile": profile, "run_id": run_id }),
            |tx| {
                tx.execute(
                    "INSERT INTO tasks(task_id, profile, workspace, first_message_id, state, current_run, created_ms)
                     VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
                    params![task_id, profile, workspace, message_id, run_id, now],
                )?;
                tx.execute(
                    "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
                     VALUES (?1, ?2, 'prompt', ?3, 1, ?4)",
                    params![task_id, message_id, prompt, now],
                )?;
                tx.execute(
                    "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, owner_epoch, created_ms)
                     VALUES (?1, ?2, 'initial', ?3, 'running', ?4, ?5)",
                    params![run_id, task_id, message_id, epoch, now],
                )?;
                Ok(())
            },
        )?;
        Ok(Admission::Admitted {
            run_id: run_id.to_owned(),
        })
    }

    /// Queues a follow-up. The fence is checked inside the write: a task that
    /// failed (or needs a human) refuses it and records the refusal. A
    /// follow-up to a completed task starts a new run in the same conversation.
    pub fn follow_up(
        &mut self,
        task_id: &str,
        message_id: &str,
        text: &str,
        new_run_id: &str,
        epoch: i64,
    ) -> Result<FollowUpOutcome, StoreError> {
        let Some(task) = self.task(task_id)? else {
            return Ok(FollowUpOutcome::UnknownTask);
        };
        if let Some(m) = self.message(task_id, message_id)? {
            if m.kind == "follow_up" && m.text == text {
                return Ok(FollowUpOutcome::Queued { new_run: None });
            }
            return Ok(FollowUpOutcome::Conflict(format!(
                "message {message_id} exists with other content"
            )));
        }
        if matches!(task.state, TaskState::Failed | TaskState::NeedsHuman) {
            self.append(
                "fence_refusal",
                task_id,
                task.current_run.as_deref(),
                "prior_owner_fence_refused",
                serde_json::json!({
                    "message_id": message_id,
                    "reason": "prior_owner_fence_refused",
                    "recoverable": false,
                    "message": "the task failed closed; a follow-up cannot reopen it, use Retry",
                }),
            )?;
            return Ok(FollowUpOutcome::Fenced);
        }
        let now = now_ms();
        let conversation = match &task.current_run {
            Some(r) => self.run(r)?.and_then(|r| r.conversation_id),
            None => None,
        };
        let reopen = task.state == TaskState::Completed;
        let run_for_event = if reopen {
            Some(new_run_id)
        } else {
            task.current_run.as_deref()
        };
        let run_for_event = run_for_event.map(str::to_owned);
        self.event_in(
            "follow_up",
            task_id,
            run_for_event.as_deref(),
            "message.queued",
            serde_json::json!({ "message_id": message_id, "kind": "follow_up", "new_run": reopen }),
            |tx| {
                tx.execute(
                    "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
                     VALUES (?1, ?2, 'follow_up', ?3,
                        (SELECT coalesce(max(ord), 0) + 1 FROM messages WHERE task_id = ?1), ?4)",
                    params![task_id, message_id, text, now],
                )?;
                if reopen {
                    tx.execute(
                        "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, conversation_id, owner_epoch, created_ms)
                         VALUES (?1, ?2, 'follow_up', ?3, 'running', ?4, ?5, ?6)",
                        params![new_run_id, task_id, message_id, conversation, epoch, now],
                    )?;
                    tx.execute(
                        "UPDATE tasks SET state = 'running', cause = NULL, current_run = ?2 WHERE task_id = ?1",
                        params![task_id, new_run_id],
                    )?;
                }
                Ok(())
            },
        )?;
        Ok(FollowUpOutcome::Queued {
            new_run: reopen.then(|| new_run_id.to_owned()),
        })
    }

    /// Admits a Retry run after the stop proof: records
    /// `stopped_conversation_verified`, the Retry message (what it re-sends
    /// under the Retry's id, see [`Db::retry_message`]) and a fresh run.
    pub fn admit_retry(
        &mut self,
        task_id: &str,
        message_id: &str,
        run_id: &str,
        epoch: i64,
        proof: Value,
    ) -> Result<Result<String, crate::causes::RetryBlock>, StoreError> {
        use crate::causes::RetryBlock;
        let Some(task) = self.task(task_id)? else {
            return Ok(Err(RetryBlock::NothingToRetry));
        };
        if let Some(m) = self.message(task_id, message_id)? {
            if m.kind == "retry" || m.kind == RETRY_RESUME {
                let run: String = self.conn.query_row(
                    "SELECT run_id FROM runs WHERE task_id = ?1 AND trigger_message_id = ?2",
                    params![task_id, message_id],
                    |r| r.get(0),
                )?;
                return Ok(Ok(run));
            }
            return Ok(Err(RetryBlock::NothingToRetry));
        }
        match task.state {
            TaskState::Failed | TaskState::NeedsHuman => {}
            TaskState::Queued | TaskState::Running => return Ok(Err(RetryBlock::ExecutionActive)),
            TaskState::Completed => return Ok(Err(RetryBlock::NothingToRetry)),
        }
        let (kind, text) = self.retry_message(task_id)?;
        let now = now_ms();
        // SEEDED BUG retry-reuses-conversation: the Retry run is created like
        // a follow-up's, with the previous run's conversation.
        #[cfg(feature = "seeded-bugs")]
        let reused = match &task.current_run {
            Some(r) if crate::seeded::active(crate::seeded::SeededBug::RetryReusesConversation) => {
                self.run(r)?.and_then(|r| r.conversation_id)
            }
            _ => None,
        };
        // The proof and the admission are one write: a Retry refused by a
        // failed write changed nothing (its 503 says so), and the same Retry
        // again records one proof, not two.
        let admitted = serde_json::json!({
            "message_id": message_id, "run_id": run_id, "previous_run": task.current_run,
            "resends": kind == "retry",
        });
        self.events_in(
            "retry_admitted",
            task_id,
            vec![
                (
                    task.current_run.as_deref(),
                    "stopped_conversation_verified",
                    proof,
                ),
                (Some(run_id), "retry.admitted", admitted),
            ],
            |tx| {
                tx.execute(
                    "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
                     VALUES (?1, ?2, ?3, ?4,
                        (SELECT coalesce(max(ord), 0) + 1 FROM messages WHERE task_id = ?1), ?5)",
                    params![task_id, message_id, kind, text, now],
                )?;
                tx.execute(
                    "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, owner_epoch, created_ms)
                     VALUES (?1, ?2, 'retry', ?3, 'running', ?4, ?5)",
                    params![run_id, task_id, message_id, epoch, now],
                )?;
                #[cfg(feature = "seeded-bugs")]
                if let Some(conversation) = &reused {
                    tx.execute(
                        "UPDATE runs SET conversation_id = ?2 WHERE run_id = ?1",
                        params![run_id, conversation],
                    )?;
                }
                tx.execute(
                    "UPDATE tasks SET state = 'running', cause = NULL, current_run = ?2 WHERE task_id = ?1",
                    params![task_id, run_id],
                )?;
                Ok(())
            },
        )?;
        Ok(Ok(run_id.to_owned()))
    }

    /// What a Retry sends: `("retry", text)` re-sends `text` under the
    /// Retry's id, `(RETRY_RESUME, "")` sends nothing of its own and lets the
    /// Retry run answer the queue.
    ///
    /// The latest primary turn's message is re-sent when that message was
    /// not answered (its last turn did not complete: the execution was cut or
    /// failed). When it was answered, or no turn exists, and a message no turn
    /// ever took is queued, the failure came before that message's turn (a
    /// failed write, a provider that would not start): nothing was sent, so
    /// nothing is re-sent; re-sending the answered message would do its work
    /// twice, and re-sending the queued one under the Retry's id as well as
    /// its own would send it twice. With nothing queued, the latest message is
    /// re-sent.
    fn retry_message(&self, task_id: &str) -> Result<(&'static str, String), StoreError> {
        let latest: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT m.text,
                        (SELECT l.status FROM turns l
                          WHERE l.task_id = t.task_id AND l.message_id = t.message_id
                          ORDER BY l.turn_row DESC LIMIT 1)
                 FROM turns t JOIN messages m
                   ON m.task_id = t.task_id AND m.message_id = t.message_id
                 WHERE t.task_id = ?1 AND t.kind = 'primary'
                 ORDER BY t.turn_row DESC LIMIT 1",
                params![task_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match latest {
            Some((text, status)) if status != "completed" => Ok(("retry", text)),
            _ if !self.queue(task_id)?.is_empty() => Ok((RETRY_RESUME, String::new())),
            Some((text, _)) => Ok(("retry", text)),
            None => Ok((
                "retry",
                self.conn.query_row(
                    "SELECT text FROM messages WHERE task_id = ?1 ORDER BY ord LIMIT 1",
                    params![task_id],
                    |r| r.get(0),
                )?,
            )),
        }
    }

    /// Records the intent to spawn a provider process carrying `marker` in
    /// its environment, before the spawn: a runner that dies before the
    /// identity is recorded leaves the marker for the next one to find.
    pub fn spawn_intent(
        &mut self,
        task_id: &str,
        run_id: &str,
        marker: &str,
    ) -> Result<i64, StoreError> {
        let mut row = 0;
        self.event_in(
            "provider_spawn_intent",
            task_id,
            Some(run_id),
            "provider.spawn_intent",
            serde_json::json!({ "marker": marker }),
            |tx| {
                tx.execute(
                    "INSERT INTO provider_spawns(task_id, run_id, marker, created_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![task_id, run_id, marker, now_ms()],
                )?;
                row = tx.last_insert_rowid();
                Ok(())
            },
        )?;
        Ok(row)
    }

    /// Records that no process of a spawn intent whose identity was never
    /// recorded is left (`proof` lists what was found and stopped).
    pub fn record_spawn_swept(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        proof: Value,
    ) -> Result<(), StoreError> {
        let text = proof.to_string();
        self.event_in(
            "provider_stop",
            task_id,
            Some(run_id),
            "provider.spawn_swept",
            proof,
            |tx| {
                tx.execute(
                    "UPDATE provider_spawns SET sweep_proof = ?2 WHERE spawn_row = ?1",
                    params![spawn_row, text],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records a spawned provider process (of spawn intent `spawn_row`)
    /// before it is used.
    pub fn record_provider(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        id: crate::supervisor::ProcessIdentity,
    ) -> Result<i64, StoreError> {
        let data =
            serde_json::json!({ "pid": id.pid, "pgid": id.pgid, "start_time": id.start_time });
        self.record_provider_event(task_id, run_id, spawn_row, id, data)
    }

    /// SEEDED BUG credential-in-store: [`Db::record_provider`] with the
    /// provider's key in the `provider.spawned` event.
    #[cfg(feature = "seeded-bugs")]
    pub fn record_provider_with_env(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        id: crate::supervisor::ProcessIdentity,
        env_key: &str,
    ) -> Result<i64, StoreError> {
        let data = serde_json::json!({
            "pid": id.pid, "pgid": id.pgid, "start_time": id.start_time, "env_key": env_key,
        });
        self.record_provider_event(task_id, run_id, spawn_row, id, data)
    }

    fn record_provider_event(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        id: crate::supervisor::ProcessIdentity,
        data: Value,
    ) -> Result<i64, StoreError> {
        let mut row = 0;
        self.event_in(
            "provider_identity",
            task_id,
            Some(run_id),
            "provider.spawned",
            data,
            |tx| {
                tx.execute(
                    "INSERT INTO provider_procs(task_id, run_id, pid, pgid, start_time, spawned_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    params![
                        task_id,
                        run_id,
                        id.pid,
                        id.pgid,
                        id.start_time as i64,
                        now_ms()
                    ],
                )?;
                row = tx.last_insert_rowid();
                tx.execute(
                    "UPDATE provider_spawns SET proc_row = ?2 WHERE spawn_row = ?1",
                    params![spawn_row, row],
                )?;
                Ok(())
            },
        )?;
        Ok(row)
    }

    /// Records the proof that a provider process is gone.
    pub fn record_stop(
        &mut self,
        task_id: &str,
        run_id: &str,
        proc_row: i64,
        proof: Value,
    ) -> Result<(), StoreError> {
        let text = proof.to_string();
        self.event_in(
            "provider_stop",
            task_id,
            Some(run_id),
            "provider.stopped",
            proof,
            |tx| {
                tx.execute(
                    "UPDATE provider_procs SET stop_proof = ?2 WHERE proc_row = ?1",
                    params![proc_row, text],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records the intent to open a conversation.
    pub fn conversation_intent(&mut self, task_id: &str, run_id: &str) -> Result<(), StoreError> {
        self.append(
            "conversation_intent",
            task_id,
            Some(run_id),
            "conversation.intent",
            serde_json::json!({}),
        )?;
        Ok(())
    }

    /// Records an opened conversation.
    pub fn conversation_opened(
        &mut self,
        task_id: &str,
        run_id: &str,
        conversation: &str,
    ) -> Result<(), StoreError> {
        self.event_in(
            "conversation",
            task_id,
            Some(run_id),
            "conversation.opened",
            serde_json::json!({ "conversation_id": conversation }),
            |tx| {
                tx.execute(
                    "UPDATE runs SET conversation_id = ?2 WHERE run_id = ?1",
                    params![run_id, conversation],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records that the provider has no record of the run's conversation;
    /// the run has none until it opens a fresh one.
    pub fn conversation_lost(
        &mut self,
        task_id: &str,
        run_id: &str,
        conversation: &str,
    ) -> Result<(), StoreError> {
        self.event_in(
            "conversation_lost",
            task_id,
            Some(run_id),
            "conversation.lost",
            serde_json::json!({ "conversation_id": conversation, "action": "open a fresh conversation" }),
            |tx| {
                tx.execute(
                    "UPDATE runs SET conversation_id = NULL WHERE run_id = ?1",
                    params![run_id],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records a turn intent: the message is consumed here, exactly once for
    /// a primary turn (a unique index enforces it inside the write).
    pub fn turn_intent(
        &mut self,
        task_id: &str,
        run_id: &str,
        message_id: &str,
        kind: &str,
        client_id: &str,
    ) -> Result<i64, StoreError> {
        let mut row = 0;
        self.event_in(
            "turn_intent",
            task_id,
            Some(run_id),
            "turn.intent",
            serde_json::json!({ "message_id": message_id, "kind": kind, "client_id": client_id }),
            |tx| {
                tx.execute(
                    "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status, created_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'intent', ?6)",
                    params![run_id, task_id, message_id, kind, client_id, now_ms()],
                )?;
                row = tx.last_insert_rowid();
                Ok(())
            },
        )?;
        Ok(row)
    }

    /// Records the provider's acceptance of a turn.
    pub fn turn_accepted(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        provider_turn_id: &str,
    ) -> Result<(), StoreError> {
        self.event_in(
            "turn_accepted",
            task_id,
            Some(run_id),
            "turn.accepted",
            serde_json::json!({ "turn_row": turn_row, "provider_turn_id": provider_turn_id }),
            |tx| {
                tx.execute(
                    "UPDATE turns SET provider_turn_id = ?2, status = 'accepted' WHERE turn_row = ?1",
                    params![turn_row, provider_turn_id],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records a turn's end (`completed`, `interrupted`, `failed`).
    pub fn turn_finished(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        status: &str,
        data: Value,
    ) -> Result<(), StoreError> {
        let status = status.to_owned();
        let mut data = data;
        data["turn_row"] = serde_json::json!(turn_row);
        data["status"] = serde_json::json!(status);
        let kind = if status == "completed" {
            "turn.finished"
        } else {
            "turn.failed"
        };
        self.event_in("turn_completed", task_id, Some(run_id), kind, data, |tx| {
            tx.execute(
                "UPDATE turns SET status = ?2 WHERE turn_row = ?1",
                params![turn_row, status],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// Marks an accepted turn lost (`interrupted`, event `turn.failed` with
    /// `data`) and records the intent of its one continuation, in one
    /// transaction: a runner that stops in between must not find the turn
    /// settled with nothing to continue it, or the run would complete without
    /// the lost turn's work. Returns the continuation's turn row.
    pub fn turn_lost_continued(
        &mut self,
        task_id: &str,
        run_id: &str,
        lost_row: i64,
        data: Value,
        client_id: &str,
    ) -> Result<i64, StoreError> {
        let message_id: String = self.conn.query_row(
            "SELECT message_id FROM turns WHERE turn_row = ?1",
            params![lost_row],
            |r| r.get(0),
        )?;
        let mut lost = data;
        lost["turn_row"] = serde_json::json!(lost_row);
        lost["status"] = serde_json::json!("interrupted");
        let intent = serde_json::json!({
            "message_id": message_id, "kind": "continuation", "client_id": client_id,
        });
        let mut row = 0;
        let events = vec![
            (Some(run_id), "turn.failed", lost),
            (Some(run_id), "turn.intent", intent),
        ];
        self.events_in("turn_intent", task_id, events, |tx| {
            tx.execute(
                "UPDATE turns SET status = 'interrupted' WHERE turn_row = ?1",
                params![lost_row],
            )?;
            tx.execute(
                "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status, created_ms)
                 VALUES (?1, ?2, ?3, 'continuation', ?4, 'intent', ?5)",
                params![run_id, task_id, message_id, client_id, now_ms()],
            )?;
            row = tx.last_insert_rowid();
            Ok(())
        })?;
        Ok(row)
    }

    /// Records a provider request (approval), or a change of its status.
    #[allow(clippy::too_many_arguments)]
    pub fn provider_request(
        &mut self,
        write: &str,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        request_id: &str,
        method: &str,
        status: &str,
        decision: Option<&str>,
        item_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let (request_id, method, status, decision) = (
            request_id.to_owned(),
            method.to_owned(),
            status.to_owned(),
            decision.map(str::to_owned),
        );
        let mut data = serde_json::json!({
            "turn_row": turn_row, "request_id": request_id, "method": method,
            "status": status, "decision": decision,
        });
        if let Some(item) = item_id {
            data["item_id"] = serde_json::json!(item);
        }
        self.event_in(write, task_id, Some(run_id), "provider_request", data, |tx| {
            tx.execute(
                "INSERT INTO provider_requests(turn_row, request_id, method, status, decision)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(turn_row, request_id) DO UPDATE SET status = excluded.status, decision = excluded.decision",
                params![turn_row, request_id, method, status, decision],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// The items (Codex commands) of turn `turn_row` whose approval was
    /// answered `accept` and that have no `item.completed` in the run log:
    /// commands that may have run without the runner seeing their end.
    pub fn approved_items_unfinished(
        &self,
        task_id: &str,
        turn_row: i64,
    ) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT json_extract(r.data, '$.item_id') FROM events r
             WHERE r.task_id = ?1 AND r.kind = 'provider_request'
               AND json_extract(r.data, '$.turn_row') = ?2
               AND json_extract(r.data, '$.status') = 'answered'
               AND json_extract(r.data, '$.decision') LIKE 'accept%'
               AND json_extract(r.data, '$.item_id') IS NOT NULL
               AND NOT EXISTS (
                 SELECT 1 FROM events c
                 WHERE c.task_id = ?1 AND c.kind = 'item.completed'
                   AND json_extract(c.data, '$.turn_row') = ?2
                   AND json_extract(c.data, '$.item.id') = json_extract(r.data, '$.item_id'))",
        )?;
        let items = stmt
            .query_map(params![task_id, turn_row], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(items)
    }

    /// The status of a client-side tool call (`executing`, `completed`,
    /// `failed`, `uncertain`), if the run has it.
    pub fn tool_status(&self, run_id: &str, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT status FROM tool_calls WHERE run_id = ?1 AND key = ?2",
                params![run_id, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Marks a client-side tool call `executing`, before its side effect
    /// (DESIGN §3.4 rule 4). Refuses a key the run already has: a call is
    /// never executed twice.
    pub fn tool_executing(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        key: &str,
        kind: &str,
        detail: Value,
    ) -> Result<bool, StoreError> {
        if self.tool_status(run_id, key)?.is_some() {
            return Ok(false);
        }
        let data =
            serde_json::json!({ "turn_row": turn_row, "key": key, "kind": kind, "detail": detail });
        self.event_in("tool_executing", task_id, Some(run_id), "tool.executing", data, |tx| {
            tx.execute(
                "INSERT INTO tool_calls(run_id, key, turn_row, kind, status) VALUES (?1, ?2, ?3, ?4, 'executing')",
                params![run_id, key, turn_row, kind],
            )?;
            Ok(())
        })?;
        Ok(true)
    }

    /// Records a client-side tool call's outcome (`completed` or `failed`).
    pub fn tool_outcome(
        &mut self,
        task_id: &str,
        run_id: &str,
        key: &str,
        status: &str,
        outcome: Value,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(&outcome).expect("outcomes serialize");
        let data = serde_json::json!({ "key": key, "status": status, "outcome": outcome });
        self.event_in(
            "tool_outcome",
            task_id,
            Some(run_id),
            "tool.outcome",
            data,
            |tx| {
                tx.execute(
                "UPDATE tool_calls SET status = ?3, outcome = ?4 WHERE run_id = ?1 AND key = ?2",
                params![run_id, key, status, text],
            )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// After a crash or a lost provider: every call of the run still
    /// `executing` has no known outcome. Each becomes `uncertain` (with a
    /// `tool_outcome_uncertain` event) and is never executed again.
    pub fn tools_uncertain(&mut self, task_id: &str, run_id: &str) -> Result<usize, StoreError> {
        let keys: Vec<(String, String)> = {
            let mut stmt = self.conn.prepare(
                "SELECT key, kind FROM tool_calls WHERE run_id = ?1 AND status = 'executing' ORDER BY rowid",
            )?;
            stmt.query_map(params![run_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        for (key, kind) in &keys {
            let data =
                serde_json::json!({ "key": key, "kind": kind, "action": "never executed again" });
            let k = key.clone();
            let rid = run_id.to_owned();
            self.event_in(
                "tool_uncertain",
                task_id,
                Some(run_id),
                "tool_outcome_uncertain",
                data,
                move |tx| {
                    tx.execute(
                        "UPDATE tool_calls SET status = 'uncertain' WHERE run_id = ?1 AND key = ?2",
                        params![rid, k],
                    )?;
                    Ok(())
                },
            )?;
        }
        Ok(keys.len())
    }

    /// The native checkpoint of a turn, if any.
    pub fn native_checkpoint(&self, turn_row: i64) -> Result<Option<Value>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT checkpoint FROM native_checkpoints WHERE turn_row = ?1",
                params![turn_row],
                |r| r.get(0),
            )
            .optional()?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| StoreError::Corrupt {
                table: "native_checkpoints",
                detail: e.to_string(),
            })
        })
        .transpose()
    }

    /// Checkpoints of the earlier turns of a conversation, in order.
    pub fn native_checkpoints_before(
        &self,
        conversation: &str,
        turn_row: i64,
    ) -> Result<Vec<Value>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT checkpoint FROM native_checkpoints WHERE conversation = ?1 AND turn_row < ?2 ORDER BY turn_row",
        )?;
        let rows: Vec<String> = stmt
            .query_map(params![conversation, turn_row], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        rows.iter()
            .map(|t| {
                serde_json::from_str(t).map_err(|e| StoreError::Corrupt {
                    table: "native_checkpoints",
                    detail: e.to_string(),
                })
            })
            .collect()
    }

    /// Writes a native turn's checkpoint (the allowlisted JSON of
    /// `native::checkpoint::Checkpoint`) with its run-log event; `write` names
    /// the boundary (`model_output`, `tool_executing`, `tool_outcome`, …).
    /// The first save of a turn also marks it accepted: for the native
    /// profile the runner's own store is the provider's record.
    #[allow(clippy::too_many_arguments)]
    pub fn native_save(
        &mut self,
        write: &str,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        conversation: &str,
        checkpoint: Value,
        kind: &str,
        data: Value,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(&checkpoint).expect("checkpoints serialize");
        let conversation = conversation.to_owned();
        self.event_in(write, task_id, Some(run_id), kind, data, move |tx| {
            tx.execute(
                "INSERT INTO native_checkpoints(turn_row, conversation, checkpoint) VALUES (?1, ?2, ?3)
                 ON CONFLICT(turn_row) DO UPDATE SET checkpoint = excluded.checkpoint",
                params![turn_row, conversation, text],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// Settles a run `completed` only when no message of the task is left to
    /// answer, checked in the writer thread, so a follow-up admitted at any
    /// moment before is never stranded in a completed task. Returns whether
    /// it settled.
    pub fn settle_completed_if_idle(
        &mut self,
        task_id: &str,
        run_id: &str,
    ) -> Result<bool, StoreError> {
        if !self.queue(task_id)?.is_empty() {
            return Ok(false);
        }
        self.settle(task_id, run_id, TaskState::Completed, None)?;
        Ok(true)
    }

    /// Settles the current run and the task: completed, or failed with a cause.
    pub fn settle(
        &mut self,
        task_id: &str,
        run_id: &str,
        state: TaskState,
        cause: Option<Cause>,
    ) -> Result<(), StoreError> {
        let run_status = if state == TaskState::Completed {
            "completed"
        } else {
            "failed"
        };
        let cause_text = cause_json(&cause);
        self.event_in(
            "run_settled",
            task_id,
            Some(run_id),
            "run.settled",
            serde_json::json!({ "state": state, "cause": cause }),
            |tx| {
                tx.execute(
                    "UPDATE runs SET status = ?2, cause = ?3 WHERE run_id = ?1",
                    params![run_id, run_status, cause_text],
                )?;
                tx.execute(
                    "UPDATE tasks SET state = ?2, cause = ?3 WHERE task_id = ?1",
                    params![task_id, state.as_str(), cause_text],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_active_turn_in_one_run_is_rejected_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let first = store
            .call_blocking(|db| db.turn_intent("t1", "run-1", "m1", "primary", "m1"))
            .unwrap();
        let events_before = store.call_blocking(|db| db.events("t1", 0, 100)).unwrap();
        // A concurrent turn on the same run: refused by the store itself.
        let second = store.call_blocking(|db| db.turn_intent("t1", "run-1", "f1", "primary", "f1"));
        assert!(second.is_err(), "{second:?}");
        let events_after = store.call_blocking(|db| db.events("t1", 0, 100)).unwrap();
        assert_eq!(
            events_before.len(),
            events_after.len(),
            "no event for a refused turn"
        );
        // Once the first turn ends, the next one is admitted.
        store
            .call_blocking(move |db| {
                db.turn_finished("t1", "run-1", first, "completed", serde_json::json!({}))
            })
            .unwrap();
        store
            .call_blocking(|db| db.turn_intent("t1", "run-1", "f1", "primary", "f1"))
            .unwrap();
    }
}
