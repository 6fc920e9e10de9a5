//! The fake OpenCode's model requests and their failures: where the real
//! server asks its model API (a turn's start, and again once the tools of a
//! response ran), the fake passes `opencode.model.requested`, where the
//! harness may answer with an upstream fault
//! (`wire::upstream::UpstreamFault`). The fake then does what the real
//! OpenCode 1.18.33 does (measured, `docs/real-providers.md`;
//! `wire::upstream::opencode_reaction`): a transient failure is retried by
//! the server itself, announced by a `session.status` of type `retry` whose
//! `next` says when; any other fails the turn with the `session.error`
//! OpenCode names it with.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use ::wire::upstream::{OpencodeReaction, UpstreamFault, opencode_reaction};
use serde_json::json;

use super::Control;
use super::turn::{Outcome, Turn};
use crate::journal::now_ms;

/// The point the fake passes each time it asks its model.
const MODEL_POINT: &str = "opencode.model.requested";

impl Turn {
    /// Asks the model for the next response, retrying as OpenCode does:
    /// `Err` with the turn's outcome when the model failed for good or the
    /// client aborted the wait.
    pub(super) fn ask_model(&self) -> Result<(), Outcome> {
        let s = &self.shared;
        let mut attempt = 0;
        loop {
            let answer = s
                .opts
                .faults
                .answer_point(MODEL_POINT, Some(&self.session), &s.journal);
            let Some(fault) = answer.as_deref().and_then(UpstreamFault::parse) else {
                return Ok(());
            };
            let (message, wait_ms, announced) = match opencode_reaction(fault) {
                OpencodeReaction::Fail(error) => return Err(Outcome::Failed(error)),
                OpencodeReaction::Retry {
                    message,
                    wait_ms,
                    announced,
                } => (message, wait_ms, announced),
            };
            attempt += 1;
            if announced {
                let next = now_ms() + wait_ms;
                let status = json!({ "type": "retry", "attempt": attempt, "message": message, "next": next });
                s.emit(
                    "session.status",
                    json!({ "sessionID": self.session, "status": status }),
                );
            }
            // The wait is the product's own: an abort ends it.
            match self.control.recv_timeout(Duration::from_millis(wait_ms)) {
                Ok(Control::Abort) => return Err(Outcome::Aborted),
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Outcome::Aborted),
            }
            if announced {
                s.emit(
                    "session.status",
                    json!({ "sessionID": self.session, "status": { "type": "busy" } }),
                );
            }
        }
    }
}
