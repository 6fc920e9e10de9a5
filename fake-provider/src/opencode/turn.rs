//! One turn of the fake OpenCode server, played on a thread of its own so
//! cut points may block it freely: the user message made durable and
//! announced once the 204 is out (as the real server writes it 5 ms to
//! 1.2 s after its 204), an assistant message whose parts are the script's
//! text and `bash` tool parts (`pending` → `running` → `completed` or
//! `error`; a permission, when the script says so, is asked while the part
//! is `running`, as the real 1.18.33 asks, and the part is `running` again
//! once granted), tools run by the server itself, and the end (`completed`,
//! or aborted by `POST /abort`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::sync::{Arc, mpsc};

use serde_json::{Value, json};

use super::routes::store_user_message;
use super::store::UserMeta;
use super::upstream::Summary;
use super::wire::{self, aborted_error};
use super::{Control, Shared};
use crate::journal::now_ms;
use crate::script::ScriptTool;
use crate::turns::Step;

/// One turn, played on its own thread so cut points may block it freely.
pub(super) struct Turn {
    pub shared: Arc<Shared>,
    pub session: String,
    pub user_id: String,
    pub authorized_by: String,
    pub control: mpsc::Receiver<Control>,
}

pub(super) enum Outcome {
    Completed,
    Aborted,
    /// Its model API failed and OpenCode does not retry it: the error.
    Failed(Value),
    /// Its model API refused the conversation as too long: the error,
    /// named and stored on no message, and what the model answers the
    /// compaction that follows with.
    Overflowed(Value, Summary),
}

/// How a permission request ended.
enum Permission {
    Granted,
    Rejected,
    Aborted,
}

