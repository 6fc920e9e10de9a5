//! The closed set of causes, events, refusal and request error reasons the
//! runner reports.
//!
//! Every failure and refusal carries a [`Cause`] `{code, recoverable, message}`
//! whose code comes from [`CauseCode`]; there is no catch-all. The same codes,
//! with the recovery contract's rows, are listed in `docs/recovery-contract.md`,
//! and a test fails when this file and that document disagree. Adding a code is
//! a reviewed change to both. This module only names things; deciding which
//! cause applies is the engine's job.

use serde::{Deserialize, Serialize};

/// The longest `Retry-After` the runner waits out; a longer one settles the
/// run at once (the controller's Retry decides when to try again). It also
/// bounds how long a provider that said it retries its model API later
/// (OpenCode's `session.status` `retry`) may stay silent.
pub const RETRY_AFTER_WAIT_MAX_MS: u64 = 60_000;

/// Why a run failed or a task needs a human.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseCode {
    /// An accepted turn was lost with its provider; one continuation follows.
    ProviderTurnLostOnRestore,
    /// The provider recorded a turn the runner never saw accepted.
    AmbiguousTurnStart,
    /// A turn waiting on an approval was lost; the approval cannot be replayed.
    ActiveTurnRecoveryClosed,
    /// The one continuation was itself cut.
    ContinuationExhausted,
    /// A previous provider process could not be proven stopped.
    CleanupQuarantined,
    /// The provider sent something the driver cannot use.
    ProviderProtocolError,
    /// The provider process could not be started or initialised.
    ProviderStartFailed,
    /// A durable write failed; nothing was sent after it.
    StorageFailed,
    /// The model API rate-limited the turn (429, Codex `rateLimitExceeded`)
    /// past what the runner and the provider retry.
    UpstreamRateLimited,
    /// The model API was overloaded or unavailable (503, 529, Codex
    /// `serverOverloaded`) past the retries.
    UpstreamOverloaded,
    /// The model API failed on its side (500, Codex `internalServerError`)
    /// past the retries.
    UpstreamServerError,
    /// The model API's response stream broke (reset, ended early, a
    /// malformed event) past the retries.
    UpstreamStreamBroken,
    /// The model API refused the credential (401): it expired or was revoked.
    UpstreamUnauthorized,
    /// The conversation no longer fits the model's context window.
    ContextWindowExceeded,
    /// The provider answered a recovery lookup with an error: whether the
    /// turn was recorded is unknown.
    ProviderLookupFailed,
}

impl CauseCode {
    /// Every code, in documentation order.
    pub const ALL: [CauseCode; 15] = [
        CauseCode::ProviderTurnLostOnRestore,
        CauseCode::AmbiguousTurnStart,
        CauseCode::ActiveTurnRecoveryClosed,
        CauseCode::ContinuationExhausted,
        CauseCode::CleanupQuarantined,
        CauseCode::ProviderProtocolError,
        CauseCode::ProviderStartFailed,
        CauseCode::StorageFailed,
        CauseCode::UpstreamRateLimited,
        CauseCode::UpstreamOverloaded,
        CauseCode::UpstreamServerError,
        CauseCode::UpstreamStreamBroken,
        CauseCode::UpstreamUnauthorized,
        CauseCode::ContextWindowExceeded,
        CauseCode::ProviderLookupFailed,
    ];

    /// Whether the failure is transient: the same work, tried again (by
    /// the runner itself where the contract lets it, else by a Retry), can
    /// succeed with nothing changed.
    pub fn recoverable(self) -> bool {
        matches!(
            self,
            CauseCode::ProviderTurnLostOnRestore
                | CauseCode::UpstreamRateLimited
                | CauseCode::UpstreamOverloaded
                | CauseCode::UpstreamServerError
                | CauseCode::UpstreamStreamBroken
        )
    }

