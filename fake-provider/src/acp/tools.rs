//! The fake ACP agent's tool calls, run on the client's side: the
//! `tool_call` update, the optional permission request, then a file write
//! (`fs/write_text_file`) or a command in a client terminal
//! (`terminal/create`, `terminal/wait_for_exit`, `terminal/release`). Each
//! request parks the turn at a [`Stage`]; the client's answer moves it on.
//! As `opencode acp` (`Like::Opencode`) the agent runs them itself instead.

use serde_json::{Value, json};

use super::wire::{self, ALLOW_ALWAYS, ALLOW_ONCE};
use super::{Like, Server, TurnStatus};
use crate::rpc::Sent;
use crate::script::ScriptTool;
use cutpoint::slug;

/// A tool call of the active turn, waiting for the client's answer to one of
/// this agent's requests.
pub(super) struct Waiting {
    pub request_id: i64,
    pub call: ToolRun,
    stage: Stage,
}

pub(super) struct ToolRun {
    call_id: String,
    key: String,
    argv: Vec<String>,
    cwd: String,
    /// A `write-file` tool: the path the client is asked to write.
    write: Option<String>,
}

enum Stage {
    Permission,
    Write,
    Create,
    Wait {
        terminal_id: String,
    },
    Release {
        terminal_id: String,
        exit_code: Option<u64>,
        signal: Option<String>,
    },
}

/// A client's answer: its `result`, and the message of its `error`.
struct Answer<'a> {
    result: Option<&'a Value>,
    error: Option<String>,
}

