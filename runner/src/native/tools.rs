//! The tools the runner executes itself for the native OpenAI-Responses
//! profile: `Read`, `Write`, `Edit` and `Bash`. This file defines them for the
//! model ([`definitions`]), parses a Responses `function_call` into a [`Tool`]
//! ([`Tool::parse`]) and executes it inside a [`Workspace`] under [`Limits`]
//! ([`Tool::execute`]), producing the text that goes back to the model as the
//! call's `function_call_output`.
//!
//! Every failure is a [`ToolOutput`] with `ok: false` and a specific message,
//! never a panic: whatever the model asks for is data. Every input and output
//! is bounded, and a bound that is exceeded is reported, never silently
//! truncated, except for a command's output, which is cut with a visible
//! marker because the command has already run.
//!
//! It deliberately does not persist anything or decide whether a call may run:
//! the engine marks a call `executing` before [`Tool::execute`] and records
//! the outcome after it (DESIGN §3.4 rule 4). It is not an OS sandbox: the
//! file tools are confined by path resolution (so neither `..` nor a symlink
//! leads out of the workspace), but `Bash` runs with the runner's privileges
//! and its working directory is merely the workspace. What `Bash` is
//! guaranteed not to get is the credential: its environment is built from an
//! empty one, so nothing the runner holds in its own environment is inherited.

use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _};

pub use crate::workspace::{Workspace, WorkspaceError};
use crate::workspace::{open_regular, read_bounded, replace_atomically};

/// The bounds every tool call runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest file `Read` returns; a larger one is an error.
    pub read_bytes: usize,
    /// The largest file `Edit` works on, and the largest `Write` content,
    /// `old_string`, `new_string` and edited file.
    pub edit_bytes: usize,
    /// The largest `Bash` output returned to the model (stdout, stderr,
    /// labels and status line together); more is cut with a marker.
    pub output_bytes: usize,
    /// How long a `Bash` command may run before its process group is killed.
    pub bash_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_bytes: 64 * 1024,
            edit_bytes: 64 * 1024,
            output_bytes: 32 * 1024,
            bash_timeout: Duration::from_secs(30),
        }
    }
}

/// A tool call as the model made it, parsed and typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// Return a UTF-8 text file.
    Read { path: String },
    /// Create or replace a file with `content`.
    Write { path: String, content: String },
    /// Replace the one occurrence of `old` in a file by `new`.
    Edit {
        path: String,
        old: String,
        new: String,
    },
    /// Run `sh -c command` in the workspace.
    Bash { command: String },
}

/// Why a `function_call` is not a tool call; the message reads after "failed to …"
/// and is what the model gets back as the call's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool {name:?}; the tools are Read, Write, Edit and Bash")]
    UnknownTool { name: String },
    #[error("the arguments of {tool} are not valid JSON: {reason}")]
    InvalidJson { tool: &'static str, reason: String },
    #[error("the arguments of {tool} must be a JSON object, not {found}")]
    NotAnObject {
        tool: &'static str,
        found: &'static str,
    },
    #[error("{tool} is missing the string argument {field:?}")]
    MissingField {
        tool: &'static str,
        field: &'static str,
    },
    #[error("the argument {field:?} of {tool} must be a string, not {found}")]
    WrongType {
        tool: &'static str,
        field: &'static str,
        found: &'static str,
    },
    #[error("{tool} has no argument {field:?}; its arguments are {expected}")]
    UnexpectedField {
        tool: &'static str,
        field: String,
        expected: String,
    },
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
}

/// What a tool call returns to the model as its `function_call_output`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Whether the call did what was asked (for `Bash`: exit status 0).
    pub ok: bool,
    /// The text the model sees; errors start with `error: `.
    pub output: String,
}

impl ToolOutput {
    fn success(output: String) -> ToolOutput {
        ToolOutput { ok: true, output }
    }

    fn failure(message: impl std::fmt::Display) -> ToolOutput {
        ToolOutput {
            ok: false,
            output: format!("error: {message}"),
        }
    }
}

impl From<ToolError> for ToolOutput {
    fn from(e: ToolError) -> ToolOutput {
        ToolOutput::failure(e)
    }
}

