//! Processes the harness starts, and the only place it sends them signals.
//!
//! Every child runs in its own process group, gets `PR_SET_PDEATHSIG(SIGKILL)`
//! so it dies with the harness even when the harness is SIGKILLed, and is
//! killed as a whole group when its [`GroupChild`] is dropped. Nothing here
//! knows which program a child runs.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A child process leading its own process group; the group is SIGKILLed on drop.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    reaped: bool,
}

impl GroupChild {
    /// Spawns `cmd` in a new process group that dies with this process.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<GroupChild> {
        cmd.process_group(0);
        // SAFETY: the closure runs in the forked child before exec and only
        // calls prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(GroupChild {
            child,
            reaped: false,
        })
    }

    /// The child's pid, which is also its process group id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The underlying child, for its pipes.
    pub fn inner(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Sends `signal` to the whole group. A group that is already gone is not
    /// an error.
    pub fn signal_group(&self, signal: Signal) -> std::io::Result<()> {
        match killpg(Pid::from_raw(self.child.id() as i32), signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// SIGKILLs the group and reaps the leader.
    pub fn kill(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.signal_group(Signal::SIGKILL)?;
        self.wait()
    }

    /// Waits for the leader to exit.
    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        let status = self.child.wait()?;
        self.reaped = true;
        Ok(status)
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        // Killing the group also takes any grandchildren (tool commands) that
        // stayed in it; a leader that already exited leaves nothing to signal.
        let _ = self.signal_group(Signal::SIGKILL);
        if !self.reaped {
            let _ = self.child.wait();
        }
    }
}
