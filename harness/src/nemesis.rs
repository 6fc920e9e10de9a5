//! The nemesis: applies a fault at a cut, with real signals.
//!
//! `kill-runner` SIGKILLs the runner (its process group only: providers lead
//! groups of their own and live on as orphans, as after a real crash);
//! `kill-provider` SIGKILLs the provider's group; `kill-both` does both;
//! `hang-provider` SIGSTOPs the provider's group, so it stops answering while
//! staying alive. Together with `supervisor`, this is the only harness code
//! that sends signals. It decides nothing about when to cut.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::model::Fault;

/// What a fault needs to do: whether the runner dies and what happens to the
/// provider group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// SIGKILL the runner (and restart it).
    pub kill_runner: bool,
    /// The signal for the provider's group, if any.
    pub provider_signal: Option<Signal>,
}

/// The plan of a fault.
pub fn plan(fault: Fault) -> Plan {
    match fault {
        Fault::KillRunner => Plan {
            kill_runner: true,
            provider_signal: None,
        },
        Fault::KillProvider => Plan {
            kill_runner: false,
            provider_signal: Some(Signal::SIGKILL),
        },
        Fault::KillBoth => Plan {
            kill_runner: true,
            provider_signal: Some(Signal::SIGKILL),
        },
        Fault::HangProvider => Plan {
            kill_runner: false,
            provider_signal: Some(Signal::SIGSTOP),
        },
        // A controller action (`cell::inject_action`) or a storage fault
        // (the cut-point reply `fail <errno>`): no signal.
        Fault::FollowUp | Fault::Retry | Fault::FailWrite | Fault::DiskFull => Plan {
            kill_runner: false,
            provider_signal: None,
        },
    }
}

/// Whether a fault targets the provider (and so needs a live one).
pub fn needs_provider(fault: Fault) -> bool {
    plan(fault).provider_signal.is_some()
}

/// Sends `signal` to the process group led by `pgid`. A group that is already
/// gone is not an error.
pub fn signal_group(pgid: u32, signal: Signal) -> std::io::Result<()> {
    match killpg(Pid::from_raw(pgid as i32), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Sends `signal` to the one process `pid`. A process that is already gone
/// is not an error.
pub fn signal_pid(pid: u32, signal: Signal) -> std::io::Result<()> {
    match nix::sys::signal::kill(Pid::from_raw(pid as i32), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The start time (clock ticks since boot) of a live, non-zombie `pid`.
pub fn start_time(pid: u32) -> Option<u64> {
    wire::procstat::live_start_time(pid)
}

/// Whether exactly this process (pid and start time) is still alive.
pub fn alive_same(pid: u32, start: Option<u64>) -> bool {
    match (start_time(pid), start) {
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The environment variable that tags every process a cell's or a crash
/// round's runner starts (the runner, its providers and whatever they start
/// and keep their environment), so the harness finds leftovers it was never
/// told about.
pub const TAG_ENV: &str = "TURNCUT_TAG";

/// Live processes (zombies excluded) whose environment holds
/// `TAG_ENV=tag`, with their command lines.
pub fn tagged_processes(tag: &str) -> Vec<(u32, String)> {
    processes_with_env(&format!("{TAG_ENV}={tag}"))
        .unwrap_or_default()
        .into_iter()
        .map(|(pid, _, cmdline)| (pid, cmdline))
        .collect()
}

/// Live processes (zombies excluded) whose initial environment holds the
/// `NAME=value` `entry`: (pid, start time, command line). Processes of other
/// users, and ones that exit while the table is read, are skipped; an
/// unreadable `/proc` is an error.
pub fn processes_with_env(entry: &str) -> Result<Vec<(u32, u64, String)>, String> {
    let dir = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
    let mut found = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == entry.as_bytes()) {
            continue;
        }
        let Some(start) = start_time(pid) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, start, cmdline.trim().to_owned()));
    }
    Ok(found)
}
