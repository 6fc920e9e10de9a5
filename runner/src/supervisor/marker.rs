//! The spawn marker: an environment variable every provider is started
//! with, by which the runner finds (and kills) what the provider started
//! outside its group, and what a spawn whose identity was never recorded
//! left running.

use std::io;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::liveness::{Observation, observe};
use super::stat::{is_no_such_process, read_stat};
use super::wait::{INITIAL_POLL_INTERVAL, backoff};
use super::{ProcessIdentity, StopProof};

/// The environment variable carrying a provider's spawn marker. Every
/// process the provider starts inherits it unless it rebuilds its
/// environment, so the runner finds them by it even when it never learned
/// their pids: a runner killed between spawning a provider and recording its
/// identity leaves only the marker in its store.
pub const MARKER_ENV: &str = "RUNNERD_SPAWN_MARKER";

/// What a sweep of a spawn marker found and established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerSweep {
    pub marker: String,
    /// Live processes found carrying the marker, each sent SIGKILL.
    pub killed: Vec<ProcessIdentity>,
    /// Whether a final scan of `/proc` found no live process with the marker.
    pub gone: bool,
}

/// Live processes (zombies excluded) whose initial environment holds
/// `MARKER_ENV=marker`. Processes whose environment cannot be read (another
/// user's) are not ours and are skipped; an unreadable `/proc` is an error.
pub fn marked_processes(marker: &str) -> io::Result<Vec<ProcessIdentity>> {
    let needle = format!("{MARKER_ENV}={marker}").into_bytes();
    let me = std::process::id();
    let mut found = Vec::new();
    for pid in wire::procstat::pids_with_env(&needle)? {
        if u32::try_from(pid) == Ok(me) {
            continue;
        }
        match read_stat(pid) {
            Ok(snap) if !matches!(snap.state, 'Z' | 'X') => found.push(snap.identity),
            Ok(_) => {}
            Err(e) if is_no_such_process(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// Kills every live process carrying `marker` until a scan finds none, or
/// `grace` passes (a process that survives SIGKILL, or keeps forking, leaves
/// `gone` false and the caller quarantines). Each SIGKILL follows a fresh
/// identity check, so a recycled pid is never signalled.
pub async fn sweep_marker(marker: &str, grace: Duration) -> MarkerSweep {
    let deadline = Instant::now() + grace;
    let mut killed: Vec<ProcessIdentity> = Vec::new();
    let mut delay = INITIAL_POLL_INTERVAL;
    while let Ok(found) = marked_processes(marker) {
        if found.is_empty() {
            return MarkerSweep {
                marker: marker.to_owned(),
                killed,
                gone: true,
            };
        }
        for id in found {
            if matches!(observe(&id), Observation::Alive { .. }) {
                let _ = kill(Pid::from_raw(id.pid), Signal::SIGKILL);
            }
            if !killed.contains(&id) {
                killed.push(id);
            }
        }
        if !backoff(&mut delay, deadline).await {
            break;
        }
    }
    MarkerSweep {
        marker: marker.to_owned(),
        killed,
        gone: false,
    }
}

/// [`sweep_marker`], recorded in `proof`; why the stop is unprovable, if a
/// marked process could not be proven gone.
pub async fn sweep_into(proof: &mut StopProof, marker: &str, grace: Duration) -> Option<String> {
    let sweep = sweep_marker(marker, grace).await;
    let (gone, killed) = (sweep.gone, sweep.killed.len());
    proof.marked = Some(sweep);
    (!gone).then(|| {
        format!("{killed} process(es) carrying its spawn marker could not be proven stopped")
    })
}
