//! The nemesis: delivers every process fault, with real signals.
//!
//! `kill-runner` SIGKILLs the runner (its process group only: providers lead
//! groups of their own and live on as orphans, as after a real crash);
//! `kill-provider` SIGKILLs the provider's group; `kill-both` does both;
//! `hang-provider` SIGSTOPs the provider's group, so it stops answering while
//! staying alive (`blow` says which a fault does, `deal` does it);
//! `power-cut` freezes every process of the cell, then SIGKILLs them all
//! (`power_loss`), before the cell cuts the power under them. A cell never
//! kills a process itself: it asks here (`deal`, `kill_runner`,
//! `power_loss`). Together with `supervisor`, this is the only harness code
//! that sends signals. It decides nothing about when to cut, and records
//! nothing: it tells its caller what it did (`Dealt`).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::model::Fault;
use crate::runner_client::RunnerProcess;

/// What a fault does to the cell's processes, its blow: whether the runner
/// dies and what happens to the provider's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blow {
    /// SIGKILL the runner (and restart it).
    pub kill_runner: bool,
    /// The signal for the provider's group, if any.
    pub provider_signal: Option<Signal>,
}

/// The blow of a fault.
pub fn blow(fault: Fault) -> Blow {
    match fault {
        Fault::KillRunner => Blow {
            kill_runner: true,
            provider_signal: None,
        },
        Fault::KillProvider => Blow {
            kill_runner: false,
            provider_signal: Some(Signal::SIGKILL),
        },
        Fault::KillBoth => Blow {
            kill_runner: true,
            provider_signal: Some(Signal::SIGKILL),
        },
        Fault::HangProvider => Blow {
            kill_runner: false,
            provider_signal: Some(Signal::SIGSTOP),
        },
        // A controller action (`cell::inject::inject_action`), a storage fault (the
        // cut-point reply `fail <errno>` or `corrupt`), or a power cut, which kills
        // every process of the cell by its tag (`power_loss`), not by blow;
        // or an error answer (the cut-point reply `answer <fault>`).
        _ => Blow {
            kill_runner: false,
            provider_signal: None,
        },
    }
}

/// Whether a fault targets the provider (and so needs a live one).
pub fn needs_provider(fault: Fault) -> bool {
    blow(fault).provider_signal.is_some()
}

/// Where a blow lands: the cell's processes as the cell knows them at the
/// fault's hit.
#[derive(Clone, Copy, Debug)]
pub struct Aim<'a> {
    /// The cell's tag ([`TAG_ENV`]): the census of its processes.
    pub tag: &'a str,
    /// The runner's pid when the hit is the runner's own: at a kill of the
    /// runner alone, its other processes are frozen first
    /// ([`runner_children`]).
    pub runner_at_hit: Option<u32>,
    /// The group the runner leads (a provider in it is signalled alone,
    /// [`provider_target`]).
    pub runner_pgid: Option<u32>,
    /// The provider a provider fault signals, if the cell found one.
    pub provider: Option<u32>,
}

/// What the nemesis did while it dealt a blow, told as it happens so that
/// the caller records it in that order.
#[derive(Debug)]
pub enum Dealt {
    /// Before a kill of the runner alone at its own hit, the runner's other
    /// processes frozen ([`crate::freezer`]), and the forks of the runner
    /// not yet exec'ed, left to exec.
    Frozen {
        pids: Vec<u32>,
        forks_left: Vec<u32>,
    },
    /// The runner SIGKILLed (its own group) and reaped.
    RunnerKilled { pid: u32 },
    /// The provider `pid` signalled through `target`.
    ProviderSignalled {
        pid: u32,
        target: Target,
        signal: Signal,
    },
    /// A provider fault with no provider to signal.
    NoProvider,
}

/// Deals `blow` at `aim`: at a kill of the runner alone at its own hit,
/// freezes the runner's other processes first (left running, a provider
/// goes on with its turn while the runner restarts, or not, by timing, and
/// the cell's recovery path with it; frozen, it keeps exactly what it had
/// at the cut, and the restarted runner must stop it: a SIGKILL ends a
/// stopped process); then SIGKILLs the runner `take_runner` hands over
/// (called only when the blow kills it) and signals the provider. Each step
/// is told to `told` as it is done.
pub fn deal(
    blow: Blow,
    aim: Aim<'_>,
    take_runner: impl FnOnce() -> Option<RunnerProcess>,
    mut told: impl FnMut(Dealt),
) -> std::io::Result<()> {
    if blow.kill_runner
        && blow.provider_signal.is_none()
        && let Some(runner) = aim.runner_at_hit
    {
        let (pids, forks_left) = freeze_runner_children(aim.tag, runner);
        told(Dealt::Frozen { pids, forks_left });
    }
    if blow.kill_runner
        && let Some(r) = take_runner()
    {
        told(Dealt::RunnerKilled {
            pid: kill_runner(r)?,
        });
    }
    match (blow.provider_signal, aim.provider) {
        (Some(signal), Some(pid)) => {
            let target = provider_target(pid, aim.runner_pgid);
            signal_target(target, signal)?;
            told(Dealt::ProviderSignalled {
                pid,
                target,
                signal,
            });
        }
        (Some(_), None) => told(Dealt::NoProvider),
        (None, _) => {}
    }
    Ok(())
}

