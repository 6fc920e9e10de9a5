//! Provider process supervision: spawning a provider in its own process group,
//! recording an identity for it that a recycled pid cannot impersonate, and
//! stopping it (together with everything left in its process group) with a
//! proof that it is gone.
//!
//! The runner must survive being SIGKILLed at any instant, so after a restart
//! it follows the rule "old provider first": a provider left behind by the
//! previous incarnation is stopped here, and the conversation is touched only
//! once [`stop`] returns [`StopOutcome::Stopped`]. A process is identified by
//! its pid, its process group and its start time (field 22 of
//! `/proc/<pid>/stat`), because a pid alone may name an unrelated process by
//! the time the runner comes back.
//!
//! This module deliberately does not decide policy: it never quarantines,
//! restarts or persists anything (the caller records the identity before use
//! and quarantines on [`StopOutcome::Unprovable`] or
//! [`StopOutcome::StillRunning`]). It never sets `PR_SET_PDEATHSIG` on a
//! provider, because a provider orphaned by a runner crash is exactly the case
//! the restarted runner has to find and clean up; a death signal would hide
//! that case instead of handling it. It never reaps processes that are not the
//! caller's children. It is Linux-only (it relies on `/proc` and `pidfd_open`)
//! and must run inside a Tokio runtime with IO and time enabled.

use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The first pause when polling an external process; short because most
/// processes die within a millisecond of SIGKILL.
const INITIAL_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// The longest pause between two polls, so that a slow exit is still noticed
/// promptly without spinning.
const MAX_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How often a `/proc` read that contradicts `kill(pid, 0)` is retried before
/// the answer is declared unknowable; the contradiction is normally a pid
/// being recycled between the two calls, which a retry resolves.
const PROC_RETRIES: usize = 3;

/// Who a provider process is, precisely enough that a recycled pid is never
/// mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessIdentity {
    /// The process id (thread group id) in the runner's pid namespace.
    pub pid: i32,
    /// The process group the provider was spawned into; equal to `pid` for
    /// processes started by [`spawn_provider`].
    pub pgid: i32,
    /// Field 22 (`starttime`) of `/proc/<pid>/stat`: clock ticks after boot at
    /// which the process started. A recycled pid has a different value.
    pub start_time: u64,
}

/// Evidence that a stopped process is gone, for the caller to log or persist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopProof {
    pub identity: ProcessIdentity,
    /// How death was established: "esrch" (no such pid), "start_time_changed",
    /// "zombie", "exited" (observed exit via pidfd or waiting on our own child).
    pub method: String,
    /// Which signals we had to send while the process was alive, in order
    /// (empty if it was already gone): e.g. ["SIGTERM"] or
    /// ["SIGTERM","SIGKILL"]. The SIGKILL swept over the group after the
    /// process is gone is housekeeping and is not listed.
    pub signals: Vec<String>,
    /// Whether the whole process group was verified gone
    /// (`killpg(pgid, 0)` == ESRCH) within the kill grace period. Members may
    /// be zombies briefly until their parent (often init) reaps them.
    pub group_gone: bool,
    /// The sweep of the provider's spawn marker after it was gone: every
    /// process it started outside its group (another session, a daemon)
    /// that kept the marker in its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marked: Option<MarkerSweep>,
}

/// What [`stop`] could establish.
#[derive(Debug)]
pub enum StopOutcome {
    /// Proven gone; `proof` says how.
    Stopped(StopProof),
    /// Still alive after SIGTERM + SIGKILL and the deadlines (should only
    /// happen for a process stuck in uninterruptible sleep).
    StillRunning { identity: ProcessIdentity },
    /// We could not establish either way (e.g. EPERM on kill, /proc
    /// unreadable): the caller quarantines.
    Unprovable {
        identity: ProcessIdentity,
        reason: String,
    },
}

/// Why a `/proc/<pid>/stat` line could not be understood. It is surfaced as an
/// `io::Error` of kind `InvalidData` so that callers see one error type.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
enum StatParseError {
    #[error("no ')' closes the comm field")]
    MissingCommEnd,
    #[error("field {field} ({name}) is missing")]
    MissingField { field: usize, name: &'static str },
    #[error("field {field} ({name}) is not valid: {value:?}")]
    BadField {
        field: usize,
        name: &'static str,
        value: String,
    },
    #[error("the stat line is for pid {found}, not {expected}")]
    PidMismatch { expected: i32, found: i32 },
}

/// One reading of `/proc/<pid>/stat`: the identity plus the scheduler state,
/// which is needed to tell a zombie from a live process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatSnapshot {
    identity: ProcessIdentity,
    state: char,
}

