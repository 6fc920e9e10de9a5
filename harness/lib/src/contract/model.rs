//! The runner contract as an executable model.
//!
//! A pure state machine, per task and per message, of what the contract
//! (`docs/recovery-contract.md`, `docs/runner-contract.md`) allows: what a
//! runner may answer each controller request given what the controller
//! had sent and been answered before and what it knew of the task when it
//! sent it ([`TaskModel`]); which effects each message's content asks the
//! scripted model to run, so that a message runs no effect it did not ask
//! for and a message answered by a completed turn ran every effect it asked
//! for ([`judge_effects`]); and that a task no fault touched completes
//! ([`must_complete`]). The oracles consult it — `fence` and `retry.works`
//! for the answers, `no-replay.effect` and `contract` for the effects,
//! `contract` for the outcome — so a verdict follows from the contract and
//! the evidence for any program, not from a scenario's `[expect]`.
//!
//! It reads no evidence: the oracles hand it what they read
//! (`oracles::model_input`). Where the model and the contract document
//! disagree, one of them is wrong, and the commit that changes either says
//! which.

use std::collections::BTreeMap;

use crate::evidence::RequestKind;
use crate::model::TaskState;

/// The fence's refusal reason.
pub const FENCED: &str = "prior_owner_fence_refused";
/// A task or message id reused with other content.
pub const ID_CONFLICT: &str = "id_conflict";
/// A Retry of a completed task, or under another message's id.
pub const NOTHING_TO_RETRY: &str = "nothing_to_retry";
/// A Retry while a run of the task executes.
pub const EXECUTION_ACTIVE: &str = "execution_active";
/// The store failed; nothing changed, the request may be repeated.
pub const STORAGE_FAILED: &str = "storage_failed";

/// A control API answer: its status and its `reason` (errors carry one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The error's `reason`, when the body has one.
    pub reason: Option<String>,
}

/// One request the controller sent, as the model takes it.
#[derive(Clone, Debug)]
pub struct Sent {
    /// Submit, follow-up or Retry.
    pub kind: RequestKind,
    /// The message id (a Retry's own id).
    pub id: String,
    /// The text sent (empty for a Retry, which re-sends a stored one).
    pub text: String,
    /// The task's state as the controller read it just before sending, when
    /// it did (a follow-up sent once the task settled, a Retry).
    pub state_before: Option<TaskState>,
    /// Whether an event of the cell's schedule was applied before it was
    /// sent: the task may have failed meanwhile, which nothing else can do.
    pub after_fault: bool,
    /// Whether a storage fault was applied in the cell: a `503
    /// storage_failed` may answer it (the controller repeats a 503, and the
    /// last attempt's answer is what it kept).
    pub storage_fault: bool,
    /// Whether another controller request (a controller-action event) may
    /// have reached the runner between the controller's read of the task
    /// and this request.
    pub raced: bool,
    /// The answer, or `None` when none came (the request is indeterminate).
    pub answer: Option<Answer>,
}

/// What the contract allows a runner to answer one request: statuses, each
/// with the error reason it must carry (`None`: a success, no reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowed(Vec<(u16, Option<&'static str>)>);

impl Allowed {
    fn of(answers: &[(u16, Option<&'static str>)]) -> Allowed {
        Allowed(answers.to_vec())
    }

    fn with(mut self, other: Allowed) -> Allowed {
        for a in other.0 {
            if !self.0.contains(&a) {
                self.0.push(a);
            }
        }
        self
    }

    /// Whether `answer` is one of them.
    pub fn admits(&self, answer: &Answer) -> bool {
        self.0.iter().any(|(status, reason)| {
            *status == answer.status && reason.is_none_or(|r| answer.reason.as_deref() == Some(r))
        })
    }

    /// `202, or 409 prior_owner_fence_refused`.
    pub fn describe(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|(s, r)| match r {
                Some(r) => format!("{s} {r}"),
                None => s.to_string(),
            })
            .collect();
        each.join(", or ")
    }
}

/// Whether the model knows a message exists at the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// The runner admitted it (2xx).
    Yes,
    /// Its request got no answer: it may or may not have been admitted.
    Maybe,
}

#[derive(Clone, Debug)]
struct Message {
    kind: RequestKind,
    text: String,
    known: Known,
}

/// One task as the contract sees it from the controller's side: the
/// messages (prompt, follow-ups, Retries) the runner admitted or may have.
#[derive(Clone, Debug, Default)]
pub struct TaskModel {
    messages: BTreeMap<String, Message>,
}