/// SIGKILLs the runner `runner` (its own process group only: providers live
/// in groups of their own and survive, as they would a real crash) and
/// reaps it; returns its pid.
pub fn kill_runner(runner: RunnerProcess) -> std::io::Result<u32> {
    let pid = runner.pid();
    runner.kill()?;
    Ok(pid)
}

/// A power loss for the cell tagged `tag` whose runner is `runner`: every
/// process frozen, then SIGKILLed ([`freeze_and_kill`]), the runner reaped.
/// Returns the pids killed; the caller waits for them to exit
/// ([`wait_gone`]).
pub fn power_loss(tag: &str, runner: Option<RunnerProcess>) -> std::io::Result<Vec<u32>> {
    let killed = freeze_and_kill(tag, runner.as_ref().map(RunnerProcess::pid));
    if let Some(r) = runner {
        // Already SIGKILLed: this reaps it.
        r.kill()?;
    }
    Ok(killed)
}

/// How many times the census of a cell's processes runs before the kill: a
/// process started while the first census was read (a provider the runner
/// was spawning) is found by the next one, and the runner, frozen by the
/// first, starts nothing more.
const CENSUS_ROUNDS: usize = 3;

/// A power loss for the processes tagged `tag` (a cell's runner, its
/// providers and whatever they started) and the process `runner`: every one
/// is frozen (SIGSTOP) first, so none acts on another's death (a provider
/// that syncs its store when its stdin closes would otherwise get the
/// chance a real power loss never gives), then all are SIGKILLed. Returns
/// the pids killed; the caller waits for them to exit.
fn freeze_and_kill(tag: &str, runner: Option<u32>) -> Vec<u32> {
    let mut frozen: Vec<u32> = Vec::new();
    if let Some(pid) = runner {
        let _ = signal_pid(pid, Signal::SIGSTOP);
        frozen.push(pid);
    }
    for _ in 0..CENSUS_ROUNDS {
        let found: Vec<u32> = tagged_processes(tag)
            .into_iter()
            .map(|(pid, _)| pid)
            .filter(|pid| !frozen.contains(pid))
            .collect();
        if found.is_empty() {
            break;
        }
        for pid in found {
            let _ = signal_pid(pid, Signal::SIGSTOP);
            frozen.push(pid);
        }
    }
    // Children before their parents, the runner last: a stopped process
    // whose parent dies first is woken by the kernel (its group orphaned:
    // SIGHUP, SIGCONT, `crate::freezer`) and could act after the power is
    // gone; one already sent SIGKILL never returns to user space.
    for pid in children_first(&frozen) {
        let _ = signal_pid(pid, Signal::SIGKILL);
    }
    frozen
}

/// `pids` ordered so that each comes before its parent (by `/proc`'s
/// parent links within `pids`; a process whose parent is not among them
/// is a root).
fn children_first(pids: &[u32]) -> Vec<u32> {
    let parent: std::collections::HashMap<u32, u32> = pids
        .iter()
        .filter_map(|&p| Some((p, u32::try_from(wire::procstat::parent_of(p as i32)?).ok()?)))
        .filter(|(_, q)| pids.contains(q))
        .collect();
    let depth = |mut p: u32| {
        let mut d = 0;
        while let Some(&q) = parent.get(&p) {
            d += 1;
            p = q;
            if d > pids.len() {
                break;
            }
        }
        d
    };
    let mut ordered = pids.to_vec();
    ordered.sort_by_key(|p| std::cmp::Reverse(depth(*p)));
    ordered
}

