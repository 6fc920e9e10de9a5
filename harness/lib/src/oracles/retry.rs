//! `retry.works`: a Retry is admitted with a run that completes in a fresh
//! conversation after a proven stop, or refused with a listed reason.

use std::collections::HashSet;

use super::Oracle;
use super::no_replay::CONTINUATION_SUFFIX;
use super::{Judgement, storage_fault_applied};
use crate::contract;
use crate::evidence::{ActionKind, Evidence, Exchange, OpKind, RequestKind, Source};
use crate::model::OracleResult;
use crate::run_log::{Data, Kind, RetryAdmitted};
use crate::runner_client::RunView;

/// A failed-closed task's Retry is admitted with a run (or refused with a
/// listed reason), and that run completes in a fresh conversation.
pub fn retry_works(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::RetryWorks)
        .needs(e, &[Source::Task, Source::RunLog, Source::Processes]);
    let runs = e.runs();
    for (problem, at) in super::model_input::answer_problems(e, RequestKind::Retry) {
        j.fail(problem, [at]);
    }
    for x in e.exchanges.iter().filter(|x| x.kind == RequestKind::Retry) {
        match x.status {
            201 => check_admitted(&mut j, e, runs, x),
            409 => {
                let reason = x.block_reason();
                if !reason.is_some_and(|r| contract::RETRY_BLOCKS.contains(&r)) {
                    j.fail(
                        format!("Retry refused without a listed block reason: {}", x.body),
                        [format!("exchange:{}", x.message_id)],
                    );
                }
                if let Some(problem) = refused_once_admitted(e, x) {
                    j.fail(
                        problem,
                        [format!("exchange:{}", x.message_id), "events".to_owned()],
                    );
                }
            }
            // The contract's answer to a store that failed under the Retry
            // (nothing changed, it may be sent again), where the storage
            // faults the harness applied justify it.
            503 if x.reason() == Some("storage_failed") && storage_fault_applied(e) => {}
            // No answer before the deadline (the runner was cut mid-request,
            // or the harness gave up): the harness cannot tell.
            0 => {
                j.unknown = Some(format!("Retry {} got no answer: {}", x.message_id, x.body));
            }
            other => j.fail(
                format!("Retry answered {other}: {}", x.body),
                [format!("exchange:{}", x.message_id)],
            ),
        }
    }
    j.done()
}

/// An admitted Retry (201): its run is among the task's runs, completes (or
/// fails only as any run may after a later cut) in a fresh conversation, and
/// was admitted after a recorded stop proof with no earlier provider alive.
fn check_admitted(j: &mut Judgement, e: &Evidence, runs: &[RunView], x: &Exchange) {
    let Some(run_id) = x.run_id() else {
        j.fail(
            format!("Retry {} answered 201 without a run", x.message_id),
            [format!("exchange:{}", x.message_id)],
        );
        return;
    };
    let Some(pos) = runs.iter().position(|r| r.run_id == run_id) else {
        j.fail(
            format!("Retry run {run_id} is not among the task's runs"),
            ["task".to_owned()],
        );
        return;
    };
    let run = &runs[pos];
    let faulted = faulted_after_retry(e, &x.message_id);
    let closed_with_cause = run
        .cause
        .as_ref()
        .is_some_and(|c| c.recoverable || super::cut_justifies(e, &c.code));
    // A Retry run that a later event cut may itself fail, but
    // only the way the contract lets any run fail after a cut.
    if run.status != "completed" && !(faulted && closed_with_cause) {
        j.fail(
            format!(
                "Retry run {run_id} ended {} ({:?})",
                run.status,
                run.cause.as_ref().map(|c| &c.code)
            ),
            [format!("task.runs.{run_id}")],
        );
    }
    let conv = &run.conversation_id;
    // A Retry run that a later event cut before it opened a
    // conversation has none; a reused one is wrong either way.
    let missing = conv.is_none() && !(faulted && run.status != "completed");
    let reused = conv.is_some() && runs[..pos].iter().any(|r| &r.conversation_id == conv);
    if missing || reused {
        j.fail(
            format!("Retry run {run_id} did not open a fresh conversation ({conv:?})"),
            [format!("task.runs.{run_id}")],
        );
    }
    if !e.events_of(Kind::StoppedConversationVerified).any(|_| true) {
        j.fail(
            "Retry was admitted without a recorded stop proof (stopped_conversation_verified)"
                .to_owned(),
            ["events".to_owned()],
        );
    }
    if let Some(problem) = resent_answered_before_queue(e, &x.message_id) {
        j.fail(
            problem,
            [format!("exchange:{}", x.message_id), "events".to_owned()],
        );
    }
    if let Some(problem) = retry_conversation_reused(e, &x.message_id) {
        j.fail(problem, [format!("exchange:{}", x.message_id)]);
    }
    for p in &e.alive_at_retry {
        j.fail(
                format!("Retry was admitted while the earlier provider {p} was still running (process table)"),
                ["processes".to_owned()],
            );
    }
}

