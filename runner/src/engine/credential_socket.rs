//! A Unix socket that hands the credential to a provider that connects to
//! it (a profile with `credential_socket = true`: the built-in fakes, whose
//! `wire::secret::receive_credential` connects to the path its credential
//! variable names). Like the FIFO ([`super::credential_fifo`]) the key is in
//! no environment and on no disk, in a 0700 directory of its own under the
//! state directory (`credentials/<marker>`), removed once served, and what a
//! killed runner left there is removed by the next one.
//!
//! Each connection is a channel of its own, and the kernel names the process
//! that connected (`SO_PEERCRED`): the key is written only to a connection
//! whose peer is the provider or a process it started in its own session
//! (`credential_fifo::is_provider`). A FIFO cannot say who opened it, so
//! its serving scans every process's descriptors at each read, and a
//! stranger that opens it after the scan shares the pipe; a stranger that
//! connects here gets a connection of its own, with nothing in it, and the
//! provider's is never shared. So no scan of `/proc` is needed (the FIFO's
//! scan was a tenth of a wave's CPU), and a stranger is refused, logged and
//! leaves the serving going. A provider that reads its key from a file (the
//! real `opencode`) cannot connect to a socket: its profile keeps the FIFO.
//!
//! The socket is served `credential_reads` times; it waits for each
//! connection at most [`super::credential_fifo::READER_WAIT_MS`], and stops
//! as soon as [`Served`] is dropped with the provider's handle.

use std::io::Write as _;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::Secret;
use super::credential_fifo::{PID_WAIT_MS, READER_WAIT_MS, is_provider, private_path, remove};

/// A socket being served to one provider process.
pub struct Served {
    /// The socket's path (the value of the profile's `credential_env`).
    pub path: PathBuf,
    pid: Arc<AtomicI32>,
    pid_set: mpsc::SyncSender<()>,
    /// The write end of a pipe the serving thread polls beside the socket:
    /// closed with this handle, it wakes the thread at once.
    _stop: OwnedFd,
}

impl Served {
    /// The provider's pid, once spawned: only that process is served.
    pub fn provider(&self, pid: i32) {
        self.pid.store(pid, Ordering::SeqCst);
        let _ = self.pid_set.try_send(());
    }
}

/// Creates a private directory under the state directory `state` holding a
/// listening socket, and serves `secret` through it `reads` times on a
/// thread of its own.
pub fn serve(state: &Path, secret: &Secret, marker: &str, reads: u32) -> std::io::Result<Served> {
    let (dir, path) = private_path(state, marker)?;
    let listener = UnixListener::bind(&path)?;
    listener.set_nonblocking(true)?;
    // Close-on-exec: a provider started meanwhile must not hold it open.
    let (stopped, stop) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let key = secret.0.clone();
    let pid = Arc::new(AtomicI32::new(0));
    let (pid_set, pid_known) = mpsc::sync_channel(1);
    let wait = Waits {
        pid: pid.clone(),
        pid_known,
        stopped,
    };
    let served = (path.clone(), dir);
    std::thread::Builder::new()
        .name("credential-socket".to_owned())
        .spawn(move || {
            serve_reads(&listener, key.as_bytes(), reads, &wait);
            drop(listener);
            remove(&served.0, &served.1);
        })?;
    Ok(Served {
        path,
        pid,
        pid_set,
        _stop: stop,
    })
}

/// What the serving thread waits on.
struct Waits {
    pid: Arc<AtomicI32>,
    pid_known: mpsc::Receiver<()>,
    /// The read end of [`Served`]'s stop pipe: readable (hung up) once the
    /// handle is dropped.
    stopped: OwnedFd,
}

/// Serves `key` through `listener` up to `reads` times, each to a
/// connection from the provider's own process only.
fn serve_reads(listener: &UnixListener, key: &[u8], reads: u32, wait: &Waits) {
    let mut served = 0;
    while served < reads {
        let Some(mut conn) = accept(listener, &wait.stopped) else {
            return;
        };
        let Some(provider) = provider_pid(wait) else {
            return;
        };
        match peer_pid(&conn) {
            Some(peer) if is_provider(peer, provider) => {
                // A key is far below a socket's buffer: the write does not wait.
                let _ = conn.write_all(key);
                served += 1;
            }
            peer => tracing::warn!(
                "the credential socket was connected to by a process other than the \
                 provider (pid {provider}): {peer:?}; nothing written"
            ),
        }
    }
}

