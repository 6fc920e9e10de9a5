//! The container every provider runs in, chosen once when runnerd starts
//! (`--provider-containment`): a control group per provider where the
//! runner may make one (`cgroup`: v2 with `cgroup.kill` first, else the v1
//! freezer), else `PR_SET_CHILD_SUBREAPER` on runnerd, so that what a
//! provider orphans comes back to runnerd instead of init.
//!
//! A provider's group is named by its spawn marker, which is durable before
//! the spawn: a runner that restarts finds the group of a provider it never
//! saw and empties it before anything else of the task (old provider
//! first). A stop is proven only when the group is empty; its proof says
//! which container ran ([`Contained`], in `provider.stopped`).
//!
//! The subreaper is weaker, and says so: it reaches what a provider
//! orphaned while runnerd lives (and not what a killed runnerd's providers
//! orphaned, which went to init), and it cannot tell whose orphan a process
//! is, so a provider's stop kills every orphan runnerd adopted.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::cgroup::{self, Base, Emptied};
use super::stat::{children_listed, children_of, proc_pid, read_stat};
use super::wait::{INITIAL_POLL_INTERVAL, backoff};

/// What `--provider-containment` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The best this process may have: cgroup v2, v1 freezer, subreaper.
    Auto,
    CgroupV2,
    CgroupV1Freezer,
    Subreaper,
}

impl std::str::FromStr for Choice {
    type Err = String;

    fn from_str(s: &str) -> Result<Choice, String> {
        Ok(match s {
            "auto" => Choice::Auto,
            "cgroup-v2" => Choice::CgroupV2,
            "cgroup-v1-freezer" => Choice::CgroupV1Freezer,
            "subreaper" => Choice::Subreaper,
            other => {
                return Err(format!(
                    "{other:?} is not one of auto, cgroup-v2, cgroup-v1-freezer, subreaper"
                ));
            }
        })
    }
}

/// The container the providers of this runner run in.
#[derive(Debug)]
pub struct Containment {
    /// Where new groups are made; `None` with the subreaper.
    chosen: Option<Base>,
    /// Every hierarchy searched for a provider's group when it is stopped
    /// (an earlier runner may have used another one).
    bases: Vec<Base>,
}

/// What a stop's emptying of a provider's container established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contained {
    /// `cgroup-v2`, `cgroup-v1-freezer` or `subreaper`.
    pub mechanism: String,
    /// The provider's group in each hierarchy where it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<Emptied>,
    /// With the subreaper: orphans runnerd adopted and killed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adopted_killed: Vec<i32>,
    /// Whether nothing of the container is left alive.
    pub gone: bool,
}

static CONTAINMENT: OnceLock<Containment> = OnceLock::new();

/// Processes runnerd started itself (providers, tools), so that the
/// subreaper can tell them from orphans it adopted.
static OWN_CHILDREN: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// Chooses this runner's container (once), and removes empty groups that
/// earlier runners left; the error says why the choice is not available.
pub fn init(choice: Choice) -> Result<&'static Containment, String> {
    let bases = cgroup::usable();
    let find = |h: cgroup::Hierarchy| bases.iter().find(|b| b.hierarchy == h).cloned();
    let chosen =
        match choice {
            Choice::Auto => find(cgroup::Hierarchy::CgroupV2)
                .or_else(|| find(cgroup::Hierarchy::CgroupV1Freezer)),
            Choice::CgroupV2 => Some(find(cgroup::Hierarchy::CgroupV2).ok_or(
                "no cgroup v2 hierarchy with cgroup.kill where this process may make groups",
            )?),
            Choice::CgroupV1Freezer => Some(
                find(cgroup::Hierarchy::CgroupV1Freezer)
                    .ok_or("no cgroup v1 freezer hierarchy where this process may make groups")?,
            ),
            Choice::Subreaper => None,
        };
    if chosen.is_none() {
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| format!("failed to become a child subreaper: {e}"))?;
    }
    for base in &bases {
        base.collect_stale();
    }
    Ok(CONTAINMENT.get_or_init(|| Containment { chosen, bases }))
}

/// This runner's container, once [`init`] chose it (none in unit tests).
pub fn get() -> Option<&'static Containment> {
    CONTAINMENT.get()
}

impl Containment {
    /// The mechanism a new provider gets.
    pub fn mechanism(&self) -> &'static str {
        self.chosen
            .as_ref()
            .map_or("subreaper", |b| b.hierarchy.as_str())
    }

    /// Makes the group of the provider spawned with `marker` and opens it
    /// for the child to join ([`cgroup::join`]); `None` with the
    /// subreaper. An error leaves the provider unstarted.
    pub fn prepare(&self, marker: &str) -> std::io::Result<Option<OwnedFd>> {
        match &self.chosen {
            Some(base) => base.create(marker).map(Some),
            None => Ok(None),
        }
    }

    /// Kills whatever is left in the container of the provider spawned
    /// with `marker` and proves it empty within `grace`.
    pub async fn empty(&self, marker: &str, grace: Duration) -> Contained {
        let mut cgroups = Vec::new();
        for base in &self.bases {
            let emptied = base.empty(marker, grace).await;
            if emptied.found || self.chosen.as_ref() == Some(base) {
                cgroups.push(emptied);
            }
        }
        let mut adopted_killed = Vec::new();
        let mut gone = cgroups.iter().all(|c| c.empty);
        if self.chosen.is_none() {
            let (killed, all_gone) = kill_adopted(grace).await;
            adopted_killed = killed;
            gone &= all_gone;
        }
        Contained {
            mechanism: self.mechanism().to_owned(),
            cgroups,
            adopted_killed,
            gone,
        }
    }
}

