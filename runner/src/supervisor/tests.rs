//! Tests of spawning, liveness and stopping, with real processes.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::killpg;
use nix::unistd::{Pid, getpgrp};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::liveness::{DeathMethod, Observation, observe};
use super::stop::{only_zombies_in_group, stop_with};
use super::wait::{PidfdUse, pidfd_exited, pidfd_open, register_pidfd};
use super::*;

const TERM_GRACE: Duration = Duration::from_millis(200);
const KILL_GRACE: Duration = Duration::from_secs(5);

fn sleep_cmd() -> Command {
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    cmd
}

/// Reads one line of the child's stdout; the child prints it only after
/// reaching the state the test needs.
async fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .expect("read the child's first line");
    line.trim().to_owned()
}

/// Waits, via a pidfd, until the process has exited but is not yet reaped.
async fn wait_until_zombie(pid: i32) {
    let fd = pidfd_open(pid)
        .expect("pidfd_open")
        .expect("kernel has pidfd_open");
    let fd = register_pidfd(fd).expect("register pidfd");
    loop {
        let mut guard = fd.readable().await.expect("pidfd readable");
        if pidfd_exited(&fd) {
            return;
        }
        guard.clear_ready();
    }
}

fn expect_stopped(outcome: StopOutcome) -> StopProof {
    match outcome {
        StopOutcome::Stopped(proof) => proof,
        other => panic!("expected Stopped, got {other:?}"),
    }
}

#[tokio::test]
async fn identity_of_self_is_stable() {
    let pid = i32::try_from(std::process::id()).unwrap();
    let first = identity_of(pid).unwrap();
    let second = identity_of(pid).unwrap();
    assert_eq!(first.pid, pid);
    assert_eq!(first.pgid, getpgrp().as_raw());
    assert!(first.start_time > 0);
    assert_eq!(first, second);
}

#[tokio::test]
async fn spawned_provider_leads_its_own_group() {
    let (mut child, identity) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    let pid = i32::try_from(child.id().unwrap()).unwrap();
    assert_eq!(identity.pid, pid);
    assert_eq!(identity.pgid, pid);
    assert!(identity.start_time > 0);
    assert_eq!(identity_of(pid).unwrap(), identity);
    assert!(is_alive(&identity));

    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.method, "exited");
}

#[tokio::test]
async fn identity_of_missing_pid_errors() {
    // Above the kernel's hard pid limit (4194304), so never a process.
    let error = identity_of(i32::MAX).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound);
    assert_eq!(
        identity_of(0).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        identity_of(-1).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
}

#[tokio::test]
async fn is_alive_rejects_a_different_start_time() {
    let (mut child, identity) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    assert!(is_alive(&identity));
    let impostor = ProcessIdentity {
        start_time: identity.start_time + 1,
        ..identity
    };
    assert!(!is_alive(&impostor));
    assert_eq!(
        observe(&impostor),
        Observation::Gone(DeathMethod::StartTimeChanged)
    );
    expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
}

#[tokio::test]
async fn is_alive_is_false_for_a_zombie_and_after_reaping() {
    let (mut child, identity) = spawn_provider(&mut Command::new("true"), None).unwrap();
    wait_until_zombie(identity.pid).await;
    assert_eq!(observe(&identity), Observation::Gone(DeathMethod::Zombie));
    assert!(!is_alive(&identity));

    assert!(child.wait().await.unwrap().success());
    assert!(!is_alive(&identity));
}

#[tokio::test]
async fn stop_of_a_zombie_child_reaps_it_without_signals() {
    let (mut child, identity) = spawn_provider(&mut Command::new("true"), None).unwrap();
    wait_until_zombie(identity.pid).await;
    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.method, "zombie");
    assert!(proof.signals.is_empty());
    assert!(proof.group_gone);
    // Reaped by stop: the status is already stored in the child.
    assert!(child.try_wait().unwrap().is_some());
    assert_eq!(observe(&identity), Observation::Gone(DeathMethod::Esrch));
}

#[tokio::test]
async fn stop_own_child_with_sigterm() {
    let (mut child, identity) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.identity, identity);
    assert_eq!(proof.method, "exited");
    assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
    assert!(proof.group_gone);
    assert!(!is_alive(&identity));
    assert!(
        child.try_wait().unwrap().is_some(),
        "stop reaps our own child"
    );
}

/// Spawns a provider that ignores SIGTERM and keeps a `sleep` in its group,
/// and returns once the trap is installed. Also returns the inner sleep's
/// pid as printed by the shell.
async fn spawn_term_ignoring_provider() -> (Child, ProcessIdentity) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"trap "" TERM; echo ready; while :; do sleep 1; done"#)
        .stdout(Stdio::piped());
    let (mut child, identity) = spawn_provider(&mut cmd, None).unwrap();
    assert_eq!(first_line(&mut child).await, "ready");
    (child, identity)
}

#[tokio::test]
async fn stop_escalates_to_sigkill_and_clears_the_group() {
    let (mut child, identity) = spawn_term_ignoring_provider().await;
    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.method, "exited");
    assert_eq!(
        proof.signals,
        vec!["SIGTERM".to_owned(), "SIGKILL".to_owned()]
    );
    assert!(proof.group_gone, "the inner sleep must be gone too");
    // Gone means no live member: orphaned members may stay zombies until
    // their new parent reaps them.
    assert!(
        killpg(Pid::from_raw(identity.pgid), None) == Err(Errno::ESRCH)
            || only_zombies_in_group(identity.pgid)
    );
}

