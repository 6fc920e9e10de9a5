//! A cell of several tasks: what the runner said of each task other than
//! the first (the first task's is the evidence's own `task`, `events`,
//! `workspace`, …), and each task's view of the evidence, which the oracles
//! judge as they judge a cell of one task.
//!
//! A task's view keeps the requests of its messages, the journal entries
//! of its conversations (and those that name no conversation: the
//! handshakes), the ledger lines and the provider's turns its messages
//! authorized, and its own task view, run log and workspace. Message ids
//! name one task's message only (the scenario parser requires it), so a
//! message id tells whose every piece is.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wire::journal::Entry;

use super::{Evidence, Source, TaskRead, Unreadable};
use crate::run_log::RunLogEvent;

/// What the runner and the workspace said of one task other than the
/// first: the fields the evidence holds for its first task.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TaskLane {
    /// The task id.
    pub id: String,
    /// The task as the runner reports it at the end.
    pub task: Option<TaskRead>,
    /// Its run log at the end.
    #[serde(deserialize_with = "crate::run_log::deserialize_lenient")]
    pub events: Vec<RunLogEvent>,
    /// Its run log as read just before the fault.
    #[serde(default, deserialize_with = "crate::run_log::deserialize_lenient_opt")]
    pub events_before_fault: Option<Vec<RunLogEvent>>,
    /// Its run log as read before the last power cut.
    #[serde(default, deserialize_with = "crate::run_log::deserialize_lenient_opt")]
    pub events_before_power_cut: Option<Vec<RunLogEvent>>,
    /// Its workspace's files at the end.
    #[serde(default)]
    pub workspace: Option<BTreeMap<String, String>>,
    /// Its workspace's files right after the last power cut.
    #[serde(default)]
    pub workspace_after_cut: Option<BTreeMap<String, String>>,
    /// Its workspace's path as the runner was given it.
    #[serde(default)]
    pub workspace_root: String,
    /// Its provider processes alive before a Retry and still alive at
    /// the Retry's 201.
    #[serde(default)]
    pub alive_at_retry: Vec<String>,
    /// Its sources (task, run log, workspace) that could not be read.
    #[serde(default)]
    pub unreadable: Vec<Unreadable>,
}

impl TaskLane {
    /// Puts this lane in the place of the first task's fields of `v`.
    fn put_in(&self, v: &mut Evidence) {
        v.task = self.task.clone();
        v.events = self.events.clone();
        v.events_before_fault = self.events_before_fault.clone();
        v.events_before_power_cut = self.events_before_power_cut.clone();
        v.workspace = self.workspace.clone();
        v.workspace_after_cut = self.workspace_after_cut.clone();
        v.workspace_root = self.workspace_root.clone();
        v.alive_at_retry = self.alive_at_retry.clone();
        v.unreadable.retain(|u| !PER_TASK.contains(&u.source));
        v.unreadable.extend(self.unreadable.iter().cloned());
    }
}

/// Sources read per task: a task's view keeps only its own gaps of these.
const PER_TASK: [Source; 3] = [Source::Task, Source::RunLog, Source::Workspace];

impl Evidence {
    /// Where the provider processes of task `task` alive at its Retry's 201
    /// are recorded: the evidence's own list for the first task, its lane's
    /// for another.
    pub fn alive_at_retry_of(&mut self, task: &str) -> &mut Vec<String> {
        match self.other_tasks.iter().position(|l| l.id == task) {
            Some(i) => &mut self.other_tasks[i].alive_at_retry,
            None => &mut self.alive_at_retry,
        }
    }

    /// The lane of task `task`, when it is not the first.
    pub fn lane_mut(&mut self, task: &str) -> Option<&mut TaskLane> {
        self.other_tasks.iter_mut().find(|l| l.id == task)
    }

    /// The tasks of the cell, the first first.
    pub fn task_ids(&self) -> Vec<String> {
        let first = self
            .exchanges
            .iter()
            .find(|x| x.kind == super::RequestKind::Submit)
            .map_or(crate::scenario::FIRST_TASK, |x| x.task.as_str());
        std::iter::once(first.to_owned())
            .chain(self.other_tasks.iter().map(|l| l.id.clone()))
            .collect()
    }

