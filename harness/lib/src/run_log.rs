//! The run log's event kinds that turncut reads (`docs/runner-contract.md`,
//! "The run log"): one closed set, so an oracle matches a kind, not a
//! string, and a misspelt kind is a compile error rather than a check that
//! never fires. A runner may write kinds of its own: they are
//! [`Kind::Other`], which no oracle reads.
//!
//! The events themselves stay JSON in the evidence (`evidence.json` holds
//! them as the runner wrote them, and `turncut judge` reads them back); their
//! shape is checked once, when the run log is read
//! (`runner_client::event_views`).

use serde_json::Value;

/// Defines [`Kind`] with one variant per kind and its name in the run log.
macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A run-log event's kind.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind {
            $($(#[$doc])* $variant,)*
            /// A kind turncut does not read.
            Other,
        }

        impl Kind {
            /// Every kind turncut reads.
            pub const KNOWN: &[Kind] = &[$(Kind::$variant,)*];

            /// The kind named `name` in the run log.
            pub fn parse(name: &str) -> Kind {
                match name {
                    $($name => Kind::$variant,)*
                    _ => Kind::Other,
                }
            }

            /// The name in the run log (`"other"` for [`Kind::Other`]).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                    Kind::Other => "other",
                }
            }
        }
    };
}

kinds! {
    /// A task was admitted with its first message.
    TaskAdmitted = "task.admitted",
    /// A follow-up was queued.
    MessageQueued = "message.queued",
    /// A turn's intent is durable (before it is sent).
    TurnIntent = "turn.intent",
    /// The provider accepted a turn (before its output is acted on).
    TurnAccepted = "turn.accepted",
    /// A turn ended.
    TurnFinished = "turn.finished",
    /// A turn failed or was found lost.
    TurnFailed = "turn.failed",
    /// An accepted turn the provider never recorded is sent again.
    TurnAbsentAtProvider = "turn.absent_at_provider",
    /// A run settled (`state`, `cause`).
    RunSettled = "run.settled",
    /// A provider process was started.
    ProviderSpawned = "provider.spawned",
    /// A provider process was proven stopped.
    ProviderStopped = "provider.stopped",
    /// A provider left by an earlier runner was swept at start.
    ProviderSpawnSwept = "provider.spawn_swept",
    /// The runner gave up on a silent provider.
    ProviderUnresponsive = "provider_unresponsive",
    /// A provider exited on its own.
    ProviderExited = "provider_exited",
    /// A provider request (an approval) and the runner's decision.
    ProviderRequest = "provider_request",
    /// A provider item completed.
    ItemCompleted = "item.completed",
    /// The runner starts a tool call (write-ahead).
    ToolExecuting = "tool.executing",
    /// A tool call's outcome is durable.
    ToolOutcome = "tool.outcome",
    /// A tool call cut while executing: its outcome is unknown.
    ToolOutcomeUncertain = "tool_outcome_uncertain",
    /// A model answer (the native loop).
    ModelOutput = "model.output",
    /// A Retry was admitted.
    RetryAdmitted = "retry.admitted",
    /// The failed run's conversation was proven stopped before a Retry.
    StoppedConversationVerified = "stopped_conversation_verified",
    /// A message a failed run leaves waiting.
    MessageStranded = "message.stranded",
    /// A follow-up to a failed-closed task was refused.
    PriorOwnerFenceRefused = "prior_owner_fence_refused",
}

impl Kind {
    /// The kind of the run-log event `ev` (JSON as the runner wrote it).
    pub fn of(ev: &Value) -> Kind {
        ev["kind"].as_str().map_or(Kind::Other, Kind::parse)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_and_others_are_other() {
        for k in Kind::KNOWN {
            assert_eq!(Kind::parse(k.as_str()), *k);
        }
        assert_eq!(Kind::parse("my.own.kind"), Kind::Other);
        assert_eq!(Kind::of(&serde_json::json!({ "kind": 7 })), Kind::Other);
    }

    #[test]
    fn the_kinds_are_the_events_schemas_that_oracles_read() {
        use crate::runner_spec::{KindStatus, kinds};
        let spec = kinds();
        for k in Kind::KNOWN {
            assert!(
                spec.iter().any(|s| s.kind == k.as_str()),
                "docs/runner-contract.events.schema.json has no kind {k}"
            );
        }
        for s in spec.iter().filter(|s| {
            matches!(s.status, KindStatus::Required | KindStatus::When) && !s.read_by.is_empty()
        }) {
            assert_ne!(
                Kind::parse(&s.kind),
                Kind::Other,
                "the oracles read {} (the events schema says so): run_log::Kind must name it",
                s.kind
            );
        }
    }
}
