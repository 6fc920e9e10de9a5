//! The engine: one actor per task drives its runs and applies the recovery
//! contract.
//!
//! Each task has one actor, a tokio task that owns the task's provider process
//! and is the only code that advances the task. It decides every step from the
//! durable snapshot (`Store::snapshot`), never from memory, so the code that
//! runs after a restart is the code that runs every time: if the snapshot shows
//! an unsettled turn, the turn's execution was cut (by a runner restart or a
//! lost provider) and the actor classifies it by what both sides recorded
//! (DESIGN §3.5). Every effectful provider request is preceded by a durable
//! intent and followed by a durable record of its outcome, each followed by a
//! cut point named `runner.<write>.persisted`. The engine never re-sends an
//! input whose delivery is uncertain; it asks the provider instead.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::causes::{Cause, CauseCode, ContractEvent, RetryBlock};
use crate::driver::{ClientCall, Driver, DriverError, NOT_RECORDED, ProviderEvent, TurnLookup};
use crate::native::checkpoint::{CallStatus, Checkpoint};
use crate::native::tools::{self, Limits, Tool, ToolOutput, Workspace};
use crate::profiles::Profile;
#[cfg(feature = "seeded-bugs")]
use crate::seeded::{self, SeededBug};
use crate::store::{Db, Run, Snapshot, Store, StoreError, TaskState, TurnRow};
use crate::supervisor::{self, ProcessIdentity, StopOutcome};

/// How many model responses one native turn may take.
pub const NATIVE_MODEL_CALLS_MAX: u32 = 32;

/// The text a continuation turn sends instead of the original message.
pub const CONTINUE_TEXT: &str = "[turncut:continue] The previous turn was interrupted by a restart. Continue it; do not redo finished steps. [turncut:check-aborted] A command reported as aborted may have run before the restart: check whether its effect is already there before running it again.";

/// How many times one run may lose its provider in one runner process before
/// the run fails instead of restarting the provider again.
pub const PROVIDER_LOSSES_MAX: u32 = 4;

/// First and longest pause before a task whose outcome could not be
/// recorded starts over from its durable state (doubling in between).
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(50);
const RECORD_RETRY_MAX: Duration = Duration::from_secs(5);

/// Configuration of the engine.
pub struct EngineOptions {
    /// The runner's state directory (providers get subdirectories).
    pub state_dir: PathBuf,
    /// The owner epoch of this runner process.
    pub epoch: i64,
    /// A provider silent this long during a request or a turn is killed.
    pub idle: Duration,
    /// How long a provider gets after SIGTERM before SIGKILL.
    pub term_grace: Duration,
    /// How long to wait for death after SIGKILL.
    pub kill_grace: Duration,
    /// Configured profiles.
    pub profiles: BTreeMap<String, Profile>,
    /// The provider credential, if any; it only ever reaches a provider's environment.
    pub credential: Option<Secret>,
}

/// A credential. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a credential.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The engine: the store, the options and the task actors.
pub struct Engine {
    store: Store,
    opts: EngineOptions,
    actors: Mutex<HashMap<String, mpsc::UnboundedSender<()>>>,
}

/// A provider process owned by an actor.
struct Live {
    child: tokio::process::Child,
    identity: ProcessIdentity,
    proc_row: i64,
    /// The spawn marker in the provider's environment.
    marker: String,
    run_id: String,
    driver: Driver,
    /// Terminals of client-side tools (ACP), by terminal id.
    terminals: HashMap<String, Terminal>,
}

/// A provider process of this runner, as [`Engine::stop_proc`] needs it.
#[derive(Clone, Copy)]
struct ProcRef<'a> {
    run_id: &'a str,
    proc_row: i64,
    identity: &'a ProcessIdentity,
    marker: &'a str,
}

/// A command the runner started for a client-side `terminal/create`.
struct Terminal {
    key: String,
    /// The running command, until its exit was awaited or it was released.
    process: Option<tools::ToolProcess>,
    /// Its bounded output once it exited.
    output: String,
    /// Whether `output` was cut.
    truncated: bool,
    exit: Option<Value>,
}

/// Why a step did not complete.
enum StepError {
    /// The run fails with this cause.
    Fail(Cause),
    /// The provider is gone or silent; recovery follows.
    Lost(DriverError),
    /// A durable write failed; nothing may be sent after it.
    Storage(StoreError),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Fail(c) => write!(f, "{}: {}", c.code.as_str(), c.message),
            StepError::Lost(e) => write!(f, "provider lost: {e}"),
            StepError::Storage(e) => write!(f, "storage failed: {e}"),
        }
    }
}

impl From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        StepError::Storage(e)
    }
}

/// Maps a driver error during a turn or a request: loss is recoverable, the
/// rest fails the run with `provider_protocol_error`.
fn driver_err(e: DriverError) -> StepError {
    match e {
        DriverError::Exited | DriverError::Unresponsive { .. } => StepError::Lost(e),
        DriverError::Protocol(_) | DriverError::Rpc { .. } | DriverError::ConversationGone(_) => {
            StepError::Fail(Cause::new(CauseCode::ProviderProtocolError, e.to_string()))
        }
    }
}

fn cut(write: &str) {
    hit(&format!("runner.{write}.persisted"));
}

