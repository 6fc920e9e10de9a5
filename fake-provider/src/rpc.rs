//! The JSON-RPC line protocol of the stdio fakes (Codex, ACP): one JSON
//! object per line each way, the serving loop over stdin, the journaled
//! write, and the sorting of a received line into a request, a notification
//! or a response, with the standard errors for everything else.
//!
//! The two dialects differ only in the `jsonrpc` member: ACP requires and
//! sends `"jsonrpc": "2.0"`, Codex's app-server neither. Methods, their
//! parameters and cut-point names are each protocol's own.

use std::io::Write as _;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::journal::Journal;
use crate::stdio::{Input, LINE_BYTES_MAX, read_lines};

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "Internal error" (the real Codex answers a thread it cannot read with it).
pub(crate) const INTERNAL_ERROR: i64 = -32603;

/// Stdout is gone: the client hung up, so the fake stops.
pub(crate) struct Closed;

/// Whether a write reached stdout.
pub(crate) type Sent = Result<(), Closed>;

/// A request's failure: JSON-RPC error code and message.
pub(crate) type Refusal = (i64, String);

/// A stdio fake's server, as the serving loop drives it.
pub(crate) trait LineServer {
    /// The journal, for the end of input.
    fn journal(&self) -> &Journal;
    /// Handles one line of input.
    fn on_line(&mut self, bytes: &[u8]) -> Sent;
    /// Sends an error response.
    fn send_error(&self, id: Value, code: i64, message: &str) -> Sent;
    /// When a write the server put off is due, if one is (the ACP fake's
    /// `--finish-lag-ms`).
    fn due(&self) -> Option<Instant> {
        None
    }
    /// Makes the write that is due.
    fn on_due(&mut self) {}
}

/// Serves `server` on stdin until stdin closes (journaled
/// `process.stdin_closed`) or stdout does. One loop owns all state; the
/// reader thread only forwards lines. A line over [`LINE_BYTES_MAX`] is
/// dropped whole and answered with an error. A write the server put off is
/// made when it is due, and before the process exits at the end of stdin.
pub(crate) fn serve_lines(server: &mut impl LineServer) -> anyhow::Result<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || read_lines(tx));
    loop {
        let input = match server.due() {
            None => rx.recv().unwrap_or(Input::Eof),
            Some(due) => match rx.recv_timeout(due.saturating_duration_since(Instant::now())) {
                Ok(input) => input,
                Err(RecvTimeoutError::Timeout) => {
                    server.on_due();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => Input::Eof,
            },
        };
        let result = match input {
            Input::Line(bytes) => server.on_line(&bytes),
            Input::Oversized(n) => server.send_error(
                Value::Null,
                INVALID_REQUEST,
                &format!("message of {n} bytes exceeds the {LINE_BYTES_MAX}-byte line limit"),
            ),
            Input::Eof => {
                server.journal().fact("process.stdin_closed", json!({}));
                if let Some(due) = server.due() {
                    // The agent's own timer (Claude Code's transcript
                    // flush) runs out before it exits; nothing else is
                    // left to wait for.
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    server.on_due();
                }
                return Ok(());
            }
        };
        if let Err(Closed) = result {
            return Ok(());
        }
    }
}

/// Writes `msg` as one line on stdout. The journal line goes first: if the
/// process dies between the two, the journal over-reports a send, which the
/// harness treats as uncertain delivery, never as a send that did not happen.
pub(crate) fn write(journal: &Journal, msg: &Value) -> Sent {
    let mut line = serde_json::to_vec(msg).expect("messages serialize");
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    journal.message_out(msg);
    out.write_all(&line).map_err(|_| Closed)?;
    out.flush().map_err(|_| Closed)
}

/// The `params` of a request, as `T`.
pub(crate) fn params<T: for<'de> Deserialize<'de>>(msg: &Value) -> Result<T, Refusal> {
    let v = msg.get("params").cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| (INVALID_PARAMS, format!("Invalid params: {e}")))
}

/// A received message, sorted.
pub(crate) enum Incoming {
    /// A request: answer it.
    Request { id: Value, method: String },
    /// A notification: no answer.
    Notification { method: String },
    /// An answer to one of the fake's own requests.
    Response { id: Value },
}

/// An error to answer a line with: id (null when unknown), code, message.
pub(crate) type LineError = (Value, i64, String);

/// Reads one line: `None` for a blank line; the message (journaled as
/// received) and what it is; or the error to answer. A line that is not JSON
/// is journaled as `message.malformed` instead. With `jsonrpc`, a request or
/// notification must carry `"jsonrpc": "2.0"`.
pub(crate) fn read_message(
    bytes: &[u8],
    journal: &Journal,
    jsonrpc: bool,
) -> Result<Option<(Value, Incoming)>, LineError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let msg: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            journal.fact(
                "message.malformed",
                json!({ "error": e.to_string(), "bytes": bytes.len() }),
            );
            return Err((Value::Null, PARSE_ERROR, format!("Parse error: {e}")));
        }
    };
    journal.message_in(&msg);
    let incoming = sort(&msg, jsonrpc)?;
    Ok(Some((msg, incoming)))
}

fn sort(msg: &Value, jsonrpc: bool) -> Result<Incoming, LineError> {
    let invalid = |id: Option<Value>, what: &str| {
        Err((
            id.unwrap_or(Value::Null),
            INVALID_REQUEST,
            format!("Invalid request: {what}"),
        ))
    };
    let Some(obj) = msg.as_object() else {
        return invalid(None, "a message must be a JSON object");
    };
    let id = obj.get("id").cloned();
    let valid_id = id.as_ref().is_some_and(|i| i.is_string() || i.is_i64());
    if id.is_some() && !valid_id {
        return invalid(None, "`id` must be a string or an integer");
    }
    let versioned = !jsonrpc || obj.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
    match (obj.get("method"), id) {
        (Some(Value::String(_)), id) if !versioned => invalid(id, "`jsonrpc` must be \"2.0\""),
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request {
            id,
            method: method.clone(),
        }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification {
            method: method.clone(),
        }),
        (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
            Ok(Incoming::Response { id })
        }
        (_, id) => invalid(id, "expected a request, a notification or a response"),
    }
}
