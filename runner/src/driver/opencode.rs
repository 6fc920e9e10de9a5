//! The OpenCode driver: HTTP and the `GET /event` SSE stream of an `opencode serve`
//! process (or `fake-provider opencode`) on loopback.
//!
//! The provider prints `… listening on http://HOST:PORT` on stdout; [`OpenCodeDriver::attach`]
//! reads that line, then keeps draining stdout, and every later call reports
//! [`DriverError::Exited`] once stdout hits EOF (the process is gone). Every HTTP call and
//! every wait for an event is bounded by the idle timeout ([`DriverError::Unresponsive`]);
//! a refused or reset connection, or the end of the event stream, is `Exited`.
//!
//! Turns: `POST /session/{id}/prompt_async` with a client-chosen `messageID`; the message id
//! is the provider's turn id, and "was this turn recorded?" is
//! `GET /session/{id}/message/{messageID}`. A recorded turn is `completed` when the last
//! assistant message whose `parentID` is that message has `time.completed`, no `error` and
//! a final `finish`; `failed` with an error, or closed with neither `finish` nor `error`
//! (the context overflow OpenCode 1.18.33 stores on no message, read as one:
//! `wire::stores::opencode::turn_error`); and `interrupted` otherwise (no answer, an
//! aborted one, or one left unfinished by a server that died), the safe side for the
//! recovery contract.
//!
//! **Message id encoding** (the harness decodes it): [`OpenCodeDriver::client_id`] returns
//! `msg_{hex:016x}_{message_id}` for a primary turn and
//! `msg_{hex:016x}_{message_id}__continuation` for the one continuation of a lost turn,
//! where `hex` is `(unix ms << 12) | counter`, strictly increasing within the runner process
//! and greater than the hex of every `msg_<16 hex>…` id this driver has seen from the
//! provider (resume, lookups, events). OpenCode ids are time-ordered and a message must
//! sort after the session's existing ones, which the leading hex guarantees.
//!
//! Permissions (`permission.asked`) are the only provider requests; they are answered with
//! `POST /permission/{id}/reply` (`once` or `reject`). HTTP has no unsupported server
//! requests, so [`OpenCodeDriver::reject`] declines the permission. The driver keeps no
//! durable state and makes no recovery decision.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::process::Child;

use super::budget::{Bounds, OutputBudget, QUEUED_BYTES_MAX, QueueRx, queue, unresponsive};
use super::http::{Sse, Stdout, find_blank_line, listen_address, parse_block, read_body};
use super::{DriverError, FoundTurn, ProviderEvent, ProviderTurnStatus, TurnLookup};

/// Longest SSE event accepted from the provider.
const EVENT_BYTES_MAX: usize = 8 << 20;

/// Suffix of the client id of a continuation turn.
pub use wire::client_id::OPENCODE_CONTINUATION as CONTINUATION_SUFFIX;
pub use wire::stores::opencode::{UNSTORED_OVERFLOW, answer_status, turn_error, turn_status};

/// The last hex value issued by [`OpenCodeDriver::client_id`] in this process.
static LAST_ISSUED: AtomicU64 = AtomicU64::new(0);

struct ActiveTurn {
    session: String,
    message_id: String,
}

/// A live OpenCode server.
pub struct OpenCodeDriver {
    base: String,
    http: reqwest::Client,
    bounds: Bounds,
    /// The provider's stdout: closed (it died) or over its budget.
    stdout: Arc<Stdout>,
    /// The output budget of the HTTP answers (the event stream has its own).
    budget: OutputBudget,
    events: Option<QueueRx<Sse>>,
    events_ended: bool,
    active: Option<ActiveTurn>,
    /// The largest `msg_<16 hex>` value seen from the provider.
    max_seen: u64,
    /// Assistant messages of the active session by `parentID`, from `message.updated`.
    answers: HashMap<String, Value>,
    /// The last `session.error` of the active session.
    session_error: Option<Value>,
    /// When the provider said it asks its model API again (a `session.status`
    /// of type `retry`, its `next`): it is silent until then by design, so
    /// the idle timeout runs from there.
    quiet_until: Option<Instant>,
}