/// The container of one tool command runnerd runs itself (an ACP
/// terminal, a native `Bash`): everything the command starts joins it, and
/// all of it is killed when the command ends ([`ToolGroup::kill`]). A
/// runner killed first leaves it to the next runner, which kills its
/// members (`cgroup::Base::collect_stale`).
#[derive(Debug)]
pub struct ToolGroup {
    base: Base,
    name: String,
    procs: OwnedFd,
}

impl Containment {
    /// A new tool group, where a control group is this runner's container
    /// (with the subreaper, a tool's orphans come back to runnerd and die
    /// at the next provider stop).
    pub fn tool_group(&self) -> Option<ToolGroup> {
        let base = self.chosen.clone()?;
        let name = cgroup::tool_group_name();
        match base.create(&name) {
            Ok(procs) => Some(ToolGroup { base, name, procs }),
            Err(e) => {
                tracing::warn!("no container for a tool command: {e}");
                None
            }
        }
    }
}

impl ToolGroup {
    /// The group's `cgroup.procs`, for the command to join
    /// ([`join`](super::cgroup::join)) before it executes.
    pub fn procs(&self) -> &OwnedFd {
        &self.procs
    }

    /// Kills every member now, and removes the group once it is empty (on
    /// a task, within a second; else the next runner does).
    pub fn kill(self) {
        let group = self.base.group(&self.name);
        cgroup::kill_members(self.base.hierarchy, &group);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut delay = INITIAL_POLL_INTERVAL;
            while !cgroup::members(&group).is_ok_and(|m| m.is_empty()) {
                if !backoff(&mut delay, deadline).await {
                    return;
                }
            }
            let _ = std::fs::remove_dir(&group);
        });
    }
}

/// In a forked child before it executes: joins the tool group whose
/// `cgroup.procs` is `procs` (only `write(2)`).
pub fn join(procs: &OwnedFd) -> std::io::Result<()> {
    cgroup::join(procs)
}

/// Spawns a child of runnerd with `spawn` and notes it as one runnerd
/// started itself (not an orphan it adopted): under the same lock as the
/// search for adopted orphans, so a child just spawned is never taken for
/// one.
pub fn spawn_own<T>(
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid_of: impl Fn(&T) -> Option<u32>,
) -> std::io::Result<T> {
    let mut own = OWN_CHILDREN.lock().unwrap_or_else(|p| p.into_inner());
    let own = own.get_or_insert_with(HashSet::new);
    // Forget those that are no longer runnerd's children (reaped).
    let me = std::process::id() as i32;
    own.retain(|p| read_stat(*p).is_ok_and(|s| s.ppid == me));
    let spawned = spawn()?;
    if let Some(pid) = pid_of(&spawned).and_then(|p| i32::try_from(p).ok()) {
        own.insert(pid);
    }
    Ok(spawned)
}

/// SIGKILLs runnerd's children that it did not start (orphans it adopted as
/// a subreaper) and reaps the dead ones; those it found alive.
fn kill_adopted_once() -> Vec<i32> {
    let me = std::process::id() as i32;
    let own = OWN_CHILDREN.lock().unwrap_or_else(|p| p.into_inner());
    let mut found = Vec::new();
    for pid in runnerd_children(me) {
        let Ok(stat) = read_stat(pid) else {
            continue;
        };
        if stat.ppid != me || own.as_ref().is_some_and(|o| o.contains(&pid)) {
            continue;
        }
        if matches!(stat.state, 'Z' | 'X') {
            // Not one of tokio's children: reaping it takes nothing away.
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        } else {
            // An adopted child stays runnerd's until it is reaped, so its
            // pid cannot be reused in between.
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            found.push(pid);
        }
    }
    found
}

/// Candidates for runnerd's children: its threads' lists where the kernel
/// keeps them ([`children_of`]), else every process (each is checked for
/// its parent by the caller).
fn runnerd_children(me: i32) -> Vec<i32> {
    if children_listed() {
        return children_of(me);
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries.flatten().filter_map(|e| proc_pid(&e)).collect()
}

/// SIGKILLs every adopted orphan until none is left or `grace` passes;
/// the pids killed and whether none is left.
async fn kill_adopted(grace: Duration) -> (Vec<i32>, bool) {
    let deadline = Instant::now() + grace;
    let mut killed: Vec<i32> = Vec::new();
    let mut delay = INITIAL_POLL_INTERVAL;
    loop {
        let alive = kill_adopted_once();
        if alive.is_empty() {
            return (killed, true);
        }
        for pid in alive {
            if !killed.contains(&pid) {
                killed.push(pid);
            }
        }
        if !backoff(&mut delay, deadline).await {
            return (killed, kill_adopted_once().is_empty());
        }
    }
}
