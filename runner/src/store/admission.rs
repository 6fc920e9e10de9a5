//! What enters a task: its admission with the prompt and first run, a
//! follow-up (queued, refused by the fence, or reopening a completed task)
//! and a Retry after the stop proof. Each is idempotent on its ids and
//! checks its bindings inside the write that would create them.

use super::cached::Cached as _;
use rusqlite::{OptionalExtension as _, params};
use serde_json::Value;

use super::{Db, MessageKind, StoreError, Task, TaskState, TurnStatus, now_ms};
use crate::causes::RetryBlock;

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

/// What a Retry delivers: the message it re-sends under its own id (kind
/// `Retry`, with that message's text), or nothing of its own (kind
/// `RetryResume`) so that the Retry run answers the queue; either way the
/// queued messages follow, in admission order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryDelivery {
    /// `Retry` or `RetryResume`.
    pub kind: MessageKind,
    /// The text the Retry sends (empty for `RetryResume`).
    pub text: String,
    /// The message whose text it re-sends: a Retry consumes it.
    pub resends: Option<String>,
    /// The queued messages the Retry run answers after it.
    pub queued: Vec<String>,
}

/// The rows of an admitted Retry: its message (kind and text, see
/// [`RetryDelivery`]) and its run, owned by `epoch`, created `now`.
fn insert_retry(
    tx: &rusqlite::Transaction<'_>,
    task_id: &str,
    message_id: &str,
    run_id: &str,
    (kind, text): (MessageKind, &str),
    (epoch, now): (i64, i64),
) -> Result<(), StoreError> {
    tx.exec_cached(
        "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
         VALUES (?1, ?2, ?3, ?4,
            (SELECT coalesce(max(ord), 0) + 1 FROM messages WHERE task_id = ?1), ?5)",
        params![task_id, message_id, kind, text, now],
    )?;
    tx.exec_cached(
        "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, owner_epoch, created_ms)
         VALUES (?1, ?2, 'retry', ?3, 'running', ?4, ?5)",
        params![run_id, task_id, message_id, epoch, now],
    )?;
    Ok(())
}

/// What [`Db::retry_gate`] decided.
enum RetryGate {
    /// The task failed closed: the Retry may be admitted.
    Open(Task),
    /// The answer, without a write.
    Answered(Result<String, RetryBlock>),
}