/// The processes of `tag` to freeze at a kill of the runner `runner` alone,
/// and the ones left running: a process whose command line is the
/// runner's is a fork of the runner that has not exec'ed its provider yet.
/// It still holds the runner's sockets and files (a client's connection
/// among them, which would then never close) and is the runner's, not a
/// provider: it is left to exec, as it would after a real crash.
pub fn runner_children(tag: &str, runner: u32) -> (Vec<u32>, Vec<u32>) {
    let procs = tagged_processes(tag);
    let runner_cmdline = procs.iter().find(|(pid, _)| *pid == runner).map(|(_, c)| c);
    let (mut freeze, mut forks) = (Vec::new(), Vec::new());
    for (pid, cmdline) in procs.iter().filter(|(pid, _)| *pid != runner) {
        if Some(cmdline) == runner_cmdline {
            forks.push(*pid);
        } else {
            freeze.push(*pid);
        }
    }
    (freeze, forks)
}

/// Freezes the processes of `tag` that [`runner_children`] says to freeze
/// at a kill of `runner` alone ([`crate::freezer`]: by their control group
/// where they have one of their own, which the runner's death does not
/// wake, else by SIGSTOP): the ones frozen, and the forks left to exec.
/// Providers are found by the cell's tag, not through the runner's API,
/// which a held write blocks.
fn freeze_runner_children(tag: &str, runner: u32) -> (Vec<u32>, Vec<u32>) {
    let (children, forks) = runner_children(tag, runner);
    let (mut frozen, rest) = crate::freezer::freeze_groups(&children);
    frozen.extend(
        rest.into_iter()
            .filter(|pid| signal_pid(*pid, Signal::SIGSTOP).is_ok()),
    );
    frozen.sort_unstable();
    (frozen, forks)
}

/// SIGKILLs processes that still use a cell's lazy mount after
/// [`freeze_and_kill`] (a tool command whose environment lost the cell's
/// tag): only the cell's own processes can be inside its private mount.
pub fn kill_mount_users(pids: &[u32]) {
    for pid in pids {
        let _ = signal_pid(*pid, Signal::SIGKILL);
    }
}