/// Passes a cut point from async code. A held point blocks its thread, so it
/// runs under `block_in_place`: the worker's other tasks (the HTTP API among
/// them) move to another thread instead of waiting behind the hold.
pub fn hit(point: &str) {
    if cutpoint::active() {
        tokio::task::block_in_place(|| cutpoint::hit(point));
    }
}

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
    /// Creates the engine.
    pub fn new(store: Store, opts: EngineOptions) -> Arc<Engine> {
        Arc::new(Engine {
            store,
            opts,
            actors: Mutex::new(HashMap::new()),
        })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The owner epoch.
    pub fn epoch(&self) -> i64 {
        self.opts.epoch
    }

    /// Whether a profile exists.
    pub fn has_profile(&self, name: &str) -> bool {
        self.opts.profiles.contains_key(name)
    }

    /// Starts actors for every task that was executing when the runner stopped.
    pub async fn recover_all(self: &Arc<Self>) -> Result<usize, StoreError> {
        let tasks = self.store.call(|db| db.unsettled_tasks()).await?;
        #[cfg(feature = "seeded-bugs")]
        if seeded::active(SeededBug::StuckAfterRestart) {
            // SEEDED BUG stuck-after-restart: the tasks are counted (and
            // logged as resumed) but no actor is woken for them.
            return Ok(tasks.len());
        }
        for t in &tasks {
            self.wake(t);
        }
        Ok(tasks.len())
    }

    /// Wakes the task's actor, starting it if needed.
    pub fn wake(self: &Arc<Self>, task_id: &str) {
        let mut actors = self.actors.lock().expect("actor table");
        if let Some(tx) = actors.get(task_id)
            && tx.send(()).is_ok()
        {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        actors.insert(task_id.to_owned(), tx);
        let engine = Arc::clone(self);
        let task_id = task_id.to_owned();
        tokio::spawn(async move { engine.actor(task_id, rx).await });
    }

    /// Handles a Retry: verifies that the previous owner's providers are
    /// stopped, records the proof, and admits a fresh run.
    pub async fn retry(
        self: &Arc<Self>,
        task_id: &str,
        message_id: &str,
    ) -> Result<RetryOutcome, StoreError> {
        let tid = task_id.to_owned();
        let Some(snap) = self.store.call(move |db| db.snapshot(&tid)).await? else {
            return Ok(RetryOutcome::UnknownTask);
        };
        let mid = message_id.to_owned();
        let tid = task_id.to_owned();
        let existing = self.store.call(move |db| db.message(&tid, &mid)).await?;
        if existing.is_some() {
            // The same Retry again (or a reused id): the store answers it
            // without a new proof and without touching any process.
            let (tid, mid, rid, epoch) = (
                task_id.to_owned(),
                message_id.to_owned(),
                new_id("run"),
                self.opts.epoch,
            );
            let again = self
                .store
                .call(move |db| db.admit_retry(&tid, &mid, &rid, epoch, json!(null)))
                .await?;
            return Ok(match again {
                Ok(run_id) => RetryOutcome::Admitted { run_id },
                Err(block) => RetryOutcome::Blocked(block),
            });
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
        let run_id = new_id("run");
        let (tid, mid, rid, epoch) = (
            task_id.to_owned(),
            message_id.to_owned(),
            run_id,
            self.opts.epoch,
        );
        let admitted = self
            .store
            .call(move |db| db.admit_retry(&tid, &mid, &rid, epoch, proof))
            .await?;
        cut("retry_admitted");
        Ok(match admitted {
            Ok(run_id) => {
                self.wake(task_id);
                RetryOutcome::Admitted { run_id }
            }
            Err(block) => RetryOutcome::Blocked(block),
        })
    }

    /// Stops an earlier provider process of the task (not a child of this
    /// runner) and records the proof. `Err` carries the outcome that proved
    /// nothing.
    async fn stop_old(
        &self,
        task_id: &str,
        p: &crate::store::ProviderProc,
    ) -> Result<Result<serde_json::Value, StopOutcome>, StoreError> {
        let (outcome, tree) = supervisor::descendants::stop(
            &p.identity,
            None,
            self.stop_marker(p.marker.as_deref()),
            self.opts.term_grace,
            self.opts.kill_grace,
        )
        .await;
        match outcome {
            StopOutcome::Stopped(proof) => {
                let proof = proof_json(&proof, &tree);
                let (tid, rid, row, pr) = (
                    task_id.to_owned(),
                    p.run_id.clone(),
                    p.proc_row,
                    proof.clone(),
                );
                self.store
                    .call(move |db| db.record_stop(&tid, &rid, row, pr))
                    .await?;
                cut("provider_stop");
                Ok(Ok(proof))
            }
            other => Ok(Err(other)),
        }
    }

    async fn write<R: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StepError> {
        let r = self.store.call(f).await?;
        cut(name);
        Ok(r)
    }

    async fn actor(self: Arc<Self>, task_id: String, mut wake: mpsc::UnboundedReceiver<()>) {
        let mut live: Option<Live> = None;
        let mut losses: HashMap<String, u32> = HashMap::new();
        let mut record_retry = RECORD_RETRY_FIRST;
        loop {
            let tid = task_id.clone();
            let snap = match self.store.call(move |db| db.snapshot(&tid)).await {
                Ok(Some(s)) => s,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(task = %task_id, "failed to read the task: {e}");
                    return;
                }
            };
            if snap.task.state.settled() {
                if let Some(l) = live.take()
                    && let Err(e) = self.stop_live(&task_id, l).await
                {
                    // A settled task keeps no provider; the proof is recorded.
                    // Without one, its process stays in the store unproven
                    // and blocks a Retry until a later stop proves it.
                    tracing::warn!(task = %task_id, "a settled task's provider: {e}");
                }
                if wake.recv().await.is_none() {
                    return;
                }
                continue;
            }
            let Some(run) = snap.run.clone() else {
                tracing::error!(task = %task_id, "a running task has no run");
                return;
            };
            if live.as_ref().is_some_and(|l| l.run_id != run.run_id)
                && let Some(l) = live.take()
            {
                let _ = self.stop_live(&task_id, l).await;
            }
            let outcome = self.step(&snap, &run, &mut live).await;
            if self
                .settle_step_error(&task_id, &run, outcome, &mut live, &mut losses)
                .await
            {
                record_retry = RECORD_RETRY_FIRST;
                continue;
            }
            // The outcome could not be recorded (its provider is stopped):
            // the store still holds the run as it was before the failed
            // write. Start over from it after a pause, as a restarted runner
            // would; ending the actor here left the task running with no
            // one to run it until a restart (a write that failed once, then
            // the write of its `storage_failed`). A full disk fails every
            // try the same way, and nothing is sent meanwhile.
            tracing::warn!(task = %task_id, "starting over from the durable state in {record_retry:?}");
            tokio::time::sleep(record_retry).await;
            record_retry = (record_retry * 2).min(RECORD_RETRY_MAX);
        }
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
            Err(StepError::Storage(e)) => {
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
            let (tid, rid) = (task_id.clone(), run.run_id.clone());
            self.write("conversation_intent", move |db| {
                db.conversation_intent(&tid, &rid)
            })
            .await?;
            let id = l
                .driver
                .open_conversation(&snap.task.workspace)
                .await
                .map_err(driver_err)?;
            let (tid, rid) = (task_id.clone(), run.run_id.clone());
            self.write("conversation", move |db| {
                db.conversation_opened(&tid, &rid, &id)
            })
            .await?;
            return Ok(());
        };
        match l
            .driver
            .resume_conversation(&conversation, &snap.task.workspace)
            .await
        {
            Err(DriverError::ConversationGone(_)) => {
                return self.conversation_gone(snap, run, &conversation).await;
            }
            other => other.map_err(driver_err)?,
        }
        if let Some(turn) = snap.turns.last().filter(|t| t.unsettled()) {
            return self.recover_turn(snap, run, &conversation, turn, l).await;
        }
        // The run's own trigger message goes first (a Retry's re-sent
        // message), then the queue in admission order.
        let next = snap
            .queue
            .iter()
            .find(|m| m.message_id == run.trigger_message_id)
            .or_else(|| snap.queue.first());
        #[cfg(feature = "seeded-bugs")]
        let next = if seeded::active(SeededBug::LoseFollowUpOnRestart)
            && run.owner_epoch != self.opts.epoch
        {
            // SEEDED BUG lose-follow-up-on-restart: a run inherited from a
            // previous runner process only finishes its own trigger message;
            // the follow-ups queued behind it are never consumed.
            snap.queue
                .iter()
                .find(|m| m.message_id == run.trigger_message_id)
        } else {
            next
        };
        if let Some(message) = next.cloned() {
            let client_id = l.driver.client_id(&message.message_id, false);
            let (tid, rid, mid, cid) = (
                task_id.clone(),
                run.run_id.clone(),
                message.message_id.clone(),
                client_id.clone(),
            );
            let row = self
                .write("turn_intent", move |db| {
                    db.turn_intent(&tid, &rid, &mid, "primary", &cid)
                })
                .await;
            #[cfg(feature = "seeded-bugs")]
            let row = match row {
                Err(StepError::Storage(e)) if seeded::active(SeededBug::SendAfterFailedIntent) => {
                    // SEEDED BUG send-after-failed-intent: the intent is taken
                    // for bookkeeping; its failure is logged and the turn is
                    // sent anyway, with no durable record that it was.
                    tracing::warn!(task = %task_id, "turn intent not recorded ({e}); sending anyway");
                    Ok(0)
                }
                other => other,
            };
            let row = row?;
            let turn = TurnRow {
                turn_row: row,
                run_id: run.run_id.clone(),
                message_id: message.message_id.clone(),
                kind: "primary".to_owned(),
                client_id,
                provider_turn_id: None,
                status: "intent".to_owned(),
            };
            return self
                .run_turn(snap, run, &conversation, &turn, &message.text, l)
                .await;
        }
        let live_now = live.take().expect("checked above");
        self.stop_live(task_id, live_now).await?;
        // A follow-up admitted while the provider was stopping keeps the run
        // open: the store settles only a run with nothing left to answer,
        // and the next step takes the follow-up with a new provider.
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        #[cfg(feature = "seeded-bugs")]
        if seeded::active(SeededBug::SettleIgnoresQueue) {
            // SEEDED BUG settle-ignores-queue: the queue was empty when the
            // runner decided, so it settles without looking again; a
            // follow-up admitted while the provider stopped is stranded.
            self.write("run_settled", move |db| {
                db.settle(&tid, &rid, TaskState::Completed, None)
            })
            .await?;
            return Ok(());
        }
        let settled = self
            .store
            .call(move |db| db.settle_completed_if_idle(&tid, &rid))
            .await?;
        if settled {
            cut("run_settled");
        }
        Ok(())
    }

    /// Old provider first, then a new one, recorded before use.
    async fn start_provider(&self, snap: &Snapshot, run: &Run) -> Result<Live, StepError> {
        let task_id = &snap.task.task_id;
        for p in &snap.live_procs {
            #[cfg(feature = "seeded-bugs")]
            if seeded::active(SeededBug::SkipStopProof) {
                // SEEDED BUG skip-stop-proof: assumes the previous runner's
                // providers died with it and records a stop it never proved.
                let proof = supervisor::StopProof {
                    identity: p.identity,
                    method: "owner_restarted".to_owned(),
                    signals: Vec::new(),
                    group_gone: true,
                    marked: None,
                };
                let proof = serde_json::to_value(&proof).expect("proofs serialize");
                let (tid, rid, row) = (task_id.clone(), p.run_id.clone(), p.proc_row);
                self.write("provider_stop", move |db| {
                    db.record_stop(&tid, &rid, row, proof)
                })
                .await?;
                continue;
            }
            match self.stop_old(task_id, p).await? {
                Ok(_) => {}
                Err(StopOutcome::StillRunning { identity }) => {
                    return Err(StepError::Fail(Cause::new(
                        CauseCode::CleanupQuarantined,
                        format!(
                            "the previous provider (pid {}) survived SIGKILL",
                            identity.pid
                        ),
                    )));
                }
                Err(StopOutcome::Unprovable { identity, reason }) => {
                    return Err(StepError::Fail(Cause::new(
                        CauseCode::CleanupQuarantined,
                        format!(
                            "the previous provider (pid {}) could not be proven stopped: {reason}",
                            identity.pid
                        ),
                    )));
                }
                Err(StopOutcome::Stopped(_)) => unreachable!("stop_old returns a proof as Ok"),
            }
        }
        for spawn in &snap.open_spawns {
            self.sweep_spawn(task_id, spawn).await?;
        }
        let Some(profile) = self.opts.profiles.get(&snap.task.profile) else {
            return Err(StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!(
                    "profile {} is not configured in this runner",
                    snap.task.profile
                ),
            )));
        };
        let provider_dir = self
            .opts
            .state_dir
            .join("providers")
            .join(sanitize(task_id));
        std::fs::create_dir_all(&provider_dir).map_err(|e| {
            StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!("failed to create {}: {e}", provider_dir.display()),
            ))
        })?;
        let argv = crate::profiles::expand(
            &profile.command,
            &provider_dir,
            &snap.task.workspace,
            task_id,
        );
        // Write-ahead spawn: the marker is durable before the process
        // exists, so a runner killed before the identity is recorded leaves
        // the next one a way to find and stop it (and whatever it started).
        let marker = new_id("spawn");
        let (tid, rid, m) = (task_id.clone(), run.run_id.clone(), marker.clone());
        let spawn_row = self
            .write("provider_spawn_intent", move |db| {
                db.spawn_intent(&tid, &rid, &m)
            })
            .await?;
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .env(cutpoint::ENV_ROLE, "provider")
            .env(supervisor::MARKER_ENV, &marker);
        if std::path::Path::new(&snap.task.workspace).is_dir() {
            cmd.current_dir(&snap.task.workspace);
        }
        if let Some(secret) = &self.opts.credential {
            cmd.env(&profile.credential_env, &secret.0);
        }
        let (mut child, identity) = supervisor::spawn_provider(&mut cmd).map_err(|e| {
            StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!("failed to start {}: {e}", argv[0]),
            ))
        })?;
        // The window between the spawn and the durable identity.
        hit("runner.provider.spawned");
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        #[cfg(feature = "seeded-bugs")]
        let leaked = self
            .opts
            .credential
            .clone()
            .filter(|_| seeded::active(SeededBug::CredentialInStore));
        let proc_row = match self
            .write("provider_identity", move |db| {
                #[cfg(feature = "seeded-bugs")]
                if let Some(secret) = leaked {
                    // SEEDED BUG credential-in-store: the spawned event records
                    // the key the provider was started with.
                    return db.record_provider_with_env(&tid, &rid, spawn_row, identity, &secret.0);
                }
                db.record_provider(&tid, &rid, spawn_row, identity)
            })
            .await
        {
            Ok(row) => row,
            Err(e) => {
                let _ = supervisor::stop_marked(
                    &identity,
                    Some(&mut child),
                    Some(&marker),
                    self.opts.term_grace,
                    self.opts.kill_grace,
                )
                .await;
                return Err(e);
            }
        };
        let attached = Driver::attach(
            profile.driver,
            &mut child,
            self.opts.idle,
            &proc_row.to_string(),
        )
        .await;
        let mut driver = match attached {
            Ok(d) => d,
            Err(e) => {
                let proc = ProcRef {
                    run_id: &run.run_id,
                    proc_row,
                    identity: &identity,
                    marker: &marker,
                };
                self.stop_proc(task_id, proc, &mut child).await?;
                return Err(match e {
                    DriverError::Exited | DriverError::Unresponsive { .. } => StepError::Lost(e),
                    other => StepError::Fail(Cause::new(
                        CauseCode::ProviderStartFailed,
                        format!("the provider could not be reached: {other}"),
                    )),
                });
            }
        };
        // A new provider process: client-side tools of this run that were
        // executing when the last one was lost have no known outcome.
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        let uncertain = self
            .store
            .call(move |db| db.tools_uncertain(&tid, &rid))
            .await?;
        if uncertain > 0 {
            cut("tool_uncertain");
        }
        let handshake = driver.initialize().await;
        let live = Live {
            child,
            identity,
            proc_row,
            marker,
            run_id: run.run_id.clone(),
            driver,
            terminals: HashMap::new(),
        };
        if let Err(e) = handshake {
            let _ = self.stop_live(task_id, live).await;
            return Err(match e {
                DriverError::Exited | DriverError::Unresponsive { .. } => StepError::Lost(e),
                other => StepError::Fail(Cause::new(
                    CauseCode::ProviderStartFailed,
                    format!("the provider failed its handshake: {other}"),
                )),
            });
        }
        Ok(live)
    }

    /// The provider has no record of the run's conversation: Codex writes a
    /// thread only with its first turn, so a provider lost before that
    /// leaves nothing. When no turn of the run completed in it, nothing the
    /// provider recorded is lost: the run forgets the conversation (the next
    /// step opens a fresh one), and a turn it had sent is looked up there,
    /// found absent, and started once. Otherwise the provider lost history
    /// and the run fails closed.
    async fn conversation_gone(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
    ) -> Result<(), StepError> {
        let completed = snap
            .turns
            .iter()
            .any(|t| t.run_id == run.run_id && t.status == "completed");
        if completed {
            return Err(StepError::Fail(Cause::new(
                CauseCode::ProviderProtocolError,
                format!("the provider lost conversation {conversation}, which has completed turns"),
            )));
        }
        let (tid, rid, old) = (
            snap.task.task_id.clone(),
            run.run_id.clone(),
            conversation.to_owned(),
        );
        self.write("conversation_lost", move |db| {
            db.conversation_lost(&tid, &rid, &old)
        })
        .await
    }

    /// Classifies a turn whose execution was cut (DESIGN §3.5) and acts.
    async fn recover_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        if l.driver.native().is_some() {
            // The runner is the agent: its own checkpoint is the provider's
            // record, so a cut native turn resumes from it (DESIGN §3.4 rules
            // 4 and 5) instead of being classified against a provider.
            return self
                .native_turn(snap, run, conversation, turn, None, l)
                .await;
        }
        let continuation = turn.kind == "continuation";
        // SEEDED BUG second-continuation: only a continuation that was never
        // accepted is treated as one; an accepted continuation is classified
        // like an accepted primary turn below, and continued again.
        #[cfg(feature = "seeded-bugs")]
        let continuation = continuation
            && !(seeded::active(SeededBug::SecondContinuation) && turn.provider_turn_id.is_some());
        if continuation {
            // One continuation only: adopt it if it completed, else exhausted.
            let by = match &turn.provider_turn_id {
                Some(id) => TurnLookup::TurnId(id.clone()),
                None => TurnLookup::ClientId(turn.client_id.clone()),
            };
            if let Some((_, status)) = l
                .driver
                .lookup_turn(conversation, &by)
                .await
                .map_err(driver_err)?
                && status == "completed"
            {
                return self.adopt(task_id, run, turn).await;
            }
            return Err(StepError::Fail(Cause::new(
                CauseCode::ContinuationExhausted,
                "the continuation of a lost turn was itself cut; the runner never continues twice",
            )));
        }
        let Some(provider_turn) = &turn.provider_turn_id else {
            // Only the intent is durable: ask the provider whether it recorded the turn.
            let found = l
                .driver
                .lookup_turn(conversation, &TurnLookup::ClientId(turn.client_id.clone()))
                .await
                .map_err(driver_err)?;
            #[cfg(feature = "seeded-bugs")]
            if found.is_some() && seeded::active(SeededBug::ResendAmbiguousTurn) {
                // SEEDED BUG resend-ambiguous-turn: the runner never saw the
                // turn accepted, so it "delivers" the message again.
                let message = snap_message_text(&self.store, task_id, &turn.message_id).await?;
                return self
                    .run_turn(snap, run, conversation, turn, &message, l)
                    .await;
            }
            if let Some((id, status)) = found {
                return Err(StepError::Fail(Cause::new(
                    CauseCode::AmbiguousTurnStart,
                    format!(
                        "the provider recorded turn {id} ({status}) for message {} but the runner never saw it accepted; it is neither replayed nor adopted",
                        turn.message_id
                    ),
                )));
            }
            #[cfg(feature = "seeded-bugs")]
            if seeded::active(SeededBug::FailClosedWhenAbsent) {
                // SEEDED BUG fail-closed-when-absent: any turn without a
                // durable acceptance is treated as ambiguous, even one the
                // provider provably never recorded.
                return Err(StepError::Fail(Cause::new(
                    CauseCode::AmbiguousTurnStart,
                    format!(
                        "the runner never saw the turn for message {} accepted; it is neither replayed nor adopted",
                        turn.message_id
                    ),
                )));
            }
            let (tid, rid, mid) = (task_id.clone(), run.run_id.clone(), turn.message_id.clone());
            self.write("turn_absent", move |db| {
                db.append(
                    "turn_absent",
                    &tid,
                    Some(&rid),
                    "turn.absent_at_provider",
                    json!({ "message_id": mid, "action": "start the turn for the first time" }),
                )
            })
            .await?;
            let message = snap_message_text(&self.store, task_id, &turn.message_id).await?;
            return self
                .run_turn(snap, run, conversation, turn, &message, l)
                .await;
        };
        let found = l
            .driver
            .lookup_turn(conversation, &TurnLookup::TurnId(provider_turn.clone()))
            .await
            .map_err(driver_err)?;
        let (tid, row) = (task_id.clone(), turn.turn_row);
        let unfinished = self
            .store
            .call(move |db| db.approved_items_unfinished(&tid, row))
            .await?;
        match found {
            Some((_, status)) if status == "completed" => self.adopt(task_id, run, turn).await,
            // The provider never recorded the turn's user message (or the
            // turn): no model saw it, so this delivery is its first.
            ref unrecorded
                if l.driver.unrecorded_reached_no_model()
                    && unrecorded
                        .as_ref()
                        .is_none_or(|(_, status)| status == NOT_RECORDED) =>
            {
                self.resend_unrecorded(snap, run, conversation, turn, l)
                    .await
            }
            // SEEDED BUG adopt-without-completion: an interrupted turn is
            // treated as finished and adopted instead of continued.
            #[cfg(feature = "seeded-bugs")]
            Some((_, status))
                if status == "interrupted" && seeded::active(SeededBug::AdoptWithoutCompletion) =>
            {
                self.adopt(task_id, run, turn).await
            }
            _ if snap.pending_requests > 0 => Err(StepError::Fail(Cause::new(
                CauseCode::ActiveTurnRecoveryClosed,
                format!(
                    "turn {provider_turn} was lost while waiting for an approval; the approval cannot be replayed"
                ),
            ))),
            _ if !unfinished.is_empty() => Err(StepError::Fail(Cause::new(
                CauseCode::ActiveTurnRecoveryClosed,
                format!(
                    "turn {provider_turn} was lost after its approved command {} started and before it completed; it may have run, so the turn is not continued",
                    unfinished.join(", ")
                ),
            ))),
            Some((_, status)) => {
                let cause = Cause::new(
                    CauseCode::ProviderTurnLostOnRestore,
                    format!(
                        "turn {provider_turn} was {status} when its provider was lost; continuing once"
                    ),
                );
                #[cfg(feature = "seeded-bugs")]
                let cause = if seeded::active(SeededBug::WrongRecoverable) {
                    // SEEDED BUG wrong-recoverable: the turn failed, so its
                    // cause is written as not recoverable.
                    Cause {
                        recoverable: false,
                        ..cause
                    }
                } else {
                    cause
                };
                let client_id = l.driver.client_id(&turn.message_id, true);
                let data = json!({ "cause": cause, "provider_turn_id": provider_turn });
                let row = self
                    .mark_lost_and_continue(task_id, run, turn, data, &client_id)
                    .await?;
                let cont = TurnRow {
                    turn_row: row,
                    run_id: run.run_id.clone(),
                    message_id: turn.message_id.clone(),
                    kind: "continuation".to_owned(),
                    client_id,
                    provider_turn_id: None,
                    status: "intent".to_owned(),
                };
                #[cfg(feature = "seeded-bugs")]
                if seeded::active(SeededBug::ContinuationResendsMessage) {
                    // SEEDED BUG continuation-resends-message: the continuation
                    // "resumes" by sending the user's message again.
                    let message = snap_message_text(&self.store, task_id, &turn.message_id).await?;
                    return self
                        .run_turn(snap, run, conversation, &cont, &message, l)
                        .await;
                }
                self.run_turn(snap, run, conversation, &cont, CONTINUE_TEXT, l)
                    .await
            }
            None => Err(StepError::Fail(Cause::new(
                CauseCode::ActiveTurnRecoveryClosed,
                format!("the provider has no record of accepted turn {provider_turn}"),
            ))),
        }
    }

    /// Marks an accepted turn lost and records its continuation's intent,
    /// in one write (`Db::turn_lost_continued`); returns the continuation's row.
    async fn mark_lost_and_continue(
        &self,
        task_id: &str,
        run: &Run,
        turn: &TurnRow,
        data: Value,
        client_id: &str,
    ) -> Result<i64, StepError> {
        let (tid, rid, row, cid) = (
            task_id.to_owned(),
            run.run_id.clone(),
            turn.turn_row,
            client_id.to_owned(),
        );
        #[cfg(feature = "seeded-bugs")]
        if seeded::active(SeededBug::SplitLostMark) {
            let mid = turn.message_id.clone();
            // SEEDED BUG split-lost-mark: the lost mark is a write of its
            // own; a runner stopped right after it finds the turn settled
            // with nothing to continue, and completes the run without it.
            let (t, r) = (tid.clone(), rid.clone());
            self.write("turn_completed", move |db| {
                db.turn_finished(&t, &r, row, "interrupted", data)
            })
            .await?;
            return self
                .write("turn_intent", move |db| {
                    db.turn_intent(&tid, &rid, &mid, "continuation", &cid)
                })
                .await;
        }
        self.write("turn_intent", move |db| {
            db.turn_lost_continued(&tid, &rid, row, data, &cid)
        })
        .await
    }

    /// Sends an accepted turn's message again, because the provider never
    /// recorded it (see [`Driver::unrecorded_reached_no_model`]).
    async fn resend_unrecorded(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let (tid, rid, mid) = (task_id.clone(), run.run_id.clone(), turn.message_id.clone());
        let lost = turn.provider_turn_id.clone();
        self.write("turn_absent", move |db| {
            db.append(
                "turn_absent",
                &tid,
                Some(&rid),
                "turn.absent_at_provider",
                json!({
                    "message_id": mid,
                    "provider_turn_id": lost,
                    "action": "the provider never recorded the accepted turn's message; send it for the first time",
                }),
            )
        })
        .await?;
        let message = snap_message_text(&self.store, task_id, &turn.message_id).await?;
        self.run_turn(snap, run, conversation, turn, &message, l)
            .await
    }

    async fn adopt(&self, task_id: &str, run: &Run, turn: &TurnRow) -> Result<(), StepError> {
        let (tid, rid, row) = (task_id.to_owned(), run.run_id.clone(), turn.turn_row);
        self.write("turn_completed", move |db| {
            db.turn_finished(&tid, &rid, row, "completed", json!({ "adopted": true }))
        })
        .await
    }

    /// Sends a turn and plays it to its end, persisting each output first.
    async fn run_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        text: &str,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        if l.driver.native().is_some() {
            return self
                .native_turn(snap, run, conversation, turn, Some(text), l)
                .await;
        }
        let profile = self
            .opts
            .profiles
            .get(&snap.task.profile)
            .expect("checked when the provider started");
        let provider_turn = l
            .driver
            .start_turn(conversation, text, &turn.client_id)
            .await
            .map_err(driver_err)?;
        let (tid, rid, row, pt) = (
            task_id.clone(),
            run.run_id.clone(),
            turn.turn_row,
            provider_turn.clone(),
        );
        self.write("turn_accepted", move |db| {
            db.turn_accepted(&tid, &rid, row, &pt)
        })
        .await?;
        loop {
            match l.driver.next_event().await.map_err(driver_err)? {
                ProviderEvent::ItemCompleted { turn_id, item } if turn_id == provider_turn => {
                    let (tid, rid) = (task_id.clone(), run.run_id.clone());
                    self.write("item", move |db| {
                        db.append(
                            "item",
                            &tid,
                            Some(&rid),
                            "item.completed",
                            json!({ "turn_row": row, "item": item }),
                        )
                    })
                    .await?;
                }
                ProviderEvent::Request {
                    request_id,
                    method,
                    turn_id,
                    summary,
                    item_id,
                } => {
                    let _ = (turn_id, summary);
                    let key = request_id.to_string();
                    for (write, status, decision) in [
                        ("approval_request", "requested", None),
                        (
                            "approval_intent",
                            "answering",
                            Some(profile.approval.clone()),
                        ),
                    ] {
                        let (tid, rid, k, m, item) = (
                            task_id.clone(),
                            run.run_id.clone(),
                            key.clone(),
                            method.clone(),
                            item_id.clone(),
                        );
                        self.write(write, move |db| {
                            db.provider_request(
                                write,
                                &tid,
                                &rid,
                                row,
                                &k,
                                &m,
                                status,
                                decision.as_deref(),
                                item.as_deref(),
                            )
                        })
                        .await?;
                    }
                    l.driver
                        .answer(&request_id, &profile.approval)
                        .await
                        .map_err(driver_err)?;
                    let (tid, rid, k, m, d) = (
                        task_id.clone(),
                        run.run_id.clone(),
                        key.clone(),
                        method.clone(),
                        profile.approval.clone(),
                    );
                    self.write("approval_answer", move |db| {
                        db.provider_request(
                            "approval_answer",
                            &tid,
                            &rid,
                            row,
                            &k,
                            &m,
                            "answered",
                            Some(&d),
                            item_id.as_deref(),
                        )
                    })
                    .await?;
                }
                ProviderEvent::ClientTool {
                    request_id,
                    key,
                    call,
                } => {
                    let result = self.client_tool(snap, run, row, &key, call, l).await?;
                    l.driver
                        .respond_tool(&request_id, result)
                        .await
                        .map_err(driver_err)?;
                }
                ProviderEvent::UnsupportedRequest { request_id, method } => {
                    l.driver
                        .reject(&request_id, &method)
                        .await
                        .map_err(driver_err)?;
                }
                ProviderEvent::TurnCompleted { turn_id, status } if turn_id == provider_turn => {
                    let (tid, rid, st) = (task_id.clone(), run.run_id.clone(), status.clone());
                    self.write("turn_completed", move |db| {
                        db.turn_finished(
                            &tid,
                            &rid,
                            row,
                            &st,
                            json!({ "provider_turn_id": turn_id }),
                        )
                    })
                    .await?;
                    if status == "completed" {
                        return Ok(());
                    }
                    return Err(StepError::Fail(Cause::new(
                        CauseCode::ProviderProtocolError,
                        format!("the provider ended turn {provider_turn} with status {status}"),
                    )));
                }
                _ => {}
            }
        }
    }

    /// Executes a client-side tool request (ACP `terminal/*`, `fs/*`) under
    /// DESIGN §3.4 rule 4: a call with an effect is marked `executing` before
    /// the effect and its outcome is persisted before the provider hears it;
    /// a key the run has seen before is never executed again. Paths and
    /// working directories are confined to the task workspace, and the
    /// command's environment never carries the credential.
    async fn client_tool(
        &self,
        snap: &Snapshot,
        run: &Run,
        turn_row: i64,
        key: &str,
        call: ClientCall,
        l: &mut Live,
    ) -> Result<Result<Value, String>, StepError> {
        let task_id = &snap.task.task_id;
        if call.has_effect() {
            let kind = match &call {
                ClientCall::TerminalCreate { .. } => "terminal",
                _ => "write_text_file",
            };
            let detail = match &call {
                ClientCall::TerminalCreate { command, args, .. } => {
                    json!({ "command": command, "args": args.len() })
                }
                ClientCall::WriteTextFile { path, content } => {
                    json!({ "path": path, "bytes": content.len() })
                }
                _ => Value::Null,
            };
            let (tid, rid, k) = (task_id.clone(), run.run_id.clone(), key.to_owned());
            let fresh = self
                .write("tool_executing", move |db| {
                    db.tool_executing(&tid, &rid, turn_row, &k, kind, detail)
                })
                .await?;
            if !fresh {
                return Ok(Err(format!(
                    "tool call {key} was already executed in this run; it is never run twice"
                )));
            }
        }
        let outcome = |status: &'static str, v: Value| {
            let (tid, rid, k) = (task_id.clone(), run.run_id.clone(), key.to_owned());
            self.write("tool_outcome", move |db| {
                db.tool_outcome(&tid, &rid, &k, status, v)
            })
        };
        let ws = Workspace::new(&snap.task.workspace).map_err(|e| e.to_string());
        let scrub = self.scrub(&snap.task.profile);
        let scrub: Vec<&str> = scrub.iter().map(String::as_str).collect();
        let limits = Limits::default();
        match call {
            ClientCall::TerminalCreate {
                command,
                args,
                env,
                cwd,
            } => match ws.and_then(|ws| start_terminal(&ws, &command, &args, env, cwd, &scrub)) {
                Ok(process) => {
                    hit("runner.tool.spawned");
                    let id = format!("term-{key}");
                    l.terminals.insert(
                        id.clone(),
                        Terminal {
                            key: key.to_owned(),
                            process: Some(process),
                            output: String::new(),
                            truncated: false,
                            exit: None,
                        },
                    );
                    Ok(Ok(json!({ "terminalId": id })))
                }
                Err(msg) => {
                    outcome("failed", json!({ "error": msg })).await?;
                    Ok(Err(msg))
                }
            },
            ClientCall::TerminalWait { terminal_id } => {
                let Some(t) = l.terminals.get_mut(&terminal_id) else {
                    return Ok(Err(format!("unknown terminal {terminal_id}")));
                };
                if let Some(process) = t.process.take() {
                    let key = t.key.clone();
                    // Bounded like a native Bash call: a command that does not
                    // end is killed with its whole group and the call fails.
                    let done = process.finish(limits.bash_timeout).await;
                    let (exit, output, truncated) = terminal_result(done, &limits, &scrub);
                    let status = if exit["exitCode"] == 0 {
                        "completed"
                    } else {
                        "failed"
                    };
                    let (tid, rid) = (task_id.clone(), run.run_id.clone());
                    let v = exit.clone();
                    self.write("tool_outcome", move |db| {
                        db.tool_outcome(&tid, &rid, &key, status, v)
                    })
                    .await?;
                    let t = l.terminals.get_mut(&terminal_id).expect("present above");
                    t.output = output;
                    t.truncated = truncated;
                    t.exit = Some(exit);
                }
                let t = &l.terminals[&terminal_id];
                Ok(Ok(t.exit.clone().unwrap_or(Value::Null)))
            }
            ClientCall::TerminalOutput { terminal_id } => match l.terminals.get(&terminal_id) {
                Some(t) => {
                    let mut v = json!({ "output": t.output, "truncated": t.truncated });
                    if let Some(e) = &t.exit {
                        v["exitStatus"] = e.clone();
                    }
                    Ok(Ok(v))
                }
                None => Ok(Err(format!("unknown terminal {terminal_id}"))),
            },
            ClientCall::TerminalKill { terminal_id } => match l.terminals.get_mut(&terminal_id) {
                Some(t) => {
                    if let Some(p) = t.process.as_mut() {
                        p.kill();
                    }
                    Ok(Ok(json!({})))
                }
                None => Ok(Err(format!("unknown terminal {terminal_id}"))),
            },
            ClientCall::TerminalRelease { terminal_id } => {
                let Some(mut t) = l.terminals.remove(&terminal_id) else {
                    return Ok(Err(format!("unknown terminal {terminal_id}")));
                };
                if let Some(mut p) = t.process.take() {
                    // Released before its exit was awaited: killed, and its
                    // outcome is a failure (it may have done part of its work).
                    p.kill();
                    drop(p.finish(Duration::ZERO).await);
                    let (tid, rid, k) = (task_id.clone(), run.run_id.clone(), t.key.clone());
                    self.write("tool_outcome", move |db| {
                        db.tool_outcome(
                            &tid,
                            &rid,
                            &k,
                            "failed",
                            json!({ "error": "released before it exited; killed" }),
                        )
                    })
                    .await?;
                }
                Ok(Ok(json!({})))
            }
            ClientCall::WriteTextFile { path, content } => {
                let (limit, bytes) = (limits.edit_bytes, content.len());
                let written = match ws {
                    Ok(ws) => {
                        tokio::task::spawn_blocking(move || ws.write_text(&path, &content, limit))
                            .await
                            .unwrap_or_else(|e| Err(format!("the write did not finish: {e}")))
                    }
                    Err(e) => Err(e),
                };
                match written {
                    Ok(done) => {
                        outcome("completed", json!({ "bytes": bytes, "result": done })).await?;
                        Ok(Ok(json!({})))
                    }
                    Err(msg) => {
                        outcome("failed", json!({ "error": msg })).await?;
                        Ok(Err(msg))
                    }
                }
            }
            ClientCall::ReadTextFile { path } => {
                let limit = limits.read_bytes;
                let read = match ws {
                    Ok(ws) => tokio::task::spawn_blocking(move || ws.read_text(&path, limit))
                        .await
                        .unwrap_or_else(|e| Err(format!("the read did not finish: {e}"))),
                    Err(e) => Err(e),
                };
                Ok(read.map(|content| json!({ "content": tools::mask(&content, &scrub) })))
            }
        }
    }

    /// The strings no tool may see or show: the profile's credential
    /// variable name and the credential itself.
    fn scrub(&self, profile: &str) -> Vec<String> {
        let mut scrub: Vec<String> = self
            .opts
            .profiles
            .get(profile)
            .map(|p| p.credential_env.clone())
            .into_iter()
            .collect();
        scrub.extend(self.opts.credential.as_ref().map(|s| s.0.clone()));
        scrub
    }

    /// Persists a native checkpoint with its run-log event; the write's cut
    /// point follows.
    #[allow(clippy::too_many_arguments)]
    async fn native_save(
        &self,
        write: &'static str,
        snap: &Snapshot,
        run: &Run,
        turn_row: i64,
        cp: &Checkpoint,
        kind: &'static str,
        data: Value,
    ) -> Result<(), StepError> {
        let (tid, rid, conv) = (
            snap.task.task_id.clone(),
            run.run_id.clone(),
            cp.conversation.clone(),
        );
        let json = cp.to_json();
        self.write(write, move |db| {
            db.native_save(write, &tid, &rid, turn_row, &conv, json, kind, data)
        })
        .await
    }

    /// The native agent loop for one turn: the runner asks the model, persists
    /// its output before any side effect, executes each tool call itself
    /// (`executing` before the effect, the outcome before going on), and asks
    /// again until the model answers without calls. With `text: None` the
    /// turn resumes from its durable checkpoint: calls cut while executing
    /// become `uncertain` and are never run again, and the model request is
    /// simply issued again (it has no side effects).
    async fn native_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        text: Option<&str>,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let row = turn.turn_row;
        let profile = self
            .opts
            .profiles
            .get(&snap.task.profile)
            .expect("checked when the provider started")
            .clone();
        let corrupt = |e: String| {
            StepError::Storage(StoreError::Corrupt {
                table: "native_checkpoints",
                detail: e,
            })
        };
        let stored = self.store.call(move |db| db.native_checkpoint(row)).await?;
        let mut cp = match stored {
            Some(v) => Checkpoint::from_json(&v).map_err(|e| corrupt(e.to_string()))?,
            None => {
                let text = match text {
                    Some(t) => t.to_owned(),
                    None => snap_message_text(&self.store, task_id, &turn.message_id).await?,
                };
                if turn.provider_turn_id.is_none() {
                    let (tid, rid, cid) =
                        (task_id.clone(), run.run_id.clone(), turn.client_id.clone());
                    self.write("turn_accepted", move |db| {
                        db.turn_accepted(&tid, &rid, row, &cid)
                    })
                    .await?;
                }
                let cp = Checkpoint::new(&profile.model, conversation, &turn.message_id, &text);
                self.native_save(
                    "native_checkpoint",
                    snap,
                    run,
                    row,
                    &cp,
                    "native.checkpoint",
                    json!({ "turn_row": row }),
                )
                .await?;
                cp
            }
        };
        if text.is_none() {
            #[cfg(feature = "seeded-bugs")]
            if seeded::active(SeededBug::RerunExecutingTool) {
                // SEEDED BUG rerun-executing-tool: a call cut while it ran is
                // treated as never started, and runs again.
                for c in &mut cp.pending_calls {
                    if c.status == CallStatus::Executing {
                        c.status = CallStatus::Pending;
                    }
                }
            }
            let cut_calls: Vec<String> = cp
                .pending_calls
                .iter()
                .filter(|c| c.status == CallStatus::Executing)
                .map(|c| c.call_id.clone())
                .collect();
            if cp.recover() > 0 {
                self.native_save(
                    "tool_uncertain",
                    snap,
                    run,
                    row,
                    &cp,
                    "tool_outcome_uncertain",
                    json!({ "turn_row": row, "keys": cut_calls, "action": "never executed again; the model is told" }),
                )
                .await?;
            }
        }
        let ws = Workspace::new(&snap.task.workspace).map_err(|e| {
            StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!("the task workspace is not usable: {e}"),
            ))
        })?;
        let limits = Limits::default();
        let scrub = self.scrub(&snap.task.profile);
        let scrub_refs: Vec<&str> = scrub.iter().map(String::as_str).collect();
        loop {
            // Execute the model's calls in order.
            while let Some(i) = cp
                .pending_calls
                .iter()
                .position(|c| c.status == CallStatus::Pending)
            {
                let call = cp.pending_calls[i].clone();
                let output = match Tool::parse(&call.name, &call.arguments) {
                    Err(e) => ToolOutput::from(e),
                    Ok(tool) => {
                        if tool.has_effect() {
                            cp.pending_calls[i].status = CallStatus::Executing;
                            self.native_save(
                                "tool_executing",
                                snap,
                                run,
                                row,
                                &cp,
                                "tool.executing",
                                json!({ "turn_row": row, "key": call.call_id, "kind": call.name }),
                            )
                            .await?;
                        }
                        let out = tool.execute(&ws, &limits, &scrub_refs).await;
                        hit("runner.tool.executed");
                        out
                    }
                };
                cp.pending_calls[i].status = CallStatus::Completed {
                    output: output.output,
                    ok: output.ok,
                };
                let more = cp
                    .pending_calls
                    .iter()
                    .any(|c| c.status == CallStatus::Pending);
                #[cfg(not(feature = "seeded-bugs"))]
                let skip = {
                    let _ = more;
                    false
                };
                // SEEDED BUG continue-before-outcome: the outcome of a call
                // is only written with the next call's intent.
                #[cfg(feature = "seeded-bugs")]
                let skip = more && seeded::active(SeededBug::ContinueBeforeOutcome);
                if !skip {
                    self.native_save(
                        "tool_outcome",
                        snap,
                        run,
                        row,
                        &cp,
                        "tool.outcome",
                        json!({ "turn_row": row, "key": call.call_id, "ok": output.ok }),
                    )
                    .await?;
                }
            }
            if cp.model_calls >= NATIVE_MODEL_CALLS_MAX {
                return Err(StepError::Fail(Cause::new(
                    CauseCode::ProviderProtocolError,
                    format!(
                        "the model was asked {} times in one turn without a final answer",
                        cp.model_calls
                    ),
                )));
            }
            // Ask the model: the conversation so far, then this turn.
            let (conv, r) = (conversation.to_owned(), row);
            let earlier = self
                .store
                .call(move |db| db.native_checkpoints_before(&conv, r))
                .await?;
            let mut input = Vec::new();
            for v in &earlier {
                let prev = Checkpoint::from_json(v).map_err(|e| corrupt(e.to_string()))?;
                input.extend(prev.model_input());
            }
            input.extend(cp.model_input());
            let metadata = json!({
                "turncut_message_id": turn.message_id,
                "turncut_conversation": conversation,
            });
            let native = l.driver.native().expect("checked by the caller");
            let out = native
                .respond(&profile.model, input, tools::definitions(), metadata)
                .await
                .map_err(driver_err)?;
            let calls = cp.record_response(out.items).map_err(|e| {
                StepError::Fail(Cause::new(CauseCode::ProviderProtocolError, e.to_string()))
            })?;
            self.native_save(
                "model_output",
                snap,
                run,
                row,
                &cp,
                "model.output",
                json!({ "turn_row": row, "response_id": out.id, "calls": calls }),
            )
            .await?;
            if calls == 0 {
                let (tid, rid) = (task_id.clone(), run.run_id.clone());
                let pt = turn.client_id.clone();
                return self
                    .write("turn_completed", move |db| {
                        db.turn_finished(
                            &tid,
                            &rid,
                            row,
                            "completed",
                            json!({ "provider_turn_id": pt }),
                        )
                    })
                    .await;
            }
        }
    }

    /// Records the loss of a provider and stops what is left of it.
    async fn provider_lost(
        &self,
        task_id: &str,
        run: &Run,
        err: DriverError,
        live: &mut Option<Live>,
    ) -> Result<(), StepError> {
        let event = match err {
            DriverError::Unresponsive { .. } => ContractEvent::ProviderUnresponsive,
            _ => ContractEvent::ProviderExited,
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
                json!({ "pid": pid, "detail": detail }),
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
        let cause = Some(cause);
        #[cfg(feature = "seeded-bugs")]
        let cause = if seeded::active(SeededBug::NullCause) {
            // SEEDED BUG null-cause: the failure is settled without its cause.
            None
        } else {
            cause
        };
        let (tid, rid) = (task_id.to_owned(), run.run_id.clone());
        self.write("run_settled", move |db| db.settle(&tid, &rid, state, cause))
            .await
    }

    /// Stops a live provider and records the proof.
    async fn stop_live(&self, task_id: &str, mut l: Live) -> Result<(), StepError> {
        // Closing stdin lets a well-behaved provider exit on its own first.
        drop(l.driver);
        // Client-side terminals die with the provider that asked for them.
        for t in l.terminals.values_mut() {
            if let Some(p) = t.process.as_mut() {
                p.kill();
            }
        }
        let proc = ProcRef {
            run_id: &l.run_id,
            proc_row: l.proc_row,
            identity: &l.identity,
            marker: &l.marker,
        };
        self.stop_proc(task_id, proc, &mut l.child).await
    }

    /// The spawn marker a stop must sweep.
    fn stop_marker<'m>(&self, marker: Option<&'m str>) -> Option<&'m str> {
        #[cfg(feature = "seeded-bugs")]
        if seeded::active(SeededBug::SkipMarkerSweep) {
            // SEEDED BUG skip-marker-sweep: a stop is proven by the
            // provider's pid and process group alone; what it started in
            // another session lives on.
            return None;
        }
        marker
    }

    /// Sweeps the marker of a spawn intent whose identity was never recorded
    /// and records what it found; processes that cannot be proven stopped
    /// quarantine the task.
    async fn sweep_spawn(
        &self,
        task_id: &str,
        spawn: &crate::store::SpawnIntent,
    ) -> Result<(), StepError> {
        let sweep = supervisor::sweep_marker(&spawn.marker, self.opts.kill_grace).await;
        if !sweep.gone {
            return Err(StepError::Fail(Cause::new(
                CauseCode::CleanupQuarantined,
                format!(
                    "{} process(es) of a provider spawned before its identity was recorded \
                     could not be proven stopped",
                    sweep.killed.len()
                ),
            )));
        }
        let proof = serde_json::to_value(&sweep).expect("sweeps serialize");
        let (tid, rid, row) = (task_id.to_owned(), spawn.run_id.clone(), spawn.spawn_row);
        self.write("provider_stop", move |db| {
            db.record_spawn_swept(&tid, &rid, row, proof)
        })
        .await
    }

    /// Stops a provider process (and every process carrying its marker) and
    /// records the proof.
    async fn stop_proc(
        &self,
        task_id: &str,
        proc: ProcRef<'_>,
        child: &mut tokio::process::Child,
    ) -> Result<(), StepError> {
        let identity = proc.identity;
        let (outcome, tree) = supervisor::descendants::stop(
            identity,
            Some(child),
            self.stop_marker(Some(proc.marker)),
            self.opts.term_grace,
            self.opts.kill_grace,
        )
        .await;
        match outcome {
            StopOutcome::Stopped(proof) => {
                let proof = proof_json(&proof, &tree);
                let (tid, rid, row) = (task_id.to_owned(), proc.run_id.to_owned(), proc.proc_row);
                self.write("provider_stop", move |db| {
                    db.record_stop(&tid, &rid, row, proof)
                })
                .await
            }
            StopOutcome::StillRunning { identity } => Err(StepError::Fail(Cause::new(
                CauseCode::CleanupQuarantined,
                format!("provider pid {} survived SIGKILL", identity.pid),
            ))),
            StopOutcome::Unprovable { identity, reason } => Err(StepError::Fail(Cause::new(
                CauseCode::CleanupQuarantined,
                format!(
                    "provider pid {} could not be proven stopped: {reason}",
                    identity.pid
                ),
            ))),
        }
    }
}

