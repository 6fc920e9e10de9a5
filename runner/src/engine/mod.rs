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
//!
//! The parts, in the order a step meets them:
//! - `actor`: the actor loop, one step (provider, conversation, next
//!   message, settle) and how a step's error settles the run;
//! - `provider`: a provider process's lifecycle: the old ones stopped with
//!   proof, a new one spawned write-ahead and connected ([`Live`]);
//! - `recovery`: the pure classification of a cut turn ([`recovery::classify`]),
//!   row for row with `docs/recovery-contract.md`;
//! - `turn`: carrying out a classification, and the write-ahead turn loop;
//! - `client_tools`: ACP client-side tools under write-ahead;
//! - `native_loop`: the native profile's agent loop, where the runner is the agent;
//! - `retry`: the Retry request (stop proof, fresh run).

mod actor;
mod client_tools;
mod credential_fifo;
mod credential_socket;
mod native_loop;
mod provider;
mod recovery;
mod retry;
mod turn;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::causes::{Cause, CauseCode};
use crate::driver::DriverError;
use crate::profiles::Profile;
use crate::store::{Db, Store, StoreError};

pub use retry::RetryOutcome;

/// How many model responses one native turn may take.
pub const NATIVE_MODEL_CALLS_MAX: u32 = 32;

/// The text a continuation turn sends instead of the original message.
pub use wire::marker::CONTINUE_TEXT;

/// How many times one run may lose its provider in one runner process before
/// the run fails instead of restarting the provider again.
pub const PROVIDER_LOSSES_MAX: u32 = 4;

/// Configuration of the engine.
pub struct EngineOptions {
    /// The runner's state directory (providers get subdirectories).
    pub state_dir: PathBuf,
    /// The owner epoch of this runner process.
    pub epoch: i64,
    /// The bounds of every provider connection: idle and request timeouts,
    /// output bytes per second.
    pub bounds: crate::driver::Bounds,
    /// How long a provider whose run's turns all ended gets, its input
    /// closed, to exit on its own before SIGTERM.
    pub exit_grace: Duration,
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

/// Why a step did not complete.
enum StepError {
    /// The run fails with this cause.
    Fail(Cause),
    /// The provider is gone or silent; recovery follows.
    Lost(DriverError),
    /// A durable write failed; nothing may be sent after it.
    Storage(StoreError),
    /// A read the step decides from failed; nothing was sent after it, and
    /// the actor reads again after a pause (`actor::Reads`).
    Read(StoreError),
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepError::Fail(c) => write!(f, "{}: {}", c.code.as_str(), c.message),
            StepError::Lost(e) => write!(f, "provider lost: {e}"),
            StepError::Storage(e) => write!(f, "storage failed: {e}"),
            StepError::Read(e) => write!(f, "a read failed: {e}"),
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
        DriverError::Upstream { cause, .. } => StepError::Fail(Cause::new(cause, e.to_string())),
    }
}

impl Engine {
    /// Creates the engine (its runner holds the state directory's lock, so
    /// what an earlier runner left of its credential FIFOs is removed).
    pub fn new(store: Store, opts: EngineOptions) -> Arc<Engine> {
        credential_fifo::sweep(&opts.state_dir);
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

    /// Starts actors for every task that was executing when the runner
    /// stopped. A failed read of that list is tried again after a pause (50
    /// ms, doubling), [`actor::READ_TRIES`] times in all; the error of the
    /// last try ends the runner's start (exit 3), since a runner that cannot
    /// tell which tasks it must resume would leave them without an actor.
    pub async fn recover_all(self: &Arc<Self>) -> Result<usize, StoreError> {
        let epoch = self.opts.epoch;
        let tasks = self
            .read_tried("the tasks to resume", move |db| db.unsettled_tasks(epoch))
            .await?;
        if crate::seeded::stuck_after_restart() {
            // SEEDED BUG stuck-after-restart: the tasks are counted (and
            // logged as resumed) but no actor is woken for them.
            return Ok(tasks.len());
        }
        for t in &tasks {
            self.wake(t);
            if crate::seeded::resume_first_task_only() {
                // SEEDED BUG resume-first-task-only: the loop ends after the
                // first task, so only one of several unsettled tasks is
                // resumed (with one task, nothing is missed).
                break;
            }
        }
        Ok(tasks.len())
    }

    /// Wakes the task's actor, starting it if needed. A wake sent to an
    /// actor is never lost: an actor returns only through
    /// [`Engine::retire`], which takes it out of the table under the same
    /// lock, so a wake either reaches an actor that reads it or finds no
    /// actor and starts one.
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

    /// Whether the actor of `task_id`, about to return, may: not when a
    /// wake is waiting in its channel (it goes on and reads the task
    /// again); otherwise its entry leaves the table under the table's lock,
    /// so the next wake starts a new actor instead of counting as
    /// delivered into a channel no one reads any more.
    fn retire(&self, task_id: &str, wake: &mut mpsc::UnboundedReceiver<()>) -> bool {
        let mut actors = self.actors.lock().expect("actor table");
        if wake.try_recv().is_ok() {
            return false;
        }
        wake.close();
        actors.remove(task_id);
        true
    }

    /// A read that answers a request rather than a step (the tasks to
    /// resume, a Retry's snapshot and message), tried as the actor tries its
    /// reads: again after a pause (50 ms, doubling), [`actor::READ_TRIES`]
    /// times in all, so that one failed read never fails the request; the
    /// last try's error is the answer.
    async fn read_tried<R: Send + 'static>(
        &self,
        what: &str,
        f: impl Fn(&Db) -> Result<R, StoreError> + Clone + Send + 'static,
    ) -> Result<R, StoreError> {
        let mut pause = actor::READ_RETRY_FIRST;
        let mut tries = 1;
        loop {
            let once = f.clone();
            match self.store.call(move |db| once(db)).await {
                Err(e) if tries < actor::READ_TRIES => {
                    tracing::warn!(
                        "failed to read {what} ({e}); try {tries} of {}",
                        actor::READ_TRIES
                    );
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    /// A read the next step decides from: its point `runner.read.<read>`
    /// first ([`Db::check_read`]), then `f`. Any error of it is a failed
    /// read ([`StepError::Read`]).
    async fn read<R: Send + 'static>(
        &self,
        read: &'static str,
        f: impl FnOnce(&Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StepError> {
        self.store
            .call(move |db| {
                db.check_read(read)?;
                f(db)
            })
            .await
            .map_err(StepError::Read)
    }

    /// A durable write of a step, then its cut point.
    async fn write<R: Send + 'static>(
        &self,
        name: &str,
        f: impl FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StepError> {
        let r = self.store.call(f).await?;
        crate::cut::persisted(name);
        Ok(r)
    }

    /// The task's profile; the provider's start checked that it exists.
    fn profile(&self, name: &str) -> &Profile {
        self.opts
            .profiles
            .get(name)
            .expect("checked when the provider started")
    }

    /// The text of a message of the task (the read `message`); a turn's
    /// message that is not there is a corrupt store, read like a failed read.
    async fn message_text(&self, task_id: &str, message_id: &str) -> Result<String, StepError> {
        let (tid, mid) = (task_id.to_owned(), message_id.to_owned());
        let m = self
            .read("message", move |db| db.message(&tid, &mid))
            .await?;
        m.map(|m| m.text).ok_or_else(|| {
            StepError::Read(StoreError::Corrupt {
                table: "messages",
                detail: format!("turn for unknown message {message_id}"),
            })
        })
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
}

#[cfg(test)]
mod tests;