impl Turn {
    pub(super) fn run(
        self,
        responded: mpsc::Receiver<()>,
        steps: VecDeque<Step>,
        texts: &[String],
        meta: &UserMeta,
    ) {
        let s = Arc::clone(&self.shared);
        let _ = responded.recv();
        s.point("opencode.prompt_async.responded");
        {
            let mut st = s.state();
            store_user_message(&s, &mut st, &self.session, &self.user_id, texts, meta);
        }
        s.journal.fact(
            "turn.recorded",
            json!({
                "thread": self.session,
                "turn": self.user_id,
                "client_id": self.user_id,
                "continuation": meta.continuation,
                "authorized_by": meta.authorized_by,
            }),
        );
        s.point("opencode.turn.recorded");
        self.announce_user_message();
        let mut info = wire::assistant_info(
            &s.ids.after("msg", Some(&self.user_id)),
            &self.session,
            &self.user_id,
        );
        self.save_message(&info);
        s.point("opencode.message.recorded");
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": info }),
        );
        let message_id = info["id"].as_str().unwrap_or_default().to_owned();
        let outcome = self.play(&message_id, steps);
        self.finish(&mut info, outcome);
    }

    /// The user message and its parts, as the stream shows them once the
    /// prompt is answered, and the session busy.
    fn announce_user_message(&self) {
        let s = &self.shared;
        let (user_info, user_parts) = {
            let st = s.state();
            let info = st
                .store
                .message(&self.session, &self.user_id)
                .map(|m| m.info.clone())
                .unwrap_or(Value::Null);
            (info, st.store.parts(&self.user_id))
        };
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": user_info }),
        );
        for part in user_parts {
            self.announce_part(part);
        }
        s.emit(
            "session.status",
            json!({ "sessionID": self.session, "status": { "type": "busy" } }),
        );
    }

    /// Plays the steps until the end or an abort, which is heard between
    /// steps that do something.
    fn play(&self, message_id: &str, mut steps: VecDeque<Step>) -> Outcome {
        // The model is asked at the turn's start, and again once the tools
        // of a response ran (the script's usage step ends a response).
        let (mut asked, mut tools) = (false, false);
        while let Some(step) = steps.pop_front() {
            if let Step::Usage = step {
                // OpenCode reports no token usage.
                asked &= !std::mem::take(&mut tools);
                continue;
            }
            if !asked {
                asked = true;
                let response = std::iter::once(&step).chain(steps.iter());
                if let Err(outcome) = self.ask_model(response) {
                    return outcome;
                }
            }
            tools |= matches!(step, Step::Tool(_));
            let outcome = match step {
                Step::Usage => continue,
                Step::Complete => break,
                _ if matches!(self.control.try_recv(), Ok(Control::Abort)) => {
                    return Outcome::Aborted;
                }
                Step::Say(text) => {
                    self.text_part(message_id, &text);
                    Outcome::Completed
                }
                Step::Tool(tool) => self.tool(message_id, &tool),
            };
            if !matches!(outcome, Outcome::Completed) {
                return outcome;
            }
        }
        Outcome::Completed
    }

    /// Completes the assistant message `info` (durably), then announces the
    /// end of the turn and the session idle. A failure is named first, and
    /// the session goes idle before and after its message is stored, as the
    /// real 1.18.33 announces it; an overflow then compacts the session.
    fn finish(&self, info: &mut Value, outcome: Outcome) {
        let s = &self.shared;
        info["time"]["completed"] = json!(now_ms());
        let status = match &outcome {
            Outcome::Completed => {
                info["finish"] = json!("stop");
                "completed"
            }
            Outcome::Aborted => {
                info["error"] = aborted_error();
                "interrupted"
            }
            Outcome::Failed(error) => {
                info["error"] = error.clone();
                "failed"
            }
            // Stored on no message: closed with neither finish nor error.
            Outcome::Overflowed(..) => "failed",
        };
        if let Outcome::Failed(error) | Outcome::Overflowed(error, _) = &outcome {
            s.emit(
                "session.error",
                json!({ "sessionID": self.session, "error": error }),
            );
        }
        if let Outcome::Failed(_) = outcome {
            self.idle();
        }
        self.save_message(info);
        s.journal.fact(
            "turn.finished",
            json!({ "thread": self.session, "turn": self.user_id, "status": status }),
        );
        s.point("opencode.turn_completed.recorded");
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": info }),
        );
        match outcome {
            Outcome::Aborted => s.emit(
                "session.error",
                json!({ "sessionID": self.session, "error": aborted_error() }),
            ),
            Outcome::Overflowed(_, summary) => self.compact(&summary),
            _ => {}
        }
        self.idle();
    }

    /// Ends the turn's hold on the session and announces it idle.
    pub(super) fn idle(&self) {
        let s = &self.shared;
        {
            let mut st = s.state();
            st.active.remove(&self.session);
            let session = self.session.clone();
            st.permissions.retain(|_, sess| *sess != session);
        }
        s.emit(
            "session.status",
            json!({ "sessionID": self.session, "status": { "type": "idle" } }),
        );
        s.emit("session.idle", json!({ "sessionID": self.session }));
    }

    pub(super) fn save_message(&self, info: &Value) {
        let s = &self.shared;
        let saved = s
            .state()
            .store
            .put_message(&self.session, info.clone(), None);
        if let Err(e) = saved {
            s.fail_storage(&e);
        }
    }

    /// Makes a part durable, passes `opencode.part.recorded` and announces it.
    pub(super) fn save_part(&self, part: &Value) {
        let s = &self.shared;
        let saved = s.state().store.put_part(part.clone());
        if let Err(e) = saved {
            s.fail_storage(&e);
        }
        s.point("opencode.part.recorded");
        self.announce_part(part.clone());
    }

    pub(super) fn announce_part(&self, part: Value) {
        self.shared.emit(
            "message.part.updated",
            json!({ "sessionID": self.session, "part": part, "time": now_ms() }),
        );
    }

    pub(super) fn text_part(&self, message_id: &str, text: &str) {
        let id = self.shared.ids.next("prt");
        let part = wire::text_part(&id, &self.session, message_id, text, true);
        self.save_part(&part);
    }

    fn tool(&self, message_id: &str, tool: &ScriptTool) -> Outcome {
        let s = Arc::clone(&self.shared);
        let mut argv =
            s.opts
                .effect_argv(&tool.key, &self.authorized_by, &self.session, &self.user_id);
        argv.extend(
            crate::script::duration_args(&s.opts.script, &tool.key)
                .into_iter()
                .map(OsString::from),
        );
        let words = crate::serving::lossy(&argv);
        let command = crate::shell::join(words.iter().map(String::as_str));
        let input = json!({ "command": command, "description": format!("effect {}", tool.key) });
        let call_id = format!("call_{}", &s.ids.next("x")[2..]);
        let mut part = json!({
            "id": s.ids.next("prt"),
            "sessionID": self.session,
            "messageID": message_id,
            "type": "tool",
            "callID": call_id,
            "tool": "bash",
            "state": { "status": "pending", "input": input, "raw": "" },
        });
        self.save_part(&part);
        let start = now_ms();
        let title = format!("effect {}", tool.key);
        // The real 1.18.33 runs the tool (its part `running`, with its
        // input) before the tool asks for permission.
        part["state"] = json!({
            "status": "running", "input": input, "time": { "start": start },
        });
        self.save_part(&part);
        if tool.approval {
            let asked = (message_id, call_id.as_str(), command.as_str());
            if let Some(refused) = self.permit(asked, tool, &mut part, start) {
                return refused;
            }
        }
        let (code, output) = self.run_effect(&argv, &tool.key);
        part["state"] = if code == Some(0) {
            json!({
                "status": "completed", "input": input, "output": output,
                "title": title,
                "metadata": { "exit": code, "output": output },
                "time": { "start": start, "end": now_ms() },
            })
        } else {
            json!({
                "status": "error", "input": input, "error": output,
                "metadata": { "exit": code },
                "time": { "start": start, "end": now_ms() },
            })
        };
        self.save_part(&part);
        Outcome::Completed
    }

    /// Asks for permission to run the `bash` call `(message, call, command)`
    /// of `tool`, whose `part` is `running` since `start`: granted, the part
    /// is `running` again with its title and (empty) output metadata and
    /// `None` is returned; refused or aborted, the part is `error` and the
    /// turn's outcome is returned.
    fn permit(
        &self,
        (message_id, call_id, command): (&str, &str, &str),
        tool: &ScriptTool,
        part: &mut Value,
        start: u64,
    ) -> Option<Outcome> {
        let input = part["state"]["input"].clone();
        let (error, outcome) = match self.ask_permission(message_id, call_id, command, &tool.key) {
            Permission::Granted => {
                let title = format!("effect {}", tool.key);
                part["state"] = json!({
                    "status": "running", "input": input, "title": title,
                    "metadata": { "output": "", "description": title },
                    "time": { "start": start },
                });
                self.save_part(part);
                return None;
            }
            Permission::Aborted => ("Tool execution aborted", Outcome::Aborted),
            Permission::Rejected => (
                "The user rejected permission to use this specific tool call.",
                Outcome::Completed,
            ),
        };
        part["state"] = json!({
            "status": "error", "input": input, "error": error,
            "time": { "start": start, "end": now_ms() },
        });
        self.save_part(part);
        Some(outcome)
    }

    /// Asks the client's permission for the `bash` call `call_id` of effect
    /// `key`, and waits for the reply (or an abort).
    fn ask_permission(
        &self,
        message_id: &str,
        call_id: &str,
        command: &str,
        key: &str,
    ) -> Permission {
        let s = &self.shared;
        let permission = s.ids.next("per");
        s.state()
            .permissions
            .insert(permission.clone(), self.session.clone());
        s.emit(
            "permission.asked",
            json!({
                "id": permission,
                "sessionID": self.session,
                "permission": "bash",
                "patterns": [command],
                "metadata": {},
                "always": [command],
                "tool": { "messageID": message_id, "callID": call_id },
            }),
        );
        s.point("opencode.permission.asked");
        let reply = match self.control.recv() {
            Ok(Control::Reply(r)) => r,
            Ok(Control::Abort) | Err(_) => {
                s.state().permissions.remove(&permission);
                return Permission::Aborted;
            }
        };
        s.journal.fact(
            "approval.decided",
            json!({ "thread": self.session, "turn": self.user_id, "key": key, "decision": reply }),
        );
        s.emit(
            "permission.replied",
            json!({ "sessionID": self.session, "requestID": permission, "reply": reply }),
        );
        if reply == "reject" {
            Permission::Rejected
        } else {
            Permission::Granted
        }
    }

    /// Runs the effect command `argv` and waits for it. As the real server's
    /// `bash` tool (spawned `detached`), the command runs in a session of its
    /// own: a SIGKILL of the server's process group misses it, and it runs to
    /// its end, effect included (measured on 1.18.33 by
    /// `harness/tests/real_opencode.rs`).
    fn run_effect(&self, argv: &[OsString], key: &str) -> (Option<i32>, String) {
        let s = &self.shared;
        s.point("opencode.effect.starting");
        let (code, output) =
            crate::serving::run_detached(crate::serving::tool_command(argv), &s.journal, key);
        s.journal.fact(
            "effect.exited",
            json!({ "key": key, "by": self.authorized_by, "thread": self.session, "turn": self.user_id, "exit_code": code }),
        );
        s.point("opencode.effect.exited");
        (code, output)
    }
}
