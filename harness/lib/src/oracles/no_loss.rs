//! `no-loss`: nothing durable vanishes (the run log, a task the runner
//! admitted, an accepted follow-up).

use std::collections::BTreeMap;

use super::Judgement;
use super::Oracle;
use crate::evidence::{Evidence, OpKind, RequestKind, Source};
use crate::model::{OracleResult, TaskState};
use crate::run_log::{Data, Kind, MessageStranded, RunLogEvent, RunSettled};

/// Nothing durable vanishes: the run log is gapless and keeps everything read
/// before the fault; every accepted message is consumed (by its own turn or
/// a Retry's) or waits, named by `message.stranded`, for a Retry.
pub fn no_loss(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::NoLoss)
        .needs(e, &[Source::Task, Source::RunLog, Source::ProviderStore]);
    check_run_log(&mut j, e);
    // The queue and the provider's turns decide a follow-up's fate; without
    // either the follow-up checks are `unknown` (from `needs`).
    if e.gap(Source::Task).is_none() && e.gap(Source::ProviderStore).is_none() {
        check_follow_ups(&mut j, e);
    }
    if e.gap(Source::RunLog).is_none() {
        check_stranded_at_settle(&mut j, e);
    }
    j.done()
}

/// The run log is gapless and keeps every event read before the fault, and
/// a task the runner admitted is still there.
fn check_run_log(j: &mut Judgement, e: &Evidence) {
    for (i, ev) in e.events.iter().enumerate() {
        let seq = ev.seq;
        if seq != i as i64 + 1 {
            j.fail(
                format!("the run log has a gap: position {} holds seq {seq}", i + 1),
                [format!("events#{seq}")],
            );
            break;
        }
    }
    // A task the runner admitted and now answers 404 for is gone: that is an
    // answer, not missing evidence.
    let admitted = e
        .exchanges
        .iter()
        .any(|x| x.kind == RequestKind::Submit && x.status == 201);
    if admitted
        && let Some(op) = e
            .ops
            .iter()
            .find(|o| o.kind == OpKind::ReadTask && o.status == Some(404))
    {
        j.fail(
            format!(
                "the runner admitted the task and then answered 404 for it ({} ms): the task is lost",
                op.at_ms
            ),
            ["ops:read.task".to_owned()],
        );
    }
    // An unreadable run log proves nothing gone: the check is `unknown`.
    let run_log = e.gap(Source::RunLog).is_none();
    if let Some(before) = e.events_before_fault.as_ref().filter(|_| run_log) {
        for old in before {
            let seq = old.seq;
            let now = e.events.iter().find(|ev| ev.seq == seq);
            // The whole event, as written: a runner that lost its state and
            // wrote the same kind again has a new time (and run) on it.
            if now != Some(old) {
                let kind = old
                    .kind_name()
                    .map_or("null".to_owned(), |k| format!("{k:?}"));
                j.fail(
                    format!(
                        "run-log event {seq} ({kind}) read before the fault is gone or changed"
                    ),
                    [format!("events#{seq}")],
                );
            }
        }
    }
}

/// Every message accepted (or sent without an answer, and so maybe
/// accepted) is consumed by a provider turn (its own, or a Retry's that
/// re-sends it) or still waits, named, in a task a Retry can take: queued,
/// with a `message.stranded` event that says why. A completed task strands
/// nothing.
fn check_follow_ups(j: &mut Judgement, e: &Evidence) {
    let queued: &[String] = e.task().map_or(&[], |t| t.queued_messages.as_slice());
    let resends = e.retry_resends();
    let failed = e.state().is_some_and(TaskState::failed);
    let awaits_resend = failed.then(|| resent_by_a_retry(e)).flatten();
    for x in e.exchanges.iter().filter(|x| {
        matches!(
            (x.kind, x.status),
            (RequestKind::FollowUp, 202 | 0) | (RequestKind::Submit, 201)
        )
    }) {
        let maybe = x.status == 0;
        let id = x.message_id.as_str();
        let own = e
            .provider_turns
            .iter()
            .filter(|t| !t.continuation && t.client_id.as_deref() == Some(id))
            .count();
        // A turn a power cut took from the provider's store consumed the
        // message too (it ran; its re-send after the cut is the contract's
        // `turn.absent_at_provider`, so it does not count twice).
        let lost = e
            .turns_lost_to_power_cut()
            .iter()
            .filter(|t| !t.continuation && t.client_id.as_deref() == Some(id))
            .count();
        // A Retry that re-sends this message's text under its own id
        // consumes it (`retry.admitted` names it; the text is checked),
        // and so does a later Retry that re-sends that Retry.
        let by_retry = e.provider_turns_and_lost().iter().any(|t| {
            t.client_id
                .as_deref()
                .is_some_and(|c| stands_for(&resends, c, id))
        });
        let still_queued = queued.iter().any(|q| q == id);
        let named = e
            .payloads::<MessageStranded>()
            .any(|(_, s)| s.message_id == id);
        let what = if maybe {
            "sent (no answer came)"
        } else {
            "accepted"
        };
        let at = [format!("exchange:{id}")];
        if own + lost + usize::from(by_retry) == 0 {
            let waiting = Waiting {
                still_queued,
                failed,
                named,
                maybe,
                completed: e.state() == Some(TaskState::Completed),
                resent_by_retry: awaits_resend == Some(id),
            };
            if let Some(p) = waiting.problem() {
                j.fail(format!("{} {id} was {what} but {p}", x.kind), at.clone());
            }
        }
        if own > 1 {
            j.fail(
                format!("{} {id} was {what} and consumed {own} times", x.kind),
                at,
            );
        }
    }
    check_retry_texts(j, e, &resends);
}

