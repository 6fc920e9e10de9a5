//! What the two HTTP providers share (OpenCode and the native profile's
//! model API): the `… listening on http://ADDR` line and the watch on the
//! rest of stdout ([`Stdout`]), response bodies read within a bound, and the
//! server-sent events as blocks ([`find_blank_line`], [`parse_block`]).
//!
//! Every byte a provider sends passes its output budget
//! (`budget::OutputBudget`): stdout as it is drained, bodies and event
//! streams as they are read. A provider over its budget is no longer read,
//! and every later call fails with `provider_protocol_error` quoting it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::Child;

use super::DriverError;
use super::budget::OutputBudget;

/// Longest stdout line read while looking for the listening address.
pub(super) const LINE_BYTES_MAX: usize = 64 << 10;

/// The largest HTTP response body the runner reads.
pub(super) const BODY_BYTES_MAX: usize = 32 << 20;

/// One server-sent event, or why there is none.
pub(super) enum Sse {
    Event(Value),
    Malformed(String),
    Eof,
}

/// The provider's stdout after its listening line, drained on a task.
#[derive(Default)]
pub(super) struct Stdout {
    /// Set when stdout hits EOF (the process died).
    exited: AtomicBool,
    /// Set when stdout ran over the output budget (no longer drained).
    over_budget: OnceLock<String>,
}

impl Stdout {
    /// Whether the provider may still be called: `Exited` once its stdout
    /// closed, a protocol error once it wrote over its budget.
    pub(super) fn check(&self) -> Result<(), DriverError> {
        if let Some(what) = self.over_budget.get() {
            return Err(DriverError::Protocol(format!(
                "the provider wrote {what} on stdout"
            )));
        }
        if self.exited.load(Ordering::SeqCst) {
            return Err(DriverError::Exited);
        }
        Ok(())
    }
}

/// Reads the `… listening on http://ADDR` line from a spawned HTTP
/// provider's stdout (taken), bounded by `idle`, then drains the rest on a
/// task under `bytes_per_s_max`.
pub(super) async fn listen_address(
    child: &mut Child,
    idle: Duration,
    bytes_per_s_max: u64,
) -> Result<(String, Arc<Stdout>), DriverError> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| DriverError::Protocol("the provider's stdout is not piped".into()))?;
    let mut reader = BufReader::new(stdout);
    let base = tokio::time::timeout(idle, async {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = read_line_bounded(&mut reader, &mut line)
                .await
                .map_err(|_| DriverError::Exited)?;
            if n == 0 {
                return Err(DriverError::Exited);
            }
            let text = String::from_utf8_lossy(&line);
            if let Some(at) = text.find("listening on http://") {
                let url = text[at + "listening on ".len()..].trim();
                return Ok(url.trim_end_matches('/').to_owned());
            }
        }
    })
    .await
    .map_err(|_| super::budget::unresponsive(idle))??;
    let watch = Arc::new(Stdout::default());
    let state = Arc::clone(&watch);
    tokio::spawn(async move {
        // Drain stdout so the provider never blocks on a full pipe, within
        // its budget; EOF means it died.
        let mut budget = OutputBudget::new(bytes_per_s_max);
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Err(over) = budget.spend(n) {
                        let _ = state.over_budget.set(over);
                        return;
                    }
                }
            }
        }
        state.exited.store(true, Ordering::SeqCst);
    });
    Ok((base, watch))
}

/// The body of `response`, at most [`BODY_BYTES_MAX`] bytes, each chunk
/// spent from `budget`.
pub(super) async fn read_body(
    mut response: reqwest::Response,
    what: &str,
    budget: &mut OutputBudget,
) -> Result<Vec<u8>, DriverError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| DriverError::Exited)? {
        budget
            .spend(chunk.len())
            .map_err(|over| DriverError::Protocol(format!("{what}: the provider sent {over}")))?;
        if body.len() + chunk.len() > BODY_BYTES_MAX {
            return Err(DriverError::Protocol(format!(
                "{what} answered a body over the limit of {BODY_BYTES_MAX} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads one line of at most [`LINE_BYTES_MAX`] bytes (the rest of a longer line is
/// dropped); returns the bytes consumed, 0 at EOF.
pub(super) async fn read_line_bounded<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let room = LINE_BYTES_MAX.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let n = chunk.len();
        reader.consume(n);
        consumed += n;
        if done {
            return Ok(consumed);
        }
    }
}

/// The end of the first event block: (end of its text, end including the blank line).
pub(super) fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The JSON of an SSE block's `data:` lines; `None` for a block without data (a comment).
pub(super) fn parse_block(block: &[u8]) -> Option<Sse> {
    let text = String::from_utf8_lossy(block);
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(&data.join("\n")) {
        Ok(v) if v.is_object() && v["type"].is_string() => Sse::Event(v),
        Ok(_) => Sse::Malformed("an event without a `type`".into()),
        Err(e) => Sse::Malformed(format!("an event that is not JSON ({e})")),
    })
}
