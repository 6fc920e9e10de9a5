//! The harness side: accept held hits on a unix socket and read trace files.
//!
//! It is synchronous and uses only std plus `poll(2)`, so the harness and the
//! tests can share it without pulling in an async runtime. Every wait is
//! bounded by a caller-supplied deadline and is driven by events (`poll`,
//! socket read timeouts), never by sleeping. It deliberately does not decide
//! what to do with a held process: the caller resumes it, keeps it held, or
//! kills it by pid.

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::{Error, Hit, IoFault};

/// A message longer than this is not a hit line, and reading on would let a
/// confused peer grow the buffer without bound.
const MAX_MESSAGE: usize = 64 * 1024;

/// How long the message of an accepted connection is awaited, whatever is
/// left of the wait for the connection: a process writes its line right
/// after connecting, but a loaded machine (or an event loop, as in the Node
/// client) can put a moment between the two, and a connection dropped unread
/// is a cut missed for good: the process logs it and goes on.
pub const MESSAGE_WAIT_MS: u64 = 2_000;

/// A unix stream socket on which armed processes report their hits.
///
/// The socket file is removed when the listener is dropped, unless something
/// else has been bound at the same path in the meantime.
#[derive(Debug)]
pub struct Listener {
    inner: UnixListener,
    path: PathBuf,
    identity: (u64, u64),
    /// Read end of the wake-up pair: readable once any [`Waker`] has woken.
    woken: UnixStream,
    /// Write end, cloned into each [`Waker`].
    wake: UnixStream,
}

/// Ends a [`Listener`]'s waits from another thread: after [`Waker::wake`],
/// every `accept_hit` returns [`Error::Woken`] at once (a connection already
/// queued is still returned first). Waking is permanent.
#[derive(Debug)]
pub struct Waker {
    wake: UnixStream,
}

impl Waker {
    /// Wakes the listener's current and future waits.
    pub fn wake(&self) {
        // One byte is enough and is never drained; a full buffer (it cannot
        // fill, but) or a closed listener both leave it woken or moot.
        let _ = (&self.wake).write(&[1]);
    }
}

impl Listener {
    /// Binds `path`, first removing a stale socket left there by a previous
    /// run. Anything at `path` that is not a socket is left alone and makes
    /// the bind fail.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Listener> {
        let path = path.as_ref();
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
            _ => {}
        }
        let inner = UnixListener::bind(path)?;
        // Non-blocking so that `accept_hit` can bound its wait with poll(2)
        // and never get stuck in accept(2) after a spurious wake-up.
        inner.set_nonblocking(true)?;
        let meta = fs::symlink_metadata(path)?;
        let (woken, wake) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        Ok(Listener {
            inner,
            path: path.to_owned(),
            identity: (meta.dev(), meta.ino()),
            woken,
            wake,
        })
    }

    /// A handle that ends this listener's waits (see [`Waker`]).
    pub fn waker(&self) -> io::Result<Waker> {
        Ok(Waker {
            wake: self.wake.try_clone()?,
        })
    }

    /// The path the listener is bound to, for `TURNCUT_CUT_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `deadline` for one armed process to connect and send its
    /// hit, and returns it held: the process stays blocked until the
    /// [`HeldHit`] is resumed or dropped.
    ///
    /// The deadline bounds the wait for a connection; the message of an
    /// accepted connection is awaited for what is left of it, and at least
    /// [`MESSAGE_WAIT_MS`]. A connection already queued is returned even with
    /// a zero deadline. Once a [`Waker`] has woken, it returns
    /// [`Error::Woken`] instead of waiting.
    pub fn accept_hit(&self, deadline: Duration) -> Result<HeldHit, Error> {
        let start = Instant::now();
        let left = || Left {
            left: deadline.saturating_sub(start.elapsed()),
            deadline,
        };
        let stream = self.accept_within(&left)?;
        let accepted = Instant::now();
        let message = Duration::from_millis(MESSAGE_WAIT_MS).max(left().left);
        let left_for_message = || Left {
            left: message.saturating_sub(accepted.elapsed()),
            deadline: message,
        };
        let line = read_line_within(&stream, &left_for_message)?;
        let hit = serde_json::from_slice(&line).map_err(|e| Error::BadMessage {
            line: String::from_utf8_lossy(&line).into_owned(),
            reason: e.to_string(),
        })?;
        Ok(HeldHit { hit, stream })
    }

    /// The next connection, waiting while time is `left` or until woken.
    fn accept_within(&self, left: &dyn Fn() -> Left) -> Result<UnixStream, Error> {
        loop {
            match self.inner.accept() {
                Ok((stream, _)) => return Ok(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("cannot accept a cut-point connection", e)),
            }
            let now = left();
            if now.left.is_zero() {
                return Err(now.timeout("a cut-point connection"));
            }
            let mut fds = [
                PollFd::new(self.inner.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.woken.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, poll_timeout(now.left)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(Error::io("cannot poll the cut-point socket", e.into())),
            }
            let woken = fds[1]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP));
            if woken
                && !fds[0]
                    .revents()
                    .is_some_and(|r| r.contains(PollFlags::POLLIN))
            {
                return Err(Error::Woken);
            }
        }
    }
}

