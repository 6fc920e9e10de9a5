//! The fake OpenCode's model requests and their failures: where the real
//! server asks its model API (a turn's start, and again once the tools of a
//! response ran), the fake passes `opencode.model.requested`, where the
//! harness may answer with an upstream fault
//! (`wire::upstream::UpstreamFault`). The fake then does what the real
//! OpenCode 1.18.33 does (measured, `docs/real-providers.md`;
//! `wire::upstream::opencode_reaction`): a transient failure is retried by
//! the server itself, announced by a `session.status` of type `retry` whose
//! `next` says when; a context overflow is named in a `session.error`,
//! stored on no message, and followed by a compaction of the session; any
//! other fails the turn with the `session.error` OpenCode names it with.
//! Each request is journaled (`model.requested`), as a model API journals
//! the real server's (`turncut fidelity` counts them).
//!
//! The compaction's own model request passes no point (faults are planned
//! at a turn's requests): the model answers it with the response it was
//! asked for, as the fake model API answers the real server's; the summary
//! agent has no tools, so a response that calls one fails the summary, as
//! OpenCode fails it. What the real server does after a summary that
//! succeeds (it goes on with the turn) is not measured, and the fake ends
//! the turn there.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use ::wire::upstream::{
    OpencodeReaction, UpstreamFault, opencode_reaction, opencode_summary_tool_error,
};
use serde_json::{Value, json};

use super::Control;
use super::turn::{Outcome, Turn};
use super::wire;
use crate::journal::now_ms;
use crate::turns::Step;

/// The point the fake passes each time it asks its model.
const MODEL_POINT: &str = "opencode.model.requested";

/// What the model answers a compaction's summary request with: the
/// response the overflowed request asked for, its texts up to its first
/// tool call, and that call's tool.
#[derive(Debug, Default)]
pub(super) struct Summary {
    texts: Vec<String>,
    tool: Option<&'static str>,
}

impl Summary {
    /// The summary of the response whose steps are `response` (up to the
    /// end of the response).
    fn of<'s>(response: impl Iterator<Item = &'s Step>) -> Summary {
        let mut summary = Summary::default();
        for step in response {
            match step {
                Step::Say(text) => summary.texts.push(text.clone()),
                // The fake's only tool is OpenCode's `bash`.
                Step::Tool(_) => {
                    summary.tool = Some("bash");
                    break;
                }
                Step::Usage | Step::Complete => break,
            }
        }
        summary
    }
}

impl Turn {
    /// Asks the model for the next response, whose steps are `response`,
    /// retrying as OpenCode does: `Err` with the turn's outcome when the
    /// model failed for good or the client aborted the wait.
    pub(super) fn ask_model<'s>(
        &self,
        response: impl Iterator<Item = &'s Step>,
    ) -> Result<(), Outcome> {
        let s = &self.shared;
        let mut attempt = 0;
        loop {
            s.journal
                .fact("model.requested", json!({ "session": self.session }));
            let answer = s
                .opts
                .faults
                .answer_point(MODEL_POINT, Some(&self.session), &s.journal);
            let Some(fault) = answer.as_deref().and_then(UpstreamFault::parse) else {
                return Ok(());
            };
            let (message, wait_ms, announced) = match opencode_reaction(fault, now_ms()) {
                OpencodeReaction::Fail(error) => return Err(Outcome::Failed(error)),
                OpencodeReaction::Compact(error) => {
                    return Err(Outcome::Overflowed(error, Summary::of(response)));
                }
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
                self.busy();
            }
        }
    }

    /// Compacts the session after an overflow, as OpenCode 1.18.33 does: a
    /// user message with an overflow `compaction` part, and a summary
    /// answer to it (mode and agent `compaction`, `summary: true`) that asks
    /// the model once more. The model's texts become its parts; a tool call
    /// fails it (`session.error`, the session idle, then the answer stored
    /// with the error); else it completes. The caller announces the last
    /// idle.
    pub(super) fn compact(&self, summary: &Summary) {
        let s = &self.shared;
        let last = s
            .state()
            .store
            .last_message_id(&self.session)
            .map(str::to_owned);
        let request = s.ids.after("msg", last.as_deref());
        let part = json!({
            "id": s.ids.next("prt"), "sessionID": self.session, "messageID": request,
            "type": "compaction", "auto": true, "overflow": true,
        });
        let info = wire::user_info(&self.session, &request, now_ms());
        let saved = {
            let mut st = s.state();
            st.store
                .put_part(part.clone())
                .and_then(|()| st.store.put_message(&self.session, info.clone(), None))
        };
        if let Err(e) = saved {
            s.fail_storage(&e);
        }
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": info }),
        );
        self.announce_part(part);
        self.busy();
        let mut answer = wire::assistant_info(&s.ids.next("msg"), &self.session, &request);
        answer["mode"] = json!("compaction");
        answer["agent"] = json!("compaction");
        answer["summary"] = json!(true);
        self.save_message(&answer);
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": answer }),
        );
        s.journal
            .fact("model.requested", json!({ "session": self.session }));
        let id = answer["id"].as_str().unwrap_or_default().to_owned();
        for text in &summary.texts {
            self.text_part(&id, text);
        }
        self.end_summary(&mut answer, summary.tool);
    }

    /// Stores the summary `answer`'s end: failed by a call of `tool`, or
    /// completed.
    fn end_summary(&self, answer: &mut Value, tool: Option<&str>) {
        let s = &self.shared;
        answer["time"]["completed"] = json!(now_ms());
        match tool {
            Some(tool) => {
                let error = opencode_summary_tool_error(tool);
                s.emit(
                    "session.error",
                    json!({ "sessionID": self.session, "error": error }),
                );
                self.idle();
                answer["error"] = error;
            }
            None => answer["finish"] = json!("stop"),
        }
        self.save_message(answer);
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": answer }),
        );
    }

    /// Announces the session busy.
    fn busy(&self) {
        self.shared.emit(
            "session.status",
            json!({ "sessionID": self.session, "status": { "type": "busy" } }),
        );
    }
}