impl OpenCodeDriver {
    /// Reads the listening address from the child's stdout (taken) and connects.
    pub async fn attach(child: &mut Child, bounds: Bounds) -> Result<OpenCodeDriver, DriverError> {
        let (base, stdout) =
            listen_address(child, bounds.idle, bounds.output_bytes_per_s_max).await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| DriverError::Protocol(format!("failed to build the HTTP client: {e}")))?;
        Ok(OpenCodeDriver {
            base,
            http,
            bounds,
            stdout,
            budget: OutputBudget::new(bounds.output_bytes_per_s_max),
            events: None,
            events_ended: false,
            quiet_until: None,
            active: None,
            max_seen: 0,
            answers: HashMap::new(),
            session_error: None,
        })
    }

    /// The handshake: `GET /global/health`, then the `GET /event` stream, up to
    /// `server.connected`, before any prompt so no event of a turn is missed.
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        let (status, body) = self
            .call("health", Method::GET, "/global/health", None)
            .await?;
        if status != 200 || body.as_ref().and_then(|b| b.get("healthy")) != Some(&json!(true)) {
            return Err(DriverError::Protocol(format!(
                "GET /global/health answered {status}: {}",
                body.unwrap_or(Value::Null)
            )));
        }
        self.open_events().await?;
        match self.receive().await? {
            ev if ev["type"] == "server.connected" => Ok(()),
            ev => Err(DriverError::Protocol(format!(
                "the event stream began with {} instead of server.connected",
                ev["type"]
            ))),
        }
    }

    /// A time-ordered OpenCode message id carrying the controller's id (see the module docs).
    pub fn client_id(&mut self, message_id: &str, continuation: bool) -> String {
        wire::client_id::encode_opencode(next_hex(self.max_seen), message_id, continuation)
    }

    /// `POST /session`.
    pub async fn open_conversation(&mut self, _cwd: &str) -> Result<String, DriverError> {
        let what = "POST /session";
        let (status, body) = self
            .call("session_create", Method::POST, "/session", Some(json!({})))
            .await?;
        let body = expect(what, status, 200, body)?;
        str_at(&body, "/id", what)
    }

    /// `GET /session/{id}`, then its messages, to learn the largest message id.
    /// A session the server does not have (404: OpenCode syncs nothing of a
    /// turn, so a power loss can take the whole session) is
    /// [`DriverError::ConversationGone`], as a thread Codex never wrote.
    pub async fn resume_conversation(&mut self, id: &str) -> Result<(), DriverError> {
        let path = format!("/session/{id}");
        let (status, body) = self.call("session_get", Method::GET, &path, None).await?;
        if status == 404 {
            return Err(DriverError::ConversationGone(id.to_owned()));
        }
        expect("GET /session/{sessionID}", status, 200, body)?;
        self.messages(id).await?;
        Ok(())
    }

    /// `POST /session/{id}/prompt_async` with `messageID` = `client_id`; the message id is
    /// the turn id.
    pub async fn start_turn(
        &mut self,
        conversation: &str,
        text: &str,
        client_id: &str,
    ) -> Result<String, DriverError> {
        let path = format!("/session/{conversation}/prompt_async");
        let body = json!({ "messageID": client_id, "parts": [{ "type": "text", "text": text }] });
        self.active = Some(ActiveTurn {
            session: conversation.to_owned(),
            message_id: client_id.to_owned(),
        });
        self.answers.clear();
        self.session_error = None;
        let (status, reply) = self
            .call("prompt_async", Method::POST, &path, Some(body))
            .await?;
        if status != 204 {
            self.active = None;
            return Err(rpc("POST /session/{sessionID}/prompt_async", status, reply));
        }
        note_id(&mut self.max_seen, client_id);
        Ok(client_id.to_owned())
    }

    /// `GET /session/{id}/message/{messageID}` (404: not recorded), then the session's
    /// messages for the status of its answer.
    pub async fn lookup_turn(
        &mut self,
        conversation: &str,
        by: &TurnLookup,
    ) -> Result<Option<FoundTurn>, DriverError> {
        let (TurnLookup::ClientId { id, .. } | TurnLookup::TurnId(id)) = by;
        if !id.starts_with("msg") {
            // Not an OpenCode message id, so never one the provider recorded.
            return Ok(None);
        }
        let path = format!("/session/{conversation}/message/{id}");
        let (status, body) = self.call("message", Method::GET, &path, None).await?;
        if status == 404 {
            return Ok(None);
        }
        expect(
            "GET /session/{sessionID}/message/{messageID}",
            status,
            200,
            body,
        )?;
        let messages = self.messages(conversation).await?;
        let mut status = turn_status(&messages, id);
        let mut error = turn_error(&messages, id);
        // SEEDED BUG overflow-read-completed: an answer closed with neither
        // finish nor error reads as completed, as it did before OpenCode
        // 1.18.33 was measured storing a context overflow on no message.
        let unstored = |e: &Value| e["data"]["message"] == UNSTORED_OVERFLOW;
        if crate::seeded::overflow_read_completed() && error.as_ref().is_some_and(unstored) {
            (status, error) = ("completed", None);
        }
        Ok(Some(FoundTurn {
            id: id.clone(),
            status: ProviderTurnStatus::from_provider(status),
            upstream: error.as_ref().and_then(opencode_error_cause),
        }))
    }

    /// The next event of the turn in progress, from the SSE stream.
    pub async fn next_event(&mut self) -> Result<ProviderEvent, DriverError> {
        let event = self.receive().await?;
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        let props = &event["properties"];
        let session = props["sessionID"].as_str().unwrap_or_default();
        let active = self
            .active
            .as_ref()
            .filter(|a| a.session == session)
            .map(|a| a.message_id.clone());
        Ok(match (kind.as_str(), active) {
            ("message.updated", Some(_)) => {
                let info = &props["info"];
                if info["role"] == "assistant"
                    && let Some(parent) = info["parentID"].as_str()
                {
                    self.answers.insert(parent.to_owned(), info.clone());
                }
                ProviderEvent::Other(kind)
            }
            ("message.part.updated", Some(turn_id)) => {
                let part = &props["part"];
                let status = part["state"]["status"].as_str().unwrap_or_default();
                if part["type"] == "tool" && matches!(status, "completed" | "error") {
                    ProviderEvent::ItemCompleted {
                        turn_id,
                        item: summarize_tool(part),
                    }
                } else {
                    ProviderEvent::Other(kind)
                }
            }
            ("permission.asked", Some(turn_id)) => ProviderEvent::Request {
                request_id: props["id"].clone(),
                method: kind.clone(),
                turn_id,
                summary: json!({ "permission": props["permission"], "patterns": props["patterns"] }),
                item_id: None,
            },
            ("session.error", Some(_)) => {
                // The turn's first upstream failure is its cause: OpenCode
                // 1.18 answers a context overflow by compacting the session,
                // and a compaction that fails sends a second, unnamed error.
                let named = self.session_error.as_ref().and_then(opencode_error_cause);
                if named.is_none() {
                    self.session_error = Some(props["error"].clone());
                }
                ProviderEvent::Other(kind)
            }
            ("session.idle", Some(turn_id)) => {
                let status = match self.answers.get(&turn_id) {
                    Some(info) => answer_status(info, self.session_error.as_ref()),
                    None => match &self.session_error {
                        Some(e) if e["name"] != "MessageAbortedError" => "failed",
                        _ => "interrupted",
                    },
                };
                self.active = None;
                let upstream = self.session_error.as_ref().and_then(opencode_error_cause);
                ProviderEvent::TurnCompleted {
                    turn_id,
                    end: super::TurnEnd {
                        status: status.to_owned(),
                        upstream,
                    },
                }
            }
            _ => ProviderEvent::Other(kind),
        })
    }

    /// `POST /permission/{id}/reply`: `accept` → `once`, `decline` → `reject`.
    pub async fn answer(&mut self, request_id: &Value, decision: &str) -> Result<(), DriverError> {
        let id = request_id.as_str().ok_or_else(|| {
            DriverError::Protocol(format!("permission id {request_id} is not a string"))
        })?;
        let reply = match decision {
            "accept" => "once",
            "acceptForSession" => "always",
            "decline" | "cancel" => "reject",
            other => {
                return Err(DriverError::Protocol(format!(
                    "no OpenCode permission reply for the decision {other:?}"
                )));
            }
        };
        let path = format!("/permission/{id}/reply");
        let (status, body) = self
            .call(
                "permission_reply",
                Method::POST,
                &path,
                Some(json!({ "reply": reply })),
            )
            .await?;
        expect("POST /permission/{requestID}/reply", status, 200, body).map(|_| ())
    }

    /// HTTP has no unsupported server requests; a request the runner will not handle is a
    /// permission, and rejecting it declines it.
    pub async fn reject(&mut self, request_id: &Value, _method: &str) -> Result<(), DriverError> {
        self.answer(request_id, "decline").await
    }

    /// `GET /session/{id}/message`, noting every message id.
    async fn messages(&mut self, session: &str) -> Result<Vec<Value>, DriverError> {
        let what = "GET /session/{sessionID}/message";
        let path = format!("/session/{session}/message");
        let (status, body) = self.call("messages", Method::GET, &path, None).await?;
        let body = expect(what, status, 200, body)?;
        let Value::Array(list) = body else {
            return Err(DriverError::Protocol(format!(
                "{what} did not answer a list"
            )));
        };
        for m in &list {
            if let Some(id) = m["info"]["id"].as_str() {
                note_id(&mut self.max_seen, id);
            }
        }
        Ok(list)
    }

    /// One HTTP exchange, bounded by the idle timeout (a deadline of its
    /// own: nothing the provider sends extends it), its body by
    /// `http::BODY_BYTES_MAX` and the output budget: `(status, JSON body or None)`.
    /// Cut points: `runner.opencode.<slug>.sent` just before the request is written and
    /// `runner.opencode.<slug>.received` once the whole response is in.
    async fn call(
        &mut self,
        slug: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Option<Value>), DriverError> {
        self.stdout.check()?;
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = &body {
            request = request.json(b);
        }
        crate::cut::hit(&format!("runner.opencode.{slug}.sent"));
        let (budget, idle) = (&mut self.budget, self.bounds.idle);
        let exchange = async {
            let response = request.send().await.map_err(|e| match e.is_timeout() {
                true => unresponsive(idle),
                false => DriverError::Exited,
            })?;
            let status = response.status().as_u16();
            let bytes = read_body(response, path, budget).await?;
            Ok::<_, DriverError>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(idle, exchange).await {
            Ok(r) => r?,
            Err(_) => return Err(unresponsive(idle)),
        };
        let body = if bytes.iter().all(u8::is_ascii_whitespace) {
            None
        } else {
            Some(serde_json::from_slice(&bytes).map_err(|e| {
                DriverError::Protocol(format!(
                    "{path} answered {status} with a body that is not JSON ({e})"
                ))
            })?)
        };
        crate::cut::hit(&format!("runner.opencode.{slug}.received"));
        Ok((status, body))
    }

    async fn open_events(&mut self) -> Result<(), DriverError> {
        crate::cut::hit("runner.opencode.event.sent");
        let request = self
            .http
            .get(format!("{}/event", self.base))
            .header("accept", "text/event-stream")
            .send();
        let mut response = match tokio::time::timeout(self.bounds.idle, request).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return Err(DriverError::Exited),
            Err(_) => return Err(unresponsive(self.bounds.idle)),
        };
        if response.status() != 200 {
            return Err(DriverError::Protocol(format!(
                "GET /event answered {}",
                response.status()
            )));
        }
        crate::cut::hit("runner.opencode.event.received");
        // A queue bounded in bytes: while the engine does not read, the
        // stream is not read either and the provider's writes block.
        let (tx, rx) = queue(QUEUED_BYTES_MAX);
        let mut budget = OutputBudget::new(self.bounds.output_bytes_per_s_max);
        tokio::spawn(async move {
            let mut buf: Vec<u8> = Vec::new();
            loop {
                let chunk = match response.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) | Err(_) => break,
                };
                if let Err(over) = budget.spend(chunk.len()) {
                    let _ = tx.send(Sse::Malformed(over), 0).await;
                    return;
                }
                buf.extend_from_slice(&chunk);
                while let Some(end) = find_blank_line(&buf) {
                    let block: Vec<u8> = buf.drain(..end.1).collect();
                    if let Some(sse) = parse_block(&block[..end.0])
                        && !tx.send(sse, block.len()).await
                    {
                        return;
                    }
                }
                if buf.len() > EVENT_BYTES_MAX {
                    let what = "an event longer than the limit".into();
                    let _ = tx.send(Sse::Malformed(what), 0).await;
                    return;
                }
            }
            let _ = tx.send(Sse::Eof, 0).await;
        });
        self.events = Some(rx);
        self.events_ended = false;
        Ok(())
    }

    /// The next SSE event, bounded by the idle timeout; notes message ids it carries.
    async fn receive(&mut self) -> Result<Value, DriverError> {
        if self.events_ended {
            return Err(DriverError::Exited);
        }
        let Some(events) = self.events.as_mut() else {
            return Err(DriverError::Protocol(
                "the event stream is not open; call initialize".into(),
            ));
        };
        let quiet = self.quiet_until.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        });
        let event = match tokio::time::timeout(self.bounds.idle + quiet, events.recv()).await {
            Ok(Some((Sse::Event(v), _))) => v,
            Ok(Some((Sse::Malformed(what), _))) => {
                return Err(DriverError::Protocol(format!("the provider sent {what}")));
            }
            Ok(Some((Sse::Eof, _))) | Ok(None) => {
                self.events_ended = true;
                return Err(DriverError::Exited);
            }
            Err(_) => return Err(unresponsive(self.bounds.idle)),
        };
        let kind = event["type"].as_str().unwrap_or_default();
        if kind == "session.status" {
            self.quiet_until = retry_wait(&event["properties"]["status"]);
        }
        crate::cut::hit(&format!(
            "runner.opencode.{}.received",
            cutpoint::slug(kind)
        ));
        for id in [
            &event["properties"]["info"]["id"],
            &event["properties"]["part"]["messageID"],
        ] {
            if let Some(id) = id.as_str() {
                note_id(&mut self.max_seen, id);
            }
        }
        Ok(event)
    }
}

