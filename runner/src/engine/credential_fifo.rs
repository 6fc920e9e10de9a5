//! A FIFO that hands the credential to a provider that reads it from a file
//! (a profile with `credential_fifo = true`, e.g. the real `opencode serve`
//! and `opencode acp`, whose configuration reads their key with
//! `{file:{env:VAR}}`). The profile's `credential_env` then names the
//! FIFO's path instead of holding the key: the key is neither in the
//! provider's environment, which its tool shells inherit whole, nor on any
//! disk (a FIFO's data lives in the kernel).
//!
//! The FIFO is served `credential_reads` times (the profile's count: `opencode
//! serve` reads its key once, `opencode acp` twice, at start and at
//! `session/new`), each time only to the provider's own process: when a
//! reader opens it, every process that holds it open (but the runner) must
//! be the provider, else nothing is written, the FIFO is removed and no one
//! reads it again. A tool shell inherits the FIFO's path but is another
//! process, so it gets nothing. Then the FIFO is removed.
//!
//! A provider that dies before its reads leaves the serving thread blocked
//! until [`Served`] is dropped with the provider's handle: the drop opens
//! the FIFO itself to wake the thread, which then writes nothing.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use super::Secret;

/// How long a reader may wait for the runner to learn the provider's pid
/// (it sets it right after the spawn returns).
const PID_WAIT: Duration = Duration::from_secs(10);

/// A FIFO being served to one provider process.
pub struct Served {
    /// The FIFO's path (the value of the profile's `credential_env`).
    pub path: PathBuf,
    pid: Arc<AtomicI32>,
    pid_set: mpsc::SyncSender<()>,
    closed: Arc<AtomicBool>,
}

impl Served {
    /// The provider's pid, once spawned: only that process is served.
    pub fn provider(&self, pid: i32) {
        self.pid.store(pid, Ordering::SeqCst);
        let _ = self.pid_set.try_send(());
    }
}

impl Drop for Served {
    /// Stops serving: a thread still waiting for a reader is woken by a
    /// reader of our own, to whom it writes nothing.
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.pid_set.try_send(());
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&self.path);
    }
}

/// Creates a private directory under the system's temporary directory
/// holding a FIFO, and serves `secret` through it `reads` times on a thread
/// of its own.
pub fn serve(secret: &Secret, marker: &str, reads: u32) -> std::io::Result<Served> {
    let dir = std::env::temp_dir().join(format!("runnerd-{marker}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let path = dir.join("credential");
    nix::unistd::mkfifo(
        &path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)?;
    let key = secret.0.clone();
    let pid = Arc::new(AtomicI32::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let (pid_set, pid_known) = mpsc::sync_channel(1);
    let (fifo, served, p, c) = (path.clone(), dir, pid.clone(), closed.clone());
    std::thread::Builder::new()
        .name("credential-fifo".to_owned())
        .spawn(move || {
            serve_reads(&fifo, key.as_bytes(), reads, &p, &pid_known, &c);
            remove(&fifo, &served);
        })?;
    Ok(Served {
        path,
        pid,
        pid_set,
        closed,
    })
}

/// Serves `key` through `fifo` up to `reads` times, each to the provider's
/// own process only.
fn serve_reads(
    fifo: &Path,
    key: &[u8],
    reads: u32,
    pid: &AtomicI32,
    pid_known: &mpsc::Receiver<()>,
    closed: &AtomicBool,
) {
    for _ in 0..reads {
        // Blocks until a reader opens the FIFO.
        let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(fifo) else {
            return;
        };
        if pid.load(Ordering::SeqCst) == 0 {
            let _ = pid_known.recv_timeout(PID_WAIT);
        }
        let provider = pid.load(Ordering::SeqCst);
        if closed.load(Ordering::SeqCst) || provider == 0 {
            return;
        }
        let holders = holders_of(fifo);
        if holders.iter().any(|h| *h != provider) {
            tracing::warn!(
                "the credential FIFO was opened by a process other than the provider \
                 (pid {provider}): {holders:?}; nothing written, no further reads"
            );
            return;
        }
        let _ = w.write_all(key);
    }
}

/// Every process but this one that holds `fifo` open.
fn holders_of(fifo: &Path) -> Vec<i32> {
    let Ok(meta) = std::fs::metadata(fifo) else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pid in procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
        });
        if holds {
            out.push(pid);
        }
    }
    out
}

fn remove(fifo: &Path, dir: &Path) {
    let _ = std::fs::remove_file(fifo);
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits, with a deadline, until the FIFO's directory is gone.
    fn wait_removed(path: &Path) {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while path.parent().unwrap().exists() {
            assert!(std::time::Instant::now() < until, "the FIFO stayed");
            std::thread::yield_now();
        }
    }

    /// A shell that reads the FIFO `times` times itself (`read` is a
    /// builtin: the shell is the reader) and prints what it read.
    fn reader(path: &Path, times: usize) -> std::process::Child {
        let line = "IFS= read -r k < \"$0\"; printf '%s|' \"$k\"; ".repeat(times);
        std::process::Command::new("sh")
            .args(["-c", &line])
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    #[test]
    fn the_fifo_gives_the_key_to_its_provider_as_often_as_asked_then_is_gone() {
        let served = serve(&Secret::new("k-123".to_owned()), "spawn-test-fifo", 2).unwrap();
        use std::os::unix::fs::FileTypeExt as _;
        assert!(
            std::fs::metadata(&served.path)
                .unwrap()
                .file_type()
                .is_fifo()
        );
        let provider = reader(&served.path, 2);
        served.provider(provider.id() as i32);
        let out = provider.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "k-123|k-123|");
        wait_removed(&served.path);
    }

    #[test]
    fn a_reader_other_than_the_provider_gets_nothing_and_ends_the_serving() {
        let served = serve(&Secret::new("k-456".to_owned()), "spawn-test-fifo2", 2).unwrap();
        // Another process reads (a tool shell of the provider, say).
        let stranger = reader(&served.path, 1);
        served.provider(stranger.id() as i32 + 1_000_000);
        let out = stranger.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "|");
        wait_removed(&served.path);
    }

    #[test]
    fn dropping_the_handle_ends_a_wait_for_a_reader() {
        let served = serve(&Secret::new("k-789".to_owned()), "spawn-test-fifo3", 1).unwrap();
        let path = served.path.clone();
        drop(served);
        wait_removed(&path);
    }
}
