//! The processes a provider started, whatever their session: found by
//! ancestry in `/proc` while the provider's process tree is intact, and
//! killed once the provider itself is stopped.
//!
//! A SIGKILL of a provider's process group misses every process in a session
//! (and so a group) of its own: the real `codex app-server` runs each command
//! on a pseudo-terminal in a new session, and what such a command starts can
//! outlive it (measured: a nested `sh` finished its write 1.2 s after codex
//! died). A cgroup would contain them all, but an unprivileged runner does
//! not have one in general, and an environment marker does not survive a
//! provider that hands its commands a core environment only (Codex's
//! `shell_environment_policy`). What links them to the provider is ancestry,
//! which lasts only while the parents live, so [`Tree::snapshot`] reads it
//! before the provider is signalled, and [`Tree::kill`] SIGKILLs, after the
//! provider is proven gone, every recorded process still alive (pid and start
//! time, so a recycled pid is never hit) together with everything descending
//! from it, re-reading `/proc` until nothing is left or the deadline passes.
//!
//! Deliberately out of reach: what a provider started and left before the
//! snapshot (a provider that died on its own, or a process orphaned between
//! the snapshot and the signal); such a process carries nothing that names the
//! provider.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::stat::{children_listed, children_of, proc_pid, read_stat};
use super::{ProcessIdentity, StopOutcome, StopProof, identity_of, is_alive};

/// Every descendant of a provider seen so far.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    members: Vec<ProcessIdentity>,
}

/// What [`Tree::kill`] established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeOutcome {
    /// Descendants found (in the snapshot and after it).
    pub seen: usize,
    /// Of those, how many were alive and got SIGKILL.
    pub killed: usize,
    /// Pids still alive at the deadline.
    pub survivors: Vec<i32>,
}

impl Tree {
    /// The descendants of `root` now, if `root` is the identified process
    /// and alive; none otherwise.
    pub fn snapshot(root: &ProcessIdentity) -> Tree {
        let mut tree = Tree::default();
        if is_alive(root) {
            tree.extend_from(&[root.pid], &Children::now());
        }
        tree
    }

    /// How many descendants the snapshot holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the snapshot found none.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Adds every descendant of `roots` not yet known.
    fn extend_from(&mut self, roots: &[i32], children: &Children) {
        let mut todo: Vec<i32> = roots.to_vec();
        while let Some(parent) = todo.pop() {
            for child in children.of(parent) {
                if self.members.iter().any(|m| m.pid == child) {
                    continue;
                }
                if let Ok(identity) = identity_of(child) {
                    self.members.push(identity);
                    todo.push(child);
                }
            }
        }
    }

    /// SIGKILLs every member still alive and whatever descends from it,
    /// until none is left or `grace` has passed.
    pub async fn kill(mut self, grace: Duration) -> TreeOutcome {
        let deadline = Instant::now() + grace;
        let mut killed: Vec<i32> = Vec::new();
        let mut delay = Duration::from_millis(1);
        loop {
            let alive: Vec<i32> = self
                .members
                .iter()
                .filter(|m| is_alive(m))
                .map(|m| m.pid)
                .collect();
            // Whatever they started since is theirs too.
            self.extend_from(&alive, &Children::now());
            let alive: Vec<ProcessIdentity> =
                self.members.iter().copied().filter(is_alive).collect();
            if alive.is_empty() || Instant::now() >= deadline {
                return TreeOutcome {
                    seen: self.members.len(),
                    killed: killed.len(),
                    survivors: alive.iter().map(|m| m.pid).collect(),
                };
            }
            for m in &alive {
                // The identity was checked just above; a pid freed and
                // reused in the instant since is the risk `stop` accepts too.
                if kill(Pid::from_raw(m.pid), Signal::SIGKILL).is_ok() && !killed.contains(&m.pid) {
                    killed.push(m.pid);
                }
            }
            tokio::time::sleep(delay.min(deadline.saturating_duration_since(Instant::now()))).await;
            delay = (delay * 2).min(Duration::from_millis(50));
        }
    }
}