/// Waits until process `pid` has exited (a zombie has: it holds no file
/// any more), or `until`; false when it is still alive then. Exact through
/// a pidfd; where the kernel has no `pidfd_open`, by its start time, looked
/// at every few milliseconds.
pub fn wait_gone(pid: u32, until: std::time::Instant) -> bool {
    use std::os::fd::{AsFd as _, FromRawFd as _, OwnedFd};
    let start = start_time(pid);
    // SAFETY: pidfd_open(2) takes a pid and a flags word and returns a new
    // descriptor or -1; nothing else is touched.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd >= 0 {
        // SAFETY: `fd` was just returned by pidfd_open and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let left = until.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [nix::poll::PollFd::new(
            fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        return nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap_or(0) > 0
            || !alive_same(pid, start);
    }
    while alive_same(pid, start) {
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// Sends `signal` to the process group led by `pgid`. A group that is already
/// gone is not an error.
pub fn signal_group(pgid: u32, signal: Signal) -> std::io::Result<()> {
    match killpg(Pid::from_raw(pgid as i32), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What a provider fault signals for the provider process `pid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The process group `pid` is in (the provider leads it, or the process
    /// that started the provider does: acpx's queue owner with its agent).
    Group(u32),
    /// `pid` alone: its group is the runner's (a provider the runner started
    /// in its own group), which a provider fault must not kill.
    Pid(u32),
    /// `pid` is gone: nothing to signal.
    Gone,
}

/// The target of a provider fault at provider `pid` while the runner leads
/// group `runner_pgid`. A provider that does not lead a group of its own is
/// signalled through the group it is in: signalling a group named by its
/// pid reached nothing (ESRCH, once silently counted as applied).
pub fn provider_target(pid: u32, runner_pgid: Option<u32>) -> Target {
    match nix::unistd::getpgid(Some(Pid::from_raw(pid as i32))) {
        Ok(g) if Some(g.as_raw() as u32) == runner_pgid => Target::Pid(pid),
        Ok(g) => Target::Group(g.as_raw() as u32),
        Err(_) => Target::Gone,
    }
}

/// Sends `signal` to `target`.
pub fn signal_target(target: Target, signal: Signal) -> std::io::Result<()> {
    match target {
        Target::Group(g) => signal_group(g, signal),
        Target::Pid(p) => signal_pid(p, signal),
        Target::Gone => Ok(()),
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

/// Raises the calling thread's scheduling priority (nice −10) so that it
/// wins the CPU the moment it wakes, on a machine loaded by the cells
/// themselves or by `--stress`: a cell's cut-point acceptor must match a
/// hit (and stop the runner it holds) before the processes under test run
/// on past it. Without the privilege (not root) the thread keeps its
/// priority, and says nothing: only the timing margin is smaller.
pub fn prioritise_this_thread() {
    // SAFETY: plain syscalls on the calling thread's own id; no memory is
    // shared.
    unsafe {
        let tid = nix::libc::syscall(nix::libc::SYS_gettid) as nix::libc::id_t;
        let _ = nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid, -10);
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
    let pids =
        wire::procstat::pids_with_env(entry.as_bytes()).map_err(|e| format!("/proc: {e}"))?;
    let mut found = Vec::new();
    for pid in pids.into_iter().filter_map(|p| u32::try_from(p).ok()) {
        let Some(start) = start_time(pid) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        found.push((pid, start, cmdline.trim().to_owned()));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sh` (in a group of its own with `own_group`) with a `sleep` child,
    /// and the child's pid.
    fn sh_with_a_child(own_group: bool) -> (std::process::Child, u32) {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped());
        if own_group {
            cmd.process_group(0);
        }
        let mut sh = cmd.spawn().expect("sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(sh.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the child's pid");
        (sh, line.trim().parse().expect("a pid"))
    }

    /// A power loss kills a child before its parent, the root last, so that
    /// no stopped process outlives its parent (which would wake it).
    #[test]
    fn children_are_killed_before_their_parents() {
        let (mut sh, sleep) = sh_with_a_child(false);
        let me = std::process::id();
        let ordered = children_first(&[me, sh.id(), sleep]);
        let _ = signal_pid(sleep, Signal::SIGKILL);
        let _ = sh.kill();
        let _ = sh.wait();
        assert_eq!(ordered, vec![sleep, sh.id(), me]);
    }

    /// acpx's shape: a group leader (the queue owner) with a child in its
    /// group (the agent). A fault at the child's hit signals the leader's
    /// group; with the child's pid as a group it reached nothing.
    #[test]
    fn a_provider_that_leads_no_group_is_signalled_through_the_group_it_is_in() {
        let (mut leader, child) = sh_with_a_child(true);
        assert_eq!(provider_target(child, None), Target::Group(leader.id()));
        assert_eq!(
            provider_target(child, Some(leader.id())),
            Target::Pid(child)
        );
        assert_eq!(
            provider_target(leader.id(), None),
            Target::Group(leader.id())
        );
        signal_target(provider_target(child, None), Signal::SIGKILL).expect("signal");
        let status = leader.wait().expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }

    /// A python process that forks and has both halves wait: the child is a
    /// fork that never exec'ed, with its parent's command line, as a
    /// runner's child is between fork and exec.
    #[test]
    fn a_fork_of_the_runner_that_has_not_exec_ed_is_not_frozen() {
        let tag = format!("nemesis-test-{}", std::process::id());
        let script = "import os,sys,time\n\
                      pid=os.fork()\n\
                      if pid==0:\n    time.sleep(30)\n    sys.exit(0)\n\
                      import subprocess\n\
                      subprocess.Popen(['sleep','30'])\n\
                      print(pid, flush=True)\n\
                      time.sleep(30)\n";
        let spawned = std::process::Command::new("python3")
            .args(["-c", script])
            .env(TAG_ENV, &tag)
            .stdout(std::process::Stdio::piped())
            .spawn();
        let required = std::env::var("TURNCUT_REQUIRE").unwrap_or_default();
        let mut parent = match spawned {
            Err(e) if !required.split(',').any(|r| r.trim() == "python3") => {
                println!("skipped: python3 cannot run here ({e})");
                return;
            }
            spawned => spawned.expect("python3 (TURNCUT_REQUIRE lists it)"),
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(parent.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the fork's pid");
        let fork: u32 = line.trim().parse().expect("a pid");
        // The kernel sets a new image's environment late in exec, after the
        // close-on-exec pipe Popen waits on is closed: under load `sleep`'s
        // environ can still read empty, so wait (with a deadline) to see it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (freeze, forks) = loop {
            let (freeze, forks) = runner_children(&tag, parent.id());
            if !freeze.is_empty() || std::time::Instant::now() > deadline {
                break (freeze, forks);
            }
            std::thread::yield_now();
        };
        for (pid, _) in tagged_processes(&tag) {
            let _ = signal_pid(pid, Signal::SIGKILL);
        }
        let _ = parent.wait();
        assert_eq!(forks, vec![fork]);
        assert_eq!(
            freeze.len(),
            1,
            "the exec'ed child (sleep) is frozen: {freeze:?}"
        );
        assert!(!freeze.contains(&fork) && !freeze.contains(&parent.id()));
    }
}
