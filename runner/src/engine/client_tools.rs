//! ACP client-side tools (`terminal/*`, `fs/*`), executed by the runner
//! under write-ahead (DESIGN §3.4 rule 4): a call with an effect is marked
//! `executing` before the effect, its outcome is persisted before the
//! provider hears it, and a key the run has seen before is never executed
//! again. Paths and working directories are confined to the task workspace
//! by `Workspace`; a command runs as a `tools::ToolProcess` with the native
//! tools' allowlisted environment and never sees the credential.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Engine, StepError};
use crate::driver::ClientCall;
use crate::native::tools::{self, Limits, Workspace};
use crate::store::{Run, Snapshot, ToolCallStatus};

/// A command the runner started for a client-side `terminal/create`.
pub(super) struct Terminal {
    key: String,
    /// The running command, until its exit was awaited or it was released.
    process: Option<tools::ToolProcess>,
    /// Its bounded output once it exited.
    output: String,
    /// Whether `output` was cut.
    truncated: bool,
    exit: Option<Value>,
}

impl Terminal {
    /// Kills the command if it is still running.
    pub(super) fn kill(&mut self) {
        if let Some(p) = self.process.as_mut() {
            p.kill();
        }
    }
}

/// The terminals of one provider process, by terminal id.
type Terminals = HashMap<String, Terminal>;

/// What a call's execution needs of the task.
struct Ctx<'a> {
    task_id: &'a str,
    run_id: &'a str,
    key: &'a str,
    ws: Result<Workspace, String>,
    scrub: Vec<&'a str>,
    limits: Limits,
}

impl Engine {
    /// Executes a client-side tool request; the result (or error message)
    /// is the provider's answer. Fails only when a durable write fails.
    pub(super) async fn client_tool(
        &self,
        snap: &Snapshot,
        run: &Run,
        turn_row: i64,
        key: &str,
        call: ClientCall,
        terminals: &mut Terminals,
    ) -> Result<Result<Value, String>, StepError> {
        let task_id = &snap.task.task_id;
        if call.has_effect()
            && !self
                .mark_executing(task_id, run, turn_row, key, &call)
                .await?
        {
            return Ok(Err(format!(
                "tool call {key} was already executed in this run; it is never run twice"
            )));
        }
        let scrub = self.scrub(&snap.task.profile);
        let cx = Ctx {
            task_id,
            run_id: &run.run_id,
            key,
            ws: Workspace::new(&snap.task.workspace).map_err(|e| e.to_string()),
            scrub: scrub.iter().map(String::as_str).collect(),
            limits: Limits::default(),
        };
        match call {
            ClientCall::TerminalCreate {
                command,
                args,
                env,
                cwd,
            } => {
                self.terminal_create(cx, &command, &args, env, cwd, terminals)
                    .await
            }
            ClientCall::TerminalWait { terminal_id } => {
                self.terminal_wait(cx, &terminal_id, terminals).await
            }
            ClientCall::TerminalOutput { terminal_id } => {
                Ok(terminal_output(&terminal_id, terminals))
            }
            ClientCall::TerminalKill { terminal_id } => match terminals.get_mut(&terminal_id) {
                Some(t) => {
                    t.kill();
                    Ok(Ok(json!({})))
                }
                None => Ok(Err(format!("unknown terminal {terminal_id}"))),
            },
            ClientCall::TerminalRelease { terminal_id } => {
                self.terminal_release(cx, &terminal_id, terminals).await
            }
            ClientCall::WriteTextFile { path, content } => {
                self.write_text_file(cx, path, content).await
            }
            ClientCall::ReadTextFile { path } => Ok(read_text_file(cx, path).await),
        }
    }

    /// Marks a call with an effect `executing`; false when the run has seen
    /// its key before.
    async fn mark_executing(
        &self,
        task_id: &str,
        run: &Run,
        turn_row: i64,
        key: &str,
        call: &ClientCall,
    ) -> Result<bool, StepError> {
        let (kind, detail) = match call {
            ClientCall::TerminalCreate { command, args, .. } => (
                "terminal",
                json!({ "command": command, "args": args.len() }),
            ),
            ClientCall::WriteTextFile { path, content } => (
                "write_text_file",
                json!({ "path": path, "bytes": content.len() }),
            ),
            _ => ("write_text_file", Value::Null),
        };
        let (tid, rid, k) = (task_id.to_owned(), run.run_id.clone(), key.to_owned());
        self.write("tool_executing", move |db| {
            db.tool_executing(&tid, &rid, turn_row, &k, kind, detail)
        })
        .await
    }

