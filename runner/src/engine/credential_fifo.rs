//! A FIFO that hands the credential to a provider that reads it from a file
//! (a profile with `credential_fifo = true`, e.g. the real `opencode serve`
//! and `opencode acp`, whose configuration reads their key with
//! `{file:{env:VAR}}`). The profile's `credential_env` then names the
//! FIFO's path instead of holding the key: the key is neither in the
//! provider's environment, which its tool shells inherit whole, nor on any
//! disk (a FIFO's data lives in the kernel). The FIFO, in a 0700 directory
//! of its own under the state directory (`credentials/<marker>`), is removed
//! once served; what a killed runner left there is removed by the next one
//! ([`sweep`], under the state directory's lock).
//!
//! The built-in profiles (the fakes) take their key this way too, so that
//! no sibling of a provider (an ACP terminal, a native `Bash`, both children
//! of runnerd with its uid) finds it in the provider's `/proc/PID/environ`.
//!
//! The FIFO is served `credential_reads` times (the profile's count: `opencode
//! serve` reads its key once, `opencode acp` twice, at start and at
//! `session/new`), each time only to the provider's own process: when a
//! reader opens it, every process that holds it open (but the runner) must
//! be the provider, else nothing is written, the FIFO is removed and no one
//! reads it again. The provider is its own process or one it started in
//! its own session (a wrapper's child: the harness's `tap`, a launcher that
//! runs the product as its child); a tool shell inherits the FIFO's path,
//! but the real products run their tools in a session of their own, so it
//! gets nothing. Between two reads the serving thread waits
//! until the reader has closed the FIFO, so that one read never gets the key
//! twice nor a second key lands in a pipe about to be discarded.
//!
//! The serving thread waits for each reader at most [`READER_WAIT_MS`], and
//! stops as soon as [`Served`] is dropped with the provider's handle: a
//! provider that dies first, or never reads its key, leaves nothing behind;
//! nothing of the key is written anywhere.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::Secret;

/// How long the FIFO waits for its provider to open it (each read).
pub const READER_WAIT_MS: u64 = 60_000;

/// How long a reader may wait for the runner to learn the provider's pid
/// (it sets it right after the spawn returns).
pub(super) const PID_WAIT_MS: u64 = 10_000;

/// The directory of the state directory `state` that holds the FIFOs.
fn base(state: &Path) -> PathBuf {
    state.join("credentials")
}

/// Removes every FIFO or socket an earlier runner left in `state` (its provider died
/// or it was killed before the key was read); only one runner holds a state
/// directory, so none of them is being served.
pub fn sweep(state: &Path) {
    let _ = std::fs::remove_dir_all(base(state));
}

/// A new private (0700) directory for the hand-off of spawn `marker` under
/// the state directory `state` (`credentials/<marker>`), and the path of
/// the hand-off in it: (directory, path).
pub(super) fn private_path(state: &Path, marker: &str) -> std::io::Result<(PathBuf, PathBuf)> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(base(state))?;
    let dir = base(state).join(marker);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let path = dir.join("credential");
    Ok((dir, path))
}

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
    /// Stops serving: a thread waiting for a reader sees it within its
    /// polling interval and writes nothing.
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.pid_set.try_send(());
    }
}

/// What the serving thread shares with [`Served`].
struct Shared {
    pid: Arc<AtomicI32>,
    pid_known: mpsc::Receiver<()>,
    closed: Arc<AtomicBool>,
}

