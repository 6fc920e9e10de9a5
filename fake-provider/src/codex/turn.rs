//! How the fake Codex plays a turn: `turn/start` (which script turn, under
//! whose authority, which calls a continuation skips), the steps of the
//! scripted model (agent messages, token usage, command items), commands run
//! in sessions of their own, approvals, and `turn/interrupt`.

use std::collections::VecDeque;
use std::ffi::OsString;

use serde_json::{Value, json};

use super::store::{TurnRecord, TurnStatus};
use super::wire::{self, ItemsView, Tokens, TurnInterruptParams, TurnStartParams, turn_json};
use super::{
    ActiveTurn, CHECK_ABORTED_MARKER, Queued, Server, Waiting, model_item_id, slug, storage_error,
};
use crate::rpc::{INVALID_REQUEST, Refusal, Sent, params};
use crate::script::{ScriptTool, ToolKind};
use crate::serving::now_s;
use crate::turns::{self, Step};

/// What a `turn/start` plays: under whose authority, which script turn, and
/// the steps.
struct Planned {
    authorized_by: String,
    script_index: usize,
    steps: VecDeque<Step>,
}

impl Server {
    pub(super) fn turn_start(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: TurnStartParams = params(msg)?;
        self.thread_exists(&p.thread_id)?;
        if let Some(policy) = super::checked_policy(p.approval_policy.clone())? {
            self.policies.insert(p.thread_id.clone(), policy);
        }
        if self.active.contains_key(&p.thread_id) {
            return Ok(self.queue_message(id, p));
        }
        let text = p.text();
        let continuation = turns::is_continuation(&text);
        let turn_id = uuid::Uuid::now_v7().to_string();
        let planned = self.plan_turn(&p, &text, continuation, &turn_id)?;
        // As in the real server, the turn is durable before the `turn/start`
        // response and its user message only after it (31-58 ms later in
        // Codex 0.171.0): a restarted server reads back an interrupted turn
        // with no items, found by turn id but not by `clientId`.
        let user_item = json!({
            "type": "userMessage",
            "id": uuid::Uuid::now_v7().to_string(),
            "content": p.input,
            "clientId": p.client_user_message_id,
        });
        let record = TurnRecord {
            id: turn_id.clone(),
            client_id: p.client_user_message_id.clone(),
            input: p.input.clone(),
            continuation,
            authorized_by: planned.authorized_by,
            script_index: planned.script_index,
            status: TurnStatus::InProgress,
            error: None,
            error_info: None,
            items: Vec::new(),
            issued: Vec::new(),
            finished: Vec::new(),
            started_at: now_s(),
            completed_at: None,
        };
        self.record_turn(&p.thread_id, &text, record, planned.steps)?;
        let turn = turn_json(
            self.turn_record(&p.thread_id, &turn_id),
            ItemsView::NotLoaded,
        );
        Ok(self
            .respond(id, "turn/start", json!({ "turn": turn }))
            .and_then(|()| self.begin_turn(&p.thread_id, &turn_id, user_item, turn)))
    }

    /// Which script turn a `turn/start` plays and its steps. The naive
    /// model: the same message plays the same script turn again; a new
    /// message plays the next one. A continuation plays the script turn of
    /// the turn it continues, under its authority, skipping calls as
    /// [`Server::continued_call`] says.
    fn plan_turn(
        &self,
        p: &TurnStartParams,
        text: &str,
        continuation: bool,
        turn_id: &str,
    ) -> Result<Planned, Refusal> {
        let thread = self.store.get(&p.thread_id).expect("checked above");
        if !continuation {
            let by = p
                .client_user_message_id
                .clone()
                .unwrap_or_else(|| turn_id.to_owned());
            let script = &self.opts.script;
            let index = turns::script_index(script, thread.turns.iter(), &by, text, turns::as_sent);
            let script_turn = script.turn(index).clone();
            return Ok(Planned {
                authorized_by: by,
                script_index: index,
                steps: turns::plan(script_turn, |_| Ok::<_, Refusal>(true))?,
            });
        }
        let target = turns::continued(thread.turns.iter());
        let Some(target) = target.filter(|t| has_user_message(t)) else {
            // No user message was ever recorded (no turn, or its message
            // never written): the model never saw it, so the continuation
            // authorizes nothing. The real server takes any `turn/start`.
            let nothing = turns::nothing_to_continue();
            self.journal.fact(
                "continuation.empty",
                json!({ "thread": p.thread_id, "reason": "no user message to continue" }),
            );
            return Ok(Planned {
                authorized_by: p.client_user_message_id.clone().unwrap_or_default(),
                script_index: target.map_or(0, |t| t.script_index),
                steps: turns::plan(nothing, |_| Ok::<_, Refusal>(true))?,
            });
        };
        // What the model of a continuation knows about the turn it continues.
        let by = target.authorized_by.clone();
        let script_turn = self.opts.script.turn(target.script_index).clone();
        let steps = turns::plan(script_turn, |tool| {
            let skip =
                self.continued_call(&tool.key, &by, text, &target.issued, &target.finished)?;
            Ok(!skip)
        })?;
        Ok(Planned {
            authorized_by: by,
            script_index: target.script_index,
            steps,
        })
    }

