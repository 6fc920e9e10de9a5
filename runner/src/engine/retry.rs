//! The Retry request: a failed task gets a fresh run after the stop proof
//! of every provider process it ever had.
//!
//! It runs on the API's request, not on the task's actor: the actor of a
//! settled task only waits to be woken, and the admitted run wakes it. The
//! proof and the admission are one durable write (`Db::admit_retry`), so a
//! refused or failed Retry changed nothing. Its reads are tried again as
//! the actor's are (`Engine::read_tried`): a Retry fails 503 only when a
//! read fails every try.

use std::sync::Arc;

use serde_json::json;

use super::Engine;
use crate::causes::RetryBlock;
use crate::ids::new_id;
use crate::store::{StoreError, TaskState};
use crate::supervisor::StopOutcome;

/// Outcome of a Retry request.
pub enum RetryOutcome {
    /// Admitted: the new run.
    Admitted { run_id: String },
    /// Refused with a listed reason.
    Blocked(RetryBlock),
    /// No such task.
    UnknownTask,
}

impl Engine {
    /// Handles a Retry: verifies that the previous owner's providers are
    /// stopped, records the proof, and admits a fresh run.
    pub async fn retry(
        self: &Arc<Self>,
        task_id: &str,
        message_id: &str,
    ) -> Result<RetryOutcome, StoreError> {
        let tid = task_id.to_owned();
        let snap = self
            .read_tried("the task", move |db| db.snapshot(&tid))
            .await?;
        let Some(snap) = snap else {
            return Ok(RetryOutcome::UnknownTask);
        };
        let (tid, mid) = (task_id.to_owned(), message_id.to_owned());
        let existing = self
            .read_tried("the Retry's message", move |db| {
                db.check_read("message")?;
                db.message(&tid, &mid)
            })
            .await?;
        // SEEDED BUG resent-retry-refused: the same Retry again is judged as
        // a new one, so its own active run refuses it.
        if existing.is_some() && !crate::seeded::resent_retry_refused() {
            // The same Retry again (or a reused id): the store answers it
            // without a new proof and without touching any process.
            return self.admit(task_id, message_id, json!(null)).await;
        }
        match snap.task.state {
            TaskState::Queued | TaskState::Running => {
                return Ok(RetryOutcome::Blocked(RetryBlock::ExecutionActive));
            }
            TaskState::Completed => return Ok(RetryOutcome::Blocked(RetryBlock::NothingToRetry)),
            TaskState::Failed | TaskState::NeedsHuman => {}
        }
        // The stop proof: every provider process the task ever had is gone.
        let mut proofs = Vec::new();
        for p in &snap.live_procs {
            match self.stop_old(task_id, p).await? {
                Ok(proof) => proofs.push(proof),
                Err(StopOutcome::StillRunning { .. }) => {
                    return Ok(RetryOutcome::Blocked(RetryBlock::ProcessRunning));
                }
                Err(_) => return Ok(RetryOutcome::Blocked(RetryBlock::CleanupQuarantined)),
            }
        }
        let proof = json!({
            "previous_run": snap.task.current_run,
            "conversation_id": snap.run.as_ref().and_then(|r| r.conversation_id.clone()),
            "stopped_now": proofs,
            "verified": "every provider process of the task has a stop proof",
        });
        let admitted = self.admit(task_id, message_id, proof).await?;
        crate::cut::persisted("retry_admitted");
        #[cfg(feature = "seeded-bugs")]
        if let RetryOutcome::Admitted { run_id } = &admitted
            && crate::seeded::retry_current_in_second_write()
        {
            let (tid, rid) = (task_id.to_owned(), run_id.clone());
            self.store
                .call(move |db| db.retry_current(&tid, &rid))
                .await?;
        }
        if let RetryOutcome::Admitted { .. } = admitted {
            self.wake(task_id);
        }
        Ok(admitted)
    }

    /// The admission write with its proof (`null` for a Retry already
    /// admitted, which the store answers as before).
    async fn admit(
        &self,
        task_id: &str,
        message_id: &str,
        proof: serde_json::Value,
    ) -> Result<RetryOutcome, StoreError> {
        let (tid, mid, rid, epoch) = (
            task_id.to_owned(),
            message_id.to_owned(),
            new_id("run"),
            self.opts.epoch,
        );
        let admitted = self
            .store
            .call(move |db| db.admit_retry(&tid, &mid, &rid, epoch, proof))
            .await?;
        Ok(match admitted {
            Ok(run_id) => RetryOutcome::Admitted { run_id },
            Err(block) => RetryOutcome::Blocked(block),
        })
    }
}
