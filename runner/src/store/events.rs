//! The run log: one gapless sequence of events per task, appended in the
//! same transaction as the change it reports, so a committed change always
//! has its event and an event always its change. Every state-changing
//! operation of the store goes through [`Db::event_in`] or [`Db::events_in`],
//! which pass the write's storage-fault check first.

use super::cached::Cached as _;
use rusqlite::params;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Db, StoreError, now_ms};

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

impl Db {
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

/// The run-log appends every state-changing operation goes through.
impl Db {
    /// Runs `body` and appends one run-log event in one durable transaction,
    /// after the fault-injection check for `write`. The task's last seq is
    /// cached, so the cost of an event does not grow with history.
    pub(super) fn event_in(
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
    pub(super) fn events_in(
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
            None => tx.row_cached(
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
}