    /// Whether the runner itself tries again after this cause
    /// (`docs/recovery-contract.md`, "Upstream failures"): one continuation
    /// of a lost turn; the model request again after a transient upstream
    /// failure, where nothing could run twice (the native loop, whose tool
    /// calls are write-ahead). A cause the run settles with is what was
    /// left when those tries ran out.
    pub fn retried_by_runner(self) -> bool {
        matches!(
            self,
            CauseCode::ProviderTurnLostOnRestore
                | CauseCode::UpstreamRateLimited
                | CauseCode::UpstreamOverloaded
                | CauseCode::UpstreamServerError
                | CauseCode::UpstreamStreamBroken
        )
    }

    /// Whether a run failing with this cause leaves its latest message
    /// answered by no one, waiting for the Retry that re-sends it: the model
    /// API failed the turn, or the lookup of the turn failed.
    pub fn leaves_message_unanswered(self) -> bool {
        self.retried_by_runner() && self != CauseCode::ProviderTurnLostOnRestore
            || matches!(
                self,
                CauseCode::UpstreamUnauthorized
                    | CauseCode::ContextWindowExceeded
                    | CauseCode::ProviderLookupFailed
            )
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseCode::ProviderTurnLostOnRestore => "provider_turn_lost_on_restore",
            CauseCode::AmbiguousTurnStart => "ambiguous_turn_start",
            CauseCode::ActiveTurnRecoveryClosed => "active_turn_recovery_closed",
            CauseCode::ContinuationExhausted => "continuation_exhausted",
            CauseCode::CleanupQuarantined => "cleanup_quarantined",
            CauseCode::ProviderProtocolError => "provider_protocol_error",
            CauseCode::ProviderStartFailed => "provider_start_failed",
            CauseCode::StorageFailed => "storage_failed",
            CauseCode::UpstreamRateLimited => "upstream_rate_limited",
            CauseCode::UpstreamOverloaded => "upstream_overloaded",
            CauseCode::UpstreamServerError => "upstream_server_error",
            CauseCode::UpstreamStreamBroken => "upstream_stream_broken",
            CauseCode::UpstreamUnauthorized => "upstream_unauthorized",
            CauseCode::ContextWindowExceeded => "context_window_exceeded",
            CauseCode::ProviderLookupFailed => "provider_lookup_failed",
        }
    }
}

/// A structured cause: never null, never generic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// The closed-set code.
    pub code: CauseCode,
    /// Whether the runner recovers by itself; always `code.recoverable()`.
    pub recoverable: bool,
    /// A sentence for a person.
    pub message: String,
}

impl Cause {
    /// A cause with the code's recoverable flag.
    pub fn new(code: CauseCode, message: impl Into<String>) -> Cause {
        Cause {
            code,
            recoverable: code.recoverable(),
            message: message.into(),
        }
    }
}

/// Server-authored run-log events that are part of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractEvent {
    /// The provider process exited while the run needed it.
    ProviderExited,
    /// The provider was silent past the idle timeout and was killed.
    ProviderUnresponsive,
    /// A runner-executed tool was `executing` at a crash; it is never re-run.
    ToolOutcomeUncertain,
    /// The previous owner's provider was proven stopped before a Retry.
    StoppedConversationVerified,
    /// A follow-up to a task that failed closed was refused.
    PriorOwnerFenceRefused,
    /// A run settled failed leaving a message queued; it waits for a Retry.
    #[serde(rename = "message.stranded")]
    MessageStranded,
}

impl ContractEvent {
    /// Every contract event, in documentation order.
    pub const ALL: [ContractEvent; 6] = [
        ContractEvent::ProviderExited,
        ContractEvent::ProviderUnresponsive,
        ContractEvent::ToolOutcomeUncertain,
        ContractEvent::StoppedConversationVerified,
        ContractEvent::PriorOwnerFenceRefused,
        ContractEvent::MessageStranded,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ContractEvent::ProviderExited => "provider_exited",
            ContractEvent::ProviderUnresponsive => "provider_unresponsive",
            ContractEvent::ToolOutcomeUncertain => "tool_outcome_uncertain",
            ContractEvent::StoppedConversationVerified => "stopped_conversation_verified",
            ContractEvent::PriorOwnerFenceRefused => "prior_owner_fence_refused",
            ContractEvent::MessageStranded => "message.stranded",
        }
    }
}

