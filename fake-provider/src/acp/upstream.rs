//! The fake ACP agent's model requests and their failures: where the real
//! agent asks its model API (a turn's start, and again once the tools of a
//! response ran), the fake passes `acp.model.requested`, where the harness
//! may answer with an upstream fault (`wire::upstream::UpstreamFault`). The
//! fake then does what the real claude-agent-acp 0.23.1 (Claude Code) does
//! (measured, `docs/real-providers.md`): a rate limit, a server error, an
//! overload or a broken stream is retried by the agent itself and the turn
//! goes on; an expired credential is retried ten times (it stays expired)
//! and a context overflow not at all, then the turn fails and
//! `session/prompt` is answered with the error that names it
//! (`wire::upstream::claude_acp_prompt_error`). Claude Code waits out a
//! 429's `Retry-After` silently, about 0.5 s after a server error, and
//! backs off to ~38 s between its 401 retries (three minutes in all); the
//! fake retries at once, which a runner cannot tell apart but by the time
//! it waits. As codex-acp (`--like codex`, its retries off as
//! `runner-acpx-codex-real` runs it) every fault fails the prompt at once
//! with codex-acp's error (`wire::upstream::codex_acp_prompt_error`).
//! Each request is journaled (`model.requested`), as a model API journals
//! the real agent's.

use ::wire::upstream::{UpstreamFault, claude_acp_prompt_error, codex_acp_prompt_error};
use serde_json::{Value, json};

use super::{Like, Sent, Server, TurnStatus};

/// The point the fake passes each time it asks its model.
const MODEL_POINT: &str = "acp.model.requested";

/// How often Claude Code retries a request its model API answered 401
/// before it gives up (measured: 11 requests).
const AUTH_RETRIES: u32 = 10;

impl Server {
    /// Asks the model for the next response of `session_id`'s active turn,
    /// retrying what the agent it plays retries: the error the prompt is
    /// answered with when the model failed for good.
    pub(super) fn ask_model(&mut self, session_id: &str) -> Option<Value> {
        // An expired credential stays expired for the rest of this turn's
        // requests, as the fake model API keeps a conversation's.
        let mut expired = false;
        let mut retries = 0;
        let mut unstreamed = false;
        loop {
            // Journaled as the real agent's model API journals each request
            // (`turncut fidelity` counts them).
            self.journal
                .fact("model.requested", json!({ "session": session_id }));
            let answer = if expired {
                Some(UpstreamFault::AuthExpired.as_str().to_owned())
            } else {
                self.opts
                    .faults
                    .answer_point(MODEL_POINT, Some(session_id), &self.journal)
            };
            let Some(fault) = answer.as_deref().and_then(UpstreamFault::parse) else {
                if let Some(active) = self.active.get_mut(session_id) {
                    active.unstreamed = unstreamed;
                }
                return None;
            };
            expired = fault.sticky();
            // Claude Code asks again without streaming after a broken
            // stream, and sends none of that response's text live.
            unstreamed = fault.is_stream();
            let error = match self.like {
                Like::Codex => Some(codex_acp_prompt_error(fault)),
                Like::Claude | Like::Opencode if expired && retries < AUTH_RETRIES => None,
                Like::Claude | Like::Opencode => claude_acp_prompt_error(fault),
            };
            if error.is_some() {
                return error;
            }
            retries += 1;
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
    /// `session/prompt` answered with `error`. Claude Code keeps the
    /// failure as the turn's answer in its transcript (the error's message
    /// after `Internal error: `): never sent, replayed by `session/load`;
    /// codex-acp keeps none.
    pub(super) fn fail_upstream(&mut self, session_id: &str, error: Value) -> Sent {
        let kept = error["message"]
            .as_str()
            .and_then(|m| m.strip_prefix("Internal error: "))
            .filter(|_| self.like != Like::Codex)
            .map(super::wire::agent_message_chunk);
        if let Some(update) = kept {
            self.store_update(session_id, &update);
        }
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
