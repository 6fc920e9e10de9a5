//! Stopping a provider and proving it gone: a fresh identity check before
//! each signal (SIGTERM, then SIGKILL), a wait for the exit, then a SIGKILL
//! over what is left of its process group and a wait for the group to be
//! empty.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use tokio::process::Child;
use tokio::time::Instant;

use super::liveness::{DeathMethod, Observation, observe};
use super::stat::{is_no_such_process, proc_pid, read_stat};
use super::wait::{
    ExitWatch, INITIAL_POLL_INTERVAL, PidfdUse, WaitResult, backoff, pidfd_open, register_pidfd,
    wait_for_exit,
};
use super::{ProcessIdentity, StopOutcome, StopProof};

/// Whether the group id in an identity still names the provider's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupStatus {
    /// The id still names the provider's group (or no group at all), so it
    /// may be signalled.
    Ours,
    /// The id has been reused, which the kernel only does once every member
    /// of the original group is gone.
    ProvablyGone,
    /// Signalling the id might hit someone else's group.
    Unverifiable,
}

/// Decides whether `killpg(id.pgid)` would reach the provider's group.
///
/// Linux does not reuse a number while any process still uses it as a pid or
/// as a process group id, so for a group led by the provider itself the
/// group id stays the provider's as long as the leader (even as a zombie) or
/// any member exists. The one residual risk is a group whose members all died
/// and whose number was reused for a new group whose leader then exited,
/// all after the provider was last seen; that needs the pid space to wrap
/// and is accepted.
fn group_status(id: &ProcessIdentity, saw_member_alive: bool) -> GroupStatus {
    if id.pgid <= 0 || id.pgid == getpgrp().as_raw() {
        // killpg(0) and killpg of our own group would signal the runner itself.
        return GroupStatus::Unverifiable;
    }
    if id.pgid == id.pid {
        return match read_stat(id.pgid) {
            Ok(snapshot) if snapshot.identity.start_time == id.start_time => GroupStatus::Ours,
            Ok(_) => GroupStatus::ProvablyGone,
            Err(error) if is_no_such_process(&error) => GroupStatus::Ours,
            Err(_) => GroupStatus::Unverifiable,
        };
    }
    // The group is led by some other process whose start time we never
    // recorded; it is ours only if we just saw the provider inside it.
    if saw_member_alive {
        GroupStatus::Ours
    } else {
        GroupStatus::Unverifiable
    }
}

/// Kills what is left in the provider's group after the provider itself is
/// gone, reaps our own child, and reports whether the group is verified gone.
async fn sweep_group(
    id: &ProcessIdentity,
    saw_member_alive: bool,
    child: Option<&mut Child>,
    deadline: Instant,
) -> bool {
    // This runs before the child is reaped, so that while the leader is our
    // zombie its number cannot be reused and the SIGKILL cannot go astray.
    let status = group_status(id, saw_member_alive);
    if status == GroupStatus::Ours {
        // Tool subprocesses the provider left in its group die here. ESRCH
        // (empty group) is the expected answer; EPERM shows up as a group
        // that never verifies gone.
        let _ = killpg(Pid::from_raw(id.pgid), Signal::SIGKILL);
    }

    if let Some(child) = child {
        // The provider is proven gone, so waiting returns at once; the
        // deadline only guards against a child reaped behind tokio's back.
        let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    }

    match status {
        GroupStatus::ProvablyGone => return true,
        // Without a way to tell whose group the id names, "gone" can still be
        // proven by ESRCH below, but a live group cannot be blamed on us.
        GroupStatus::Ours | GroupStatus::Unverifiable => {}
    }
    if id.pgid <= 0 {
        return false;
    }

    let mut delay = INITIAL_POLL_INTERVAL;
    loop {
        if killpg(Pid::from_raw(id.pgid), None) == Err(Errno::ESRCH) {
            return true;
        }
        // Members that are already zombies are dead: they wait only for their
        // new parent (often init, which may reap lazily) to collect them, and
        // their numbers cannot be reused meanwhile.
        if only_zombies_in_group(id.pgid) {
            return true;
        }
        if !backoff(&mut delay, deadline).await {
            return false;
        }
    }
}

