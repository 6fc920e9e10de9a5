//! The evidence journal: every message a fake receives or sends, and every
//! internal fact (`turn.recorded`, `effect.spawned`), as one JSON line each.
//!
//! Lines carry the process generation id so a reader can tell the incarnations
//! of a restarted fake apart. Each line is written with a single `write(2)` on
//! an `O_APPEND` descriptor, so a SIGKILL never leaves half a line and several
//! processes may share one journal. The journal is evidence for the harness; the
//! fake never reads it back.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the journal line format.
pub const JOURNAL_VERSION: u32 = 1;

/// Which way a journaled message travelled, or an internal fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A message the fake received.
    In,
    /// A message the fake sent.
    Out,
    /// Something the fake did or decided (`turn.recorded`, `fault.exit`).
    Fact,
}

/// One journal line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Format version, [`JOURNAL_VERSION`].
    pub v: u32,
    /// The process generation that wrote the line.
    pub generation: String,
    /// Per-generation sequence number, gapless from 1.
    pub seq: u64,
    /// Wall-clock time in milliseconds since the epoch.
    pub ts_ms: u64,
    /// Message direction or fact.
    pub kind: EntryKind,
    /// For facts, their name (`turn.recorded`); for messages, absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fact: Option<String>,
    /// The message, or the fact's data.
    pub data: Value,
}

/// An open journal for one process generation.
#[derive(Debug)]
pub struct Journal {
    file: Option<File>,
    generation: String,
    seq: AtomicU64,
}

impl Journal {
    /// Opens (creating) the journal at `path`; `None` journals nothing.
    pub fn open(path: Option<&Path>) -> std::io::Result<Journal> {
        let file = match path {
            Some(p) => Some(open_after_torn_tail(p)?),
            None => None,
        };
        Ok(Journal {
            file,
            generation: new_generation(),
            seq: AtomicU64::new(0),
        })
    }

    /// This process's generation id.
    pub fn generation(&self) -> &str {
        &self.generation
    }

    /// Records a received message.
    pub fn message_in(&self, msg: &Value) {
        self.write(EntryKind::In, None, msg.clone());
    }

    /// Records a sent message.
    pub fn message_out(&self, msg: &Value) {
        self.write(EntryKind::Out, None, msg.clone());
    }

    /// Records an internal fact.
    pub fn fact(&self, name: &str, data: Value) {
        self.write(EntryKind::Fact, Some(name.to_owned()), data);
    }

    fn write(&self, kind: EntryKind, fact: Option<String>, data: Value) {
        let Some(file) = &self.file else { return };
        let entry = Entry {
            v: JOURNAL_VERSION,
            generation: self.generation.clone(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
            ts_ms: now_ms(),
            kind,
            fact,
            data,
        };
        let mut line = serde_json::to_vec(&entry).expect("journal entries serialize");
        line.push(b'\n');
        // A journal that cannot be written makes every later verdict unknown, so
        // a failure here is loud rather than silently dropped.
        if let Err(e) = append_once(file, &line) {
            eprintln!("fake-provider: failed to write journal: {e}");
            std::process::exit(3);
        }
    }
}

/// Reads a whole journal. Lines that do not parse are an error: the writer
/// never tears a line, so a bad line means something else wrote there. A
/// last line without its newline is a write still in flight while this read
/// ran (the writer puts the newline in the same `write(2)`): it is not yet
/// part of the journal.
pub fn read(path: &Path) -> std::io::Result<Vec<Entry>> {
    let mut text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    text.truncate(whole);
    let lines: Vec<&str> = text.lines().collect();
    let parsed: Vec<Result<Entry, serde_json::Error>> =
        lines.iter().map(|l| serde_json::from_str(l)).collect();
    let mut out = Vec::new();
    for (i, entry) in parsed.iter().enumerate() {
        match entry {
            Ok(e) => out.push(e.clone()),
            Err(_) if lines[i].is_empty() => {}
            // The tail a killed writer left (see `open_after_torn_tail`): the
            // next line is the first of a new process.
            Err(_) if matches!(parsed.get(i + 1), Some(Ok(next)) if next.seq == 1) => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}:{}: bad journal line: {e}", path.display(), i + 1),
                ));
            }
        }
    }
    Ok(out)
}

/// Opens the journal for appending. A SIGKILL can cut a `write(2)` that spans
/// a page boundary short (the kernel stops between pages for a fatal
/// signal), so a killed writer may have left a line without its newline; the
/// next writer ends it first, so its own lines start on a line of their own
/// and `read` can tell the torn tail from corruption.
fn open_after_torn_tail(path: &Path) -> std::io::Result<File> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let file = open_append(path)?;
    let mut reader = File::open(path)?;
    if reader.metadata()?.len() > 0 {
        reader.seek(SeekFrom::End(-1))?;
        let mut last = [0u8; 1];
        reader.read_exact(&mut last)?;
        if last[0] != b'\n' {
            append_once(&file, b"\n")?;
        }
    }
    Ok(file)
}

/// Opens a file for appending, creating it with mode 0600.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Appends `line` with exactly one `write(2)`. On an `O_APPEND` descriptor of a
/// regular file the kernel writes it whole at the end, so concurrent writers
/// never interleave inside a line. A short write is reported, never retried,
/// because a retry would be the torn line this function exists to prevent.
pub fn append_once(mut file: &File, line: &[u8]) -> std::io::Result<()> {
    let n = file.write(line)?;
    if n != line.len() {
        return Err(std::io::Error::other(format!(
            "short append: {n} of {} bytes",
            line.len()
        )));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn new_generation() -> String {
    format!("g{}-{}", std::process::id(), uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_in_flight_is_not_yet_read_and_a_torn_line_inside_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let journal = Journal::open(Some(&path)).unwrap();
        journal.fact("one", serde_json::json!({}));
        let whole = std::fs::read(&path).unwrap();
        let mut in_flight = whole.clone();
        in_flight.extend_from_slice(b"{\"v\":1,\"gen");
        std::fs::write(&path, &in_flight).unwrap();
        assert_eq!(read(&path).unwrap().len(), 1);
        // A torn line between two lines of one process is corruption.
        journal.fact("two", serde_json::json!({}));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("\"fact\"")).collect();
        let lines: Vec<&str> = lines.into_iter().filter(|l| l.ends_with('}')).collect();
        std::fs::write(
            &path,
            format!("{}\n{{\"v\":1,\"gen\n{}\n", lines[0], lines[1]),
        )
        .unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains(":2: bad journal line"), "{err}");
    }

    #[test]
    fn a_tail_torn_by_a_killed_writer_is_ended_by_the_next_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let first = Journal::open(Some(&path)).unwrap();
        first.fact("one", serde_json::json!({}));
        first.fact("two", serde_json::json!({}));
        // A SIGKILL cut the second line short.
        let text = std::fs::read(&path).unwrap();
        let cut = text.len() - 10;
        std::fs::write(&path, &text[..cut]).unwrap();
        let next = Journal::open(Some(&path)).unwrap();
        next.fact("three", serde_json::json!({}));
        let facts: Vec<String> = read(&path)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.fact)
            .collect();
        assert_eq!(facts, ["one", "three"]);
    }
}
