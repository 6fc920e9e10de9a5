//! The task's actor: the loop that reads the durable snapshot and takes one
//! step at a time, and the settling of a step's error.
//!
//! A step does one thing and returns: start a provider, open a
//! conversation, recover a cut turn, play the next message's turn, or
//! settle the run when nothing is left. The actor then reads the snapshot
//! again, so every decision is made from what is durable.
//!
//! The actor does not end while its task is unsettled: a failed read is
//! tried again after a pause and settles the run `storage_failed` after
//! [`READ_TRIES`] (`read_failed`), an outcome that could not be recorded
//! is started over (`pause_record`), and a task unsettled with no run is
//! settled with a cause. It returns only for a task that does not exist,
//! through `Engine::retire`, so a wake is never sent into the channel of an
//! actor that is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::provider::Live;
use super::{Engine, PROVIDER_LOSSES_MAX, StepError, driver_err};
use crate::causes::{Cause, CauseCode, ContractEvent};
use crate::driver::DriverError;
use crate::store::{Message, Run, Snapshot, StoreError, TaskState, TurnKind, TurnRow, TurnStatus};

/// First and longest pause before a task whose outcome could not be
/// recorded starts over from its durable state (doubling in between).
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(50);
const RECORD_RETRY_MAX: Duration = Duration::from_secs(5);

/// How many times in a row a read may fail before the run fails
/// `storage_failed` (`docs/recovery-contract.md`, "Read faults"), and the
/// pause before the second try (doubling: 50, 100, 200, 400 ms).
pub(super) const READ_TRIES: u32 = 5;
pub(super) const READ_RETRY_FIRST: Duration = Duration::from_millis(50);

/// How the actor's tries are going: the pause before starting over after
/// an outcome that could not be recorded, and the reads that failed in a
/// row (no step has completed since).
struct Tries {
    record_retry: Duration,
    reads_failed: u32,
}

impl Engine {
    /// The task's actor. It returns only when the task does not exist, and
    /// then through [`Engine::retire`]: whatever a read or a step returns,
    /// an unsettled task keeps its actor or is settled with a cause.
    pub(super) async fn actor(
        self: Arc<Self>,
        task_id: String,
        mut wake: mpsc::UnboundedReceiver<()>,
    ) {
        let mut live: Option<Live> = None;
        let mut losses: HashMap<String, u32> = HashMap::new();
        let mut tries = Tries {
            record_retry: RECORD_RETRY_FIRST,
            reads_failed: 0,
        };
        loop {
            let tid = task_id.clone();
            let read = self.store.call(move |db| db.snapshot(&tid)).await;
            let snap = match read {
                Ok(Some(s)) => s,
                Ok(None) if self.retire(&task_id, &mut wake) => return,
                Ok(None) => continue,
                Err(e) if crate::seeded::actor_returns_on_failed_read() => {
                    // SEEDED BUG actor-returns-on-failed-read: the actor
                    // ends on a failed read, leaving the task running with
                    // no one to run it (runnerd's own behaviour until this
                    // round).
                    tracing::error!(task = %task_id, "failed to read the task: {e}");
                    return;
                }
                Err(e) => {
                    // Settled without a snapshot to say so: wait for a wake,
                    // as for any settled task.
                    if self.read_failed(&task_id, e, &mut tries, &mut live).await
                        && wake.recv().await.is_none()
                    {
                        return;
                    }
                    continue;
                }
            };
            if snap.task.state.settled() {
                self.stop_settled(&task_id, &mut live).await;
                if wake.recv().await.is_none() {
                    return;
                }
                continue;
            }
            let Some(run) = snap.run.clone() else {
                // Only a corrupt store holds an unsettled task with no run:
                // it is settled with a cause, never left running with no
                // one to run it.
                let cause = Cause::new(
                    CauseCode::StorageFailed,
                    "the store holds the task unsettled with no run (a corrupt store); nothing was sent",
                );
                if !self.settle_unread(&task_id, cause, &mut live).await {
                    self.pause_record(&task_id, &mut tries).await;
                }
                continue;
            };
            self.step_and_settle(&snap, &run, &mut live, &mut losses, &mut tries)
                .await;
        }
    }

    /// One step of the running task `snap`, and its error applied. A failed
    /// read goes to [`Engine::read_failed`]; an outcome that could not be
    /// recorded, to [`Engine::pause_record`].
    async fn step_and_settle(
        &self,
        snap: &Snapshot,
        run: &Run,
        live: &mut Option<Live>,
        losses: &mut HashMap<String, u32>,
        tries: &mut Tries,
    ) {
        let task_id = &snap.task.task_id;
        if live.as_ref().is_some_and(|l| l.run_id != run.run_id)
            && let Some(l) = live.take()
        {
            let _ = self.stop_live(task_id, l).await;
        }
        let outcome = self.step(snap, run, live).await;
        if let Err(StepError::Read(e)) = outcome {
            self.read_failed(task_id, e, tries, live).await;
            return;
        }
        tries.reads_failed = 0;
        if self
            .settle_step_error(task_id, run, outcome, live, losses)
            .await
        {
            tries.record_retry = RECORD_RETRY_FIRST;
            return;
        }
        self.pause_record(task_id, tries).await;
    }

