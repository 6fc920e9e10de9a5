//! The effect ledger and the `effect` tool command.
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

use crate::journal::{append_once, open_append};

/// Version of the ledger line format.
pub const LEDGER_VERSION: u32 = 1;

/// Prefix of every canary credential the harness plants. A value starting with
/// it in a tool's environment means a credential leaked into a tool shell.
pub const CANARY_PREFIX: &str = "turncut-canary-";

/// Environment variables that carry provider credentials. Fakes remove them
/// from a tool's environment, as a careful provider does.
pub const CREDENTIAL_VARS: &[&str] = &[
    "TURNCUT_PROVIDER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "CODEX_API_KEY",
];

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

/// Arguments of the `effect` command.
#[derive(Clone, Debug, clap::Args)]
pub struct EffectArgs {
    /// The ledger file to append to.
    #[arg(long)]
    pub ledger: std::path::PathBuf,
    /// The effect key.
    #[arg(long)]
    pub key: String,
    /// The authorizing message id.
    #[arg(long)]
    pub by: String,
    /// The conversation id.
    #[arg(long)]
    pub conversation: Option<String>,
    /// The provider turn id.
    #[arg(long)]
    pub turn: Option<String>,
    /// Run this long before the effect: a command that is still running
    /// when its provider dies, and whose effect happens after.
    #[arg(long, default_value_t = 0)]
    pub duration_ms: u64,
    /// Append this many lines instead of one (for concurrency tests).
    #[arg(long, default_value_t = 1, hide = true)]
    pub repeat: u32,
}

/// Runs the effect: appends the ledger line(s) and prints a short output, as
/// a real command would.
pub fn run_effect(args: &EffectArgs) -> std::io::Result<()> {
    let saw_secret = environment_has_secret();
    // A command's own run time, not a synchronization: the effect happens
    // when the command is done.
    std::thread::sleep(std::time::Duration::from_millis(args.duration_ms));
    let file = open_append(&args.ledger)?;
    for _ in 0..args.repeat {
        let entry = LedgerEntry {
            v: LEDGER_VERSION,
            key: args.key.clone(),
            by: args.by.clone(),
            conversation: args.conversation.clone(),
            turn: args.turn.clone(),
            pid: std::process::id(),
            saw_secret,
        };
        let mut line = serde_json::to_vec(&entry).expect("ledger entries serialize");
        line.push(b'\n');
        append_once(&file, &line)?;
    }
    println!("effect {} done", args.key);
    Ok(())
}

/// Whether this process's environment holds a credential variable or a value
/// carrying the canary prefix.
pub fn environment_has_secret() -> bool {
    std::env::vars_os().any(|(k, v)| {
        let named = k.to_str().is_some_and(|k| CREDENTIAL_VARS.contains(&k));
        let canary = v.to_string_lossy().contains(CANARY_PREFIX);
        named || canary
    })
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
