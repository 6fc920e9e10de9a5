//! JSON-RPC over a provider's stdio, shared by the Codex and ACP drivers: one
//! JSON object per line, requests with increasing integer ids, every wait
//! bounded by the idle timeout.
//!
//! [`Rpc`] sends and receives (each message passing the cut point
//! `runner.<protocol>.<method|response|error>.sent|received`), matches a
//! response to its request and queues whatever arrives meanwhile for the
//! driver's event loop. It knows no method of either protocol: the drivers
//! build their messages and read their events.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use super::DriverError;
use super::stdio::Line;

/// The JSON-RPC connection to one provider process.
pub struct Rpc {
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<Line>,
    /// Messages that arrived while a response was awaited, oldest first.
    queue: VecDeque<Value>,
    next_id: i64,
    idle: Duration,
    exited: bool,
    /// The protocol's name in cut points (`codex`, `acp`).
    protocol: &'static str,
    /// Whether requests carry `"jsonrpc": "2.0"` (ACP) or not (Codex).
    versioned: bool,
}

impl Rpc {
    /// Takes over a spawned child's stdio (both must be piped).
    pub fn attach(
        child: &mut Child,
        idle: Duration,
        protocol: &'static str,
        versioned: bool,
    ) -> Rpc {
        let stdin = child.stdin.take().expect("provider stdin is piped");
        let stdout = child.stdout.take().expect("provider stdout is piped");
        Rpc {
            stdin,
            lines: super::stdio::read_lines(stdout),
            queue: VecDeque::new(),
            next_id: 0,
            idle,
            exited: false,
            protocol,
            versioned,
        }
    }

    /// The error of a provider silent for the idle timeout.
    pub fn idle_err(&self) -> DriverError {
        DriverError::Unresponsive {
            idle_ms: self.idle.as_millis() as u64,
        }
    }

    /// Writes one message, bounded by the idle timeout.
    pub async fn send(&mut self, msg: &Value) -> Result<(), DriverError> {
        let mut line = serde_json::to_vec(msg).expect("messages serialize");
        line.push(b'\n');
        let write = async {
            self.stdin.write_all(&line).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(self.idle, write).await {
            Ok(Ok(())) => {
                crate::cut::hit(&format!("runner.{}.{}.sent", self.protocol, kind_slug(msg)));
                Ok(())
            }
            Ok(Err(_)) => Err(DriverError::Exited),
            Err(_) => Err(self.idle_err()),
        }
    }

    /// Receives the next message, bounded by the idle timeout.
    pub async fn receive(&mut self) -> Result<Value, DriverError> {
        if self.exited {
            return Err(DriverError::Exited);
        }
        match tokio::time::timeout(self.idle, self.lines.recv()).await {
            Ok(Some(Line::Msg(v))) => {
                crate::cut::hit(&format!(
                    "runner.{}.{}.received",
                    self.protocol,
                    kind_slug(&v)
                ));
                match unaddressed_error(&v) {
                    Some(e) => Err(e),
                    None => Ok(v),
                }
            }
            Ok(Some(Line::Malformed(what))) => {
                Err(DriverError::Protocol(format!("the provider sent {what}")))
            }
            Ok(Some(Line::Eof)) | Ok(None) => {
                self.exited = true;
                Err(DriverError::Exited)
            }
            Err(_) => Err(self.idle_err()),
        }
    }

    /// The oldest queued message, else the next one received.
    pub async fn next(&mut self) -> Result<Value, DriverError> {
        match self.queue.pop_front() {
            Some(m) => Ok(m),
            None => self.receive().await,
        }
    }

    /// Queues a message for [`Rpc::next`].
    pub fn push(&mut self, msg: Value) {
        self.queue.push_back(msg);
    }

    /// Sends a request without waiting; returns its id.
    pub async fn send_request(&mut self, method: &str, params: Value) -> Result<i64, DriverError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = Map::new();
        if self.versioned {
            msg.insert("jsonrpc".into(), json!("2.0"));
        }
        msg.insert("id".into(), json!(id));
        msg.insert("method".into(), json!(method));
        msg.insert("params".into(), params);
        self.send(&Value::Object(msg)).await?;
        Ok(id)
    }