    /// A read failed (`e`) and nothing was sent after it. Below
    /// [`READ_TRIES`] failed reads in a row, the actor pauses (50 ms,
    /// doubling) and reads the task again, keeping its provider: a read
    /// changes nothing, so trying it again is safe, and a disk that failed
    /// one read often serves the next. At the last try the run fails
    /// `storage_failed`, its provider stopped with proof first
    /// ([`Engine::settle_unread`]). Returns whether the task is settled now.
    async fn read_failed(
        &self,
        task_id: &str,
        e: StoreError,
        tries: &mut Tries,
        live: &mut Option<Live>,
    ) -> bool {
        tries.reads_failed += 1;
        let n = tries.reads_failed;
        tracing::warn!(task = %task_id, "a read failed ({e}); try {n} of {READ_TRIES}");
        if n < READ_TRIES {
            tokio::time::sleep(READ_RETRY_FIRST * 2u32.pow(n - 1)).await;
            return false;
        }
        let cause = Cause::new(
            CauseCode::StorageFailed,
            format!(
                "a read of the store failed {n} times in a row (the last: {e}); nothing was sent after it"
            ),
        );
        if self.settle_unread(task_id, cause, live).await {
            tries.reads_failed = 0;
            return true;
        }
        self.pause_record(task_id, tries).await;
        false
    }

    /// Settles the task failed with `cause` without a snapshot to decide
    /// from: its provider stopped first (one that cannot be proven stopped
    /// settles it `needs_human` with the quarantine's cause instead), then
    /// `Db::settle_unread`, which leaves a task already settled as it is.
    /// False when the outcome could not be written.
    async fn settle_unread(&self, task_id: &str, cause: Cause, live: &mut Option<Live>) -> bool {
        let mut cause = cause;
        if let Some(l) = live.take()
            && let Err(StepError::Fail(q)) = self.stop_live(task_id, l).await
        {
            cause = q;
        }
        let state = if cause.code == CauseCode::CleanupQuarantined {
            TaskState::NeedsHuman
        } else {
            TaskState::Failed
        };
        let tid = task_id.to_owned();
        match self
            .store
            .call(move |db| db.settle_unread(&tid, state, cause))
            .await
        {
            Ok(settled) => {
                if settled {
                    crate::cut::persisted("run_settled");
                }
                true
            }
            Err(e) => {
                tracing::error!(task = %task_id, "failed to record the run's outcome: {e}");
                false
            }
        }
    }

    /// A settled task keeps no provider; the proof is recorded. Without one,
    /// its process stays in the store unproven and blocks a Retry until a
    /// later stop proves it.
    async fn stop_settled(&self, task_id: &str, live: &mut Option<Live>) {
        if let Some(l) = live.take()
            && let Err(e) = self.stop_live(task_id, l).await
        {
            tracing::warn!(task = %task_id, "a settled task's provider: {e}");
        }
    }

    /// The outcome could not be recorded (its provider is stopped): the
    /// store still holds the run as it was before the failed write. The
    /// actor starts over from it after a pause (50 ms, doubling to 5 s), as
    /// a restarted runner would; ending the actor here left the task
    /// running with no one to run it until a restart (a write that failed
    /// once, then the write of its `storage_failed`). A full disk fails
    /// every try the same way, and nothing is sent meanwhile.
    async fn pause_record(&self, task_id: &str, tries: &mut Tries) {
        let pause = tries.record_retry;
        tracing::warn!(task = %task_id, "starting over from the durable state in {pause:?}");
        tokio::time::sleep(pause).await;
        tries.record_retry = (pause * 2).min(RECORD_RETRY_MAX);
    }

