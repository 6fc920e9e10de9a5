//! Power cuts under real processes (issue 24, before the `power-cut` cells):
//! `turncut lazyfs mount` as a user drives it, and runnerd with its state
//! directory and the task's workspace on a lazy mount — a task that writes a
//! workspace file through an ACP client tool, runnerd and its provider
//! SIGKILLed, the power cut, runnerd started again on what survived.
//!
//! The control keeps everything runnerd made durable: the completed task
//! and the file its tool wrote. Each power-loss seeded bug
//! (`docs/seeded-bugs.md`) loses a write runnerd had already reported
//! durable; that half needs runnerd built with the bugs:
//! `cargo test -p turncut --features runner/seeded-bugs --test power_cut`
//! (without the feature it says so and checks the control only). Every test
//! says why it skips where FUSE cannot be mounted.

mod common;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};
use lazyfs::LazyFs;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);
const ACP: &str = "runner-acpx-claude";
/// The ACP fake writes `written by KEY` into the file its write-file tool names.
const SCRIPT: &str = r#"
[[turn]]
tools = [{ key = "notes", kind = "write-file", path = "notes.txt" }]
final = "Done."
"#;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn fuse_missing() -> bool {
    match lazyfs::unavailable() {
        Some(why) => {
            common::skip("fuse", &why);
            true
        }
        None => false,
    }
}

/// Waits for process `pid` to exit: a pidfd becomes readable then.
fn wait_gone(pid: u32) {
    // SAFETY: a plain syscall; the descriptor it returns is owned below.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd < 0 {
        return; // already gone
    }
    // SAFETY: `fd` was just returned by pidfd_open and is owned by nothing else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    let mut fds = [nix::poll::PollFd::new(
        std::os::fd::AsFd::as_fd(&fd),
        nix::poll::PollFlags::POLLIN,
    )];
    let ms = u16::try_from(WAIT.as_millis()).unwrap_or(u16::MAX);
    let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap_or(0);
    assert!(
        ready > 0,
        "process {pid} still uses the mount after {WAIT:?}"
    );
}

/// Cuts the power once every process using the mount is gone (the runner
/// is dead; its provider exits when it sees its stdin close).
fn cut_when_idle(fs: &mut LazyFs) -> lazyfs::PowerLoss {
    let deadline = Instant::now() + WAIT;
    loop {
        match fs.cut_power() {
            Ok(cut) => return cut,
            Err(lazyfs::Error::Busy { pids, .. }) if Instant::now() < deadline => {
                pids.into_iter().for_each(wait_gone);
            }
            Err(e) => panic!("failed to {e}"),
        }
    }
}

/// runnerd with `state/` and `ws/` on one lazy mount; the script, the
/// profiles, the journal and the ledger beside it, off the mount.
struct Rig {
    dir: tempfile::TempDir,
    fs: LazyFs,
    runner: Option<RunnerProcess>,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |n: &str| dir.path().join(n);
        for d in ["backing", "backing/ws", "mnt"] {
            std::fs::create_dir(p(d)).expect("mkdir");
        }
        std::fs::write(p("script.toml"), SCRIPT).expect("script");
        harness::runner_client::write_fake_profile(exe(), ACP, dir.path(), &p("script.toml"))
            .expect("profiles");
        let fs = LazyFs::mount(&p("backing"), &p("mnt")).expect("mount");
        Rig {
            dir,
            fs,
            runner: None,
        }
    }

    fn mnt(&self, name: &str) -> PathBuf {
        self.fs.mountpoint().join(name)
    }

    fn start(&mut self, bug: Option<&str>) -> RunnerClient {
        let mut extra = vec![
            "--profiles".to_owned(),
            self.dir.path().join("profiles.toml").display().to_string(),
        ];
        if let Some(bug) = bug {
            extra.extend(["--seeded-bug".to_owned(), bug.to_owned()]);
        }
        let mut cmd = RunnerCommand::via(exe()).command(&self.mnt("state"), &extra);
        cmd.env_remove(cutpoint::ENV_ARM)
            .env_remove(cutpoint::ENV_SOCKET)
            .env_remove("TURNCUT_PROVIDER_API_KEY");
        let stderr = self.dir.path().join("runnerd.stderr");
        let runner = RunnerProcess::start(&mut cmd, &self.mnt("state"), &stderr, WAIT)
            .expect("runnerd starts");
        let client = runner.client();
        self.runner = Some(runner);
        client
    }

    /// The task as the runner started on the surviving state reads it:
    /// `None` when it does not know it.
    fn task_after_cut(&mut self, bug: Option<&str>) -> Option<Value> {
        self.runner
            .take()
            .expect("a runner")
            .kill()
            .expect("SIGKILL runnerd");
        let cut = cut_when_idle(&mut self.fs);
        eprintln!("{bug:?}: power cut in {:?}: {:?}", cut.took, cut.changes);
        let client = self.start(bug);
        let (status, body) = client.task("t1").expect("GET the task");
        (status == 200).then_some(body)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(r) = self.runner.take() {
            let _ = r.kill();
        }
    }
}

