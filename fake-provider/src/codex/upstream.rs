//! The fake Codex's model requests and their failures: where the real
//! app-server asks its model API (a turn's start, and again after a
//! response that called tools), the fake passes `codex.model.requested`,
//! where the harness may answer with an upstream fault
//! (`wire::upstream::UpstreamFault`). The turn then fails as the real
//! Codex 0.171 reports that failure with its own retries off (measured,
//! `docs/real-providers.md`, "Upstream failures"): an `error`
//! notification with `willRetry: false`, then `turn/completed` `failed`
//! with the same `TurnError` (`wire::upstream::codex_turn_error`).

use ::wire::upstream::UpstreamFault;
use serde_json::json;

use super::TurnStatus;
use super::{Sent, Server};

/// The point the fake passes each time it asks its model.
const MODEL_POINT: &str = "codex.model.requested";

impl Server {
    /// Asks the model for the next response of `thread_id`'s active turn:
    /// the upstream fault it failed with, if any. An expired credential
    /// stays expired for the thread's later requests (in this process).
    pub(super) fn ask_model(&mut self, thread_id: &str) -> Option<UpstreamFault> {
        if self.dead_credentials.contains(thread_id) {
            return Some(UpstreamFault::AuthExpired);
        }
        let answer = self
            .opts
            .faults
            .answer_point(MODEL_POINT, Some(thread_id), &self.journal)?;
        let fault = UpstreamFault::parse(&answer)?;
        if fault.sticky() {
            self.dead_credentials.insert(thread_id.to_owned());
        }
        Some(fault)
    }

    /// Fails the active turn of `thread_id` as the real Codex does when
    /// its model API failed with `fault`.
    pub(super) fn fail_upstream(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        fault: UpstreamFault,
    ) -> Sent {
        let error = ::wire::upstream::codex_turn_error(fault);
        self.notify(
            "error",
            json!({ "error": error, "willRetry": false, "threadId": thread_id, "turnId": turn_id }),
        )?;
        self.finish_turn_with(thread_id, TurnStatus::Failed, Some(error))
    }
}
