//! Provider processes: the spawn intent written before a spawn, the
//! identity recorded before use, and the proofs that a process (or whatever
//! carries an unrecorded spawn's marker) is gone.

use super::cached::Cached as _;
use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

use super::{Db, StoreError, now_ms};
use crate::supervisor::ProcessIdentity;

/// A recorded provider process.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderProc {
    pub proc_row: i64,
    pub run_id: String,
    pub identity: ProcessIdentity,
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

impl Db {
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
                    identity: ProcessIdentity {
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
                tx.exec_cached(
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
                tx.exec_cached(
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
        id: ProcessIdentity,
    ) -> Result<i64, StoreError> {
        let data =
            serde_json::json!({ "pid": id.pid, "pgid": id.pgid, "start_time": id.start_time });
        self.record_provider_event(task_id, run_id, spawn_row, id, data)
    }

    /// [`Db::record_provider`], which under the seeded bug
    /// `credential-in-store` also records `leaked` (the key the provider was
    /// started with) in the `provider.spawned` event.
    pub fn record_provider_leaking(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        id: ProcessIdentity,
        leaked: Option<&str>,
    ) -> Result<i64, StoreError> {
        #[cfg(feature = "seeded-bugs")]
        if let Some(key) = leaked {
            // SEEDED BUG credential-in-store: the spawned event records the
            // key the provider was started with.
            return self.record_provider_with_env(task_id, run_id, spawn_row, id, key);
        }
        #[cfg(not(feature = "seeded-bugs"))]
        let _ = leaked;
        self.record_provider(task_id, run_id, spawn_row, id)
    }

    /// SEEDED BUG credential-in-store: [`Db::record_provider`] with the
    /// provider's key in the `provider.spawned` event.
    #[cfg(feature = "seeded-bugs")]
    pub fn record_provider_with_env(
        &mut self,
        task_id: &str,
        run_id: &str,
        spawn_row: i64,
        id: ProcessIdentity,
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
        id: ProcessIdentity,
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
                tx.exec_cached(
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
                tx.exec_cached(
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
                tx.exec_cached(
                    "UPDATE provider_procs SET stop_proof = ?2 WHERE proc_row = ?1",
                    params![proc_row, text],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }
}
