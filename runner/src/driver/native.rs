//! The native driver: the runner is the agent loop and this driver is only
//! its model client. It calls an OpenAI-Responses-compatible API
//! (`POST /v1/responses` with `stream: true`) and returns the model's output
//! items; the engine persists them before any side effect, executes the
//! tools itself (`crate::native::tools`) and persists each outcome before it
//! asks the model again. A model request has no side effects, so after a
//! crash or a lost stream it is simply issued again.
//!
//! In cells the API is `fake-provider model-api`, started as the profile's
//! provider process (so it can be killed and hung like any provider); the
//! driver reads its `listening on http://…` line like the OpenCode driver.
//!
//! A model request has a deadline of its own (`budget::Pending`): `idle`
//! after it was sent or after the last event of its stream (a comment or a
//! partial event is no progress), and never past the request timeout. Its
//! stream is read within the output budget, and the output items it holds
//! are bounded in bytes.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::process::Child;

use super::DriverError;
use super::budget::{Bounds, OutputBudget, Pending};
use super::http::{BODY_BYTES_MAX, Sse, Stdout, find_blank_line, listen_address, parse_block};
use crate::causes::CauseCode;

/// Largest SSE event accepted.
const EVENT_BYTES_MAX: usize = 8 << 20;

/// A model API reachable over HTTP.
pub struct NativeDriver {
    base: String,
    http: reqwest::Client,
    bounds: Bounds,
    stdout: Arc<Stdout>,
}

/// One model response: its output items (messages, function calls).
#[derive(Debug)]
pub struct ModelOutput {
    /// The response id.
    pub id: String,
    /// Output items as the API returned them.
    pub items: Vec<Value>,
}

impl NativeDriver {
    /// Reads the listening address from the child's stdout (taken).
    pub async fn attach(child: &mut Child, bounds: Bounds) -> Result<NativeDriver, DriverError> {
        let (base, stdout) =
            listen_address(child, bounds.idle, bounds.output_bytes_per_s_max).await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| DriverError::Protocol(format!("failed to build the HTTP client: {e}")))?;
        Ok(NativeDriver {
            base,
            http,
            bounds,
            stdout,
        })
    }

    /// Nothing to shake hands with: the first request is the check.
    pub async fn initialize(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    /// Asks the model. `input` is the whole conversation as Responses input
    /// items; `metadata` carries the conversation and message ids. Returns
    /// the output items of `response.completed`.
    pub async fn respond(
        &mut self,
        model: &str,
        input: Vec<Value>,
        tools: Value,
        metadata: Value,
    ) -> Result<ModelOutput, DriverError> {
        self.stdout.check()?;
        let body = json!({
            "model": model,
            "input": input,
            "tools": tools,
            "stream": true,
            "store": false,
            "metadata": metadata,
        });
        crate::cut::hit("runner.native.responses.sent");
        let mut pending = Pending::new("POST /v1/responses", &self.bounds);
        let request = self
            .http
            .post(format!("{}/v1/responses", self.base))
            .header("accept", "text/event-stream")
            .json(&body)
            .send();
        let response = match tokio::time::timeout_at(pending.deadline(), request).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => return Err(DriverError::Exited),
            Err(_) => return Err(pending.expired()),
        };
        let status = response.status().as_u16();
        if status != 200 {
            let retry_after_ms = retry_after_ms(response.headers());
            let refused = self.refused(status, response, &pending).await;
            return Err(upstream_status(status, retry_after_ms, refused));
        }
        pending.progress();
        self.read_stream(response, pending).await
    }

    /// A non-200 answer as an error, with the API's message when it gives one.
    async fn refused(
        &self,
        status: u16,
        response: reqwest::Response,
        pending: &Pending,
    ) -> DriverError {
        let mut budget = OutputBudget::new(self.bounds.output_bytes_per_s_max);
        let read = super::http::read_body(response, "POST /v1/responses", &mut budget);
        let text = tokio::time::timeout_at(pending.deadline(), read)
            .await
            .ok()
            .and_then(Result::ok)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or(text);
        DriverError::Rpc {
            method: "POST /v1/responses".into(),
            code: i64::from(status),
            message,
        }
    }

    /// Reads the response's SSE stream up to `response.completed`; every
    /// event passes `runner.native.<type>.received` and is progress of
    /// `pending`.
    async fn read_stream(
        &self,
        mut response: reqwest::Response,
        mut pending: Pending,
    ) -> Result<ModelOutput, DriverError> {
        let mut budget = OutputBudget::new(self.bounds.output_bytes_per_s_max);
        let mut buf: Vec<u8> = Vec::new();
        let mut items = Items::default();
        loop {
            // An event that ends the buffer's first block, if any.
            if let Some(end) = find_blank_line(&buf) {
                let block: Vec<u8> = buf.drain(..end.1).collect();
                let Some(sse) = parse_block(&block[..end.0]) else {
                    continue;
                };
                pending.progress();
                let event = match sse {
                    Sse::Event(v) => v,
                    Sse::Malformed(what) => {
                        return Err(self.stream_broken(format!("the model API sent {what}")));
                    }
                    Sse::Eof => return Err(self.stream_broken("the stream ended".into())),
                };
                if let Some(output) = on_event(&event, block.len(), &mut items)? {
                    return Ok(output);
                }
                continue;
            }
            if buf.len() > EVENT_BYTES_MAX {
                return Err(DriverError::Protocol(
                    "the model API sent an event longer than the limit".into(),
                ));
            }
            match tokio::time::timeout_at(pending.deadline(), response.chunk()).await {
                Ok(Ok(Some(chunk))) => {
                    budget.spend(chunk.len()).map_err(|over| {
                        DriverError::Protocol(format!("the model API sent {over}"))
                    })?;
                    buf.extend_from_slice(&chunk);
                }
                // The stream ended before `response.completed`: the
                // provider died (its stdout closed: it is replaced) or the
                // API broke the stream (the request is tried again).
                Ok(Ok(None)) => {
                    return Err(
                        self.stream_broken("the stream ended without response.completed".into())
                    );
                }
                Ok(Err(e)) => {
                    return Err(self.stream_broken(format!("the stream broke: {e}")));
                }
                Err(_) => return Err(pending.expired()),
            }
        }
    }
}

