//! Provider process supervision: spawning a provider in its own process group,
//! recording an identity for it that a recycled pid cannot impersonate, and
//! stopping it (together with everything left in its process group) with a
//! proof that it is gone.
//!
//! The runner must survive being SIGKILLed at any instant, so after a restart
//! it follows the rule "old provider first": a provider left behind by the
//! previous incarnation is stopped here, and the conversation is touched only
//! once [`stop`] returns [`StopOutcome::Stopped`]. A process is identified by
//! its pid, its process group and its start time (field 22 of
//! `/proc/<pid>/stat`), because a pid alone may name an unrelated process by
//! the time the runner comes back.
//!
//! This module deliberately does not decide policy: it never quarantines,
//! restarts or persists anything (the caller records the identity before use
//! and quarantines on [`StopOutcome::Unprovable`] or
//! [`StopOutcome::StillRunning`]). It never sets `PR_SET_PDEATHSIG` on a
//! provider, because a provider orphaned by a runner crash is exactly the case
//! the restarted runner has to find and clean up; a death signal would hide
//! that case instead of handling it. It never reaps processes that are not the
//! caller's children. It is Linux-only (it relies on `/proc` and `pidfd_open`)
//! and must run inside a Tokio runtime with IO and time enabled.
//!
//! One file per step: `stat` (the one reader of `/proc/<pid>/stat`),
//! `liveness` (is this exact process alive), `spawn`, `wait` (observing an
//! exit: pidfd or polling), `stop` (signals, then the group), `marker` (the
//! spawn marker's sweep), `descendants` (what the provider started in
//! other sessions), and `containment` with `cgroup` (the provider's
//! container, which holds whatever it started, however it hid).

use serde::{Deserialize, Serialize};

mod cgroup;
pub mod containment;
/// What a provider started in sessions of their own (Codex commands).
pub mod descendants;
mod liveness;
mod marker;
mod spawn;
mod stat;
mod stop;
mod wait;

pub use liveness::is_alive;
pub use marker::{MARKER_ENV, MarkerSweep, marked_processes, sweep_marker};
pub use spawn::spawn_provider;
pub use stat::{children_of, identity_of};
pub use stop::{await_exit, kill_group, stop};

/// Who a provider process is, precisely enough that a recycled pid is never
/// mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// The process id (thread group id) in the runner's pid namespace.
    pub pid: i32,
    /// The process group the provider was spawned into; equal to `pid` for
    /// processes started by [`spawn_provider`].
    pub pgid: i32,
    /// Field 22 (`starttime`) of `/proc/<pid>/stat`: clock ticks after boot at
    /// which the process started. A recycled pid has a different value.
    pub start_time: u64,
}

/// Evidence that a stopped process is gone, for the caller to log or persist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopProof {
    pub identity: ProcessIdentity,
    /// How death was established: "esrch" (no such pid), "start_time_changed",
    /// "zombie", "exited" (observed exit via pidfd or waiting on our own child).
    pub method: String,
    /// Which signals we had to send while the process was alive, in order
    /// (empty if it was already gone): e.g. ["SIGTERM"] or
    /// ["SIGTERM","SIGKILL"]. The SIGKILL swept over the group after the
    /// process is gone is housekeeping and is not listed.
    pub signals: Vec<String>,
    /// Whether the whole process group was verified gone
    /// (`killpg(pgid, 0)` == ESRCH) within the kill grace period. Members may
    /// be zombies briefly until their parent (often init) reaps them.
    pub group_gone: bool,
    /// The sweep of the provider's spawn marker after it was gone: every
    /// process it started outside its group (another session, a daemon)
    /// that kept the marker in its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marked: Option<MarkerSweep>,
    /// The emptying of the provider's container (`containment`): which
    /// mechanism ran and what it killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contained: Option<containment::Contained>,
}

/// What [`stop`] could establish.
#[derive(Debug)]
pub enum StopOutcome {
    /// Proven gone; `proof` says how.
    Stopped(StopProof),
    /// Still alive after SIGTERM + SIGKILL and the deadlines (should only
    /// happen for a process stuck in uninterruptible sleep).
    StillRunning { identity: ProcessIdentity },
    /// We could not establish either way (e.g. EPERM on kill, /proc
    /// unreadable): the caller quarantines.
    Unprovable {
        identity: ProcessIdentity,
        reason: String,
    },
}

#[cfg(test)]
mod tests;
