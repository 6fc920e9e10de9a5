//! The fake Codex's `apply_patch`: a `kind = "patch"` tool of the script is
//! the model adding a file through Codex's own patch tool, a `fileChange`
//! item, as the real 0.171.0 plays `apply_patch` (measured through the fake
//! model API, which calls it as `exec_command` of an `apply_patch`
//! here-document): `item/started` (`inProgress`), the thread waiting on the
//! approval, `item/fileChange/requestApproval`; once accepted
//! `serverRequest/resolved`, the thread active, the file written,
//! `item/completed` (`completed`) and `turn/diff/updated` (again at the end
//! of the turn). A patch killed before it completed is not applied and is
//! not part of the turn; the next model hears it `aborted` (the call was
//! issued), as for a command.
//!
//! What it deliberately does not simulate: patches other than one added
//! file, updates, deletions, moves, `grantRoot`, and a patch applied without
//! approval under a writable sandbox (the fake's sandbox is read-only, as
//! the real profile's: a patch asks unless the policy is `never`).

use serde_json::{Value, json};

use super::Server;
use super::wire;
use crate::rpc::Sent;
use crate::script::ScriptTool;

impl Server {
    /// The model's `apply_patch` call: the item, and the approval request
    /// unless the policy asks nothing.
    pub(super) fn patch(&mut self, thread_id: &str, turn_id: &str, tool: ScriptTool) -> Sent {
        let patch = crate::script::patch_text(&tool);
        let item_id = self.next_item_id(thread_id, "call", &patch);
        let path = self.patch_path(thread_id, &tool);
        let content = crate::script::patch_content(&tool.key);
        let item = wire::file_change_item(&item_id, &path.display().to_string(), &content);
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| t.issued.push(key));
        // The real order for a patch: the item starts, then the thread waits.
        self.item_started(thread_id, turn_id, &item)?;
        if !self.asks_approval(thread_id, &tool) {
            return self.apply_patch(thread_id, turn_id, item, &tool);
        }
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        self.pending.insert(request_id, thread_id.to_owned());
        let active = self.active.get_mut(thread_id).expect("turn is active");
        active.waiting = Some(super::Waiting {
            request_id,
            item: item.clone(),
            tool,
        });
        self.status_changed(thread_id)?;
        let method = "item/fileChange/requestApproval";
        self.write(&json!({
            "id": request_id,
            "method": method,
            "params": wire::file_change_approval_params(thread_id, turn_id, &item),
        }))?;
        self.point(&format!("codex.{}.requested", cutpoint::slug(method)));
        Ok(())
    }

    /// Applies an approved patch: the file added (a patch that finds it
    /// there fails, as `*** Add File` of an existing file does), the item
    /// completed and the model's sight of it recorded in one write, then the
    /// turn's diff.
    pub(super) fn apply_patch(
        &mut self,
        thread_id: &str,
        turn_id: &str,
        mut item: Value,
        tool: &ScriptTool,
    ) -> Sent {
        let path = self.patch_path(thread_id, tool);
        let content = crate::script::patch_content(&tool.key);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| {
                use std::io::Write as _;
                f.write_all(content.as_bytes())?;
                f.sync_all()
            });
        let ok = written.is_ok();
        self.journal.fact(
            if ok { "patch.applied" } else { "patch.failed" },
            json!({ "key": tool.key, "path": path, "thread": thread_id, "turn": turn_id,
                    "error": written.err().map(|e| e.to_string()) }),
        );
        self.point("codex.patch.applied");
        item["status"] = json!(if ok { "completed" } else { "failed" });
        let key = tool.key.clone();
        self.update_turn(thread_id, turn_id, |t| {
            t.items.push(item.clone());
            t.finished.push(key);
        });
        self.point("codex.item.recorded");
        self.notify_item_completed(thread_id, turn_id, item)?;
        if !ok {
            return Ok(());
        }
        let rel = tool.path.clone().unwrap_or_default();
        let diff = wire::added_file_diff(&rel, &content);
        if let Some(active) = self.active.get_mut(thread_id) {
            active.diff = Some(diff.clone());
        }
        self.notify(
            "turn/diff/updated",
            json!({ "threadId": thread_id, "turnId": turn_id, "diff": diff }),
        )
    }

    /// Where a patch tool's file goes: its `path`, under the thread's cwd
    /// when relative.
    fn patch_path(&self, thread_id: &str, tool: &ScriptTool) -> std::path::PathBuf {
        let cwd = &self.store.get(thread_id).expect("thread exists").cwd;
        std::path::Path::new(cwd).join(tool.path.as_deref().unwrap_or_default())
    }
}