impl Db {
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
            let first: String = self.conn.row_cached(
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
            let run = self.run_triggered_by(task_id, message_id)?;
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
                tx.exec_cached(
                    "INSERT INTO tasks(task_id, profile, workspace, first_message_id, state, current_run, created_ms)
                     VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6)",
                    params![task_id, profile, workspace, message_id, run_id, now],
                )?;
                tx.exec_cached(
                    "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
                     VALUES (?1, ?2, 'prompt', ?3, 1, ?4)",
                    params![task_id, message_id, prompt, now],
                )?;
                tx.exec_cached(
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
            if m.kind == MessageKind::FollowUp && m.text == text {
                return Ok(FollowUpOutcome::Queued { new_run: None });
            }
            return Ok(FollowUpOutcome::Conflict(format!(
                "message {message_id} exists with other content"
            )));
        }
        // SEEDED BUG fence-reopens-failed: only a task that needs a human is
        // fenced; a follow-up reopens a failed task like a completed one.
        let reopens_failed =
            task.state == TaskState::Failed && crate::seeded::fence_reopens_failed();
        if matches!(task.state, TaskState::Failed | TaskState::NeedsHuman) && !reopens_failed {
            return self.refuse_fenced(task_id, task.current_run.as_deref(), message_id);
        }
        let now = now_ms();
        let conversation = match &task.current_run {
            Some(r) => self.run(r)?.and_then(|r| r.conversation_id),
            None => None,
        };
        let reopen = task.state == TaskState::Completed || reopens_failed;
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
                tx.exec_cached(
                    "INSERT INTO messages(task_id, message_id, kind, text, ord, created_ms)
                     VALUES (?1, ?2, 'follow_up', ?3,
                        (SELECT coalesce(max(ord), 0) + 1 FROM messages WHERE task_id = ?1), ?4)",
                    params![task_id, message_id, text, now],
                )?;
                if reopen {
                    tx.exec_cached(
                        "INSERT INTO runs(run_id, task_id, kind, trigger_message_id, status, conversation_id, owner_epoch, created_ms)
                         VALUES (?1, ?2, 'follow_up', ?3, 'running', ?4, ?5, ?6)",
                        params![new_run_id, task_id, message_id, conversation, epoch, now],
                    )?;
                    tx.exec_cached(
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

    /// Records the fence's refusal of follow-up `message_id` to a task that
    /// failed closed (the event is the refusal's only trace).
    fn refuse_fenced(
        &mut self,
        task_id: &str,
        current_run: Option<&str>,
        message_id: &str,
    ) -> Result<FollowUpOutcome, StoreError> {
        self.append(
            "fence_refusal",
            task_id,
            current_run,
            "prior_owner_fence_refused",
            serde_json::json!({
                "message_id": message_id,
                "reason": "prior_owner_fence_refused",
                "recoverable": false,
                "message": "the task failed closed; a follow-up cannot reopen it, use Retry",
            }),
        )?;
        Ok(FollowUpOutcome::Fenced)
    }

    /// Admits a Retry run after the stop proof: records
    /// `stopped_conversation_verified`, the Retry message (what it re-sends
    /// under the Retry's id, see [`Db::retry_delivery`]) and a fresh run.
    pub fn admit_retry(
        &mut self,
        task_id: &str,
        message_id: &str,
        run_id: &str,
        epoch: i64,
        proof: Value,
    ) -> Result<Result<String, RetryBlock>, StoreError> {
        let task = match self.retry_gate(task_id, message_id)? {
            RetryGate::Open(task) => task,
            RetryGate::Answered(answer) => return Ok(answer),
        };
        let delivery = self.retry_delivery(task_id)?;
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
            "resends": delivery.resends.is_some(),
            "resends_message": delivery.resends,
            "delivers": delivery.queued,
        });
        let (kind, text) = (delivery.kind, delivery.text);
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
                insert_retry(tx, task_id, message_id, run_id, (kind, &text), (epoch, now))?;
                #[cfg(feature = "seeded-bugs")]
                if let Some(conversation) = &reused {
                    tx.exec_cached(
                        "UPDATE runs SET conversation_id = ?2 WHERE run_id = ?1",
                        params![run_id, conversation],
                    )?;
                }
                // SEEDED BUG retry-current-in-second-write: the Retry run
                // becomes the task's current run in a write of its own
                // (`Db::retry_current`, after `runner.retry_admitted.persisted`).
                if !crate::seeded::retry_current_in_second_write() {
                    tx.exec_cached(
                        "UPDATE tasks SET state = 'running', cause = NULL, current_run = ?2 WHERE task_id = ?1",
                        params![task_id, run_id],
                    )?;
                }
                Ok(())
            },
        )?;
        Ok(Ok(run_id.to_owned()))
    }

    /// The second write of the seeded bug `retry-current-in-second-write`:
    /// the admitted Retry run becomes the task's current run.
    #[cfg(feature = "seeded-bugs")]
    pub fn retry_current(&mut self, task_id: &str, run_id: &str) -> Result<(), StoreError> {
        self.event_in(
            "retry_current",
            task_id,
            Some(run_id),
            "retry.current",
            serde_json::json!({ "run_id": run_id }),
            |tx| {
                tx.exec_cached(
                    "UPDATE tasks SET state = 'running', cause = NULL, current_run = ?2 WHERE task_id = ?1",
                    params![task_id, run_id],
                )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// Whether Retry `message_id` may be admitted: the same Retry again
    /// answers its run, another message's id or a task that is active or
    /// completed is refused, and a task that failed (or needs a human) is
    /// open to it.
    fn retry_gate(&self, task_id: &str, message_id: &str) -> Result<RetryGate, StoreError> {
        let Some(task) = self.task(task_id)? else {
            return Ok(RetryGate::Answered(Err(RetryBlock::NothingToRetry)));
        };
        if let Some(m) = self.message(task_id, message_id)? {
            if matches!(m.kind, MessageKind::Retry | MessageKind::RetryResume) {
                let run = self.run_triggered_by(task_id, message_id)?;
                return Ok(RetryGate::Answered(Ok(run)));
            }
            return Ok(RetryGate::Answered(Err(RetryBlock::NothingToRetry)));
        }
        Ok(match task.state {
            TaskState::Failed | TaskState::NeedsHuman => RetryGate::Open(task),
            TaskState::Queued | TaskState::Running => {
                RetryGate::Answered(Err(RetryBlock::ExecutionActive))
            }
            TaskState::Completed => RetryGate::Answered(Err(RetryBlock::NothingToRetry)),
        })
    }

    /// The run that message `message_id` started.
    fn run_triggered_by(&self, task_id: &str, message_id: &str) -> Result<String, StoreError> {
        Ok(self.conn.row_cached(
            "SELECT run_id FROM runs WHERE task_id = ?1 AND trigger_message_id = ?2",
            params![task_id, message_id],
            |r| r.get(0),
        )?)
    }

    /// What a Retry of the task would deliver now (see [`RetryDelivery`]).
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
    pub fn retry_delivery(&self, task_id: &str) -> Result<RetryDelivery, StoreError> {
        let latest = self.latest_primary(task_id)?;
        let queue = self.queue(task_id)?;
        let waiting = !queue.is_empty();
        // An earlier Retry that never ran is superseded by this one (see
        // `Db::queue`): this one re-sends what it would have, so its run
        // delivers it under no id of its own and names it nowhere.
        let queued: Vec<String> = queue
            .into_iter()
            .filter(|m| m.kind != MessageKind::Retry)
            .map(|m| m.message_id)
            .collect();
        let resend = |(id, text): (String, String)| RetryDelivery {
            kind: MessageKind::Retry,
            text,
            resends: Some(id),
            queued: queued.clone(),
        };
        // SEEDED BUG retry-resends-queued: a queued message does not stop
        // the re-send, so a prompt no turn ever took runs under the Retry's
        // id and again under its own.
        let queue_first = waiting && !crate::seeded::retry_resends_queued();
        Ok(match latest {
            Some((id, text, status)) if status != TurnStatus::Completed => resend((id, text)),
            _ if queue_first => RetryDelivery {
                kind: MessageKind::RetryResume,
                text: String::new(),
                resends: None,
                queued,
            },
            Some((id, text, _)) => resend((id, text)),
            None => resend(self.conn.row_cached(
                "SELECT message_id, text FROM messages WHERE task_id = ?1 ORDER BY ord LIMIT 1",
                params![task_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?),
        })
    }

    /// The latest primary turn's message: its id, text and the status of
    /// that message's last turn (a continuation's, when it had one).
    pub(super) fn latest_primary(
        &self,
        task_id: &str,
    ) -> Result<Option<(String, String, TurnStatus)>, StoreError> {
        // SEEDED BUG retry-decides-by-primary-turn: "was it answered?" is
        // read from the primary turn, so a message whose lost turn was
        // continued to completion counts as unanswered and is re-sent.
        let last_turn = if crate::seeded::retry_decides_by_primary_turn() {
            "t.status"
        } else {
            "(SELECT l.status FROM turns l
               WHERE l.task_id = t.task_id AND l.message_id = t.message_id
               ORDER BY l.turn_row DESC LIMIT 1)"
        };
        let latest: Option<(String, String, String)> = self
            .conn
            .row_cached(
                &format!(
                    "SELECT m.message_id, m.text, {last_turn}
                     FROM turns t JOIN messages m
                       ON m.task_id = t.task_id AND m.message_id = t.message_id
                     WHERE t.task_id = ?1 AND t.kind = 'primary'
                     ORDER BY t.turn_row DESC LIMIT 1"
                ),
                params![task_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        latest
            .map(|(id, text, status)| Ok((id, text, status.parse::<TurnStatus>()?)))
            .transpose()
    }
}