/// The four tools as entries of a Responses request's `tools` array, in strict
/// mode (every property required, no others allowed).
pub fn definitions() -> Value {
    let string = |description: &str| json!({ "type": "string", "description": description });
    let function = |name: &str, description: &str, properties: Vec<(&str, Value)>| {
        let required: Vec<&str> = properties.iter().map(|(k, _)| *k).collect();
        let properties: Map<String, Value> = properties
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        json!({
            "type": "function",
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            },
            "strict": true,
        })
    };
    json!([
        function(
            "Read",
            "Read a UTF-8 text file in the workspace. Files over the read limit are refused; use Bash (head, sed -n) for parts of large files.",
            vec![(
                "path",
                string("File path, relative to the workspace or absolute inside it.")
            )],
        ),
        function(
            "Write",
            "Create or replace a file in the workspace with the given content, creating parent directories. The replacement is atomic.",
            vec![
                (
                    "path",
                    string("File path, relative to the workspace or absolute inside it.")
                ),
                ("content", string("The complete new content of the file.")),
            ],
        ),
        function(
            "Edit",
            "Replace exactly one occurrence of old_string in a workspace file with new_string. Fails if old_string occurs zero or several times; include surrounding lines to make it unique.",
            vec![
                (
                    "path",
                    string("File path, relative to the workspace or absolute inside it.")
                ),
                (
                    "old_string",
                    string("The exact text to replace; it must occur exactly once.")
                ),
                ("new_string", string("The text to put in its place.")),
            ],
        ),
        function(
            "Bash",
            "Run a shell command (sh -c) in the workspace directory with no input and a timeout. Returns stdout, then stderr in a labeled section, then the exit status.",
            vec![("command", string("The shell command to run."))],
        ),
    ])
}

/// The tool kinds, so that parsing names its fields in one place.
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Edit,
    Bash,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        match name {
            "Read" => Some(Kind::Read),
            "Write" => Some(Kind::Write),
            "Edit" => Some(Kind::Edit),
            "Bash" => Some(Kind::Bash),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Read => "Read",
            Kind::Write => "Write",
            Kind::Edit => "Edit",
            Kind::Bash => "Bash",
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            Kind::Read => &["path"],
            Kind::Write => &["path", "content"],
            Kind::Edit => &["path", "old_string", "new_string"],
            Kind::Bash => &["command"],
        }
    }
}

