//! The errors the harness injected into a cell's provider or model API, as
//! the evidence shows them, and the model API's requests and answers around
//! them: what the `upstream` oracle reads, typed, so that it never reads
//! the protocols' JSON itself.

use serde_json::Value;
use wire::journal::{Entry, EntryKind};

use super::{ActionKind, Evidence};
use crate::model::{Fault, FaultClass};

/// The model API's routes: OpenAI Responses, Anthropic Messages.
const MODEL_ROUTES: [&str; 2] = ["/v1/responses", "/v1/messages"];

/// Which of a cell's journals an entry is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalOf {
    /// The provider's (`journal.jsonl`), which holds the fake model API's
    /// too where the runner talks to it (the native profile).
    Provider,
    /// The model API's a real product's cell starts beside the product
    /// (`model-journal.jsonl`).
    ModelApi,
}

impl JournalOf {
    /// How a reference to one of its lines is written (`journal:3`).
    pub fn label(self) -> &'static str {
        match self {
            JournalOf::Provider => "journal",
            JournalOf::ModelApi => "model-journal",
        }
    }
}

/// One injected error answer: as the answering process journaled it
/// (`line` and `generation` set), or, where that process's journal is not
/// in the evidence, as the harness's own action recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedAnswer {
    /// The fault.
    pub fault: Fault,
    /// The cut point it was injected at.
    pub point: String,
    /// The journal that holds it.
    pub journal: JournalOf,
    /// Its journal line (1-based), when journaled.
    pub line: Option<usize>,
    /// When, in milliseconds since the epoch.
    pub ts_ms: u64,
    /// The journaling process's generation, when journaled.
    pub generation: Option<String>,
}

/// One request the model API received, or one answer it sent with a status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelExchange {
    /// Its journal line (1-based).
    pub line: usize,
    /// When, in milliseconds since the epoch.
    pub ts_ms: u64,
    /// The status of an answer; `None` for a request.
    pub status: Option<u16>,
}

impl Evidence {
    /// The entries of `journal`.
    pub fn journal_of(&self, journal: JournalOf) -> &[Entry] {
        match journal {
            JournalOf::Provider => &self.journal,
            JournalOf::ModelApi => &self.model_journal,
        }
    }

    /// Every error answer the harness injected, in order: as the journals
    /// show them (the provider's, then a real product's model API's), else
    /// as the harness's actions do.
    pub fn injected_answers(&self) -> Vec<InjectedAnswer> {
        let journaled: Vec<InjectedAnswer> = [JournalOf::Provider, JournalOf::ModelApi]
            .into_iter()
            .flat_map(|j| journaled_answers(self.journal_of(j), j))
            .collect();
        if !journaled.is_empty() {
            return journaled;
        }
        self.actions
            .iter()
            .filter_map(|a| match a.what {
                ActionKind::Fault(fault) if fault.class() == FaultClass::Answer => {
                    Some(InjectedAnswer {
                        fault,
                        point: a.detail["point"].as_str().unwrap_or_default().to_owned(),
                        journal: JournalOf::Provider,
                        line: None,
                        ts_ms: self.started_ms + a.at_ms,
                        generation: None,
                    })
                }
                _ => None,
            })
            .collect()
    }

    /// The model API's requests and status answers in `journal` after its
    /// line `after` (1-based) by the process of `generation`, before
    /// `until_ms`.
    pub fn model_exchanges_after(
        &self,
        journal: JournalOf,
        after: usize,
        generation: &str,
        until_ms: u64,
    ) -> Vec<ModelExchange> {
        self.journal_of(journal)
            .iter()
            .enumerate()
            .skip(after)
            .filter(|(_, en)| en.generation == generation && en.ts_ms < until_ms)
            .filter_map(|(i, en)| {
                model_exchange(en).map(|status| ModelExchange {
                    line: i + 1,
                    ts_ms: en.ts_ms,
                    status,
                })
            })
            .collect()
    }

    /// When a later event of the schedule than one at `ts_ms` of `fault`
    /// was reached: the run may end by that event's rules.
    pub fn other_event_since(&self, fault: Fault, ts_ms: u64) -> bool {
        self.actions.iter().any(|a| {
            let at = self.started_ms + a.at_ms;
            matches!(a.what, ActionKind::CutReached | ActionKind::EventReached)
                && at + 50 >= ts_ms
                && a.detail["fault"].as_str().and_then(Fault::parse) != Some(fault)
        })
    }

    /// When the harness first saw a cut or event of `fault` reached, in
    /// milliseconds since the epoch: where an injected answer was decided,
    /// however late the held provider journaled it.
    pub fn reached_ms(&self, fault: Fault) -> Option<u64> {
        self.actions
            .iter()
            .filter(|a| matches!(a.what, ActionKind::CutReached | ActionKind::EventReached))
            .filter(|a| a.detail["fault"].as_str().and_then(Fault::parse) == Some(fault))
            .map(|a| self.started_ms + a.at_ms)
            .min()
    }

    /// When the controller first asked for a Retry, in milliseconds since
    /// the epoch: when its first request was sent (the exchange's
    /// `sent_at_ms`, or the earliest attempt's op).
    pub fn first_retry_ms(&self) -> Option<u64> {
        let sent = self
            .exchanges
            .iter()
            .filter(|x| x.kind == super::RequestKind::Retry)
            .map(|x| x.sent_at_ms);
        let answered = self
            .ops
            .iter()
            .filter(|o| o.kind == super::OpKind::Request(super::RequestKind::Retry))
            .map(|o| o.at_ms);
        sent.chain(answered).min().map(|at| self.started_ms + at)
    }
}

/// The error answers `entries` (the journal `journal`) record as
/// injected (`fault.answer`).
fn journaled_answers(entries: &[Entry], journal: JournalOf) -> Vec<InjectedAnswer> {
    entries
        .iter()
        .enumerate()
        .filter(|(_, en)| en.fact.as_deref() == Some("fault.answer"))
        .filter_map(|(i, en)| {
            let fault = Fault::parse(en.data["answer"].as_str()?)?;
            (fault.class() == FaultClass::Answer).then(|| InjectedAnswer {
                fault,
                point: en.data["point"].as_str().unwrap_or_default().to_owned(),
                journal,
                line: Some(i + 1),
                ts_ms: en.ts_ms,
                generation: Some(en.generation.clone()),
            })
        })
        .collect()
}

/// A model API request (`Some(None)`) or status answer (`Some(Some(s))`).
fn model_exchange(en: &Entry) -> Option<Option<u16>> {
    let path = en.data.get("path").and_then(Value::as_str);
    if !path.is_some_and(|p| MODEL_ROUTES.contains(&p)) {
        return None;
    }
    match en.kind {
        EntryKind::In => Some(None),
        EntryKind::Out => en
            .data
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .map(Some),
        EntryKind::Fact => None,
    }
}
