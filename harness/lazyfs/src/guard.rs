//! The guard of a mount made with mount(2): a child of the owner that
//! holds the other end of a socket and, when that end closes without the
//! owner's word that it unmounted, unmounts the dead owner's mount.
//! It is what `fusermount3 -o auto_unmount` does for a mount made through
//! `fusermount3`, so that no mount outlives its owner, even one killed by
//! SIGKILL, on a machine without `fusermount3` (a root that has `/dev/fuse`
//! needs no setuid helper to mount).
//!
//! The guard runs one of two ways.
//!
//! - **Exec'd** ([`GuardProgram`]): a program whose `main` calls
//!   [`serve_guard_if_asked`] first (the `turncut` binary) is spawned with
//!   `posix_spawn` (a vfork: nothing of the owner's memory is copied), its
//!   end of the socket on its stdin, the mount point in [`GUARD_ENV`] and
//!   nothing else of the owner's environment. A wave process holds hundreds
//!   of megabytes and many threads: a forked guard shared all of it
//!   copy-on-write for the whole cell, so every page any thread of the wave
//!   wrote afterwards was copied, with a TLB shootdown on both cores (about a
//!   sixth of the machine's CPU while power-cut cells ran).
//! - **Forked**, in any other program that links lazyfs (a test binary)
//!   without such an entry point. A fork of a multi-threaded program may only
//!   make async-signal-safe calls, so the child makes raw system calls and
//!   nothing else: no allocation, no lock, no Rust I/O. Everything it needs
//!   (the path, its escaped form in `/proc/self/mountinfo`) is prepared
//!   before the fork.
//!
//! Either way the first thing the guard does is close every descriptor it
//! inherited except its end of the socket, so it holds no copy of the
//! owner's pipes, of any `/dev/fuse` connection, or of a file under a mount,
//! and it leaves the owner's session.
//!
//! It deliberately does not unmount anything but a `fuse.lazyfs` mount at
//! its own path, and it is started before the mount is made: an owner killed
//! between the mount and any later step still leaves a guard behind it.
//!
//! A mount made through `fusermount3` is guarded too, and the guard then
//! execs `fusermount3 -u -z` (a user who is not root cannot umount2): the
//! `auto_unmount` helper of fuse3 3.14 (Debian 12) leaves a dead mount of a
//! user who is not root in place, because it tests the mount by opening it
//! as root, which the kernel refuses (EACCES, no `allow_other`) instead of
//! answering ENOTCONN. Measured: `cargo test -p lazyfs --test mount`.

use std::ffi::{CString, OsString};
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The environment variable that makes a program calling
/// [`serve_guard_if_asked`] the guard of the mount point it names. Only a
/// guard's own environment has it (the owner clears the rest).
pub const GUARD_ENV: &str = "LAZYFS_GUARD_OF";

/// With [`GUARD_ENV`]: the `fusermount3` the guard unmounts with.
const FUSERMOUNT3_ENV: &str = "LAZYFS_GUARD_FUSERMOUNT3";

/// The `PATH` a guard, `fusermount3` and the `fusermount3` a guard may run
/// get: nothing of the owner's.
pub(crate) const GUARD_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// A program that can be a mount's guard: its `main` calls
/// [`serve_guard_if_asked`] before anything else, and it is started as
/// `program args…` with [`GUARD_ENV`] set.
#[derive(Clone, Debug)]
pub struct GuardProgram {
    /// The executable.
    pub program: PathBuf,
    /// Its leading arguments (none for `turncut`).
    pub args: Vec<OsString>,
}

impl GuardProgram {
    /// `program` with no arguments.
    pub fn new(program: impl Into<PathBuf>) -> GuardProgram {
        GuardProgram {
            program: program.into(),
            args: Vec::new(),
        }
    }
}

/// If this process was started as a mount's guard ([`GUARD_ENV`] is set),
/// serves as it and exits; else returns at once. A program that passes
/// itself as a [`GuardProgram`] calls this first thing in `main`.
pub fn serve_guard_if_asked() {
    let Some(mountpoint) = std::env::var_os(GUARD_ENV) else {
        return;
    };
    let fail = |why: &str| -> ! {
        eprintln!("lazyfs guard: {why}");
        std::process::exit(2)
    };
    let Ok(path) = CString::new(mountpoint.as_bytes()) else {
        fail("a mount point with a NUL byte")
    };
    let unmount = match std::env::var_os(FUSERMOUNT3_ENV) {
        Some(p) => match Exec::fusermount3(Path::new(&p), &path) {
            Ok(e) => Some(e),
            Err(e) => fail(&e.to_string()),
        },
        None => None,
    };
    let escaped = escape(mountpoint.as_bytes());
    // SAFETY: this process is the guard: stdin is its end of the socket,
    // and nothing else of it needs its descriptors.
    unsafe { guard_main(0, &path, &escaped, unmount.as_ref()) }
}

