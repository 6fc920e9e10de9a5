//! Tool commands as processes: the allowlisted environment ([`tool_env`]),
//! [`ToolProcess`] (its own process group, a death signal, bounded output,
//! nothing left running when it ends), the native `Bash` tool on top of it,
//! and the layout of a command's output for the model ([`render`]). ACP
//! `terminal/create` commands run through the same [`ToolProcess`].

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt as _};

use super::{Limits, ToolOutput, Workspace};
use crate::supervisor::containment::ToolGroup;

/// The `PATH` a tool shell gets when the runner has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// How long the pipes of a finished command may stay open after its process
/// group was killed; only a process that left the group (`setsid`) can hold
/// them, and its output is then cut off.
const PIPE_DRAIN_MS: u64 = 1000;

/// The environment of a tool shell. It starts empty (`env_clear`), so the
/// credential in the runner's own environment is never inherited; only this
/// allowlist is set, and an entry is dropped if its name is a `scrub` string or
/// its value contains one. `inherited` reads the runner's environment.
pub(crate) fn tool_env(
    ws: &Workspace,
    scrub: &[&str],
    inherited: impl Fn(&str) -> Option<String>,
) -> Vec<(&'static str, String)> {
    let candidates = [
        (
            "PATH",
            Some(inherited("PATH").unwrap_or_else(|| DEFAULT_PATH.to_owned())),
        ),
        ("HOME", Some(ws.root().to_string_lossy().into_owned())),
        ("LANG", inherited("LANG")),
        ("TERM", Some("dumb".to_owned())),
    ];
    candidates
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .filter(|(name, value)| {
            !scrub
                .iter()
                .filter(|s| !s.is_empty())
                .any(|s| s == name || value.contains(s))
        })
        .collect()
}

/// Output of one pipe: the first `cap` bytes and how many there were.
#[derive(Default)]
struct Capture {
    kept: Vec<u8>,
    total: usize,
}

async fn capture(mut pipe: impl AsyncRead + Unpin, into: Arc<Mutex<Capture>>, cap: usize) {
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut c = into.lock().unwrap_or_else(|p| p.into_inner());
                let room = cap.saturating_sub(c.kept.len()).min(n);
                c.kept.extend_from_slice(&chunk[..room]);
                c.total += n;
            }
        }
    }
}

/// Kills the command's process group, and its container when it has one
/// (which also holds what left the group), when dropped unless disarmed,
/// so a cancelled call leaves nothing running. It is disarmed before the
/// shell is reaped: until then the shell's pid, which is the group id,
/// cannot be reused, so the signal cannot reach an unrelated group.
struct GroupGuard(Option<Pid>, Option<ToolGroup>);