    /// Sends a request and waits for its result. Messages that arrive
    /// meanwhile are queued for [`Rpc::next`], except while `replay` is
    /// given: then `session/update` notifications go there (ACP's
    /// `session/load`).
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        mut replay: Option<&mut Vec<Value>>,
    ) -> Result<Value, DriverError> {
        let id = self.send_request(method, params).await?;
        loop {
            let msg = self.receive().await?;
            if is_response_to(&msg, id) {
                return result_of(method, &msg);
            }
            match replay.as_deref_mut() {
                Some(r) if msg.get("method").and_then(Value::as_str) == Some("session/update") => {
                    r.push(msg);
                }
                _ => self.queue.push_back(msg),
            }
        }
    }
}

/// Whether `msg` is the response to the request `id`.
pub fn is_response_to(msg: &Value, id: i64) -> bool {
    msg.get("method").is_none() && msg.get("id").and_then(Value::as_i64) == Some(id)
}

/// The result of the response `msg` to `method`, or its error.
pub fn result_of(method: &str, msg: &Value) -> Result<Value, DriverError> {
    if let Some(err) = msg.get("error") {
        return Err(DriverError::Rpc {
            method: method.to_owned(),
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
    }
    msg.get("result")
        .cloned()
        .ok_or_else(|| DriverError::Protocol(format!("the response to {method} has no result")))
}

/// The cut-point slug of a message: its method, or `response`/`error`.
fn kind_slug(msg: &Value) -> String {
    match msg.get("method").and_then(Value::as_str) {
        Some(m) => cutpoint::slug(m),
        None if msg.get("error").is_some() => "error".to_owned(),
        None => "response".to_owned(),
    }
}

/// A JSON-RPC error answer whose id is null or missing: the provider could
/// not read something the runner sent (JSON-RPC 2.0 answers a parse error or
/// an invalid request so), so whatever the runner waits for will never come.
/// It fails the exchange at once, quoting the provider, instead of ending at
/// the idle timeout as a silent provider would.
fn unaddressed_error(msg: &Value) -> Option<DriverError> {
    if msg.get("method").is_some() || !msg.get("id").is_none_or(Value::is_null) {
        return None;
    }
    let err = msg.get("error")?;
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("(no message)");
    Some(DriverError::Protocol(format!(
        "the provider could not read a message from the runner and answered error {code}: {message}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an error answer without an id is a failure of the exchange in
    /// progress; an answer to a request and a request are not.
    #[test]
    fn an_error_without_an_id_is_unaddressed() {
        let error = json!({ "code": -32700, "message": "Parse error: too long" });
        for msg in [
            json!({ "jsonrpc": "2.0", "id": null, "error": error }),
            json!({ "error": error }),
        ] {
            let e = unaddressed_error(&msg).expect("unaddressed");
            assert!(
                e.to_string().contains("-32700: Parse error: too long"),
                "{e}"
            );
        }
        for msg in [
            json!({ "id": 3, "error": error }),
            json!({ "id": null, "result": {} }),
            json!({ "id": null, "method": "x", "error": error }),
        ] {
            assert!(unaddressed_error(&msg).is_none(), "{msg}");
        }
    }

    /// Responses are matched by id and only without a method; errors and
    /// missing results are the request's failure.
    #[test]
    fn responses_match_their_request() {
        assert!(is_response_to(&json!({ "id": 2, "result": {} }), 2));
        assert!(!is_response_to(&json!({ "id": 2, "result": {} }), 3));
        assert!(!is_response_to(&json!({ "id": 2, "method": "x" }), 2));
        assert_eq!(
            result_of("m", &json!({ "id": 1, "result": { "a": 1 } })).unwrap(),
            json!({ "a": 1 })
        );
        let err = result_of(
            "m",
            &json!({ "id": 1, "error": { "code": -1, "message": "no" } }),
        );
        assert_eq!(err.unwrap_err().to_string(), "m failed with -1: no");
        let err = result_of("m", &json!({ "id": 1 }));
        assert_eq!(
            err.unwrap_err().to_string(),
            "provider protocol error: the response to m has no result"
        );
    }
}
