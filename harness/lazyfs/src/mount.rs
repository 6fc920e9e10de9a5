//! Mounting and unmounting, two ways. As root (more exactly: where the
//! mount(2) system call may mount FUSE, which [`unavailable`] finds out once
//! per process by mounting and unmounting a probe), lazyfs opens
//! `/dev/fuse` and mounts with it itself, and its own [`Guard`] (a child
//! holding the other end of a socket, see `guard`) unmounts the mount if the owner
//! dies, even by SIGKILL: no package is needed. Elsewhere `fusermount3`
//! (Debian's `fuse3`, setuid root) mounts and hands back the `/dev/fuse`
//! descriptor (its `_FUSE_COMMFD` protocol), then stays as the
//! `auto_unmount` helper that does the same, beside our guard, which runs
//! `fusermount3 -u -z` where that helper leaves a dead mount in place (see
//! the guard's module). Either way no owner leaves a mount behind. fuser's own mount path is not used: it mounts without
//! `fusermount3` only when no `auto_unmount` is asked for (so nothing would
//! unmount a dead owner's mount), and with `fusermount3` it never reaps the
//! helper and unmounts only lazily; here the helper is waited for, and an
//! unmount that finds the mount busy says who uses it.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use fuser::{BackgroundSession, Config, Session, SessionACL};

use crate::Error;
use crate::durable::State;
use crate::fs::Fs;
use crate::guard::{FSTYPE, GUARD_PATH, Guard, GuardProgram};

/// The mount options given to `fusermount3`: the kernel checks permissions,
/// `fsname`/`subtype` make the mount `fuse.lazyfs` in `/proc/mounts`.
const OPTIONS: &str = "fsname=lazyfs,subtype=lazyfs,default_permissions,auto_unmount";

/// The fix printed with every reason FUSE cannot be used.
const FIX: &str = "run as root with CAP_SYS_ADMIN and a working /dev/fuse (a container: --device /dev/fuse --cap-add SYS_ADMIN), or install fusermount3 (Debian: apt-get install fuse3)";

/// `fusermount3` on `PATH`.
fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join("fusermount3"))
        .find(|p| p.is_file())
}

pub(crate) fn unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    let direct = match direct_mounts() {
        Ok(()) => return None,
        Err(why) => why,
    };
    if fusermount3().is_none() {
        return Some(format!("{direct}, and fusermount3 is not on PATH: {FIX}"));
    }
    None
}

/// Whether this process may mount FUSE with mount(2) itself, found out once
/// by mounting a probe (with no file system served behind it) and
/// unmounting it at once: being root is not enough in a container without
/// CAP_SYS_ADMIN or under a security module that forbids mounts.
fn direct_mounts() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root (mounting FUSE with the mount system call needs root)".to_owned());
    }
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lazyfs-probe-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("probe {}: {e}", dir.display()))?;
    let mounted = mount_with_dev_fuse(&dir);
    if mounted.is_ok() {
        let _ = nix::mount::umount2(&dir, nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir(&dir);
    mounted
        .map(drop)
        .map_err(|e| format!("the mount system call refuses to mount FUSE here ({e})"))
}
/// A mount being served: the FUSE thread, the state it serves, and the
/// helper that unmounts it if this process dies.
pub(crate) struct Live {
    session: BackgroundSession,
    pub(crate) state: Arc<Mutex<State>>,
    helper: Helper,
}

/// What unmounts a dead owner's mount.
enum Helper {
    /// Our own guard, for a mount made with mount(2).
    Guard(Guard),
    /// `fusermount3 -o auto_unmount`, for a mount it made, and our guard
    /// (which runs `fusermount3 -u -z` where its helper leaves the mount).
    Fusermount {
        child: Child,
        socket: UnixStream,
        guard: Guard,
    },
}

impl Helper {
    /// Tells the helper the mount is gone (our guard), or closes our end of
    /// the socket (`fusermount3` then unmounts if the mount is still there
    /// and dead); either exits and is reaped here.
    fn finish(self) {
        match self {
            Helper::Guard(guard) => guard.finish(),
            Helper::Fusermount {
                child,
                socket,
                guard,
            } => {
                drop(socket);
                let mut child = child;
                let _ = child.wait();
                guard.finish();
            }
        }
    }
}

impl Live {
    /// Mounts `backing` at `mountpoint`, guarded by `guard` exec'd (else a
    /// fork of this process).
    pub(crate) fn start(
        backing: &Path,
        mountpoint: &Path,
        guard: Option<&GuardProgram>,
    ) -> Result<Live, Error> {
        let err = |source: io::Error| Error::Mount {
            mountpoint: mountpoint.to_path_buf(),
            source,
        };
        let state = Arc::new(Mutex::new(State::new(backing).map_err(err)?));
        let (fuse, helper) = if direct_mounts().is_ok() {
            mount_guarded(mountpoint, guard).map_err(err)?
        } else {
            fusermount(mountpoint, guard).map_err(err)?
        };
        let fs = Fs {
            state: state.clone(),
        };
        let mut config = Config::default();
        config.n_threads = Some(1);
        let session = Session::from_fd(fs, fuse, SessionACL::Owner, config)
            .and_then(Session::spawn)
            .map_err(|e| {
                let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
                err(e)
            })?;
        Ok(Live {
            session,
            state,
            helper,
        })
    }

    /// Unmounts (not lazily: a busy mount is refused and stays served),
    /// waits for the FUSE thread to end, and returns the state.
    pub(crate) fn stop(self, mountpoint: &Path) -> Result<Arc<Mutex<State>>, (Box<Live>, Error)> {
        match unmount(mountpoint) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => {
                let pids = users(mountpoint);
                let e = Error::Busy {
                    mountpoint: mountpoint.to_path_buf(),
                    pids,
                };
                return Err((Box::new(self), e));
            }
            Err(e) => {
                let e = Error::Unmount {
                    mountpoint: mountpoint.to_path_buf(),
                    source: e.into(),
                };
                return Err((Box::new(self), e));
            }
        }
        let Live {
            session,
            state,
            helper,
        } = self;
        // The kernel ends the connection at the unmount: the thread's next
        // read fails with ENODEV and it returns.
        let _ = session.join();
        helper.finish();
        Ok(state)
    }

    /// Unmounts lazily: processes still inside keep being served until they
    /// leave, by the FUSE thread, which then ends by itself.
    pub(crate) fn detach(self, mountpoint: &Path) {
        let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
        self.helper.finish();
    }
}

