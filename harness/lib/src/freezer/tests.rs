use super::*;
use nix::sys::signal::Signal;
use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

/// A runner and its provider, as runnerd starts one: the runner `P` in a
/// group of its own, the provider `C` in another group of the same
/// session, with a tool command (`sleep`, SIGHUP's default action) in
/// C's group. Returns the test's [`Cleanup`] of them, C and the sleep.
fn runner_with_a_provider() -> (Cleanup, u32, u32) {
    let script = r#"my $c = fork(); if ($c == 0) { setpgrp(0, 0); exec('sh', '-c', 'sleep 300 & echo $!; wait'); } waitpid($c, 0);"#;
    let mut p = Command::new("perl")
        .args(["-e", script])
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .expect("perl");
    let mut line = String::new();
    std::io::BufReader::new(p.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the sleep's pid");
    let sleep: u32 = line.trim().parse().expect("a pid");
    let c = wire::procstat::parent_of(sleep as i32).expect("the provider") as u32;
    let guard = Cleanup {
        runner: Some(p),
        pids: vec![c, sleep],
        dir: None,
    };
    (guard, c, sleep)
}

/// A fresh cgroup v2 group holding `pids`, or why there is none here.
fn group_of(pids: &[u32]) -> Result<PathBuf, String> {
    let mount = cgroup2_mount().ok_or("no cgroup v2 hierarchy is mounted")?;
    let dir = mount.join(format!(
        "turncut-freezer-test-{}-{}",
        std::process::id(),
        pids[0]
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e} (needs root)", dir.display()))?;
    for pid in pids {
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("moving {pid} into {}: {e}", dir.display()))?;
    }
    Ok(dir)
}

/// Whether SIGHUP or SIGCONT is pending for `pid` (its thread's set or
/// its process's); `None` when it is gone.
fn hup_or_cont_pending(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mask = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let bit = |sig: Signal| 1u64 << (sig as i32 - 1);
    Some(pending & (bit(Signal::SIGHUP) | bit(Signal::SIGCONT)) != 0)
}

/// Kills the runner `p` and reaps it: its exit has told the kernel to
/// orphan the provider's group by the time the wait returns.
fn kill_runner(mut p: Child) {
    let _ = p.kill();
    let _ = p.wait();
}

fn session_of(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(4)?
        .parse()
        .ok()
}

/// Kills the processes of a test and removes its group when dropped, so
/// that a failed assertion leaves nothing behind (a stopped `sh` holding
/// the test's output open, say).
struct Cleanup {
    runner: Option<Child>,
    pids: Vec<u32>,
    dir: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(p) = self.runner.take() {
            kill_runner(p);
        }
        for pid in &self.pids {
            let _ = crate::nemesis::signal_pid(*pid, Signal::SIGKILL);
        }
        for pid in &self.pids {
            crate::nemesis::wait_gone(*pid, Instant::now() + Duration::from_secs(5));
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
fn a_provider_frozen_by_its_group_stays_frozen_and_unsignalled_when_its_runner_dies() {
    let (mut guard, c, sleep) = runner_with_a_provider();
    match group_of(&[c, sleep]) {
        Ok(dir) => guard.dir = Some(dir),
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    }
    let frozen = freeze_groups(&[c, sleep]);
    kill_runner(guard.runner.take().expect("the runner"));
    // Orphaned, and sent nothing: the tool command lives, and no SIGHUP or
    // SIGCONT waits in either (a frozen process keeps what it is sent
    // pending; a stopped one is woken and takes it).
    for (what, pid) in [("the tool command", sleep), ("the provider", c)] {
        let alive = wire::procstat::live_start_time(pid).is_some();
        let untouched = hup_or_cont_pending(pid) == Some(false);
        assert!(
            alive && untouched,
            "{what}: alive {alive}, no SIGHUP or SIGCONT {untouched}: {frozen:?}"
        );
    }
    assert_eq!(frozen, (vec![c, sleep], vec![]));
    let dir = guard.dir.as_ref().expect("the group");
    let events = std::fs::read_to_string(dir.join("cgroup.events")).unwrap();
    assert!(events.contains("frozen 1"), "{events}");
}

/// The kernel behaviour the freezer avoids, shown: a provider group
/// frozen by SIGSTOP is sent SIGHUP and SIGCONT when its runner dies, and
/// its tool command dies of the SIGHUP.
#[test]
fn a_provider_frozen_by_sigstop_is_woken_and_hung_up_when_its_runner_dies() {
    let (mut guard, c, sleep) = runner_with_a_provider();
    for pid in [c, sleep] {
        crate::nemesis::signal_pid(pid, Signal::SIGSTOP).unwrap();
    }
    kill_runner(guard.runner.take().expect("the runner"));
    let reaper = wire::procstat::parent_of(c as i32).unwrap_or(1) as u32;
    if session_of(reaper) == session_of(c) {
        eprintln!(
            "skipped: the provider's new parent {reaper} is in its session (a subreaper), so its group is not orphaned here"
        );
        return;
    }
    let hung_up = crate::nemesis::wait_gone(sleep, Instant::now() + Duration::from_secs(10));
    assert!(
        hung_up,
        "the tool command outlived its runner's death under SIGSTOP"
    );
}