    /// Persists a call's outcome (`tool_outcome`).
    async fn tool_outcome(
        &self,
        cx: &Ctx<'_>,
        key: &str,
        status: ToolCallStatus,
        v: Value,
    ) -> Result<(), StepError> {
        let (tid, rid, k) = (cx.task_id.to_owned(), cx.run_id.to_owned(), key.to_owned());
        self.write("tool_outcome", move |db| {
            db.tool_outcome(&tid, &rid, &k, status, v)
        })
        .await
    }

    /// `terminal/create`: starts the command; a command that cannot start
    /// is a failed outcome.
    async fn terminal_create(
        &self,
        cx: Ctx<'_>,
        command: &str,
        args: &[String],
        env: Vec<(String, String)>,
        cwd: Option<String>,
        terminals: &mut Terminals,
    ) -> Result<Result<Value, String>, StepError> {
        let started = match &cx.ws {
            Ok(ws) => start_terminal(ws, command, args, env, cwd, &cx.scrub),
            Err(e) => Err(e.clone()),
        };
        match started {
            Ok(process) => {
                crate::cut::hit("runner.tool.spawned");
                let id = format!("term-{}", cx.key);
                terminals.insert(
                    id.clone(),
                    Terminal {
                        key: cx.key.to_owned(),
                        process: Some(process),
                        output: String::new(),
                        truncated: false,
                        exit: None,
                    },
                );
                Ok(Ok(json!({ "terminalId": id })))
            }
            Err(msg) => {
                self.tool_outcome(&cx, cx.key, ToolCallStatus::Failed, json!({ "error": msg }))
                    .await?;
                Ok(Err(msg))
            }
        }
    }

    /// `terminal/wait_for_exit`: bounded like a native Bash call; a command
    /// that does not end is killed with its whole group and the call fails.
    /// The outcome is durable before the provider hears the exit.
    async fn terminal_wait(
        &self,
        cx: Ctx<'_>,
        terminal_id: &str,
        terminals: &mut Terminals,
    ) -> Result<Result<Value, String>, StepError> {
        let Some(t) = terminals.get_mut(terminal_id) else {
            return Ok(Err(format!("unknown terminal {terminal_id}")));
        };
        if let Some(process) = t.process.take() {
            let key = t.key.clone();
            let done = process.finish(cx.limits.bash_timeout).await;
            let (exit, output, truncated) = terminal_result(done, &cx.limits, &cx.scrub);
            let status = if exit["exitCode"] == 0 {
                ToolCallStatus::Completed
            } else {
                ToolCallStatus::Failed
            };
            self.tool_outcome(&cx, &key, status, exit.clone()).await?;
            let t = terminals.get_mut(terminal_id).expect("present above");
            t.output = output;
            t.truncated = truncated;
            t.exit = Some(exit);
        }
        let t = &terminals[terminal_id];
        Ok(Ok(t.exit.clone().unwrap_or(Value::Null)))
    }

    /// `terminal/release`: a command released before its exit was awaited
    /// is killed, and its outcome is a failure (it may have done part of
    /// its work).
    async fn terminal_release(
        &self,
        cx: Ctx<'_>,
        terminal_id: &str,
        terminals: &mut Terminals,
    ) -> Result<Result<Value, String>, StepError> {
        let Some(mut t) = terminals.remove(terminal_id) else {
            return Ok(Err(format!("unknown terminal {terminal_id}")));
        };
        if let Some(mut p) = t.process.take() {
            p.kill();
            drop(p.finish(Duration::ZERO).await);
            let error = json!({ "error": "released before it exited; killed" });
            self.tool_outcome(&cx, &t.key, ToolCallStatus::Failed, error)
                .await?;
        }
        Ok(Ok(json!({})))
    }