/// Parses the contents of `/proc/<pid>/stat`.
///
/// The comm field (2) is in parentheses and may itself contain spaces and
/// ')' characters (a process can name itself anything, including bytes that
/// are not UTF-8), so the fixed fields are taken from after the LAST ')'.
fn parse_stat(pid: i32, contents: &[u8]) -> Result<StatSnapshot, StatParseError> {
    let close = contents
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(StatParseError::MissingCommEnd)?;

    // Field 1 is the pid, before the comm field; checking it guards against
    // reading a file that is not the one we asked for.
    let head = &contents[..close];
    let pid_end = head
        .iter()
        .position(|&b| b == b' ')
        .ok_or(StatParseError::MissingField {
            field: 1,
            name: "pid",
        })?;
    let found: i32 = parse_field(&head[..pid_end], 1, "pid")?;
    if found != pid {
        return Err(StatParseError::PidMismatch {
            expected: pid,
            found,
        });
    }

    // Everything after the comm field is ASCII; non-UTF-8 here means the file
    // is not a stat line at all.
    let tail =
        std::str::from_utf8(&contents[close + 1..]).map_err(|_| StatParseError::BadField {
            field: 3,
            name: "state",
            value: String::from_utf8_lossy(&contents[close + 1..]).into_owned(),
        })?;
    // Index 0 of the tail is field 3, so field n is at index n - 3.
    let fields: Vec<&str> = tail.split_ascii_whitespace().collect();
    let field = |n: usize, name: &'static str| {
        fields
            .get(n - 3)
            .copied()
            .ok_or(StatParseError::MissingField { field: n, name })
    };

    let state_text = field(3, "state")?;
    let mut state_chars = state_text.chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => {
            return Err(StatParseError::BadField {
                field: 3,
                name: "state",
                value: state_text.to_owned(),
            });
        }
    };
    let pgid: i32 = parse_field(field(5, "pgrp")?.as_bytes(), 5, "pgrp")?;
    let start_time: u64 = parse_field(field(22, "starttime")?.as_bytes(), 22, "starttime")?;

    Ok(StatSnapshot {
        identity: ProcessIdentity {
            pid,
            pgid,
            start_time,
        },
        state,
    })
}

fn parse_field<T: std::str::FromStr>(
    bytes: &[u8],
    field: usize,
    name: &'static str,
) -> Result<T, StatParseError> {
    let bad = || StatParseError::BadField {
        field,
        name,
        value: String::from_utf8_lossy(bytes).into_owned(),
    };
    std::str::from_utf8(bytes)
        .map_err(|_| bad())?
        .parse()
        .map_err(|_| bad())
}

fn read_stat(pid: i32) -> io::Result<StatSnapshot> {
    if pid <= 0 {
        // Pids 0 and below are never processes; `kill` would read them as
        // "my group" or "everyone", so they must never reach a signal call.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        ));
    }
    let contents = std::fs::read(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &contents).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads the identity of `pid` from `/proc/<pid>/stat`.
///
/// Errors with `NotFound` when there is no such process and with
/// `InvalidData` when the stat line cannot be parsed.
pub fn identity_of(pid: i32) -> io::Result<ProcessIdentity> {
    read_stat(pid).map(|snapshot| snapshot.identity)
}

/// How a process was established to be gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DeathMethod {
    Esrch,
    StartTimeChanged,
    Zombie,
    Exited,
}

impl DeathMethod {
    fn as_str(self) -> &'static str {
        match self {
            DeathMethod::Esrch => "esrch",
            DeathMethod::StartTimeChanged => "start_time_changed",
            DeathMethod::Zombie => "zombie",
            DeathMethod::Exited => "exited",
        }
    }
}

/// What one look at a process established.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Observation {
    /// The process with this identity is running; `pgid` is its current group.
    Alive {
        pgid: i32,
    },
    Gone(DeathMethod),
    /// Neither life nor death could be established.
    Unknown(String),
}

fn is_no_such_process(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH)
}

fn classify(id: &ProcessIdentity, snapshot: StatSnapshot) -> Observation {
    if snapshot.identity.start_time != id.start_time {
        Observation::Gone(DeathMethod::StartTimeChanged)
    } else if matches!(snapshot.state, 'Z' | 'X' | 'x') {
        Observation::Gone(DeathMethod::Zombie)
    } else {
        Observation::Alive {
            pgid: snapshot.identity.pgid,
        }
    }
}

/// Looks at the process once, without signalling it.
fn observe(id: &ProcessIdentity) -> Observation {
    if id.pid <= 0 {
        return Observation::Unknown(format!("{} is not a process id", id.pid));
    }
    for _ in 0..PROC_RETRIES {
        match read_stat(id.pid) {
            Ok(snapshot) => return classify(id, snapshot),
            Err(error) if is_no_such_process(&error) => {
                // A missing /proc entry is confirmed with kill(pid, 0), so that
                // a /proc mounted with hidepid (or not mounted) is not taken as
                // proof of death.
                match kill(Pid::from_raw(id.pid), None) {
                    Err(Errno::ESRCH) => return Observation::Gone(DeathMethod::Esrch),
                    // Something holds the pid now: most likely the pid was
                    // recycled between the two calls, so look again.
                    Ok(()) | Err(Errno::EPERM) => continue,
                    Err(errno) => {
                        return Observation::Unknown(format!(
                            "/proc/{}/stat is missing and kill(pid, 0) failed: {errno}",
                            id.pid
                        ));
                    }
                }
            }
            Err(error) => {
                return Observation::Unknown(format!("cannot read /proc/{}/stat: {error}", id.pid));
            }
        }
    }
    Observation::Unknown(format!(
        "/proc/{} is missing but kill(pid, 0) keeps finding a process (is /proc mounted with hidepid?)",
        id.pid
    ))
}