impl GroupGuard {
    fn kill_and_disarm(&mut self) {
        if let Some(pgid) = self.0.take() {
            crate::supervisor::kill_group(pgid);
        }
        if let Some(group) = self.1.take() {
            group.kill();
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill_and_disarm();
    }
}

/// Blocks until the child `pid` has exited, without reaping it (`WNOWAIT`).
fn wait_exited(pid: libc::pid_t) {
    loop {
        // SAFETY: siginfo_t is plain data, valid when zeroed; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: a plain system call on our own child with a valid pointer.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// What a tool command does in the child before it executes: join its
/// container (`procs`), take `PR_SET_PDEATHSIG(SIGKILL)`, and check its
/// runner is still its parent.
fn before_exec(cmd: &mut tokio::process::Command, procs: Option<std::os::fd::OwnedFd>) {
    let runner = std::process::id();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe calls without allocating. The death signal is tied to
    // the thread that forks, a runtime worker that lives as long as the
    // runner's runtime; the parent check closes the race with a runner that
    // died before prctl.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(procs) = &procs {
                crate::supervisor::containment::join(procs)?;
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() as u32 != runner {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A tool command the runner started: stdin is null, the environment is
/// exactly what the caller passes (start from [`tool_env`]), the command leads
/// its own process group and gets `PR_SET_PDEATHSIG(SIGKILL)`, so it dies
/// with the runner (whose restart then reports the call `uncertain`), and its
/// stdout and stderr are captured up to a bound each. Dropping it kills the
/// whole group. Native `Bash` and ACP `terminal/create` both run through it.
pub(crate) struct ToolProcess {
    child: tokio::process::Child,
    pid: libc::pid_t,
    group: GroupGuard,
    stdout: Arc<Mutex<Capture>>,
    stderr: Arc<Mutex<Capture>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// What a finished [`ToolProcess`] left.
pub(crate) struct Finished {
    /// The exit status, unless it could not be read.
    pub status: io::Result<ExitStatus>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Whether both pipes reached their end (a process that left the group
    /// can hold them open; its output is then cut off).
    pub drained: bool,
    /// The kept head of stdout and its total length in bytes.
    pub stdout: (Vec<u8>, usize),
    /// The kept head of stderr and its total length in bytes.
    pub stderr: (Vec<u8>, usize),
}

impl ToolProcess {
    /// Starts `program args` in `cwd` with exactly `env`, keeping at most
    /// `output_bytes` of each of stdout and stderr.
    pub(crate) fn spawn(
        program: &str,
        args: &[String],
        cwd: &Path,
        env: Vec<(String, String)>,
        output_bytes: usize,
    ) -> io::Result<ToolProcess> {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // Its container, where runnerd has one: what it starts cannot hide.
        let container = crate::supervisor::containment::get().and_then(|c| c.tool_group());
        let procs = container
            .as_ref()
            .map(|g| g.procs().try_clone())
            .transpose()?;
        before_exec(&mut cmd, procs);
        let spawned =
            crate::supervisor::containment::spawn_own(|| cmd.spawn(), tokio::process::Child::id);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(group) = container {
                    group.kill();
                }
                return Err(e);
            }
        };
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the command exited before it could be watched"))?
            as libc::pid_t;
        let group = GroupGuard(Some(Pid::from_raw(pid)), container);
        let (stdout, stderr) = (
            Arc::new(Mutex::new(Capture::default())),
            Arc::new(Mutex::new(Capture::default())),
        );
        let mut readers = Vec::new();
        if let Some(p) = child.stdout.take() {
            readers.push(tokio::spawn(capture(p, stdout.clone(), output_bytes)));
        }
        if let Some(p) = child.stderr.take() {
            readers.push(tokio::spawn(capture(p, stderr.clone(), output_bytes)));
        }
        Ok(ToolProcess {
            child,
            pid,
            group,
            stdout,
            stderr,
            readers,
        })
    }

    /// Kills the whole process group now.
    pub(crate) fn kill(&mut self) {
        self.group.kill_and_disarm();
    }

    /// Waits for the command to exit, at most `timeout`; then (or at once
    /// after its exit) kills its whole group, so nothing it started keeps
    /// running, and collects its output.
    pub(crate) async fn finish(mut self, timeout: Duration) -> Finished {
        let pid = self.pid;
        let exited = tokio::task::spawn_blocking(move || wait_exited(pid));
        let timed_out = tokio::time::timeout(timeout, exited).await.is_err();
        self.group.kill_and_disarm();
        let status = self.child.wait().await;
        let mut drained = true;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(PIPE_DRAIN_MS);
        for reader in std::mem::take(&mut self.readers) {
            let abort = reader.abort_handle();
            if tokio::time::timeout_at(deadline, reader).await.is_err() {
                abort.abort();
                drained = false;
            }
        }
        let lock = |c: &Arc<Mutex<Capture>>| {
            let c = c.lock().unwrap_or_else(|p| p.into_inner());
            (c.kept.clone(), c.total)
        };
        Finished {
            status,
            timed_out,
            drained,
            stdout: lock(&self.stdout),
            stderr: lock(&self.stderr),
        }
    }
}

/// Runs `sh -c command` in the workspace as a [`ToolProcess`] with the
/// [`tool_env`] environment. When the shell exits, or the timeout expires,
/// the whole group is killed: a call leaves nothing running behind.
pub(super) async fn bash(
    ws: &Workspace,
    command: &str,
    limits: &Limits,
    scrub: &[&str],
) -> ToolOutput {
    if command.trim().is_empty() {
        return ToolOutput::failure("the command is empty");
    }
    let env = owned(tool_env(ws, scrub, |name| std::env::var(name).ok()));
    let args = ["-c".to_owned(), command.to_owned()];
    // The workspace through runnerd's descriptor of it: a workspace renamed
    // or replaced by a link since cannot redirect the shell.
    let cwd = ws.dir_path();
    let process = match ToolProcess::spawn("/bin/sh", &args, &cwd, env, limits.output_bytes) {
        Ok(p) => p,
        Err(e) => return ToolOutput::failure(format!("cannot start /bin/sh: {e}")),
    };
    let done = process.finish(limits.bash_timeout).await;
    let status_line = match (&done.status, done.timed_out) {
        (_, true) => format!(
            "timed out after {} ms; the command's process group was killed",
            limits.bash_timeout.as_millis()
        ),
        (Ok(s), false) => describe(*s),
        (Err(e), false) => format!("exit status unknown: {e}"),
    };
    let ok = !done.timed_out && matches!(&done.status, Ok(s) if s.success());
    let status_line = with_drain_note(status_line, done.drained);
    let (output, _) = render(
        done.stdout,
        done.stderr,
        Some(&status_line),
        limits.output_bytes,
    );
    ToolOutput { ok, output }
}

/// `status` with a note when a process outside the group kept the pipes open.
pub(crate) fn with_drain_note(mut status: String, drained: bool) -> String {
    if !drained {
        status.push_str(
            "; output may be incomplete: a process outside the group kept the pipes open",
        );
    }
    status
}

/// An environment as owned pairs, as [`ToolProcess::spawn`] takes it.
pub(crate) fn owned(env: Vec<(&'static str, String)>) -> Vec<(String, String)> {
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status: {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exit status unknown".to_owned(),
    }
}

pub(super) const STDERR_LABEL: &str = "\n--- stderr ---\n";

/// Lays out a command's output: stdout, then `STDERR_LABEL` and stderr if
/// there was any, then the status line (if any) on its own line, within
/// `bound` bytes. The label and the status line are always kept; stdout and
/// stderr share what is left, each cut with a marker if it does not fit
/// (neither takes more than half unless the other needs less). The flag says
/// whether anything was cut.
pub(crate) fn render(
    stdout: (Vec<u8>, usize),
    stderr: (Vec<u8>, usize),
    status: Option<&str>,
    bound: usize,
) -> (String, bool) {
    let has_stderr = stderr.1 > 0;
    let fixed = status.map_or(0, |s| s.len() + 1) + if has_stderr { STDERR_LABEL.len() } else { 0 };
    let room = bound.saturating_sub(fixed);
    let need = |(kept, total): &(Vec<u8>, usize)| {
        if kept.len() == *total {
            String::from_utf8_lossy(kept).len()
        } else {
            usize::MAX
        }
    };
    let (out_need, err_need) = (need(&stdout), need(&stderr));
    let half = room / 2;
    let (out_room, err_room) = if out_need <= half {
        (out_need, room - out_need)
    } else if err_need <= half {
        (room - err_need, err_need)
    } else {
        (half, room - half)
    };
    let truncated = out_need > out_room || err_need > err_room;
    let mut text = clip(&stdout.0, stdout.1, out_room);
    if has_stderr {
        text.push_str(STDERR_LABEL);
        text.push_str(&clip(&stderr.0, stderr.1, err_room));
    }
    if let Some(status) = status {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(status);
    }
    (text, truncated)
}

/// The head of a stream of `total` bytes whose first bytes are `kept`, as
/// text of at most `room` bytes: all of it if it fits, else as much as fits
/// followed by `\n[… N bytes truncated]`.
pub(super) fn clip(kept: &[u8], total: usize, room: usize) -> String {
    let whole = String::from_utf8_lossy(kept);
    if kept.len() == total && whole.len() <= room {
        return whole.into_owned();
    }
    let marker = |n: usize| format!("\n[… {n} bytes truncated]");
    let room = room.saturating_sub(marker(total).len());
    let mut text = String::new();
    let mut consumed = 0;
    'chunks: for chunk in kept.utf8_chunks() {
        for c in chunk.valid().chars() {
            if text.len() + c.len_utf8() > room {
                break 'chunks;
            }
            text.push(c);
            consumed += c.len_utf8();
        }
        if !chunk.invalid().is_empty() {
            if text.len() + char::REPLACEMENT_CHARACTER.len_utf8() > room {
                break;
            }
            text.push(char::REPLACEMENT_CHARACTER);
            consumed += chunk.invalid().len();
        }
    }
    text.push_str(&marker(total - consumed));
    text
}