/// Mounts with mount(2), guarded: the guard is forked first, so an owner
/// killed at any point after leaves a guard that unmounts.
fn mount_guarded(mountpoint: &Path, by: Option<&GuardProgram>) -> io::Result<(OwnedFd, Helper)> {
    let guard = Guard::spawn(mountpoint, None, by)?;
    match mount_with_dev_fuse(mountpoint) {
        Ok(fd) => Ok((fd, Helper::Guard(guard))),
        Err(e) => {
            guard.finish();
            Err(e)
        }
    }
}

/// Opens `/dev/fuse` and mounts a `fuse.lazyfs` at `mountpoint` with it,
/// with the options `fusermount3` would give the kernel for [`OPTIONS`]:
/// `nosuid`, `nodev`, the kernel checking permissions, the mounting user as
/// the owner. The descriptor is the connection to serve.
fn mount_with_dev_fuse(mountpoint: &Path) -> io::Result<OwnedFd> {
    let fuse = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},default_permissions",
        fuse.as_raw_fd(),
        libc::S_IFDIR,
    );
    use nix::mount::MsFlags;
    nix::mount::mount(
        Some("lazyfs"),
        mountpoint,
        Some(FSTYPE),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )?;
    Ok(OwnedFd::from(fuse))
}

/// Mounts through `fusermount3`: it mounts, sends the `/dev/fuse`
/// descriptor over a socket pair, and stays (`auto_unmount`) until our end
/// closes.
fn fusermount(mountpoint: &Path, by: Option<&GuardProgram>) -> io::Result<(OwnedFd, Helper)> {
    let program = fusermount3().ok_or_else(|| io::Error::other("fusermount3 is not on PATH"))?;
    let guard = Guard::spawn(mountpoint, Some(&program), by)?;
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(program);
    cmd.arg("-o")
        .arg(OPTIONS)
        .arg("--")
        .arg(mountpoint)
        // Nothing of ours (a cell's process tag among it) goes to the helper.
        .env_clear()
        .env("PATH", GUARD_PATH)
        .env("_FUSE_COMMFD", theirs_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(theirs_fd, libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            guard.finish();
            return Err(e);
        }
    };
    drop(theirs);
    match receive_fd(&ours) {
        Ok(fd) => {
            // The helper keeps running; its stderr is not read any more.
            drop(child.stderr.take());
            Ok((
                fd,
                Helper::Fusermount {
                    child,
                    socket: ours,
                    guard,
                },
            ))
        }
        Err(e) => {
            drop(ours);
            guard.finish();
            let out = child.wait_with_output()?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err(io::Error::other(format!(
                "fusermount3 {}: {} ({e})",
                out.status,
                stderr.trim()
            )))
        }
    }
}

/// The descriptor `fusermount3` sends (`SCM_RIGHTS`).
fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    if msg.bytes == 0 {
        return Err(io::Error::other("fusermount3 sent no descriptor"));
    }
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg
            && let Some(&fd) = fds.first()
        {
            // SAFETY: the descriptor was just received and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    Err(io::Error::other("fusermount3 sent no descriptor"))
}

/// The processes with a descriptor, a working directory or a root under
/// `mountpoint`: what keeps a mount busy.
pub(crate) fn users(mountpoint: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| uses(pid, mountpoint))
        .collect();
    pids.sort_unstable();
    pids
}

fn uses(pid: u32, mountpoint: &Path) -> bool {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let under = |link: PathBuf| std::fs::read_link(link).is_ok_and(|p| p.starts_with(mountpoint));
    if under(base.join("cwd")) || under(base.join("root")) {
        return true;
    }
    std::fs::read_dir(base.join("fd"))
        .map(|fds| fds.filter_map(Result::ok).any(|fd| under(fd.path())))
        .unwrap_or(false)
}

/// How long a busy unmount is tried again.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Unmounts, not lazily. A mount can be busy for a moment with no process
/// that means to stay: the kernel may still be finishing a process's last
/// close (a fresh-clone CI run once got EBUSY with no process inside, in
/// `a_cut_with_a_process_inside_is_refused_and_changes_nothing`), and a
/// process forked by another thread of the same program holds a copy of
/// every descriptor until its `exec` closes them (a CI run got EBUSY in
/// `a_rename_without_a_directory_sync_is_undone`, naming the forked child
/// of a sibling test). So a busy unmount is tried again within
/// [`RELEASE_WAIT`]; a process that really stays inside keeps it busy, and
/// the caller then gets `EBUSY`.
fn unmount(mountpoint: &Path) -> nix::Result<()> {
    let until = std::time::Instant::now() + RELEASE_WAIT;
    loop {
        match nix::mount::umount2(mountpoint, nix::mount::MntFlags::empty()) {
            Err(nix::errno::Errno::EBUSY) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => return other,
        }
    }
}
