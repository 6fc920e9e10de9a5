//! The `effect` tool command: the process that writes one effect to the
//! ledger (`wire::ledger`), whoever ran the tool.

use crate::journal::{append_once, open_append};
use crate::ledger::{LEDGER_VERSION, LedgerEntry};
use wire::secret::environment_has_secret;

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