/// What survives the power cut of one run: the task's state after the
/// restart (`None`: unknown) and the workspace file (`None`: absent).
fn run(bug: Option<&str>) -> (Option<String>, Option<String>) {
    let mut rig = Rig::new();
    let client = rig.start(bug);
    let ws = rig.mnt("ws");
    let (status, body) = client
        .create_task("t1", "t1-m1", "Write the notes", ACP, &ws)
        .expect("create the task");
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).expect("the task settles");
    assert_eq!(task["state"], "completed", "{task}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).expect("the tool wrote"),
        "written by notes\n"
    );
    let task = rig.task_after_cut(bug);
    let state = task.map(|t| t["state"].as_str().unwrap_or_default().to_owned());
    let file = std::fs::read_to_string(ws.join("notes.txt")).ok();
    (state, file)
}

#[test]
fn a_power_cut_keeps_everything_runnerd_made_durable() {
    if fuse_missing() {
        return;
    }
    let (state, file) = run(None);
    assert_eq!(state.as_deref(), Some("completed"));
    assert_eq!(file.as_deref(), Some("written by notes\n"));
}

#[test]
fn each_power_loss_bug_loses_a_write_runnerd_reported_durable() {
    if fuse_missing() {
        return;
    }
    if !runner::seeded::COMPILED {
        eprintln!(
            "the bug half needs `--features runner/seeded-bugs`; the control is a_power_cut_keeps_everything_runnerd_made_durable"
        );
        return;
    }
    // The whole store is lost: the task the API reported completed is
    // unknown, or no longer completed, after the cut.
    let (state, _) = run(Some("wal-synchronous-normal"));
    assert_ne!(
        state.as_deref(),
        Some("completed"),
        "wal-synchronous-normal"
    );
    // The store keeps the completed tool; the file it wrote does not.
    let (state, file) = run(Some("atomic-write-without-fsync"));
    assert_eq!(state.as_deref(), Some("completed"));
    assert_eq!(
        file.as_deref(),
        Some(""),
        "the rename durable, the bytes not"
    );
    let (state, file) = run(Some("rename-without-dir-sync"));
    assert_eq!(state.as_deref(), Some("completed"));
    assert_eq!(file, None, "the rename undone");
}

/// `turncut lazyfs mount` as a user runs it: SIGUSR1 cuts the power,
/// SIGTERM unmounts and prints the counters.
#[test]
fn the_lazyfs_command_cuts_power_on_sigusr1_and_unmounts_on_sigterm() {
    if fuse_missing() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, m) = (dir.path().join("b"), dir.path().join("m"));
    std::fs::create_dir(&b).expect("mkdir");
    std::fs::create_dir(&m).expect("mkdir");
    let mut child = Command::new(exe())
        .args(["lazyfs", "mount"])
        .args([&b, &m])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("text");
    assert!(first.contains("mounted at"), "{first}");
    std::fs::write(m.join("unsynced"), "x").expect("write");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).expect("SIGUSR1");
    let cut = lines.next().expect("a line").expect("text");
    assert!(cut.contains("power cut"), "{cut}");
    let change = lines.next().expect("a line").expect("text");
    assert_eq!(change.trim(), "unsynced  Gone");
    assert!(!m.join("unsynced").exists());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().expect("wait").success());
    assert!(
        rest.iter()
            .any(|l| l.starts_with("unsynced\t1\t1\t0\t0\t0")),
        "{rest:?}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(!mounts.contains(&*m.to_string_lossy()), "unmounted");
}

