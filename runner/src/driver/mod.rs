//! Provider drivers: how the runner talks to each provider protocol.
//!
//! A driver opens and resumes conversations, starts turns carrying the
//! controller's message id, answers provider requests, reports the events of a
//! turn, and answers "was this turn recorded?" from the provider's own store.
//! Drivers hold no durable state and make no recovery decisions.
//!
//! [`Driver`] is the one trait-like surface the engine sees for a provider
//! that runs the agent loop itself. It is an enum over the protocol drivers
//! (static dispatch, no boxed futures): Codex app-server (`codex`), ACP
//! (`acp`) and OpenCode (`opencode`); the Codex and ACP drivers share their
//! JSON-RPC over stdio (`jsonrpc`). The native profile has no such driver:
//! the runner is the agent loop and `native` is only its model client, which
//! the engine holds directly.

pub mod acp;
pub mod budget;
pub mod codex;
mod http;
pub mod jsonrpc;
pub mod native;
pub mod opencode;
#[cfg(test)]
mod props;
pub mod stdio;

use serde_json::Value;
use tokio::process::Child;

use crate::profiles::DriverKind;
pub use budget::Bounds;

/// What a driver reports from a turn in progress.
#[derive(Clone, Debug)]
pub enum ProviderEvent {
    /// An item finished (a message, a command); a summary for the run log.
    ItemCompleted { turn_id: String, item: Value },
    /// The provider asks the client to decide (an approval or permission).
    Request {
        request_id: Value,
        method: String,
        turn_id: String,
        summary: Value,
        /// The item the request is about (a Codex command), if any.
        item_id: Option<String>,
    },
    /// The provider asks the client to run a tool on the client side (ACP
    /// `terminal/*`, `fs/*`). `key` is unique per run: a provider restored
    /// into a new process gets a per-process namespace, so its ids never
    /// collide with ids answered before.
    ClientTool {
        request_id: Value,
        key: String,
        call: ClientCall,
    },
    /// A server request the runner does not handle.
    UnsupportedRequest { request_id: Value, method: String },
    /// The turn ended (`end`).
    TurnCompleted { turn_id: String, end: TurnEnd },
    /// Any other notification, by method.
    Other(String),
}

/// How a turn ended: `completed`, `interrupted` or `failed`; `upstream` is
/// the contract's cause when the provider reports that its model API failed
/// the turn (Codex `codexErrorInfo`, OpenCode's `APIError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnEnd {
    /// The status in the provider's spelling.
    pub status: String,
    /// The upstream cause the provider reported, if any.
    pub upstream: Option<crate::causes::CauseCode>,
}

/// A client-side tool request (ACP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCall {
    /// `terminal/create`: start a command (the side effect).
    TerminalCreate {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    /// `terminal/wait_for_exit`.
    TerminalWait { terminal_id: String },
    /// `terminal/output`.
    TerminalOutput { terminal_id: String },
    /// `terminal/kill`.
    TerminalKill { terminal_id: String },
    /// `terminal/release`.
    TerminalRelease { terminal_id: String },
    /// `fs/write_text_file` (the side effect).
    WriteTextFile { path: String, content: String },
    /// `fs/read_text_file`.
    ReadTextFile { path: String },
}

impl ClientCall {
    /// Whether running it changes the world (and so needs `executing` first).
    pub fn has_effect(&self) -> bool {
        matches!(
            self,
            ClientCall::TerminalCreate { .. } | ClientCall::WriteTextFile { .. }
        )
    }
}

/// A turn the provider recorded, as [`Driver::lookup_turn`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTurn {
    /// The provider's id of the turn.
    pub id: String,
    pub status: ProviderTurnStatus,
    /// The contract's cause for the model API failure the provider recorded
    /// the turn failing with, if it did (Codex: the turn's
    /// `error.codexErrorInfo`).
    pub upstream: Option<crate::causes::CauseCode>,
}

/// The status of a recorded turn, in the provider's spelling (`Display`
/// prints it, and causes quote it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderTurnStatus {
    /// `completed`.
    Completed,
    /// `interrupted`: also what a protocol that cannot tell a completed turn
    /// from an interrupted one says.
    Interrupted,
    /// `inProgress`.
    InProgress,
    /// `failed`.
    Failed,
    /// `notRecorded`: the provider has the turn without its user message
    /// (Codex writes it after the `turn/start` response), so the message
    /// never reached the model.
    NotRecorded,
    /// Any other text the provider answered, kept as it said it.
    Other(String),
}

impl ProviderTurnStatus {
    /// The status a provider spelled `text`.
    pub fn from_provider(text: &str) -> ProviderTurnStatus {
        match text {
            "completed" => ProviderTurnStatus::Completed,
            "interrupted" => ProviderTurnStatus::Interrupted,
            "inProgress" => ProviderTurnStatus::InProgress,
            "failed" => ProviderTurnStatus::Failed,
            "notRecorded" => ProviderTurnStatus::NotRecorded,
            other => ProviderTurnStatus::Other(other.to_owned()),
        }
    }

