//! JSON-RPC over a provider's stdio, shared by the Codex and ACP drivers: one
//! JSON object per line, requests with increasing integer ids, every wait
//! bounded (`budget::Bounds`).
//!
//! [`Rpc`] sends and receives (each message passing the cut point
//! `runner.<protocol>.<method|response|error>.sent|received`), matches a
//! response to its request and holds whatever arrives meanwhile for the
//! driver's event loop, up to [`HELD_BYTES_MAX`]. A request's wait ends
//! `idle` after its send unless something arrives that brings its answer
//! closer (a replayed update of a `session/load`), and never later than the
//! request timeout: other messages do not keep it alive. It knows no method
//! of either protocol: the drivers build their messages and read their
//! events.

use std::collections::VecDeque;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, ChildStdin};
use tokio::time::Instant;

use super::DriverError;
use super::budget::{Bounds, Pending, QueueRx};
use super::stdio::Line;

/// How many bytes of messages a request's wait may hold for later (for
/// the event loop, or a `session/load` replay) before the provider is
/// stopped with `provider_protocol_error`.
pub const HELD_BYTES_MAX: usize = 64 << 20;

/// The JSON-RPC connection to one provider process.
pub struct Rpc {
    stdin: ChildStdin,
    lines: QueueRx<Line>,
    /// Messages that arrived while a response was awaited, oldest first,
    /// with their sizes.
    queue: VecDeque<(Value, usize)>,
    /// The bytes `queue` holds.
    held_bytes: usize,
    next_id: i64,
    bounds: Bounds,
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
        bounds: Bounds,
        protocol: &'static str,
        versioned: bool,
    ) -> Rpc {
        let stdin = child.stdin.take().expect("provider stdin is piped");
        let stdout = child.stdout.take().expect("provider stdout is piped");
        Rpc {
            stdin,
            lines: super::stdio::read_lines(stdout, bounds.output_bytes_per_s_max),
            queue: VecDeque::new(),
            held_bytes: 0,
            next_id: 0,
            bounds,
            exited: false,
            protocol,
            versioned,
        }
    }

    /// The bounds of this connection.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The error of a provider silent for the idle timeout.
    pub fn idle_err(&self) -> DriverError {
        DriverError::Unresponsive {
            idle_ms: self.bounds.idle.as_millis() as u64,
            unanswered: None,
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
        match tokio::time::timeout(self.bounds.idle, write).await {
            Ok(Ok(())) => {
                crate::cut::hit(&format!("runner.{}.{}.sent", self.protocol, kind_slug(msg)));
                Ok(())
            }
            Ok(Err(_)) => Err(DriverError::Exited),
            Err(_) => Err(self.idle_err()),
        }
    }

    /// Receives the next message, bounded by the idle timeout (in a turn,
    /// every message is the turn's progress).
    pub async fn receive(&mut self) -> Result<Value, DriverError> {
        let deadline = Instant::now() + self.bounds.idle;
        let idle = self.idle_err();
        self.receive_until(deadline, || idle).await.map(|(v, _)| v)
    }

    /// Receives the next message for the `pending` request, by its deadline.
    pub async fn receive_for(&mut self, pending: &Pending) -> Result<(Value, usize), DriverError> {
        // The error says how long the request waited: made when the
        // deadline passes, not before the wait.
        self.receive_until(pending.deadline(), || pending.expired())
            .await
    }

    /// Receives the next message and its size, or the error `late` makes at
    /// `deadline`.
    async fn receive_until(
        &mut self,
        deadline: Instant,
        late: impl FnOnce() -> DriverError,
    ) -> Result<(Value, usize), DriverError> {
        if self.exited {
            return Err(DriverError::Exited);
        }
        match tokio::time::timeout_at(deadline, self.lines.recv()).await {
            Ok(Some((Line::Msg(v), bytes))) => {
                crate::cut::hit(&format!(
                    "runner.{}.{}.received",
                    self.protocol,
                    kind_slug(&v)
                ));
                match unaddressed_error(&v) {
                    Some(e) => Err(e),
                    None => Ok((v, bytes)),
                }
            }
            Ok(Some((Line::Malformed(what), _))) => {
                Err(DriverError::Protocol(format!("the provider sent {what}")))
            }
            Ok(Some((Line::Eof, _))) | Ok(None) => {
                self.exited = true;
                Err(DriverError::Exited)
            }
            Err(_) => Err(late()),
        }
    }

    /// The oldest held message, else the next one received.
    pub async fn next(&mut self) -> Result<Value, DriverError> {
        match self.queue.pop_front() {
            Some((m, bytes)) => {
                self.held_bytes -= bytes;
                Ok(m)
            }
            None => self.receive().await,
        }
    }

    /// Holds a message of `bytes` for [`Rpc::next`]; a provider that makes
    /// the runner hold more than [`HELD_BYTES_MAX`] is a protocol error.
    pub fn hold(&mut self, msg: Value, bytes: usize) -> Result<(), DriverError> {
        self.held_bytes += bytes;
        self.queue.push_back((msg, bytes));
        if self.held_bytes > HELD_BYTES_MAX {
            return Err(DriverError::Protocol(format!(
                "the provider sent more than {HELD_BYTES_MAX} bytes (held_bytes_max) of messages \
                 while the runner waited for an answer"
            )));
        }
        Ok(())
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

    /// Sends a request and waits for its result (see the module doc for
    /// how long). Messages that arrive meanwhile are held for
    /// [`Rpc::next`], except while `replay` is given: then `session/update`
    /// notifications go there (ACP's `session/load`) and count as progress.
    pub async fn request(
        &mut self,
        method: &str,
        params: Value,
        mut replay: Option<&mut Vec<Value>>,
    ) -> Result<Value, DriverError> {
        let id = self.send_request(method, params).await?;
        let mut pending = Pending::new(method, &self.bounds);
        let mut replayed_bytes = 0;
        loop {
            let (msg, bytes) = self.receive_for(&pending).await?;
            if is_response_to(&msg, id) {
                return result_of(method, &msg);
            }
            match replay.as_deref_mut() {
                Some(r) if msg.get("method").and_then(Value::as_str) == Some("session/update") => {
                    replayed_bytes += bytes;
                    if replayed_bytes > HELD_BYTES_MAX {
                        return Err(DriverError::Protocol(format!(
                            "the provider replayed more than {HELD_BYTES_MAX} bytes \
                             (held_bytes_max) in answer to {method}"
                        )));
                    }
                    r.push(msg);
                    pending.progress();
                }
                _ => {
                    pending.other();
                    self.hold(msg, bytes)?;
                }
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
    /// The error of an unanswered request says how long it waited, measured
    /// when its deadline passed (it once said 0 ms: made before the wait).
    #[tokio::test]
    async fn an_unanswered_request_says_how_long_it_waited() {
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let bounds = Bounds::with_idle(std::time::Duration::from_millis(60));
        let mut rpc = Rpc::attach(&mut child, bounds, "test", true);
        let err = rpc
            .request("initialize", json!({}), None)
            .await
            .unwrap_err();
        let text = err.to_string();
        let waited: u64 = text
            .split("not answered in ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{text}"));
        assert!(waited >= 60, "{text}");
    }

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