/// Liveness of exactly this process: false if the pid is gone (ESRCH / no
/// /proc entry), if its start time differs (recycled pid), or if it is a
/// zombie (state 'Z' or 'X').
///
/// When neither can be established (for example `/proc` is unreadable) this
/// answers true, because "alive" is the safe assumption for a caller deciding
/// whether the conversation may be touched.
pub fn is_alive(id: &ProcessIdentity) -> bool {
    !matches!(observe(id), Observation::Gone(_))
}

/// Spawns `cmd` in its own process group, with `kill_on_drop(false)` and the
/// caller's stdio untouched, and returns the child together with its identity
/// read from `/proc` right after the spawn.
///
/// No death signal is requested for the child: see the module documentation.
/// If the identity cannot be read, the child's group is killed and the error
/// returned, because a provider the runner cannot identify after a crash must
/// not be left running.
pub fn spawn_provider(cmd: &mut Command) -> io::Result<(Child, ProcessIdentity)> {
    cmd.process_group(0).kill_on_drop(false);
    let mut child = cmd.spawn()?;

    let pid = match child.id().map(i32::try_from) {
        Some(Ok(pid)) if pid > 0 => pid,
        // A freshly spawned child has not been polled, so it cannot have been
        // reaped yet; this only happens if tokio misbehaves. There is no pid
        // to kill, so the child is left to tokio's own cleanup.
        other => {
            return Err(io::Error::other(format!(
                "spawned provider has no usable pid ({other:?})"
            )));
        }
    };

    let identity = identity_of(pid).and_then(|identity| {
        if identity.pgid == pid {
            Ok(identity)
        } else {
            Err(io::Error::other(format!(
                "provider {pid} is in process group {} instead of its own",
                identity.pgid
            )))
        }
    });
    match identity {
        Ok(identity) => Ok((child, identity)),
        Err(error) => {
            // The group was created by process_group(0), so its id is the
            // child's pid; the unreaped child keeps that id from being reused.
            // The leader is signalled directly too in case setpgid failed.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            let _ = child.start_kill();
            // Reap it if it is already dead; otherwise tokio reaps it after
            // the drop, since it is no longer running anything of ours.
            let _ = child.try_wait();
            Err(error)
        }
    }
}

/// Opens a pidfd for `pid`. `Ok(None)` means the kernel has no
/// `pidfd_open` (ENOSYS), and the caller falls back to polling.
fn pidfd_open(pid: i32) -> Result<Option<OwnedFd>, Errno> {
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
fn register_pidfd(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor
    // stays open, refers to the same pidfd and is returned unchanged by
    // as_raw_fd for the AsyncFd's whole lifetime.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
        .map_err(|error| error.into_parts().1)
}

/// Whether the pidfd reports the process as exited right now. A pidfd is
/// readable from the moment the process exits (zombie or reaped).
fn pidfd_exited(fd: &AsyncFd<OwnedFd>) -> bool {
    let mut fds = [PollFd::new(fd.get_ref().as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|revents| revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP)),
        _ => false,
    }
}

/// How exit is observed while waiting for a signalled process.
enum ExitWatch {
    /// A pidfd registered with the runtime: exact, and immune to pid reuse.
    Pidfd(AsyncFd<OwnedFd>),
    /// No pidfd: wait on our own child (which also reaps it) or poll `/proc`.
    Fallback,
}

/// Whether [`stop_with`] may use pidfds; tests turn them off to exercise the
/// fallback that kernels without `pidfd_open` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PidfdUse {
    Prefer,
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "only tests force the fallback path")
    )]
    Never,
}

/// The result of waiting for exit until a deadline.
enum WaitResult {
    Exited(DeathMethod),
    TimedOut,
    Unknown(String),
}

