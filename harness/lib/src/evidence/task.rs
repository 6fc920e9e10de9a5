//! The task view in the evidence: parsed once, where the harness reads it
//! (the cell, and `turncut judge` loading a saved `evidence.json`), into
//! `runner_client::TaskView`, or the reason it does not parse. The JSON as
//! the runner sent it is kept only to write `evidence.json` again.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::runner_client::{TaskView, task_view};

/// The task view as read: typed, or why it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRead {
    view: Result<TaskView, String>,
    raw: Value,
}

impl TaskRead {
    /// Reads the task view `raw` (`GET /v1/tasks/{id}`).
    pub fn read(raw: Value) -> TaskRead {
        TaskRead {
            view: task_view(&raw),
            raw,
        }
    }

    /// The typed view, or why the view does not parse.
    pub fn view(&self) -> Result<&TaskView, &str> {
        self.view.as_ref().map_err(String::as_str)
    }

    /// The view as the runner sent it: for writing `evidence.json` and
    /// showing it to a person, never for judging.
    pub fn as_written(&self) -> &Value {
        &self.raw
    }
}

/// Written as the runner sent it.
impl Serialize for TaskRead {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

/// Read as the cell reads it: a view that does not parse is kept, with why.
impl<'de> Deserialize<'de> for TaskRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(TaskRead::read)
    }
}