    /// The provider's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ProviderTurnStatus::Completed => "completed",
            ProviderTurnStatus::Interrupted => "interrupted",
            ProviderTurnStatus::InProgress => "inProgress",
            ProviderTurnStatus::Failed => "failed",
            ProviderTurnStatus::NotRecorded => "notRecorded",
            ProviderTurnStatus::Other(text) => text,
        }
    }
}

impl std::fmt::Display for ProviderTurnStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to find a turn in the provider's store.
#[derive(Clone, Debug)]
pub enum TurnLookup {
    /// By the client message id sent with the turn; `sent` is what it
    /// carried, for a provider that keeps message ids of its own.
    ClientId { id: String, sent: Sent },
    /// By the provider's turn id.
    TurnId(String),
}

/// What the runner sent as a turn it never saw accepted, for a provider
/// that stores the user message under an id of its own (`opencode acp`):
/// the turn is recorded when a user message of its text follows every turn
/// the provider accepted before it.
#[derive(Clone, Debug, Default)]
pub struct Sent {
    /// The turn's prompt text.
    pub text: String,
    /// The provider's ids of the task's turns accepted before it.
    pub earlier: Vec<String>,
    /// For an accepted turn: the tool calls of it the runner saw completed.
    pub completed_tools: Vec<String>,
}

/// Driver failures, by what the engine does about them.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The provider's stdout closed: the process is gone or going.
    #[error("the provider exited")]
    Exited,
    /// Nothing arrived within the idle timeout, or a request was not
    /// answered by its deadline (`unanswered` says which, and how long).
    #[error("{}", unresponsive_text(*idle_ms, unanswered.as_deref()))]
    Unresponsive {
        idle_ms: u64,
        unanswered: Option<String>,
    },
    /// The provider sent something unusable.
    #[error("provider protocol error: {0}")]
    Protocol(String),
    /// The provider has no conversation by that id (Codex: a thread whose
    /// process died before its first turn was never written).
    #[error("the provider has no conversation {0}")]
    ConversationGone(String),
    /// The provider answered a request with an error.
    #[error("{method} failed with {code}: {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
    /// The model API failed upstream (an error status, a broken stream),
    /// as the model client saw it or the provider reported it; `cause` is
    /// the contract's code for it (`docs/recovery-contract.md`, "Upstream
    /// failures"), `retry_after_ms` the API's `Retry-After`.
    #[error("the model API failed: {message}")]
    Upstream {
        cause: crate::causes::CauseCode,
        retry_after_ms: Option<u64>,
        message: String,
    },
}

/// The contract's cause for a model API's error status: 429 rate limited,
/// 503 and 529 overloaded, any other 5xx a server error, 401 and 403
/// unauthorized, 400 whose message names the context window a full one;
/// `None` for any other status (a refusal the provider must explain).
pub fn upstream_cause(status: u16, message: &str) -> Option<crate::causes::CauseCode> {
    use crate::causes::CauseCode;
    Some(match status {
        // SEEDED BUG rate-limit-unrecoverable: a 429 is a refusal like any 4xx.
        429 if !crate::seeded::rate_limit_unrecoverable() => CauseCode::UpstreamRateLimited,
        503 | 529 => CauseCode::UpstreamOverloaded,
        500..=599 => CauseCode::UpstreamServerError,
        401 | 403 => CauseCode::UpstreamUnauthorized,
        400 if message.contains("context window") || message.contains("context_length") => {
            CauseCode::ContextWindowExceeded
        }
        _ => return None,
    })
}

fn unresponsive_text(idle_ms: u64, unanswered: Option<&str>) -> String {
    match unanswered {
        Some(what) => format!("the provider made no progress for {idle_ms} ms: {what}"),
        None => format!("the provider was silent for {idle_ms} ms"),
    }
}

/// A live provider connection, whatever its protocol.
pub enum Driver {
    /// Codex app-server.
    Codex(codex::CodexDriver),
    /// Agent Client Protocol.
    Acp(acp::AcpDriver),
    /// OpenCode server.
    OpenCode(opencode::OpenCodeDriver),
}

macro_rules! each {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            Driver::Codex($d) => $e,
            Driver::Acp($d) => $e,
            Driver::OpenCode($d) => $e,
        }
    };
}

impl Driver {
    /// Takes over a spawned child's stdio (both piped) and connects.
    /// `namespace` is unique per provider process (ACP call-id namespacing).
    /// The native profile has no provider driver (its model client is
    /// [`native::NativeDriver`]): asking for one is a protocol error.
    pub async fn attach(
        kind: DriverKind,
        child: &mut Child,
        bounds: Bounds,
        namespace: &str,
    ) -> Result<Driver, DriverError> {
        Ok(match kind {
            DriverKind::Codex => Driver::Codex(codex::CodexDriver::attach(child, bounds)),
            DriverKind::Acp => Driver::Acp(acp::AcpDriver::attach(child, bounds, namespace)),
            DriverKind::Opencode => {
                Driver::OpenCode(opencode::OpenCodeDriver::attach(child, bounds).await?)
            }
            DriverKind::Native => {
                return Err(DriverError::Protocol(
                    "the native profile has no provider driver: the runner is the agent loop"
                        .to_owned(),
                ));
            }
        })
    }

