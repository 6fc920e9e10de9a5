//! The evidence of one cell: one merged history of what the harness did, what
//! the runner says (task, run log), what the provider recorded (journal), what
//! really ran (effect ledger), and what was left behind (files, processes).
//!
//! The history is the only contract between running a cell (`cell`) and
//! judging it (`oracles`): oracles read nothing else. Evidence can be written
//! to a directory (for failing cells and `--keep`) and read back, so a cell can
//! be judged again without running it.

use std::path::Path;

use fake_provider::journal::{Entry, EntryKind};
use fake_provider::ledger::LedgerEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{CellSpec, Fault};

/// One thing the harness did, with its time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Milliseconds since the cell started.
    pub at_ms: u64,
    /// `submit`, `follow_up`, `retry`, `cut.reached`, `fault.kill-runner`,
    /// `restart`, `settled`, …
    pub what: String,
    /// Details (ids, statuses, pids).
    pub detail: Value,
}

/// A request the harness sent and the runner's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// `submit`, `follow_up` or `retry`.
    pub kind: String,
    /// The message id the harness chose.
    pub message_id: String,
    /// The text sent (empty for a Retry, which re-sends a stored message).
    pub text: String,
    /// The HTTP status (0 when no answer came).
    pub status: u16,
    /// The JSON body.
    pub body: Value,
}

/// A turn as the provider durably recorded it (its own store, read after the
/// cell): the provider's truth, which the journal can lag by a write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderTurn {
    /// The conversation.
    pub thread: String,
    /// The provider's turn id.
    pub turn: String,
    /// The client message id it was started with.
    pub client_id: Option<String>,
    /// `inProgress`, `completed`, `interrupted` or `failed`.
    pub status: String,
    /// Whether it is a continuation.
    pub continuation: bool,
    /// The message that authorizes its effects.
    pub authorized_by: String,
}

/// Everything a cell leaves for the oracles.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Evidence {
    /// The cell.
    pub spec: Option<CellSpec>,
    /// The fault, if any.
    pub fault: Option<Fault>,
    /// When the cell started, in milliseconds since the epoch.
    pub started_ms: u64,
    /// Whether the armed cut was reached.
    pub reached_cut: bool,
    /// Role of the process that reached it (`runner`/`provider`).
    pub cut_role: Option<String>,
    /// The harness's actions in order.
    pub actions: Vec<Action>,
    /// Requests and answers.
    pub exchanges: Vec<Exchange>,
    /// The task as the runner reports it at the end (`GET /v1/tasks/{id}`).
    pub task: Value,
    /// The run log at the end.
    pub events: Vec<Value>,
    /// The run log as read just before the fault (a prefix of `events`
    /// unless something was lost).
    pub events_before_fault: Option<Vec<Value>>,
    /// The provider journal.
    pub journal: Vec<Entry>,
    /// The effect ledger.
    pub ledger: Vec<LedgerEntry>,
    /// Every turn in the provider's durable store at the end.
    pub provider_turns: Vec<ProviderTurn>,
    /// For a clean cell, the scenario's expected final state.
    pub expected_state: Option<String>,
    /// Whether the task was still unsettled at the deadline.
    pub deadline_passed: bool,
    /// The canary credential planted in the runner's environment.
    pub canary: String,
    /// Files (relative paths) in which the canary was found.
    pub canary_found_in: Vec<String>,
    /// Processes of the cell still alive after teardown (`role pid`).
    pub survivors: Vec<String>,
    /// A harness error that cut the cell short.
    pub harness_error: Option<String>,
}

fn summarize(msg: &Value) -> String {
    match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
        (Some(m), Some(id)) => format!("request {m} (id {id})"),
        (Some(m), None) => m.to_owned(),
        (None, Some(id)) if msg.get("error").is_some() => format!("error (id {id})"),
        (None, Some(id)) => format!("response (id {id})"),
        _ => "?".to_owned(),
    }
}

/// The controller's message id inside a client id. The runner's OpenCode
/// driver sends time-ordered ids that embed it (`msg_<16 hex>_<id>`, with
/// `__continuation` for a continuation); Codex and ACP send it as is.
pub fn controller_id(client_id: &str) -> String {
    let Some(rest) = client_id.strip_prefix("msg_") else {
        return client_id.to_owned();
    };
    let (hex, id) = match rest.split_once('_') {
        Some(p) => p,
        None => return client_id.to_owned(),
    };
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return client_id.to_owned();
    }
    match id.strip_suffix("__continuation") {
        Some(base) => format!("{base}#continuation"),
        None => id.to_owned(),
    }
}

/// Reads every fake's durable store under `dir` (Codex `threads/`, ACP
/// `sessions/`, OpenCode `opencode/`, model API `model-api/`), at any depth, with client ids and
/// authorizing ids translated to controller message ids.
pub fn read_provider_turns(dir: &Path) -> Vec<ProviderTurn> {
    let mut roots: Vec<std::path::PathBuf> = Vec::new();
    for file in crate::runner_client::state_files(dir) {
        // A fake's state dir is the parent of its store directory.
        let mut p = file.as_path();
        while let Some(parent) = p.parent() {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if matches!(name, "threads" | "sessions" | "opencode" | "model-api") {
                if !roots.iter().any(|r| r == parent) {
                    roots.push(parent.to_path_buf());
                }
                break;
            }
            if parent == dir {
                break;
            }
            p = parent;
        }
    }
    let mut out = Vec::new();
    for root in roots {
        let turns = fake_provider::codex::store::recorded_turns(&root)
            .into_iter()
            .chain(fake_provider::acp::store::recorded_turns(&root))
            .chain(fake_provider::opencode::store::recorded_turns(&root))
            .chain(fake_provider::model_api::store::recorded_turns(&root));
        for t in turns {
            out.push(ProviderTurn {
                thread: t.thread,
                turn: t.turn,
                client_id: t.client_id.as_deref().map(controller_id),
                status: t.status,
                continuation: t.continuation,
                authorized_by: controller_id(&t.authorized_by),
            });
        }
    }
    out
}

