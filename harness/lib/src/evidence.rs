//! The evidence of one cell: one merged history of what the harness did, what
//! the runner says (task, run log), what the provider recorded (journal), what
//! really ran (effect ledger), and what was left behind (files, processes).
//!
//! The history is the only contract between running a cell (`cell`) and
//! judging it (`oracles`): oracles read nothing else. It is typed from the
//! wire in: the task view (`TaskRead`) and the run log (`run_log::RunLogEvent`)
//! are parsed once, where the cell reads them and where `turncut judge`
//! loads a saved `evidence.json`, and the oracles read the typed forms (and
//! the typed accessors here: `evidence/journal.rs` for the provider's
//! journal, `evidence/actions.rs` for the harness's own records), never
//! JSON. The JSON as the runner sent it is kept only to write
//! `evidence.json` again, in the same shape, and to show a person (the
//! timeline). The evidence of a cell that did not pass is written to its
//! report directory (`cells/t###/`) for a person to read.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wire::journal::{Entry, EntryKind};
use wire::ledger::LedgerEntry;

use crate::model::{CellSpec, Fault, TaskState};
use crate::run_log::{Data, Kind, Payload, RetryAdmitted, RunLogEvent, TurnKind};
use crate::runner_client::{RunView, TaskView};

mod actions;
mod journal;
pub use journal::turn_starts_in;
mod power_cut;
mod task;
mod tasks;
mod upstream;

pub use actions::{Action, ActionKind, Exchange, Op, OpKind, OpResult, RequestKind};
pub use journal::TurnStart;
pub use task::TaskRead;
pub use tasks::TaskLane;
pub use upstream::{InjectedAnswer, JournalOf, ModelExchange};

/// A turn as the provider durably recorded it (its own store, read after the
/// cell): the provider's truth, which the journal can lag by a write. The
/// evidence holds it with client ids and authorizing ids translated to
/// controller message ids.
pub use wire::recorded::RecordedTurn as ProviderTurn;

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
    /// Events of the schedule applied (the first cut included).
    pub events_applied: usize,
    /// Role of the process that reached it.
    pub cut_role: Option<crate::model::Role>,
    /// The harness's actions in order.
    pub actions: Vec<Action>,
    /// Requests and their final answers.
    pub exchanges: Vec<Exchange>,
    /// Every attempt of every controller request, in invocation order.
    #[serde(default)]
    pub ops: Vec<Op>,
    /// The task as the runner reports it at the end (`GET /v1/tasks/{id}`),
    /// parsed once; `None` when it was never read.
    pub task: Option<TaskRead>,
    /// The run log at the end, parsed once (an event that does not parse
    /// is kept in its place, malformed: a gap, see [`Evidence::gap`]).
    #[serde(deserialize_with = "crate::run_log::deserialize_lenient")]
    pub events: Vec<RunLogEvent>,
    /// The run log as read just before the fault (a prefix of `events`
    /// unless something was lost).
    #[serde(default, deserialize_with = "crate::run_log::deserialize_lenient_opt")]
    pub events_before_fault: Option<Vec<RunLogEvent>>,
    /// The run log as read before the last power cut (the latest read
    /// before it, of this fault or an earlier one); `None` without a power
    /// cut or a read.
    #[serde(default, deserialize_with = "crate::run_log::deserialize_lenient_opt")]
    pub events_before_power_cut: Option<Vec<RunLogEvent>>,
    /// The provider journal.
    pub journal: Vec<Entry>,
    /// The journal of the model API a real product's cell starts beside the
    /// product (`model-journal.jsonl`): what the product asked the model
    /// and what was injected there. Empty in a fake's cell, where a model
    /// API that serves the runner journals into `journal`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_journal: Vec<Entry>,
    /// The effect ledger.
    pub ledger: Vec<LedgerEntry>,
    /// Every turn in the provider's durable store at the end.
    pub provider_turns: Vec<ProviderTurn>,
    /// The scenario's `[expect]` (judged on a clean cell).
    #[serde(default)]
    pub expect: crate::model::Expect,
    /// The scripted model the fake played (each turn with the message
    /// texts it answers): what each message's content asks it to run, for
    /// the contract model's effects judgement.
    #[serde(default)]
    pub script: Option<wire::script::Script>,
    /// Whether the task was still unsettled at the deadline.
    pub deadline_passed: bool,
    /// The canary credential planted in the runner's environment.
    pub canary: String,
    /// Files (relative paths) in which the canary was found.
    pub canary_found_in: Vec<String>,
    /// Processes of the cell still alive after teardown (`role pid`).
    pub survivors: Vec<String>,
    /// Provider processes alive before a Retry and still alive at its 201,
    /// from the process table (pid and start time): a missing stop proof.
    #[serde(default)]
    pub alive_at_retry: Vec<String>,
    /// A harness error that cut the cell short.
    pub harness_error: Option<String>,
    /// Every file of the workspace at the end of the cell (after the power
    /// cut of a power-cut cell), by path relative to it, as text (bytes
    /// that are not UTF-8 replaced); `None` when it was not read.
    #[serde(default)]
    pub workspace: Option<BTreeMap<String, String>>,
    /// The workspace's files right after the cell's last power cut, before
    /// the runner started again; `None` without a power cut.
    #[serde(default)]
    pub workspace_after_cut: Option<BTreeMap<String, String>>,
    /// The workspace's path as the runner was given it.
    #[serde(default)]
    pub workspace_root: String,
    /// Sources the harness could not read whole, with the reason. An oracle
    /// that needs one of them says `unknown`, never pass.
    #[serde(default)]
    pub unreadable: Vec<Unreadable>,
    /// The provider idle timeout the runner was given
    /// (`--provider-idle-timeout-ms`): a runner that says it gave up on a
    /// provider after less is not slowed by load (`timing::timing_shape`).
    #[serde(default)]
    pub runner_idle_timeout_ms: Option<u64>,
    /// The tasks after the first, in a cell of several (the fields above
    /// that are a task's are the first task's); the oracles judge each
    /// task's view ([`Evidence::task_views`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_tasks: Vec<TaskLane>,
}