    /// Makes the new turn durable (the thread with it), journals
    /// `turn.recorded` and makes it the thread's active turn.
    fn record_turn(
        &mut self,
        thread_id: &str,
        text: &str,
        record: TurnRecord,
        steps: VecDeque<Step>,
    ) -> Result<(), Refusal> {
        let fact = json!({
            "thread": thread_id,
            "turn": record.id,
            "client_id": record.client_id,
            "continuation": record.continuation,
            "authorized_by": record.authorized_by,
        });
        let turn_id = record.id.clone();
        if !self.store.is_written(thread_id) {
            self.write_thread(thread_id)?;
        }
        {
            let thread = self.store.get_mut(thread_id).expect("checked above");
            if thread.preview.is_empty() && !record.continuation {
                thread.preview = text.chars().take(200).collect();
            }
            thread.updated_at = now_s();
            thread.turns.push(record);
        }
        self.store.save(thread_id).map_err(storage_error)?;
        self.journal.fact("turn.recorded", fact);
        self.point("codex.turn.recorded");
        self.loaded.insert(thread_id.to_owned());
        self.active.insert(
            thread_id.to_owned(),
            ActiveTurn {
                turn_id,
                steps,
                waiting: None,
                queued: Vec::new(),
                authorized_by: None,
                tools_pending: false,
                asked: false,
                diff: None,
                items: 0,
                output_bytes: 0,
            },
        );
        Ok(())
    }

    /// Writes a thread at its first turn, in the real rollout's steps: the
    /// file created empty, then the thread without a turn. A process killed
    /// between them leaves a thread that cannot be read; killed after, a
    /// thread with no turn, which resumes and takes turns.
    fn write_thread(&mut self, thread_id: &str) -> Result<(), Refusal> {
        self.store.create_empty(thread_id).map_err(storage_error)?;
        self.point("codex.rollout.created");
        self.store.save(thread_id).map_err(storage_error)?;
        self.journal
            .fact("thread.recorded", json!({ "thread": thread_id }));
        self.point("codex.thread.recorded");
        Ok(())
    }

    /// A `turn/start` while the thread's turn is active, as the real server
    /// takes it: answered at once with the active turn, the message queued
    /// (in memory only) for the model's next request in that turn.
    fn queue_message(&mut self, id: &Value, p: TurnStartParams) -> Sent {
        let active = self.active.get_mut(&p.thread_id).expect("checked above");
        active.queued.push(Queued {
            client_id: p.client_user_message_id.clone(),
            input: p.input.clone(),
        });
        let turn_id = active.turn_id.clone();
        self.journal.fact(
            "message.queued",
            json!({ "thread": p.thread_id, "turn": turn_id, "client_id": p.client_user_message_id }),
        );
        let turn = turn_json(
            self.turn_record(&p.thread_id, &turn_id),
            ItemsView::NotLoaded,
        );
        self.respond(id, "turn/start", json!({ "turn": turn }))
    }