/// The hex value of a `msg_<16 hex>…` id.
fn id_hex(id: &str) -> Option<u64> {
    wire::client_id::opencode_hex(id)
}

fn note_id(max_seen: &mut u64, id: &str) {
    if let Some(h) = id_hex(id) {
        *max_seen = (*max_seen).max(h);
    }
}

/// The next id value: `(unix ms << 12) | counter`, above everything issued in this process
/// and above `floor`.
fn next_hex(floor: u64) -> u64 {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let now = now_ms << 12;
    let mut issued = 0;
    let _ = LAST_ISSUED.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        issued = now.max(last + 1).max(floor + 1);
        Some(issued)
    });
    issued
}

/// The part of a tool part worth keeping in the run log, never its whole output.
fn summarize_tool(part: &Value) -> Value {
    json!({
        "type": "tool",
        "id": part["id"],
        "callID": part["callID"],
        "tool": part["tool"],
        "status": part["state"]["status"],
    })
}

fn rpc(what: &str, status: u16, body: Option<Value>) -> DriverError {
    let body = body.unwrap_or(Value::Null);
    let message = ["/message", "/data/message"]
        .iter()
        .find_map(|p| body.pointer(p).and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    DriverError::Rpc {
        method: what.to_owned(),
        code: i64::from(status),
        message,
    }
}

fn expect(what: &str, status: u16, want: u16, body: Option<Value>) -> Result<Value, DriverError> {
    if status != want {
        return Err(rpc(what, status, body));
    }
    Ok(body.unwrap_or(Value::Null))
}

fn str_at(v: &Value, pointer: &str, what: &str) -> Result<String, DriverError> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| DriverError::Protocol(format!("{what}: missing {pointer}")))
}

