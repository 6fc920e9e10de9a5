//! The tables, and the opening of the database: the pragmas that make every
//! commit durable (WAL, `synchronous=FULL`), the schema (every table and
//! index created if absent; there are no migrations), and the owner epoch,
//! bumped once per process.
//!
//! It deliberately does not create the state directory or the file (the
//! store does that first, with their modes) and starts no thread.

use super::cached::Cached as _;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension as _, params};

use super::StoreError;

/// Opens the database file at `path` with the runner's pragmas and schema,
/// and bumps the owner epoch in one transaction. Returns the connection and
/// the new epoch.
pub(super) fn open_db(path: &Path) -> Result<(Connection, i64), StoreError> {
    let conn = Connection::open(path)?;
    conn.set_prepared_statement_cache_capacity(super::cached::CAPACITY);
    // Plans that do not depend on the bound values: without the query
    // planner stability guarantee, a statement on a table with a partial
    // index (`turns`) is prepared again whenever a parameter it compares
    // takes a new value (each `turns(run_id)` of another run), which was
    // most of the store writer's SQLite time in a wave.
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // SEEDED BUG wal-synchronous-normal: SQLite's advice for WAL when speed
    // matters, which loses the commits since the last checkpoint at a power
    // loss (never at a process crash).
    let synchronous = if crate::seeded::wal_synchronous_normal() {
        "NORMAL"
    } else {
        "FULL"
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    create_schema(&conn)?;
    let epoch: i64 = {
        let tx = conn.unchecked_transaction()?;
        let old: Option<String> = tx
            .row_cached(
                "SELECT value FROM meta WHERE key = 'owner_epoch'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let epoch = old.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) + 1;
        tx.exec_cached(
            "INSERT INTO meta(key, value) VALUES('owner_epoch', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![epoch.to_string()],
        )?;
        tx.commit()?;
        epoch
    };
    Ok((conn, epoch))
}

/// Creates every table and index in one transaction, once per schema text:
/// a store whose `user_version` is [`schema_stamp`] has them all, and its
/// opening parses no `CREATE`. Before, every runner start ran each `CREATE
/// … IF NOT EXISTS` as its own commit (a schema change that expired every
/// statement, then a new commit, per table on a fresh store): a fortieth of
/// a wave's CPU.
fn create_schema(conn: &Connection) -> rusqlite::Result<()> {
    let stamp = schema_stamp();
    let have: i32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if have == stamp {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    tx.execute_batch(SCHEMA)?;
    tx.pragma_update(None, "user_version", stamp)?;
    tx.commit()
}

/// The stamp of [`SCHEMA`]'s text (FNV-1a, positive): a changed schema (a
/// table added) has another, so an older store gets what it lacks.
fn schema_stamp() -> i32 {
    let hash = SCHEMA.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    (hash & 0x7fff_ffff).max(1) as i32
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

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    /// How many schema entries `filter` (an SQL condition) selects.
    fn entries(conn: &Connection, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM sqlite_master WHERE {filter}");
        conn.query_row(&sql, [], |r| r.get(0)).unwrap()
    }

    /// A fresh store gets every table in one transaction and the stamp; an
    /// opened one is left as it is; one with another stamp (an older
    /// schema) gets what it lacks.
    #[test]
    fn the_schema_is_created_once_per_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("s.sqlite3")).unwrap();
        super::create_schema(&conn).unwrap();
        let tables = entries(&conn, "type = 'table'");
        assert!(tables > 5, "{tables} tables");
        let stamp: i32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(stamp, super::schema_stamp());
        conn.execute("DROP TABLE meta", []).unwrap();
        super::create_schema(&conn).unwrap();
        assert_eq!(
            entries(&conn, "name = 'meta'"),
            0,
            "a stamped store is not touched"
        );
        conn.pragma_update(None, "user_version", 7).unwrap();
        super::create_schema(&conn).unwrap();
        assert_eq!(
            entries(&conn, "name = 'meta'"),
            1,
            "an older stamp gets the tables it lacks"
        );
    }
}
