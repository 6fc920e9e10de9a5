//! The Codex app-server driver: JSON-RPC over the provider's stdio, one JSON
//! object per line without a `jsonrpc` field.
//!
//! It speaks to `codex app-server` and to `fake-provider codex` alike: the
//! handshake, `thread/start`, `thread/resume`, `thread/read {includeTurns}` for
//! the "was this turn recorded?" lookup (by `userMessage.clientId` or turn id),
//! `turn/start` with `clientUserMessageId`, approval answers (of commands and of
//! patches, `fileChange` items) and
//! `turn/interrupt`. Every wait on the provider is bounded by the idle timeout;
//! a silent provider is reported as unresponsive, a closed stdout as exited.
//! The driver keeps no durable state and makes no recovery decision: it reports
//! what the provider says and the engine decides.

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio::process::Child;

use super::budget::Bounds;
use super::jsonrpc::Rpc;
use super::{DriverError, FoundTurn, ProviderEvent, ProviderTurnStatus, TurnLookup};

/// A live Codex app-server process and the client end of its stdio.
pub struct CodexDriver {
    rpc: Rpc,
    loaded: HashSet<String>,
    /// Threads opened by this process on which no turn was started: Codex
    /// has not written them, and `thread/read {includeTurns}` fails on them.
    fresh: HashSet<String>,
}

impl CodexDriver {
    /// Takes over a spawned child's stdio (both must be piped).
    pub fn attach(child: &mut Child, bounds: Bounds) -> CodexDriver {
        CodexDriver {
            rpc: Rpc::attach(child, bounds, "codex", false),
            loaded: HashSet::new(),
            fresh: HashSet::new(),
        }
    }

    async fn send(&mut self, msg: &Value) -> Result<(), DriverError> {
        self.rpc.send(msg).await
    }

    /// Sends a request and waits for its result; notifications that arrive
    /// meanwhile are queued for [`CodexDriver::next_event`].
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, DriverError> {
        self.rpc.request(method, params, None).await
    }

