//! The fake ACP agent's model requests and their failures: where the real
//! agent asks its model API (a turn's start, and again once the tools of a
//! response ran), the fake passes `acp.model.requested`, where the harness
//! may answer with an upstream fault (`wire::upstream::UpstreamFault`). The
//! fake then does what the real claude-agent-acp 0.23.1 (Claude Code) does
//! (measured, `docs/real-providers.md`): a rate limit, a server error, an
//! overload or a broken stream is retried by the agent itself and the turn
//! goes on; an expired credential or a context overflow fails the turn, and
//! `session/prompt` is answered with the error that names it
//! (`wire::upstream::claude_acp_prompt_error`). Claude Code waits out a
//! 429's `Retry-After` silently and retries a 401 about ten times over
//! three minutes before it gives up; the fake retries at once and gives up
//! at once, which a runner cannot tell apart but by the time it waits.

use ::wire::upstream::{UpstreamFault, claude_acp_prompt_error};
use serde_json::{Value, json};

use super::{Sent, Server, TurnStatus};

/// The point the fake passes each time it asks its model.
const MODEL_POINT: &str = "acp.model.requested";

impl Server {
    /// Asks the model for the next response of `session_id`'s active turn,
    /// retrying what Claude Code retries: the error the prompt is answered
    /// with when the model failed for good.
    pub(super) fn ask_model(&mut self, session_id: &str) -> Option<Value> {
        loop {
            let answer =
                self.opts
                    .faults
                    .answer_point(MODEL_POINT, Some(session_id), &self.journal)?;
            let fault = UpstreamFault::parse(&answer)?;
            if let Some(error) = claude_acp_prompt_error(fault) {
                return Some(error);
            }
            self.journal.fact(
                "model.retried",
                json!({ "session": session_id, "fault": fault.as_str() }),
            );
        }
    }

    /// The turn's first model request, asked as it starts (before the
    /// message is echoed): the error the prompt is answered with, if the
    /// model failed for good.
    pub(super) fn first_model_request(&mut self, session_id: &str) -> Option<Value> {
        let error = self.ask_model(session_id);
        if let Some(active) = self.active.get_mut(session_id) {
            active.asked = true;
        }
        error
    }

    /// Fails the active turn of `session_id`: durable as failed, then its
    /// `session/prompt` answered with `error`.
    pub(super) fn fail_upstream(&mut self, session_id: &str, error: Value) -> Sent {
        let Some(active) = self.active.remove(session_id) else {
            return Ok(());
        };
        let fact = self.end_turn(session_id, active.index, TurnStatus::Failed, None);
        self.write_finish(session_id, fact);
        self.write(&json!({ "jsonrpc": "2.0", "id": active.prompt_id, "error": error }))?;
        self.point("acp.session_prompt.responded");
        Ok(())
    }
}