/// Sleeps for the current backoff step (never past `deadline`) and doubles it.
/// Returns false, without sleeping, once the deadline has passed.
async fn backoff(delay: &mut Duration, deadline: Instant) -> bool {
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

async fn wait_for_exit(
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

/// Whether the group id in an identity still names the provider's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupStatus {
    /// The id still names the provider's group (or no group at all), so it
    /// may be signalled.
    Ours,
    /// The id has been reused, which the kernel only does once every member
    /// of the original group is gone.
    ProvablyGone,
    /// Signalling the id might hit someone else's group.
    Unverifiable,
}

/// Decides whether `killpg(id.pgid)` would reach the provider's group.
///
/// Linux does not reuse a number while any process still uses it as a pid or
/// as a process group id, so for a group led by the provider itself the
/// group id stays the provider's as long as the leader (even as a zombie) or
/// any member exists. The one residual risk is a group whose members all died
/// and whose number was reused for a new group whose leader then exited,
/// all after the provider was last seen; that needs the pid space to wrap
/// and is accepted.
fn group_status(id: &ProcessIdentity, saw_member_alive: bool) -> GroupStatus {
    if id.pgid <= 0 || id.pgid == getpgrp().as_raw() {
        // killpg(0) and killpg of our own group would signal the runner itself.
        return GroupStatus::Unverifiable;
    }
    if id.pgid == id.pid {
        return match read_stat(id.pgid) {
            Ok(snapshot) if snapshot.identity.start_time == id.start_time => GroupStatus::Ours,
            Ok(_) => GroupStatus::ProvablyGone,
            Err(error) if is_no_such_process(&error) => GroupStatus::Ours,
            Err(_) => GroupStatus::Unverifiable,
        };
    }
    // The group is led by some other process whose start time we never
    // recorded; it is ours only if we just saw the provider inside it.
    if saw_member_alive {
        GroupStatus::Ours
    } else {
        GroupStatus::Unverifiable
    }
}

/// Kills what is left in the provider's group after the provider itself is
/// gone, reaps our own child, and reports whether the group is verified gone.
async fn sweep_group(
    id: &ProcessIdentity,
    saw_member_alive: bool,
    child: Option<&mut Child>,
    deadline: Instant,
) -> bool {
    // This runs before the child is reaped, so that while the leader is our
    // zombie its number cannot be reused and the SIGKILL cannot go astray.
    let status = group_status(id, saw_member_alive);
    if status == GroupStatus::Ours {
        // Tool subprocesses the provider left in its group die here. ESRCH
        // (empty group) is the expected answer; EPERM shows up as a group
        // that never verifies gone.
        let _ = killpg(Pid::from_raw(id.pgid), Signal::SIGKILL);
    }

    if let Some(child) = child {
        // The provider is proven gone, so waiting returns at once; the
        // deadline only guards against a child reaped behind tokio's back.
        let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    }

    match status {
        GroupStatus::ProvablyGone => return true,
        // Without a way to tell whose group the id names, "gone" can still be
        // proven by ESRCH below, but a live group cannot be blamed on us.
        GroupStatus::Ours | GroupStatus::Unverifiable => {}
    }
    if id.pgid <= 0 {
        return false;
    }

    let mut delay = INITIAL_POLL_INTERVAL;
    loop {
        if killpg(Pid::from_raw(id.pgid), None) == Err(Errno::ESRCH) {
            return true;
        }
        // Members that are already zombies are dead: they wait only for their
        // new parent (often init, which may reap lazily) to collect them, and
        // their numbers cannot be reused meanwhile.
        if only_zombies_in_group(id.pgid) {
            return true;
        }
        if !backoff(&mut delay, deadline).await {
            return false;
        }
    }
}

/// Whether every process in group `pgid` is a zombie, read from `/proc`.
/// Any doubt (an unreadable `/proc`) answers false.
fn only_zombies_in_group(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        match read_stat(pid) {
            Ok(snap) if snap.identity.pgid == pgid && !matches!(snap.state, 'Z' | 'X') => {
                return false;
            }
            Ok(_) => {}
            // The process vanished between the listing and the read.
            Err(e) if is_no_such_process(&e) => {}
            Err(_) => return false,
        }
    }
    true
}

async fn stopped(
    id: &ProcessIdentity,
    method: DeathMethod,
    signals: Vec<String>,
    saw_member_alive: bool,
    child: Option<&mut Child>,
    kill_grace: Duration,
) -> StopOutcome {
    let group_gone = sweep_group(id, saw_member_alive, child, Instant::now() + kill_grace).await;
    StopOutcome::Stopped(StopProof {
        identity: *id,
        method: method.as_str().to_owned(),
        signals,
        group_gone,
        marked: None,
    })
}

/// Stops the process (and its group) identified by `id` and proves it.
///
/// If `child` is Some, it is our own child: it is reaped before returning
/// once its exit is proven. Otherwise (an orphan from a previous runner
/// incarnation) exit is observed with a pidfd, falling back to bounded
/// polling of `/proc` where `pidfd_open` is unavailable.
///
/// The sequence is: if the process is already gone, say how. Otherwise open
/// the pidfd first and then re-check the identity (so a recycled pid is never
/// signalled), send SIGTERM to the group and wait up to `term_grace`; if it is
/// still alive send SIGKILL to the group and wait up to `kill_grace`. Once the
/// process is gone, SIGKILL the group once more (tool subprocesses left in it)
/// and wait up to `kill_grace` for the group to disappear.
pub async fn stop(
    id: &ProcessIdentity,
    child: Option<&mut Child>,
    term_grace: Duration,
    kill_grace: Duration,
) -> StopOutcome {
    stop_with(id, child, term_grace, kill_grace, PidfdUse::Prefer).await
}