    /// The handshake.
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        self.request(
            "initialize",
            json!({ "clientInfo": { "name": "runnerd", "title": null, "version": env!("CARGO_PKG_VERSION") } }),
        )
        .await?;
        self.send(&json!({ "method": "initialized" })).await
    }

    /// Opens a fresh thread in `cwd`.
    pub async fn open_conversation(&mut self, cwd: &str) -> Result<String, DriverError> {
        let result = self.request("thread/start", json!({ "cwd": cwd })).await?;
        let id = str_at(&result, "/thread/id", "thread/start")?;
        self.loaded.insert(id.clone());
        self.fresh.insert(id.clone());
        Ok(id)
    }

    /// Loads an existing thread into this process (no effect on the model).
    /// What the runner sets per thread (`cwd`) is given again: a restarted
    /// Codex keeps only what its rollout has. A thread Codex never wrote (its
    /// process died before the first turn) is [`DriverError::ConversationGone`].
    pub async fn resume_conversation(
        &mut self,
        thread_id: &str,
        cwd: &str,
    ) -> Result<(), DriverError> {
        if self.loaded.contains(thread_id) {
            return Ok(());
        }
        let resumed = self
            .request(
                "thread/resume",
                json!({ "threadId": thread_id, "excludeTurns": true, "cwd": cwd }),
            )
            .await;
        match resumed {
            Err(DriverError::Rpc { message, .. }) if never_written(&message) => {
                return Err(DriverError::ConversationGone(thread_id.to_owned()));
            }
            other => other?,
        };
        self.loaded.insert(thread_id.to_owned());
        Ok(())
    }

    /// Starts a turn with `text` as the user input; returns the provider's turn id.
    pub async fn start_turn(
        &mut self,
        thread_id: &str,
        text: &str,
        client_id: &str,
    ) -> Result<String, DriverError> {
        self.fresh.remove(thread_id);
        let result = self
            .request(
                "turn/start",
                json!({
                    "threadId": thread_id,
                    "input": [{ "type": "text", "text": text, "text_elements": [] }],
                    "clientUserMessageId": client_id,
                }),
            )
            .await?;
        str_at(&result, "/turn/id", "turn/start")
    }

    /// Was this turn recorded? Looks it up by client message id or turn id in
    /// `thread/read {includeTurns: true}`.
    pub async fn lookup_turn(
        &mut self,
        thread_id: &str,
        by: &TurnLookup,
    ) -> Result<Option<FoundTurn>, DriverError> {
        if self.fresh.contains(thread_id) {
            // No turn was ever started on it: nothing can be recorded.
            return Ok(None);
        }
        let result = self
            .request(
                "thread/read",
                json!({ "threadId": thread_id, "includeTurns": true }),
            )
            .await?;
        let turns = result
            .pointer("/thread/turns")
            .and_then(Value::as_array)
            .ok_or_else(|| DriverError::Protocol("thread/read returned no turns".to_owned()))?;
        for turn in turns {
            let matches = match by {
                TurnLookup::TurnId(id) => turn.get("id").and_then(Value::as_str) == Some(id),
                TurnLookup::ClientId { id: cid, .. } => turn
                    .get("items")
                    .and_then(Value::as_array)
                    .is_some_and(|items| {
                        items.iter().any(|i| {
                            i.get("type").and_then(Value::as_str) == Some("userMessage")
                                && i.get("clientId").and_then(Value::as_str) == Some(cid)
                        })
                    }),
            };
            if matches {
                let id = str_at(turn, "/id", "thread/read")?;
                let status = str_at(turn, "/status", "thread/read")?;
                let has_message = turn
                    .get("items")
                    .and_then(Value::as_array)
                    .is_some_and(|items| items.iter().any(|i| i["type"] == "userMessage"));
                let status = match has_message {
                    true => ProviderTurnStatus::from_provider(&status),
                    false => ProviderTurnStatus::NotRecorded,
                };
                let upstream = turn.get("error").and_then(codex_error_cause);
                return Ok(Some(FoundTurn {
                    id,
                    status,
                    upstream,
                }));
            }
        }
        Ok(None)
    }

    /// Answers a server request (an approval) with `decision`.
    pub async fn answer(&mut self, request_id: &Value, decision: &str) -> Result<(), DriverError> {
        self.send(&json!({ "id": request_id, "result": { "decision": decision } }))
            .await
    }

    /// The next event of the turn in progress.
    pub async fn next_event(&mut self) -> Result<ProviderEvent, DriverError> {
        let msg = self.rpc.next().await?;
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        Ok(match (method, msg.get("id")) {
            // A patch (`apply_patch`, a `fileChange` item) asks like a
            // command and takes the same decisions.
            (
                "item/commandExecution/requestApproval" | "item/fileChange/requestApproval",
                Some(id),
            ) => ProviderEvent::Request {
                request_id: id.clone(),
                method: method.to_owned(),
                turn_id: params
                    .get("turnId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                summary: params.get("command").cloned().unwrap_or(Value::Null),
                item_id: params
                    .get("itemId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            (m, Some(id)) if !m.is_empty() => ProviderEvent::UnsupportedRequest {
                request_id: id.clone(),
                method: m.to_owned(),
            },
            ("item/completed", None) => ProviderEvent::ItemCompleted {
                turn_id: params
                    .get("turnId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                item: summarize_item(params.get("item").unwrap_or(&Value::Null)),
            },
            ("turn/completed", None) => ProviderEvent::TurnCompleted {
                turn_id: str_at(&params, "/turn/id", "turn/completed")?,
                end: super::TurnEnd {
                    status: str_at(&params, "/turn/status", "turn/completed")?,
                    upstream: params.pointer("/turn/error").and_then(codex_error_cause),
                },
            },
            (m, None) if !m.is_empty() => ProviderEvent::Other(m.to_owned()),
            _ => ProviderEvent::Other(String::new()),
        })
    }

    /// Answers an unsupported server request with an error so the provider
    /// does not wait forever.
    pub async fn reject(&mut self, request_id: &Value, method: &str) -> Result<(), DriverError> {
        self.send(&json!({
            "id": request_id,
            "error": { "code": -32601, "message": format!("runnerd does not handle {method}") },
        }))
        .await
    }
}

/// The part of an item worth keeping in the run log: type, id, status, text
/// or command, never the whole payload.
fn summarize_item(item: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["type", "id", "status", "text", "exitCode", "clientId"] {
        if let Some(v) = item.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

fn str_at(v: &Value, pointer: &str, what: &str) -> Result<String, DriverError> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| DriverError::Protocol(format!("{what}: missing {pointer}")))
}

/// Whether a `thread/resume` error says Codex never wrote the thread: no
/// rollout file (`-32600 no rollout found …`: killed before its first
/// turn), or one it created and never wrote into (`-32603 … rollout at
/// <path> is empty`: the real 0.171.0 killed right after it began its first
/// turn, measured in a `runner-codex-real` cell). Either way nothing of the
/// thread, its first user message included, is durable.
fn never_written(message: &str) -> bool {
    message.starts_with("no rollout found")
        || (message.contains("rollout at ") && message.ends_with(" is empty"))
}

/// How codex 0.171 begins the message of a turn whose model API stream
/// broke: "stream disconnected before completion: stream closed before
/// response.completed" (measured, `docs/real-providers.md`).
const STREAM_DISCONNECTED: &str = "stream disconnected before completion";

/// The contract's cause for a turn Codex failed with `error.codexErrorInfo`
/// (its vendored spec's `CodexErrorInfo`): a named upstream failure, or
/// one carrying the model API's `httpStatusCode` (`httpConnectionFailed`,
/// `responseTooManyFailedAttempts`, `responseStream…`), read as that
/// status; a stream that broke with no status is a broken stream. Codex
/// 0.171.0 against a failing model API reports these, measured
/// (`docs/real-providers.md`, "Upstream failures").
pub fn codex_error_cause(error: &Value) -> Option<crate::causes::CauseCode> {
    use crate::causes::CauseCode;
    let info = error.get("codexErrorInfo")?;
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    if let Some(name) = info.as_str() {
        return match name {
            "rateLimitExceeded" | "usageLimitExceeded" => Some(CauseCode::UpstreamRateLimited),
            "serverOverloaded" => Some(CauseCode::UpstreamOverloaded),
            "internalServerError" => Some(CauseCode::UpstreamServerError),
            "unauthorized" => Some(CauseCode::UpstreamUnauthorized),
            "contextWindowExceeded" => Some(CauseCode::ContextWindowExceeded),
            // With its stream retries off, codex 0.171 reports a stream cut,
            // ended early or corrupted as `other`, told by its message.
            "other" if message.starts_with(STREAM_DISCONNECTED) => {
                Some(CauseCode::UpstreamStreamBroken)
            }
            _ => None,
        };
    }
    let (kind, detail) = info.as_object()?.iter().next()?;
    let status = detail
        .get("httpStatusCode")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    match (kind.as_str(), status) {
        (_, Some(s)) if super::upstream_cause(s, message).is_some() => {
            super::upstream_cause(s, message)
        }
        ("responseStreamDisconnected" | "responseStreamConnectionFailed", _) => {
            Some(CauseCode::UpstreamStreamBroken)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_never_written_is_told_by_both_resume_errors() {
        assert!(never_written("no rollout found for thread id 01a2"));
        assert!(never_written(
            "failed to read thread: thread-store internal error: failed to read session \
             metadata /h/sessions/r.jsonl: rollout at /h/sessions/r.jsonl is empty"
        ));
        assert!(!never_written(
            "thread-store internal error: permission denied"
        ));
    }

    /// The `turn.error` shapes the real codex 0.171.0 sent for each model API
    /// failure (docs/real-providers.md, "Upstream failures") read as the
    /// contract's causes.
    #[test]
    fn codex_error_info_reads_as_the_contract_s_upstream_cause() {
        use crate::causes::CauseCode as C;
        let cases = [
            (
                json!({"responseTooManyFailedAttempts": {"httpStatusCode": 429}}),
                Some(C::UpstreamRateLimited),
            ),
            (json!("internalServerError"), Some(C::UpstreamServerError)),
            (
                json!({"httpConnectionFailed": {"httpStatusCode": 503}}),
                Some(C::UpstreamOverloaded),
            ),
            (
                json!({"httpConnectionFailed": {"httpStatusCode": 529}}),
                Some(C::UpstreamOverloaded),
            ),
            (
                json!({"httpConnectionFailed": {"httpStatusCode": 401}}),
                Some(C::UpstreamUnauthorized),
            ),
            (
                json!("contextWindowExceeded"),
                Some(C::ContextWindowExceeded),
            ),
            (
                json!({"responseStreamDisconnected": {"httpStatusCode": null}}),
                Some(C::UpstreamStreamBroken),
            ),
            (json!("sandboxError"), None),
            (
                json!({"httpConnectionFailed": {"httpStatusCode": 418}}),
                None,
            ),
        ];
        for (info, want) in cases {
            let error = json!({ "message": "m", "codexErrorInfo": info });
            assert_eq!(super::codex_error_cause(&error), want, "{info}");
        }
        assert_eq!(super::codex_error_cause(&json!({ "message": "m" })), None);
        let cut = json!({ "codexErrorInfo": "other", "message":
            "stream disconnected before completion: Transport error: network error: error decoding response body" });
        assert_eq!(
            super::codex_error_cause(&cut),
            Some(C::UpstreamStreamBroken)
        );
        let other = json!({ "codexErrorInfo": "other", "message": "m" });
        assert_eq!(super::codex_error_cause(&other), None);
    }
}