    /// The model's next request takes up the queued messages: each is
    /// recorded in the active turn (durably) and announced, and the model
    /// answers the last one from its script turn's top, under its
    /// authority, instead of going on with the turn it was playing.
    fn take_up_queued(&mut self, thread_id: &str, turn_id: &str) -> Sent {
        let queued = match self.active.get_mut(thread_id) {
            Some(a) => std::mem::take(&mut a.queued),
            None => return Ok(()),
        };
        let Some(last) = queued.last() else {
            return Ok(());
        };
        let by = last.client_id.clone().unwrap_or_else(|| turn_id.to_owned());
        let thread = self.store.get(thread_id).expect("thread exists");
        let text = super::wire::input_text(&last.input);
        let script = &self.opts.script;
        let index = turns::script_index(script, thread.turns.iter(), &by, &text, turns::as_sent);
        let steps =
            turns::plan(script.turn(index).clone(), |_| Ok::<_, Refusal>(true)).unwrap_or_default();
        for q in queued {
            let item = json!({
                "type": "userMessage",
                "id": uuid::Uuid::now_v7().to_string(),
                "content": q.input,
                "clientId": q.client_id,
            });
            self.record_item(thread_id, turn_id, item.clone());
            self.point("codex.user_message.recorded");
            self.item_started(thread_id, turn_id, &item)?;
            self.notify_item_completed(thread_id, turn_id, item)?;
        }
        self.journal.fact(
            "message.taken_up",
            json!({ "thread": thread_id, "turn": turn_id, "authorized_by": by, "script_index": index }),
        );
        if let Some(active) = self.active.get_mut(thread_id) {
            active.steps = steps;
            active.authorized_by = Some(by);
        }
        Ok(())
    }

    /// The message id the active turn's effects run under.
    fn authority(&self, thread_id: &str, turn_id: &str) -> String {
        self.active
            .get(thread_id)
            .and_then(|a| a.authorized_by.clone())
            .unwrap_or_else(|| self.turn_record(thread_id, turn_id).authorized_by.clone())
    }

    /// What follows the `turn/start` response: the user message recorded,
    /// the turn announced, then played.
    fn begin_turn(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        user_item: Value,
        turn: Value,
    ) -> Sent {
        // The turn context (with the thread's approval policy) is written
        // with the user message: a thread killed before loses the policy.
        let policy = self.policies.get(thread_id).cloned();
        if let Some(thread) = self.store.get_mut(thread_id)
            && policy.is_some()
        {
            thread.approval_policy = policy;
        }
        self.record_item(thread_id, turn_id, user_item.clone());
        self.point("codex.user_message.recorded");
        self.status_changed(thread_id)?;
        self.notify(
            "turn/started",
            json!({ "threadId": thread_id, "turn": turn }),
        )?;
        self.item_started(thread_id, turn_id, &user_item)?;
        self.notify_item_completed(thread_id, turn_id, user_item)?;
        self.pump(thread_id)
    }

    /// Whether a continuation's model skips the tool `key` of the turn it
    /// continues. It saw the outcome of a finished call, so it skips it; a
    /// call it never issued it makes now. A call issued and never finished
    /// reads back `aborted`, as the real Codex tells its model after a
    /// restart: a model that takes that at its word runs it again, effect or
    /// not, unless the continuation `text` warns that an aborted command may
    /// have run ([`CHECK_ABORTED_MARKER`]); then it checks the ledger first.
    fn continued_call(
        &self,
        key: &str,
        by: &str,
        text: &str,
        issued: &[String],
        finished: &[String],
    ) -> Result<bool, Refusal> {
        let fact = json!({ "key": key, "by": by });
        if finished.iter().any(|k| k == key) {
            self.journal
                .fact("effect.skipped", with(fact, "reason", "finished"));
            return Ok(true);
        }
        if !issued.iter().any(|k| k == key) {
            return Ok(false);
        }
        if !text.contains(CHECK_ABORTED_MARKER) {
            self.journal
                .fact("call.aborted", with(fact, "action", "run again"));
            return Ok(false);
        }
        let done = turns::done_keys(&self.opts.ledger, by)
            .map_err(|e| (INVALID_REQUEST, format!("failed to read ledger: {e}")))?
            .contains(key);
        let action = if done {
            "already in ledger"
        } else {
            "run again"
        };
        self.journal
            .fact("call.aborted", with(fact, "action", action));
        Ok(done)
    }