/// A stop proof as recorded: the provider's, with what was found of its
/// descendants in other sessions and killed.
fn proof_json(proof: &supervisor::StopProof, tree: &supervisor::descendants::TreeOutcome) -> Value {
    let mut v = serde_json::to_value(proof).expect("proofs serialize");
    v["descendants"] = json!({ "seen": tree.seen, "killed": tree.killed });
    v
}

async fn snap_message_text(
    store: &Store,
    task_id: &str,
    message_id: &str,
) -> Result<String, StepError> {
    let (tid, mid) = (task_id.to_owned(), message_id.to_owned());
    let m = store.call(move |db| db.message(&tid, &mid)).await?;
    m.map(|m| m.text).ok_or_else(|| {
        StepError::Storage(StoreError::Corrupt {
            table: "messages",
            detail: format!("turn for unknown message {message_id}"),
        })
    })
}

/// Starts an ACP `terminal/create` command as a [`tools::ToolProcess`]: its
/// working directory is confined to the workspace, its environment is the
/// native tools' allowlist ([`tools::tool_env`]) plus the variables the agent
/// asked for, none of which may be a `scrub` name or carry a `scrub` string.
fn start_terminal(
    ws: &Workspace,
    command: &str,
    args: &[String],
    env: Vec<(String, String)>,
    cwd: Option<String>,
    scrub: &[&str],
) -> Result<tools::ToolProcess, String> {
    let dir = match cwd.as_deref() {
        Some(c) => ws.resolve(c)?,
        None => ws.root().to_path_buf(),
    };
    let scrubbed = |s: &str| scrub.iter().any(|x| !x.is_empty() && s.contains(x));
    let mut vars = tools::owned(tools::tool_env(ws, scrub, |n| std::env::var(n).ok()));
    vars.extend(
        env.into_iter()
            .filter(|(k, v)| !scrubbed(k) && !scrubbed(v)),
    );
    tools::ToolProcess::spawn(command, args, &dir, vars, Limits::default().output_bytes)
        .map_err(|e| format!("failed to start {command}: {e}"))
}

