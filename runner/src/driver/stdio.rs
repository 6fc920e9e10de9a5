//! Line-delimited JSON over a provider's stdout, shared by the stdio drivers
//! (Codex app-server, ACP).

use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};
use tokio::sync::mpsc;

use serde_json::Value;

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

/// Reads `stdout` on a task; every line arrives on the returned channel,
/// followed by `Eof`. Blank lines are skipped; a line over the limit ends the
/// stream after a `Malformed`.
pub fn read_lines<R>(stdout: R) -> mpsc::UnboundedReceiver<Line>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout);
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
            if buf.len() > LINE_BYTES_MAX {
                let _ = tx.send(Line::Malformed("a line longer than the limit".to_owned()));
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
            if tx.send(line).is_err() {
                return;
            }
        }
        let _ = tx.send(Line::Eof);
    });
    rx
}
