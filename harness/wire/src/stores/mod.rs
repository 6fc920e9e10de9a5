//! The fakes' durable stores, as the harness reads them.
//!
//! Each fake keeps what it durably recorded under its state directory, in a
//! format of its own protocol: Codex threads (`codex`), ACP sessions (`acp`),
//! OpenCode sessions, messages and parts (`opencode`) and the model API's
//! turns (`model_api`). The record types here are those files; each
//! protocol's `recorded_turns` reads them back as [`RecordedTurn`]s, the
//! provider's truth for the harness's oracles. The fakes write these files
//! (their `Store`s) and the harness only reads them, so the formats are
//! defined once, here.
//!
//! [`RecordedTurn`]: crate::recorded::RecordedTurn

use std::path::Path;

use serde::{Deserialize, Serialize};

pub mod acp;
pub mod codex;
pub mod model_api;
pub mod opencode;

/// The directories (under a fake's state directory) that hold a fake's
/// durable store, one per protocol.
pub const STORE_DIRS: [&str; 4] = [
    codex::THREADS_DIR,
    acp::SESSIONS_DIR,
    opencode::STORE_DIR,
    model_api::STORE_DIR,
];

/// Status of a stored turn, with the wire names of Codex's `TurnStatus`
/// (also what the ACP store keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    /// Running.
    InProgress,
    /// Finished normally.
    Completed,
    /// Stopped by the client (`turn/interrupt`, `session/cancel`, a `cancel`
    /// decision), or by the process dying.
    Interrupted,
    /// Failed.
    Failed,
}

impl TurnStatus {
    /// Its wire name (`inProgress`, `completed`, …).
    pub(crate) fn wire_name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
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

/// The name of the [`LiveProcess`] note in a store's directory.
pub const LIVE_FILE: &str = "live.json";

/// The generation of the process that serves `dir`, if the note reads and
/// that very process (same pid, same start time) is still alive.
pub fn live_generation(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(LIVE_FILE))
        .ok()
        .and_then(|t| serde_json::from_str::<LiveProcess>(&t).ok())
        .filter(|l| {
            let alive = Path::new(&format!("/proc/{}", l.pid)).exists();
            alive && start_ticks(l.pid) == l.start_ticks
        })
        .map(|l| l.generation)
}

/// A process's start time in clock ticks (field 22 of `/proc/<pid>/stat`),
/// zombie or not: what a [`LiveProcess`] note records. `None` when the
/// process is gone or its stat line does not read as expected.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let pid = i32::try_from(pid).ok()?;
    crate::procstat::read(pid).ok().map(|s| s.start_time)
}

/// The `*.json` files of `dir`, sorted by name; none when `dir` does not exist.
pub fn json_files(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let path = entry?.path();
                if path.extension().and_then(|e| e.to_str()) == Some("json") {
                    out.push(path);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_their_wire_names() {
        assert_eq!(TurnStatus::InProgress.wire_name(), "inProgress");
        assert_eq!(TurnStatus::Interrupted.wire_name(), "interrupted");
    }

    #[test]
    fn a_note_for_a_process_that_is_not_this_one_reads_as_dead() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(live_generation(dir.path()), None);
        let note = |start_ticks| LiveProcess {
            v: 1,
            generation: "g1".to_owned(),
            pid: std::process::id(),
            start_ticks,
        };
        let write = |l: &LiveProcess| {
            std::fs::write(dir.path().join(LIVE_FILE), serde_json::to_vec(l).unwrap()).unwrap()
        };
        write(&note(start_ticks(std::process::id())));
        assert_eq!(live_generation(dir.path()).as_deref(), Some("g1"));
        write(&note(Some(u64::MAX)));
        assert_eq!(live_generation(dir.path()), None);
    }
}