/// [`super::stop`] for a provider and everything it started: its
/// descendants are read before it is signalled and killed once it is proven
/// gone (they may have left its group, its session and its environment);
/// the provider's container (found by the marker) catches what hid from
/// the ancestry, and the spawn marker, swept last, what kept the
/// environment and left the container too. A descendant that survives
/// SIGKILL, a container that cannot be proven empty, or a marked process
/// that cannot be proven gone makes the stop unprovable. `exit_grace`
/// (zero: none) is how long a provider whose input was closed may take to
/// exit on its own before the first signal ([`super::await_exit`]); its
/// descendants are read before it, while their ancestry still names the
/// provider.
///
/// The marker is swept after the tree and the container, not before them:
/// each sweep reads every process's environment, and swept first it found
/// the provider's own children (a daemon in a session of its own) alive,
/// killed them and read every environment again until they were gone,
/// about three sweeps a stop where one now proves the same (runnerd's
/// largest share of `/proc` reads in a wave).
pub async fn stop(
    id: &ProcessIdentity,
    mut child: Option<&mut tokio::process::Child>,
    marker: Option<&str>,
    exit_grace: Duration,
    term_grace: Duration,
    kill_grace: Duration,
) -> (StopOutcome, TreeOutcome) {
    let tree = Tree::snapshot(id);
    super::await_exit(id, child.as_deref_mut(), exit_grace).await;
    let mut outcome = super::stop(id, child, term_grace, kill_grace).await;
    let StopOutcome::Stopped(proof) = &mut outcome else {
        let seen = tree.len();
        return (
            outcome,
            TreeOutcome {
                seen,
                killed: 0,
                survivors: Vec::new(),
            },
        );
    };
    let swept = tree.kill(kill_grace).await;
    if let Some(marker) = marker
        && let Some(reason) = empty_then_sweep(proof, marker, kill_grace).await
    {
        let identity = *id;
        return (StopOutcome::Unprovable { identity, reason }, swept);
    }
    if !swept.survivors.is_empty() {
        let reason = format!(
            "processes {:?} the provider started survived SIGKILL",
            swept.survivors
        );
        return (
            StopOutcome::Unprovable {
                identity: *id,
                reason,
            },
            swept,
        );
    }
    (outcome, swept)
}

/// Empties the provider's container (whatever hid from the group and the
/// ancestry is still in it), then sweeps its spawn marker, each recorded in
/// `proof`; why the stop is unprovable, if it is.
async fn empty_then_sweep(proof: &mut StopProof, marker: &str, grace: Duration) -> Option<String> {
    if let Some(containment) = super::containment::get() {
        let contained = containment.empty(marker, grace).await;
        let gone = contained.gone;
        proof.contained = Some(contained);
        if !gone {
            return Some(format!(
                "its container ({}) could not be proven empty",
                containment.mechanism()
            ));
        }
    }
    super::marker::sweep_into(proof, marker, grace).await
}

/// Where a process's children are read: each parent's own list
/// ([`children_of`], the subtree only), or, on a kernel without it, one
/// scan of every process's parent.
enum Children {
    PerParent,
    Scanned(HashMap<i32, Vec<i32>>),
}

impl Children {
    fn now() -> Children {
        if children_listed() {
            Children::PerParent
        } else {
            Children::Scanned(children_by_parent())
        }
    }

    fn of(&self, parent: i32) -> Vec<i32> {
        match self {
            Children::PerParent => children_of(parent),
            Children::Scanned(map) => map.get(&parent).cloned().unwrap_or_default(),
        }
    }
}

