//! Waiting for a signalled process to exit, until a deadline: through a
//! pidfd where the kernel has `pidfd_open` (exact, immune to pid reuse),
//! else by waiting on our own child or polling `/proc` with a bounded
//! backoff.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::Child;
use tokio::time::Instant;

use super::ProcessIdentity;
use super::liveness::{DeathMethod, Observation, observe};

/// The first pause when polling an external process; short because most
/// processes die within a millisecond of SIGKILL.
pub(super) const INITIAL_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// The longest pause between two polls, so that a slow exit is still noticed
/// promptly without spinning.
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Opens a pidfd for `pid`. `Ok(None)` means the kernel has no
/// `pidfd_open` (ENOSYS), and the caller falls back to polling.
pub(super) fn pidfd_open(pid: i32) -> Result<Option<OwnedFd>, Errno> {
    // SAFETY: pidfd_open(2) takes a pid and a flags word and returns a new file
    // descriptor or -1; no memory is shared with the kernel.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if ret < 0 {
        return match Errno::last() {
            Errno::ENOSYS => Ok(None),
            errno => Err(errno),
        };
    }
    let fd = i32::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Hands a pidfd to the runtime so that its exit can be awaited.
pub(super) fn register_pidfd(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor
    // stays open, refers to the same pidfd and is returned unchanged by
    // as_raw_fd for the AsyncFd's whole lifetime.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        .map_err(|error| error.into_parts().1)
}

/// Whether the pidfd reports the process as exited right now. A pidfd is
/// readable from the moment the process exits (zombie or reaped).
pub(super) fn pidfd_exited(fd: &AsyncFd<OwnedFd>) -> bool {
    let mut fds = [PollFd::new(fd.get_ref().as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|revents| revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP)),
        _ => false,
    }
}

/// How exit is observed while waiting for a signalled process.
pub(super) enum ExitWatch {
    /// A pidfd registered with the runtime: exact, and immune to pid reuse.
    Pidfd(AsyncFd<OwnedFd>),
    /// No pidfd: wait on our own child (which also reaps it) or poll `/proc`.
    Fallback,
}

/// Whether [`stop_with`] may use pidfds; tests turn them off to exercise the
/// fallback that kernels without `pidfd_open` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PidfdUse {
    Prefer,
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only tests force the fallback path")
    )]
    Never,
}

/// The result of waiting for exit until a deadline.
pub(super) enum WaitResult {
    Exited(DeathMethod),
    TimedOut,
    Unknown(String),
}

/// Sleeps for the current backoff step (never past `deadline`) and doubles it.
/// Returns false, without sleeping, once the deadline has passed.
pub(super) async fn backoff(delay: &mut Duration, deadline: Instant) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    tokio::time::sleep((*delay).min(deadline - now)).await;
    *delay = (*delay * 2).min(MAX_POLL_INTERVAL);
    true
}

async fn poll_for_exit(id: &ProcessIdentity, deadline: Instant) -> WaitResult {
    let mut delay = INITIAL_POLL_INTERVAL;
    loop {
        match observe(id) {
            Observation::Gone(method) => return WaitResult::Exited(method),
            Observation::Unknown(reason) => return WaitResult::Unknown(reason),
            Observation::Alive { .. } => {}
        }
        if !backoff(&mut delay, deadline).await {
            return WaitResult::TimedOut;
        }
    }
}

pub(super) async fn wait_for_exit(
    id: &ProcessIdentity,
    watch: &ExitWatch,
    child: &mut Option<&mut Child>,
    deadline: Instant,
) -> WaitResult {
    match watch {
        ExitWatch::Pidfd(fd) => loop {
            match tokio::time::timeout_at(deadline, fd.readable()).await {
                Err(_elapsed) => return WaitResult::TimedOut,
                Ok(Ok(mut guard)) => {
                    // Runtime readiness may be stale, so it is confirmed with a
                    // direct poll before it counts as proof.
                    if pidfd_exited(fd) {
                        return WaitResult::Exited(DeathMethod::Exited);
                    }
                    guard.clear_ready();
                }
                // The runtime cannot watch the pidfd after all; polling /proc
                // still gives a sound answer.
                Ok(Err(_)) => return poll_for_exit(id, deadline).await,
            }
        },
        ExitWatch::Fallback => {
            if let Some(child) = child.as_deref_mut() {
                match tokio::time::timeout_at(deadline, child.wait()).await {
                    Err(_elapsed) => return WaitResult::TimedOut,
                    Ok(Ok(_status)) => return WaitResult::Exited(DeathMethod::Exited),
                    // Someone else reaped it (or SIGCHLD is ignored); /proc
                    // still tells whether it is gone.
                    Ok(Err(_)) => {}
                }
            }
            poll_for_exit(id, deadline).await
        }
    }
}