/// Where an unconsumed message stands at the end of the cell.
struct Waiting {
    still_queued: bool,
    failed: bool,
    /// A run-log event names it stranded (`message.stranded`).
    named: bool,
    /// Its request got no answer: it may never have been accepted.
    maybe: bool,
    completed: bool,
    /// It is the failed run's unanswered last turn, which a Retry re-sends.
    resent_by_retry: bool,
}

impl Waiting {
    /// What is wrong with it, if anything (a task still running at the end
    /// is liveness's finding).
    fn problem(&self) -> Option<&'static str> {
        match (self.still_queued, self.failed, self.named, self.maybe) {
            // Named at a failed settle (queued, or its turn never accepted): waits for a Retry.
            (_, true, true, _) | (false, _, _, true) => None,
            (false, true, false, false) if self.resent_by_retry => None,
            (true, true, false, _) => Some(
                "it is still queued in a task that failed, and no run-log event names it (message.stranded)",
            ),
            (true, false, _, _) if self.completed => {
                Some("the task completed without consuming it (still queued)")
            }
            (true, false, _, _) => None,
            (false, _, _, false) => Some("it was never consumed and is no longer queued"),
        }
    }
}

/// Whether Retry `retry` stands for message `id`: it re-sends `id`, or
/// re-sends a Retry that stands for it (a Retry whose run failed before its
/// turn, re-sent by the next Retry: the message's text reaches the provider
/// under the last one's id). Each Retry re-sends at most one message, so the
/// chain is walked at most once around.
fn stands_for(resends: &BTreeMap<String, String>, retry: &str, id: &str) -> bool {
    let mut at = retry;
    for _ in 0..=resends.len() {
        match resends.get(at) {
            Some(m) if m == id => return true,
            Some(m) => at = m,
            None => return false,
        }
    }
    false
}

/// The message a Retry of the failed task re-sends (the contract's "the
/// latest message re-sent once under the Retry's id"): its current run's
/// last primary turn, accepted but never answered. On the native profile a
/// turn is accepted with the runner's checkpoint, before any model request,
/// so a run can fail with its message in no provider's record.
fn resent_by_a_retry(e: &Evidence) -> Option<&str> {
    let current = e.task()?.current_run.as_deref()?;
    let run = e.runs().iter().find(|r| r.run_id == current)?;
    let last = run.turns.iter().rfind(|t| t.kind == "primary")?;
    (last.status != "completed").then_some(last.message_id.as_str())
}

/// A Retry that says it re-sends message X sent X's text.
fn check_retry_texts(j: &mut Judgement, e: &Evidence, resends: &BTreeMap<String, String>) {
    for (retry, message) in resends {
        let Some(text) = e
            .exchanges
            .iter()
            .find(|x| &x.message_id == message && !x.text.is_empty())
            .map(|x| x.text.as_str())
        else {
            continue;
        };
        for s in e.turn_starts() {
            if s.client_id.as_deref() == Some(retry.as_str()) && s.text != text {
                j.fail(
                    format!(
                        "Retry {retry} says it re-sends {message} but the provider received {:?} under its id (journal:{})",
                        s.text, s.line
                    ),
                    [format!("journal:{}", s.line)],
                );
            }
        }
    }
}

/// When a run settles failed, every message it leaves queued is named by a
/// `message.stranded` event of that run written with the settlement: the
/// events next to the `run.settled` (before or after it: one write has no
/// order of its own). The queue is read from the run log itself: admitted,
/// minus taken by a primary turn's intent.
fn check_stranded_at_settle(j: &mut Judgement, e: &Evidence) {
    for (settled, s) in e.payloads::<RunSettled>() {
        let at = settled.seq;
        if s.state == TaskState::Completed {
            continue;
        }
        let named = stranded_beside(&e.events, settled);
        for q in e.queued_before(at) {
            let named = named.contains(&q);
            if !named {
                j.fail(
                    format!("the run settled failed (events#{at}) leaving message {q} queued, and no message.stranded event names it"),
                    [format!("events#{at}")],
                );
            }
        }
    }
}

/// The messages the `message.stranded` events next to `settled` (a
/// contiguous run of them, of the same run, on either side) name.
fn stranded_beside(events: &[RunLogEvent], settled: &RunLogEvent) -> Vec<String> {
    let Some(i) = events.iter().position(|ev| std::ptr::eq(ev, settled)) else {
        return Vec::new();
    };
    let stranded =
        |ev: &&RunLogEvent| ev.kind() == Kind::MessageStranded && ev.run_id == settled.run_id;
    let before = events[..i].iter().rev().take_while(stranded);
    let after = events[i + 1..].iter().take_while(stranded);
    before
        .chain(after)
        .filter_map(|ev| match &ev.data {
            Data::MessageStranded(s) => Some(s.message_id.clone()),
            _ => None,
        })
        .collect()
}
