//! `fake-provider tap`: a transparent recorder in front of a real stdio
//! provider (the real `codex app-server`). It starts the program in its own
//! process group, passes every line both ways unchanged, and journals each
//! message first — `in` before the program gets it, `out` before the
//! client does — so a real provider leaves the same wire evidence as a
//! fake, which journals what it reads and writes itself.
//!
//! The tap is no fake: it answers nothing and changes nothing. A signal to
//! the group reaches the program too; if the tap dies alone, the program
//! gets SIGKILL (`PR_SET_PDEATHSIG`).

use std::ffi::OsString;
use std::io::BufRead as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};
use wire::journal::Journal;

/// `fake-provider tap` options.
#[derive(Debug, clap::Args)]
pub struct TapArgs {
    /// Journal file (appended).
    #[arg(long)]
    pub journal: PathBuf,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub argv: Vec<OsString>,
}

/// A line as journaled: its JSON, or the text when it is not JSON.
fn as_message(line: &[u8]) -> Value {
    serde_json::from_slice(line)
        .unwrap_or_else(|_| json!({ "unparsed": String::from_utf8_lossy(line) }))
}

/// Copies lines from `from` to `to`, journaling each with `record` first.
fn pass(
    from: impl std::io::Read,
    mut to: impl std::io::Write,
    journal: &Journal,
    record: fn(&Journal, &Value),
) {
    let mut reader = std::io::BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        if !body.iter().all(u8::is_ascii_whitespace) {
            record(journal, &as_message(body));
        }
        if to.write_all(&line).and_then(|()| to.flush()).is_err() {
            return;
        }
    }
}

/// Runs the tap; the program's exit code (1 if it could not start).
pub fn run_tap(args: &TapArgs) -> i32 {
    let journal = match Journal::open(Some(&args.journal)) {
        Ok(j) => Arc::new(j),
        Err(e) => {
            eprintln!("fake-provider tap: {}: {e}", args.journal.display());
            return 2;
        }
    };
    let mut cmd = Command::new(&args.argv[0]);
    cmd.args(&args.argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    dies_with_tap(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fake-provider tap: {:?}: {e}", args.argv[0]);
            return 1;
        }
    };
    journal.fact("tap.spawned", json!({ "pid": child.id() }));
    let to_child = child.stdin.take().expect("piped stdin");
    let from_child = child.stdout.take().expect("piped stdout");
    let j = Arc::clone(&journal);
    std::thread::spawn(move || pass(std::io::stdin(), to_child, &j, Journal::message_in));
    let j = Arc::clone(&journal);
    let out =
        std::thread::spawn(move || pass(from_child, std::io::stdout(), &j, Journal::message_out));
    let status = child.wait();
    let _ = out.join();
    match status {
        Ok(s) => s.code().unwrap_or(1),
        Err(_) => 1,
    }
}

/// Makes the program `cmd` starts die with the tap (SIGKILL when the tap
/// dies): a tap that is killed must not leave the product it recorded
/// running unseen.
pub(crate) fn dies_with_tap(cmd: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            Ok(())
        });
    }
}
