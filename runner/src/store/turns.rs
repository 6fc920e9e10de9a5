//! Turns: one provider turn (or its intent) each, from intent through
//! acceptance to its end, the one continuation of a lost turn, and the
//! provider requests (approvals) asked during a turn.

use super::cached::Cached as _;
use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

use super::{Db, RequestStatus, StoreError, TurnKind, TurnStatus, now_ms};

/// A turn row: one provider turn (or its intent).
#[derive(Clone, Debug, Serialize)]
pub struct TurnRow {
    pub turn_row: i64,
    pub run_id: String,
    pub message_id: String,
    pub kind: TurnKind,
    /// The id sent as the provider's client message id.
    pub client_id: String,
    pub provider_turn_id: Option<String>,
    pub status: TurnStatus,
}

/// The turns of run `?1`, oldest first.
const TURNS_OF_RUN: &str =
    "SELECT turn_row, run_id, message_id, kind, client_id, provider_turn_id, status
     FROM turns WHERE run_id = ?1 ORDER BY turn_row";

impl Db {
    /// Turns of a run, oldest first.
    pub fn turns(&self, run_id: &str) -> Result<Vec<TurnRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(TURNS_OF_RUN)?;
        type Raw = (i64, String, String, String, String, Option<String>, String);
        let rows: Vec<Raw> = stmt
            .query_map(params![run_id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect::<Result<_, _>>()?;
        rows.into_iter()
            .map(
                |(turn_row, run_id, message_id, kind, client_id, provider_turn_id, status)| {
                    Ok(TurnRow {
                        turn_row,
                        run_id,
                        message_id,
                        kind: kind.parse()?,
                        client_id,
                        provider_turn_id,
                        status: status.parse()?,
                    })
                },
            )
            .collect()
    }
    /// Records a turn intent: the message is consumed here, exactly once for
    /// a primary turn (a unique index enforces it inside the write).
    pub fn turn_intent(
        &mut self,
        task_id: &str,
        run_id: &str,
        message_id: &str,
        kind: TurnKind,
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
                tx.exec_cached(
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
                tx.exec_cached(
                    "UPDATE turns SET provider_turn_id = ?2, status = 'accepted' WHERE turn_row = ?1",
                    params![turn_row, provider_turn_id],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records that the provider has no such turn (`turn.absent_at_provider`
    /// with `data`) and sets the turn back to an intent, in one
    /// transaction: its message is about to be sent, and a runner stopped
    /// before that send's acceptance is durable must look the turn up by its
    /// client id, as any intent, and not by the id of a turn the provider
    /// never recorded, which it would find absent again and send the
    /// message a second time. (A turn that was only an intent stays one.)
    pub fn turn_absent(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        data: Value,
    ) -> Result<(), StoreError> {
        self.event_in(
            "turn_absent",
            task_id,
            Some(run_id),
            "turn.absent_at_provider",
            data,
            |tx| {
                tx.exec_cached(
                    "UPDATE turns SET provider_turn_id = NULL, status = 'intent' WHERE turn_row = ?1",
                    params![turn_row],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Records a turn's end (`completed`, `interrupted`, `failed`). The
    /// event's `status` is the turn's unless `data` already says one (the
    /// text a provider ended the turn with, kept as it said it).
    pub fn turn_finished(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        status: TurnStatus,
        data: Value,
    ) -> Result<(), StoreError> {
        let mut data = data;
        data["turn_row"] = serde_json::json!(turn_row);
        if data.get("status").is_none() {
            data["status"] = serde_json::json!(status);
        }
        let kind = if status == TurnStatus::Completed {
            "turn.finished"
        } else {
            "turn.failed"
        };
        self.event_in("turn_ended", task_id, Some(run_id), kind, data, |tx| {
            tx.exec_cached(
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
        let message_id: String = self.conn.row_cached(
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
            tx.exec_cached(
                "UPDATE turns SET status = 'interrupted' WHERE turn_row = ?1",
                params![lost_row],
            )?;
            tx.exec_cached(
                "INSERT INTO turns(run_id, task_id, message_id, kind, client_id, status, created_ms)
                 VALUES (?1, ?2, ?3, 'continuation', ?4, 'intent', ?5)",
                params![run_id, task_id, message_id, client_id, now_ms()],
            )?;
            row = tx.last_insert_rowid();
            Ok(())
        })?;
        Ok(row)
    }
    /// The cause a settled turn `turn_row` of the task ended with, as its
    /// `turn.failed` event recorded it: the run's cause when the runner
    /// stopped before settling the run. `None` for a turn that ended
    /// without one (completed, or marked lost for its continuation).
    pub fn ended_turn_cause(
        &self,
        task_id: &str,
        turn_row: i64,
    ) -> Result<Option<crate::causes::Cause>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT data FROM events WHERE task_id = ?1 AND kind = 'turn.failed'
             ORDER BY seq DESC",
        )?;
        let rows = stmt.query_map(params![task_id], |r| r.get::<_, String>(0))?;
        for data in rows {
            let data: Value = serde_json::from_str(&data?).unwrap_or(Value::Null);
            if data["turn_row"].as_i64() == Some(turn_row) {
                return Ok(serde_json::from_value(data["cause"].clone()).ok());
            }
        }
        Ok(None)
    }

    /// The provider's ids of the task's turns before `turn_row` that it
    /// accepted, oldest first.
    pub fn accepted_before(&self, task_id: &str, turn_row: i64) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT provider_turn_id FROM turns WHERE task_id = ?1 AND turn_row < ?2
             AND provider_turn_id IS NOT NULL ORDER BY turn_row",
        )?;
        let ids = stmt
            .query_map(params![task_id, turn_row], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    /// Whether the runner holds output of turn `turn_row` (with `None`: of
    /// any turn of run `run_id`): an item the provider completed or a
    /// request it made. Either proves a model saw the turn's message, so a
    /// provider with no record of that turn lost it (a power cut takes the
    /// tail of an unsynced log); it did not "reach no model".
    pub fn output_held(
        &self,
        task_id: &str,
        run_id: &str,
        turn_row: Option<i64>,
    ) -> Result<bool, StoreError> {
        let held: bool = self.conn.row_cached(
            "SELECT EXISTS(SELECT 1 FROM events WHERE task_id = ?1 AND run_id = ?2
               AND kind IN ('item.completed', 'provider_request')
               AND (?3 IS NULL OR json_extract(data, '$.turn_row') = ?3))",
            params![task_id, run_id, turn_row],
            |r| r.get(0),
        )?;
        Ok(held)
    }

    /// Unanswered provider requests of a turn.
    pub fn pending_requests(&self, turn_row: i64) -> Result<usize, StoreError> {
        let n: i64 = self.conn.row_cached(
            "SELECT count(*) FROM provider_requests WHERE turn_row = ?1 AND status != 'answered'",
            params![turn_row],
            |r| r.get(0),
        )?;
        Ok(n as usize)
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
        status: RequestStatus,
        decision: Option<&str>,
        item_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let (request_id, method, decision) = (
            request_id.to_owned(),
            method.to_owned(),
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
            tx.exec_cached(
                "INSERT INTO provider_requests(turn_row, request_id, method, status, decision)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(turn_row, request_id) DO UPDATE SET status = excluded.status, decision = excluded.decision",
                params![turn_row, request_id, method, status, decision],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// The ACP tool calls (`toolCallId`) of turn `turn_row` with an
    /// `item.completed` in the run log: the ones the runner saw end.
    pub fn completed_tools(&self, task_id: &str, turn_row: i64) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT DISTINCT json_extract(data, '$.item.toolCallId') FROM events
             WHERE task_id = ?1 AND kind = 'item.completed'
               AND json_extract(data, '$.turn_row') = ?2
               AND json_extract(data, '$.item.toolCallId') IS NOT NULL",
        )?;
        let tools = stmt
            .query_map(params![task_id, turn_row], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(tools)
    }

    /// The items (Codex commands) of turn `turn_row` whose approval was
    /// answered `accept` and that have no `item.completed` in the run log:
    /// commands that may have run without the runner seeing their end.
    pub fn approved_items_unfinished(
        &self,
        task_id: &str,
        turn_row: i64,
    ) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
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
}

/// The read of the seeded bug `lookup-error-as-absent`.
#[cfg(feature = "seeded-bugs")]
impl Db {
    /// Whether a failed lookup of turn `turn_row` was recorded as "absent"
    /// (a `turn.absent_at_provider` event with `lookup_failed`).
    pub fn seeded_absent_marked(&self, turn_row: i64) -> Result<bool, StoreError> {
        let n: i64 = self.conn.row_cached(
            "SELECT count(*) FROM events WHERE kind = 'turn.absent_at_provider'
             AND json_extract(data, '$.turn_row') = ?1
             AND json_extract(data, '$.lookup_failed') IS NOT NULL",
            params![turn_row],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    }
}

impl super::Store {
    /// `lookup-error-as-absent`'s second half: whether a failed lookup of
    /// turn `turn_row` was recorded as "absent" (the runner then trusts it
    /// and skips the lookup). Always `false` without the feature.
    pub async fn seeded_absent_trusted(&self, turn_row: i64) -> bool {
        #[cfg(feature = "seeded-bugs")]
        if crate::seeded::lookup_error_as_absent() {
            return self
                .call(move |db| db.seeded_absent_marked(turn_row))
                .await
                .unwrap_or(false);
        }
        let _ = turn_row;
        false
    }
}

#[cfg(test)]
mod tests {
    use crate::store::{Store, TurnKind, TurnStatus};

    /// A kept statement is planned once: reading the turns of one run, then
    /// of others, runs the same prepared statement (without the query
    /// planner stability guarantee, the partial indexes of `turns` made
    /// SQLite prepare it again for every new run id: 3 times here).
    #[test]
    fn the_turns_of_other_runs_are_read_without_preparing_the_statement_again() {
        let dir = tempfile::tempdir().unwrap();
        let (store, epoch) = Store::open(dir.path()).unwrap();
        let reprepared = store
            .call_blocking(move |db| {
                db.admit("t1", "m1", "hello", "p", "/ws", "run-1", epoch)?;
                db.turn_intent("t1", "run-1", "m1", TurnKind::Primary, "m1")?;
                for run in ["run-1", "run-2", "run-1", "run-3"] {
                    db.turns(run)?;
                }
                let stmt = db.conn().prepare_cached(super::TURNS_OF_RUN)?;
                Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
            })
            .unwrap();
        assert_eq!(reprepared, 0);
    }

    #[test]
    fn a_second_active_turn_in_one_run_is_rejected_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let first = store
            .call_blocking(|db| db.turn_intent("t1", "run-1", "m1", TurnKind::Primary, "m1"))
            .unwrap();
        let events_before = store.call_blocking(|db| db.events("t1", 0, 100)).unwrap();
        // A concurrent turn on the same run: refused by the store itself.
        let second =
            store.call_blocking(|db| db.turn_intent("t1", "run-1", "f1", TurnKind::Primary, "f1"));
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
                db.turn_finished(
                    "t1",
                    "run-1",
                    first,
                    TurnStatus::Completed,
                    serde_json::json!({}),
                )
            })
            .unwrap();
        store
            .call_blocking(|db| db.turn_intent("t1", "run-1", "f1", TurnKind::Primary, "f1"))
            .unwrap();
    }

    /// An accepted turn the provider never recorded is an intent again in
    /// the write that says so: a runner stopped before the message's next
    /// acceptance finds an intent, looked up by its client id, and not the
    /// acceptance of a turn the provider never had (which it would find
    /// absent again, and send the message a second time).
    #[test]
    fn an_absent_accepted_turn_is_an_intent_again_in_the_same_write() {
        let dir = tempfile::tempdir().unwrap();
        let (store, epoch) = Store::open(dir.path()).unwrap();
        store
            .call_blocking(move |db| {
                db.admit("t1", "m1", "hello", "p", "/ws", "run-1", epoch)?;
                let row = db.turn_intent("t1", "run-1", "m1", TurnKind::Primary, "m1")?;
                db.turn_accepted("t1", "run-1", row, "turn-1")?;
                db.turn_absent(
                    "t1",
                    "run-1",
                    row,
                    serde_json::json!({ "message_id": "m1" }),
                )?;
                let turns = db.turns("run-1")?;
                assert_eq!(turns.len(), 1);
                assert_eq!(turns[0].status, TurnStatus::Intent);
                assert_eq!(turns[0].provider_turn_id, None);
                assert_eq!(turns[0].client_id, "m1");
                assert_eq!(db.accepted_before("t1", row + 1)?, Vec::<String>::new());
                Ok(())
            })
            .unwrap();
    }

    /// The output the runner holds of a turn: an item completed or a
    /// request made, of that turn (or, with no turn, of any turn of the
    /// run); an acceptance alone is not output.
    #[test]
    fn output_held_counts_items_and_requests_of_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let (store, epoch) = Store::open(dir.path()).unwrap();
        store
            .call_blocking(move |db| {
                db.admit("t1", "m1", "hello", "p", "/ws", "run-1", epoch)?;
                let row = db.turn_intent("t1", "run-1", "m1", TurnKind::Primary, "m1")?;
                db.turn_accepted("t1", "run-1", row, "turn-1")?;
                assert!(!db.output_held("t1", "run-1", Some(row))?);
                assert!(!db.output_held("t1", "run-1", None)?);
                let item = serde_json::json!({ "turn_row": row, "item": { "id": "i1" } });
                db.append("item", "t1", Some("run-1"), "item.completed", item)?;
                assert!(db.output_held("t1", "run-1", Some(row))?);
                assert!(db.output_held("t1", "run-1", None)?);
                assert!(!db.output_held("t1", "run-1", Some(row + 1))?);
                assert!(!db.output_held("t1", "run-2", None)?);
                Ok(())
            })
            .unwrap();
    }
}