/// A turn start the provider received, in any protocol.
pub struct TurnStart<'a> {
    /// 1-based journal line.
    pub line: usize,
    /// The journal entry.
    pub entry: &'a Entry,
    /// The controller message id it carries (translated), if any.
    pub client_id: Option<String>,
    /// Its text input.
    pub text: String,
}

fn text_of(blocks: Option<&Value>) -> String {
    blocks
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

impl Evidence {
    /// Message ids the harness issued (submit, follow-ups, Retry).
    pub fn issued_ids(&self) -> Vec<String> {
        self.exchanges
            .iter()
            .map(|e| e.message_id.clone())
            .collect()
    }

    /// Turn starts received by the provider: Codex `turn/start`, ACP
    /// `session/prompt`, OpenCode `POST …/prompt_async`.
    pub fn turn_starts(&self) -> Vec<TurnStart<'_>> {
        let mut out = Vec::new();
        for (i, e) in self.journal.iter().enumerate() {
            if e.kind != EntryKind::In {
                continue;
            }
            let d = &e.data;
            let (cid, text) = if d["method"] == "turn/start" {
                (
                    d.pointer("/params/clientUserMessageId"),
                    text_of(d.pointer("/params/input")),
                )
            } else if d["method"] == "session/prompt" {
                (
                    d.pointer("/params/_meta/messageId"),
                    text_of(d.pointer("/params/prompt")),
                )
            } else if d["method"] == "POST"
                && d["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("/prompt_async"))
            {
                (
                    d.pointer("/body/messageID"),
                    text_of(d.pointer("/body/parts")),
                )
            } else {
                continue;
            };
            out.push(TurnStart {
                line: i + 1,
                entry: e,
                client_id: cid.and_then(Value::as_str).map(controller_id),
                text,
            });
        }
        out
    }

    /// Journal facts by name, with line numbers.
    pub fn facts(&self, name: &str) -> Vec<(usize, &Value)> {
        self.journal
            .iter()
            .enumerate()
            .filter(|(_, e)| e.fact.as_deref() == Some(name))
            .map(|(i, e)| (i + 1, &e.data))
            .collect()
    }

    /// The profile of the cell (from its scenario id), if known.
    pub fn profile(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|s| s.scenario_id.split('.').nth(1))
    }

    /// The final task state.
    pub fn state(&self) -> &str {
        self.task["state"].as_str().unwrap_or("unknown")
    }

    /// The final cause code.
    pub fn cause_code(&self) -> Option<&str> {
        self.task.pointer("/cause/code").and_then(Value::as_str)
    }

    /// Run-log events of a kind.
    pub fn events_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.events.iter().filter(move |e| e["kind"] == kind)
    }

    /// One merged history, in time order: harness actions (`H`), runner run
    /// log (`R`), provider journal (`P`, messages in/out and facts) and
    /// effects (`E`, in ledger order at the end). The cut is marked `>>`.
    pub fn timeline(&self) -> String {
        let mut rows: Vec<(u64, u8, String)> = Vec::new();
        for a in &self.actions {
            let mark = if a.what.ends_with("cut.reached") {
                ">>"
            } else {
                "  "
            };
            rows.push((
                self.started_ms + a.at_ms,
                0,
                format!("{mark} H {} {}", a.what, a.detail),
            ));
        }
        for e in &self.events {
            let ts = e["ts_ms"].as_u64().unwrap_or(0);
            rows.push((
                ts,
                1,
                format!(
                    "   R #{} {} {}",
                    e["seq"],
                    e["kind"].as_str().unwrap_or("?"),
                    e["data"]
                ),
            ));
        }
        for j in &self.journal {
            let what = match j.kind {
                EntryKind::In => format!("<- {}", summarize(&j.data)),
                EntryKind::Out => format!("-> {}", summarize(&j.data)),
                EntryKind::Fact => format!("{} {}", j.fact.as_deref().unwrap_or("?"), j.data),
            };
            rows.push((j.ts_ms, 2, format!("   P {what}")));
        }
        rows.sort_by_key(|(ts, lane, _)| (*ts, *lane));
        let t0 = rows.first().map_or(0, |r| r.0);
        let mut out = String::new();
        for (ts, _, text) in rows {
            let mut line = format!("{:>6} ms {text}", ts.saturating_sub(t0));
            line.truncate(240);
            out.push_str(&line);
            out.push('\n');
        }
        for l in &self.ledger {
            out.push_str(&format!(
                "          E effect {} by {} (pid {})\n",
                l.key, l.by, l.pid
            ));
        }
        out
    }

    /// Writes the evidence as `evidence.json` plus the raw journal and ledger.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let text = serde_json::to_string_pretty(self).expect("evidence serializes");
        let tmp = dir.join("evidence.json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, dir.join("evidence.json"))
    }

    /// Reads `evidence.json` back.
    pub fn read(dir: &Path) -> std::io::Result<Evidence> {
        let text = std::fs::read_to_string(dir.join("evidence.json"))?;
        serde_json::from_str(&text)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}