/// Why a Retry was refused (409 `{block_reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryBlock {
    /// A run of the task is still executing.
    ExecutionActive,
    /// The previous provider process is still running.
    ProcessRunning,
    /// The previous provider process could not be proven stopped.
    CleanupQuarantined,
    /// The task has not failed: there is nothing to retry.
    NothingToRetry,
}

impl RetryBlock {
    /// Every block reason, in documentation order.
    pub const ALL: [RetryBlock; 4] = [
        RetryBlock::ExecutionActive,
        RetryBlock::ProcessRunning,
        RetryBlock::CleanupQuarantined,
        RetryBlock::NothingToRetry,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryBlock::ExecutionActive => "execution_active",
            RetryBlock::ProcessRunning => "process_running",
            RetryBlock::CleanupQuarantined => "cleanup_quarantined",
            RetryBlock::NothingToRetry => "nothing_to_retry",
        }
    }
}

/// Why the API refused a request other than a Retry (409 `{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// A follow-up to a task that failed closed.
    PriorOwnerFenceRefused,
    /// An id was reused with different content (another prompt, profile or task).
    IdConflict,
    /// The profile is not configured.
    UnknownProfile,
}

impl Refusal {
    /// Every refusal reason, in documentation order.
    pub const ALL: [Refusal; 3] = [
        Refusal::PriorOwnerFenceRefused,
        Refusal::IdConflict,
        Refusal::UnknownProfile,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::PriorOwnerFenceRefused => "prior_owner_fence_refused",
            Refusal::IdConflict => "id_conflict",
            Refusal::UnknownProfile => "unknown_profile",
        }
    }
}

/// Why the API rejected a request as malformed, unauthorized, unknown or
/// too large (`{error, reason}` with the status of [`RequestError::status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestError {
    /// The body is not the JSON object the call takes.
    BadJson,
    /// A task or message id is empty, too long or has control characters.
    InvalidId,
    /// The workspace is not an absolute, canonical, existing directory other than `/`.
    InvalidWorkspace,
    /// A query string does not parse.
    BadQuery,
    /// A path segment does not decode (bad percent-encoding, not UTF-8).
    BadPath,
    /// The bearer token is missing or wrong.
    Unauthorized,
    /// The task does not exist.
    UnknownTask,
    /// No route has this path.
    NoRoute,
    /// The route exists but not with this method.
    MethodNotAllowed,
    /// A prompt or follow-up text is over its byte limit.
    TextTooLarge,
    /// The request body is over its byte limit.
    BodyTooLarge,
    /// The store failed; the request may be repeated.
    StorageFailed,
    /// runnerd has its limit of open connections; try again later.
    TooManyConnections,
}