    /// Each task's view of the evidence, the first task's first: the
    /// evidence itself when the cell ran one task.
    pub fn task_views(&self) -> Vec<(String, Cow<'_, Evidence>)> {
        let ids = self.task_ids();
        if self.other_tasks.is_empty() {
            return vec![(ids[0].clone(), Cow::Borrowed(self))];
        }
        ids.iter()
            .map(|id| (id.clone(), Cow::Owned(self.view_of(id))))
            .collect()
    }

    /// The view of task `id`: the evidence with its lane in place of the
    /// first task's and the shared sources cut down to its messages.
    fn view_of(&self, id: &str) -> Evidence {
        let mut v = self.clone();
        v.other_tasks = Vec::new();
        if let Some(lane) = self.other_tasks.iter().find(|l| l.id == id) {
            lane.put_in(&mut v);
        }
        let mine: BTreeSet<String> = self
            .exchanges
            .iter()
            .filter(|x| x.task == id)
            .map(|x| x.message_id.clone())
            .collect();
        let all: BTreeSet<String> = self
            .exchanges
            .iter()
            .map(|x| x.message_id.clone())
            .collect();
        let owned = |by: &str| mine.contains(base_id(by));
        let foreign = |by: &str| !owned(by) && all.contains(base_id(by));
        v.exchanges.retain(|x| x.task == id);
        v.ops
            .retain(|o| o.message_id.is_empty() || mine.contains(&o.message_id));
        v.ledger.retain(|l| !foreign(&l.by));
        let mut conversations = self.conversations_of(&owned);
        conversations.extend(self.run_conversations(|t| t == id));
        let mut others = self.conversations_of(&foreign);
        others.extend(self.run_conversations(|t| t != id));
        // A turn is another task's by its authority, its client id or its
        // conversation; one that is no task's stays in every view.
        v.provider_turns.retain(|t| {
            let theirs = foreign(&t.authorized_by)
                || t.client_id.as_deref().is_some_and(foreign)
                || (others.contains(&t.thread) && !conversations.contains(&t.thread));
            !theirs || owned(&t.authorized_by)
        });
        // An entry naming another task's conversation, or a fact about
        // another task's message (`by`, `authorized_by`), or made for
        // another task's workspace (`cwd`: an injected answer to a request
        // that starts a conversation, which names none yet), is that task's.
        let elsewhere = self.workspaces_but(id);
        v.journal.retain(|e| {
            let by = ["by", "authorized_by"]
                .iter()
                .filter_map(|k| e.data.get(*k).and_then(Value::as_str));
            let cwd = e.data.get("cwd").and_then(Value::as_str);
            entry_conversations(e)
                .iter()
                .all(|c| !others.contains(c) || conversations.contains(c))
                && by.into_iter().all(|b| !foreign(b))
                && !cwd.is_some_and(|c| elsewhere.contains(c.trim_end_matches('/')))
        });
        self.drop_unjournaled_answers(&mut v);
        self.drop_answers_to_others_providers(id, &mut v);
        v
    }

    /// The harness's record of an error answer it injected (kept when the
    /// answering fake journaled none: it was killed or frozen before it
    /// answered) names the process whose request it answered: one of
    /// another task's providers makes it that task's. In a cell of two
    /// tasks, a stream cut of the first task's model request, its provider
    /// frozen by the next event before it answered, was in the second
    /// task's view too, which then met a fault before any run of its own
    /// (`upstream` unknown: explore --workflows --seed 3, Codex and OpenCode).
    fn drop_answers_to_others_providers(&self, id: &str, v: &mut Evidence) {
        let first = self.task_ids().into_iter().next().unwrap_or_default();
        let events_of = |task: &str| match task == first {
            true => Some(&self.events),
            false => self
                .other_tasks
                .iter()
                .find(|l| l.id == task)
                .map(|l| &l.events),
        };
        let pids = |task: &str| provider_pids(events_of(task).map_or(&[][..], |e| e.as_slice()));
        let mine = pids(id);
        let theirs: BTreeSet<u64> = self
            .task_ids()
            .iter()
            .filter(|t| t.as_str() != id)
            .flat_map(|t| pids(t))
            .filter(|p| !mine.contains(p))
            .collect();
        v.actions.retain(|a| {
            let answer = matches!(a.what, super::ActionKind::Fault(f) if f.class() == crate::model::FaultClass::Answer);
            !(answer && a.pid().is_some_and(|p| theirs.contains(&p)))
        });
    }

