//! One runnerd per state directory: an exclusive `flock(2)` on
//! `DIR/runnerd.lock`, taken before the store is opened and held for the life
//! of the process. Two runners on one state would both drive its tasks (each
//! with its own owner epoch) and interleave their run-log writes.
//!
//! The lock belongs to the open file description, which only runnerd holds:
//! the file is opened `O_CLOEXEC`, so no provider or tool inherits it, and
//! the kernel drops the lock when runnerd dies, SIGKILL included. A runnerd
//! restarted at once on the same state after a SIGKILL therefore never meets
//! a stale lock; the only wait is for a holder that is already dead but not
//! yet done exiting ([`DYING_HOLDER_WAIT_MS`]). The holder writes its pid
//! into the file so a refused runnerd can name it; the file's content is
//! only ever a hint, the lock is the truth.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "runnerd.lock";

/// How long a runnerd waits for a holder that is dead or dying (a zombie, or
/// a pid not yet written) to let go; a live holder is refused at once.
pub const DYING_HOLDER_WAIT_MS: u64 = 2_000;

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct StateLock {
    _lock: Flock<File>,
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live runnerd holds it.
    #[error(
        "the state directory {} is in use by another runnerd ({}); stop it first or pick another --state-dir",
        dir.display(),
        holder_text(*pid)
    )]
    Held { dir: PathBuf, pid: Option<u32> },
    /// The lock file could not be opened or locked.
    #[error("failed to lock {}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn holder_text(pid: Option<u32>) -> String {
    match pid {
        Some(pid) => format!("pid {pid}"),
        None => "its pid is not written yet".to_owned(),
    }
}

/// Takes the exclusive lock of the state directory `dir` (which exists).
pub fn acquire(dir: &Path) -> Result<StateLock, LockError> {
    let path = dir.join(LOCK_FILE);
    let io = |error: std::io::Error| LockError::Io {
        path: path.clone(),
        error,
    };
    let deadline = Instant::now() + Duration::from_millis(DYING_HOLDER_WAIT_MS);
    let mut delay = Duration::from_millis(1);
    loop {
        // std opens with O_CLOEXEC: no child of runnerd ever holds the lock.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                write_pid(&mut lock).map_err(io)?;
                return Ok(StateLock { _lock: lock });
            }
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let pid = read_pid(&mut file);
                // A live holder is refused at once; one that is gone or a
                // zombie still owns the lock only until its exit completes.
                let holder_alive =
                    pid.is_some_and(|p| wire::procstat::live_start_time(p).is_some());
                if holder_alive || Instant::now() >= deadline {
                    return Err(LockError::Held {
                        dir: dir.to_path_buf(),
                        pid,
                    });
                }
            }
            Err((_, errno)) => return Err(io(errno.into())),
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

fn write_pid(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    file.flush()
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second lock in this process is refused naming this pid (flock locks
    /// belong to the open file description, so a second open conflicts even
    /// within one process); once the first is dropped the lock is free.
    #[test]
    fn a_held_lock_is_refused_naming_its_holder_and_freed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path()).unwrap();
        let started = Instant::now();
        let err = acquire(dir.path()).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(DYING_HOLDER_WAIT_MS),
            "a live holder is refused at once"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        acquire(dir.path()).unwrap();
    }
}