/// Whether every process in group `pgid` is a zombie, read from `/proc`.
/// Any doubt (an unreadable `/proc`) answers false.
pub(super) fn only_zombies_in_group(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    for entry in entries.flatten() {
        let Some(pid) = proc_pid(&entry) else {
            continue;
        };
        match read_stat(pid) {
            Ok(snap) if snap.identity.pgid == pgid && !matches!(snap.state, 'Z' | 'X') => {
                return false;
            }
            Ok(_) => {}
            // The process vanished between the listing and the read.
            Err(e) if is_no_such_process(&e) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The proof for a provider established gone by `method`, once what is left
/// of its group is swept.
async fn stopped(
    id: &ProcessIdentity,
    method: DeathMethod,
    signals: Vec<String>,
    saw_member_alive: bool,
    child: Option<&mut Child>,
    kill_grace: Duration,
) -> StopOutcome {
    let group_gone = sweep_group(id, saw_member_alive, child, Instant::now() + kill_grace).await;
    StopOutcome::Stopped(StopProof {
        identity: *id,
        method: method.as_str().to_owned(),
        signals,
        group_gone,
        marked: None,
        contained: None,
    })
}

/// SIGKILLs the process group `pgid` (a tool's shell and what it started);
/// a group already empty is fine.
pub fn kill_group(pgid: Pid) {
    let _ = killpg(pgid, Signal::SIGKILL);
}

/// Waits up to `grace` for the process `id`, whose input was just closed,
/// to exit on its own, and says whether it did. Nothing is signalled: an
/// agent that writes its record after its answer (Claude Code flushes its
/// transcript on a timer) keeps that record only if it is let finish. Where
/// a pidfd watches the exit the child is not reaped, so [`stop`] still
/// sweeps its group while the leader is our zombie; the fallback waits on
/// the child as [`stop`]'s does. A zero grace, an identity [`stop`] would
/// refuse, or a process already gone returns at once.
pub async fn await_exit(
    id: &ProcessIdentity,
    mut child: Option<&mut Child>,
    grace: Duration,
) -> bool {
    if grace.is_zero() || refusal(id, child.as_deref()).is_some() {
        return false;
    }
    // As in `stop_with`: the pidfd is opened before the identity is
    // checked, so a match means it watches our process, not a successor.
    let watch = exit_watch(id, PidfdUse::Prefer);
    if !matches!(observe(id), Observation::Alive { .. }) {
        return false;
    }
    matches!(
        wait_for_exit(id, &watch, &mut child, Instant::now() + grace).await,
        WaitResult::Exited(_)
    )
}

/// Stops the process (and its group) identified by `id` and proves it.
///
/// If `child` is Some, it is our own child: it is reaped before returning
/// once its exit is proven. Otherwise (an orphan from a previous runner
/// incarnation) exit is observed with a pidfd, falling back to bounded
/// polling of `/proc` where `pidfd_open` is unavailable.
///
/// The sequence is: if the process is already gone, say how. Otherwise open
/// the pidfd first and then re-check the identity (so a recycled pid is never
/// signalled), send SIGTERM to the group and wait up to `term_grace`; if it is
/// still alive send SIGKILL to the group and wait up to `kill_grace`. Once the
/// process is gone, SIGKILL the group once more (tool subprocesses left in it)
/// and wait up to `kill_grace` for the group to disappear.
pub async fn stop(
    id: &ProcessIdentity,
    child: Option<&mut Child>,
    term_grace: Duration,
    kill_grace: Duration,
) -> StopOutcome {
    stop_with(id, child, term_grace, kill_grace, PidfdUse::Prefer).await
}

/// [`stop`], with the pidfd use chosen (tests force the fallback).
pub(super) async fn stop_with(
    id: &ProcessIdentity,
    mut child: Option<&mut Child>,
    term_grace: Duration,
    kill_grace: Duration,
    pidfd_use: PidfdUse,
) -> StopOutcome {
    let unprovable = |reason: String| StopOutcome::Unprovable {
        identity: *id,
        reason,
    };
    if let Some(reason) = refusal(id, child.as_deref()) {
        return unprovable(reason);
    }

    match observe(id) {
        Observation::Gone(method) => {
            return stopped(id, method, Vec::new(), false, child, kill_grace).await;
        }
        Observation::Unknown(reason) => return unprovable(reason),
        Observation::Alive { .. } => {}
    }

    // The pidfd is opened before the identity is re-checked: if the check
    // then still matches, the pidfd refers to our process and not to a
    // successor that took its pid in between.
    let watch = exit_watch(id, pidfd_use);

    let mut signals = Vec::new();
    let mut saw_member_alive = false;
    for (signal, grace) in [(Signal::SIGTERM, term_grace), (Signal::SIGKILL, kill_grace)] {
        // Each signal is preceded by a fresh identity check, so that neither
        // goes to a process that merely inherited the pid.
        let current_pgid = match observe(id) {
            Observation::Alive { pgid } => pgid,
            Observation::Gone(method) => {
                return stopped(id, method, signals, saw_member_alive, child, kill_grace).await;
            }
            Observation::Unknown(reason) => return unprovable(reason),
        };
        let to_group = current_pgid == id.pgid && id.pgid != getpgrp().as_raw();
        saw_member_alive |= to_group;
        match send(id, to_group, signal) {
            Ok(true) => signals.push(signal.as_str().to_owned()),
            Ok(false) => {}
            Err(reason) => return unprovable(reason),
        }

        match wait_for_exit(id, &watch, &mut child, Instant::now() + grace).await {
            WaitResult::Exited(method) => {
                return stopped(id, method, signals, saw_member_alive, child, kill_grace).await;
            }
            WaitResult::TimedOut => {}
            WaitResult::Unknown(reason) => return unprovable(reason),
        }
    }

    StopOutcome::StillRunning { identity: *id }
}

/// Why [`stop`] must not act on `id` at all: it names no single process or
/// group, it names the runner itself, or the child passed in is another
/// process.
fn refusal(id: &ProcessIdentity, child: Option<&Child>) -> Option<String> {
    if id.pid <= 0 || id.pgid <= 0 {
        return Some(format!(
            "identity has pid {} and pgid {}, which name no single process or group",
            id.pid, id.pgid
        ));
    }
    if u32::try_from(id.pid).is_ok_and(|pid| pid == std::process::id()) {
        return Some("identity names the runner itself".to_owned());
    }

    // Waiting on a child that is not the identified process would stall for
    // the whole grace period and prove nothing, so a mismatch is refused.
    if let Some(child_pid) = child.and_then(Child::id)
        && i32::try_from(child_pid) != Ok(id.pid)
    {
        return Some(format!(
            "the child passed in is pid {child_pid}, not the identified pid {}",
            id.pid
        ));
    }
    None
}

/// How the exit of `id` will be observed: a pidfd when allowed and
/// available, else the fallback.
fn exit_watch(id: &ProcessIdentity, pidfd_use: PidfdUse) -> ExitWatch {
    match pidfd_use {
        PidfdUse::Never => ExitWatch::Fallback,
        PidfdUse::Prefer => match pidfd_open(id.pid) {
            Ok(Some(fd)) => match register_pidfd(fd) {
                Ok(fd) => ExitWatch::Pidfd(fd),
                Err(_) => ExitWatch::Fallback,
            },
            // ENOSYS, or the process vanished in between (ESRCH, which the
            // re-check below turns into proof), or the pidfd could not be had
            // (EMFILE and the like): polling /proc stays sound in every case.
            Ok(None) | Err(_) => ExitWatch::Fallback,
        },
    }
}

/// Sends `signal` to the provider's group (`to_group`: it is still in the
/// group it was spawned in, and that is not the runner's) or else to the
/// provider alone; a SIGTERM that went out is followed by a SIGCONT. Returns
/// whether it was sent (`false`: everyone exited between the check and the
/// signal, which the wait observes), or why sending failed.
fn send(id: &ProcessIdentity, to_group: bool, signal: Signal) -> Result<bool, String> {
    let sent = if to_group {
        killpg(Pid::from_raw(id.pgid), signal)
    } else {
        // The provider has left the group it was spawned in (or shares the
        // runner's group): signal it alone, and leave the recorded group
        // to the sweep, which checks whose group that id now names.
        kill(Pid::from_raw(id.pid), signal)
    };
    if signal == Signal::SIGTERM && sent.is_ok() {
        // A stopped (SIGSTOP, hung) provider would keep SIGTERM pending
        // forever; SIGCONT lets it act on it now.
        let _ = if to_group {
            killpg(Pid::from_raw(id.pgid), Signal::SIGCONT)
        } else {
            kill(Pid::from_raw(id.pid), Signal::SIGCONT)
        };
    }
    match sent {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(errno) => Err(format!("sending {} failed: {errno}", signal.as_str())),
    }
}
