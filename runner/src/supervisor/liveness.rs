//! Whether exactly this process is alive: one look at `/proc` (confirmed by
//! `kill(pid, 0)` when the entry is missing), never a signal that does
//! anything. A recycled pid (another start time) and a zombie are gone.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::ProcessIdentity;
use super::stat::{StatSnapshot, is_no_such_process, read_stat};

/// How often a `/proc` read that contradicts `kill(pid, 0)` is retried before
/// the answer is declared unknowable; the contradiction is normally a pid
/// being recycled between the two calls, which a retry resolves.
const PROC_RETRIES: usize = 3;

/// How a process was established to be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeathMethod {
    Esrch,
    StartTimeChanged,
    Zombie,
    Exited,
}

impl DeathMethod {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            DeathMethod::Esrch => "esrch",
            DeathMethod::StartTimeChanged => "start_time_changed",
            DeathMethod::Zombie => "zombie",
            DeathMethod::Exited => "exited",
        }
    }
}

/// What one look at a process established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Observation {
    /// The process with this identity is running; `pgid` is its current group.
    Alive {
        pgid: i32,
    },
    Gone(DeathMethod),
    /// Neither life nor death could be established.
    Unknown(String),
}

fn classify(id: &ProcessIdentity, snapshot: StatSnapshot) -> Observation {
    if snapshot.identity.start_time != id.start_time {
        Observation::Gone(DeathMethod::StartTimeChanged)
    } else if matches!(snapshot.state, 'Z' | 'X' | 'x') {
        Observation::Gone(DeathMethod::Zombie)
    } else {
        Observation::Alive {
            pgid: snapshot.identity.pgid,
        }
    }
}

/// Looks at the process once, without signalling it.
pub(super) fn observe(id: &ProcessIdentity) -> Observation {
    if id.pid <= 0 {
        return Observation::Unknown(format!("{} is not a process id", id.pid));
    }
    for _ in 0..PROC_RETRIES {
        match read_stat(id.pid) {
            Ok(snapshot) => return classify(id, snapshot),
            Err(error) if is_no_such_process(&error) => {
                // A missing /proc entry is confirmed with kill(pid, 0), so that
                // a /proc mounted with hidepid (or not mounted) is not taken as
                // proof of death.
                match kill(Pid::from_raw(id.pid), None) {
                    Err(Errno::ESRCH) => return Observation::Gone(DeathMethod::Esrch),
                    // Something holds the pid now: most likely the pid was
                    // recycled between the two calls, so look again.
                    Ok(()) | Err(Errno::EPERM) => continue,
                    Err(errno) => {
                        return Observation::Unknown(format!(
                            "/proc/{}/stat is missing and kill(pid, 0) failed: {errno}",
                            id.pid
                        ));
                    }
                }
            }
            Err(error) => {
                return Observation::Unknown(format!("cannot read /proc/{}/stat: {error}", id.pid));
            }
        }
    }
    Observation::Unknown(format!(
        "/proc/{} is missing but kill(pid, 0) keeps finding a process (is /proc mounted with hidepid?)",
        id.pid
    ))
}

/// Liveness of exactly this process: false if the pid is gone (ESRCH / no
/// /proc entry), if its start time differs (recycled pid), or if it is a
/// zombie (state 'Z' or 'X').
///
/// When neither can be established (for example `/proc` is unreadable) this
/// answers true, because "alive" is the safe assumption for a caller deciding
/// whether the conversation may be touched.
pub fn is_alive(id: &ProcessIdentity) -> bool {
    !matches!(observe(id), Observation::Gone(_))
}
