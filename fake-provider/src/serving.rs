//! What every fake shares before it speaks its protocol: the validated
//! [`Options`] the command line hands it, the serving prologue ([`start`]:
//! state directory, journal, store, `process.started`), the `effect` command
//! line its tools run, and the exit on a failed store write.
//!
//! This module knows no wire format; each protocol module takes over once
//! [`start`] returns.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::faults::Faults;
use crate::journal::Journal;
use crate::script::Script;

/// Everything a fake needs to run, validated by the command line. A fake
/// that listens on TCP gets its bound listener beside these.
#[derive(Debug)]
pub struct Options {
    /// Durable store directory.
    pub state_dir: PathBuf,
    /// Journal file.
    pub journal: Option<PathBuf>,
    /// Effect ledger file.
    pub ledger: PathBuf,
    /// The scripted model.
    pub script: Script,
    /// Armed `--exit`/`--hang` points.
    pub faults: Faults,
    /// The command line that reaches `fake-provider` (the standalone binary, or
    /// `turncut fake-provider`); tool commands run `<this> effect …`.
    pub self_cmd: Vec<OsString>,
}

impl Options {
    /// The tool command of effect `key`: `<self> effect --ledger L --key K
    /// --by BY --conversation C --turn T`. Protocols whose tools honour the
    /// script's `duration_ms` append [`crate::script::duration_args`].
    pub fn effect_argv(
        &self,
        key: &str,
        by: &str,
        conversation: &str,
        turn: &str,
    ) -> Vec<OsString> {
        let mut argv = self.self_cmd.clone();
        for a in [
            "effect",
            "--ledger",
            &self.ledger.display().to_string(),
            "--key",
            key,
            "--by",
            by,
            "--conversation",
            conversation,
            "--turn",
            turn,
        ] {
            argv.push(a.into());
        }
        argv
    }
}

/// The serving prologue of every fake: creates the state directory, opens
/// the journal, then the protocol's store (`open_store`, which may use the
/// journal's generation), and journals `process.started` with the pid, the
/// protocol and, for a fake that listens, its port (the listener is made
/// non-blocking for tokio first).
pub(crate) fn start<S>(
    opts: &Options,
    protocol: &str,
    listener: Option<&std::net::TcpListener>,
    open_store: impl FnOnce(&Path, &Journal) -> std::io::Result<S>,
) -> anyhow::Result<(Journal, S)> {
    std::fs::create_dir_all(&opts.state_dir)?;
    let journal = Journal::open(opts.journal.as_deref())?;
    let store = open_store(&opts.state_dir, &journal)?;
    let started = match listener {
        Some(listener) => {
            let addr = listener.local_addr()?;
            listener.set_nonblocking(true)?;
            json!({ "pid": std::process::id(), "protocol": protocol, "port": addr.port() })
        }
        None => json!({ "pid": std::process::id(), "protocol": protocol }),
    };
    journal.fact("process.started", started);
    Ok((journal, store))
}

/// Ends the process after a failed store write: the store is the fake's
/// durable truth, and carrying on after a failed write would make it lie
/// about what is recorded. `what` starts the line on stderr.
pub(crate) fn fail_storage(journal: &Journal, e: &std::io::Error, what: &str) -> ! {
    journal.fact("storage.failed", json!({ "error": e.to_string() }));
    eprintln!("{what}: {e}");
    std::process::exit(3);
}

/// The effect command as one process: `argv` with stdin closed and the
/// provider's credentials and cut-point wiring removed from its environment
/// (a careful provider never hands its credentials to a tool shell). The
/// caller picks its stdout, stderr and session.
pub(crate) fn tool_command(argv: &[OsString]) -> std::process::Command {
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(std::process::Stdio::null());
    for var in ::wire::secret::CREDENTIAL_VARS {
        cmd.env_remove(var);
    }
    for var in ["TURNCUT_CUT_SOCKET", "TURNCUT_CUT_ARM", "TURNCUT_CUT_TRACE"] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a tool command in a session of its own (as the real OpenCode
/// server and `opencode acp` spawn theirs, detached: a kill of the
/// provider's group misses it), journals `effect.spawned` with its pid and
/// start time, and waits for its exit code and output.
pub(crate) fn run_detached(
    mut cmd: std::process::Command,
    journal: &crate::journal::Journal,
    key: &str,
) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt as _;
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setsid(2) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    let spawned = cmd.spawn().inspect(|child| {
        journal.fact(
            "effect.spawned",
            serde_json::json!({ "key": key, "pid": child.id(),
                                "start_time": crate::process::start_ticks(child.id()) }),
        );
    });
    tool_outcome(spawned.and_then(std::process::Child::wait_with_output))
}

/// A finished tool's exit code and output (stdout, then stderr), or the
/// spawn failure as its output.
pub(crate) fn tool_outcome(out: std::io::Result<std::process::Output>) -> (Option<i32>, String) {
    match out {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.code(), text)
        }
        Err(e) => (None, format!("failed to spawn tool: {e}")),
    }
}

/// `argv` as strings (lossy), for the protocols that show a command as text.
pub(crate) fn lossy(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Wall-clock seconds since the epoch, as the stores stamp records.
pub(crate) fn now_s() -> i64 {
    (crate::journal::now_ms() / 1000) as i64
}
