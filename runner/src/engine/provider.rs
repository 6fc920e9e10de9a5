//! A provider process's lifecycle: every earlier process of the task stopped
//! with a recorded proof, then a new one spawned write-ahead (a durable spawn
//! intent with a marker first, the identity before the handshake) and
//! connected; and the stops that record their proof.
//!
//! It decides nothing about turns: a process that cannot be proven stopped
//! becomes a `cleanup_quarantined` failure for the actor to settle.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::client_tools::Terminal;
use super::{Engine, StepError};
use crate::causes::{Cause, CauseCode};
use crate::driver::native::NativeDriver;
use crate::driver::{self, Driver, DriverError};
use crate::ids::new_id;
use crate::profiles::{DriverKind, Profile};
use crate::store::{ProviderProc, Run, Snapshot, SpawnIntent};
use crate::supervisor::{self, ProcessIdentity, StopOutcome};

/// A provider process owned by an actor.
pub(super) struct Live {
    pub(super) child: tokio::process::Child,
    pub(super) identity: ProcessIdentity,
    pub(super) proc_row: i64,
    /// The spawn marker in the provider's environment.
    pub(super) marker: String,
    pub(super) run_id: String,
    pub(super) link: Link,
    /// Terminals of client-side tools (ACP), by terminal id.
    pub(super) terminals: HashMap<String, Terminal>,
    /// The credential hand-off served to this process, if its profile has
    /// one; held only to be dropped with it (a read still awaited is then
    /// never served).
    pub(super) _credential: Option<Handoff>,
}

/// A one-shot hand-off of the credential being served to one provider: a
/// FIFO for a provider that reads its key from a file, a socket for one
/// that connects (the fakes).
pub(super) enum Handoff {
    Fifo(super::credential_fifo::Served),
    Socket(super::credential_socket::Served),
}

impl Handoff {
    /// The path the provider is given in its credential variable.
    fn path(&self) -> &std::path::Path {
        match self {
            Handoff::Fifo(f) => &f.path,
            Handoff::Socket(s) => &s.path,
        }
    }

    /// The provider's pid, once spawned: only that process is served.
    fn provider(&self, pid: i32) {
        match self {
            Handoff::Fifo(f) => f.provider(pid),
            Handoff::Socket(s) => s.provider(pid),
        }
    }
}

/// How the runner talks to a live provider process. There is one per live
/// provider, so the size difference of the variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Link {
    /// A provider that runs the agent loop, through its protocol driver.
    Agent(Driver),
    /// A model API: the runner is the agent loop (`native_loop`).
    Native(NativeDriver),
}

impl Link {
    async fn attach(
        kind: DriverKind,
        child: &mut tokio::process::Child,
        bounds: driver::Bounds,
        namespace: &str,
    ) -> Result<Link, DriverError> {
        Ok(match kind {
            DriverKind::Native => Link::Native(NativeDriver::attach(child, bounds).await?),
            kind => Link::Agent(Driver::attach(kind, child, bounds, namespace).await?),
        })
    }

    async fn initialize(&mut self) -> Result<(), DriverError> {
        match self {
            Link::Agent(d) => d.initialize().await,
            Link::Native(d) => d.initialize().await,
        }
    }

    /// Opens a fresh conversation in `cwd`; returns its id.
    pub(super) async fn open_conversation(&mut self, cwd: &str) -> Result<String, DriverError> {
        match self {
            Link::Agent(d) => d.open_conversation(cwd).await,
            // The conversation lives in the runner's own store.
            Link::Native(_) => Ok(new_id("conv")),
        }
    }

    /// Loads an existing conversation into this provider process.
    pub(super) async fn resume_conversation(
        &mut self,
        id: &str,
        cwd: &str,
    ) -> Result<(), DriverError> {
        match self {
            Link::Agent(d) => d.resume_conversation(id, cwd).await,
            Link::Native(_) => Ok(()),
        }
    }

    /// The client id a turn for `message_id` carries ([`Driver::client_id`]).
    pub(super) fn client_id(&mut self, message_id: &str, continuation: bool) -> String {
        match self {
            Link::Agent(d) => d.client_id(message_id, continuation),
            Link::Native(_) => driver::plain_client_id(message_id, continuation),
        }
    }
}

/// A provider process of this runner, as [`Engine::stop_proc`] needs it.
#[derive(Clone, Copy)]
struct ProcRef<'a> {
    run_id: &'a str,
    proc_row: i64,
    identity: &'a ProcessIdentity,
    marker: &'a str,
}

/// A process just spawned, its identity durable.
struct Spawned {
    child: tokio::process::Child,
    identity: ProcessIdentity,
    marker: String,
    proc_row: i64,
    credential: Option<Handoff>,
}