impl TaskModel {
    /// What the contract allows the runner to answer `s`, before it is
    /// applied.
    pub fn allowed(&self, s: &Sent) -> Allowed {
        let storage = if s.storage_fault {
            Allowed::of(&[(503, Some(STORAGE_FAILED))])
        } else {
            Allowed::default()
        };
        let main = match s.kind {
            RequestKind::Submit => self.allowed_submit(s),
            RequestKind::FollowUp => self.allowed_follow_up(s),
            RequestKind::Retry => self.allowed_retry(s),
        };
        main.with(storage)
    }

    /// A task's admission: idempotent on its ids and content.
    fn allowed_submit(&self, s: &Sent) -> Allowed {
        match self.messages.get(&s.id) {
            Some(m) if m.kind != RequestKind::Submit || m.text != s.text => {
                Allowed::of(&[(409, Some(ID_CONFLICT))])
            }
            _ => Allowed::of(&[(201, None)]),
        }
    }

    /// A follow-up: the same id and text again is the same message (202);
    /// an id the task holds with other content is refused; a new message
    /// to a task that failed (or needs a human) is fenced; any other is
    /// queued (a completed task reopens).
    fn allowed_follow_up(&self, s: &Sent) -> Allowed {
        let new_message = || match s.state_before {
            Some(state) if state.failed() => Allowed::of(&[(409, Some(FENCED))]),
            Some(_) => Allowed::of(&[(202, None)]),
            None if s.after_fault => Allowed::of(&[(202, None), (409, Some(FENCED))]),
            None => Allowed::of(&[(202, None)]),
        };
        match self.messages.get(&s.id) {
            None => new_message(),
            Some(m) => {
                let same = m.kind == RequestKind::FollowUp && m.text == s.text;
                let known = if same {
                    Allowed::of(&[(202, None)])
                } else {
                    Allowed::of(&[(409, Some(ID_CONFLICT))])
                };
                match m.known {
                    Known::Yes => known,
                    Known::Maybe => known.with(new_message()),
                }
            }
        }
    }

    /// A Retry: the same Retry again answers its run; another message's id
    /// is refused; a failed task (or one that needs a human) admits it;
    /// an active task or a completed one refuses it.
    fn allowed_retry(&self, s: &Sent) -> Allowed {
        let any = Allowed::of(&[
            (201, None),
            (409, Some(EXECUTION_ACTIVE)),
            (409, Some(NOTHING_TO_RETRY)),
            (409, Some("process_running")),
            (409, Some("cleanup_quarantined")),
        ]);
        let new_retry = || match s.state_before {
            Some(TaskState::Failed) if s.raced => {
                Allowed::of(&[(201, None), (409, Some(EXECUTION_ACTIVE))])
            }
            Some(TaskState::Failed) => Allowed::of(&[(201, None)]),
            Some(TaskState::NeedsHuman) => Allowed::of(&[
                (201, None),
                (409, Some("process_running")),
                (409, Some("cleanup_quarantined")),
            ]),
            Some(TaskState::Completed) if s.raced => {
                Allowed::of(&[(409, Some(NOTHING_TO_RETRY)), (409, Some(EXECUTION_ACTIVE))])
            }
            Some(TaskState::Completed) => Allowed::of(&[(409, Some(NOTHING_TO_RETRY))]),
            Some(TaskState::Queued | TaskState::Running) => {
                Allowed::of(&[(409, Some(EXECUTION_ACTIVE))])
            }
            None => any.clone(),
        };
        match self.messages.get(&s.id) {
            None => new_retry(),
            Some(m) => {
                let known = if m.kind == RequestKind::Retry {
                    Allowed::of(&[(201, None)])
                } else {
                    Allowed::of(&[(409, Some(NOTHING_TO_RETRY))])
                };
                match m.known {
                    Known::Yes => known,
                    Known::Maybe => known.with(new_retry()),
                }
            }
        }
    }

    /// Takes the runner's answer to `s`: a 2xx admitted its message, no
    /// answer (or a 5xx) may have.
    pub fn apply(&mut self, s: &Sent) {
        let known = match &s.answer {
            Some(a) if (200..300).contains(&a.status) => Known::Yes,
            Some(a) if (400..500).contains(&a.status) => return,
            _ => Known::Maybe,
        };
        let entry = self.messages.entry(s.id.clone()).or_insert(Message {
            kind: s.kind,
            text: s.text.clone(),
            known,
        });
        if known == Known::Yes {
            entry.known = Known::Yes;
        }
    }