    /// Applies a step's error to the run: a failure settles it, a lost
    /// provider is recorded and replaced (or fails the run past
    /// [`PROVIDER_LOSSES_MAX`]), a failed write is `storage_failed`. A
    /// provider that cannot be proven stopped while any of that is recorded
    /// settles the task `needs_human` with the quarantine's cause, never
    /// leaving it `running` without an actor. Returns false when the
    /// outcome could not be recorded (the store itself failed).
    async fn settle_step_error(
        &self,
        task_id: &str,
        run: &Run,
        outcome: Result<(), StepError>,
        live: &mut Option<Live>,
        losses: &mut HashMap<String, u32>,
    ) -> bool {
        let recorded = match outcome {
            Ok(()) => return true,
            Err(StepError::Fail(cause)) => self.fail(task_id, run, cause, live).await,
            Err(StepError::Lost(err)) => {
                let n = losses.entry(run.run_id.clone()).or_insert(0);
                *n += 1;
                if *n > PROVIDER_LOSSES_MAX {
                    let cause = Cause::new(
                        CauseCode::ProviderStartFailed,
                        format!("the provider was lost {n} times in this run; last: {err}"),
                    );
                    self.fail(task_id, run, cause, live).await
                } else {
                    self.provider_lost(task_id, run, err, live).await
                }
            }
            // A failed read is the actor's (`read_failed`); one that reaches
            // here is settled like a failed write.
            Err(StepError::Storage(e) | StepError::Read(e)) => {
                tracing::error!(task = %task_id, "storage failed: {e}");
                let cause = Cause::new(
                    CauseCode::StorageFailed,
                    format!("a durable write failed ({e}); nothing was sent after it"),
                );
                self.fail(task_id, run, cause, live).await
            }
        };
        let settled = match recorded {
            Ok(()) => return true,
            // A quarantine raised while recording: a person must look.
            Err(StepError::Fail(q)) => self.settle_failed(task_id, run, q).await,
            Err(e) => Err(e),
        };
        match settled {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(task = %task_id, "failed to record the run's outcome: {e}");
                if let Some(l) = live.take() {
                    let _ = self.stop_live(task_id, l).await;
                }
                false
            }
        }
    }

    /// One step of a running task.
    async fn step(
        &self,
        snap: &Snapshot,
        run: &Run,
        live: &mut Option<Live>,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let Some(l) = live.as_mut() else {
            *live = Some(self.start_provider(snap, run).await?);
            return Ok(());
        };
        let Some(conversation) = run.conversation_id.clone() else {
            return self.open_conversation(snap, run, l).await;
        };
        match l
            .link
            .resume_conversation(&conversation, &snap.task.workspace)
            .await
        {
            Err(DriverError::ConversationGone(_)) => {
                return self.conversation_gone(snap, run, &conversation).await;
            }
            // Loading the conversation into a new provider process is the
            // first half of the recovery lookup: an error answer leaves
            // unknown what the provider recorded.
            Err(e @ DriverError::Rpc { .. }) => {
                return Err(StepError::Fail(Cause::new(
                    CauseCode::ProviderLookupFailed,
                    format!("loading the conversation failed: {e}"),
                )));
            }
            other => other.map_err(driver_err)?,
        }
        if let Some(turn) = snap.turns.last().filter(|t| t.status.unsettled()) {
            return self.recover_turn(snap, run, &conversation, turn, l).await;
        }
        if let Some(cause) = self.ended_with(snap).await? {
            return Err(StepError::Fail(cause));
        }
        if let Some(message) = self.next_message(snap, run).cloned() {
            return self
                .start_primary(snap, run, &conversation, message, l)
                .await;
        }
        let live_now = live.take().expect("checked above");
        self.finish_live(task_id, live_now).await?;
        self.settle_completed(task_id, run).await
    }

    /// The cause the run's last turn ended with, when it ended other than
    /// completed and the runner stopped before settling the run: the run
    /// fails with it, as it would have.
    async fn ended_with(&self, snap: &Snapshot) -> Result<Option<Cause>, StepError> {
        let Some(turn) = snap
            .turns
            .last()
            .filter(|t| t.status != TurnStatus::Completed)
        else {
            return Ok(None);
        };
        let (tid, row) = (snap.task.task_id.clone(), turn.turn_row);
        self.read("turn_cause", move |db| db.ended_turn_cause(&tid, row))
            .await
    }

    /// Records a conversation's intent, opens it, records its id.
    async fn open_conversation(
        &self,
        snap: &Snapshot,
        run: &Run,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        self.write("conversation_intent", move |db| {
            db.conversation_intent(&tid, &rid)
        })
        .await?;
        let id = l
            .link
            .open_conversation(&snap.task.workspace)
            .await
            .map_err(driver_err)?;
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        self.write("conversation", move |db| {
            db.conversation_opened(&tid, &rid, &id)
        })
        .await
    }

    /// The message the next primary turn answers: the run's own trigger
    /// message first (a Retry's re-sent message), then the queue in
    /// admission order.
    fn next_message<'s>(&self, snap: &'s Snapshot, run: &Run) -> Option<&'s Message> {
        let trigger = || {
            snap.queue
                .iter()
                .find(|m| m.message_id == run.trigger_message_id)
        };
        if crate::seeded::lose_follow_up_on_restart() && run.owner_epoch != self.opts.epoch {
            // SEEDED BUG lose-follow-up-on-restart: a run inherited from a
            // previous runner process only finishes its own trigger message;
            // the follow-ups queued behind it are never consumed.
            return trigger();
        }
        trigger().or_else(|| snap.queue.first())
    }

    /// Records a primary turn's intent (which consumes the message), then
    /// plays the turn.
    async fn start_primary(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        message: Message,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let client_id = l.link.client_id(&message.message_id, false);
        let (tid, rid, mid, cid) = (
            task_id.clone(),
            run.run_id.clone(),
            message.message_id.clone(),
            client_id.clone(),
        );
        let row = self
            .write("turn_intent", move |db| {
                db.turn_intent(&tid, &rid, &mid, TurnKind::Primary, &cid)
            })
            .await;
        let row = match row {
            Err(StepError::Storage(e)) if crate::seeded::send_after_failed_intent() => {
                // SEEDED BUG send-after-failed-intent: the intent is taken
                // for bookkeeping; its failure is logged and the turn is
                // sent anyway, with no durable record that it was.
                tracing::warn!(task = %task_id, "turn intent not recorded ({e}); sending anyway");
                Ok(0)
            }
            other => other,
        }?;
        let turn = TurnRow {
            turn_row: row,
            run_id: run.run_id.clone(),
            message_id: message.message_id.clone(),
            kind: TurnKind::Primary,
            client_id,
            provider_turn_id: None,
            status: TurnStatus::Intent,
        };
        self.run_turn(snap, run, conversation, &turn, &message.text, l)
            .await
    }

    /// Settles a run with nothing left to answer. A follow-up admitted while
    /// the provider was stopping keeps the run open: the store settles only
    /// a run with nothing left to answer, and the next step takes the
    /// follow-up with a new provider.
    async fn settle_completed(&self, task_id: &str, run: &Run) -> Result<(), StepError> {
        let (tid, rid) = (task_id.to_owned(), run.run_id.clone());
        if crate::seeded::settle_ignores_queue() {
            // SEEDED BUG settle-ignores-queue: the queue was empty when the
            // runner decided, so it settles without looking again; a
            // follow-up admitted while the provider stopped is stranded.
            return self
                .write("run_settled", move |db| {
                    db.settle(&tid, &rid, TaskState::Completed, None)
                })
                .await;
        }
        let settled = self
            .store
            .call(move |db| db.settle_completed_if_idle(&tid, &rid))
            .await?;
        if settled {
            crate::cut::persisted("run_settled");
        }
        Ok(())
    }

    /// Records the loss of a provider and stops what is left of it.
    async fn provider_lost(
        &self,
        task_id: &str,
        run: &Run,
        err: DriverError,
        live: &mut Option<Live>,
    ) -> Result<(), StepError> {
        // The idle timeout it waited out, for whoever tells a slow machine
        // from a runner that gave up early (turncut's timing reruns).
        let (event, idle_ms) = match err {
            DriverError::Unresponsive { idle_ms, .. } => {
                (ContractEvent::ProviderUnresponsive, Some(idle_ms))
            }
            _ => (ContractEvent::ProviderExited, None),
        };
        let pid = live.as_ref().map(|l| l.identity.pid);
        let (tid, rid) = (task_id.to_owned(), run.run_id.clone());
        let detail = err.to_string();
        self.write("provider_event", move |db| {
            db.append(
                "provider_event",
                &tid,
                Some(&rid),
                event.as_str(),
                serde_json::json!({ "pid": pid, "detail": detail, "idle_ms": idle_ms }),
            )
        })
        .await?;
        if let Some(l) = live.take() {
            self.stop_live(task_id, l).await?;
        }
        Ok(())
    }

    /// Fails the run: stops its provider (with proof), then settles.
    async fn fail(
        &self,
        task_id: &str,
        run: &Run,
        cause: Cause,
        live: &mut Option<Live>,
    ) -> Result<(), StepError> {
        if let Some(l) = live.take() {
            // A provider that cannot be proven stopped turns any failure into
            // a quarantine: a person must look before anything resumes.
            if let Err(StepError::Fail(q)) = self.stop_live(task_id, l).await {
                return self.settle_failed(task_id, run, q).await;
            }
        }
        self.settle_failed(task_id, run, cause).await
    }

    async fn settle_failed(&self, task_id: &str, run: &Run, cause: Cause) -> Result<(), StepError> {
        let state = if cause.code == CauseCode::CleanupQuarantined {
            TaskState::NeedsHuman
        } else {
            TaskState::Failed
        };
        // SEEDED BUG null-cause: the failure is settled without its cause.
        let cause = Some(cause).filter(|_| !crate::seeded::null_cause());
        let (tid, rid) = (task_id.to_owned(), run.run_id.clone());
        self.write("run_settled", move |db| db.settle(&tid, &rid, state, cause))
            .await
    }
}
