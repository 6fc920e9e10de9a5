//! `turncut lazyfs mount BACKING MOUNTPOINT`: a lazy mount in the
//! foreground, for a person (or a script) to watch what a program syncs and
//! what a power cut leaves of its files. SIGUSR1 cuts the power; SIGTERM or
//! SIGINT unmounts and prints the counters. The signals are taken with
//! `sigwait` on this thread, blocked before the mount so the FUSE thread
//! never sees them.

use std::path::Path;

use lazyfs::{Error, LazyFs};
use nix::sys::signal::{SigSet, Signal};

use super::{Code, Exit, bad, emit, harness_err};

pub fn mount(backing: &Path, mountpoint: &Path) -> Result<Code, Exit> {
    let mut signals = SigSet::empty();
    for s in [Signal::SIGUSR1, Signal::SIGTERM, Signal::SIGINT] {
        signals.add(s);
    }
    signals
        .thread_block()
        .map_err(|e| harness_err(format!("failed to block signals: {e}")))?;
    let exe = std::env::current_exe().map_err(|e| {
        harness_err(format!(
            "failed to find this program for the mount's guard: {e}"
        ))
    })?;
    let guard = lazyfs::GuardProgram::new(exe);
    let mut fs = LazyFs::mount_guarded_by(backing, mountpoint, &guard).map_err(|e| match e {
        Error::BadPath { .. } => bad(format!("failed to {e}")),
        _ => harness_err(format!("failed to {e}")),
    })?;
    emit(&format!(
        "lazyfs: {} mounted at {} (pid {}): kill -USR1 cuts the power, kill -TERM or Ctrl-C unmounts\n",
        fs.backing().display(),
        fs.mountpoint().display(),
        std::process::id()
    ));
    loop {
        match signals.wait() {
            Ok(Signal::SIGUSR1) => cut(&mut fs),
            Ok(_) => break,
            Err(e) => return Err(harness_err(format!("failed to wait for a signal: {e}"))),
        }
    }
    let counters = fs.counters();
    if let Err(e) = fs.unmount() {
        // Dropped with the error: unmounted lazily, served until its users leave.
        eprintln!("turncut: failed to {e}; unmounted lazily");
    }
    emit(&counters_table(&counters));
    Ok(Code::Pass)
}

fn cut(fs: &mut LazyFs) {
    match fs.cut_power() {
        Ok(cut) => {
            let mut text = format!(
                "lazyfs: power cut in {} ms: {} change(s)\n",
                cut.took.as_millis(),
                cut.changes.len()
            );
            for c in &cut.changes {
                text.push_str(&format!("  {}  {:?}\n", c.path, c.kind));
            }
            emit(&text);
        }
        Err(e) => eprintln!("turncut: failed to {e}"),
    }
}

fn counters_table(counters: &lazyfs::Counters) -> String {
    let mut text = String::from("path\twrites\tbytes\tfsync\tfdatasync\trenames onto\n");
    for (path, c) in counters {
        text.push_str(&format!(
            "{path}\t{}\t{}\t{}\t{}\t{}\n",
            c.writes, c.bytes_written, c.fsyncs, c.fdatasyncs, c.renames_onto
        ));
    }
    text
}
