//! What a fake durably recorded, read back from its state directory: the
//! provider's truth for the harness's oracles, whatever the protocol.

pub use wire::recorded::RecordedTurn;

/// How durable a store write is: as durable as the real product makes the
/// same record (`docs/real-providers.md`, "What the real products sync").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// The file synced, renamed, its directory synced: a power cut keeps it.
    Synced,
    /// Renamed into place, never synced: a process crash keeps it (the page
    /// cache survives), a power cut undoes it. What a SQLite commit in WAL
    /// mode with `synchronous=NORMAL` is until a checkpoint, which is how
    /// the real codex and OpenCode keep their threads and sessions.
    Unsynced,
}

/// Replaces `dir/name` with `bytes` atomically: a temporary file in the
/// same directory renamed over it, so a reader (or a restarted fake) sees
/// the old file or the new one, never a torn one; [`Durability::Synced`]
/// adds the file's fsync before the rename and the directory's after.
/// Every fake's store writes through this.
pub(crate) fn write_atomic(
    dir: &std::path::Path,
    name: &str,
    bytes: &[u8],
    durability: Durability,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        if durability == Durability::Synced {
            f.sync_all()?;
        }
    }
    std::fs::rename(&tmp, dir.join(name))?;
    if durability == Durability::Synced {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Creates `dir` and its missing parents, each new one durable (its
/// parent synced after the `mkdir`): a store's directories exist durably
/// from its first open, as a real product's database files do from their
/// creation (SQLite syncs the directory of a new journal or WAL).
pub(crate) fn create_dir_durably(dir: &std::path::Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
        match std::fs::create_dir(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        return std::fs::File::open(parent)?.sync_all();
    }
    std::fs::create_dir_all(dir)
}

/// Makes everything under `dir` durable: every file synced, then every
/// directory, deepest first. What a real product's SQLite does when it
/// closes its database at a clean exit (the WAL synced): every record
/// written so far survives a power cut from then on.
pub(crate) fn checkpoint(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            checkpoint(&entry.path())?;
        } else if kind.is_file() {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Runs `sync` when SIGTERM arrives, then exits with the status a shell
/// reports for a SIGTERM death (143): the real codex closes its databases
/// when it is terminated, which syncs them (`docs/real-providers.md`), and
/// runnerd stops a provider with SIGTERM. SIGTERM is blocked in the calling
/// thread, which every thread it starts later inherits, so call this before
/// any other thread starts: the waiter is then the only one to receive it.
pub(crate) fn sync_on_sigterm(
    sync: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> std::io::Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.thread_block()?;
    std::thread::Builder::new()
        .name("sigterm-sync".to_owned())
        .spawn(move || {
            if set.wait().is_ok() {
                let _ = sync();
            }
            std::process::exit(128 + Signal::SIGTERM as i32);
        })?;
    Ok(())
}
