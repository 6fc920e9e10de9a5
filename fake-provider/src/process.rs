//! Telling processes apart by more than their pid: the start time in
//! `/proc/<pid>/stat`, and `live.json`, the note by which an HTTP fake's
//! store says which process serves its state directory.
//!
//! The harness uses the start time to tell a fake's tool process from a
//! later one with the same pid; the stores use it to tell a turn a live
//! process is still on from one whose process died.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::recorded::write_atomic;

/// A process's start time in clock ticks: field 22 of `/proc/<pid>/stat`.
/// `None` when the process is gone or the file does not read as expected.
pub fn start_ticks(pid: u32) -> Option<u64> {
    ::wire::procstat::read(i32::try_from(pid).ok()?)
        .ok()
        .map(|s| s.start_time)
}

/// Which process serves a state directory, for telling running turns from cut ones.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveProcess {
    /// Format version.
    pub v: u32,
    /// The journal generation of the process.
    pub generation: String,
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks (`/proc/<pid>/stat` field 22), so a reused
    /// pid is never taken for it.
    pub start_ticks: Option<u64>,
}

/// The name of the note in a store's directory.
const LIVE_FILE: &str = "live.json";

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
    )
}

/// The generation of the process that serves `dir`, if the note reads and
/// that very process (same pid, same start time) is still alive.
pub(crate) fn live_generation(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(LIVE_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<LiveProcess>(&t).ok())
        .filter(|l| {
            let alive = Path::new(&format!("/proc/{}", l.pid)).exists();
            alive && start_ticks(l.pid) == l.start_ticks
        })
        .map(|l| l.generation)
}

#[cfg(test)]
mod tests {
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
