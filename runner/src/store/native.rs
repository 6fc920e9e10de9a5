//! Native checkpoints: the allowlisted JSON of a native turn
//! (`native::checkpoint::Checkpoint`), one row per turn, saved with the
//! run-log event of the boundary it passed.

use super::cached::Cached as _;
use rusqlite::{OptionalExtension as _, params};
use serde_json::Value;

use super::{Db, StoreError};

impl Db {
    /// The native checkpoint of a turn, if any.
    pub fn native_checkpoint(&self, turn_row: i64) -> Result<Option<Value>, StoreError> {
        let text: Option<String> = self
            .conn
            .row_cached(
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

    /// A native turn's acceptance and its first checkpoint (the user
    /// message as the turn's first history item), in one transaction: the
    /// turn is accepted exactly when the message is durable where the model
    /// reads it from. Written apart, a failed checkpoint left a turn
    /// accepted whose message no model would ever see, and its run failed
    /// without naming it among the messages it strands (found by a
    /// generated workflow: a follow-up injected at
    /// `runner.conversation.persisted`, then a failed checkpoint write).
    pub fn native_accept(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        provider_turn_id: &str,
        conversation: &str,
        checkpoint: Value,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(&checkpoint).expect("checkpoints serialize");
        let conversation = conversation.to_owned();
        let provider_turn_id = provider_turn_id.to_owned();
        let events = vec![
            (
                Some(run_id),
                "turn.accepted",
                serde_json::json!({ "turn_row": turn_row, "provider_turn_id": provider_turn_id }),
            ),
            (
                Some(run_id),
                "native.checkpoint",
                serde_json::json!({ "turn_row": turn_row }),
            ),
        ];
        self.events_in("native_checkpoint", task_id, events, move |tx| {
            tx.exec_cached(
                "UPDATE turns SET provider_turn_id = ?2, status = 'accepted' WHERE turn_row = ?1",
                params![turn_row, provider_turn_id],
            )?;
            tx.exec_cached(
                "INSERT INTO native_checkpoints(turn_row, conversation, checkpoint) VALUES (?1, ?2, ?3)
                 ON CONFLICT(turn_row) DO UPDATE SET checkpoint = excluded.checkpoint",
                params![turn_row, conversation, text],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// Writes a native turn's checkpoint (the allowlisted JSON of
    /// `native::checkpoint::Checkpoint`) with its run-log event; `write` names
    /// the boundary (`model_output`, `tool_executing`, `tool_outcome`, …).
    /// A turn's first checkpoint is written with its acceptance
    /// ([`Db::native_accept`]): for the native profile the runner's own
    /// store is the provider's record.
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
            tx.exec_cached(
                "INSERT INTO native_checkpoints(turn_row, conversation, checkpoint) VALUES (?1, ?2, ?3)
                 ON CONFLICT(turn_row) DO UPDATE SET checkpoint = excluded.checkpoint",
                params![turn_row, conversation, text],
            )?;
            Ok(())
        })?;
        Ok(())
    }
}
