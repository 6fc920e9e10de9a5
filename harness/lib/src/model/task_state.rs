//! A task's state as the runner reports it (`GET /v1/tasks/{id}`, and the
//! `state` of `run.settled`): one closed set, read once from the wire, so
//! an oracle or a report matches a state, not a string.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A task's state (`docs/runner-contract.openapi.json`, `TaskView.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Admitted, not started.
    Queued,
    /// A run is executing.
    Running,
    /// Settled: every message answered.
    Completed,
    /// Settled: failed, with a cause; a Retry may take it.
    Failed,
    /// Settled: a person must decide.
    NeedsHuman,
}

impl TaskState {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::NeedsHuman => "needs_human",
        }
    }

    /// Whether the task has settled (completed, failed or needs a human).
    pub fn settled(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::NeedsHuman
        )
    }

    /// Whether the task settled failed or needing a human: a failed-closed
    /// task, which a follow-up must not reopen.
    pub fn failed(self) -> bool {
        matches!(self, TaskState::Failed | TaskState::NeedsHuman)
    }

    /// The name of `state`, `unknown` for none (the harness could not read
    /// it).
    pub fn name(state: Option<TaskState>) -> &'static str {
        state.map_or("unknown", TaskState::as_str)
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// `Outcome::state` as stored: the state's name, `unknown` for none.
pub(crate) mod or_unknown {
    use super::*;

    /// Writes the state's name, `unknown` for none.
    pub fn serialize<S: Serializer>(state: &Option<TaskState>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(TaskState::name(*state))
    }

    /// Reads a state's name, `unknown` as none.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TaskState>, D::Error> {
        let name = String::deserialize(d)?;
        if name == "unknown" {
            return Ok(None);
        }
        TaskState::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(&name)).map(Some)
    }
}