/// The time left of an [`Listener::accept_hit`] deadline.
struct Left {
    left: Duration,
    deadline: Duration,
}

impl Left {
    fn timeout(&self, what: &'static str) -> Error {
        Error::Timeout {
            what,
            ms: u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// One message line from `stream` (without its newline), read while time is
/// `left`.
fn read_line_within(stream: &UnixStream, left: &dyn Fn() -> Left) -> Result<Vec<u8>, Error> {
    let context = "cannot read a cut-point message";
    // Accepted sockets do not inherit O_NONBLOCK on Linux, but say so
    // explicitly because the read below relies on blocking with a timeout.
    stream
        .set_nonblocking(false)
        .map_err(|e| Error::io(context, e))?;
    let mut line = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let now = left();
        if now.left.is_zero() {
            return Err(now.timeout("a cut-point message"));
        }
        stream
            .set_read_timeout(Some(now.left))
            .map_err(|e| Error::io(context, e))?;
        match (&*stream).read(&mut chunk) {
            Ok(0) => {
                return Err(Error::BadMessage {
                    line: String::from_utf8_lossy(&line).into_owned(),
                    reason: "connection closed before the end of the line".into(),
                });
            }
            Ok(read) => {
                line.extend_from_slice(&chunk[..read]);
                if let Some(end) = line.iter().position(|&b| b == b'\n') {
                    line.truncate(end);
                    break;
                }
                if line.len() > MAX_MESSAGE {
                    return Err(Error::BadMessage {
                        line: String::from_utf8_lossy(&line[..80]).into_owned(),
                        reason: format!("no newline within {MAX_MESSAGE} bytes"),
                    });
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(Error::io(context, e)),
        }
    }
    stream
        .set_read_timeout(None)
        .map_err(|e| Error::io(context, e))?;
    Ok(line)
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Only remove the file if it is still our socket: a newer listener
        // may have replaced it, and its clients must keep finding it.
        if let Ok(meta) = fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Rounds up so that a sub-millisecond remainder still waits instead of
/// spinning through zero-timeout polls until the deadline.
fn poll_timeout(left: Duration) -> PollTimeout {
    let ms = left.as_micros().div_ceil(1000);
    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
}

/// A process blocked at an armed cut point, waiting for the harness.
///
/// Dropping it closes the connection, which the process logs and then
/// continues past, exactly as if [`HeldHit::resume`] had been called (apart
/// from the log line). To keep the process blocked while doing other work,
/// e.g. until it is killed, use [`HeldHit::hold_forever`].
#[derive(Debug)]
pub struct HeldHit {
    pub hit: Hit,
    stream: UnixStream,
}

impl HeldHit {
    /// Lets the process continue past the cut point.
    pub fn resume(self) -> io::Result<()> {
        let mut stream = &self.stream;
        stream.write_all(b"continue\n")?;
        stream.flush()
    }

    /// Makes the operation at the cut point fail with `fault` (reply
    /// `fail EIO` / `fail ENOSPC` / `corrupt`): a point passed with
    /// `cutpoint::hit_io` returns it as an error, one passed with
    /// `cutpoint::hit` logs it and continues.
    pub fn fail(self, fault: IoFault) -> io::Result<()> {
        let mut stream = &self.stream;
        stream.write_all(format!("{}\n", fault.reply()).as_bytes())?;
        stream.flush()
    }

    /// Makes the process answer the request it just received with the error
    /// `name` stands for (reply `answer NAME`): a point passed with
    /// `cutpoint::hit_answer` returns `name`, any other logs it and
    /// continues. `name` is lowercase letters, digits and dashes.
    pub fn answer(self, name: &str) -> io::Result<()> {
        assert!(
            crate::answer_of_reply(&format!("answer {name}")) == Some(name),
            "answer name {name:?} must be lowercase letters, digits and dashes"
        );
        let mut stream = &self.stream;
        stream.write_all(format!("answer {name}\n").as_bytes())?;
        stream.flush()
    }

    /// Keeps the process blocked for as long as the returned guard lives.
    ///
    /// The process is never told to continue: it stays blocked until it is
    /// killed, or until the guard is dropped, at which point it sees the
    /// connection close, logs a line and continues. To hold it for the rest
    /// of the harness's own life, `std::mem::forget` the guard.
    pub fn hold_forever(self) -> Holding {
        Holding {
            hit: self.hit,
            _stream: self.stream,
        }
    }
}

/// Keeps a held process blocked until dropped; see [`HeldHit::hold_forever`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the held process at once"]
pub struct Holding {
    hit: Hit,
    _stream: UnixStream,
}

impl Holding {
    /// The hit being held.
    pub fn hit(&self) -> &Hit {
        &self.hit
    }
}

/// Parses a `TURNCUT_CUT_TRACE` file into its hits, in file order.
///
/// Blank lines are skipped; any other line that is not a [`Hit`] is an error
/// naming its 1-based line number, since lines are written whole and a bad
/// one means the file is not a trace.
pub fn trace_read(path: impl AsRef<Path>) -> Result<Vec<Hit>, Error> {
    let path = path.as_ref();
    let text = fs::read_to_string(path)
        .map_err(|e| Error::io(format!("cannot read trace {}", path.display()), e))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            serde_json::from_str(line).map_err(|e| Error::BadTrace {
                path: path.to_owned(),
                line_no: index + 1,
                reason: e.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_times_out_naming_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let err = listener
            .accept_hit(Duration::from_millis(20))
            .err()
            .unwrap();
        assert!(matches!(err, Error::Timeout { ms: 20, .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "timed out after 20 ms waiting for a cut-point connection"
        );
    }

    #[test]
    fn a_waker_ends_a_wait_at_once_and_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let waker = listener.waker().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                // Would wait a minute; the waker must end it.
                let r = listener.accept_hit(Duration::from_secs(60));
                tx.send(r.err()).unwrap();
            });
            waker.wake();
            let err = rx.recv_timeout(Duration::from_secs(10)).expect("woken");
            assert!(matches!(err, Some(Error::Woken)), "{err:?}");
        });
        // Waking is permanent ...
        let err = listener.accept_hit(Duration::from_secs(60)).err().unwrap();
        assert!(matches!(err, Error::Woken), "{err:?}");
        // ... but a hit already queued is still delivered first.
        let mut client = UnixStream::connect(listener.path()).unwrap();
        client
            .write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"a.b.c\",\"n\":1}\n")
            .unwrap();
        let held = listener.accept_hit(Duration::from_secs(10)).unwrap();
        assert_eq!(held.hit.point, "a.b.c");
    }

    /// A process that connects near the end of a short wait and writes its
    /// line a little later is still held, not dropped (which lost its hit).
    #[test]
    fn a_late_line_of_an_accepted_connection_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let mut client = UnixStream::connect(listener.path()).unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                client
                    .write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"a.b.c\",\"n\":1}\n")
                    .unwrap();
                let mut reply = String::new();
                client.read_to_string(&mut reply).unwrap();
                assert_eq!(reply, "continue\n");
            });
            let held = listener.accept_hit(Duration::from_millis(50)).unwrap();
            assert_eq!(held.hit.point, "a.b.c");
            held.resume().unwrap();
        });
    }

    #[test]
    fn bind_replaces_a_stale_socket_and_drop_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.sock");
        // A listener that is forgotten leaves its file behind, as a crashed
        // harness would.
        std::mem::forget(UnixListener::bind(&path).unwrap());
        let listener = Listener::bind(&path).unwrap();
        assert_eq!(listener.path(), path);
        drop(listener);
        assert!(!path.exists());
    }

    #[test]
    fn bind_refuses_to_remove_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-socket");
        fs::write(&path, "keep me").unwrap();
        assert!(Listener::bind(&path).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "keep me");
    }

    #[test]
    fn in_process_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let mut client = UnixStream::connect(listener.path()).unwrap();
        client
            .write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"a.b.c\",\"n\":2}\n")
            .unwrap();
        let held = listener.accept_hit(Duration::from_secs(10)).unwrap();
        assert_eq!(
            held.hit,
            Hit {
                role: "r".into(),
                pid: 7,
                point: "a.b.c".into(),
                n: 2
            }
        );
        held.resume().unwrap();
        let mut reply = String::new();
        client.read_to_string(&mut reply).unwrap();
        assert_eq!(reply, "continue\n");
    }

    #[test]
    fn fail_replies_with_the_errno_name_or_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        for (fault, wire) in [
            (IoFault::Eio, "fail EIO\n"),
            (IoFault::Enospc, "fail ENOSPC\n"),
            (IoFault::Corrupt, "corrupt\n"),
        ] {
            let mut client = UnixStream::connect(listener.path()).unwrap();
            client
                .write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"a.b.c\",\"n\":1}\n")
                .unwrap();
            let held = listener.accept_hit(Duration::from_secs(10)).unwrap();
            held.fail(fault).unwrap();
            let mut reply = String::new();
            client.read_to_string(&mut reply).unwrap();
            assert_eq!(reply, wire);
        }
    }

    #[test]
    fn garbage_message_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let mut client = UnixStream::connect(listener.path()).unwrap();
        client.write_all(b"hello\n").unwrap();
        let err = listener.accept_hit(Duration::from_secs(10)).err().unwrap();
        assert!(matches!(err, Error::BadMessage { ref line, .. } if line == "hello"));
    }

    /// A connection that never sends its line times out after the message
    /// floor, however short the wait for a connection was.
    #[test]
    fn silent_peer_times_out_on_the_message() {
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let _client = UnixStream::connect(listener.path()).unwrap();
        let err = listener
            .accept_hit(Duration::from_millis(50))
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            format!("timed out after {MESSAGE_WAIT_MS} ms waiting for a cut-point message")
        );
    }

    #[test]
    fn a_connection_whose_line_comes_after_the_accept_deadline_is_still_read() {
        // A zero deadline leaves nothing for the message: before the message
        // got its own wait, this queued hit was dropped unread (the client
        // saw EPIPE and went on past its cut).
        let dir = tempfile::tempdir().unwrap();
        let listener = Listener::bind(dir.path().join("cut.sock")).unwrap();
        let mut client = UnixStream::connect(listener.path()).unwrap();
        client
            .write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"a.b.c\",\"n\":1}\n")
            .unwrap();
        let held = listener.accept_hit(Duration::ZERO).unwrap();
        assert_eq!(held.hit.point, "a.b.c");
        // And a line written only once the listener is reading.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let path = listener.path().to_owned();
        let writer = std::thread::spawn(move || {
            let mut c = UnixStream::connect(path).unwrap();
            rx.recv().unwrap();
            c.write_all(b"{\"role\":\"r\",\"pid\":7,\"point\":\"x.y\",\"n\":2}\n")
                .unwrap();
            c
        });
        // Wait until the connection is queued, then start the short wait.
        let mut fds = [PollFd::new(listener.inner.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(10_000u16)).unwrap();
        tx.send(()).unwrap();
        let held = listener.accept_hit(Duration::from_millis(1)).unwrap();
        assert_eq!((held.hit.point.as_str(), held.hit.n), ("x.y", 2));
        drop(writer.join().unwrap());
    }

    #[test]
    fn trace_read_names_the_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        fs::write(
            &path,
            "{\"role\":\"r\",\"pid\":1,\"point\":\"a\",\"n\":1}\n\nnot json\n",
        )
        .unwrap();
        let err = trace_read(&path).err().unwrap();
        assert!(matches!(err, Error::BadTrace { line_no: 3, .. }), "{err:?}");
    }
}
