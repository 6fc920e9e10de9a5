//! Messages: the prompt, follow-ups and Retries of a task, in admission
//! order, and the queue of those no primary turn has taken yet.

use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;

use super::{Db, StoreError};

/// The kind of a Retry message that re-sends nothing: the failure came
/// before the turn of a queued message, and the Retry run answers the queue
/// (see [`Db::admit_retry`]).
pub const RETRY_RESUME: &str = "retry_resume";

/// A message row.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    pub message_id: String,
    /// `prompt`, `follow_up` or `retry`.
    pub kind: String,
    pub text: String,
}

impl Db {
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
}
