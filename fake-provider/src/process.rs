//! Telling processes apart by more than their pid: the start time in
//! `/proc/<pid>/stat`, and `live.json`, the note by which an HTTP fake's
//! store says which process serves its state directory.
//!
//! The harness uses the start time to tell a fake's tool process from a
//! later one with the same pid; the stores use it to tell a turn a live
//! process is still on from one whose process died. The note's format and
//! its reader (`live_generation`) live in `wire::stores`.

use std::path::Path;

use wire::stores::LIVE_FILE;
pub use wire::stores::LiveProcess;

use crate::recorded::{Durability, write_atomic};

/// A process's start time in clock ticks: field 22 of `/proc/<pid>/stat`.
/// `None` when the process is gone or the file does not read as expected.
pub fn start_ticks(pid: u32) -> Option<u64> {
    wire::stores::start_ticks(pid)
}

/// Records this process, of journal generation `generation`, as the one
/// serving `dir` (atomically).
pub(crate) fn write_live(dir: &Path, version: u32, generation: &str) -> std::io::Result<()> {
    let live = LiveProcess {
        v: version,
        generation: generation.to_owned(),
        pid: std::process::id(),
        start_ticks: start_ticks(std::process::id()),
    };
    write_atomic(
        dir,
        LIVE_FILE,
        &serde_json::to_vec(&live).expect("serializes"),
        Durability::Synced,
    )
}

#[cfg(test)]
mod tests {
    use wire::stores::live_generation;

    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_reads_as_live() {
        assert!(start_ticks(std::process::id()).is_some());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(live_generation(dir.path()), None);
        write_live(dir.path(), 1, "g1").unwrap();
        assert_eq!(live_generation(dir.path()).as_deref(), Some("g1"));
    }
}
