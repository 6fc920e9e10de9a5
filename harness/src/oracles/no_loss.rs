//! `no-loss`: nothing durable vanishes (the run log, a task the runner
//! admitted, an accepted follow-up).

use super::Judgement;
use crate::evidence::{Evidence, Source};
use crate::model::OracleResult;

/// Nothing durable vanishes: the run log is gapless and keeps everything read
/// before the fault; every accepted follow-up is consumed exactly once or is
/// still queued.
pub fn no_loss(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("no-loss").needs(e, &[Source::Task, Source::RunLog, Source::ProviderStore]);
    check_run_log(&mut j, e);
    // The queue and the provider's turns decide a follow-up's fate; without
    // either the follow-up checks are `unknown` (from `needs`).
    if e.gap(Source::Task).is_none() && e.gap(Source::ProviderStore).is_none() {
        check_follow_ups(&mut j, e);
    }
    j.done()
}

/// The run log is gapless and keeps every event read before the fault, and
/// a task the runner admitted is still there.
fn check_run_log(j: &mut Judgement, e: &Evidence) {
    for (i, ev) in e.events.iter().enumerate() {
        let seq = ev["seq"].as_i64().unwrap_or(-1);
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
        .any(|x| x.kind == "submit" && x.status == 201);
    if admitted
        && let Some(op) = e
            .ops
            .iter()
            .find(|o| o.kind == "read.task" && o.status == Some(404))
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
            let seq = old["seq"].as_i64().unwrap_or(-1);
            let now = e.events.iter().find(|ev| ev["seq"] == seq);
            // The whole event: a runner that lost its state and wrote the
            // same kind again has a new time (and run) on it.
            if now != Some(old) {
                j.fail(
                    format!(
                        "run-log event {seq} ({}) read before the fault is gone or changed",
                        old["kind"]
                    ),
                    [format!("events#{seq}")],
                );
            }
        }
    }
}

/// Every follow-up accepted (or sent without an answer, and so maybe
/// accepted) is consumed by exactly one provider turn or is still queued in
/// a task that can still consume it.
fn check_follow_ups(j: &mut Judgement, e: &Evidence) {
    let queued: Vec<String> = e.task_view().map(|t| t.queued_messages).unwrap_or_default();
    // A follow-up with no answer (`info`) may or may not exist; if it
    // exists, it is held to the same rule as an accepted one.
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.kind == "follow_up" && matches!(x.status, 202 | 0))
    {
        let maybe = x.status == 0;
        // Consumed means a turn the provider recorded for it.
        let starts = e
            .provider_turns
            .iter()
            .filter(|t| !t.continuation && t.client_id.as_deref() == Some(x.message_id.as_str()))
            .count();
        let still_queued = queued.contains(&x.message_id);
        // A follow-up may wait in the queue of a task that failed closed (a
        // Retry consumes it); in a completed task it is stranded for good.
        let accepted = if maybe {
            "sent (no answer came)"
        } else {
            "accepted"
        };
        if starts == 0 && still_queued && e.state() == "completed" {
            j.fail(
                format!(
                    "follow-up {} was {accepted} and queued but the task completed without consuming it",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
        if starts == 0 && !still_queued && !maybe {
            j.fail(
                format!(
                    "follow-up {} was accepted but never consumed and is no longer queued",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
        if starts > 1 {
            j.fail(
                format!(
                    "follow-up {} was {accepted} and consumed {starts} times",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
    }
}
