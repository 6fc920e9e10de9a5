//! The failures a provider meets in production, defined once: the model
//! API's (upstream) faults and a provider's error answer to a request.
//!
//! The harness injects them through the cut-point reply `answer NAME`
//! (`cutpoint::hit_answer`); the fakes answer with each one's real form:
//! the fake OpenAI-Responses API (`fake-provider model-api`) with the HTTP
//! status, headers and body OpenAI sends ([`UpstreamFault::openai_body`]),
//! its Anthropic Messages route (`POST /v1/messages`, the same fake) with
//! Anthropic's ([`UpstreamFault::anthropic_body`]), a stream fault by
//! cutting, ending or corrupting either route's event stream; a fake Codex, ACP agent or OpenCode server
//! answers a request with its protocol's error ([`ErrorAnswer`]). This
//! module only names the failures and their wire forms: where they are
//! planned is the harness's, what a runner must make of them is
//! `docs/recovery-contract.md` ("Upstream failures").

use serde_json::{Value, json};

/// What `Retry-After` says on an injected 429, in seconds: short enough for
/// a cell, long enough that a retry sooner than it is seen as one.
pub const RETRY_AFTER_S: u64 = 1;

/// A failure of the model API: an error status, or a stream that breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpstreamFault {
    /// 429 with `Retry-After`: rate limited; a later try succeeds.
    RateLimit,
    /// 500: the API failed on its side.
    ServerError,
    /// 503: the API is unavailable for now.
    Unavailable,
    /// 529: the API is overloaded (Anthropic's status; OpenAI-compatible
    /// gateways pass it on).
    Overload,
    /// 401: the credential expired. Sticky: every later request of the
    /// same conversation is answered 401 too; a fresh conversation (a
    /// Retry's, with a new session) is served.
    AuthExpired,
    /// 400 `context_length_exceeded`: the conversation no longer fits.
    ContextOverflow,
    /// The connection is reset after the events sent so far.
    StreamCut,
    /// The stream ends cleanly after the events sent so far, without its
    /// last event (`response.completed`, Anthropic's `message_stop`).
    StreamTruncated,
    /// The next event is not JSON.
    MalformedEvent,
}

impl UpstreamFault {
    /// Every upstream fault, in documentation order.
    pub const ALL: [UpstreamFault; 9] = [
        UpstreamFault::RateLimit,
        UpstreamFault::ServerError,
        UpstreamFault::Unavailable,
        UpstreamFault::Overload,
        UpstreamFault::AuthExpired,
        UpstreamFault::ContextOverflow,
        UpstreamFault::StreamCut,
        UpstreamFault::StreamTruncated,
        UpstreamFault::MalformedEvent,
    ];

