//! What a fake durably recorded, read back from its state directory: the
//! provider's truth for the harness's oracles, whatever the protocol.

use serde::{Deserialize, Serialize};

/// A turn as a fake durably recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedTurn {
    /// The conversation (Codex thread, ACP session, OpenCode session).
    pub thread: String,
    /// The provider's turn id (Codex turn id, ACP/OpenCode user message id).
    pub turn: String,
    /// The client message id it was started with, as the client sent it.
    pub client_id: Option<String>,
    /// `inProgress`, `completed`, `interrupted` or `failed`.
    pub status: String,
    /// Whether it is a continuation (its text starts with the continue marker).
    pub continuation: bool,
    /// The client message id whose authority its effects run under.
    pub authorized_by: String,
    /// How many model requests answered it, where the provider is a model
    /// API that counts them (the native profile's); `None` elsewhere.
    #[serde(default)]
    pub model_requests: Option<u64>,
}