    /// The workspaces of the tasks other than `id`, as the runner was given
    /// them, less any that is `id`'s too.
    fn workspaces_but(&self, id: &str) -> BTreeSet<String> {
        let first = self.task_ids().into_iter().next().unwrap_or_default();
        let of = |task: &str| match task == first {
            true => self.workspace_root.as_str(),
            false => self
                .other_tasks
                .iter()
                .find(|l| l.id == task)
                .map_or("", |l| l.workspace_root.as_str()),
        };
        let mine = of(id).trim_end_matches('/');
        self.task_ids()
            .iter()
            .filter(|t| t.as_str() != id)
            .map(|t| of(t).trim_end_matches('/').to_owned())
            .filter(|w| !w.is_empty() && w != mine)
            .collect()
    }

    /// Where the answering fake journaled its injected answers (each
    /// naming its conversation), the journal says whose each was: the
    /// harness's own record of them, which names none, is left out of a
    /// task's view.
    fn drop_unjournaled_answers(&self, v: &mut Evidence) {
        if self.journal.iter().any(is_injected_answer) {
            v.actions.retain(|a| {
                !matches!(a.what, super::ActionKind::Fault(f) if f.class() == crate::model::FaultClass::Answer)
            });
        }
    }

    /// The conversations of the runs of the tasks `which` picks, as each
    /// task's view names them.
    fn run_conversations(&self, which: impl Fn(&str) -> bool) -> BTreeSet<String> {
        let first = self.task_ids()[0].clone();
        std::iter::once((first, self.task.as_ref()))
            .chain(
                self.other_tasks
                    .iter()
                    .map(|l| (l.id.clone(), l.task.as_ref())),
            )
            .filter(|(t, _)| which(t))
            .filter_map(|(_, read)| read?.view().ok())
            .flat_map(|view| view.runs.iter().filter_map(|r| r.conversation_id.clone()))
            .collect()
    }

    /// The conversations the provider received a turn start of a message
    /// `owned` says is one's, or recorded a turn of one's in.
    fn conversations_of(&self, owned: &dyn Fn(&str) -> bool) -> BTreeSet<String> {
        let started = self
            .turn_starts()
            .into_iter()
            .filter(|s| s.client_id.as_deref().is_some_and(owned))
            .filter_map(|s| s.conversation);
        let recorded = self
            .provider_turns
            .iter()
            .filter(|t| owned(&t.authorized_by) || t.client_id.as_deref().is_some_and(owned))
            .map(|t| t.thread.clone());
        started.chain(recorded).collect()
    }
}

/// The pids of the providers the run log `events` says were spawned.
fn provider_pids(events: &[RunLogEvent]) -> BTreeSet<u64> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            crate::run_log::Data::ProviderSpawned(s) => Some(s.pid),
            _ => None,
        })
        .collect()
}

/// Whether a journal entry is a fake's record of an answer the harness
/// injected (`fault.answer`).
fn is_injected_answer(e: &Entry) -> bool {
    e.fact.as_deref() == Some("fault.answer")
}

/// The controller message id a ledger or store id stands for: a
/// continuation's (`f1__continuation`) is its message's.
fn base_id(id: &str) -> &str {
    id.strip_suffix(wire::client_id::CONTINUATION).unwrap_or(id)
}

/// Every conversation id a journal entry names: Codex's `threadId` (and a
/// thread a response returns), ACP's `sessionId`, OpenCode's session path
/// or an event's `sessionID`; a fake's fact its `thread` or `session`.
fn entry_conversations(e: &Entry) -> Vec<String> {
    let d = &e.data;
    let mut out = Vec::new();
    for at in [
        "/thread",
        "/session",
        "/thread_id",
        "/params/threadId",
        "/params/sessionId",
        "/result/thread/id",
        "/result/sessionId",
        "/event/properties/sessionID",
        "/event/properties/info/sessionID",
        "/event/properties/part/sessionID",
    ] {
        if let Some(s) = d.pointer(at).and_then(Value::as_str) {
            out.push(s.to_owned());
        }
    }
    if let Some(path) = d["path"].as_str()
        && let Some(rest) = path.strip_prefix("/session/")
    {
        out.push(rest.split('/').next().unwrap_or(rest).to_owned());
    }
    out
}
