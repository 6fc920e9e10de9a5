//! The effect ledger.
//!
//! Every tool call in every fake runs `fake-provider effect --ledger L --key K
//! --by MESSAGE_ID` as a real child process. That process, not its caller,
//! appends one JSON line to the ledger, so the ledger records what really ran,
//! whoever executed the tool (the provider, or the runner for client-side tools).
//! The line is written with one `write(2)` on an `O_APPEND` descriptor, so
//! concurrent effects never tear or lose lines. The ledger knows nothing about
//! turns being replayed; the oracles judge that from its lines.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Version of the ledger line format.
pub const LEDGER_VERSION: u32 = 1;

/// One executed effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Format version, [`LEDGER_VERSION`].
    pub v: u32,
    /// The effect key from the script.
    pub key: String,
    /// The message id that authorized the effect.
    pub by: String,
    /// The conversation (thread/session) it ran in, when known.
    #[serde(default)]
    pub conversation: Option<String>,
    /// The provider turn it ran in, when known.
    #[serde(default)]
    pub turn: Option<String>,
    /// The pid of the effect process.
    pub pid: u32,
    /// Whether the effect saw a credential or the canary in its environment.
    pub saw_secret: bool,
}

/// Reads the whole ledger. A line that does not parse is an error, with its
/// line number: the writers never tear lines.
pub fn read(path: &Path) -> std::io::Result<Vec<LedgerEntry>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}:{}: bad ledger line: {e}", path.display(), i + 1),
                )
            })
        })
        .collect()
}
