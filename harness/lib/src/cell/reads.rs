//! What the cell reads around a fault: from the runner, each read bounded
//! by [`PRE_FAULT_READ`] (a held write blocks the runner's store), every
//! task's run log just before the fault and the live provider a provider
//! fault at a runner point targets; from the disk, a workspace's files
//! (`workspace_files`: after a power cut, and at teardown).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::board::PerTask;
use crate::run_log::{Data, RunLogEvent};
use crate::runner_client::RunnerClient;

/// How long the read of the run log before a fault may take.
pub(super) const PRE_FAULT_READ: Duration = Duration::from_millis(500);

/// What the controller could read before the fault: nothing of it may
/// vanish. At a before-write or before-read point the store is blocked on
/// the held hit, so nothing can be read there; a later event's hit may be
/// held too (the acceptor already matched it), hence the short deadline: no
/// read, no check.
pub(super) fn read_before_fault(
    tasks: &[String],
    client: Option<&RunnerClient>,
    hit: &cutpoint::Hit,
) -> Option<PerTask<Vec<Value>>> {
    let at_store = crate::model::is_store_point(&hit.point);
    let client = client.filter(|_| !at_store)?;
    tasks
        .iter()
        .map(|t| Some((t.clone(), client.events_within(t, 0, PRE_FAULT_READ).ok()?)))
        .collect()
}

/// The runner's live provider, from its run logs (read within
/// [`PRE_FAULT_READ`]: a held write blocks the runner's store): the one
/// spawned last of any task's.
pub(super) fn live_provider(client: &RunnerClient, tasks: &[String]) -> Option<u32> {
    let mut events = Vec::new();
    for task in tasks {
        events.extend(RunLogEvent::read_all(
            client.events_within(task, 0, PRE_FAULT_READ).ok()?,
        ));
    }
    events.sort_by_key(|e| e.ts_ms);
    let mut live: Vec<u32> = Vec::new();
    for e in events {
        match &e.data {
            Data::ProviderSpawned(s) => live.push(s.pid as u32),
            Data::ProviderStopped(s) => live.retain(|p| *p as u64 != s.identity.pid),
            _ => {}
        }
    }
    live.last().copied()
}

/// The most workspace files the evidence holds, and the most bytes of each:
/// a scenario's workspace holds a few small files; more is recorded as a
/// gap, never cut silently.
const WORKSPACE_FILES_MAX: usize = 256;
const WORKSPACE_FILE_BYTES_MAX: u64 = 1 << 20;

/// Every file of the workspace `ws` as text, and what could not be read.
pub(super) fn workspace_files(
    ws: &Path,
) -> (std::collections::BTreeMap<String, String>, Vec<String>) {
    let (files, problems) = crate::runner_client::walk_files(ws);
    let mut read = std::collections::BTreeMap::new();
    let mut gaps = problems;
    if files.len() > WORKSPACE_FILES_MAX {
        gaps.push(format!(
            "{} files, more than {WORKSPACE_FILES_MAX}",
            files.len()
        ));
    }
    for file in files.iter().take(WORKSPACE_FILES_MAX) {
        let rel = file.strip_prefix(ws).unwrap_or(file).display().to_string();
        let bytes = std::fs::metadata(file).and_then(|m| {
            if m.len() > WORKSPACE_FILE_BYTES_MAX {
                Err(std::io::Error::other(format!(
                    "{} bytes, more than {WORKSPACE_FILE_BYTES_MAX}",
                    m.len()
                )))
            } else {
                std::fs::read(file)
            }
        });
        match bytes {
            Ok(b) => {
                read.insert(rel, String::from_utf8_lossy(&b).into_owned());
            }
            Err(e) => gaps.push(format!("{rel}: {e}")),
        }
    }
    (read, gaps)
}