impl RequestError {
    /// Every request error reason, in documentation order.
    pub const ALL: [RequestError; 13] = [
        RequestError::BadJson,
        RequestError::InvalidId,
        RequestError::InvalidWorkspace,
        RequestError::BadQuery,
        RequestError::BadPath,
        RequestError::Unauthorized,
        RequestError::UnknownTask,
        RequestError::NoRoute,
        RequestError::MethodNotAllowed,
        RequestError::TextTooLarge,
        RequestError::BodyTooLarge,
        RequestError::StorageFailed,
        RequestError::TooManyConnections,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestError::BadJson => "bad_json",
            RequestError::InvalidId => "invalid_id",
            RequestError::InvalidWorkspace => "invalid_workspace",
            RequestError::BadQuery => "bad_query",
            RequestError::BadPath => "bad_path",
            RequestError::Unauthorized => "unauthorized",
            RequestError::UnknownTask => "unknown_task",
            RequestError::NoRoute => "no_route",
            RequestError::MethodNotAllowed => "method_not_allowed",
            RequestError::TextTooLarge => "text_too_large",
            RequestError::BodyTooLarge => "body_too_large",
            RequestError::StorageFailed => "storage_failed",
            RequestError::TooManyConnections => "too_many_connections",
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(self) -> u16 {
        match self {
            RequestError::BadJson
            | RequestError::InvalidId
            | RequestError::InvalidWorkspace
            | RequestError::BadQuery
            | RequestError::BadPath => 400,
            RequestError::Unauthorized => 401,
            RequestError::UnknownTask | RequestError::NoRoute => 404,
            RequestError::MethodNotAllowed => 405,
            RequestError::TextTooLarge | RequestError::BodyTooLarge => 413,
            RequestError::StorageFailed | RequestError::TooManyConnections => 503,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire names from serde and from `as_str` are the same strings.
    #[test]
    fn serde_names_match_as_str() {
        for c in CauseCode::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        for e in ContractEvent::ALL {
            assert_eq!(serde_json::to_value(e).unwrap(), e.as_str());
        }
        for r in RetryBlock::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        for r in Refusal::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        for r in RequestError::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }

    /// Every code, event and reason of this file is documented in
    /// `docs/recovery-contract.md` with the same recoverable flag, and the
    /// document names no code this file lacks.
    #[test]
    fn the_contract_document_and_the_enums_agree() {
        let doc_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/recovery-contract.md");
        let doc = std::fs::read_to_string(doc_path).expect("docs/recovery-contract.md exists");
        let table = |heading: &str| -> Vec<Vec<String>> {
            let start = doc
                .find(heading)
                .unwrap_or_else(|| panic!("no {heading} section"));
            doc[start..]
                .lines()
                .skip(1)
                .skip_while(|l| !l.starts_with('|'))
                .take_while(|l| l.starts_with('|'))
                .skip(2)
                .map(|l| {
                    l.trim_matches('|')
                        .split('|')
                        .map(|c| c.trim().trim_matches('`').to_owned())
                        .collect()
                })
                .collect()
        };
        let causes = table("## Causes");
        let documented: Vec<(String, String, String)> = causes
            .iter()
            .map(|r| (r[0].clone(), r[1].clone(), r[2].clone()))
            .collect();
        let expected: Vec<(String, String, String)> = CauseCode::ALL
            .iter()
            .map(|c| {
                let by_runner = if c.retried_by_runner() { "yes" } else { "no" };
                (
                    c.as_str().to_owned(),
                    c.recoverable().to_string(),
                    by_runner.to_owned(),
                )
            })
            .collect();
        assert_eq!(documented, expected, "## Causes table");
        let names =
            |h: &str| -> Vec<String> { table(h).into_iter().map(|r| r[0].clone()).collect() };
        let events: Vec<String> = ContractEvent::ALL
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect();
        assert_eq!(names("## Events"), events, "## Events table");
        let blocks: Vec<String> = RetryBlock::ALL
            .iter()
            .map(|e| e.as_str().to_owned())
            .collect();
        assert_eq!(
            names("## Retry block reasons"),
            blocks,
            "## Retry block reasons table"
        );
        let refusals: Vec<String> = Refusal::ALL.iter().map(|e| e.as_str().to_owned()).collect();
        assert_eq!(
            names("## Refusal reasons"),
            refusals,
            "## Refusal reasons table"
        );
        let request_errors: Vec<(String, String)> = RequestError::ALL
            .iter()
            .map(|e| (e.as_str().to_owned(), e.status().to_string()))
            .collect();
        let documented: Vec<(String, String)> = table("## Request error reasons")
            .into_iter()
            .map(|r| (r[0].clone(), r[1].clone()))
            .collect();
        assert_eq!(documented, request_errors, "## Request error reasons table");
    }
}
