//! The OpenCode driver (HTTP + SSE). Placeholder: replaced by the real driver.

use std::time::Duration;

use serde_json::Value;
use tokio::process::Child;

use super::{DriverError, ProviderEvent, TurnLookup};

/// A live OpenCode server.
pub struct OpenCodeDriver {
    _idle: Duration,
}

fn todo() -> DriverError {
    DriverError::Protocol("the opencode driver is not built yet".to_owned())
}

impl OpenCodeDriver {
    /// Reads the listening address from the child's stdout and connects.
    pub async fn attach(_child: &mut Child, idle: Duration) -> Result<OpenCodeDriver, DriverError> {
        Err(DriverError::Protocol(format!(
            "the opencode driver is not built yet ({idle:?})"
        )))
    }
    /// The handshake (health, event stream).
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        Err(todo())
    }
    /// A time-ordered OpenCode message id carrying the controller's id.
    pub fn client_id(&mut self, message_id: &str, continuation: bool) -> String {
        format!("msg_{message_id}{continuation}")
    }
    /// `POST /session`.
    pub async fn open_conversation(&mut self, _cwd: &str) -> Result<String, DriverError> {
        Err(todo())
    }
    /// `GET /session/{id}`.
    pub async fn resume_conversation(&mut self, _id: &str) -> Result<(), DriverError> {
        Err(todo())
    }
    /// `POST /session/{id}/prompt_async`.
    pub async fn start_turn(
        &mut self,
        _conversation: &str,
        _text: &str,
        _client_id: &str,
    ) -> Result<String, DriverError> {
        Err(todo())
    }
    /// `GET /session/{id}/message/{messageID}`.
    pub async fn lookup_turn(
        &mut self,
        _conversation: &str,
        _by: &TurnLookup,
    ) -> Result<Option<(String, String)>, DriverError> {
        Err(todo())
    }
    /// The next SSE event of the turn.
    pub async fn next_event(&mut self) -> Result<ProviderEvent, DriverError> {
        Err(todo())
    }
    /// `POST /permission/{id}/reply`.
    pub async fn answer(&mut self, _request_id: &Value, _decision: &str) -> Result<(), DriverError> {
        Err(todo())
    }
    /// Nothing to reject over HTTP.
    pub async fn reject(&mut self, _request_id: &Value, _method: &str) -> Result<(), DriverError> {
        Err(todo())
    }
}