async fn stop_with(
    id: &ProcessIdentity,
    mut child: Option<&mut Child>,
    term_grace: Duration,
    kill_grace: Duration,
    pidfd_use: PidfdUse,
) -> StopOutcome {
    let unprovable = |reason: String| StopOutcome::Unprovable {
        identity: *id,
        reason,
    };
    if id.pid <= 0 || id.pgid <= 0 {
        return unprovable(format!(
            "identity has pid {} and pgid {}, which name no single process or group",
            id.pid, id.pgid
        ));
    }
    if u32::try_from(id.pid).is_ok_and(|pid| pid == std::process::id()) {
        return unprovable("identity names the runner itself".to_owned());
    }

    // Waiting on a child that is not the identified process would stall for
    // the whole grace period and prove nothing, so a mismatch is refused.
    if let Some(child_pid) = child.as_deref().and_then(Child::id)
        && i32::try_from(child_pid) != Ok(id.pid)
    {
        return unprovable(format!(
            "the child passed in is pid {child_pid}, not the identified pid {}",
            id.pid
        ));
    }

    match observe(id) {
        Observation::Gone(method) => {
            return stopped(id, method, Vec::new(), false, child, kill_grace).await;
        }
        Observation::Unknown(reason) => return unprovable(reason),
        Observation::Alive { .. } => {}
    }

    // The pidfd is opened before the identity is re-checked: if the check
    // then still matches, the pidfd refers to our process and not to a
    // successor that took its pid in between.
    let watch = match pidfd_use {
        PidfdUse::Never => ExitWatch::Fallback,
        PidfdUse::Prefer => match pidfd_open(id.pid) {
            Ok(Some(fd)) => match register_pidfd(fd) {
                Ok(fd) => ExitWatch::Pidfd(fd),
                Err(_) => ExitWatch::Fallback,
            },
            // ENOSYS, or the process vanished in between (ESRCH, which the
            // re-check below turns into proof), or the pidfd could not be had
            // (EMFILE and the like): polling /proc stays sound in every case.
            Ok(None) | Err(_) => ExitWatch::Fallback,
        },
    };

    let mut signals = Vec::new();
    let mut saw_member_alive = false;
    for (signal, grace) in [(Signal::SIGTERM, term_grace), (Signal::SIGKILL, kill_grace)] {
        // Each signal is preceded by a fresh identity check, so that neither
        // goes to a process that merely inherited the pid.
        let current_pgid = match observe(id) {
            Observation::Alive { pgid } => pgid,
            Observation::Gone(method) => {
                return stopped(id, method, signals, saw_member_alive, child, kill_grace).await;
            }
            Observation::Unknown(reason) => return unprovable(reason),
        };

        let sent = if current_pgid == id.pgid && id.pgid != getpgrp().as_raw() {
            saw_member_alive = true;
            killpg(Pid::from_raw(id.pgid), signal)
        } else {
            // The provider has left the group it was spawned in (or shares the
            // runner's group): signal it alone, and leave the recorded group
            // to the sweep, which checks whose group that id now names.
            kill(Pid::from_raw(id.pid), signal)
        };
        if signal == Signal::SIGTERM && sent.is_ok() {
            // A stopped (SIGSTOP, hung) provider would keep SIGTERM pending
            // forever; SIGCONT lets it act on it now.
            let _ = if current_pgid == id.pgid && id.pgid != getpgrp().as_raw() {
                killpg(Pid::from_raw(id.pgid), Signal::SIGCONT)
            } else {
                kill(Pid::from_raw(id.pid), Signal::SIGCONT)
            };
        }
        match sent {
            Ok(()) => signals.push(signal.as_str().to_owned()),
            // Everyone exited between the check and the signal; the wait
            // below observes that.
            Err(Errno::ESRCH) => {}
            Err(errno) => {
                return unprovable(format!("sending {} failed: {errno}", signal.as_str()));
            }
        }

        match wait_for_exit(id, &watch, &mut child, Instant::now() + grace).await {
            WaitResult::Exited(method) => {
                return stopped(id, method, signals, saw_member_alive, child, kill_grace).await;
            }
            WaitResult::TimedOut => {}
            WaitResult::Unknown(reason) => return unprovable(reason),
        }
    }

    StopOutcome::StillRunning { identity: *id }
}

/// The environment variable carrying a provider's spawn marker. Every
/// process the provider starts inherits it unless it rebuilds its
/// environment, so the runner finds them by it even when it never learned
/// their pids: a runner killed between spawning a provider and recording its
/// identity leaves only the marker in its store.
pub const MARKER_ENV: &str = "RUNNERD_SPAWN_MARKER";

/// What a sweep of a spawn marker found and established.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerSweep {
    pub marker: String,
    /// Live processes found carrying the marker, each sent SIGKILL.
    pub killed: Vec<ProcessIdentity>,
    /// Whether a final scan of `/proc` found no live process with the marker.
    pub gone: bool,
}

