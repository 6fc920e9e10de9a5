//! Provider processes the runner must find and stop: one spawned before its
//! identity was recorded, and one that cannot be proven stopped.

use crate::*;

/// Live processes (zombies excluded) whose command line holds `arg`.
pub(crate) fn processes_with_arg(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) && !dead(pid) {
            found.push(pid);
        }
    }
    found
}

/// Rewrites the rig's profile so the provider first leaves two long-lived
/// `sleep` children, one in its own process group and one in a new session
/// (as real providers do with tool shells), each tagged with `tag`.
fn provider_with_children(rig: &Rig, tag: &str) {
    let profiles = std::fs::read_to_string(rig.path("profiles.toml")).unwrap();
    let start = profiles.find("command = ").unwrap() + "command = ".len();
    let end = start + profiles[start..].find('\n').unwrap();
    let mut command: Vec<String> = serde_json::from_str(&profiles[start..end]).unwrap();
    let wrapper = format!("sleep {tag} & setsid sleep {tag} & exec \"$@\"");
    let mut wrapped = vec!["sh".into(), "-c".into(), wrapper, "sh".into()];
    wrapped.append(&mut command);
    let profiles = format!(
        "{}{}{}",
        &profiles[..start],
        serde_json::to_string(&wrapped).unwrap(),
        &profiles[end..]
    );
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
}

/// Kills what is left of the tagged children when a test ends, passed or
/// failed, so a failing run leaves no orphans on the machine.
struct Reaper(String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in processes_with_arg(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Waits until exactly `n` live processes have `arg` on their command line.
fn wait_count(arg: &str, n: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let found = processes_with_arg(arg);
        if found.len() == n || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::yield_now();
    }
}

pub(crate) fn wait_gone(arg: &str) -> Vec<u32> {
    wait_count(arg, 0)
}

#[test]
fn a_provider_spawned_before_its_identity_was_recorded_is_found_and_stopped() {
    let mut rig = Rig::new(&[]);
    let tag = format!("86400.{}", std::process::id());
    let _reaper = Reaper(tag.clone());
    provider_with_children(&rig, &tag);
    // Held after the spawn, before the identity is durable; the runner dies
    // there, so only the spawn intent's marker names the provider.
    let client = rig.start(Some("runner.provider.spawned#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let orphans = wait_count(&tag, 2);
    assert_eq!(
        orphans.len(),
        2,
        "the provider's children outlive the runner"
    );
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let left = wait_gone(&tag);
    assert!(left.is_empty(), "orphans left: {left:?}\n{}", rig.log());
    let events = client.events("t1", 0).unwrap();
    let swept = events
        .iter()
        .find(|e| e["kind"] == "provider.spawn_swept")
        .expect("the restarted runner sweeps the intent's marker");
    let killed: Vec<i64> = swept
        .pointer("/data/killed")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["pid"].as_i64().unwrap())
        .collect();
    for pid in &orphans {
        assert!(killed.contains(&i64::from(*pid)), "{pid} not in {swept}");
    }
    rig.assert_effects_once();
}

/// Found by the `upstream-faults` wave under `--stress 8` (seed 2, the
/// hygiene oracle, 2 of 12 replays): a restart spawned the provider, then
/// failed the write that marks the tools of the earlier process
/// `uncertain`; the runner dropped the new process instead of stopping it,
/// and its session children outlived the run.
#[test]
fn a_failed_write_after_a_restart_spawned_the_provider_stops_its_children() {
    let mut rig = Rig::acp(&[]);
    let tag = format!("86401.{}", std::process::id());
    let _reaper = Reaper(tag.clone());
    // The runner dies while a client-side tool (a terminal) is executing.
    let client = rig.start(Some("runner.tool_executing.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    provider_with_children(&rig, &tag);
    let client = rig.start(Some("runner.write.tool_uncertain#1"));
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.tool_uncertain");
    assert_eq!(
        wait_count(&tag, 2).len(),
        2,
        "the new provider's children run"
    );
    held.fail(cutpoint::IoFault::Eio).unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(cause(&task), "storage_failed", "{task}\n{}", rig.log());
    let left = wait_gone(&tag);
    assert!(left.is_empty(), "orphans left: {left:?}\n{}", rig.log());
}

/// A cgroup-v1 freezer group: a frozen process keeps SIGKILL pending until
/// it is thawed, as a process stuck in the kernel would. Thawed and removed
/// on drop.
struct Freezer(PathBuf);

impl Freezer {
    fn new() -> Result<Freezer, String> {
        let root = Path::new("/sys/fs/cgroup/freezer");
        if !root.join("cgroup.procs").exists() {
            return Err("no cgroup-v1 freezer at /sys/fs/cgroup/freezer".into());
        }
        let dir = root.join(format!("turncut-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        Ok(Freezer(dir))
    }

    fn freeze(&self, pid: i64) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        let deadline = std::time::Instant::now() + WAIT;
        while std::fs::remove_dir(&self.0).is_err() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_lost_provider_that_cannot_be_proven_stopped_settles_needs_human() {
    let freezer = match Freezer::new() {
        Ok(f) => f,
        Err(why) => {
            common::skip(
                "freezer",
                &format!("a process that survives SIGKILL needs root and {why}"),
            );
            return;
        }
    };
    let mut rig = Rig::new(&[]);
    rig.runner_extra = vec!["--provider-idle-timeout-ms".into(), "300".into()];
    let client = rig.start(Some("runner.turn_accepted.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let events = client.events("t1", 0).unwrap();
    let spawned = events
        .iter()
        .find(|e| e["kind"] == "provider.spawned")
        .expect("the provider is recorded before the turn");
    let pid = spawned.pointer("/data/pid").unwrap().as_i64().unwrap();
    // The provider goes silent mid-turn and cannot be killed.
    freezer.freeze(pid);
    held.resume().unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "needs_human", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "cleanup_quarantined", "{task}");
    drop(freezer);
    assert!(
        wait_gone_pid(pid as u32),
        "the thawed provider dies of its pending SIGKILL"
    );
}

fn wait_gone_pid(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + WAIT;
    while !dead(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// At the end of a run an OpenCode server is stopped at once, without the
/// exit grace a stdio provider gets (`--provider-exit-grace-ms`): it does
/// not exit for its input closing (the real `opencode serve` does not), so
/// the grace was only a wait, 2 s of every run's end by default. Here the
/// grace is ten minutes and the run settles within the test's wait, the
/// server stopped by a SIGTERM.
#[test]
fn an_opencode_server_is_stopped_at_a_runs_end_without_an_exit_grace() {
    let mut rig = Rig::opencode_deaf_to_stdin();
    rig.runner_extra
        .extend(["--provider-exit-grace-ms".into(), "600000".into()]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let events = client.events("t1", 0).unwrap();
    let stop = events
        .iter()
        .rfind(|e| e["kind"] == "provider.stopped")
        .expect("the provider's stop is recorded");
    assert_eq!(stop["data"]["signals"], json!(["SIGTERM"]), "{stop}");
}