impl Engine {
    /// Old provider first, then a new one, recorded before use.
    pub(super) async fn start_provider(
        &self,
        snap: &Snapshot,
        run: &Run,
    ) -> Result<Live, StepError> {
        self.stop_previous(snap).await?;
        let Some(profile) = self.opts.profiles.get(&snap.task.profile) else {
            return Err(StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!(
                    "profile {} is not configured in this runner",
                    snap.task.profile
                ),
            )));
        };
        let spawned = self.spawn(snap, run, profile).await?;
        self.connect(snap, run, profile, spawned).await
    }

    /// Stops every earlier provider process of the task with a recorded
    /// proof, and sweeps spawn intents whose identity was never recorded.
    async fn stop_previous(&self, snap: &Snapshot) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        for p in &snap.live_procs {
            if crate::seeded::skip_stop_proof() {
                self.record_unproven_stop(task_id, p).await?;
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
        Ok(())
    }

    /// SEEDED BUG skip-stop-proof: assumes the previous runner's providers
    /// died with it and records a stop it never proved.
    async fn record_unproven_stop(&self, task_id: &str, p: &ProviderProc) -> Result<(), StepError> {
        let proof = supervisor::StopProof {
            identity: p.identity,
            method: "owner_restarted".to_owned(),
            signals: Vec::new(),
            group_gone: true,
            marked: None,
            contained: None,
        };
        let proof = serde_json::to_value(&proof).expect("proofs serialize");
        let (tid, rid, row) = (task_id.to_owned(), p.run_id.clone(), p.proc_row);
        self.write("provider_stop", move |db| {
            db.record_stop(&tid, &rid, row, proof)
        })
        .await
    }

    /// Spawns the profile's provider write-ahead: the marker is durable
    /// before the process exists, so a runner killed before the identity is
    /// recorded leaves the next one a way to find and stop it (and whatever
    /// it started). A process whose identity cannot be recorded is stopped.
    async fn spawn(
        &self,
        snap: &Snapshot,
        run: &Run,
        profile: &Profile,
    ) -> Result<Spawned, StepError> {
        let task_id = &snap.task.task_id;
        let provider_dir = self.provider_dir(task_id)?;
        let argv = crate::profiles::expand(
            &profile.command,
            &provider_dir,
            &snap.task.workspace,
            task_id,
        );
        let marker = new_id("spawn");
        let (tid, rid, m) = (task_id.clone(), run.run_id.clone(), marker.clone());
        let spawn_row = self
            .write("provider_spawn_intent", move |db| {
                db.spawn_intent(&tid, &rid, &m)
            })
            .await?;
        let (mut cmd, credential) =
            self.provider_command(&argv, &marker, &snap.task.workspace, profile);
        let group = container(&marker)?;
        let (mut child, identity) =
            supervisor::spawn_provider(&mut cmd, group.as_ref()).map_err(|e| {
                StepError::Fail(Cause::new(
                    CauseCode::ProviderStartFailed,
                    format!("failed to start {}: {e}", argv[0]),
                ))
            })?;
        drop(group);
        if let Some(served) = &credential {
            served.provider(identity.pid);
        }
        // The window between the spawn and the durable identity.
        crate::cut::hit("runner.provider.spawned");
        let recorded = self
            .record_identity(task_id, run, spawn_row, identity)
            .await;
        match recorded {
            Ok(proc_row) => Ok(Spawned {
                child,
                identity,
                marker,
                proc_row,
                credential,
            }),
            Err(e) => {
                // The whole stop, container included: a provider stopped
                // while it starts may be starting a child in a session of
                // its own, which its group and the marker sweep alone
                // missed (the default wave found one alive; likely inside
                // its exec, when its environment reads empty).
                let _ = supervisor::descendants::stop(
                    &identity,
                    Some(&mut child),
                    self.stop_marker(Some(&marker)),
                    Duration::ZERO,
                    self.opts.term_grace,
                    self.opts.kill_grace,
                )
                .await;
                Err(e)
            }
        }
    }

    /// The task's provider directory (`providers/<task>` in the state
    /// directory), created durably, as the provider's own store inside it: a
    /// power loss must not take the provider's record of the turns away with
    /// the name.
    fn provider_dir(&self, task_id: &str) -> Result<std::path::PathBuf, StepError> {
        let dir = (self.opts.state_dir)
            .join("providers")
            .join(sanitize(task_id));
        crate::workspace::create_dir_all_durably(&dir, 0o777).map_err(|e| {
            StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!("failed to create {}: {e}", dir.display()),
            ))
        })?;
        Ok(dir)
    }

    /// The provider's command line, with its spawn marker and role in the
    /// environment and the credential, in the task workspace when it exists;
    /// and the hand-off it is served through, if its profile has one.
    fn provider_command(
        &self,
        argv: &[String],
        marker: &str,
        workspace: &str,
        profile: &Profile,
    ) -> (tokio::process::Command, Option<Handoff>) {
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .env(cutpoint::ENV_ROLE, "provider")
            .env(supervisor::MARKER_ENV, marker);
        if std::path::Path::new(workspace).is_dir() {
            cmd.current_dir(workspace);
        }
        let mut served = None;
        match &self.opts.credential {
            Some(secret) if profile.credential_socket || profile.credential_fifo => {
                let (state, marker) = (&self.opts.state_dir, marker);
                let reads = profile.credential_reads;
                let handoff = if profile.credential_socket {
                    super::credential_socket::serve(state, secret, marker, reads)
                        .map(Handoff::Socket)
                } else {
                    super::credential_fifo::serve(state, secret, marker, reads).map(Handoff::Fifo)
                };
                match handoff {
                    Ok(h) => {
                        cmd.env(&profile.credential_env, h.path());
                        served = Some(h);
                    }
                    Err(e) => tracing::warn!("no credential hand-off for the provider: {e}"),
                }
            }
            Some(secret) => {
                cmd.env(&profile.credential_env, &secret.0);
            }
            None => {}
        }
        (cmd, served)
    }

    /// Records a spawned provider's identity (`provider_identity`).
    async fn record_identity(
        &self,
        task_id: &str,
        run: &Run,
        spawn_row: i64,
        identity: ProcessIdentity,
    ) -> Result<i64, StepError> {
        let (tid, rid) = (task_id.to_owned(), run.run_id.clone());
        let leaked = (self.opts.credential.clone())
            .filter(|_| crate::seeded::credential_in_store())
            .map(|s| s.0);
        self.write("provider_identity", move |db| {
            let leaked = leaked.as_deref();
            db.record_provider_leaking(&tid, &rid, spawn_row, identity, leaked)
        })
        .await
    }

    /// Connects to a spawned provider and shakes hands. Client-side tools of
    /// the run still `executing` become `uncertain` first: they belonged to
    /// an earlier process. A provider that cannot be reached is stopped.
    async fn connect(
        &self,
        snap: &Snapshot,
        run: &Run,
        profile: &Profile,
        spawned: Spawned,
    ) -> Result<Live, StepError> {
        let task_id = &snap.task.task_id;
        let Spawned {
            mut child,
            identity,
            marker,
            proc_row,
            credential,
        } = spawned;
        let attached = Link::attach(
            profile.driver,
            &mut child,
            self.opts.bounds,
            &proc_row.to_string(),
        )
        .await;
        let link = match attached {
            Ok(link) => link,
            Err(e) => {
                let proc = ProcRef {
                    run_id: &run.run_id,
                    proc_row,
                    identity: &identity,
                    marker: &marker,
                };
                self.stop_proc(task_id, proc, &mut child, Duration::ZERO)
                    .await?;
                return Err(start_error(e, "the provider could not be reached"));
            }
        };
        let mut live = Live {
            child,
            identity,
            proc_row,
            marker,
            run_id: run.run_id.clone(),
            link,
            terminals: HashMap::new(),
            _credential: credential,
        };
        let (tid, rid) = (task_id.clone(), run.run_id.clone());
        match self
            .store
            .call(move |db| db.tools_uncertain(&tid, &rid))
            .await
        {
            Ok(0) => {}
            Ok(_) => crate::cut::persisted("tool_uncertain"),
            Err(e) => {
                // The process is running: stopped with proof (its session
                // children too, by its marker) before the failure is
                // settled. Dropped, it left them behind.
                let _ = self.stop_live(task_id, live).await;
                return Err(e.into());
            }
        }
        let handshake = live.link.initialize().await;
        if let Err(e) = handshake {
            let _ = self.stop_live(task_id, live).await;
            return Err(start_error(e, "the provider failed its handshake"));
        }
        Ok(live)
    }

    /// Stops an earlier provider process of the task (not a child of this
    /// runner) and records the proof. `Err` carries the outcome that proved
    /// nothing.
    pub(super) async fn stop_old(
        &self,
        task_id: &str,
        p: &ProviderProc,
    ) -> Result<Result<Value, StopOutcome>, crate::store::StoreError> {
        // Not this runner's child: its input closed with the runner that
        // spawned it, so it had its chance to exit on its own.
        let (outcome, tree) = supervisor::descendants::stop(
            &p.identity,
            None,
            self.stop_marker(p.marker.as_deref()),
            Duration::ZERO,
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
                crate::cut::persisted("provider_stop");
                Ok(Ok(proof))
            }
            other => Ok(Err(other)),
        }
    }

    /// Stops a live provider and records the proof.
    pub(super) async fn stop_live(&self, task_id: &str, l: Live) -> Result<(), StepError> {
        self.stop_live_after(task_id, l, Duration::ZERO).await
    }

    /// Stops the live provider of a run whose turns all ended, and records
    /// the proof: with its input closed it has `--provider-exit-grace-ms` to
    /// exit on its own before any signal, because an agent may write its
    /// record of a turn after answering it (Claude Code's transcript, on a
    /// 100 ms timer), and a provider stopped at once would read, after a
    /// restart, as one whose turn never ended. An OpenCode server gets none:
    /// its input is not its channel (it never exits for it, so the grace was
    /// 2 s of every run's end), and it has stored a turn's answer before it
    /// serves it as completed, which is when the driver ends the turn.
    pub(super) async fn finish_live(&self, task_id: &str, l: Live) -> Result<(), StepError> {
        let grace = match &l.link {
            Link::Agent(crate::driver::Driver::OpenCode(_)) => Duration::ZERO,
            _ => self.opts.exit_grace,
        };
        self.stop_live_after(task_id, l, grace).await
    }

    /// [`Engine::stop_live`], the provider first given `exit_grace` to exit
    /// on its own once its input is closed.
    async fn stop_live_after(
        &self,
        task_id: &str,
        mut l: Live,
        exit_grace: Duration,
    ) -> Result<(), StepError> {
        // Closing stdin lets a well-behaved provider exit on its own first:
        // the stdio drivers hold it, an HTTP provider's is still the child's.
        drop(l.link);
        drop(l.child.stdin.take());
        // Client-side terminals die with the provider that asked for them.
        for t in l.terminals.values_mut() {
            t.kill();
        }
        let proc = ProcRef {
            run_id: &l.run_id,
            proc_row: l.proc_row,
            identity: &l.identity,
            marker: &l.marker,
        };
        self.stop_proc(task_id, proc, &mut l.child, exit_grace)
            .await
    }

    /// The spawn marker a stop must sweep.
    fn stop_marker<'m>(&self, marker: Option<&'m str>) -> Option<&'m str> {
        if crate::seeded::skip_marker_sweep() {
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
    async fn sweep_spawn(&self, task_id: &str, spawn: &SpawnIntent) -> Result<(), StepError> {
        let sweep = supervisor::sweep_marker(&spawn.marker, self.opts.kill_grace).await;
        let contained = match supervisor::containment::get() {
            Some(c) => Some(c.empty(&spawn.marker, self.opts.kill_grace).await),
            None => None,
        };
        if contained.as_ref().is_some_and(|c| !c.gone) {
            return Err(StepError::Fail(Cause::new(
                CauseCode::CleanupQuarantined,
                "the container of a provider spawned before its identity was recorded \
                 could not be proven empty"
                    .to_owned(),
            )));
        }
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
        let mut proof = serde_json::to_value(&sweep).expect("sweeps serialize");
        if let Some(c) = contained {
            proof["contained"] = serde_json::to_value(&c).expect("proofs serialize");
        }
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
        exit_grace: Duration,
    ) -> Result<(), StepError> {
        let identity = proc.identity;
        let (outcome, tree) = supervisor::descendants::stop(
            identity,
            Some(child),
            self.stop_marker(Some(proc.marker)),
            exit_grace,
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

/// The control group of the provider spawned with `marker`, named by the
/// durable marker and made before the provider exists (`None` where
/// runnerd's container is the subreaper).
fn container(marker: &str) -> Result<Option<std::os::fd::OwnedFd>, StepError> {
    let Some(containment) = supervisor::containment::get() else {
        return Ok(None);
    };
    containment.prepare(marker).map_err(|e| {
        StepError::Fail(Cause::new(
            CauseCode::ProviderStartFailed,
            format!(
                "failed to make the provider's container ({}): {e}",
                containment.mechanism()
            ),
        ))
    })
}

/// A failure to reach a new provider: a lost one is recovered like any
/// loss, anything else fails the run with `provider_start_failed`.
fn start_error(e: DriverError, what: &str) -> StepError {
    match e {
        DriverError::Exited | DriverError::Unresponsive { .. } => StepError::Lost(e),
        other => StepError::Fail(Cause::new(
            CauseCode::ProviderStartFailed,
            format!("{what}: {other}"),
        )),
    }
}

/// A stop proof as recorded: the provider's, with what was found of its
/// descendants in other sessions and killed.
fn proof_json(proof: &supervisor::StopProof, tree: &supervisor::descendants::TreeOutcome) -> Value {
    let mut v = serde_json::to_value(proof).expect("proofs serialize");
    v["descendants"] = json!({ "seen": tree.seen, "killed": tree.killed });
    v
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