/// Live processes (zombies excluded) whose initial environment holds
/// `MARKER_ENV=marker`. Processes whose environment cannot be read (another
/// user's) are not ours and are skipped; an unreadable `/proc` is an error.
pub fn marked_processes(marker: &str) -> io::Result<Vec<ProcessIdentity>> {
    let needle = format!("{MARKER_ENV}={marker}").into_bytes();
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if u32::try_from(pid) == Ok(me) {
            continue;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            // Gone since the listing, or not ours to read.
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == needle.as_slice()) {
            continue;
        }
        match read_stat(pid) {
            Ok(snap) if !matches!(snap.state, 'Z' | 'X') => found.push(snap.identity),
            Ok(_) => {}
            Err(e) if is_no_such_process(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// Kills every live process carrying `marker` until a scan finds none, or
/// `grace` passes (a process that survives SIGKILL, or keeps forking, leaves
/// `gone` false and the caller quarantines). Each SIGKILL follows a fresh
/// identity check, so a recycled pid is never signalled.
pub async fn sweep_marker(marker: &str, grace: Duration) -> MarkerSweep {
    let deadline = Instant::now() + grace;
    let mut killed: Vec<ProcessIdentity> = Vec::new();
    let mut delay = INITIAL_POLL_INTERVAL;
    while let Ok(found) = marked_processes(marker) {
        if found.is_empty() {
            return MarkerSweep {
                marker: marker.to_owned(),
                killed,
                gone: true,
            };
        }
        for id in found {
            if matches!(observe(&id), Observation::Alive { .. }) {
                let _ = kill(Pid::from_raw(id.pid), Signal::SIGKILL);
            }
            if !killed.contains(&id) {
                killed.push(id);
            }
        }
        if !backoff(&mut delay, deadline).await {
            break;
        }
    }
    MarkerSweep {
        marker: marker.to_owned(),
        killed,
        gone: false,
    }
}

/// [`stop`], then the sweep of the provider's spawn marker: the stop is
/// proven only when the provider, its group and every process carrying its
/// marker are gone.
pub async fn stop_marked(
    id: &ProcessIdentity,
    child: Option<&mut Child>,
    marker: Option<&str>,
    term_grace: Duration,
    kill_grace: Duration,
) -> StopOutcome {
    let outcome = stop(id, child, term_grace, kill_grace).await;
    let (mut proof, marker) = match (outcome, marker) {
        (StopOutcome::Stopped(proof), Some(marker)) => (proof, marker),
        (outcome, _) => return outcome,
    };
    let sweep = sweep_marker(marker, kill_grace).await;
    if !sweep.gone {
        return StopOutcome::Unprovable {
            identity: *id,
            reason: format!(
                "{} process(es) carrying its spawn marker could not be proven stopped",
                sweep.killed.len()
            ),
        };
    }
    proof.marked = Some(sweep);
    StopOutcome::Stopped(proof)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};

    const TERM_GRACE: Duration = Duration::from_millis(200);
    const KILL_GRACE: Duration = Duration::from_secs(5);

    fn sleep_cmd() -> Command {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        cmd
    }

    /// Reads one line of the child's stdout; the child prints it only after
    /// reaching the state the test needs.
    async fn first_line(child: &mut Child) -> String {
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .expect("read the child's first line");
        line.trim().to_owned()
    }

    /// Waits, via a pidfd, until the process has exited but is not yet reaped.
    async fn wait_until_zombie(pid: i32) {
        let fd = pidfd_open(pid)
            .expect("pidfd_open")
            .expect("kernel has pidfd_open");
        let fd = register_pidfd(fd).expect("register pidfd");
        loop {
            let mut guard = fd.readable().await.expect("pidfd readable");
            if pidfd_exited(&fd) {
                return;
            }
            guard.clear_ready();
        }
    }

    fn expect_stopped(outcome: StopOutcome) -> StopProof {
        match outcome {
            StopOutcome::Stopped(proof) => proof,
            other => panic!("expected Stopped, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn identity_of_self_is_stable() {
        let pid = i32::try_from(std::process::id()).unwrap();
        let first = identity_of(pid).unwrap();
        let second = identity_of(pid).unwrap();
        assert_eq!(first.pid, pid);
        assert_eq!(first.pgid, getpgrp().as_raw());
        assert!(first.start_time > 0);
        assert_eq!(first, second);
    }

    #[tokio::test]
    async fn spawned_provider_leads_its_own_group() {
        let (mut child, identity) = spawn_provider(&mut sleep_cmd()).unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        assert_eq!(identity.pid, pid);
        assert_eq!(identity.pgid, pid);
        assert!(identity.start_time > 0);
        assert_eq!(identity_of(pid).unwrap(), identity);
        assert!(is_alive(&identity));

        let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.method, "exited");
    }

    #[tokio::test]
    async fn identity_of_missing_pid_errors() {
        // Above the kernel's hard pid limit (4194304), so never a process.
        let error = identity_of(i32::MAX).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            identity_of(0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            identity_of(-1).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// A realistic stat line with the given comm, pgrp and starttime.
    fn stat_line(pid: i32, comm: &[u8], pgrp: i32, start_time: u64) -> Vec<u8> {
        let mut line = format!("{pid} (").into_bytes();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") S 1 {pgrp} {pgrp} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
                 8192000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn parse_stat_splits_after_last_paren() {
        let line = stat_line(4242, b"a) b) c", 4000, 987_654);
        let snapshot = parse_stat(4242, &line).unwrap();
        assert_eq!(
            snapshot,
            StatSnapshot {
                identity: ProcessIdentity {
                    pid: 4242,
                    pgid: 4000,
                    start_time: 987_654,
                },
                state: 'S',
            }
        );

        // A comm that is not UTF-8 and looks like further fields is still
        // skipped as a whole.
        let line = stat_line(7, b"\xff) Z 1 2 3 (", 7, 11);
        let snapshot = parse_stat(7, &line).unwrap();
        assert_eq!(snapshot.state, 'S');
        assert_eq!(snapshot.identity.start_time, 11);
    }

    #[test]
    fn parse_stat_rejects_malformed_lines() {
        assert_eq!(
            parse_stat(1, b"1 (init S 1 1"),
            Err(StatParseError::MissingCommEnd)
        );
        assert_eq!(
            parse_stat(1, b"1 (init) S 1 1 1"),
            Err(StatParseError::MissingField {
                field: 22,
                name: "starttime",
            })
        );
        assert!(matches!(
            parse_stat(2, &stat_line(1, b"init", 1, 5)),
            Err(StatParseError::PidMismatch {
                expected: 2,
                found: 1,
            })
        ));
        let mut line = stat_line(1, b"init", 1, 5);
        let text = String::from_utf8(line.clone())
            .unwrap()
            .replace(" 0 5 ", " 0 five ");
        line = text.into_bytes();
        assert!(matches!(
            parse_stat(1, &line),
            Err(StatParseError::BadField { field: 22, .. })
        ));
    }

    #[tokio::test]
    async fn is_alive_rejects_a_different_start_time() {
        let (mut child, identity) = spawn_provider(&mut sleep_cmd()).unwrap();
        assert!(is_alive(&identity));
        let impostor = ProcessIdentity {
            start_time: identity.start_time + 1,
            ..identity
        };
        assert!(!is_alive(&impostor));
        assert_eq!(
            observe(&impostor),
            Observation::Gone(DeathMethod::StartTimeChanged)
        );
        expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    }

    #[tokio::test]
    async fn is_alive_is_false_for_a_zombie_and_after_reaping() {
        let (mut child, identity) = spawn_provider(&mut Command::new("true")).unwrap();
        wait_until_zombie(identity.pid).await;
        assert_eq!(observe(&identity), Observation::Gone(DeathMethod::Zombie));
        assert!(!is_alive(&identity));

        assert!(child.wait().await.unwrap().success());
        assert!(!is_alive(&identity));
    }

    #[tokio::test]
    async fn stop_of_a_zombie_child_reaps_it_without_signals() {
        let (mut child, identity) = spawn_provider(&mut Command::new("true")).unwrap();
        wait_until_zombie(identity.pid).await;
        let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.method, "zombie");
        assert!(proof.signals.is_empty());
        assert!(proof.group_gone);
        // Reaped by stop: the status is already stored in the child.
        assert!(child.try_wait().unwrap().is_some());
        assert_eq!(observe(&identity), Observation::Gone(DeathMethod::Esrch));
    }

    #[tokio::test]
    async fn stop_own_child_with_sigterm() {
        let (mut child, identity) = spawn_provider(&mut sleep_cmd()).unwrap();
        let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.identity, identity);
        assert_eq!(proof.method, "exited");
        assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
        assert!(proof.group_gone);
        assert!(!is_alive(&identity));
        assert!(
            child.try_wait().unwrap().is_some(),
            "stop reaps our own child"
        );
    }

    /// Spawns a provider that ignores SIGTERM and keeps a `sleep` in its group,
    /// and returns once the trap is installed. Also returns the inner sleep's
    /// pid as printed by the shell.
    async fn spawn_term_ignoring_provider() -> (Child, ProcessIdentity) {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"trap "" TERM; echo ready; while :; do sleep 1; done"#)
            .stdout(Stdio::piped());
        let (mut child, identity) = spawn_provider(&mut cmd).unwrap();
        assert_eq!(first_line(&mut child).await, "ready");
        (child, identity)
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_and_clears_the_group() {
        let (mut child, identity) = spawn_term_ignoring_provider().await;
        let proof = expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.method, "exited");
        assert_eq!(
            proof.signals,
            vec!["SIGTERM".to_owned(), "SIGKILL".to_owned()]
        );
        assert!(proof.group_gone, "the inner sleep must be gone too");
        // Gone means no live member: orphaned members may stay zombies until
        // their new parent reaps them.
        assert!(
            killpg(Pid::from_raw(identity.pgid), None) == Err(Errno::ESRCH)
                || only_zombies_in_group(identity.pgid)
        );
    }

    #[tokio::test]
    async fn stop_escalates_without_pidfd() {
        let (mut child, identity) = spawn_term_ignoring_provider().await;
        let proof = expect_stopped(
            stop_with(
                &identity,
                Some(&mut child),
                TERM_GRACE,
                KILL_GRACE,
                PidfdUse::Never,
            )
            .await,
        );
        assert_eq!(proof.method, "exited");
        assert_eq!(
            proof.signals,
            vec!["SIGTERM".to_owned(), "SIGKILL".to_owned()]
        );
        assert!(proof.group_gone);
    }

    /// Starts `sleep 30` as a grandchild: the shell in between exits, so the
    /// sleep is reparented away from us exactly like a provider orphaned by a
    /// runner crash. It stays in the shell's process group, which is not ours.
    async fn spawn_orphan() -> ProcessIdentity {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("sleep 30 & echo $!")
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .process_group(0);
        let mut shell = cmd.spawn().unwrap();
        let pid: i32 = first_line(&mut shell).await.parse().unwrap();
        assert!(shell.wait().await.unwrap().success());
        let identity = identity_of(pid).unwrap();
        assert_ne!(identity.pgid, getpgrp().as_raw());
        identity
    }

    #[tokio::test]
    async fn stop_orphan_via_pidfd() {
        let identity = spawn_orphan().await;
        assert!(is_alive(&identity));
        let proof = expect_stopped(stop(&identity, None, TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.method, "exited");
        assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
        assert!(!is_alive(&identity));
    }

    #[tokio::test]
    async fn stop_orphan_by_polling() {
        let identity = spawn_orphan().await;
        let proof = expect_stopped(
            stop_with(&identity, None, TERM_GRACE, KILL_GRACE, PidfdUse::Never).await,
        );
        // Polling sees the orphan as a zombie or, once init reaped it, as gone.
        assert!(
            ["zombie", "esrch"].contains(&proof.method.as_str()),
            "{proof:?}"
        );
        assert_eq!(proof.signals, vec!["SIGTERM".to_owned()]);
        assert!(!is_alive(&identity));
    }

    #[tokio::test]
    async fn stop_of_a_reaped_process_sends_nothing() {
        let (mut child, identity) = spawn_provider(&mut Command::new("true")).unwrap();
        assert!(child.wait().await.unwrap().success());
        let proof = expect_stopped(stop(&identity, None, TERM_GRACE, KILL_GRACE).await);
        assert!(
            ["esrch", "start_time_changed"].contains(&proof.method.as_str()),
            "{proof:?}"
        );
        assert!(proof.signals.is_empty());
        assert!(proof.group_gone);
    }

    #[tokio::test]
    async fn stop_of_a_recycled_pid_signals_nobody() {
        // A live process under a different start time stands in for a
        // recycled pid: it must be reported gone and must not be touched.
        let (mut child, identity) = spawn_provider(&mut sleep_cmd()).unwrap();
        let old = ProcessIdentity {
            start_time: identity.start_time - 1,
            ..identity
        };
        let proof = expect_stopped(stop(&old, None, TERM_GRACE, KILL_GRACE).await);
        assert_eq!(proof.method, "start_time_changed");
        assert!(proof.signals.is_empty());
        assert!(proof.group_gone);
        assert!(is_alive(&identity), "the new owner of the pid survives");
        expect_stopped(stop(&identity, Some(&mut child), TERM_GRACE, KILL_GRACE).await);
    }

    #[tokio::test]
    async fn stop_refuses_a_child_that_is_not_the_identified_process() {
        let (mut first, first_id) = spawn_provider(&mut sleep_cmd()).unwrap();
        let (mut second, second_id) = spawn_provider(&mut sleep_cmd()).unwrap();
        assert!(matches!(
            stop(&first_id, Some(&mut second), TERM_GRACE, KILL_GRACE).await,
            StopOutcome::Unprovable { .. }
        ));
        assert!(is_alive(&first_id) && is_alive(&second_id));
        expect_stopped(stop(&first_id, Some(&mut first), TERM_GRACE, KILL_GRACE).await);
        expect_stopped(stop(&second_id, Some(&mut second), TERM_GRACE, KILL_GRACE).await);
    }

    #[tokio::test]
    async fn stop_refuses_identities_that_would_signal_broadly() {
        for (pid, pgid) in [(0, 0), (-1, -1), (5, 0)] {
            let identity = ProcessIdentity {
                pid,
                pgid,
                start_time: 1,
            };
            assert!(matches!(
                stop(&identity, None, TERM_GRACE, KILL_GRACE).await,
                StopOutcome::Unprovable { .. }
            ));
        }
        let me = identity_of(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(matches!(
            stop(&me, None, TERM_GRACE, KILL_GRACE).await,
            StopOutcome::Unprovable { .. }
        ));
    }
}

/// What a provider started in sessions of their own (Codex commands).
pub mod descendants;
