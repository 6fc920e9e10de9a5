//! What a fake durably recorded, read back from its state directory: the
//! provider's truth for the harness's oracles, whatever the protocol.

pub use wire::recorded::RecordedTurn;

/// Replaces `dir/name` with `bytes` durably: a temporary file in the same
/// directory, fsync, rename, fsync of the directory. Every fake's store
/// writes through this, so a reader (or a restarted fake) sees the old file
/// or the new one, never a torn one.
pub(crate) fn write_atomic(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}