/// The byte the owner sends before closing its end when the mount is
/// already gone (or was never made): the guard then leaves the path alone.
const DONE: u8 = b'u';

/// The file system type of a lazy mount, as `/proc/self/mountinfo` shows it.
pub(crate) const FSTYPE: &str = "fuse.lazyfs";

/// The longest `/proc/self/mountinfo` line the guard reads whole; a longer
/// line (a path of several kilobytes) cannot be ours, whose line is checked
/// to fit before the fork.
const LINE_BYTES_MAX: usize = 8192;

/// The owner's side of a running guard.
pub(crate) struct Guard {
    pid: libc::pid_t,
    socket: UnixStream,
}

impl Guard {
    /// Starts the guard of `mountpoint` (canonical), before anything is
    /// mounted there: `program` exec'd, or else a fork of this process.
    /// With `fusermount3`, the guard unmounts by exec'ing it (`-u -z`),
    /// else with umount2.
    pub(crate) fn spawn(
        mountpoint: &Path,
        fusermount3: Option<&Path>,
        program: Option<&GuardProgram>,
    ) -> io::Result<Guard> {
        let nul = |_| io::Error::other("a mount point with a NUL byte");
        let path = CString::new(mountpoint.as_os_str().as_bytes()).map_err(nul)?;
        let unmount = match fusermount3 {
            Some(program) => Some(Exec::fusermount3(program, &path)?),
            None => None,
        };
        let escaped = escape(mountpoint.as_os_str().as_bytes());
        if escaped.len() + 200 > LINE_BYTES_MAX {
            return Err(io::Error::other(format!(
                "mount point path too long for the guard ({} bytes)",
                escaped.len()
            )));
        }
        let (ours, theirs) = UnixStream::pair()?;
        if let Some(program) = program {
            let pid = spawn_exec(program, mountpoint, fusermount3, theirs)?;
            return Ok(Guard { pid, socket: ours });
        }
        // SAFETY: the child makes only async-signal-safe system calls on
        // memory prepared before the fork, and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        match pid {
            -1 => Err(io::Error::last_os_error()),
            0 => unsafe { guard_main(theirs.as_raw_fd(), &path, &escaped, unmount.as_ref()) },
            pid => {
                drop(theirs);
                Ok(Guard { pid, socket: ours })
            }
        }
    }

    /// The owner unmounted (or never mounted): the guard leaves and is
    /// reaped here.
    pub(crate) fn finish(self) {
        let mut socket = &self.socket;
        // A guard that is already gone cannot read it; nothing is lost.
        let _ = socket.write_all(&[DONE]);
        drop(self.socket);
        reap(self.pid);
    }
}

/// Starts `program` as the guard of `mountpoint`, `theirs` on its stdin.
fn spawn_exec(
    program: &GuardProgram,
    mountpoint: &Path,
    fusermount3: Option<&Path>,
    theirs: UnixStream,
) -> io::Result<libc::pid_t> {
    let mut cmd = Command::new(&program.program);
    cmd.args(&program.args)
        .env_clear()
        .env("PATH", GUARD_PATH)
        .env(GUARD_ENV, mountpoint)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(f) = fusermount3 {
        cmd.env(FUSERMOUNT3_ENV, f);
    }
    // No `pre_exec`: the standard library spawns with posix_spawn. The
    // `Child` is not kept; the guard is reaped by pid (`reap`).
    let child = cmd.spawn()?;
    Ok(child.id() as libc::pid_t)
}

/// A program and its arguments, prepared before the fork so that the guard
/// only calls execve.
struct Exec {
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: [*const libc::c_char; 2],
}

impl Exec {
    /// `fusermount3 -u -z -- PATH`, with a fixed PATH and nothing else of
    /// the owner's environment.
    fn fusermount3(program: &Path, path: &CString) -> io::Result<Exec> {
        let program = CString::new(program.as_os_str().as_bytes())
            .map_err(|_| io::Error::other("a fusermount3 path with a NUL byte"))?;
        let strings = vec![
            program,
            c"-u".into(),
            c"-z".into(),
            c"--".into(),
            path.clone(),
        ];
        let mut argv: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let path_env = CString::new(format!("PATH={GUARD_PATH}")).expect("no NUL in GUARD_PATH");
        let envp = [path_env.as_ptr(), std::ptr::null()];
        Ok(Exec {
            _strings: strings.into_iter().chain([path_env]).collect(),
            argv,
            envp,
        })
    }
}

/// Waits for the guard to exit. `ECHILD` (reaped by someone else) ends the
/// wait as well: the guard is gone either way.
fn reap(pid: libc::pid_t) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child, with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
}