/// How long OpenCode said it waits before asking its model API again: a
/// `session.status` `{type: "retry", next}` (`next` in ms since the epoch),
/// bounded by the longest wait the contract waits out.
fn retry_wait(status: &Value) -> Option<Instant> {
    if status["type"] != "retry" {
        return None;
    }
    let next = status["next"].as_u64()?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let wait = next.saturating_sub(now);
    let wait = wait.min(crate::causes::RETRY_AFTER_WAIT_MAX_MS);
    Some(Instant::now() + Duration::from_millis(wait))
}

/// How OpenCode 1.18 begins the message of a turn whose model API stream
/// carried an event that is not JSON.
const MALFORMED_STREAM: &str = "JSON parsing failed";

/// The contract's cause for a turn OpenCode failed with a `session.error`
/// whose error is an `APIError` carrying the model API's status
/// (`data.statusCode`) or a context overflow (`ContextOverflowError`).
fn opencode_error_cause(error: &Value) -> Option<crate::causes::CauseCode> {
    if error["name"] == "ContextOverflowError" {
        return Some(crate::causes::CauseCode::ContextWindowExceeded);
    }
    // A model API event that is not JSON: OpenCode 1.18 fails the turn
    // with its parser's `UnknownError` (measured), not an `APIError`.
    let message = error.pointer("/data/message").and_then(Value::as_str);
    if error["name"] == "UnknownError" && message.is_some_and(|m| m.starts_with(MALFORMED_STREAM)) {
        return Some(crate::causes::CauseCode::UpstreamStreamBroken);
    }
    let status = error
        .pointer("/data/statusCode")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())?;
    let message = error
        .pointer("/data/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    super::upstream_cause(status, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors the real `opencode serve` 1.18.33 reported for a 401 and
    /// a 400 `context_length_exceeded` from its model API (measured,
    /// `docs/real-providers.md`), as its stored answer carries them.
    #[test]
    fn the_real_opencode_s_upstream_errors_read_as_the_contract_s_causes() {
        use crate::causes::CauseCode as C;
        let answer = |error: Value| {
            json!({ "info": { "role": "assistant", "parentID": "m1",
            "time": { "created": 1, "completed": 2 }, "error": error } })
        };
        let expired = json!({ "name": "APIError", "data": {
            "message": "Your authentication token has expired. Please try signing in again.",
            "statusCode": 401, "isRetryable": false } });
        let overflow = json!({ "name": "ContextOverflowError", "data": {
            "message": "Your input exceeds the context window of this model." } });
        for (error, want) in [
            (expired, C::UpstreamUnauthorized),
            (overflow, C::ContextWindowExceeded),
        ] {
            let messages = [answer(error)];
            let found = turn_error(&messages, "m1")
                .as_ref()
                .and_then(opencode_error_cause);
            assert_eq!(found, Some(want));
        }
        let malformed = json!({ "name": "UnknownError", "data": { "message":
            "JSON parsing failed: Text: {\"type\":\"response.output_text.delta\",\"delta\":.\nError message: JSON Parse error: Unexpected EOF" } });
        assert_eq!(
            opencode_error_cause(&malformed),
            Some(C::UpstreamStreamBroken)
        );
        let other = json!({ "name": "UnknownError", "data": { "message": "Tool call not allowed while generating summary: Bash" } });
        assert_eq!(opencode_error_cause(&other), None);
        let clean = [json!({ "info": { "role": "assistant", "parentID": "m1" } })];
        assert_eq!(turn_error(&clean, "m1"), None);
        // 1.18.33 stores a context overflow on no message: the answer is
        // closed without finish or error, and the session compacted.
        let overflowed = [
            json!({ "info": { "id": "m1", "role": "user" } }),
            json!({ "info": { "role": "assistant", "parentID": "m1",
                "time": { "created": 1, "completed": 2 } } }),
            json!({ "info": { "id": "m2", "role": "user" },
                "parts": [{ "type": "compaction", "auto": true, "overflow": true }] }),
        ];
        let found = turn_error(&overflowed, "m1")
            .as_ref()
            .and_then(opencode_error_cause);
        assert_eq!(found, Some(C::ContextWindowExceeded));
        assert_eq!(turn_status(&overflowed, "m1"), "failed");
    }

    #[test]
    fn client_ids_are_time_ordered_and_embed_the_message_id() {
        let a = next_hex(0);
        let b = next_hex(0);
        assert!(b > a);
        let id = format!("msg_{a:016x}_m-1");
        assert_eq!(id_hex(&id), Some(a));
        let floor = u64::MAX / 2;
        assert!(next_hex(floor) > floor);
    }

    #[test]
    fn client_ids_sort_after_ids_seen() {
        let seen = "msg_7fffffffffffff00_x";
        let mut max = 0;
        note_id(&mut max, seen);
        note_id(&mut max, "msg_nothex");
        let id = format!("msg_{:016x}_m-2{CONTINUATION_SUFFIX}", next_hex(max));
        assert!(id.as_str() > seen, "{id} > {seen}");
        assert!(id.ends_with("_m-2__continuation"), "{id}");
    }

    #[test]
    fn sse_blocks_parse() {
        let buf = b"data: {\"type\":\"a\",\"properties\":{}}\n\n: comment\n\ndata: x";
        let (end, next) = find_blank_line(buf).unwrap();
        assert!(matches!(parse_block(&buf[..end]), Some(Sse::Event(v)) if v["type"] == "a"));
        let rest = &buf[next..];
        let (end, _) = find_blank_line(rest).unwrap();
        assert!(parse_block(&rest[..end]).is_none());
        assert!(matches!(parse_block(b"data: {"), Some(Sse::Malformed(_))));
    }
}
