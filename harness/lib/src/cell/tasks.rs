//! A cell's tasks: the first one (where injected controller actions go),
//! each task's workspace, and the wait for every task to settle.

use std::path::PathBuf;
use std::time::Instant;

use super::steps::{settled, wait_task};
use super::{Ctx, Layout};

impl Ctx {
    /// The first task: the one injected controller actions go to.
    pub(super) fn first_task(&self) -> &str {
        self.setup
            .tasks
            .first()
            .map_or(crate::scenario::FIRST_TASK, String::as_str)
    }

    /// Task `task`'s workspace: the cell's `ws`, or with several tasks a
    /// directory of its own in it (on the same lazy mount), so that its
    /// files and its providers (by their working directory) are told apart.
    pub(super) fn workspace(&self, task: &str) -> PathBuf {
        workspace_of(&self.layout, &self.setup.tasks, task)
    }

    /// Waits until every task settled, across runner restarts; the first
    /// task's view.
    pub(super) fn wait_all_settled(&self, until: Instant) -> anyhow::Result<serde_json::Value> {
        let mut first = None;
        for task in &self.setup.tasks {
            let t = wait_task(self, until, task, settled)?;
            first.get_or_insert(t);
        }
        first.ok_or_else(|| anyhow::anyhow!("the scenario submits no task"))
    }
}

/// Task `task`'s workspace in `layout` (see [`Ctx::workspace`]).
fn workspace_of(layout: &Layout, tasks: &[String], task: &str) -> PathBuf {
    match tasks.len() {
        0 | 1 => layout.p("ws"),
        _ => layout.p("ws").join(task),
    }
}

/// Makes every task's workspace (after the lazy mounts, which start empty),
/// durably: a power cut must not take a workspace the controller named
/// (the mount's directory syncs each new entry).
pub(super) fn make_workspaces(ctx: &Ctx) -> anyhow::Result<()> {
    for task in &ctx.setup.tasks {
        let ws = ctx.workspace(task);
        std::fs::create_dir_all(&ws)?;
        std::fs::File::open(&ws)?.sync_all()?;
    }
    std::fs::File::open(ctx.layout.p("ws"))?.sync_all()?;
    Ok(())
}