    /// `fs/write_text_file`: a bounded atomic write through the confiner.
    async fn write_text_file(
        &self,
        cx: Ctx<'_>,
        path: String,
        content: String,
    ) -> Result<Result<Value, String>, StepError> {
        let (limit, bytes) = (cx.limits.edit_bytes, content.len());
        let written = match cx.ws.clone() {
            Ok(ws) => tokio::task::spawn_blocking(move || ws.write_text(&path, &content, limit))
                .await
                .unwrap_or_else(|e| Err(format!("the write did not finish: {e}"))),
            Err(e) => Err(e),
        };
        match written {
            Ok(done) => {
                let v = json!({ "bytes": bytes, "result": done });
                self.tool_outcome(&cx, cx.key, ToolCallStatus::Completed, v)
                    .await?;
                Ok(Ok(json!({})))
            }
            Err(msg) => {
                self.tool_outcome(&cx, cx.key, ToolCallStatus::Failed, json!({ "error": msg }))
                    .await?;
                Ok(Err(msg))
            }
        }
    }
}

/// `terminal/output`: what the command printed so far (all of it once it
/// exited), with its exit status then.
fn terminal_output(terminal_id: &str, terminals: &Terminals) -> Result<Value, String> {
    match terminals.get(terminal_id) {
        Some(t) => {
            let mut v = json!({ "output": t.output, "truncated": t.truncated });
            if let Some(e) = &t.exit {
                v["exitStatus"] = e.clone();
            }
            Ok(v)
        }
        None => Err(format!("unknown terminal {terminal_id}")),
    }
}

/// `fs/read_text_file`: a bounded read through the confiner, masked.
async fn read_text_file(cx: Ctx<'_>, path: String) -> Result<Value, String> {
    let limit = cx.limits.read_bytes;
    let read = match cx.ws {
        Ok(ws) => tokio::task::spawn_blocking(move || ws.read_text(&path, limit))
            .await
            .unwrap_or_else(|e| Err(format!("the read did not finish: {e}"))),
        Err(e) => Err(e),
    };
    read.map(|content| json!({ "content": tools::mask(&content, &cx.scrub) }))
}

/// Starts an ACP `terminal/create` command as a [`tools::ToolProcess`]: its
/// working directory is confined to the workspace, its environment is the
/// native tools' allowlist ([`tools::tool_env`]) plus the variables the agent
/// asked for, none of which may be a `scrub` name or carry a `scrub` string.
fn start_terminal(
    ws: &Workspace,
    command: &str,
    args: &[String],
    env: Vec<(String, String)>,
    cwd: Option<String>,
    scrub: &[&str],
) -> Result<tools::ToolProcess, String> {
    // The working directory is opened beneath the workspace and handed over
    // as runnerd's descriptor of it (kept open until the spawn is done), so
    // nothing can swap a link in between.
    let opened = cwd.as_deref().map(|c| ws.open_dir(c)).transpose()?;
    let dir = match &opened {
        Some(fd) => crate::workspace::fd_path(fd),
        None => ws.dir_path(),
    };
    let scrubbed = |s: &str| scrub.iter().any(|x| !x.is_empty() && s.contains(x));
    let mut vars = tools::owned(tools::tool_env(ws, scrub, |n| std::env::var(n).ok()));
    vars.extend(
        env.into_iter()
            .filter(|(k, v)| !scrubbed(k) && !scrubbed(v)),
    );
    tools::ToolProcess::spawn(command, args, &dir, vars, Limits::default().output_bytes)
        .map_err(|e| format!("failed to start {command}: {e}"))
}

/// An ACP terminal's exit status (`exitCode`, `signal`), its output (stdout,
/// then stderr, bounded, masked) and whether the output was truncated.
fn terminal_result(
    done: tools::Finished,
    limits: &Limits,
    scrub: &[&str],
) -> (Value, String, bool) {
    let exit = match &done.status {
        Ok(s) if !done.timed_out => {
            json!({ "exitCode": s.code(), "signal": s.signal().map(|s| s.to_string()) })
        }
        _ => json!({ "exitCode": null, "signal": null }),
    };
    let note = match (&done.status, done.timed_out) {
        (_, true) => Some(format!(
            "timed out after {} ms; the command's process group was killed",
            limits.bash_timeout.as_millis()
        )),
        (Err(e), false) => Some(format!("exit status unknown: {e}")),
        (Ok(_), false) => None,
    };
    let note = match (note, done.drained) {
        (note, true) => note,
        (note, false) => Some(tools::with_drain_note(note.unwrap_or_default(), false)),
    };
    let (output, truncated) = tools::render(
        done.stdout,
        done.stderr,
        note.as_deref(),
        limits.output_bytes,
    );
    (exit, tools::mask(&output, scrub), truncated)
}