/// `path` as `/proc/self/mountinfo` writes it: space, tab, newline and
/// backslash as three-digit octal escapes.
fn escape(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &b in path {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\\') {
            out.extend_from_slice(format!("\\{b:03o}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

/// The guard's life: detach from the owner's descriptors, session and
/// signals, wait for the socket to close, and unmount unless told not to.
///
/// # Safety
///
/// Called only in the guard (the child of `fork`, or the exec'd guard,
/// `socket` 0): it never returns and makes only async-signal-safe calls.
unsafe fn guard_main(socket: RawFd, path: &CString, escaped: &[u8], exec: Option<&Exec>) -> ! {
    unsafe {
        // The socket above 2, then 0-2 on /dev/null, then every other
        // descriptor closed.
        let socket = libc::fcntl(socket, libc::F_DUPFD, 3);
        if socket == -1 {
            libc::_exit(1);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null != -1 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        close_all_but(socket);
        // Out of the owner's process group and session: a Ctrl-C meant for
        // the owner does not end the guard before the owner unmounts.
        libc::setsid();
        libc::chdir(c"/".as_ptr());
        libc::prctl(libc::PR_SET_NAME, c"lazyfs-guard".as_ptr());
        for sig in [libc::SIGINT, libc::SIGHUP, libc::SIGPIPE, libc::SIGQUIT] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if !owner_said_done(socket) && mounted_here(escaped) {
            match exec {
                Some(e) => {
                    libc::execve(e.argv[0], e.argv.as_ptr(), e.envp.as_ptr());
                }
                None => {
                    libc::umount2(path.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
        libc::_exit(0)
    }
}

/// Closes every descriptor from 3 up except `keep`.
///
/// # Safety
///
/// Only in the guard child: it closes descriptors other code may think open.
unsafe fn close_all_but(keep: RawFd) {
    let keep = keep as libc::c_uint;
    unsafe {
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, keep - 1, 0);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0);
    }
}

/// Reads the socket to its end: whether the owner sent [`DONE`] first.
///
/// # Safety
///
/// Only in the guard child (raw `read`).
unsafe fn owner_said_done(socket: RawFd) -> bool {
    let mut done = false;
    let mut buf = [0u8; 16];
    loop {
        let n = unsafe { libc::read(socket, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            done |= buf[..n as usize].contains(&DONE);
        } else if n == -1 && unsafe { *libc::__errno_location() } == libc::EINTR {
            continue;
        } else {
            return done;
        }
    }
}

/// Whether `/proc/self/mountinfo` has a `fuse.lazyfs` mount at the path
/// `escaped` (as mountinfo writes it).
///
/// # Safety
///
/// Only in the guard child (raw `open`/`read`, stack buffers only).
unsafe fn mounted_here(escaped: &[u8]) -> bool {
    let fd = unsafe {
        libc::open(
            c"/proc/self/mountinfo".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd == -1 {
        // The table cannot be read: unmount by path, as fusermount3 would.
        return true;
    }
    let mut line = [0u8; LINE_BYTES_MAX];
    let mut len = 0usize;
    let mut chunk = [0u8; 4096];
    let mut found = false;
    'read: loop {
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n == -1 && unsafe { *libc::__errno_location() } == libc::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        for &b in &chunk[..n as usize] {
            if b == b'\n' {
                if len <= line.len() && is_ours(&line[..len], escaped) {
                    found = true;
                    break 'read;
                }
                len = 0;
            } else {
                if len < line.len() {
                    line[len] = b;
                }
                len += 1;
            }
        }
    }
    unsafe { libc::close(fd) };
    found
}

/// Whether a mountinfo line (`id parent maj:min root mountpoint options
/// [optional…] - fstype source superoptions`) is a `fuse.lazyfs` mount at
/// `escaped`. No allocation: it runs in the guard.
fn is_ours(line: &[u8], escaped: &[u8]) -> bool {
    let mut fields = line.split(|&b| b == b' ');
    if fields.nth(4) != Some(escaped) {
        return false;
    }
    let mut rest = fields.skip_while(|&f| f != b"-");
    rest.next();
    rest.next() == Some(FSTYPE.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mountinfo_line_is_ours_only_at_our_path_with_our_type() {
        let ours = b"812 30 0:123 / /tmp/a\\040b/state rw,nosuid,nodev,relatime shared:1 - fuse.lazyfs lazyfs rw,user_id=0,group_id=0";
        let path = escape(b"/tmp/a b/state");
        assert_eq!(path, b"/tmp/a\\040b/state");
        assert!(is_ours(ours, &path));
        assert!(!is_ours(ours, b"/tmp/a\\040b"));
        let other = b"812 30 0:123 / /tmp/a\\040b/state rw - tmpfs tmpfs rw";
        assert!(!is_ours(other, &path));
        assert!(!is_ours(b"", &path));
    }
}