/// An ACP terminal's exit status (`exitCode`, `signal`), its output (stdout,
/// then stderr, bounded, masked) and whether the output was truncated.
fn terminal_result(
    done: tools::Finished,
    limits: &Limits,
    scrub: &[&str],
) -> (Value, String, bool) {
    let exit = match &done.status {
        Ok(s) if !done.timed_out => {
            json!({ "exitCode": s.code(), "signal": s.signal().map(|s| s.to_string()) })
        }
        _ => json!({ "exitCode": null, "signal": null }),
    };
    let note = match (&done.status, done.timed_out) {
        (_, true) => Some(format!(
            "timed out after {} ms; the command's process group was killed",
            limits.bash_timeout.as_millis()
        )),
        (Err(e), false) => Some(format!("exit status unknown: {e}")),
        (Ok(_), false) => None,
    };
    let note = match (note, done.drained) {
        (note, true) => note,
        (note, false) => Some(tools::with_drain_note(note.unwrap_or_default(), false)),
    };
    let (output, truncated) = tools::render(
        done.stdout,
        done.stderr,
        note.as_deref(),
        limits.output_bytes,
    );
    (exit, tools::mask(&output, scrub), truncated)
}

/// A fresh opaque id with a prefix.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The longest task id that names its provider directory as it is.
const PLAIN_ID_BYTES_MAX: usize = 64;

