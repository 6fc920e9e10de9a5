//! Control groups as process containers: a hierarchy the runner may create
//! groups in (the unified v2 one with `cgroup.kill`, or the v1 `freezer`),
//! one group per provider under `turncut-runnerd/` in the runner's own
//! group, and the kill of everything in a group with an empty
//! `cgroup.procs` as the proof.
//!
//! A process cannot leave a group by itself (only a writer of some
//! `cgroup.procs` with the right to move it can), whatever it does with its
//! session, group, name or environment, and whatever it forks inherits the
//! group: so a group holds every process a provider ever started. Killing
//! them is race-free: v2's `cgroup.kill` kills every member at once, and in
//! v1 the group is frozen first (its members cannot fork or exit), each
//! member is sent SIGKILL, and the group is thawed so they die.
//!
//! Nothing here decides which mechanism a runner uses (`containment`).

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::wait::{INITIAL_POLL_INTERVAL, backoff};

/// The directory under the runner's own group that holds the providers'.
const BASE: &str = "turncut-runnerd";

/// How long a v1 group's freeze is waited for before its members are
/// killed anyway (a member in uninterruptible sleep delays it).
const FREEZE_WAIT_MS: u64 = 200;

/// How old an empty group left by an earlier runner must be before a
/// runner removes it (a younger one may be a group another runner just
/// made and is about to fill).
const STALE_EMPTY_S: u64 = 60;

/// Which kind of hierarchy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hierarchy {
    /// The unified hierarchy, killed through `cgroup.kill`.
    CgroupV2,
    /// A v1 `freezer` hierarchy: freeze, kill every member, thaw.
    CgroupV1Freezer,
}

impl Hierarchy {
    /// The name a stop proof gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Hierarchy::CgroupV2 => "cgroup-v2",
            Hierarchy::CgroupV1Freezer => "cgroup-v1-freezer",
        }
    }
}

/// A hierarchy with the directory the runner's groups go in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Base {
    pub hierarchy: Hierarchy,
    /// `<mount>/<the runner's group>/turncut-runnerd`.
    pub dir: PathBuf,
}

/// What emptying a group established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Emptied {
    pub hierarchy: Hierarchy,
    /// The group's path.
    pub cgroup: PathBuf,
    /// Whether the group existed (an absent one holds nothing: a populated
    /// group cannot be removed).
    pub found: bool,
    /// Members that were alive and got SIGKILL.
    pub killed: Vec<i32>,
    /// Whether `cgroup.procs` was read empty (then the group was removed).
    pub empty: bool,
}

/// The hierarchies of this process where it may make groups: each mount of
/// a cgroup2 or freezer hierarchy whose `turncut-runnerd` directory under
/// this process's group exists or can be made.
pub fn usable() -> Vec<Base> {
    let (Ok(mountinfo), Ok(own)) = (
        std::fs::read_to_string("/proc/self/mountinfo"),
        std::fs::read_to_string("/proc/self/cgroup"),
    ) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let Some((hierarchy, mount)) = cgroup_mount(line) else {
            continue;
        };
        let wanted = match hierarchy {
            Hierarchy::CgroupV2 => |l: &str| l.starts_with("0::"),
            Hierarchy::CgroupV1Freezer => |l: &str| {
                l.split(':')
                    .nth(1)
                    .is_some_and(|c| c.split(',').any(|c| c == "freezer"))
            },
        };
        let Some(group) = own
            .lines()
            .find(|l| wanted(l))
            .and_then(|l| l.splitn(3, ':').nth(2))
        else {
            continue;
        };
        let dir = mount.join(group.trim_start_matches('/')).join(BASE);
        if std::fs::create_dir_all(&dir).is_ok() && probe(hierarchy, &dir) {
            found.push(Base { hierarchy, dir });
        }
    }
    found
}

/// `(hierarchy, mount point)` of a mountinfo line that mounts one.
fn cgroup_mount(line: &str) -> Option<(Hierarchy, PathBuf)> {
    let (left, right) = line.split_once(" - ")?;
    let mount = PathBuf::from(left.split(' ').nth(4)?);
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let options = right.nth(1).unwrap_or_default();
    match fstype {
        "cgroup2" => Some((Hierarchy::CgroupV2, mount)),
        "cgroup" if options.split(',').any(|o| o == "freezer") => {
            Some((Hierarchy::CgroupV1Freezer, mount))
        }
        _ => None,
    }
}

/// Whether a group made under `dir` has what a kill needs.
fn probe(hierarchy: Hierarchy, dir: &Path) -> bool {
    let test = dir.join(format!("probe-{}", std::process::id()));
    let made = std::fs::create_dir(&test).is_ok() || test.is_dir();
    let ok = made
        && match hierarchy {
            Hierarchy::CgroupV2 => test.join("cgroup.kill").exists(),
            Hierarchy::CgroupV1Freezer => test.join("freezer.state").exists(),
        };
    let _ = std::fs::remove_dir(&test);
    ok
}