impl Tool {
    /// Parses a Responses `function_call`: `name` is one of `Read`, `Write`,
    /// `Edit`, `Bash` (case-sensitive) and `arguments` is its JSON-encoded
    /// argument object, with exactly the fields of [`definitions`].
    pub fn parse(name: &str, arguments: &str) -> Result<Tool, ToolError> {
        let kind = Kind::of(name).ok_or_else(|| ToolError::UnknownTool {
            name: name.to_owned(),
        })?;
        let tool = kind.name();
        let value: Value = serde_json::from_str(arguments).map_err(|e| ToolError::InvalidJson {
            tool,
            reason: e.to_string(),
        })?;
        let mut object = match value {
            Value::Object(o) => o,
            other => {
                return Err(ToolError::NotAnObject {
                    tool,
                    found: json_type(&other),
                });
            }
        };
        // The smallest unexpected name, so the message does not depend on
        // the map's iteration order.
        if let Some(field) = object
            .keys()
            .filter(|k| !kind.fields().contains(&k.as_str()))
            .min()
        {
            return Err(ToolError::UnexpectedField {
                tool,
                field: field.clone(),
                expected: kind.fields().join(", "),
            });
        }
        let mut take = |field: &'static str| match object.remove(field) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(ToolError::WrongType {
                tool,
                field,
                found: json_type(&other),
            }),
            None => Err(ToolError::MissingField { tool, field }),
        };
        Ok(match kind {
            Kind::Read => Tool::Read {
                path: take("path")?,
            },
            Kind::Write => Tool::Write {
                path: take("path")?,
                content: take("content")?,
            },
            Kind::Edit => Tool::Edit {
                path: take("path")?,
                old: take("old_string")?,
                new: take("new_string")?,
            },
            Kind::Bash => Tool::Bash {
                command: take("command")?,
            },
        })
    }

    /// The tool's name as the model calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Tool::Read { .. } => "Read",
            Tool::Write { .. } => "Write",
            Tool::Edit { .. } => "Edit",
            Tool::Bash { .. } => "Bash",
        }
    }

    /// Whether running the call can change anything; such a call must be
    /// durably `executing` before it runs and is never run twice.
    pub fn has_effect(&self) -> bool {
        !matches!(self, Tool::Read { .. })
    }

    /// Runs the call. Every outcome, including a refusal, is a [`ToolOutput`];
    /// any occurrence of a non-empty `scrub` string in the output is masked
    /// with `*` of the same length. `Bash` additionally never sees a variable
    /// named in `scrub` or a value containing a `scrub` string.
    pub async fn execute(&self, ws: &Workspace, limits: &Limits, scrub: &[&str]) -> ToolOutput {
        let mut out = match self {
            Tool::Bash { command } => bash(ws, command, limits, scrub).await,
            file_tool => {
                let (tool, ws, limits) = (file_tool.clone(), ws.clone(), *limits);
                match tokio::task::spawn_blocking(move || tool.run_file_tool(&ws, &limits)).await {
                    Ok(Ok(text)) => ToolOutput::success(text),
                    Ok(Err(message)) => ToolOutput::failure(message),
                    Err(e) => {
                        ToolOutput::failure(format!("the {} tool did not finish: {e}", self.name()))
                    }
                }
            }
        };
        out.output = mask(&out.output, scrub);
        out
    }

    /// The file tools, on a blocking thread.
    fn run_file_tool(&self, ws: &Workspace, limits: &Limits) -> Result<String, String> {
        match self {
            Tool::Read { path } => read(ws, path, limits),
            Tool::Write { path, content } => write(ws, path, content, limits),
            Tool::Edit { path, old, new } => edit(ws, path, old, new, limits),
            Tool::Bash { .. } => Err("Bash is not a file tool".to_owned()),
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Masks every occurrence of a non-empty `scrub` string, keeping the length so
/// that output bounds still hold.
pub(crate) fn mask(text: &str, scrub: &[&str]) -> String {
    let mut text = text.to_owned();
    for s in scrub.iter().filter(|s| !s.is_empty()) {
        if text.contains(s) {
            text = text.replace(s, &"*".repeat(s.len()));
        }
    }
    text
}

fn read(ws: &Workspace, path: &str, limits: &Limits) -> Result<String, String> {
    ws.read_text(path, limits.read_bytes).map_err(|e| {
        if e.contains("over the read limit") {
            format!("{e}; use Bash (head, sed -n) to see part of it")
        } else {
            e
        }
    })
}

fn write(ws: &Workspace, path: &str, content: &str, limits: &Limits) -> Result<String, String> {
    ws.write_text(path, content, limits.edit_bytes)
}

fn edit(
    ws: &Workspace,
    path: &str,
    old: &str,
    new: &str,
    limits: &Limits,
) -> Result<String, String> {
    let limit = limits.edit_bytes;
    if old.is_empty() {
        return Err("old_string is empty; use Write to create or replace a whole file".to_owned());
    }
    for (name, s) in [("old_string", old), ("new_string", new)] {
        if s.len() > limit {
            return Err(format!(
                "{name} is {} bytes, over the edit limit of {limit} bytes",
                s.len()
            ));
        }
    }
    let real = ws.resolve(path)?;
    let (file, len) = open_regular(&real, path)?;
    let mode = file
        .metadata()
        .map_err(|e| format!("cannot inspect {path}: {e}"))?
        .permissions()
        .mode()
        & 0o7777;
    let text = read_bounded(file, len, path, limit, "edit")?;
    let at = match count_matches(&text, old) {
        0 => return Err(format!("{path}: old_string not found")),
        1 => text.find(old).unwrap_or_default(),
        n => {
            return Err(format!(
                "{path}: old_string has {n} matches; make old_string unique"
            ));
        }
    };
    let edited = [&text[..at], new, &text[at + old.len()..]].concat();
    if edited.len() > limit {
        return Err(format!(
            "the edited {path} would be {} bytes, over the edit limit of {limit} bytes",
            edited.len()
        ));
    }
    replace_atomically(&real, edited.as_bytes(), Some(mode))
        .map_err(|e| format!("cannot write {path}: {e}"))?;
    Ok(format!(
        "edited {path}: replaced 1 occurrence ({} bytes, was {})",
        edited.len(),
        text.len()
    ))
}

/// Counts occurrences of `needle`, overlapping ones included: `aa` occurs
/// twice in `aaa`, and replacing "the" one would be a guess.
fn count_matches(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(i) = haystack[from..].find(needle) {
        count += 1;
        let at = from + i;
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    count
}

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

/// Kills the command's process group when dropped unless disarmed, so a
/// cancelled call leaves nothing running. It is disarmed before the shell is
/// reaped: until then the shell's pid, which is the group id, cannot be
/// reused, so the signal cannot reach an unrelated group.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill_and_disarm(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH: the group is already empty.
            let _ = killpg(pgid, Signal::SIGKILL);
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
        let runner = std::process::id();
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe calls without allocating. The death signal is tied to
        // the thread that forks, a runtime worker that lives as long as the
        // runner's runtime; the parent check closes the race with a runner that
        // died before prctl.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() as u32 != runner {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the command exited before it could be watched"))?
            as libc::pid_t;
        let group = GroupGuard(Some(Pid::from_raw(pid)));
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
async fn bash(ws: &Workspace, command: &str, limits: &Limits, scrub: &[&str]) -> ToolOutput {
    if command.trim().is_empty() {
        return ToolOutput::failure("the command is empty");
    }
    let env = owned(tool_env(ws, scrub, |name| std::env::var(name).ok()));
    let args = ["-c".to_owned(), command.to_owned()];
    let process = match ToolProcess::spawn("/bin/sh", &args, ws.root(), env, limits.output_bytes) {
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

const STDERR_LABEL: &str = "\n--- stderr ---\n";

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
fn clip(kept: &[u8], total: usize, room: usize) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs::Permissions;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;
    use std::time::Instant;

    use tempfile::TempDir;

    /// A workspace inside a temporary directory, with room for an outside.
    struct Fx {
        dir: TempDir,
        ws: Workspace,
    }

    impl Fx {
        fn new() -> Fx {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::create_dir(dir.path().join("ws")).expect("mkdir ws");
            let ws = Workspace::new(dir.path().join("ws")).expect("workspace");
            Fx { dir, ws }
        }

        /// A path next to the workspace, outside it.
        fn outside(&self, name: &str) -> PathBuf {
            self.dir
                .path()
                .canonicalize()
                .expect("canonical")
                .join(name)
        }

        fn at(&self, rel: &str) -> PathBuf {
            self.ws.root().join(rel)
        }

        fn put(&self, rel: &str, bytes: &[u8]) {
            let p = self.at(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, bytes).expect("write fixture");
        }

        async fn run(&self, tool: Tool) -> ToolOutput {
            self.run_with(tool, Limits::default()).await
        }

        async fn run_with(&self, tool: Tool, limits: Limits) -> ToolOutput {
            tool.execute(&self.ws, &limits, &[]).await
        }
    }

    fn read(path: &str) -> Tool {
        Tool::Read { path: path.into() }
    }

    fn write(path: &str, content: &str) -> Tool {
        Tool::Write {
            path: path.into(),
            content: content.into(),
        }
    }

    fn edit(path: &str, old: &str, new: &str) -> Tool {
        Tool::Edit {
            path: path.into(),
            old: old.into(),
            new: new.into(),
        }
    }

    fn bash(command: &str) -> Tool {
        Tool::Bash {
            command: command.into(),
        }
    }

    fn limits(f: impl FnOnce(&mut Limits)) -> Limits {
        let mut l = Limits::default();
        f(&mut l);
        l
    }

    #[track_caller]
    fn assert_err(out: &ToolOutput, fragments: &[&str]) {
        assert!(!out.ok, "expected an error, got {out:?}");
        assert!(out.output.starts_with("error: "), "{out:?}");
        for f in fragments {
            assert!(out.output.contains(f), "{:?} lacks {f:?}", out.output);
        }
    }

    /// Every entry of a directory, recursively, with its content, so a test can
    /// say "the file system was not touched".
    fn tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).expect("read_dir") {
                let p = e.expect("entry").path();
                let m = std::fs::symlink_metadata(&p).expect("lstat");
                if m.is_dir() {
                    stack.push(p.clone());
                    out.push((p, None));
                } else if m.is_file() {
                    let bytes = std::fs::read(&p).expect("read");
                    out.push((p, Some(bytes)));
                } else {
                    out.push((p, None));
                }
            }
        }
        out.sort();
        out
    }

    // ---- parsing and definitions ----

    #[test]
    fn parse_accepts_each_tool() {
        let cases = [
            ("Read", r#"{"path":"a"}"#, read("a")),
            ("Write", r#"{"path":"a","content":"x"}"#, write("a", "x")),
            (
                "Edit",
                r#"{"path":"a","old_string":"o","new_string":"n"}"#,
                edit("a", "o", "n"),
            ),
            ("Bash", r#"{"command":"ls"}"#, bash("ls")),
        ];
        for (name, args, want) in cases {
            assert_eq!(Tool::parse(name, args), Ok(want), "{name} {args}");
        }
    }

    #[test]
    fn parse_errors_are_specific() {
        let cases: [(&str, &str, &str); 7] = [
            (
                "read",
                r#"{"path":"a"}"#,
                r#"unknown tool "read"; the tools are Read, Write, Edit and Bash"#,
            ),
            (
                "Read",
                "{",
                "the arguments of Read are not valid JSON: EOF while parsing an object at line 1 column 1",
            ),
            (
                "Read",
                r#"["a"]"#,
                "the arguments of Read must be a JSON object, not an array",
            ),
            (
                "Write",
                r#"{"path":"a"}"#,
                r#"Write is missing the string argument "content""#,
            ),
            (
                "Edit",
                r#"{"path":"a","old_string":1,"new_string":"n"}"#,
                r#"the argument "old_string" of Edit must be a string, not a number"#,
            ),
            (
                "Bash",
                r#"{"command":"ls","cwd":"/"}"#,
                r#"Bash has no argument "cwd"; its arguments are command"#,
            ),
            (
                "Edit",
                r#"{"path":"a","old":"o","new":"n"}"#,
                r#"Edit has no argument "new"; its arguments are path, old_string, new_string"#,
            ),
        ];
        for (name, args, want) in cases {
            let got = Tool::parse(name, args).expect_err("must fail").to_string();
            assert_eq!(got, want, "{name} {args}");
        }
    }

    #[test]
    fn parse_error_becomes_failed_output() {
        let out = ToolOutput::from(Tool::parse("Nope", "{}").expect_err("unknown"));
        assert_err(&out, &["unknown tool \"Nope\""]);
    }

    #[test]
    fn definitions_match_the_parser() {
        let defs = definitions();
        let defs = defs.as_array().expect("array");
        let names: Vec<&str> = defs
            .iter()
            .map(|d| d["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["Read", "Write", "Edit", "Bash"]);
        for d in defs {
            assert_eq!(d["type"], "function");
            assert_eq!(d["strict"], true);
            assert!(d["description"].as_str().is_some_and(|s| !s.is_empty()));
            let params = &d["parameters"];
            assert_eq!(params["additionalProperties"], false);
            // Key order depends on serde_json's `preserve_order`, which other
            // crates of the workspace switch on: compare as sorted sets.
            let mut props: Vec<&String> = params["properties"]
                .as_object()
                .expect("props")
                .keys()
                .collect();
            props.sort();
            let required: Vec<&str> = params["required"]
                .as_array()
                .expect("required")
                .iter()
                .map(|v| v.as_str().expect("str"))
                .collect();
            let mut sorted_required = required.clone();
            sorted_required.sort();
            assert_eq!(
                props, sorted_required,
                "strict mode requires every property"
            );
            // Arguments built from the schema parse.
            let args: Map<String, Value> = required
                .iter()
                .map(|k| (k.to_string(), json!("x")))
                .collect();
            let name = d["name"].as_str().expect("name");
            let tool = Tool::parse(name, &Value::Object(args).to_string()).expect("parses");
            assert_eq!(tool.name(), name);
        }
    }

    #[test]
    fn only_read_has_no_effect() {
        assert!(!read("a").has_effect());
        assert!(write("a", "").has_effect());
        assert!(edit("a", "o", "n").has_effect());
        assert!(bash("true").has_effect());
    }

    #[test]
    fn workspace_must_be_a_directory() {
        let fx = Fx::new();
        let file = fx.outside("file");
        std::fs::write(&file, "x").expect("write");
        let err = Workspace::new(&file).expect_err("a file");
        assert!(err.to_string().contains("is not a directory"), "{err}");
        let err = Workspace::new(fx.outside("missing")).expect_err("missing");
        assert!(err.to_string().contains("No such file"), "{err}");
    }

    // ---- confinement ----

    #[tokio::test]
    async fn escapes_are_refused_and_touch_nothing() {
        let fx = Fx::new();
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let elsewhere_path = elsewhere.path().canonicalize().expect("canonical");
        std::fs::write(elsewhere_path.join("secret"), "outside").expect("write");
        symlink(&elsewhere_path, fx.at("linkdir")).expect("symlink dir");
        symlink(elsewhere_path.join("secret"), fx.at("linkfile")).expect("symlink file");
        symlink(elsewhere_path.join("created"), fx.at("dangling")).expect("symlink dangling");
        fx.put("a/keep", b"keep");
        let before = (tree(fx.dir.path()), tree(&elsewhere_path));
        let ws = fx.ws.root().display().to_string();
        let cases = [
            (read("../x"), "../x"),
            (write("../x", "x"), "../x"),
            (read("/etc/passwd"), "/etc/passwd"),
            (write("/etc/passwd", "x"), "/etc/passwd"),
            (write("a/../../x", "x"), "a/../../x"),
            (write("missing/../../x", "x"), "missing/../../x"),
            (read("linkdir/secret"), "linkdir/secret"),
            (write("linkdir/new", "x"), "linkdir/new"),
            (write("linkdir/sub/new", "x"), "linkdir/sub/new"),
            (edit("linkdir/secret", "outside", "x"), "linkdir/secret"),
            (read("linkfile"), "linkfile"),
            (write("linkfile", "x"), "linkfile"),
            (edit("linkfile", "outside", "x"), "linkfile"),
        ];
        for (tool, path) in cases {
            let out = fx.run(tool.clone()).await;
            assert_err(
                &out,
                &[&format!("the path {path} is outside the workspace {ws}")],
            );
        }
        let out = fx.run(write("dangling", "x")).await;
        assert_err(&out, &["dangling", "is a symbolic link to nothing"]);
        let out = fx.run(write("dangling/x", "x")).await;
        assert_err(&out, &["is a symbolic link to nothing"]);
        assert_eq!((tree(fx.dir.path()), tree(&elsewhere_path)), before);
    }

    #[tokio::test]
    async fn paths_inside_are_accepted() {
        let fx = Fx::new();
        fx.put("a/f", b"one");
        symlink(fx.at("a"), fx.at("inner-link")).expect("symlink");
        let abs = fx.at("a/f").display().to_string();
        for p in ["a/f", "./a/f", "a/../a/f", abs.as_str(), "inner-link/f"] {
            assert_eq!(
                fx.run(read(p)).await,
                ToolOutput::success("one".into()),
                "{p}"
            );
        }
        assert_eq!(fx.ws.resolve("new/dir/f"), Ok(fx.at("new/dir/f")));
        assert!(fx.ws.resolve("").is_err());
    }

    // ---- Read ----

    #[tokio::test]
    async fn read_is_bounded_exactly() {
        let fx = Fx::new();
        let l = limits(|l| l.read_bytes = 10);
        fx.put("ten", b"0123456789");
        fx.put("eleven", b"0123456789a");
        assert_eq!(
            fx.run_with(read("ten"), l).await,
            ToolOutput::success("0123456789".into())
        );
        let out = fx.run_with(read("eleven"), l).await;
        assert_err(
            &out,
            &["eleven is 11 bytes, over the read limit of 10 bytes"],
        );
    }

    #[tokio::test]
    async fn read_refuses_what_is_not_text_in_a_file() {
        let fx = Fx::new();
        fx.put("bin", b"ok\xff\xfe");
        std::fs::create_dir(fx.at("dir")).expect("mkdir");
        assert_err(
            &fx.run(read("bin")).await,
            &["bin is not UTF-8 text (invalid byte at offset 2)"],
        );
        assert_err(&fx.run(read("dir")).await, &["dir is not a regular file"]);
        assert_err(
            &fx.run(read("nope")).await,
            &["cannot open nope", "No such file"],
        );
        let fifo = std::ffi::CString::new(fx.at("fifo").into_os_string().into_encoded_bytes())
            .expect("cstr");
        // SAFETY: a plain system call with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_err(&fx.run(read("fifo")).await, &["fifo is not a regular file"]);
    }

    // ---- Write ----

    #[tokio::test]
    async fn write_creates_dirs_and_private_files_atomically() {
        let fx = Fx::new();
        let out = fx.run(write("deep/er/f.txt", "hello")).await;
        assert_eq!(
            out,
            ToolOutput::success("created deep/er/f.txt (5 bytes)".into())
        );
        assert_eq!(
            std::fs::read(fx.at("deep/er/f.txt")).expect("read"),
            b"hello"
        );
        let mode = std::fs::metadata(fx.at("deep/er/f.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Replacing keeps the file's own permissions and leaves no temporary file.
        std::fs::set_permissions(fx.at("deep/er/f.txt"), Permissions::from_mode(0o755))
            .expect("chmod");
        let out = fx.run(write("deep/er/f.txt", "bye")).await;
        assert_eq!(
            out,
            ToolOutput::success("replaced deep/er/f.txt (3 bytes)".into())
        );
        let mode = std::fs::metadata(fx.at("deep/er/f.txt"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        let names: Vec<_> = std::fs::read_dir(fx.at("deep/er"))
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert_eq!(names, ["f.txt"]);
    }

    #[tokio::test]
    async fn write_is_bounded_exactly() {
        let fx = Fx::new();
        let l = limits(|l| l.edit_bytes = 4);
        assert!(fx.run_with(write("ok", "abcd"), l).await.ok);
        let out = fx.run_with(write("big", "abcde"), l).await;
        assert_err(
            &out,
            &["the content is 5 bytes, over the write limit of 4 bytes"],
        );
        assert!(!fx.at("big").exists());
    }

    #[tokio::test]
    async fn write_refuses_directories() {
        let fx = Fx::new();
        std::fs::create_dir(fx.at("d")).expect("mkdir");
        assert_err(
            &fx.run(write("d", "x")).await,
            &["d exists and is not a regular file"],
        );
        assert_err(&fx.run(write(".", "x")).await, &["is not a regular file"]);
    }

    // ---- Edit ----

    #[tokio::test]
    async fn edit_replaces_the_one_match() {
        let fx = Fx::new();
        fx.put("f", "fn a() {}\nfn b() {}\n".as_bytes());
        std::fs::set_permissions(fx.at("f"), Permissions::from_mode(0o640)).expect("chmod");
        let out = fx.run(edit("f", "fn b", "fn bee")).await;
        assert_eq!(
            out,
            ToolOutput::success("edited f: replaced 1 occurrence (22 bytes, was 20)".into())
        );
        assert_eq!(
            std::fs::read_to_string(fx.at("f")).expect("read"),
            "fn a() {}\nfn bee() {}\n"
        );
        let mode = std::fs::metadata(fx.at("f"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[tokio::test]
    async fn edit_errors_leave_the_file_unchanged() {
        let fx = Fx::new();
        let original: &[u8] = b"one two two aaa\n";
        fx.put("f", original);
        let cases = [
            (edit("f", "three", "3"), "f: old_string not found"),
            (
                edit("f", "two", "2"),
                "f: old_string has 2 matches; make old_string unique",
            ),
            (
                edit("f", "aa", "b"),
                "f: old_string has 2 matches; make old_string unique",
            ),
            (edit("f", "", "x"), "old_string is empty"),
            (edit("missing", "a", "b"), "cannot open missing"),
        ];
        for (tool, want) in cases {
            assert_err(&fx.run(tool).await, &[want]);
            assert_eq!(std::fs::read(fx.at("f")).expect("read"), original);
        }
    }

    #[tokio::test]
    async fn edit_is_bounded_exactly() {
        let fx = Fx::new();
        let l = limits(|l| l.edit_bytes = 8);
        fx.put("eight", b"abcdefgh");
        fx.put("nine", b"abcdefghi");
        assert!(
            fx.run_with(edit("eight", "abcdefgh", "12345678"), l)
                .await
                .ok
        );
        assert_eq!(std::fs::read(fx.at("eight")).expect("read"), b"12345678");
        let cases = [
            (
                edit("nine", "a", "b"),
                "nine is 9 bytes, over the edit limit of 8 bytes",
            ),
            (
                edit("eight", "123456789", "x"),
                "old_string is 9 bytes, over the edit limit of 8 bytes",
            ),
            (
                edit("eight", "1", "123456789"),
                "new_string is 9 bytes, over the edit limit of 8 bytes",
            ),
            (
                edit("eight", "1", "12"),
                "the edited eight would be 9 bytes, over the edit limit of 8 bytes",
            ),
        ];
        for (tool, want) in cases {
            assert_err(&fx.run_with(tool, l).await, &[want]);
        }
        assert_eq!(std::fs::read(fx.at("eight")).expect("read"), b"12345678");
        assert_eq!(std::fs::read(fx.at("nine")).expect("read"), b"abcdefghi");
    }

    // ---- Bash ----

    /// Whether no live (non-zombie) process is left in process group `pgid`
    /// within a deadline: a SIGKILLed process is gone a moment after the
    /// signal, not at once, so the test waits for the event, bounded.
    fn group_gone(pgid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        while group_alive(pgid) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// Whether any live (non-zombie) process is in process group `pgid`.
    fn group_alive(pgid: u32) -> bool {
        std::fs::read_dir("/proc").expect("/proc").any(|e| {
            let Ok(stat) = std::fs::read_to_string(e.expect("entry").path().join("stat")) else {
                return false;
            };
            // After the parenthesized command name: state, ppid, pgrp.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
                return false;
            };
            let fields: Vec<&str> = after.split(' ').collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
    }

    #[tokio::test]
    async fn bash_runs_in_the_workspace_with_null_stdin() {
        let fx = Fx::new();
        let out = fx.run(bash("pwd; echo \"$HOME\"; cat; echo done")).await;
        let ws = fx.ws.root().display();
        assert_eq!(
            out,
            ToolOutput::success(format!("{ws}\n{ws}\ndone\nexit status: 0"))
        );
    }

    #[tokio::test]
    async fn bash_labels_stderr_and_fails_on_nonzero_exit() {
        let fx = Fx::new();
        let out = fx.run(bash("echo out; echo err >&2; exit 3")).await;
        assert_eq!(
            out,
            ToolOutput {
                ok: false,
                output: "out\n\n--- stderr ---\nerr\nexit status: 3".into()
            }
        );
        let out = fx.run(bash("printf partial")).await;
        assert_eq!(out, ToolOutput::success("partial\nexit status: 0".into()));
        let out = fx.run(bash("kill -9 $$")).await;
        assert_eq!(
            out,
            ToolOutput {
                ok: false,
                output: "killed by signal 9".into()
            }
        );
        assert_err(&fx.run(bash("  ")).await, &["the command is empty"]);
    }

    #[tokio::test]
    async fn bash_timeout_kills_the_whole_group() {
        let fx = Fx::new();
        let l = limits(|l| l.bash_timeout = Duration::from_millis(200));
        let started = Instant::now();
        let out = fx.run_with(bash("echo $$; sleep 5 & sleep 5"), l).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        assert!(!out.ok);
        assert!(
            out.output
                .ends_with("timed out after 200 ms; the command's process group was killed"),
            "{out:?}"
        );
        let pgid: u32 = out
            .output
            .lines()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("pid line");
        assert!(group_gone(pgid), "group {pgid} survived");
    }

    #[tokio::test]
    async fn bash_leaves_nothing_running_after_exit() {
        let fx = Fx::new();
        let started = Instant::now();
        let out = fx.run(bash("sleep 30 & echo $$")).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        assert!(out.ok, "{out:?}");
        let pgid: u32 = out
            .output
            .lines()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("pid line");
        assert!(group_gone(pgid), "background job of group {pgid} survived");
    }

    #[tokio::test]
    async fn bash_output_is_bounded_with_markers() {
        let fx = Fx::new();
        let l = limits(|l| l.output_bytes = 1000);
        let out = fx
            .run_with(
                bash(
                    "head -c 5000 /dev/zero | tr '\\0' o; head -c 7000 /dev/zero | tr '\\0' e >&2",
                ),
                l,
            )
            .await;
        assert!(out.ok);
        assert!(out.output.len() <= 1000, "{} bytes", out.output.len());
        let (stdout, rest) = out
            .output
            .split_once(STDERR_LABEL)
            .expect("stderr label kept");
        assert!(stdout.starts_with("ooo"));
        assert!(stdout.ends_with(" bytes truncated]"), "{stdout}");
        assert!(rest.starts_with("eee"));
        assert!(
            rest.ends_with(" bytes truncated]\nexit status: 0"),
            "{rest}"
        );
        // The marker counts exactly what was left out.
        let shown = stdout.find("\n[… ").expect("marker");
        assert!(stdout.ends_with(&format!("[… {} bytes truncated]", 5000 - shown)));
        // A small stderr is kept whole; stdout gets the rest of the room.
        let out = fx
            .run_with(
                bash("head -c 5000 /dev/zero | tr '\\0' o; echo oops >&2"),
                l,
            )
            .await;
        assert!(out.output.len() <= 1000);
        assert!(
            out.output
                .ends_with("\n--- stderr ---\noops\nexit status: 0"),
            "{out:?}"
        );
    }

    #[test]
    fn clip_keeps_utf8_and_counts_bytes() {
        // Everything fits.
        assert_eq!(clip("héllo".as_bytes(), 6, 6), "héllo");
        // Only a prefix of 100 bytes was kept: the marker counts every byte
        // not shown, and a character is never split.
        let room = "\n[… 100 bytes truncated]".len() + 2;
        assert_eq!(
            clip("héllo".as_bytes(), 100, room),
            "h\n[… 99 bytes truncated]"
        );
        // An invalid byte shows as U+FFFD and counts as the one byte it was.
        assert_eq!(clip(b"a\xffb", 3, 5), "a\u{fffd}b");
        let room = "\n[… 100 bytes truncated]".len() + 4;
        assert_eq!(
            clip(b"a\xffbcdefgh", 100, room),
            "a\u{fffd}\n[… 98 bytes truncated]"
        );
        // Not even the marker fits: the marker alone.
        assert_eq!(clip(b"abc", 10, 3), "\n[… 10 bytes truncated]");
    }

    #[tokio::test]
    async fn credential_never_reaches_bash() {
        let fx = Fx::new();
        // SAFETY: the variable is unique to this test, and the environment
        // is read elsewhere only through std, which serializes access.
        unsafe { std::env::set_var("TURNCUT_PROVIDER_API_KEY", "turncut-canary-x") };
        let scrub = ["TURNCUT_PROVIDER_API_KEY", "turncut-canary-x"];
        let out = bash("env")
            .execute(&fx.ws, &Limits::default(), &scrub)
            .await;
        assert!(out.ok, "{out:?}");
        assert!(!out.output.contains("turncut-canary-x"), "{}", out.output);
        assert!(
            !out.output.contains("TURNCUT_PROVIDER_API_KEY"),
            "{}",
            out.output
        );
        let names: Vec<&str> = out
            .output
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(n, _)| n)
            .collect();
        for name in &names {
            assert!(
                [
                    "PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "OLDPWD", "_"
                ]
                .contains(name),
                "unexpected {name} in {names:?}"
            );
        }
        // Masking the output cannot hide a leak here: the shell itself checks,
        // and even with nothing to scrub the variable is not inherited.
        let probe = bash(
            "env | grep -c turncut-canary || true; echo \"[${TURNCUT_PROVIDER_API_KEY:-unset}]\"",
        );
        let out = probe.execute(&fx.ws, &Limits::default(), &[]).await;
        assert_eq!(
            out,
            ToolOutput::success("0\n[unset]\nexit status: 0".into())
        );
        // SAFETY: as above.
        unsafe { std::env::remove_var("TURNCUT_PROVIDER_API_KEY") };
    }

    #[test]
    fn tool_env_is_an_allowlist_without_scrubbed_entries() {
        let fx = Fx::new();
        let host = |name: &str| match name {
            "PATH" => Some("/bin:/opt/sk-123/bin".to_owned()),
            "LANG" => Some("C.UTF-8".to_owned()),
            "TURNCUT_PROVIDER_API_KEY" => Some("sk-123".to_owned()),
            _ => None,
        };
        let home = fx.ws.root().to_string_lossy().into_owned();
        let names =
            |env: Vec<(&'static str, String)>| env.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            tool_env(&fx.ws, &[""], host),
            [
                ("PATH", "/bin:/opt/sk-123/bin".to_owned()),
                ("HOME", home.clone()),
                ("LANG", "C.UTF-8".to_owned()),
                ("TERM", "dumb".to_owned()),
            ]
        );
        assert_eq!(
            names(tool_env(&fx.ws, &["sk-123"], host)),
            ["HOME", "LANG", "TERM"]
        );
        assert_eq!(
            names(tool_env(&fx.ws, &["LANG"], host)),
            ["PATH", "HOME", "TERM"]
        );
        assert_eq!(
            names(tool_env(&fx.ws, &[home.as_str()], |_| None)),
            ["PATH", "TERM"]
        );
    }

    #[tokio::test]
    async fn outputs_mask_scrubbed_strings() {
        let fx = Fx::new();
        fx.put("notes", b"key=sk-abc\n");
        let out = read("notes")
            .execute(&fx.ws, &Limits::default(), &["sk-abc"])
            .await;
        assert_eq!(out, ToolOutput::success("key=******\n".into()));
    }
}