/// The issue's cell: `turncut run` with `--fault power-cut` where the fake
/// Codex has just received the `turn/start` (its turn not yet recorded,
/// nothing of it synced). Every process of the cell is killed, the power
/// cut under the runner's state and the workspace, and the recovery passes
/// every oracle; the timeline shows the cut, and no lazy mount is left.
#[test]
fn a_power_cut_cell_runs_and_passes_through_turncut_run() {
    if fuse_missing() {
        return;
    }
    let out = tempfile::tempdir().expect("tempdir");
    let run = Command::new(exe())
        .args([
            "run",
            "restart-chaos.runner-codex.local.cut-turn-start-retry",
            "--cut",
            "codex.turn_start.received#1",
            "--fault",
            "power-cut",
            "--out",
        ])
        .arg(out.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("turncut runs");
    let pid = run.id();
    let run = run.wait_with_output().expect("turncut ends");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let wave: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("wave.json")).expect("wave.json"))
            .expect("wave.json parses");
    let cell = &wave["cells"][0];
    assert_eq!(cell["verdict"], "pass", "{cell:#}\n{stderr}");
    assert!(run.status.success(), "{stderr}");
    assert_eq!(cell["spec"]["fault"], "power-cut", "{cell:#}");
    assert_eq!(cell["outcome"]["reached_cut"], true, "{cell:#}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
    assert!(
        !mounts.contains(&format!("turncut-cell-{pid}.")),
        "a cell's lazy mount is left: {mounts}"
    );
}

/// How the fake Codex ends before the power cut.
#[derive(Clone, Copy, Debug)]
enum End {
    Sigkill,
    /// As runnerd stops a provider.
    Sigterm,
    StdinClosed,
}

/// The fake Codex syncs its threads where the real codex 0.171 does
/// (`docs/real-providers.md`): only when it exits, on a closed stdin or on
/// SIGTERM. After a turn, a SIGKILL keeps the thread on disk but a power cut
/// then loses it; after either exit, the thread survives the cut.
#[test]
fn the_fake_codex_thread_survives_a_power_cut_only_after_its_exit() {
    if fuse_missing() {
        return;
    }
    let threads_after = |end: End| -> Vec<String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |n: &str| dir.path().join(n);
        // The provider's state directory exists, durable, as runnerd makes it.
        for d in ["backing", "backing/codex", "mnt", "ws"] {
            std::fs::create_dir(p(d)).expect("mkdir");
        }
        std::fs::write(p("script.toml"), "[[turn]]\nsay = [\"Hello.\"]\n").expect("script");
        let mut fs = LazyFs::mount(&p("backing"), &p("mnt")).expect("mount");
        let mut cmd = Command::new(exe());
        cmd.args(["fake-provider", "codex", "--state-dir"])
            .arg(p("mnt/codex"))
            .arg("--journal")
            .arg(p("journal.jsonl"))
            .arg("--ledger")
            .arg(p("ledger.jsonl"))
            .arg("--script")
            .arg(p("script.toml"))
            .env_remove(cutpoint::ENV_SOCKET)
            .env_remove(cutpoint::ENV_ARM);
        let mut client = harness::codex_client::CodexClient::spawn(&mut cmd).expect("spawn");
        client.initialize().expect("initialize");
        let thread = client
            .thread_start(&p("ws").display().to_string())
            .expect("thread");
        let turn = client
            .run_turn(&thread, "Hi", Some("m-1"), |_| "accept")
            .expect("turn");
        assert_eq!(turn.status, "completed");
        let on_disk = std::fs::read_dir(p("mnt/codex/threads"))
            .expect("threads")
            .count();
        assert_eq!(on_disk, 1, "the thread is written");
        match end {
            End::Sigkill => drop(client.kill().expect("SIGKILL")),
            End::Sigterm => {
                let pid = nix::unistd::Pid::from_raw(client.pid() as i32);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
                let status = client.wait_exit().expect("exit");
                assert_eq!(status.code(), Some(143), "{status}");
            }
            End::StdinClosed => assert!(client.close().expect("exit").success()),
        }
        cut_when_idle(&mut fs);
        std::fs::read_dir(p("mnt/codex/threads"))
            .map(|d| {
                d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        threads_after(End::Sigkill),
        Vec::<String>::new(),
        "a SIGKILL, then a power cut"
    );
    for end in [End::Sigterm, End::StdinClosed] {
        assert_eq!(threads_after(end).len(), 1, "{end:?}, then a power cut");
    }
}