impl Base {
    /// The group named `name` (a spawn marker) in this hierarchy.
    pub fn group(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Makes the group `name` and opens its `cgroup.procs` for the child to
    /// join before it executes ([`join`]).
    pub fn create(&self, name: &str) -> io::Result<OwnedFd> {
        let group = self.group(name);
        std::fs::create_dir(&group)?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(group.join("cgroup.procs"))?;
        Ok(procs.into())
    }

    /// Kills every member of the group `name` and proves it empty within
    /// `grace`, then removes it.
    pub async fn empty(&self, name: &str, grace: Duration) -> Emptied {
        let cgroup = self.group(name);
        let mut out = Emptied {
            hierarchy: self.hierarchy,
            cgroup: cgroup.clone(),
            found: cgroup.is_dir(),
            killed: Vec::new(),
            empty: false,
        };
        if !out.found {
            out.empty = true;
            return out;
        }
        let deadline = Instant::now() + grace;
        out.killed = kill_members(self.hierarchy, &cgroup);
        let mut delay = INITIAL_POLL_INTERVAL;
        loop {
            if members(&cgroup).is_ok_and(|m| m.is_empty()) {
                out.empty = true;
                let _ = std::fs::remove_dir(&cgroup);
                return out;
            }
            if !backoff(&mut delay, deadline).await {
                return out;
            }
        }
    }

    /// Removes what earlier runners left: the groups of tools of a runner
    /// that is gone (their members killed), and groups older than a minute
    /// with no member (a runner that died before it stopped their
    /// provider). A provider's group with members is left for the stop that
    /// proves it gone.
    pub fn collect_stale(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if tool_owner(&name)
                .is_some_and(|(pid, start)| wire::procstat::live_start_time(pid) != Some(start))
            {
                kill_members(self.hierarchy, &path);
            }
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .is_some_and(|age| age.as_secs() >= STALE_EMPTY_S);
            if old && members(&path).is_ok_and(|m| m.is_empty()) {
                let _ = std::fs::remove_dir(&path);
            }
        }
    }
}

/// The name of a new tool group of this runner: `tool-<pid>-<start time>-<id>`,
/// so that a later runner knows whose it was.
pub fn tool_group_name() -> String {
    let me = std::process::id();
    let start = wire::procstat::live_start_time(me).unwrap_or(0);
    format!("tool-{me}-{start}-{}", uuid::Uuid::new_v4().simple())
}

/// The runner (pid, start time) a tool group's name says it belongs to.
fn tool_owner(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix("tool-")?.splitn(3, '-');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// In a forked child before it executes: moves it into the group whose
/// `cgroup.procs` is `procs`. Only `write(2)`, which is async-signal-safe.
pub fn join(procs: &OwnedFd) -> io::Result<()> {
    // SAFETY: a plain write of a static buffer to an open descriptor.
    let n = unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
    if n == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pids in the group's `cgroup.procs`.
pub fn members(cgroup: &Path) -> io::Result<Vec<i32>> {
    let mut text = String::new();
    File::open(cgroup.join("cgroup.procs"))?.read_to_string(&mut text)?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

fn write_file(path: &Path, text: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// Kills every member of `cgroup` now; the members that were there. v2:
/// all at once by the kernel (`cgroup.kill`). v1 freezer: the group frozen
/// (no member forks or exits meanwhile; the freeze is waited for at most
/// [`FREEZE_WAIT_MS`]), every member sent SIGKILL, the group thawed so the
/// kills land.
pub fn kill_members(hierarchy: Hierarchy, cgroup: &Path) -> Vec<i32> {
    match hierarchy {
        Hierarchy::CgroupV2 => {
            let members = members(cgroup).unwrap_or_default();
            if !members.is_empty() {
                let _ = write_file(&cgroup.join("cgroup.kill"), "1");
            }
            members
        }
        Hierarchy::CgroupV1Freezer => {
            let state = cgroup.join("freezer.state");
            let _ = write_file(&state, "FROZEN");
            let until = std::time::Instant::now() + Duration::from_millis(FREEZE_WAIT_MS);
            let mut delay = Duration::from_micros(100);
            while std::fs::read_to_string(&state).is_ok_and(|s| s.trim() != "FROZEN")
                && std::time::Instant::now() < until
            {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(10));
            }
            let members = members(cgroup).unwrap_or_default();
            for pid in &members {
                // Frozen members keep their pids: none can be reused meanwhile.
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
            }
            let _ = write_file(&state, "THAWED");
            members
        }
    }
}