/// A source of evidence the oracles read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The task view (`GET /v1/tasks/{id}`).
    Task,
    /// The run log (`GET /v1/tasks/{id}/events`).
    RunLog,
    /// The provider's journal.
    Journal,
    /// The effect ledger.
    Ledger,
    /// Every fake's durable store.
    ProviderStore,
    /// The process table (`/proc`).
    Processes,
    /// The cell's files (the canary search).
    Files,
    /// The workspace's files at the end of the cell.
    Workspace,
}

impl Source {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Task => "task",
            Source::RunLog => "run-log",
            Source::Journal => "journal",
            Source::Ledger => "ledger",
            Source::ProviderStore => "provider-store",
            Source::Processes => "processes",
            Source::Files => "files",
            Source::Workspace => "workspace",
        }
    }
}

/// A source that could not be read whole, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unreadable {
    /// The source.
    pub source: Source,
    /// Why (the error, or what is missing).
    pub reason: String,
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
pub use wire::client_id::controller_id;

/// Reads every fake's durable store under `dir` (Codex `threads/`, ACP
/// `sessions/`, OpenCode `opencode/`, model API `model-api/`), at any depth, with client ids and
/// authorizing ids translated to controller message ids. Also returns every
/// store file or directory that could not be read whole (a store file that
/// does not parse as JSON is one): the fakes' readers skip those, so the
/// caller must record them as unreadable rather than judge a partial store.
pub fn read_provider_turns(dir: &Path) -> (Vec<ProviderTurn>, Vec<String>) {
    let (files, mut problems) = crate::runner_client::walk_files(dir);
    let mut roots: Vec<std::path::PathBuf> = Vec::new();
    for file in &files {
        // A fake's state dir is the parent of its store directory.
        let mut p = file.as_path();
        while let Some(parent) = p.parent() {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if wire::stores::STORE_DIRS.contains(&name) {
                if !roots.iter().any(|r| r == parent) {
                    roots.push(parent.to_path_buf());
                }
                if file.extension().is_some_and(|x| x == "json") {
                    problems.extend(unparsable(file));
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
        let turns = wire::stores::codex::recorded_turns(&root)
            .into_iter()
            .chain(wire::stores::acp::recorded_turns(&root))
            .chain(wire::stores::opencode::recorded_turns(&root))
            .chain(wire::stores::model_api::recorded_turns(&root));
        for t in turns {
            out.push(ProviderTurn {
                thread: t.thread,
                turn: t.turn,
                client_id: t.client_id.as_deref().map(controller_id),
                status: t.status,
                continuation: t.continuation,
                authorized_by: controller_id(&t.authorized_by),
                model_requests: t.model_requests,
            });
        }
    }
    (out, problems)
}

/// Why a store file is not one whole JSON document, if it is not.
fn unparsable(file: &Path) -> Option<String> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) => return Some(format!("{}: {e}", file.display())),
    };
    // The fake Codex, like the real one, creates a thread's file empty
    // before it writes the thread: a state of its own, not a torn write.
    let codex_thread = file
        .parent()
        .and_then(|d| d.file_name())
        .is_some_and(|d| d == wire::stores::codex::THREADS_DIR);
    if bytes.is_empty() && codex_thread {
        return None;
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
        .err()
        .map(|e| format!("{}: not a whole JSON document: {e}", file.display()))
}

impl Evidence {
    /// Records `source` as unreadable for `reason`.
    pub fn unreadable(&mut self, source: Source, reason: impl Into<String>) {
        self.unreadable.push(Unreadable {
            source,
            reason: reason.into(),
        });
    }

    /// Why `source` cannot be judged from, if it cannot: it was recorded as
    /// unreadable, or it is empty or truncated where the other sources show
    /// it cannot be.
    pub fn gap(&self, source: Source) -> Option<String> {
        let recorded: Vec<&str> = self
            .unreadable
            .iter()
            .filter(|u| u.source == source)
            .map(|u| u.reason.as_str())
            .collect();
        if !recorded.is_empty() {
            return Some(format!(
                "{} unreadable: {}",
                source.as_str(),
                recorded.join("; ")
            ));
        }
        let why = match source {
            Source::Task => self.task_gap(),
            Source::RunLog => self.run_log_gap(),
            Source::Journal => (self.journal.is_empty()
                && self.events_of(Kind::TurnAccepted).next().is_some())
            .then(|| {
                "the journal is empty although the runner recorded an accepted turn".to_owned()
            }),
            Source::ProviderStore => self.store_gap(),
            Source::Ledger => self.ledger_gap(),
            Source::Workspace => self
                .workspace
                .is_none()
                .then(|| "the workspace was never read".to_owned()),
            Source::Processes | Source::Files => None,
        };
        why.map(|w| format!("{}: {w}", source.as_str()))
    }

    fn task_gap(&self) -> Option<String> {
        match &self.task {
            None => Some("the task view was never read".to_owned()),
            Some(t) => t.view().err().map(str::to_owned),
        }
    }

    /// The task view, typed; `None` when it was never read or does not
    /// parse (the oracles that read it then say `unknown`, see
    /// [`Evidence::gap`]).
    pub fn task(&self) -> Option<&TaskView> {
        self.task.as_ref()?.view().ok()
    }

    /// The runs of the task (none when the view does not parse: the oracles
    /// that read them then say `unknown`, see [`Evidence::gap`]).
    pub fn runs(&self) -> &[RunView] {
        self.task().map_or(&[], |t| t.runs.as_slice())
    }

    fn run_log_gap(&self) -> Option<String> {
        self.task.as_ref()?;
        if self.events.is_empty() {
            return Some("the run log of an existing task is empty".to_owned());
        }
        if let Some(e) = self.events.iter().find_map(RunLogEvent::error) {
            return Some(e.to_string());
        }
        // Every settle writes its run.settled event in the same transaction.
        let state = self.state().filter(|s| s.settled())?;
        if self.events_of(Kind::RunSettled).next().is_none() {
            return Some(format!(
                "truncated: the task is {state} but the run log has no run.settled"
            ));
        }
        None
    }

    /// The journal records a turn only after the store has it
    /// (`turn.recorded`), so a journaled turn missing from the store means
    /// the store was not read whole.
    fn store_gap(&self) -> Option<String> {
        let stored: HashSet<&str> = self
            .provider_turns
            .iter()
            .map(|t| t.turn.as_str())
            .collect();
        // A power cut drops what a provider recorded without syncing, as
        // its real product would lose it: a turn journaled before the last
        // cut may be gone from the store (the journal is off the mount).
        let cut_ms = self.last_power_cut_ms();
        let missing: Vec<(usize, &str)> = self
            .journal
            .iter()
            .enumerate()
            .filter(|(_, e)| e.fact.as_deref() == Some("turn.recorded"))
            .filter(|(_, e)| cut_ms.is_none_or(|cut| e.ts_ms > cut))
            .filter_map(|(i, e)| e.data["turn"].as_str().map(|t| (i + 1, t)))
            .filter(|(_, t)| !stored.contains(t))
            .collect();
        let (line, turn) = missing.first()?;
        Some(format!(
            "truncated: {} journaled turn(s) are not in the store, first {turn} (journal:{line})",
            missing.len()
        ))
    }

    /// An effect the provider saw exit 0 wrote its ledger line first.
    fn ledger_gap(&self) -> Option<String> {
        let (line, d) = self
            .facts("effect.exited")
            .into_iter()
            .filter(|(_, d)| d["exit_code"] == 0)
            .find(|(_, d)| !self.ledger.iter().any(|l| d["key"] == l.key.as_str()))?;
        Some(format!(
            "truncated: effect {} exited 0 (journal:{line}) but is not in the ledger",
            d["key"]
        ))
    }

    /// The message each admitted Retry says it re-sends: Retry id → message
    /// id, from its `retry.admitted` event (`resends_message`). A Retry that
    /// re-sends nothing (it answers the queue) is absent.
    pub fn retry_resends(&self) -> BTreeMap<String, String> {
        self.payloads::<RetryAdmitted>()
            .filter_map(|(_, r)| Some((r.message_id.clone(), r.resends_message.clone()?)))
            .collect()
    }

    /// What a client message id carried to the provider, as content: the
    /// text the harness sent under it (a prompt, a follow-up), or for a
    /// Retry, which sends a stored text, the text the provider received
    /// under its id (journal), else the text of the message its
    /// `retry.admitted` names. A message is judged by its content, so a
    /// text replayed under another id is still the same message.
    pub fn content_of(&self, client_id: &str) -> Option<String> {
        // The text the runner accepted under the id: a refused request's
        // text may be followed by another text under the same id, which the
        // runner accepts (a refused id is not taken).
        let sent = |id: &str| {
            let with_text = || {
                self.exchanges
                    .iter()
                    .filter(move |x| x.message_id == id && !x.text.is_empty())
            };
            with_text()
                .find(|x| (200..300).contains(&x.status))
                .or_else(|| with_text().next())
                .map(|x| x.text.clone())
        };
        if let Some(t) = sent(client_id) {
            return Some(t);
        }
        let received = self
            .turn_starts()
            .into_iter()
            .find(|s| s.client_id.as_deref() == Some(client_id) && !s.text.is_empty())
            .map(|s| s.text);
        received.or_else(|| sent(self.retry_resends().get(client_id)?))
    }

    /// The messages queued just before run-log event `seq`, as the run log
    /// itself tells it: admitted (the prompt, follow-ups, a Retry that
    /// re-sends a text), minus those a primary turn's intent took and an
    /// earlier Retry a later one superseded.
    pub fn queued_before(&self, seq: i64) -> Vec<String> {
        let mut queued: Vec<String> = Vec::new();
        let mut retries: Vec<String> = Vec::new();
        for ev in self.events.iter().take_while(|ev| ev.seq < seq) {
            match &ev.data {
                Data::TaskAdmitted(a) => queued.push(a.message_id.clone()),
                Data::MessageQueued(q) => queued.push(q.message_id.clone()),
                Data::RetryAdmitted(r) => {
                    // A later Retry supersedes an earlier one its turn never
                    // took: it re-sends what that one would have
                    // (`docs/recovery-contract.md`, Retry).
                    queued.retain(|q| !retries.contains(q));
                    retries.push(r.message_id.clone());
                    if r.resends == Some(true) {
                        queued.push(r.message_id.clone());
                    }
                }
                Data::TurnIntent(t) if t.kind == TurnKind::Primary => {
                    queued.retain(|q| *q != t.message_id);
                }
                _ => {}
            }
        }
        queued
    }

    /// Message ids the harness issued (submit, follow-ups, Retry).
    pub fn issued_ids(&self) -> Vec<String> {
        self.exchanges
            .iter()
            .map(|e| e.message_id.clone())
            .collect()
    }

    /// The profile of the cell (from its scenario id), if known.
    pub fn profile(&self) -> Option<&str> {
        self.spec.as_ref().map(|s| s.scenario_id.profile())
    }

    /// The final task state (`None` when the view was not read or does not
    /// parse).
    pub fn state(&self) -> Option<TaskState> {
        self.task().map(|t| t.state)
    }

    /// The final cause code.
    pub fn cause_code(&self) -> Option<&str> {
        Some(self.task()?.cause.as_ref()?.code.as_str())
    }

    /// The recovery path the cell took, run by run: a Retry or follow-up
    /// run, an adopted turn, a continuation, an uncertain tool, and how the
    /// run ended (`completed`, `failed <cause>`), joined by ` → `; e.g.
    /// `failed ambiguous_turn_start → retry → completed`. From the task view
    /// and the run log; `unknown` when the task view does not parse.
    pub fn path(&self) -> String {
        let Some(task) = self.task() else {
            return "unknown".to_owned();
        };
        let mut steps: Vec<String> = Vec::new();
        for run in &task.runs {
            match run.kind.as_str() {
                "retry" => steps.push("retry".to_owned()),
                "follow_up" => steps.push("follow-up".to_owned()),
                _ => {}
            }
            // What recovery did inside the run, in run-log order.
            let mine = self
                .events
                .iter()
                .filter(|ev| ev.run_id.as_deref() == Some(run.run_id.as_str()));
            for ev in mine {
                let step = match &ev.data {
                    Data::TurnIntent(t) if t.kind == TurnKind::Continuation => "continued",
                    Data::TurnFinished(f) if f.adopted == Some(true) => "adopted",
                    _ if ev.kind() == Kind::ToolOutcomeUncertain => "tool uncertain",
                    // An accepted turn the provider never recorded, sent
                    // again (an intent found absent is sent the first time).
                    Data::TurnAbsentAtProvider(a) if a.provider_turn_id.is_some() => "re-sent",
                    _ => continue,
                };
                if steps.last().map(String::as_str) != Some(step) {
                    steps.push(step.to_owned());
                }
            }
            steps.push(match (&run.status[..], &run.cause) {
                ("failed", Some(c)) => format!("failed {}", c.code),
                (status, _) => status.to_owned(),
            });
        }
        if steps.is_empty() {
            return task.state.to_string();
        }
        steps.join(" → ")
    }

    /// Run-log events of a kind, malformed ones included (for counting
    /// and finding events by kind; [`Evidence::payloads`] reads their data).
    pub fn events_of(&self, kind: Kind) -> impl Iterator<Item = &RunLogEvent> + '_ {
        self.events.iter().filter(move |e| e.kind() == kind)
    }

    /// Run-log events of `P`'s kind that parsed, with their typed data.
    pub fn payloads<P: Payload>(&self) -> impl Iterator<Item = (&RunLogEvent, &P)> + '_ {
        self.events
            .iter()
            .filter_map(|e| e.payload::<P>().map(|p| (e, p)))
    }

    /// One merged history, in time order: harness actions (`H`), runner run
    /// log (`R`), provider journal (`P`, messages in/out and facts) and
    /// effects (`E`, in ledger order at the end). The cut is marked `>>`.
    pub fn timeline(&self) -> String {
        let mut rows: Vec<(u64, u8, String)> = Vec::new();
        for a in &self.actions {
            let mark = if a.what == ActionKind::CutReached {
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
        for op in &self.ops {
            let answer = match (op.status, &op.error) {
                (Some(s), _) => s.to_string(),
                (None, Some(e)) => e.clone(),
                (None, None) => String::new(),
            };
            rows.push((
                self.started_ms + op.at_ms,
                0,
                format!(
                    "   H op {} {} -> {:?} {answer}",
                    op.kind, op.message_id, op.result
                ),
            ));
        }
        for e in self.events.iter().map(RunLogEvent::as_written) {
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

    /// Writes the evidence as `evidence.json` in `dir` (a temporary file
    /// renamed into place).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let text = serde_json::to_string_pretty(self).expect("evidence serializes");
        let tmp = dir.join("evidence.json.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, dir.join("evidence.json"))
    }
}
