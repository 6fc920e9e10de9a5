//! The fakes' stdin: line framing for the stdio protocols (Codex, ACP) and
//! the "parent gone" exit of the HTTP fakes (OpenCode, model API).

use std::io::BufRead as _;
use std::sync::mpsc;

/// Longest accepted input line, in bytes. Longer lines are discarded whole and
/// answered with an error.
pub const LINE_BYTES_MAX: usize = 1 << 20;

/// One framed line of stdin.
pub(crate) enum Input {
    /// A line without its newline.
    Line(Vec<u8>),
    /// A line longer than [`LINE_BYTES_MAX`], dropped; its length.
    Oversized(usize),
    /// Stdin closed.
    Eof,
}

/// Reads stdin line by line into `tx`, dropping (and reporting) lines over
/// the limit without buffering them, then sends `Eof`.
pub(crate) fn read_lines(tx: mpsc::Sender<Input>) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    let mut line = Vec::new();
    let mut oversized = 0usize;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            break;
        }
        let (chunk, newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i)),
            None => (buf, None),
        };
        if oversized > 0 || line.len() + chunk.len() > LINE_BYTES_MAX {
            oversized += line.len() + chunk.len();
            line.clear();
        } else {
            line.extend_from_slice(chunk);
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        reader.consume(used);
        if newline.is_some() {
            let msg = if oversized > 0 {
                Input::Oversized(std::mem::take(&mut oversized))
            } else {
                Input::Line(std::mem::take(&mut line))
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Input::Eof);
}

/// For the HTTP fakes: a thread that exits the process with 0 once stdin
/// closes (the parent keeps it open; EOF means it is gone), after `note`.
/// A process held at a cut point is frozen there, like the single-threaded
/// Codex fake: its orphan stays until someone stops it (the restarted runner,
/// or the harness letting the hit go).
pub(crate) fn exit_when_stdin_closes(note: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        while cutpoint::held() {
            std::thread::park_timeout(std::time::Duration::from_millis(20));
        }
        note();
        std::process::exit(0);
    });
}
