//! Runs: one execution of a task (initial, follow-up or Retry) and the
//! provider conversation it holds.

use super::cached::Cached as _;
use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;

use super::tasks::parse_cause;
use super::{Db, RunKind, RunStatus, StoreError};
use crate::causes::Cause;

/// A run row.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub run_id: String,
    pub task_id: String,
    pub kind: RunKind,
    /// The message that started the run.
    pub trigger_message_id: String,
    pub status: RunStatus,
    pub cause: Option<Cause>,
    pub conversation_id: Option<String>,
    pub owner_epoch: i64,
    pub created_ms: i64,
}

impl Db {
    /// Loads a run.
    pub fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        let row = self
            .conn
            .row_cached(
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
                    kind: kind.parse()?,
                    trigger_message_id,
                    status: status.parse()?,
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
                tx.exec_cached(
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
                tx.exec_cached(
                    "UPDATE runs SET conversation_id = NULL WHERE run_id = ?1",
                    params![run_id],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }
}