    /// Judges every request of one task in the order the controller sent
    /// them: each answer the contract does not allow is a problem (the
    /// request's kind and id, and a sentence naming what it got and what
    /// was allowed).
    pub fn judge(sent: &[Sent]) -> Vec<(RequestKind, String, String)> {
        let mut model = TaskModel::default();
        let mut problems = Vec::new();
        for s in sent {
            let allowed = model.allowed(s);
            if let Some(a) = &s.answer
                && a.status != 0
                && !allowed.admits(a)
            {
                let problem = format!(
                    "{} {} was answered {}{} ({}), the contract allows {}",
                    s.kind.as_str(),
                    s.id,
                    a.status,
                    a.reason
                        .as_deref()
                        .map(|r| format!(" {r}"))
                        .unwrap_or_default(),
                    state_phrase(s),
                    allowed.describe()
                );
                problems.push((s.kind, s.id.clone(), problem));
            }
            model.apply(s);
        }
        problems
    }
}

/// How the controller knew the task when it sent `s`.
fn state_phrase(s: &Sent) -> String {
    match (s.state_before, s.after_fault) {
        (Some(state), _) => format!("the task was {state} when read just before"),
        (None, true) => "sent after a fault, the task's state unknown".to_owned(),
        (None, false) => "sent while nothing had been cut".to_owned(),
    }
}

/// Whether the contract completes a task whose cell applied no event: with
/// nothing cut, every admitted message is answered and the task settles
/// `completed` (a follow-up to a completed task reopens it, and its run
/// completes too).
pub fn must_complete(events_applied: usize) -> bool {
    events_applied == 0
}

/// One message as the effects judgement takes it.
#[derive(Clone, Debug)]
pub struct MessageEffects {
    /// The message id effects run under (the ledger's `by`).
    pub id: String,
    /// The effect keys its content asks the scripted model to run (every
    /// tool of its script turn), when its content is known: an effect under
    /// it outside these is another message's work.
    pub asks: Option<Vec<String>>,
    /// Of those, the ones that run as an effect command whoever executes
    /// them (commands): a message answered by a completed turn ran each.
    /// File writes are `durable.effect`'s (the runner or the provider
    /// writes them, not always through a command).
    pub must_run: Vec<String>,
    /// Whether a completed provider turn answered it in a run that
    /// completed: then every effect it asks for ran.
    pub answered: bool,
    /// Keys that may not have run although it was answered: an approval
    /// the runner declined, a call the model gave up on after an
    /// uncertain outcome.
    pub excused: Vec<String>,
}

/// An effect line of the ledger: its key and the message it ran under.
#[derive(Clone, Debug)]
pub struct Effect {
    /// The effect key.
    pub key: String,
    /// The message id it ran under.
    pub by: String,
    /// Its 1-based ledger line.
    pub line: usize,
}

/// What the ledger shows against what each message asked for: an effect
/// under a message that did not ask for it (its content asks another turn's
/// work), and an effect a message answered by a completed turn asked for
/// and never ran. How many times an effect may run is `no-replay.effect`'s.
pub fn judge_effects(messages: &[MessageEffects], ledger: &[Effect]) -> Vec<(String, Vec<String>)> {
    let mut problems = Vec::new();
    let by_id: BTreeMap<&str, &MessageEffects> =
        messages.iter().map(|m| (m.id.as_str(), m)).collect();
    for e in ledger {
        let Some(asks) = by_id.get(e.by.as_str()).and_then(|m| m.asks.as_ref()) else {
            continue;
        };
        if !asks.contains(&e.key) {
            problems.push((
                format!(
                    "effect {} ran under message {}, whose content asks for {} (ledger:{})",
                    e.key,
                    e.by,
                    list(asks),
                    e.line
                ),
                vec![format!("ledger:{}", e.line)],
            ));
        }
    }
    for m in messages.iter().filter(|m| m.answered) {
        let Some(asks) = &m.asks else { continue };
        for key in m.must_run.iter().filter(|k| !m.excused.contains(k)) {
            if !ledger.iter().any(|e| e.by == m.id && &e.key == key) {
                problems.push((
                    format!(
                        "message {} was answered by a completed turn but its effect {key} never ran (it asks for {})",
                        m.id,
                        list(asks)
                    ),
                    vec!["ledger".to_owned(), format!("message:{}", m.id)],
                ));
            }
        }
    }
    problems
}

fn list(keys: &[String]) -> String {
    if keys.is_empty() {
        "no effect".to_owned()
    } else {
        keys.join(", ")
    }
}

#[cfg(test)]
mod tests;
