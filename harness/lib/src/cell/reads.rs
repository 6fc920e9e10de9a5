//! What the cut side reads from the runner around a fault, each read
//! bounded by [`PRE_FAULT_READ`] (a held write blocks the runner's store):
//! every task's run log just before the fault, and the live provider a
//! provider fault at a runner point targets.

use std::time::Duration;

use serde_json::Value;

use super::events::PerTask;
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