impl NativeDriver {
    /// A stream that broke before `response.completed`: the provider is
    /// gone when its stdout closed, else the API broke the stream.
    fn stream_broken(&self, message: String) -> DriverError {
        if self.stdout.check().is_err() {
            return DriverError::Exited;
        }
        DriverError::Upstream {
            cause: CauseCode::UpstreamStreamBroken,
            retry_after_ms: None,
            message,
        }
    }
}

/// A non-200 answer of the model API as the contract's cause
/// (`super::upstream_cause`); any other status stays the API's refusal.
fn upstream_status(status: u16, retry_after_ms: Option<u64>, refused: DriverError) -> DriverError {
    let DriverError::Rpc { message, .. } = &refused else {
        return refused;
    };
    let Some(cause) = super::upstream_cause(status, message) else {
        return refused;
    };
    DriverError::Upstream {
        cause,
        retry_after_ms,
        message: format!("{status}: {message}"),
    }
}

/// `Retry-After` in delay-seconds, as milliseconds; an HTTP date or
/// anything else is ignored (the runner's own backoff applies).
fn retry_after_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: u64 = value.trim().parse().ok()?;
    Some(seconds.saturating_mul(1000))
}

/// The output items of a response stream so far.
#[derive(Default)]
struct Items {
    done: Vec<Value>,
    /// The bytes of the events they came in.
    held_bytes: usize,
}

/// One event of a response stream (of `block_len` bytes): the output once
/// the response is complete, an error if it failed.
fn on_event(
    event: &Value,
    block_len: usize,
    items: &mut Items,
) -> Result<Option<ModelOutput>, DriverError> {
    let kind = event["type"].as_str().unwrap_or_default();
    crate::cut::hit(&format!("runner.native.{}.received", cutpoint::slug(kind)));
    match kind {
        "response.output_item.done" => {
            items.held_bytes += block_len;
            if items.held_bytes > BODY_BYTES_MAX {
                return Err(DriverError::Protocol(format!(
                    "the model API sent more than {BODY_BYTES_MAX} bytes of output items"
                )));
            }
            if let Some(item) = event.get("item") {
                items.done.push(item.clone());
            }
        }
        "response.completed" => {
            let r = &event["response"];
            let output = r["output"]
                .as_array()
                .cloned()
                .filter(|o| !o.is_empty())
                .unwrap_or_else(|| std::mem::take(&mut items.done));
            return Ok(Some(ModelOutput {
                id: r["id"].as_str().unwrap_or_default().to_owned(),
                items: output,
            }));
        }
        "response.failed" | "response.incomplete" | "error" => {
            return Err(DriverError::Protocol(format!(
                "the model API ended the response with {kind}: {}",
                event.pointer("/response/error").unwrap_or(event)
            )));
        }
        _ => {}
    }
    Ok(None)
}
