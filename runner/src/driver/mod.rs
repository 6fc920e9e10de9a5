//! Provider drivers: how the runner talks to each provider protocol.
//!
//! A driver opens and resumes conversations, starts turns carrying the
//! controller's message id, answers provider requests, reports the events of a
//! turn, and answers "was this turn recorded?" from the provider's own store.
//! Drivers hold no durable state and make no recovery decisions. Only Codex
//! exists today; ACP and OpenCode join behind the same shapes.

pub mod codex;

use serde_json::Value;

/// What a driver reports from a turn in progress.
#[derive(Clone, Debug)]
pub enum ProviderEvent {
    /// An item finished (a message, a command); a summary for the run log.
    ItemCompleted { turn_id: String, item: Value },
    /// The provider asks the client to decide (an approval).
    Request {
        request_id: Value,
        method: String,
        turn_id: String,
        summary: Value,
    },
    /// A server request the runner does not handle.
    UnsupportedRequest { request_id: Value, method: String },
    /// The turn ended with `completed`, `interrupted` or `failed`.
    TurnCompleted { turn_id: String, status: String },
    /// Any other notification, by method.
    Other(String),
}

/// How to find a turn in the provider's store.
#[derive(Clone, Debug)]
pub enum TurnLookup {
    /// By the client message id sent with the turn.
    ClientId(String),
    /// By the provider's turn id.
    TurnId(String),
}

/// Driver failures, by what the engine does about them.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The provider's stdout closed: the process is gone or going.
    #[error("the provider exited")]
    Exited,
    /// Nothing arrived within the idle timeout.
    #[error("the provider was silent for {idle_ms} ms")]
    Unresponsive { idle_ms: u64 },
    /// The provider sent something unusable.
    #[error("provider protocol error: {0}")]
    Protocol(String),
    /// The provider answered a request with an error.
    #[error("{method} failed with {code}: {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
}
