//! Spawning a provider in a process group of its own (and in its
//! container, `containment`), with its identity read from `/proc` right
//! after the spawn.

use std::io;
use std::os::fd::OwnedFd;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::{ProcessIdentity, identity_of};

/// Spawns `cmd` in its own process group, with `kill_on_drop(false)` and the
/// caller's stdio untouched, and returns the child together with its identity
/// read from `/proc` right after the spawn. With `group`, the `cgroup.procs`
/// of its control group, the child joins that group before it executes, so
/// nothing it ever starts is outside it.
///
/// No death signal is requested for the child: see the module documentation.
/// If the identity cannot be read, the child's group is killed and the error
/// returned, because a provider the runner cannot identify after a crash must
/// not be left running.
pub fn spawn_provider(
    cmd: &mut Command,
    group: Option<&OwnedFd>,
) -> io::Result<(Child, ProcessIdentity)> {
    cmd.process_group(0).kill_on_drop(false);
    if let Some(procs) = group {
        let procs = procs.try_clone()?;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls write(2) on a descriptor opened before the fork.
        unsafe {
            cmd.pre_exec(move || super::cgroup::join(&procs));
        }
    }
    let mut child = super::containment::spawn_own(|| cmd.spawn(), Child::id)?;

    let pid = match child.id().map(i32::try_from) {
        Some(Ok(pid)) if pid > 0 => pid,
        // A freshly spawned child has not been polled, so it cannot have been
        // reaped yet; this only happens if tokio misbehaves. There is no pid
        // to kill, so the child is left to tokio's own cleanup.
        other => {
            return Err(io::Error::other(format!(
                "spawned provider has no usable pid ({other:?})"
            )));
        }
    };

    let identity = identity_of(pid).and_then(|identity| {
        if identity.pgid == pid {
            Ok(identity)
        } else {
            Err(io::Error::other(format!(
                "provider {pid} is in process group {} instead of its own",
                identity.pgid
            )))
        }
    });
    match identity {
        Ok(identity) => Ok((child, identity)),
        Err(error) => {
            // The group was created by process_group(0), so its id is the
            // child's pid; the unreaped child keeps that id from being reused.
            // The leader is signalled directly too in case setpgid failed.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            let _ = child.start_kill();
            // Reap it if it is already dead; otherwise tokio reaps it after
            // the drop, since it is no longer running anything of ours.
            let _ = child.try_wait();
            Err(error)
        }
    }
}