    /// The handshake.
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        each!(self, d => d.initialize().await)
    }

    /// The client id a turn for `message_id` carries (`continuation`: the one
    /// continuation of a lost turn). Persisted with the turn intent, so a
    /// lookup after a restart uses exactly what was sent.
    pub fn client_id(&mut self, message_id: &str, continuation: bool) -> String {
        match self {
            Driver::OpenCode(d) => d.client_id(message_id, continuation),
            _ => plain_client_id(message_id, continuation),
        }
    }

    /// Opens a fresh conversation in `cwd`; returns its id.
    pub async fn open_conversation(&mut self, cwd: &str) -> Result<String, DriverError> {
        each!(self, d => d.open_conversation(cwd).await)
    }

    /// Loads an existing conversation into this provider process.
    pub async fn resume_conversation(&mut self, id: &str, cwd: &str) -> Result<(), DriverError> {
        match self {
            Driver::Codex(d) => d.resume_conversation(id, cwd).await,
            Driver::Acp(d) => d.resume_conversation(id, cwd).await,
            Driver::OpenCode(d) => d.resume_conversation(id).await,
        }
    }

    /// Starts a turn; returns the provider's turn id once the provider has
    /// acknowledged it (the runner persists it as accepted).
    pub async fn start_turn(
        &mut self,
        conversation: &str,
        text: &str,
        client_id: &str,
    ) -> Result<String, DriverError> {
        each!(self, d => d.start_turn(conversation, text, client_id).await)
    }

    /// Whether a turn this provider did not record (absent, or
    /// [`ProviderTurnStatus::NotRecorded`]) provably reached no model, so sending it again is
    /// its first delivery. True for Codex and OpenCode, which write the user
    /// message before they ask the model (measured on the real products:
    /// OpenCode 1.18.33 answers `prompt_async` 204 first and writes the user
    /// message 5 ms to 1.2 s later, then runs the model; killed in between,
    /// the message is gone and no model request was made).
    pub fn unrecorded_reached_no_model(&self) -> bool {
        matches!(self, Driver::Codex(_) | Driver::OpenCode(_))
    }

    /// Was this turn recorded? Its id and [`ProviderTurnStatus`]. A protocol
    /// that cannot tell a completed turn from an interrupted one says
    /// `interrupted` (the safe side: a continuation, never an adoption).
    pub async fn lookup_turn(
        &mut self,
        conversation: &str,
        by: &TurnLookup,
    ) -> Result<Option<FoundTurn>, DriverError> {
        each!(self, d => d.lookup_turn(conversation, by).await)
    }

    /// Whether the replay of the last lookup names no user message (ACP
    /// agents that keep neither the runner's id nor one of their own on
    /// them: codex-acp, claude-agent-acp), so an accepted turn looked up by
    /// the runner's id is never found by it.
    pub fn replay_names_nothing(&self) -> bool {
        match self {
            Driver::Acp(d) => d.replay_names_nothing(),
            _ => false,
        }
    }

    /// An accepted turn of such an agent, found in the last lookup's
    /// replay by what it carried (`sent`): see
    /// [`acp::AcpDriver::recorded_unnamed`].
    pub fn recorded_unnamed(&self, id: &str, sent: &Sent) -> Option<FoundTurn> {
        match self {
            Driver::Acp(d) => d.recorded_unnamed(id, sent),
            _ => None,
        }
    }

    /// The next event of the turn in progress.
    pub async fn next_event(&mut self) -> Result<ProviderEvent, DriverError> {
        each!(self, d => d.next_event().await)
    }

    /// Answers a provider request with the profile's decision (`accept` or
    /// `decline`).
    pub async fn answer(&mut self, request_id: &Value, decision: &str) -> Result<(), DriverError> {
        each!(self, d => d.answer(request_id, decision).await)
    }

    /// Answers a client tool request with its result or an error message.
    pub async fn respond_tool(
        &mut self,
        request_id: &Value,
        result: Result<Value, String>,
    ) -> Result<(), DriverError> {
        match self {
            Driver::Acp(d) => d.respond_tool(request_id, result).await,
            _ => Err(DriverError::Protocol(
                "this protocol has no client-side tools".to_owned(),
            )),
        }
    }

    /// Answers an unsupported request with an error so the provider does not
    /// wait forever.
    pub async fn reject(&mut self, request_id: &Value, method: &str) -> Result<(), DriverError> {
        each!(self, d => d.reject(request_id, method).await)
    }
}

/// The client id of a turn for `message_id` on a protocol that carries the
/// controller's id as it is: the id itself, or `<id>#continuation` for the
/// one continuation of a lost turn.
pub fn plain_client_id(message_id: &str, continuation: bool) -> String {
    if continuation {
        wire::client_id::continuation_of(message_id)
    } else {
        message_id.to_owned()
    }
}
