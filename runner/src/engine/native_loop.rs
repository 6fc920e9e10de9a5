//! The native profile's agent loop: the runner asks the model, persists its
//! output before any side effect, executes each tool call itself
//! (`executing` before the effect, the outcome before going on), and asks
//! again until the model answers without calls.
//!
//! A native turn's checkpoint (`native::checkpoint::Checkpoint`) is the
//! provider's record, so a cut turn is never classified against a provider:
//! it resumes from the checkpoint, where calls cut while executing become
//! `uncertain` and are never run again, and the model request is simply
//! issued again (it has no side effects).

use serde_json::{Value, json};

use super::{Engine, NATIVE_MODEL_CALLS_MAX, StepError, driver_err};
use crate::causes::{Cause, CauseCode};
use crate::driver::DriverError;
use crate::driver::native::NativeDriver;
use crate::native::checkpoint::{CallStatus, Checkpoint};
use crate::native::tools::{self, Limits, Tool, ToolOutput, Workspace};
use crate::store::{Run, Snapshot, StoreError, TurnRow, TurnStatus};

/// One native turn in progress: what every durable write of it names.
struct NativeTurn<'a> {
    snap: &'a Snapshot,
    run: &'a Run,
    conversation: &'a str,
    turn: &'a TurnRow,
}

impl NativeTurn<'_> {
    fn row(&self) -> i64 {
        self.turn.turn_row
    }
}

/// A checkpoint that does not parse: the store is corrupt.
fn corrupt(e: String) -> StepError {
    StepError::Storage(StoreError::Corrupt {
        table: "native_checkpoints",
        detail: e,
    })
}