    /// The fault's name in schedules, scenarios and the `answer` reply.
    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamFault::RateLimit => "rate-limit",
            UpstreamFault::ServerError => "server-error",
            UpstreamFault::Unavailable => "unavailable",
            UpstreamFault::Overload => "overload",
            UpstreamFault::AuthExpired => "auth-expired",
            UpstreamFault::ContextOverflow => "context-overflow",
            UpstreamFault::StreamCut => "stream-cut",
            UpstreamFault::StreamTruncated => "stream-truncated",
            UpstreamFault::MalformedEvent => "malformed-event",
        }
    }

    /// The fault named `name`.
    pub fn parse(name: &str) -> Option<UpstreamFault> {
        UpstreamFault::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// Whether it breaks a response's event stream (injected after an
    /// event was sent) rather than answering the request with a status.
    pub fn is_stream(self) -> bool {
        matches!(
            self,
            UpstreamFault::StreamCut
                | UpstreamFault::StreamTruncated
                | UpstreamFault::MalformedEvent
        )
    }

    /// The HTTP status a status fault answers with.
    pub fn status(self) -> Option<u16> {
        Some(match self {
            UpstreamFault::RateLimit => 429,
            UpstreamFault::ServerError => 500,
            UpstreamFault::Unavailable => 503,
            UpstreamFault::Overload => 529,
            UpstreamFault::AuthExpired => 401,
            UpstreamFault::ContextOverflow => 400,
            _ => return None,
        })
    }

    /// `Retry-After` in seconds, where the API sends one.
    pub fn retry_after_s(self) -> Option<u64> {
        (self == UpstreamFault::RateLimit).then_some(RETRY_AFTER_S)
    }

    /// Whether trying again later can succeed with nothing changed: true
    /// for a rate limit, a server error, an overload and a broken stream;
    /// false for an expired credential (a new one is needed) and a context
    /// overflow (a shorter conversation is).
    pub fn transient(self) -> bool {
        !matches!(
            self,
            UpstreamFault::AuthExpired | UpstreamFault::ContextOverflow
        )
    }

    /// Whether the API keeps failing this way for the rest of the conversation.
    pub fn sticky(self) -> bool {
        self == UpstreamFault::AuthExpired
    }

    /// The error body OpenAI's API answers with (`{error: {message, type,
    /// param, code}}`), as its documentation and its answers show.
    pub fn openai_body(self) -> Value {
        let (message, kind, param, code) = match self {
            UpstreamFault::RateLimit => (
                "Rate limit reached for requests. Please try again in 1s.",
                "requests",
                None,
                Some("rate_limit_exceeded"),
            ),
            UpstreamFault::ServerError => (
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
                None,
            ),
            UpstreamFault::Unavailable => (
                "The server is temporarily unavailable. Please try again later.",
                "server_error",
                None,
                None,
            ),
            UpstreamFault::Overload => (
                "The engine is currently overloaded, please try again later.",
                "server_error",
                None,
                Some("overloaded"),
            ),
            UpstreamFault::AuthExpired => (
                "Your authentication token has expired. Please try signing in again.",
                "invalid_request_error",
                None,
                Some("token_expired"),
            ),
            UpstreamFault::ContextOverflow => (
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
                "invalid_request_error",
                Some("input"),
                Some("context_length_exceeded"),
            ),
            _ => return Value::Null,
        };
        json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
    }

    /// The error body Anthropic's Messages API answers with (`{type:
    /// "error", error: {type, message}}`), for the fake Anthropic API.
    pub fn anthropic_body(self) -> Value {
        let (kind, message) = match self {
            UpstreamFault::RateLimit => (
                "rate_limit_error",
                "This request would exceed the rate limit for your organization. Please try again later.",
            ),
            UpstreamFault::ServerError => ("api_error", "Internal server error"),
            UpstreamFault::Unavailable => ("api_error", "Service unavailable"),
            UpstreamFault::Overload => ("overloaded_error", "Overloaded"),
            UpstreamFault::AuthExpired => (
                "authentication_error",
                "OAuth token has expired. Please obtain a new token or refresh your existing token.",
            ),
            UpstreamFault::ContextOverflow => (
                "invalid_request_error",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
            _ => return Value::Null,
        };
        json!({ "type": "error", "error": { "type": kind, "message": message } })
    }

    /// The malformed event a [`UpstreamFault::MalformedEvent`] sends in an
    /// OpenAI Responses stream: an SSE frame whose data is not JSON.
    pub const OPENAI_MALFORMED_FRAME: &'static str = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\n\n";

    /// The malformed event a [`UpstreamFault::MalformedEvent`] sends in an
    /// Anthropic Messages stream: an SSE frame whose data is not JSON.
    pub const ANTHROPIC_MALFORMED_FRAME: &'static str = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":\n\n";
}

/// A provider's error answer to a request it received (fault
/// `error-answer`): the protocol's own error form, with the code and
/// message its real product uses for an internal failure.
pub const ERROR_ANSWER: &str = "error-answer";

/// The JSON-RPC error a Codex app-server answers a request with when it
/// fails inside (`-32603`, the app-server's `INTERNAL_ERROR_CODE`).
pub fn codex_error_answer(method: &str) -> Value {
    json!({ "code": -32603, "message": format!("failed to handle {method}: internal error") })
}

/// The JSON-RPC error an ACP agent answers a request with when it fails
/// inside (`-32603` "Internal error", the ACP SDKs' `internalError`).
pub fn acp_error_answer(method: &str) -> Value {
    json!({ "code": -32603, "message": "Internal error", "data": { "details": format!("{method} failed") } })
}

/// The HTTP status and body an OpenCode server answers a request with when
/// it fails inside: 500 with its `NamedError` shape.
pub fn opencode_error_answer(route: &str) -> (u16, Value) {
    (
        500,
        json!({ "name": "UnknownError", "data": { "message": format!("{route} failed: internal error") } }),
    )
}

/// The provider requests an `error-answer` is planned at: the point each
/// fake passes on receiving it, where it answers through
/// `cutpoint::hit_answer`. These are the runner's requests whose answer
/// decides what it does next: a handshake, a conversation opened or
/// looked up, a turn started, a turn looked up.
pub const ERROR_ANSWER_POINTS: &[&str] = &[
    "codex.initialize.received",
    "codex.thread_start.received",
    "codex.thread_resume.received",
    "codex.thread_read.received",
    "codex.turn_start.received",
    "acp.initialize.received",
    "acp.session_new.received",
    "acp.session_load.received",
    "acp.session_prompt.received",
    "opencode.session_create.received",
    "opencode.session_get.received",
    "opencode.message.received",
    "opencode.prompt_async.received",
];

/// The requests among [`ERROR_ANSWER_POINTS`] that look up what a provider
/// recorded (a turn, a conversation) during recovery: an error there means
/// the runner does not know, not that nothing was recorded.
pub const LOOKUP_POINTS: &[&str] = &[
    "codex.thread_resume.received",
    "codex.thread_read.received",
    "acp.session_load.received",
    "opencode.session_get.received",
    "opencode.message.received",
];

/// The points where a fake provider asks its scripted model: at a turn's
/// start and again after each response that called tools, as the real
/// products ask their model API. Every upstream fault is answered there,
/// and the fake fails the turn as its real product reports that failure of
/// its model API (for Codex: [`codex_turn_error`]).
pub const PROVIDER_MODEL_POINTS: [&str; 3] = [
    "codex.model.requested",
    "acp.model.requested",
    "opencode.model.requested",
];

/// Where a fake provider says its model API is, in the errors that name it.
const FAKE_MODEL_URL: &str = "http://127.0.0.1/v1/responses";

/// The `error` (a `TurnError`: `message`, `codexErrorInfo`,
/// `additionalDetails` and `misalignment`, both null) the real Codex
/// app-server 0.171 reports, in its `error` notification, its failed turn
/// and the turn it reads back after a restart, when its model API failed
/// with `fault` and its own retries are off; measured,
/// `docs/real-providers.md` ("Upstream failures"; `turncut fidelity
/// --moments upstream` compares it with the real one).
pub fn codex_turn_error(fault: UpstreamFault) -> Value {
    let unexpected = |status: u16, reason: &str| {
        let body = fault.openai_body();
        let text = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (
            json!({ "httpConnectionFailed": { "httpStatusCode": status } }),
            format!("unexpected status {status} {reason}: {text}, url: {FAKE_MODEL_URL}"),
        )
    };
    let (info, message) = match fault {
        UpstreamFault::RateLimit => (
            json!({ "responseTooManyFailedAttempts": { "httpStatusCode": 429 } }),
            "exceeded retry limit, last status: 429 Too Many Requests".to_owned(),
        ),
        UpstreamFault::ServerError => (
            json!("internalServerError"),
            "We\u{2019}re currently experiencing high demand, which may cause temporary errors."
                .to_owned(),
        ),
        UpstreamFault::Unavailable => unexpected(503, "Service Unavailable"),
        UpstreamFault::Overload => unexpected(529, "<unknown status code>"),
        UpstreamFault::AuthExpired => unexpected(401, "Unauthorized"),
        UpstreamFault::ContextOverflow => (
            json!("contextWindowExceeded"),
            "Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.".to_owned(),
        ),
        UpstreamFault::StreamCut => (
            json!("other"),
            "stream disconnected before completion: Transport error: network error: error decoding response body".to_owned(),
        ),
        UpstreamFault::StreamTruncated | UpstreamFault::MalformedEvent => (
            json!("other"),
            "stream disconnected before completion: stream closed before response.completed"
                .to_owned(),
        ),
    };
    json!({ "message": message, "codexErrorInfo": info, "additionalDetails": null, "misalignment": null })
}

/// What the real `opencode serve` 1.18.33 does when its model API failed
/// with a fault (measured, `docs/real-providers.md`; `turncut fidelity
/// --moments upstream` compares the fake OpenCode with it): it retries a
/// transient failure itself, announcing it (`session.status` `{type:
/// "retry", attempt, message, next}`) or not, fails the turn with the
/// `session.error` it names, or, after a context overflow, compacts the
/// session.
#[derive(Clone, Debug, PartialEq)]
pub enum OpencodeReaction {
    /// It asks the model again after `wait_ms`; `announced` with this
    /// `message` in a `retry` status first.
    Retry {
        /// The status's `message`.
        message: String,
        /// The wait before the next request.
        wait_ms: u64,
        /// Whether a `retry` status announces it.
        announced: bool,
    },
    /// It fails the turn with this error (`session.error`, and the
    /// assistant message's `error`).
    Fail(Value),
    /// It names this error in a `session.error` but stores it on no
    /// message: the answer is closed with neither `finish` nor `error`, and
    /// the session is compacted (a user message with a `compaction` part,
    /// `{auto: true, overflow: true}`, and a summary answer to it, one more
    /// model request).
    Compact(Value),
}

/// How long a fake OpenCode waits before retrying a transient failure with
/// no `Retry-After`. The real one waits about 2 s (its backoff); the wait is
/// announced in `next`, which is what a runner reads, so the fake keeps the
/// shape and not the length, for the cell's time.
pub const OPENCODE_RETRY_WAIT_MS: u64 = 250;

/// What OpenCode 1.18.33 does when its model API fails with `fault` at
/// `now_ms` (ms since the epoch: the `date` of the response headers an
/// `APIError` keeps).
pub fn opencode_reaction(fault: UpstreamFault, now_ms: u64) -> OpencodeReaction {
    let body = fault.openai_body();
    let text = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let retry = |message: String, wait_ms, announced| OpencodeReaction::Retry {
        message,
        wait_ms,
        announced,
    };
    match fault {
        UpstreamFault::RateLimit => retry(text, RETRY_AFTER_S * 1000, true),
        UpstreamFault::ServerError | UpstreamFault::Unavailable | UpstreamFault::Overload => {
            retry(text, OPENCODE_RETRY_WAIT_MS, true)
        }
        UpstreamFault::StreamCut => retry(
            "Cannot connect to API: The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()".to_owned(),
            OPENCODE_RETRY_WAIT_MS,
            true,
        ),
        UpstreamFault::StreamTruncated => retry(String::new(), 0, false),
        UpstreamFault::MalformedEvent => {
            let frame = UpstreamFault::OPENAI_MALFORMED_FRAME;
            let data = frame.lines().nth(1).and_then(|l| l.strip_prefix("data: "));
            OpencodeReaction::Fail(json!({ "name": "UnknownError", "data": { "message": format!(
                "JSON parsing failed: Text: {}.\nError message: JSON Parse error: Unexpected EOF",
                data.unwrap_or_default()
            ) } }))
        }
        // The response's headers as the model API sent them (the fake
        // model API's: its body's length, its type, the date).
        UpstreamFault::AuthExpired => OpencodeReaction::Fail(json!({ "name": "APIError", "data": {
            "message": text, "statusCode": 401, "isRetryable": false,
            "responseHeaders": {
                "content-length": body.to_string().len().to_string(),
                "content-type": "application/json",
                "date": http_date(now_ms),
            },
            "responseBody": body.to_string(),
            "metadata": { "url": FAKE_MODEL_URL },
        } })),
        UpstreamFault::ContextOverflow => OpencodeReaction::Compact(json!({
            "name": "ContextOverflowError",
            "data": { "message": text, "responseBody": body.to_string() },
        })),
    }
}

/// The error OpenCode 1.18.33 fails a compaction's summary with when the
/// model answered it with a call of `tool` (the summary agent has no
/// tools), as its `session.error` and the summary answer's `error` name it
/// (measured: the fake model API answers the compaction request with the
/// script's response, a `bash` call).
pub fn opencode_summary_tool_error(tool: &str) -> Value {
    let mut name = tool.to_owned();
    if let Some(first) = name.get_mut(..1) {
        first.make_ascii_uppercase();
    }
    json!({ "name": "UnknownError", "data": {
        "message": format!("Tool call not allowed while generating summary: {name}")
    } })
}

/// `unix_ms` as an HTTP date (RFC 9110's IMF-fixdate, `Sun, 06 Dec 2026
/// 08:39:13 GMT`), as a `date` header says it.
pub fn http_date(unix_ms: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days, for days since 1970-01-01.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The error the real claude-agent-acp 0.23.1 answers `session/prompt`
/// with when its model API (Anthropic's Messages API) failed with `fault`
/// for good (measured, `docs/real-providers.md`); `None` where Claude Code
/// retries the failure itself and the turn goes on (a rate limit after its
/// `Retry-After`, a server error, an overload, a broken stream).
pub fn claude_acp_prompt_error(fault: UpstreamFault) -> Option<Value> {
    let message = match fault {
        UpstreamFault::AuthExpired => format!(
            "Internal error: Failed to authenticate. API Error: 401 {}",
            fault.anthropic_body()
        ),
        UpstreamFault::ContextOverflow => "Internal error: Prompt is too long".to_owned(),
        _ => return None,
    };
    Some(json!({ "code": -32603, "message": message }))
}

/// The error the real codex-acp 0.16.0 answers `session/prompt` with when
/// its model API (OpenAI's Responses API) failed with `fault`, its own
/// retries off as `runner-acpx-codex-real` runs it (measured by `turncut
/// fidelity --moments upstream`, `docs/real-providers.md`): every failure
/// is `-32603 "Internal error"` with Codex's error in `data`, its
/// `codex_error_info` in snake case and poorer than the app-server's
/// ([`codex_turn_error`]): `other` but for a rate limit and a server error.
/// A context overflow's message is the model API's body as it came (the
/// fake model API's, this build's JSON). A reset stream reads as the app-server's failed body
/// read; the real one says that or, by timing, that sending the request
/// failed (both `other`, `turncut fidelity` lists the variant).
pub fn codex_acp_prompt_error(fault: UpstreamFault) -> Value {
    let turn = codex_turn_error(fault);
    let message = match fault {
        UpstreamFault::ContextOverflow => fault.openai_body().to_string(),
        // An ASCII apostrophe where the app-server's has a typographic one.
        UpstreamFault::ServerError => {
            "We're currently experiencing high demand, which may cause temporary errors.".to_owned()
        }
        _ => turn["message"].as_str().unwrap_or_default().to_owned(),
    };
    let info = match fault {
        UpstreamFault::RateLimit => {
            json!({ "response_too_many_failed_attempts": { "http_status_code": 429 } })
        }
        UpstreamFault::ServerError => json!("internal_server_error"),
        _ => json!("other"),
    };
    json!({ "code": -32603, "message": "Internal error",
            "data": { "codex_error_info": info, "message": message } })
}

/// The model API's request points, where status faults are answered: its
/// OpenAI Responses route's and its Anthropic Messages route's.
pub const MODEL_REQUEST_POINTS: [&str; 2] = ["model.responses.received", "model.messages.received"];

/// The points after each route's last event of a response
/// (`response.completed`, `message_stop`): the response is whole there.
const LAST_EVENT_POINTS: [&str; 2] = ["model.response_completed.sent", "model.message_stop.sent"];

/// Whether a stream fault may be injected at `point`: after a model API
/// event was sent (`model.<type>.sent`), except the last one, after which
/// the response is whole.
pub fn stream_fault_point(point: &str) -> bool {
    point.starts_with("model.") && point.ends_with(".sent") && !LAST_EVENT_POINTS.contains(&point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_has_one_name_and_a_real_form() {
        for f in UpstreamFault::ALL {
            assert_eq!(UpstreamFault::parse(f.as_str()), Some(f));
            assert_eq!(f.is_stream(), f.status().is_none(), "{f:?}");
            if !f.is_stream() {
                assert!(f.openai_body()["error"]["message"].is_string(), "{f:?}");
                assert_eq!(f.anthropic_body()["type"], "error", "{f:?}");
            }
        }
        assert_eq!(UpstreamFault::parse("rate_limit"), None);
        assert_eq!(
            UpstreamFault::RateLimit.retry_after_s(),
            Some(RETRY_AFTER_S)
        );
        assert!(!UpstreamFault::AuthExpired.transient());
        assert!(UpstreamFault::StreamCut.transient());
        for p in LOOKUP_POINTS {
            assert!(ERROR_ANSWER_POINTS.contains(p), "{p}");
        }
        assert!(stream_fault_point("model.response_created.sent"));
        assert!(!stream_fault_point("model.response_completed.sent"));
        assert!(!stream_fault_point("model.responses.received"));
        assert!(stream_fault_point("model.content_block_delta.sent"));
        assert!(!stream_fault_point("model.message_stop.sent"));
        assert_eq!(
            http_date(1_796_546_353_999),
            "Sun, 06 Dec 2026 08:39:13 GMT"
        );
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400_000), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(
            opencode_summary_tool_error("bash")["data"]["message"],
            "Tool call not allowed while generating summary: Bash"
        );
        for frame in [
            UpstreamFault::OPENAI_MALFORMED_FRAME,
            UpstreamFault::ANTHROPIC_MALFORMED_FRAME,
        ] {
            let data = frame.lines().nth(1).and_then(|l| l.strip_prefix("data: "));
            assert!(data.is_some_and(|d| serde_json::from_str::<Value>(d).is_err()));
        }
    }
}
