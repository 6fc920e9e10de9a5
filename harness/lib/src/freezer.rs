//! Freezing a cell's providers at a kill of their runner so that the
//! runner's death does not wake them.
//!
//! A provider the runner starts in a process group of its own, in the
//! runner's session, is linked to that session through the runner alone.
//! When the runner dies the provider goes to init (another session) and its
//! group is newly orphaned; if a member of the group is stopped, the kernel
//! then sends every member SIGHUP and SIGCONT (POSIX job control; Linux's
//! `kill_orphaned_pgrp`). A provider frozen by SIGSTOP at a kill of its
//! runner so ran again the moment the runner died, and a tool command of it
//! that keeps SIGHUP's default action died, which no crash of a real runner
//! does (a wave failed a correct runner on it: the provider completed a
//! turn whose `long-job` the SIGHUP had ended).
//!
//! The cgroup v2 freezer is no job-control stop: a frozen group is not
//! "stopped", so its orphaning sends nothing, and a SIGKILL (the restarted
//! runner's stop, `cgroup.kill`) still ends it. A provider is frozen
//! through its control group when that group is a cgroup v2 group other
//! than the root and holds nothing but processes being frozen (runnerd
//! gives each provider one, `--provider-containment`); otherwise the
//! nemesis SIGSTOPs it, with the orphaning caveat above
//! (`docs/scenarios.md`, "What a cell does").

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a group's freeze may take before its members are SIGSTOPped
/// instead: a task in an uninterruptible wait freezes when it leaves it.
const FREEZE_WITHIN: Duration = Duration::from_secs(1);

/// Freezes those of `pids` whose cgroup v2 group holds nothing but some
/// of `pids` (and is not the root) by that group, waiting up to
/// [`FREEZE_WITHIN`] for each group to say it is frozen. Returns the pids
/// frozen so, and the rest, for the caller to SIGSTOP (`nemesis`, the one
/// place that signals).
pub fn freeze_groups(pids: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut groups: BTreeMap<PathBuf, Vec<u32>> = BTreeMap::new();
    let mut rest = Vec::new();
    for &pid in pids {
        match cgroup_of(pid) {
            Some(dir) => groups.entry(dir).or_default().push(pid),
            None => rest.push(pid),
        }
    }
    let mut frozen = Vec::new();
    for (dir, members) in groups {
        let only_ours = group_members(&dir).is_some_and(|m| m.iter().all(|p| pids.contains(p)));
        if only_ours && freeze_group(&dir, FREEZE_WITHIN) {
            frozen.extend(members);
        } else {
            rest.extend(members);
        }
    }
    (frozen, rest)
}

/// Where the cgroup v2 hierarchy is mounted, if it is.
fn cgroup2_mount() -> Option<&'static Path> {
    static MOUNT: OnceLock<Option<PathBuf>> = OnceLock::new();
    MOUNT
        .get_or_init(|| {
            let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
            info.lines().find_map(|line| {
                let (mount, fs) = line.split_once(" - ")?;
                fs.starts_with("cgroup2 ")
                    .then(|| mount.split(' ').nth(4).map(PathBuf::from))?
            })
        })
        .as_deref()
}

/// The directory of the cgroup v2 group `pid` is in, unless it is the root
/// (which cannot be frozen) or the process is gone.
fn cgroup_of(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = path.trim().trim_start_matches('/');
    if rel.is_empty() || rel.contains("..") {
        return None;
    }
    let dir = cgroup2_mount()?.join(rel);
    dir.join("cgroup.freeze").is_file().then_some(dir)
}

/// The processes in the group at `dir` (its own, not its children's).
fn group_members(dir: &Path) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    text.lines().map(|l| l.trim().parse().ok()).collect()
}

/// Freezes the group at `dir` and waits (by `cgroup.events`, which the
/// kernel signals with POLLPRI) until it says it is frozen; false when it
/// did not within `within`.
fn freeze_group(dir: &Path, within: Duration) -> bool {
    let Ok(mut events) = std::fs::File::open(dir.join("cgroup.events")) else {
        return false;
    };
    if std::fs::write(dir.join("cgroup.freeze"), "1").is_err() {
        return false;
    }
    let until = Instant::now() + within;
    loop {
        let mut text = String::new();
        let read = events
            .rewind()
            .and_then(|()| events.read_to_string(&mut text));
        if read.is_err() {
            return false;
        }
        if text.lines().any(|l| l.trim() == "frozen 1") {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&events),
            nix::poll::PollFlags::POLLPRI,
        )];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms));
    }
}

#[cfg(test)]
mod tests;
