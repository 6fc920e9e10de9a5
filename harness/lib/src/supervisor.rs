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

/// Programs besides this binary that call [`cutpoint::die_with_parent`]
/// first thing (the seeded `runnerd` of `turncut mutants`).
static DIE_WITH_PARENT: std::sync::Mutex<Vec<std::path::PathBuf>> =
    std::sync::Mutex::new(Vec::new());

/// Says that `program` sets its own death signal ([`cutpoint::die_with_parent`]):
/// [`GroupChild::spawn`] then spawns it without forking this process.
pub fn dies_with_parent(program: &std::path::Path) {
    DIE_WITH_PARENT
        .lock()
        .expect("programs")
        .push(program.to_owned());
}

/// The device and inode of a file, to tell two paths to one binary apart
/// from two binaries.
fn file_id(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Whether `program` sets its own death signal: this very binary, or one
/// named by [`dies_with_parent`].
fn sets_own_death_signal(program: &std::ffi::OsStr) -> bool {
    let Some(it) = file_id(std::path::Path::new(program)) else {
        return false;
    };
    let known = DIE_WITH_PARENT.lock().expect("programs").clone();
    std::iter::once(std::path::PathBuf::from("/proc/self/exe"))
        .chain(known)
        .any(|p| file_id(&p) == Some(it))
}

/// A child process leading its own process group; the group is SIGKILLed on drop.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    reaped: bool,
}

impl GroupChild {
    /// Spawns `cmd` in a new process group that dies with this process.
    ///
    /// A child that runs this very binary (runnerd, a stress worker) or
    /// another that links `cutpoint` ([`dies_with_parent`]) sets its own
    /// death signal as the first thing it does
    /// ([`cutpoint::die_with_parent`], told the parent's pid by
    /// [`cutpoint::DIE_WITH_ENV`]); with no `pre_exec` hook,
    /// the standard library spawns it with `posix_spawn` (a vfork), which
    /// copies none of this process's page tables. A wave process holds
    /// hundreds of megabytes and many threads; forking it at every runner
    /// start, with the copy-on-write faults on both sides until the exec,
    /// took about two fifths of a default wave's CPU (897 CPU-s with the
    /// fork, 523 without, 2026-12-04). Any other program gets the signal
    /// set between fork and exec.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<GroupChild> {
        cmd.process_group(0);
        if sets_own_death_signal(cmd.get_program()) {
            cmd.env(cutpoint::DIE_WITH_ENV, std::process::id().to_string());
        } else {
            cmd.env_remove(cutpoint::DIE_WITH_ENV);
            // SAFETY: the closure runs in the forked child before exec and
            // only calls prctl(2), which is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                    Ok(())
                });
            }
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