#[tokio::test]
async fn stop_escalates_without_pidfd() {
    let (mut child, identity) = spawn_term_ignoring_provider().await;
    let proof = expect_stopped(
        stop_with(
            &identity,
            Some(&mut child),
            TERM_GRACE,
            KILL_GRACE,
            PidfdUse::Never,
        )
        .await,
    );
    assert_eq!(proof.method, "exited");
    assert_eq!(
        proof.signals,
        vec!["SIGTERM".to_owned(), "SIGKILL".to_owned()]
    );
    assert!(proof.group_gone);
}

/// Starts `sleep 30` as a grandchild: the shell in between exits, so the
/// sleep is reparented away from us exactly like a provider orphaned by a
/// runner crash. It stays in the shell's process group, which is not ours.
async fn spawn_orphan() -> ProcessIdentity {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("sleep 30 & echo $!")
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .process_group(0);
    let mut shell = cmd.spawn().unwrap();
    let pid: i32 = first_line(&mut shell).await.parse().unwrap();
    assert!(shell.wait().await.unwrap().success());
    let identity = identity_of(pid).unwrap();
    assert_ne!(identity.pgid, getpgrp().as_raw());
    identity
}

#[tokio::test]
async fn stop_orphan_via_pidfd() {
    let identity = spawn_orphan().await;
    assert!(is_alive(&identity));
    let proof = expect_stopped(stop(&identity, None, TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.method, "exited");
    assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
    assert!(!is_alive(&identity));
}

#[tokio::test]
async fn stop_orphan_by_polling() {
    let identity = spawn_orphan().await;
    let proof =
        expect_stopped(stop_with(&identity, None, TERM_GRACE, KILL_GRACE, PidfdUse::Never).await);
    // Polling sees the orphan as a zombie or, once init reaped it, as gone.
    assert!(
        ["zombie", "esrch"].contains(&proof.method.as_str()),
        "{proof:?}"
    );
    assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
    assert!(!is_alive(&identity));
}

#[tokio::test]
async fn stop_of_a_reaped_process_sends_nothing() {
    let (mut child, identity) = spawn_provider(&mut Command::new("true"), None).unwrap();
    assert!(child.wait().await.unwrap().success());
    let proof = expect_stopped(stop(&identity, None, TERM_GRACE, KILL_GRACE).await);
    assert!(
        ["esrch", "start_time_changed"].contains(&proof.method.as_str()),
        "{proof:?}"
    );
    assert!(proof.signals.is_empty());
    assert!(proof.group_gone);
}

#[tokio::test]
async fn stop_of_a_recycled_pid_signals_nobody() {
    // A live process under a different start time stands in for a
    // recycled pid: it must be reported gone and must not be touched.
    let (mut child, identity) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    let old = ProcessIdentity {
        start_time: identity.start_time - 1,
        ..identity
    };
    let proof = expect_stopped(stop(&old, None, TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.method, "start_time_changed");
    assert!(proof.signals.is_empty());
    assert!(proof.group_gone);
    assert!(is_alive(&identity), "the new owner of the pid survives");
    expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
}

#[tokio::test]
async fn stop_refuses_a_child_that_is_not_the_identified_process() {
    let (mut first, first_id) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    let (mut second, second_id) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    assert!(matches!(
        stop(&first_id, Some(&mut second), TERM_GRACE, KILL_GRACE).await,
        StopOutcome::Unprovable { .. }
    ));
    assert!(is_alive(&first_id) && is_alive(&second_id));
    expect_stopped(stop(&first_id, Some(&mut first), TERM_GRACE, KILL_GRACE).await);
    expect_stopped(stop(&second_id, Some(&mut second), TERM_GRACE, KILL_GRACE).await);
}

#[tokio::test]
async fn stop_refuses_identities_that_would_signal_broadly() {
    for (pid, pgid) in [(0, 0), (-1, -1), (5, 0)] {
        let identity = ProcessIdentity {
            pid,
            pgid,
            start_time: 1,
        };
        assert!(matches!(
            stop(&identity, None, TERM_GRACE, KILL_GRACE).await,
            StopOutcome::Unprovable { .. }
        ));
    }
    let me = identity_of(i32::try_from(std::process::id()).unwrap()).unwrap();
    assert!(matches!(
        stop(&me, None, TERM_GRACE, KILL_GRACE).await,
        StopOutcome::Unprovable { .. }
    ));
}

/// A provider that exits once its input closes is never signalled: the exit
/// grace sees it go (and leaves it our zombie, so the stop that follows
/// still sweeps its group); one that does not exit is signalled once the
/// grace has passed.
#[tokio::test]
async fn the_exit_grace_lets_a_provider_exit_on_its_own_and_bounds_one_that_does_not() {
    let mut cat = Command::new("cat");
    cat.stdin(Stdio::piped());
    let (mut child, identity) = spawn_provider(&mut cat, None).unwrap();
    drop(child.stdin.take());
    assert!(await_exit(&identity, Some(&mut child), KILL_GRACE).await);
    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert!(proof.signals.is_empty(), "{proof:?}");
    assert!(proof.group_gone);

    let (mut child, identity) = spawn_provider(&mut sleep_cmd(), None).unwrap();
    assert!(!await_exit(&identity, Some(&mut child), TERM_GRACE).await);
    assert!(is_alive(&identity), "the grace signals nothing");
    let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
}