impl Server {
    /// Sends a request to the client on behalf of the active turn of
    /// `session_id`, which then waits for the answer at `stage`.
    fn request(
        &mut self,
        session_id: &str,
        method: &str,
        params: Value,
        call: ToolRun,
        stage: Stage,
    ) -> Sent {
        self.next_request_id += 1;
        let request_id = self.next_request_id;
        let Some(active) = self.active.get_mut(session_id) else {
            return Ok(());
        };
        active.waiting = Some(Waiting {
            request_id,
            call,
            stage,
        });
        self.pending.insert(request_id, session_id.to_owned());
        self.write(&json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": params,
        }))?;
        self.point(&format!("acp.{}.requested", slug(method)));
        Ok(())
    }

    pub(super) fn tool(&mut self, session_id: &str, tool: &ScriptTool) -> Sent {
        let Some(turn) = self.turn(session_id) else {
            return Ok(());
        };
        let argv = match &tool.argv {
            Some(argv) => argv.clone(),
            None => {
                let mut argv = crate::serving::lossy(&self.opts.effect_argv(
                    &tool.key,
                    &turn.authorized_by,
                    session_id,
                    &turn.id,
                ));
                // A tool's `duration_ms`, as the other fakes pass it (the ACP
                // fake ignored it: its command could never be caught running).
                argv.extend(crate::script::duration_args(&self.opts.script, &tool.key));
                argv
            }
        };
        let cwd = self
            .store
            .get(session_id)
            .map(|s| s.cwd.clone())
            .unwrap_or_default();
        self.next_call += 1;
        let call = ToolRun {
            call_id: format!("call_{}", self.next_call),
            key: tool.key.clone(),
            argv,
            cwd,
            write: tool.path.clone(),
        };
        let title = format!("Run {}", tool.key);
        let raw_input = json!({ "command": call.argv[0], "args": call.argv[1..], "cwd": call.cwd });
        self.record_update(
            session_id,
            wire::tool_call_update(&call.call_id, &title, &raw_input),
        )?;
        if self.like == Like::Opencode {
            // `opencode acp` starts the tool, then the tool asks.
            self.record_update(session_id, wire::tool_status(&call.call_id, "in_progress"))?;
        }
        if !tool.approval {
            return self.run_tool(session_id, call);
        }
        let params = wire::permission_params(
            session_id,
            wire::tool_call(&call.call_id, &title, &raw_input),
        );
        self.request(
            session_id,
            "session/request_permission",
            params,
            call,
            Stage::Permission,
        )
    }

    /// Runs an approved tool on the client's side: a file write, or a command
    /// (`opencode acp` runs it itself: [`Server::run_own_tool`]).
    fn run_tool(&mut self, session_id: &str, call: ToolRun) -> Sent {
        if self.like == Like::Opencode {
            return self.run_own_tool(session_id, &call);
        }
        let Some(path) = call.write.clone() else {
            return self.start_terminal(session_id, call);
        };
        let params = json!({
            "sessionId": session_id,
            "path": path,
            "content": crate::script::written_content(&call.key),
        });
        self.request(session_id, "fs/write_text_file", params, call, Stage::Write)
    }

    /// Runs the tool on the client's side: the client spawns the effect command
    /// in a terminal of its own.
    fn start_terminal(&mut self, session_id: &str, call: ToolRun) -> Sent {
        self.record_update(session_id, wire::tool_status(&call.call_id, "in_progress"))?;
        self.point("acp.effect.starting");
        let params = json!({
            "sessionId": session_id,
            "command": call.argv[0],
            "args": call.argv[1..],
            "cwd": call.cwd,
        });
        self.request(session_id, "terminal/create", params, call, Stage::Create)
    }

    /// Runs a tool in this agent, as `opencode acp` does: a file write, or
    /// the command in a session of its own (a kill of the agent's group
    /// misses it, and it lands its effect), waited for before the turn goes
    /// on; then the call's outcome.
    fn run_own_tool(&mut self, session_id: &str, call: &ToolRun) -> Sent {
        let (code, output) = match &call.write {
            Some(path) => {
                let path = std::path::Path::new(&call.cwd).join(path);
                let written = std::fs::write(&path, crate::script::written_content(&call.key));
                self.journal.fact(
                    if written.is_ok() {
                        "file.written"
                    } else {
                        "file.write_failed"
                    },
                    json!({ "key": call.key, "session": session_id, "path": path,
                            "error": written.as_ref().err().map(ToString::to_string) }),
                );
                (Some(i32::from(written.is_err())), String::new())
            }
            None => self.spawn_own_command(call),
        };
        self.effect_exited(session_id, &call.key, json!({ "exit_code": code }));
        let status = if code == Some(0) {
            "completed"
        } else {
            "failed"
        };
        let update = json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": call.call_id,
            "status": status,
            "rawOutput": { "exitCode": code, "output": output },
        });
        self.record_update(session_id, update)?;
        self.pump(session_id)
    }

    /// The command of `call`, spawned in a new session and waited for.
    fn spawn_own_command(&self, call: &ToolRun) -> (Option<i32>, String) {
        self.point("acp.effect.starting");
        let argv: Vec<std::ffi::OsString> = call.argv.iter().map(Into::into).collect();
        let mut cmd = crate::serving::tool_command(&argv);
        cmd.current_dir(&call.cwd);
        crate::serving::run_detached(cmd, &self.journal, &call.key)
    }

    /// Journals `effect.exited` for tool `key` of the active turn (its turn
    /// and authority, and `outcome`'s fields), then hits `acp.effect.exited`.
    fn effect_exited(&self, session_id: &str, key: &str, outcome: Value) {
        let turn = self.turn(session_id);
        let mut fact = json!({
            "key": key,
            "by": turn.map(|t| &t.authorized_by),
            "session": session_id,
            "turn": turn.map(|t| &t.id),
        });
        if let (Some(fact), Value::Object(more)) = (fact.as_object_mut(), outcome) {
            fact.extend(more);
        }
        self.journal.fact("effect.exited", fact);
        self.point("acp.effect.exited");
    }

    /// Ends a tool call as failed and lets the turn go on.
    pub(super) fn tool_failed(&mut self, session_id: &str, call: &ToolRun, why: &str) -> Sent {
        self.record_update(session_id, wire::tool_failed(&call.call_id, why))
    }

    pub(super) fn on_response(&mut self, id: &Value, msg: &Value) -> Sent {
        let request_id = id.as_i64();
        let Some(session_id) = request_id.and_then(|r| self.pending.remove(&r)) else {
            let fact = if request_id.is_some_and(|r| self.abandoned.remove(&r)) {
                "response.abandoned"
            } else {
                "response.unexpected"
            };
            self.journal.fact(fact, json!({ "id": id }));
            return Ok(());
        };
        let Some(active) = self.active.get_mut(&session_id) else {
            return Ok(());
        };
        let Some(waiting) = active.waiting.take() else {
            return Ok(());
        };
        debug_assert_eq!(Some(waiting.request_id), request_id);
        let answer = Answer {
            result: msg.get("result"),
            error: wire::error_message(msg),
        };
        let call = waiting.call;
        let s = session_id.as_str();
        match waiting.stage {
            Stage::Permission => self.permission_answered(s, call, &answer),
            Stage::Write => self.write_answered(s, &call, answer),
            Stage::Create => self.create_answered(s, call, answer),
            Stage::Wait { terminal_id } => self.wait_answered(s, call, answer, terminal_id),
            Stage::Release {
                terminal_id,
                exit_code,
                signal,
            } => {
                self.point("acp.terminal_release.answered");
                let update =
                    wire::tool_exited(&call.call_id, &terminal_id, exit_code, signal.as_deref());
                self.record_update(s, update)?;
                self.pump(s)
            }
        }
    }

    fn permission_answered(&mut self, session_id: &str, call: ToolRun, answer: &Answer) -> Sent {
        self.point("acp.permission.received");
        let decision = wire::permission_decision(answer.result, answer.error.as_ref());
        self.journal.fact(
            "approval.decided",
            json!({ "session": session_id, "key": call.key, "decision": decision }),
        );
        match decision.as_str() {
            ALLOW_ONCE | ALLOW_ALWAYS => self.run_tool(session_id, call),
            "cancelled" => {
                self.tool_failed(session_id, &call, "Cancelled by the user.")?;
                self.finish_turn(session_id, TurnStatus::Interrupted, "cancelled")
            }
            _ => {
                self.tool_failed(session_id, &call, "Permission denied.")?;
                self.pump(session_id)
            }
        }
    }

    fn write_answered(&mut self, session_id: &str, call: &ToolRun, answer: Answer) -> Sent {
        let error = answer.error;
        let (status, fact) = match &error {
            None => ("completed", "file.written"),
            Some(_) => ("failed", "file.write_failed"),
        };
        self.journal.fact(
            fact,
            json!({ "key": call.key, "session": session_id, "path": call.write, "error": error }),
        );
        self.record_update(session_id, wire::tool_status(&call.call_id, status))?;
        self.pump(session_id)
    }

    fn create_answered(&mut self, session_id: &str, call: ToolRun, answer: Answer) -> Sent {
        self.point("acp.terminal_create.answered");
        let terminal_id = answer
            .result
            .and_then(|r| r.get("terminalId"))
            .and_then(Value::as_str);
        match (terminal_id, answer.error) {
            (Some(terminal_id), None) => {
                let terminal_id = terminal_id.to_owned();
                let params = json!({ "sessionId": session_id, "terminalId": terminal_id });
                self.request(
                    session_id,
                    "terminal/wait_for_exit",
                    params,
                    call,
                    Stage::Wait { terminal_id },
                )
            }
            (_, error) => {
                let why = error.unwrap_or_else(|| "no terminalId in the answer".into());
                self.journal.fact(
                    "effect.failed",
                    json!({ "key": call.key, "session": session_id, "error": why }),
                );
                self.tool_failed(session_id, &call, &format!("Terminal failed: {why}"))?;
                self.pump(session_id)
            }
        }
    }

    fn wait_answered(
        &mut self,
        session_id: &str,
        call: ToolRun,
        answer: Answer,
        terminal_id: String,
    ) -> Sent {
        self.point("acp.terminal_wait_for_exit.answered");
        let result = answer.result;
        let exit_code = result
            .and_then(|r| r.get("exitCode"))
            .and_then(Value::as_u64);
        let signal = result
            .and_then(|r| r.get("signal"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.effect_exited(
            session_id,
            &call.key,
            json!({ "exit_code": exit_code, "signal": signal, "error": answer.error }),
        );
        let params = json!({ "sessionId": session_id, "terminalId": terminal_id });
        self.request(
            session_id,
            "terminal/release",
            params,
            call,
            Stage::Release {
                terminal_id,
                exit_code,
                signal,
            },
        )
    }
}