/// A Retry sent again (its first request cut by a restart) is answered as
/// the first was: the API is idempotent on ids (`docs/runner-contract.md`),
/// so a Retry the run log recorded admitted must answer its run, never a
/// refusal — a controller told 409 gives up on a run that is running. A
/// refusal answered before the Retry was admitted is no such re-send: the
/// same id, refused while there was nothing to retry, may be admitted once
/// there is (found by `explore --workflows` on the reference runner: r1
/// refused `nothing_to_retry`, the task then failed, r1 admitted).
fn refused_once_admitted(e: &Evidence, x: &Exchange) -> Option<String> {
    let (admitted, _) = e
        .payloads::<RetryAdmitted>()
        .find(|(_, r)| r.message_id == x.message_id)?;
    if ((e.started_ms + x.answered_at_ms) as i64) < admitted.ts_ms {
        return None;
    }
    let sent = e
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Request(RequestKind::Retry) && o.message_id == x.message_id)
        .count();
    Some(format!(
        "Retry {} was admitted (events#{}) but answered 409 when sent again ({sent} requests): the same Retry again must answer its run",
        x.message_id, admitted.seq
    ))
}

/// The provider's side of "a Retry opens a fresh conversation": the Retry's
/// first recorded turn is the first turn of its conversation (a fake's store
/// keeps a conversation's turns in the order it recorded them).
fn retry_conversation_reused(e: &Evidence, retry: &str) -> Option<String> {
    let turns = &e.provider_turns;
    let first = turns
        .iter()
        .position(|t| t.client_id.as_deref() == Some(retry))?;
    let thread = &turns[first].thread;
    // The Retry's own earlier turns (one lost and sent again, or continued,
    // after a later event cut the Retry run) are no reuse.
    let own = |t: &crate::evidence::ProviderTurn| {
        t.authorized_by == retry || t.authorized_by == format!("{retry}{CONTINUATION_SUFFIX}")
    };
    // A turn that recorded no user message names no one and held nothing
    // (the real codex, killed right after `turn/start`, keeps such a turn):
    // it is no earlier message's context.
    let empty =
        |t: &crate::evidence::ProviderTurn| t.client_id.is_none() && t.authorized_by.is_empty();
    let old = turns[..first]
        .iter()
        .find(|t| &t.thread == thread && !own(t) && !empty(t))?;
    Some(format!(
        "Retry {retry} ran in conversation {thread}, which already held turn {} of {} (provider store)",
        old.turn, old.authorized_by
    ))
}

/// Whether a cut or event of the schedule was reached after the Retry
/// `message_id` was sent: its run may then have been cut itself.
fn faulted_after_retry(e: &Evidence, message_id: &str) -> bool {
    let Some(sent) = e
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Request(RequestKind::Retry) && o.message_id == message_id)
        .map(|o| o.at_ms)
        .min()
    else {
        return false;
    };
    e.actions.iter().any(|a| {
        matches!(a.what, ActionKind::CutReached | ActionKind::EventReached) && a.at_ms >= sent
    })
}

/// A Retry re-sends the latest message only when that message was not
/// answered, or nothing else waits: when the run log recorded the
/// message's last turn completed (a continuation's, say) and messages were
/// queued, the failure came before the queue's next turn, and re-sending
/// the answered message does its work twice.
fn resent_answered_before_queue(e: &Evidence, retry: &str) -> Option<String> {
    let (admitted, r) = e
        .payloads::<RetryAdmitted>()
        .find(|(_, r)| r.message_id == retry)?;
    let seq = admitted.seq;
    let resent = r.resends_message.as_deref()?;
    let rows: HashSet<i64> = e
        .runs()
        .iter()
        .flat_map(|r| &r.turns)
        .filter(|t| t.message_id == resent)
        .map(|t| t.turn_row)
        .collect();
    let last_end = e.events.iter().rfind(|ev| {
        let row = match &ev.data {
            Data::TurnFinished(f) => f.turn_row,
            Data::TurnFailed(f) => f.turn_row,
            _ => return false,
        };
        ev.seq < seq && rows.contains(&row)
    })?;
    let queued = e.queued_before(seq);
    (last_end.kind() == Kind::TurnFinished && !queued.is_empty()).then(|| {
        format!(
            "Retry {retry} re-sent {resent}, whose last turn the run log recorded completed (events#{}), while {queued:?} waited: it should answer the queue and re-send nothing",
            last_end.seq
        )
    })
}