    /// Plays the active turn of `thread_id` until it completes or waits for the
    /// client.
    pub(super) fn pump(&mut self, thread_id: &str) -> Sent {
        loop {
            let Some(active) = self.active.get_mut(thread_id) else {
                return Ok(());
            };
            if active.waiting.is_some() {
                return Ok(());
            }
            let turn_id = active.turn_id.clone();
            if !active.asked && !active.steps.is_empty() {
                active.asked = true;
                if let Some(fault) = self.ask_model(thread_id) {
                    return self.fail_upstream(thread_id, &turn_id, fault);
                }
                continue;
            }
            let Some(step) = active.steps.pop_front() else {
                return Ok(());
            };
            match step {
                Step::Say(text) => self.agent_message(thread_id, &turn_id, &text)?,
                Step::Tool(tool) => {
                    active.tools_pending = true;
                    self.tool(thread_id, &turn_id, tool)?;
                }
                Step::Usage => {
                    let after_tools = std::mem::take(&mut active.tools_pending);
                    // The tools' outputs go back to the model: it is asked again.
                    active.asked = !after_tools;
                    self.token_usage(thread_id, &turn_id)?;
                    if after_tools {
                        self.take_up_queued(thread_id, &turn_id)?;
                    }
                }
                Step::Complete => {
                    return self.finish_turn(thread_id, TurnStatus::Completed, None);
                }
            }
        }
    }

    /// The id of the active turn's next model item (`msg_…` or `call_…`),
    /// counting the turn's model items; `output` is what the model wrote for
    /// it (for the token usage).
    pub(super) fn next_item_id(&mut self, thread_id: &str, prefix: &str, output: &str) -> String {
        let active = self.active.get_mut(thread_id).expect("turn is active");
        let n = active.items;
        active.items += 1;
        active.output_bytes += output.len();
        model_item_id(prefix, &active.turn_id, n)
    }

    /// `thread/tokenUsage/updated` for the model response that just ended:
    /// byte estimates (four bytes a token), the input being every item of
    /// the thread so far and the output what the response produced.
    fn token_usage(&mut self, thread_id: &str, turn_id: &str) -> Sent {
        let output = self
            .active
            .get_mut(thread_id)
            .map(|a| std::mem::take(&mut a.output_bytes))
            .unwrap_or_default();
        let context: usize = self
            .store
            .get(thread_id)
            .expect("thread exists")
            .turns
            .iter()
            .flat_map(|t| &t.items)
            .map(|i| i.to_string().len())
            .sum();
        let last = Tokens {
            input: context.div_ceil(4) as i64,
            output: output.div_ceil(4) as i64,
        };
        let total = self.usage.entry(thread_id.to_owned()).or_default();
        total.input += last.input;
        total.output += last.output;
        let total = *total;
        self.notify(
            "thread/tokenUsage/updated",
            json!({
                "threadId": thread_id,
                "turnId": turn_id,
                "tokenUsage": wire::token_usage(total, last),
            }),
        )
    }

    fn agent_message(&mut self, thread_id: &str, turn_id: &str, text: &str) -> Sent {
        let item_id = self.next_item_id(thread_id, "msg", text);
        self.item_started(
            thread_id,
            turn_id,
            &json!({ "type": "agentMessage", "id": item_id, "text": "" }),
        )?;
        self.notify(
            "item/agentMessage/delta",
            json!({ "threadId": thread_id, "turnId": turn_id, "itemId": item_id, "delta": text }),
        )?;
        self.item_completed(
            thread_id,
            turn_id,
            json!({ "type": "agentMessage", "id": item_id, "text": text }),
        )
    }

    fn effect_argv(&self, thread_id: &str, turn_id: &str, key: &str, by: &str) -> Vec<OsString> {
        let mut argv = self.opts.effect_argv(key, by, thread_id, turn_id);
        argv.extend(
            crate::script::duration_args(&self.opts.script, key)
                .into_iter()
                .map(OsString::from),
        );
        argv
    }

    /// The tool's command line as the model would write it: the effect argv,
    /// shell-quoted.
    fn tool_line(&self, thread_id: &str, turn_id: &str, tool: &ScriptTool) -> String {
        let by = self.authority(thread_id, turn_id);
        let words = crate::serving::lossy(&self.effect_argv(thread_id, turn_id, &tool.key, &by));
        crate::script::command_line(tool, &crate::shell::join(words.iter().map(String::as_str)))
    }

    /// Whether the thread's approval policy asks the client before `tool`.
    pub(super) fn asks_approval(&self, thread_id: &str, tool: &ScriptTool) -> bool {
        match self.approval_policy(thread_id) {
            "untrusted" => true,
            "never" => false,
            _ => tool.approval || tool.kind == ToolKind::Patch,
        }
    }