/// The next connection, within [`READER_WAIT_MS`]; `None` once the handle
/// is dropped or the wait is over.
fn accept(listener: &UnixListener, stopped: &OwnedFd) -> Option<UnixStream> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = Instant::now() + Duration::from_millis(READER_WAIT_MS);
    loop {
        match listener.accept() {
            // An accepted socket blocks: it takes no flag from the listener.
            Ok((conn, _)) => return Some(conn),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let ms = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stopped.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, ms) {
            Ok(_) if fds[1].any().unwrap_or(true) => return None,
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
}

/// The provider's pid, waiting for the runner to learn it (it sets it right
/// after the spawn returns); `None` if the handle is dropped first.
fn provider_pid(wait: &Waits) -> Option<i32> {
    if wait.pid.load(Ordering::SeqCst) == 0 {
        let _ = wait
            .pid_known
            .recv_timeout(Duration::from_millis(PID_WAIT_MS));
    }
    Some(wait.pid.load(Ordering::SeqCst)).filter(|p| *p != 0)
}

/// The pid of the process that connected `conn`, as the kernel recorded it.
fn peer_pid(conn: &UnixStream) -> Option<i32> {
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    fn served(dir: &Path, reads: u32) -> Served {
        serve(dir, &Secret("sk-canary-key".into()), "m1", reads).unwrap()
    }

    /// Waits, with a deadline, until the socket's directory is gone.
    fn wait_removed(path: &Path) {
        let until = Instant::now() + Duration::from_secs(10);
        while path.parent().unwrap().exists() {
            assert!(Instant::now() < until, "the socket stayed");
            std::thread::yield_now();
        }
    }

    fn read_key(path: &Path) -> String {
        let mut conn = UnixStream::connect(path).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut key = String::new();
        conn.read_to_string(&mut key).unwrap();
        key
    }

    #[test]
    fn the_socket_gives_the_key_to_its_provider_as_often_as_asked_then_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), 2);
        // This test's process is the provider.
        s.provider(std::process::id() as i32);
        assert_eq!(read_key(&s.path), "sk-canary-key");
        assert_eq!(read_key(&s.path), "sk-canary-key");
        wait_removed(&s.path);
    }

    /// A process outside the provider's tree connects first: it gets an
    /// empty connection, and the provider is still served after it.
    #[test]
    fn a_stranger_gets_nothing_and_the_provider_is_served_after_it() {
        use std::os::unix::process::CommandExt as _;
        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), 1);
        s.provider(std::process::id() as i32);
        // The stranger: this test binary again, in a session of its own (so
        // not the provider's, though it is its child).
        let mut stranger = std::process::Command::new(std::env::current_exe().unwrap());
        stranger
            .args([
                "--exact",
                "engine::credential_socket::tests::stranger_connects",
            ])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(STRANGER_ENV, &s.path);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            stranger.pre_exec(|| nix::unistd::setsid().map(drop).map_err(Into::into));
        }
        let out = stranger.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("stranger read []"), "{said}");
        assert_eq!(read_key(&s.path), "sk-canary-key");
        wait_removed(&s.path);
    }

    const STRANGER_ENV: &str = "TURNCUT_TEST_CREDENTIAL_STRANGER";

    /// The stranger of the test above; without its variable, nothing.
    #[test]
    #[ignore = "run by a_stranger_gets_nothing_and_the_provider_is_served_after_it"]
    fn stranger_connects() {
        if let Some(path) = std::env::var_os(STRANGER_ENV) {
            println!("stranger read [{}]", read_key(Path::new(&path)));
        }
    }

    /// Dropping the handle ends the wait at once, though a process started
    /// meanwhile (a provider) lives on: it holds none of the serving's
    /// descriptors (a stop pipe it inherited would keep the wait going).
    #[test]
    fn dropping_the_handle_ends_a_wait_for_a_connection() {
        let dir = tempfile::tempdir().unwrap();
        let s = served(dir.path(), 1);
        let path = s.path.clone();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        drop(s);
        wait_removed(&path);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