/// Creates a private directory under the state directory `state` holding a
/// FIFO, and serves `secret` through it `reads` times on a thread of its
/// own.
pub fn serve(state: &Path, secret: &Secret, marker: &str, reads: u32) -> std::io::Result<Served> {
    let (dir, path) = private_path(state, marker)?;
    nix::unistd::mkfifo(
        &path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)?;
    let key = secret.0.clone();
    let pid = Arc::new(AtomicI32::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let (pid_set, pid_known) = mpsc::sync_channel(1);
    let shared = Shared {
        pid: pid.clone(),
        pid_known,
        closed: closed.clone(),
    };
    let (fifo, served) = (path.clone(), dir);
    std::thread::Builder::new()
        .name("credential-fifo".to_owned())
        .spawn(move || {
            serve_reads(&fifo, key.as_bytes(), reads, &shared);
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
fn serve_reads(fifo: &Path, key: &[u8], reads: u32, shared: &Shared) {
    for read in 0..reads {
        if read > 0 && !wait_released(fifo, &shared.closed) {
            return;
        }
        let Some(mut w) = open_when_read(fifo, &shared.closed) else {
            return;
        };
        if shared.pid.load(Ordering::SeqCst) == 0 {
            let _ = shared
                .pid_known
                .recv_timeout(Duration::from_millis(PID_WAIT_MS));
        }
        let provider = shared.pid.load(Ordering::SeqCst);
        if shared.closed.load(Ordering::SeqCst) || provider == 0 {
            return;
        }
        let holders = holders(fifo, provider, &shared.closed);
        if holders.is_empty() || holders.iter().any(|h| !is_provider(*h, provider)) {
            tracing::warn!(
                "the credential FIFO was opened by a process other than the provider \
                 (pid {provider}): {holders:?}; nothing written, no further reads"
            );
            return;
        }
        // A key is far below a pipe's capacity: one non-blocking write.
        let _ = w.write_all(key);
    }
}

/// How many times [`holders`] looks for the reader in the provider's own
/// tree before it looks in every process at each poll (about 30 ms).
const TREE_LOOKS: u32 = 5;

/// Every holder of `fifo`, once the reader that opened it shows. A reader
/// still inside its open(2) holds no descriptor yet: an empty list is no
/// proof of who reads, so the list is read again until one shows. It is
/// first looked for in the provider and its children (a few processes),
/// and every process is scanned once it shows there: one scan of all of
/// `/proc` per read, where waiting on whole scans took one or more (the
/// scans were a tenth of runnerd's CPU in a wave). A reader that is not in
/// the provider's tree is found by the whole scans that follow
/// [`TREE_LOOKS`] looks. (Counting the FIFO's opens with inotify instead
/// of a scan cannot work: two opens before the watch is read are one
/// event.)
fn holders(fifo: &Path, provider: i32, closed: &AtomicBool) -> Vec<i32> {
    let Ok(meta) = std::fs::metadata(fifo) else {
        return Vec::new();
    };
    let mut looks = 0;
    poll(closed, || {
        looks += 1;
        if looks <= TREE_LOOKS && !tree_reads(provider, meta.dev(), meta.ino()) {
            return None;
        }
        Some(readers_of(fifo)).filter(|h| !h.is_empty())
    })
    .unwrap_or_default()
}

/// Whether the provider or one of its children holds the file (`dev`,
/// `ino`) open for reading.
fn tree_reads(provider: i32, dev: u64, ino: u64) -> bool {
    std::iter::once(provider)
        .chain(crate::supervisor::children_of(provider))
        .any(|pid| reads(pid, dev, ino))
}

/// Polls with a growing delay (at most 50 ms) until `done` says yes, or
/// `closed` is set, or [`READER_WAIT_MS`] has passed; what `done` gave.
fn poll<T>(closed: &AtomicBool, mut done: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_millis(READER_WAIT_MS);
    let mut delay = Duration::from_millis(1);
    loop {
        if closed.load(Ordering::SeqCst) {
            return None;
        }
        if let Some(v) = done() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(50));
    }
}

/// The FIFO opened for writing once a reader has it open (a non-blocking
/// open fails with `ENXIO` until then); `None` if the serving ends first.
fn open_when_read(fifo: &Path, closed: &AtomicBool) -> Option<std::fs::File> {
    let mut failed = false;
    let opened = poll(closed, || {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo);
        match opened {
            Ok(w) => Some(Some(w)),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => None,
            Err(_) => {
                failed = true;
                Some(None)
            }
        }
    });
    opened.flatten().filter(|_| !failed)
}

/// Waits until no process holds `fifo` open for reading (the last reader
/// has closed it); whether it did before the serving ended.
fn wait_released(fifo: &Path, closed: &AtomicBool) -> bool {
    poll(closed, || readers_of(fifo).is_empty().then_some(())).is_some()
}

/// Whether `pid` is the provider `provider` or a process it started in its
/// own session: a provider behind a wrapper (the harness's `tap`, a launcher
/// that runs the product as its child) reads through a descendant. A tool
/// shell of the real products runs in a session of its own (`setsid`), so it
/// is no provider; nor is any process outside the provider's tree.
pub(super) fn is_provider(pid: i32, provider: i32) -> bool {
    let Some((_, session)) = parent_and_session(provider) else {
        return false;
    };
    let mut at = pid;
    // A process tree is far shallower than this; the bound ends a cycle
    // that pid reuse could make.
    for _ in 0..64 {
        if at == provider {
            return true;
        }
        match parent_and_session(at) {
            Some((parent, s)) if s == session && parent > 1 => at = parent,
            _ => return false,
        }
    }
    false
}

/// A process's parent and session, from `/proc/PID/stat` (the fields after
/// the command's closing parenthesis: state, ppid, pgrp, session).
fn parent_and_session(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let parent = fields.nth(1)?.parse().ok()?;
    let session = fields.nth(1)?.parse().ok()?;
    Some((parent, session))
}

/// Every process but this one that holds `fifo` open for reading. Each
/// process's descriptors are stat'ed relative to its open `/proc/PID/fd`
/// (one lookup per descriptor, not a walk of the whole path): this scan
/// runs at every read of every provider's key.
///
/// A descriptor open for writing only is no reader: it cannot take the key.
/// Such is the write end this runner holds while it checks, in every child
/// another of its threads forks in that window, until the child's `exec`
/// closes it (`O_CLOEXEC`); counted as a holder, such a fork (a second
/// provider starting, a tool shell) made the FIFO refuse its own provider.
fn readers_of(fifo: &Path) -> Vec<i32> {
    let Ok(meta) = std::fs::metadata(fifo) else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me && reads(*pid, meta.dev(), meta.ino()))
        .collect()
}

/// Whether process `pid` has a descriptor open for reading on the file
/// (`dev`, `ino`).
fn reads(pid: i32, dev: u64, ino: u64) -> bool {
    use nix::dir::Dir;
    use nix::fcntl::{AtFlags, OFlag};
    use nix::sys::stat::Mode;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Ok(mut dir) = Dir::open(format!("/proc/{pid}/fd").as_str(), flags, Mode::empty()) else {
        return false;
    };
    let names: Vec<std::ffi::CString> = dir
        .iter()
        .flatten()
        .filter(|e| e.file_name().to_bytes()[0] != b'.')
        .map(|e| e.file_name().to_owned())
        .collect();
    let at = std::os::fd::AsFd::as_fd(&dir);
    names.iter().any(|name| {
        nix::sys::stat::fstatat(at, name.as_c_str(), AtFlags::empty())
            .is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
            && !write_only(pid, name)
    })
}

/// Whether descriptor `fd` of process `pid` is open for writing only, from
/// the `flags` line of `/proc/PID/fdinfo/FD` (octal). A descriptor whose
/// flags cannot be read counts as a reader: the check errs towards refusing.
fn write_only(pid: i32, fd: &std::ffi::CStr) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
    else {
        return false;
    };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|f| f & libc::O_ACCMODE == libc::O_WRONLY)
}