/// The name of a task's provider directory (`providers/NAME`), injective in
/// the task id so that no two tasks share provider state. An id of at most
/// [`PLAIN_ID_BYTES_MAX`] ASCII letters, digits, `-` and `_` is its own name,
/// as it always was, so a state directory from before keeps its provider
/// directories. Any other id is named by its first 40 such characters (the
/// rest replaced by `_`), a `.`, and 32 hex digits of the SHA-256 of the exact
/// id; the `.` never occurs in a name of the first form, so the two forms
/// cannot meet. (An older runner named such ids lossily; their old
/// directories are not adopted, since two tasks may have shared one.)
fn sanitize(id: &str) -> String {
    use sha2::Digest as _;
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if !id.is_empty() && id.len() <= PLAIN_ID_BYTES_MAX && id.chars().all(safe) {
        return id.to_owned();
    }
    let prefix: String = id
        .chars()
        .take(40)
        .map(|c| if safe(c) { c } else { '_' })
        .collect();
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}.{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids that an older runner mapped to one directory get one each; ids
    /// that were already plain keep their old name.
    #[test]
    fn provider_dir_names_are_injective_and_keep_plain_ids() {
        let ids = [
            "col/1",
            "col.1",
            "col 1",
            "col_1",
            "é",
            "ü",
            "",
            "a".repeat(65).as_str(),
            "a".repeat(64).as_str(),
        ]
        .map(str::to_owned);
        let names: std::collections::HashSet<String> = ids.iter().map(|i| sanitize(i)).collect();
        assert_eq!(names.len(), ids.len(), "{names:?}");
        assert_eq!(sanitize("col_1"), "col_1");
        assert_eq!(sanitize("task-7"), "task-7");
        assert_eq!(sanitize(&"a".repeat(64)), "a".repeat(64));
        let hashed = sanitize("col/1");
        assert!(hashed.starts_with("col_1."), "{hashed}");
        assert_eq!(hashed.len(), "col_1.".len() + 32);
        for name in &names {
            assert!(
                !name.is_empty()
                    && name != "."
                    && name != ".."
                    && !name.contains('/')
                    && name.len() <= 255,
                "{name:?}"
            );
        }
        assert_eq!(sanitize("col/1"), hashed, "stable");
    }
}