impl Engine {
    /// Plays a native turn: with `text`, a turn just intended; with `None`,
    /// a cut turn resumed from its durable checkpoint.
    pub(super) async fn native_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        text: Option<&str>,
        model: &mut NativeDriver,
    ) -> Result<(), StepError> {
        let nt = NativeTurn {
            snap,
            run,
            conversation,
            turn,
        };
        let mut cp = self.checkpoint(&nt, text).await?;
        if text.is_none() {
            // The model's durable last answer made no calls: the turn was
            // answered before the cut, and asking again would get a second
            // final answer (SEEDED BUG native-reasks-final: it asks).
            if cp.answered() && !crate::seeded::native_reasks_final() {
                return self.native_completed(&nt).await;
            }
            self.recover_calls(&nt, &mut cp).await?;
        }
        let ws = Workspace::new(&snap.task.workspace).map_err(|e| {
            StepError::Fail(Cause::new(
                CauseCode::ProviderStartFailed,
                format!("the task workspace is not usable: {e}"),
            ))
        })?;
        let scrub = self.scrub(&snap.task.profile);
        let scrub: Vec<&str> = scrub.iter().map(String::as_str).collect();
        loop {
            self.run_pending_calls(&nt, &mut cp, &ws, &scrub).await?;
            if cp.model_calls >= NATIVE_MODEL_CALLS_MAX {
                return Err(StepError::Fail(Cause::new(
                    CauseCode::ProviderProtocolError,
                    format!(
                        "the model was asked {} times in one turn without a final answer",
                        cp.model_calls
                    ),
                )));
            }
            match self.ask_model(&nt, &mut cp, model).await {
                Ok(0) => return self.native_completed(&nt).await,
                Ok(_) => {}
                // SEEDED BUG retry-turn-after-stream-cut: a broken stream
                // starts the turn over, and its completed calls run again.
                Err(StepError::Fail(c))
                    if c.code == CauseCode::UpstreamStreamBroken
                        && crate::seeded::retry_turn_after_stream_cut() =>
                {
                    for call in &mut cp.pending_calls {
                        call.status = CallStatus::Pending;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The turn's durable checkpoint, or a new one with the user message as
    /// its first history item (the turn accepted first, when it was not).
    async fn checkpoint(
        &self,
        nt: &NativeTurn<'_>,
        text: Option<&str>,
    ) -> Result<Checkpoint, StepError> {
        let (task_id, row, turn) = (&nt.snap.task.task_id, nt.row(), nt.turn);
        let stored = self
            .read("native_checkpoint", move |db| db.native_checkpoint(row))
            .await?;
        if let Some(v) = stored {
            return Checkpoint::from_json(&v).map_err(|e| corrupt(e.to_string()));
        }
        let text = match text {
            Some(t) => t.to_owned(),
            None => self.message_text(task_id, &turn.message_id).await?,
        };
        let model = &self.profile(&nt.snap.task.profile).model;
        let cp = Checkpoint::new(model, nt.conversation, &turn.message_id, &text);
        if turn.provider_turn_id.is_some() {
            // Accepted by a runner before this one's change: the checkpoint
            // alone is missing.
            let data = json!({ "turn_row": row });
            self.native_save("native_checkpoint", nt, &cp, "native.checkpoint", data)
                .await?;
            return Ok(cp);
        }
        let (tid, rid, cid, conv, json) = (
            task_id.clone(),
            nt.run.run_id.clone(),
            turn.client_id.clone(),
            cp.conversation.clone(),
            cp.to_json(),
        );
        self.write("native_checkpoint", move |db| {
            db.native_accept(&tid, &rid, row, &cid, &conv, json)
        })
        .await?;
        // The acceptance's boundary, as on every profile: a turn-active
        // follow-up is sent here, and the recovery contract names it.
        crate::cut::persisted("turn_accepted");
        Ok(cp)
    }

    /// On resume: every call cut while executing becomes `uncertain` (event
    /// `tool_outcome_uncertain`), never executed again; the model is told.
    async fn recover_calls(
        &self,
        nt: &NativeTurn<'_>,
        cp: &mut Checkpoint,
    ) -> Result<(), StepError> {
        if crate::seeded::rerun_executing_tool() {
            // SEEDED BUG rerun-executing-tool: a call cut while it ran is
            // treated as never started, and runs again.
            for c in &mut cp.pending_calls {
                if c.status == CallStatus::Executing {
                    c.status = CallStatus::Pending;
                }
            }
        }
        let cut_calls: Vec<String> = cp
            .pending_calls
            .iter()
            .filter(|c| c.status == CallStatus::Executing)
            .map(|c| c.call_id.clone())
            .collect();
        if cp.recover() > 0 {
            let data = json!({ "turn_row": nt.row(), "keys": cut_calls, "action": "never executed again; the model is told" });
            self.native_save("tool_uncertain", nt, cp, "tool_outcome_uncertain", data)
                .await?;
        }
        Ok(())
    }

    /// Executes the model's pending calls in order: a call with an effect is
    /// `executing` before it, every outcome durable before the next call.
    async fn run_pending_calls(
        &self,
        nt: &NativeTurn<'_>,
        cp: &mut Checkpoint,
        ws: &Workspace,
        scrub: &[&str],
    ) -> Result<(), StepError> {
        let row = nt.row();
        let limits = Limits::default();
        while let Some(i) = cp
            .pending_calls
            .iter()
            .position(|c| c.status == CallStatus::Pending)
        {
            let call = cp.pending_calls[i].clone();
            let output = match Tool::parse(&call.name, &call.arguments) {
                Err(e) => ToolOutput::from(e),
                Ok(tool) => {
                    if tool.has_effect() {
                        cp.pending_calls[i].status = CallStatus::Executing;
                        let data = json!({ "turn_row": row, "key": call.call_id,
                                           "kind": call.name, "detail": tool.detail() });
                        self.native_save("tool_executing", nt, cp, "tool.executing", data)
                            .await?;
                    }
                    let out = tool.execute(ws, &limits, scrub).await;
                    crate::cut::hit("runner.tool.executed");
                    out
                }
            };
            cp.pending_calls[i].status = CallStatus::Completed {
                output: output.output,
                ok: output.ok,
            };
            let more = cp
                .pending_calls
                .iter()
                .any(|c| c.status == CallStatus::Pending);
            // SEEDED BUG continue-before-outcome: the outcome of a call
            // is only written with the next call's intent.
            if more && crate::seeded::continue_before_outcome() {
                continue;
            }
            let data = json!({ "turn_row": row, "key": call.call_id, "ok": output.ok });
            self.native_save("tool_outcome", nt, cp, "tool.outcome", data)
                .await?;
        }
        Ok(())
    }

    /// Asks the model (the conversation so far, then this turn) and
    /// persists its output with its calls, all `pending`; returns how many
    /// calls it made.
    async fn ask_model(
        &self,
        nt: &NativeTurn<'_>,
        cp: &mut Checkpoint,
        model: &mut NativeDriver,
    ) -> Result<usize, StepError> {
        let row = nt.row();
        let (conv, r) = (nt.conversation.to_owned(), row);
        let earlier = self
            .read("native_history", move |db| {
                db.native_checkpoints_before(&conv, r)
            })
            .await?;
        let mut input = Vec::new();
        for v in &earlier {
            let prev = Checkpoint::from_json(v).map_err(|e| corrupt(e.to_string()))?;
            input.extend(prev.model_input());
        }
        input.extend(cp.model_input());
        let metadata = json!({
            "turncut_message_id": nt.turn.message_id,
            "turncut_conversation": nt.conversation,
        });
        let profile = self.profile(&nt.snap.task.profile);
        let out = ask_with_retries(model, &profile.model, input, metadata).await?;
        let calls = cp.record_response(out.items).map_err(|e| {
            StepError::Fail(Cause::new(CauseCode::ProviderProtocolError, e.to_string()))
        })?;
        let data = json!({ "turn_row": row, "response_id": out.id, "calls": calls });
        self.native_save("model_output", nt, cp, "model.output", data)
            .await?;
        Ok(calls)
    }

    /// A response without calls completes the turn.
    async fn native_completed(&self, nt: &NativeTurn<'_>) -> Result<(), StepError> {
        let (tid, rid, row) = (
            nt.snap.task.task_id.clone(),
            nt.run.run_id.clone(),
            nt.row(),
        );
        let pt = nt.turn.client_id.clone();
        self.write("turn_ended", move |db| {
            db.turn_finished(
                &tid,
                &rid,
                row,
                TurnStatus::Completed,
                json!({ "provider_turn_id": pt }),
            )
        })
        .await
    }

    /// Persists a native checkpoint with its run-log event; the write's cut
    /// point follows.
    async fn native_save(
        &self,
        write: &'static str,
        nt: &NativeTurn<'_>,
        cp: &Checkpoint,
        kind: &'static str,
        data: Value,
    ) -> Result<(), StepError> {
        let (tid, rid, conv, row) = (
            nt.snap.task.task_id.clone(),
            nt.run.run_id.clone(),
            cp.conversation.clone(),
            nt.row(),
        );
        let json = cp.to_json();
        self.write(write, move |db| {
            db.native_save(write, &tid, &rid, row, &conv, json, kind, data)
        })
        .await
    }
}

/// How many times one model request is tried after transient upstream
/// failures before the run settles with the cause.
pub const UPSTREAM_TRIES_MAX: u32 = 4;

/// The first wait between two tries of a model request; it doubles.
const UPSTREAM_BACKOFF_FIRST_MS: u64 = 250;

pub use crate::causes::RETRY_AFTER_WAIT_MAX_MS;

/// Asks the model, trying again after a transient upstream failure
/// (`CauseCode::retried_by_runner`) at most [`UPSTREAM_TRIES_MAX`] times,
/// never sooner than the API's `Retry-After`. Safe because a model request
/// has no side effects and every call of the turn is write-ahead: the same
/// durable history is sent again, nothing runs twice. An upstream failure
/// that trying again cannot mend (an expired credential, a full context
/// window) settles the run at once.
async fn ask_with_retries(
    model: &mut NativeDriver,
    model_name: &str,
    input: Vec<Value>,
    metadata: Value,
) -> Result<crate::driver::native::ModelOutput, StepError> {
    let mut tries = 0u32;
    loop {
        tries += 1;
        let result = model
            .respond(
                model_name,
                input.clone(),
                tools::definitions(),
                metadata.clone(),
            )
            .await;
        let e = match result {
            Ok(out) => return Ok(out),
            Err(e) => e,
        };
        let DriverError::Upstream {
            cause,
            retry_after_ms,
            ..
        } = &e
        else {
            return Err(driver_err(e));
        };
        let retry_after = retry_after_ms.unwrap_or(0);
        if *cause == CauseCode::UpstreamStreamBroken && crate::seeded::retry_turn_after_stream_cut()
        {
            return Err(driver_err(e));
        }
        let seeded =
            crate::seeded::retry_unauthorized() && *cause == CauseCode::UpstreamUnauthorized;
        let may_retry = (cause.retried_by_runner() && tries < UPSTREAM_TRIES_MAX) || seeded;
        if !may_retry || retry_after > RETRY_AFTER_WAIT_MAX_MS {
            return Err(driver_err(e));
        }
        let backoff = UPSTREAM_BACKOFF_FIRST_MS << (tries - 1).min(8);
        let wait = if crate::seeded::ignore_retry_after() {
            0
        } else {
            backoff.max(retry_after)
        };
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
}
