//! One runnerd per state directory (row 1), a relative `--state-dir`
//! (row 8) and runnerd's name with the credential in its environment (row 9).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::runner_client::{RunnerCommand, RunnerProcess};

use crate::{ACP, Rig, WAIT, exe, refused, scripted_provider, start_runnerd, state, wait_event};

/// A provider that stays alive without answering, the first time; every
/// later start (by the second runner) exits at once.
const FIRST_STAYS: &str = "[ -e first ] && exit 1; : > first; exec sleep 3600";

/// A second runnerd on a state directory another one holds exits 2 at once,
/// naming the holder's pid, and never opens the store (the owner epoch does
/// not move). The lock dies with its holder: SIGKILLed while its provider
/// lives on (an orphan that must not hold the lock), the holder is replaced
/// at once by a runner that stops that orphan first.
#[test]
fn a_second_runnerd_on_the_same_state_is_refused_at_once_naming_the_holder() {
    let mut rig = scripted_provider(ACP, "acp", FIRST_STAYS);
    rig.extra[3] = "20000".to_owned();
    let client = rig.start();
    let (status, body) = client
        .create_task("t1", "m1", "Go", ACP, &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let spawned = wait_event(&client, "t1", "provider.spawned");
    let provider = spawned["data"]["pid"].as_i64().expect("a pid") as u32;
    let epoch = client.get("/v1/health").unwrap().1["owner_epoch"].clone();

    let started = Instant::now();
    let second = start_runnerd(&rig.path("state"), &rig.extra);
    let took = started.elapsed();
    eprintln!("the second runnerd was refused in {} ms", took.as_millis());
    let holder = format!("in use by another runnerd (pid {})", rig.runner_pid());
    refused(second, &holder).unwrap();
    assert!(took < Duration::from_secs(5), "refused after {took:?}");
    let (status, health) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200, "{health}");
    assert_eq!(
        health["owner_epoch"], epoch,
        "the second runner opened the store"
    );

    // No child of runnerd holds the lock's file (O_CLOEXEC).
    let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{provider}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .collect();
    assert!(
        !held.iter().any(|p| p.ends_with("runnerd.lock")),
        "the provider holds the lock file: {held:?}"
    );
    rig.runner.take().expect("a runner").kill().unwrap();
    assert!(
        wire::procstat::live_start_time(provider).is_some(),
        "the first runner's provider lives on"
    );
    let client = rig.start();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert!(
        wire::procstat::live_start_time(provider).is_none(),
        "the old provider was not stopped"
    );
}

/// With a relative `--state-dir`, every provider still gets an absolute
/// `{provider_dir}`: the provider runs in the task's workspace, where a
/// relative one would put its state (threads, journal) beside the user's
/// files.
#[test]
fn a_relative_state_dir_keeps_provider_state_out_of_the_workspace() {
    let mut rig = Rig::new(ACP, "[[turn]]\nfinal = \"Ok.\"\n");
    let mut cmd = rig.command();
    // The same command line with `--state-dir state`, run from the rig.
    let args: Vec<_> = cmd
        .get_args()
        .map(|a| {
            if Path::new(a) == rig.path("state") {
                "state".into()
            } else {
                a.to_owned()
            }
        })
        .collect();
    let mut relative = std::process::Command::new(cmd.get_program());
    relative.args(args).current_dir(rig.dir.path());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => relative.env(k, v),
            None => relative.env_remove(k),
        };
    }
    cmd = relative;
    let runner = RunnerProcess::start(
        &mut cmd,
        &rig.path("state"),
        &rig.path("runnerd.stderr"),
        WAIT,
    )
    .unwrap();
    let client = runner.client();
    rig.runner = Some(runner);
    let task = rig.run_task(&client, "t1");
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let ws = rig.ws();
    let in_ws: Vec<PathBuf> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        in_ws.is_empty(),
        "provider state in the workspace: {in_ws:?}"
    );
    assert!(rig.path("state/providers/t1").is_dir());
}

/// runnerd started with the credential in its environment takes it out in
/// place (a re-execution through `/proc/self/exe` would have renamed it
/// `exe`) and keeps its name: `pgrep -x runnerd` finds a runnerd started as
/// `runnerd` (here a link of that name to the multi-call `turncut`),
/// through `/proc/PID/comm`.
#[test]
fn runnerd_keeps_its_name_with_the_credential_in_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("runnerd");
    std::os::unix::fs::symlink(exe(), &link).unwrap();
    let program = vec![link.display().to_string(), "runnerd".to_owned()];
    let state_dir = dir.path().join("state");
    let mut cmd = RunnerCommand { program }.command(&state_dir, &[]);
    cmd.env("TURNCUT_PROVIDER_API_KEY", "turncut-canary-name-9")
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_SOCKET);
    let runner =
        RunnerProcess::start(&mut cmd, &state_dir, &dir.path().join("stderr"), WAIT).unwrap();
    let pid = runner.pid();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "runnerd");
    let pgrep = std::process::Command::new("pgrep")
        .args(["-x", "runnerd"])
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&pgrep.stdout);
    assert!(
        found.lines().any(|l| l.trim() == pid.to_string()),
        "pgrep -x runnerd: {found:?}, runnerd is {pid}"
    );
    runner.kill().unwrap();
}
