//! Line-delimited JSON over a provider's stdout, shared by the stdio drivers
//! (Codex app-server, ACP): read under the output budget into a queue
//! bounded in bytes (`budget`), so a provider that writes faster than the
//! engine reads is held back by its own pipe.

use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};

use serde_json::Value;

use super::budget::{OutputBudget, QUEUED_BYTES_MAX, QueueRx, queue};

/// Longest line accepted from the provider.
pub const LINE_BYTES_MAX: usize = 8 << 20;

/// One line from the provider.
pub enum Line {
    /// A JSON object.
    Msg(Value),
    /// Something unusable, described.
    Malformed(String),
    /// Stdout closed.
    Eof,
}

/// Reads `stdout` on a task; every line arrives on the returned queue with
/// its size in bytes, followed by `Eof`. Blank lines are skipped; a line
/// over the limit, or output over `bytes_per_s_max`, ends the stream after a
/// `Malformed` (and the provider, no longer read, blocks on its pipe).
pub fn read_lines<R>(stdout: R, bytes_per_s_max: u64) -> QueueRx<Line>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (tx, rx) = queue(QUEUED_BYTES_MAX);
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout);
        let mut budget = OutputBudget::new(bytes_per_s_max);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match (&mut reader)
                .take(LINE_BYTES_MAX as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let unusable = match budget.spend(buf.len()) {
                Err(over) => Some(over),
                Ok(()) if buf.len() > LINE_BYTES_MAX => {
                    Some("a line longer than the limit".to_owned())
                }
                Ok(()) => None,
            };
            if let Some(what) = unusable {
                if !tx.send(Line::Malformed(what), 0).await {
                    return;
                }
                break;
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line = match serde_json::from_slice::<Value>(&buf) {
                Ok(v) if v.is_object() => Line::Msg(v),
                Ok(_) => Line::Malformed("a message that is not a JSON object".to_owned()),
                Err(e) => Line::Malformed(format!("a line that is not JSON ({e})")),
            };
            if !tx.send(line, buf.len()).await {
                return;
            }
        }
        let _ = tx.send(Line::Eof, 0).await;
    });
    rx
}