    fn tool(&mut self, thread_id: &str, turn_id: &str, tool: ScriptTool) -> Sent {
        if tool.kind == ToolKind::Patch {
            return self.patch(thread_id, turn_id, tool);
        }
        let line = self.tool_line(thread_id, turn_id, &tool);
        let item_id = self.next_item_id(thread_id, "call", &line);
        let cwd = &self.store.get(thread_id).expect("thread exists").cwd;
        let item = wire::command_item(&item_id, &line, cwd);
        // The model's call is durable before anything runs, as the real
        // rollout records a `function_call` first.
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| t.issued.push(key));
        if !self.asks_approval(thread_id, &tool) {
            self.item_started(thread_id, turn_id, &item)?;
            return self.run_tool(thread_id, turn_id, item, &tool);
        }
        let reason = format!("The script asks to run the effect {}.", tool.key);
        // Server request ids start at 0, as in the real app-server.
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        self.pending.insert(request_id, thread_id.to_owned());
        let active = self.active.get_mut(thread_id).expect("turn is active");
        active.waiting = Some(Waiting {
            request_id,
            item: item.clone(),
            tool,
        });
        // The real order: the thread waits on the approval before the item starts.
        self.status_changed(thread_id)?;
        self.item_started(thread_id, turn_id, &item)?;
        let method = "item/commandExecution/requestApproval";
        self.write(&json!({
            "id": request_id,
            "method": method,
            "params": wire::approval_params(thread_id, turn_id, &item, &reason),
        }))?;
        self.point(&format!("codex.{}.requested", slug(method)));
        Ok(())
    }

    fn run_tool(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        mut item: Value,
        tool: &ScriptTool,
    ) -> Sent {
        if tool.kind == ToolKind::Patch {
            return self.apply_patch(thread_id, turn_id, item, tool);
        }
        let by = self.authority(thread_id, turn_id);
        let line = self.tool_line(thread_id, turn_id, tool);
        self.point("codex.effect.starting");
        let started = std::time::Instant::now();
        let (status, output) = self.run_effect(thread_id, &line, &tool.key);
        let ok = status == Some(0);
        self.journal.fact(
            "effect.exited",
            json!({ "key": tool.key, "by": by, "thread": thread_id, "turn": turn_id, "exit_code": status }),
        );
        self.point("codex.effect.exited");
        self.notify(
            "item/commandExecution/outputDelta",
            json!({ "threadId": thread_id, "turnId": turn_id, "itemId": item["id"], "delta": output }),
        )?;
        item["status"] = json!(if ok { "completed" } else { "failed" });
        item["exitCode"] = json!(status);
        item["aggregatedOutput"] = json!(output);
        item["durationMs"] = json!(started.elapsed().as_millis() as i64);
        // The item and the model's sight of the outcome, in one write.
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| {
            t.items.push(item.clone());
            t.finished.push(key);
        });
        self.point("codex.item.recorded");
        self.notify_item_completed(thread_id, turn_id, item)
    }

    /// Runs the command line `line` with `/bin/bash -c` in the thread's cwd
    /// and waits for it.
    fn run_effect(&self, thread_id: &str, line: &str, key: &str) -> (Option<i32>, String) {
        let argv: Vec<OsString> = vec!["/bin/bash".into(), "-c".into(), line.into()];
        let mut cmd = crate::serving::tool_command(&argv);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // As the real server (measured on 0.171.0): the shell runs in a
        // session of its own, so a SIGKILL of the provider's process group
        // misses it; it dies of SIGTERM when its parent dies (the parent-
        // death signal); every signal is back at its default first, so a
        // SIGTERM or SIGHUP ignored by whoever started the fake (`nohup`, a
        // supervisor) does not keep it alive. A single command is the shell
        // itself (bash execs it) and dies; a compound one's children live on.
        // SAFETY: setsid, prctl, sigaction and sigprocmask are
        // async-signal-safe and touch only the child.
        unsafe {
            use std::os::unix::process::CommandExt as _;
            cmd.pre_exec(|| {
                use nix::sys::signal::{
                    SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask,
                };
                nix::unistd::setsid()?;
                for sig in Signal::iterator() {
                    if !matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
                        signal(sig, SigHandler::SigDfl)?;
                    }
                }
                sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
                Ok(())
            });
        }
        let cwd = &self.store.get(thread_id).expect("thread exists").cwd;
        if std::path::Path::new(cwd).is_dir() {
            cmd.current_dir(cwd);
        }
        let spawned = cmd.spawn().inspect(|child| {
            let start_time = crate::process::start_ticks(child.id());
            self.journal.fact(
                "effect.spawned",
                json!({ "key": key, "pid": child.id(), "start_time": start_time }),
            );
            self.point("codex.effect.spawned");
        });
        crate::serving::tool_outcome(spawned.and_then(std::process::Child::wait_with_output))
    }

    pub(super) fn on_response(&mut self, id: &Value, msg: &Value) -> Sent {
        let Some(request_id) = id.as_i64() else {
            self.journal
                .fact("response.unexpected", json!({ "id": id }));
            return Ok(());
        };
        let Some(thread_id) = self.pending.remove(&request_id) else {
            self.journal
                .fact("response.unexpected", json!({ "id": id }));
            return Ok(());
        };
        self.point("codex.approval.received");
        let Some(active) = self.active.get_mut(&thread_id) else {
            return Ok(());
        };
        let Some(waiting) = active.waiting.take() else {
            return Ok(());
        };
        debug_assert_eq!(waiting.request_id, request_id);
        let turn_id = active.turn_id.clone();
        let decision = wire::decision(msg);
        self.journal.fact(
            "approval.decided",
            json!({ "thread": thread_id, "turn": turn_id, "key": waiting.tool.key, "decision": decision }),
        );
        self.notify(
            "serverRequest/resolved",
            json!({ "threadId": thread_id, "requestId": request_id }),
        )?;
        self.decided(&thread_id, &turn_id, waiting, &decision)
    }

    /// Carries out the client's decision on the waiting command. As the real
    /// server: an accepted command's thread is active again before the
    /// command runs; a refused one is declined first, and is not part of the
    /// turn's history (`thread/read` leaves it out).
    fn decided(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        waiting: Waiting,
        decision: &str,
    ) -> Sent {
        let accepted = matches!(decision, "accept" | "acceptForSession");
        if !accepted {
            let key = waiting.tool.key.clone();
            self.update_turn(thread_id, turn_id, |t| t.finished.push(key));
        }
        if accepted {
            self.status_changed(thread_id)?;
            self.run_tool(thread_id, turn_id, waiting.item, &waiting.tool)?;
            return self.pump(thread_id);
        }
        let mut item = waiting.item;
        item["status"] = json!("declined");
        self.notify_item_completed(thread_id, turn_id, item)?;
        self.status_changed(thread_id)?;
        if decision != "cancel" {
            return self.pump(thread_id);
        }
        self.token_usage(thread_id, turn_id)?;
        self.finish_turn(
            thread_id,
            TurnStatus::Interrupted,
            Some("cancelled by the user"),
        )
    }

    pub(super) fn turn_interrupt(&mut self, id: &Value, msg: &Value) -> Result<Sent, Refusal> {
        let p: TurnInterruptParams = params(msg)?;
        self.thread_exists(&p.thread_id)?;
        match self.active.get(&p.thread_id) {
            Some(a) if a.turn_id == p.turn_id => {}
            _ => {
                return Err((
                    INVALID_REQUEST,
                    format!("no active turn {} on thread {}", p.turn_id, p.thread_id),
                ));
            }
        }
        let pending = self
            .active
            .get_mut(&p.thread_id)
            .and_then(|a| a.waiting.take());
        Ok(self.interrupt(id, &p.thread_id, &p.turn_id, pending))
    }

    /// Ends a turn the client interrupted. As the real server: the model
    /// response whose tool call waited is over (its token usage comes first),
    /// the command item is never completed, and the pending approval request
    /// is resolved only after `turn/completed`.
    fn interrupt(
        &mut self,
        id: &Value,
        thread_id: &str,
        turn_id: &str,
        pending: Option<Waiting>,
    ) -> Sent {
        if let Some(w) = &pending {
            self.pending.remove(&w.request_id);
            self.token_usage(thread_id, turn_id)?;
        }
        self.respond(id, "turn/interrupt", json!({}))?;
        self.finish_turn(
            thread_id,
            TurnStatus::Interrupted,
            Some("interrupted by the client"),
        )?;
        if let Some(w) = pending {
            self.notify(
                "serverRequest/resolved",
                json!({ "threadId": thread_id, "requestId": w.request_id }),
            )?;
        }
        Ok(())
    }
}

fn has_user_message(turn: &TurnRecord) -> bool {
    turn.items.iter().any(|i| i["type"] == "userMessage")
}

fn with(mut fact: Value, key: &str, value: &str) -> Value {
    fact[key] = json!(value);
    fact
}
