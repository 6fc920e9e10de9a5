//! Client-side tool calls (ACP tools and native tools) under write-ahead:
//! `executing` before the effect, the outcome after it, and `uncertain` for
//! a call whose outcome a crash or a lost provider left unknown (DESIGN §3.4
//! rule 4).

use super::cached::Cached as _;
use rusqlite::{OptionalExtension as _, params};
use serde_json::Value;

use super::{Db, StoreError, ToolCallStatus};

impl Db {
    /// The status of a client-side tool call (`executing`, `completed`,
    /// `failed`, `uncertain`), if the run has it.
    pub fn tool_status(
        &self,
        run_id: &str,
        key: &str,
    ) -> Result<Option<ToolCallStatus>, StoreError> {
        self.conn
            .row_cached(
                "SELECT status FROM tool_calls WHERE run_id = ?1 AND key = ?2",
                params![run_id, key],
                |r| r.get::<_, String>(0),
            )
            .optional()?
            .map(|s| s.parse())
            .transpose()
    }

    /// Marks a client-side tool call `executing`, before its side effect
    /// (DESIGN §3.4 rule 4). Refuses a key the run already has: a call is
    /// never executed twice.
    pub fn tool_executing(
        &mut self,
        task_id: &str,
        run_id: &str,
        turn_row: i64,
        key: &str,
        kind: &str,
        detail: Value,
    ) -> Result<bool, StoreError> {
        if self.tool_status(run_id, key)?.is_some() {
            return Ok(false);
        }
        let data =
            serde_json::json!({ "turn_row": turn_row, "key": key, "kind": kind, "detail": detail });
        self.event_in("tool_executing", task_id, Some(run_id), "tool.executing", data, |tx| {
            tx.exec_cached(
                "INSERT INTO tool_calls(run_id, key, turn_row, kind, status) VALUES (?1, ?2, ?3, ?4, 'executing')",
                params![run_id, key, turn_row, kind],
            )?;
            Ok(())
        })?;
        Ok(true)
    }

    /// Records a client-side tool call's outcome (`completed` or `failed`).
    pub fn tool_outcome(
        &mut self,
        task_id: &str,
        run_id: &str,
        key: &str,
        status: ToolCallStatus,
        outcome: Value,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(&outcome).expect("outcomes serialize");
        let data = serde_json::json!({ "key": key, "status": status, "outcome": outcome });
        self.event_in(
            "tool_outcome",
            task_id,
            Some(run_id),
            "tool.outcome",
            data,
            |tx| {
                tx.exec_cached(
                "UPDATE tool_calls SET status = ?3, outcome = ?4 WHERE run_id = ?1 AND key = ?2",
                params![run_id, key, status, text],
            )?;
                Ok(())
            },
        )?;
        Ok(())
    }

    /// After a crash or a lost provider: every call of the run still
    /// `executing` has no known outcome. Each becomes `uncertain` (with a
    /// `tool_outcome_uncertain` event) and is never executed again.
    pub fn tools_uncertain(&mut self, task_id: &str, run_id: &str) -> Result<usize, StoreError> {
        let keys: Vec<(String, String)> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT key, kind FROM tool_calls WHERE run_id = ?1 AND status = 'executing' ORDER BY rowid",
            )?;
            stmt.query_map(params![run_id], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        for (key, kind) in &keys {
            let data =
                serde_json::json!({ "key": key, "kind": kind, "action": "never executed again" });
            let k = key.clone();
            let rid = run_id.to_owned();
            self.event_in(
                "tool_uncertain",
                task_id,
                Some(run_id),
                "tool_outcome_uncertain",
                data,
                move |tx| {
                    tx.exec_cached(
                        "UPDATE tool_calls SET status = 'uncertain' WHERE run_id = ?1 AND key = ?2",
                        params![rid, k],
                    )?;
                    Ok(())
                },
            )?;
        }
        Ok(keys.len())
    }
}