pub(super) fn remove(fifo: &Path, dir: &Path) {
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
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-123".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo", 2).unwrap();
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

    /// A provider that keeps the FIFO open after its first read (as a
    /// reader may, between its EOF and its close) gets its second key from
    /// its second open, not a second copy in the first open's pipe, which
    /// its close would discard.
    #[test]
    fn a_second_read_waits_for_the_first_reader_to_close() {
        use std::io::{BufRead as _, Read as _};
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-234".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo4", 2).unwrap();
        // Builtins only: the shell itself is the one reader.
        let script = "exec 3<\"$0\"; IFS= read -r k <&3; printf '%s|\\n' \"$k\"; \
                      read go; exec 3<&-; k=; IFS= read -r k < \"$0\"; printf '%s|' \"$k\"";
        let mut provider = std::process::Command::new("sh")
            .args(["-c", script])
            .arg(&served.path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        served.provider(provider.id() as i32);
        let mut out = std::io::BufReader::new(provider.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert_eq!(first, "k-234|\n");
        writeln!(provider.stdin.take().unwrap(), "go").unwrap();
        // Without the wait the FIFO is gone (or never served again): the
        // second read fails at once or blocks; a deadline bounds the latter.
        let until = Instant::now() + Duration::from_secs(10);
        while provider.try_wait().unwrap().is_none() {
            if Instant::now() >= until {
                let _ = provider.kill();
                let _ = provider.wait();
                panic!("the second read was never served");
            }
            std::thread::yield_now();
        }
        let mut second = String::new();
        out.read_to_string(&mut second).unwrap();
        assert_eq!(second, "k-234|");
        wait_removed(&served.path);
    }

    /// A provider behind a wrapper (`fake-provider tap`, a launcher) reads
    /// through its child, in its session: served. A child in a session of
    /// its own (as the real products run their tool shells) is not.
    #[test]
    fn a_child_in_the_providers_session_is_served_one_in_its_own_is_not() {
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-567".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo5", 1).unwrap();
        let wrapper = std::process::Command::new("sh")
            .args(["-c", "cat \"$0\"; echo '|'"])
            .arg(&served.path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        served.provider(wrapper.id() as i32);
        let out = wrapper.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "k-567|\n");
        wait_removed(&served.path);

        let served = serve(state.path(), &secret, "spawn-test-fifo6", 1).unwrap();
        let wrapper = std::process::Command::new("sh")
            .args(["-c", "setsid -w cat \"$0\"; echo '|'"])
            .arg(&served.path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        served.provider(wrapper.id() as i32);
        let out = wrapper.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "|\n");
        wait_removed(&served.path);
    }

    #[test]
    fn a_reader_other_than_the_provider_gets_nothing_and_ends_the_serving() {
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-456".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo2", 2).unwrap();
        // Another process reads (a tool shell of the provider, say).
        let stranger = reader(&served.path, 1);
        served.provider(stranger.id() as i32 + 1_000_000);
        let out = stranger.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "|");
        wait_removed(&served.path);
    }

    /// A stranger that opened the FIFO beside the provider (a tool shell
    /// that inherited the path, say) holds it too: the scan of every
    /// process finds it, and neither gets the key, though a look at the
    /// provider's own descriptors alone would find only the provider.
    #[test]
    fn a_stranger_holding_the_fifo_beside_the_provider_gets_nothing() {
        use std::io::BufRead as _;
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-678".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo7", 1).unwrap();
        let opener = "exec 3<\"$0\"; echo opened; IFS= read -r k <&3; printf '%s|' \"$k\"";
        let holder = || {
            let mut child = std::process::Command::new("sh")
                .args(["-c", opener])
                .arg(&served.path)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            // The serving opens its end once a reader waits: then both opens
            // finish, and the provider's is never the only one.
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "opened\n");
            (child, out)
        };
        let (mut stranger, mut stranger_out) = holder();
        let (mut provider, mut provider_out) = holder();
        served.provider(provider.id() as i32);
        let mut got = (String::new(), String::new());
        std::io::Read::read_to_string(&mut provider_out, &mut got.0).unwrap();
        std::io::Read::read_to_string(&mut stranger_out, &mut got.1).unwrap();
        let _ = (provider.wait(), stranger.wait());
        assert_eq!(got, ("|".to_owned(), "|".to_owned()));
        wait_removed(&served.path);
    }

    /// A process that holds the FIFO for writing only (a child forked by
    /// another thread of the runner while the serving holds its write end,
    /// before the child's `exec` closes it) cannot read the key: it is no
    /// reader, and the provider beside it is served.
    #[test]
    fn a_process_holding_only_the_write_end_is_no_reader() {
        use std::io::BufRead as _;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Opened read-write (which does not block), then write-only, then
        // the read-write one closed: the shell holds the write end alone.
        let script = "exec 3<>\"$0\"; exec 4>\"$0\"; exec 3<&-; echo held; read go";
        let mut writer = std::process::Command::new("sh")
            .args(["-c", script])
            .arg(&fifo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(writer.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");
        let pid = writer.id() as i32;
        assert!(!readers_of(&fifo).contains(&pid), "{:?}", readers_of(&fifo));
        drop(writer.stdin.take());
        let _ = writer.wait();
    }

    #[test]
    fn dropping_the_handle_ends_a_wait_for_a_reader() {
        let state = tempfile::tempdir().unwrap();
        let secret = Secret::new("k-789".to_owned());
        let served = serve(state.path(), &secret, "spawn-test-fifo3", 1).unwrap();
        let path = served.path.clone();
        drop(served);
        wait_removed(&path);
    }
}
