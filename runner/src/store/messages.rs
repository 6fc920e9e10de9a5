//! Messages: the prompt, follow-ups and Retries of a task, in admission
//! order, and the queue of those no primary turn has taken yet.

use super::cached::Cached as _;
use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;

use super::{Db, MessageKind, StoreError};

/// The kind of a Retry message that re-sends nothing: the failure came
/// before the turn of a queued message, and the Retry run answers the queue
/// (see [`Db::admit_retry`]).
pub const RETRY_RESUME: &str = MessageKind::RetryResume.as_str();

/// A message row.
#[derive(Clone, Debug, Serialize)]
pub struct Message {
    pub message_id: String,
    pub kind: MessageKind,
    pub text: String,
}

impl Message {
    /// A row read as `(message_id, kind, text)`; an unknown kind is corrupt.
    fn parse((message_id, kind, text): (String, String, String)) -> Result<Message, StoreError> {
        Ok(Message {
            message_id,
            kind: kind.parse()?,
            text,
        })
    }
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
        let rows: Vec<(String, String, String)> = stmt
            .query_map(params![task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        rows.into_iter().map(Message::parse).collect()
    }
    /// A message by id.
    pub fn message(&self, task_id: &str, message_id: &str) -> Result<Option<Message>, StoreError> {
        self.conn
            .row_cached(
                "SELECT message_id, kind, text FROM messages WHERE task_id = ?1 AND message_id = ?2",
                params![task_id, message_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?
            .map(Message::parse)
            .transpose()
    }
}