/// Every process's children, from the parent field (4) of `/proc/<pid>/stat`.
fn children_by_parent() -> HashMap<i32, Vec<i32>> {
    let mut map: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in entries.flatten() {
        let Some(pid) = proc_pid(&entry) else {
            continue;
        };
        // A process gone since the listing, or a line that does not parse,
        // links no child.
        if let Ok(stat) = read_stat(pid) {
            map.entry(stat.ppid).or_default().push(pid);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// A provider-like process in its own group that starts a command in a
    /// session of its own, as Codex does, and prints the command's pid.
    async fn provider_with_a_session_child() -> (tokio::process::Child, ProcessIdentity, i32) {
        provider_in(tokio::process::Command::new("sh")).await
    }

    /// [`provider_with_a_session_child`] run by `cmd` (a `sh` with its
    /// environment set).
    async fn provider_in(
        mut cmd: tokio::process::Command,
    ) -> (tokio::process::Child, ProcessIdentity, i32) {
        cmd.args(["-c", "setsid sleep 30 & echo $!; exec sleep 30"])
            .stdout(Stdio::piped());
        let (mut child, identity) = super::super::spawn_provider(&mut cmd, None).unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let pid: i32 = line.trim().parse().unwrap();
        // The child has its pid before `setsid` runs; wait (bounded) until it
        // is in a session of its own and still ours by ancestry.
        let until = Instant::now() + Duration::from_secs(10);
        while nix::unistd::getsid(Some(Pid::from_raw(pid))).ok() != Some(Pid::from_raw(pid)) {
            assert!(Instant::now() < until, "the command never got its session");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (child, identity, pid)
    }

    #[tokio::test]
    async fn a_group_stop_misses_a_command_in_its_own_session_and_the_tree_kill_ends_it() {
        let (mut child, identity, command) = provider_with_a_session_child().await;
        let command_id = identity_of(command).unwrap();
        let tree = Tree::snapshot(&identity);
        assert!(
            tree.members.iter().any(|m| m.pid == command),
            "{tree:?} lacks {command}"
        );
        let outcome = super::super::stop(
            &identity,
            Some(&mut child),
            Duration::from_millis(200),
            Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(&outcome, super::super::StopOutcome::Stopped(p) if p.group_gone),
            "{outcome:?}"
        );
        // The stop proof holds, yet the command lives on: the defect.
        assert!(is_alive(&command_id), "the group kill reached the session");
        let out = tree.kill(Duration::from_secs(5)).await;
        assert!(out.survivors.is_empty(), "{out:?}");
        assert!(out.killed >= 1, "{out:?}");
        assert!(!is_alive(&command_id));
    }

    /// The marker is swept after the tree: the command the provider started
    /// in a session of its own, which carries the provider's marker, is
    /// killed by the tree, and the sweep that follows finds nothing alive.
    /// Swept first, the marker found it alive and scanned every process
    /// again until it was gone.
    #[tokio::test]
    async fn a_stop_kills_the_tree_before_it_sweeps_the_marker() {
        let marker = format!("descendants-test-{}", std::process::id());
        let mut cmd = tokio::process::Command::new("sh");
        cmd.env(super::super::MARKER_ENV, &marker);
        let (mut child, identity, command) = provider_in(cmd).await;
        let command_id = identity_of(command).unwrap();
        let (outcome, tree) = stop(
            &identity,
            Some(&mut child),
            Some(&marker),
            Duration::ZERO,
            Duration::from_millis(200),
            Duration::from_secs(5),
        )
        .await;
        let StopOutcome::Stopped(proof) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(tree.killed, 1, "{tree:?}");
        let marked = proof.marked.expect("the marker was swept");
        assert!(marked.gone && marked.killed.is_empty(), "{marked:?}");
        assert!(!is_alive(&command_id));
    }

    #[tokio::test]
    async fn a_gone_root_has_no_tree() {
        let gone = ProcessIdentity {
            pid: i32::MAX - 1,
            pgid: i32::MAX - 1,
            start_time: 1,
        };
        assert!(Tree::snapshot(&gone).is_empty());
    }
}
