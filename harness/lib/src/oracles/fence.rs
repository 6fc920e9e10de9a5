//! `fence`: the prior-owner fence judged on both sides. A follow-up to a
//! task that failed (or needs a human) is refused with 409
//! `prior_owner_fence_refused` and its run-log proof, and a refused
//! follow-up reaches no provider; a scenario step's own `expect` is held
//! too.
//!
//! Before this oracle only the second half was judged: a runner that
//! answered such a follow-up 202 and reopened the failed task passed every
//! cell, the ones whose title says "refuse the follow-up" included.

use super::Judgement;
use super::Oracle;
use crate::evidence::{Evidence, Exchange, RequestKind, Source};
use crate::model::{OracleResult, ReplyExpect, TaskState};
use crate::run_log::PriorOwnerFenceRefused;

/// The reason a fenced follow-up is refused with.
const FENCE_REASON: &str = "prior_owner_fence_refused";

/// The fence, both sides.
pub fn fence(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::Fence).needs(e, &[Source::RunLog, Source::Journal]);
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.kind == RequestKind::FollowUp)
    {
        check_refused_reaches_nothing(&mut j, e, x);
        check_failed_task_refuses(&mut j, e, x);
        check_step_expect(&mut j, x);
    }
    j.done()
}

/// Whether the runner refused `x` with the fence's reason.
fn fenced(x: &Exchange) -> bool {
    x.status == 409 && x.reason() == Some(FENCE_REASON)
}

/// A message the runner refused (409, so definitely not applied) never
/// reaches a provider, not even as a delivery.
fn check_refused_reaches_nothing(j: &mut Judgement, e: &Evidence, x: &Exchange) {
    if x.status != 409 {
        return;
    }
    let delivered = e
        .turn_starts()
        .into_iter()
        .find(|t| t.client_id.as_deref() == Some(x.message_id.as_str()));
    if let Some(t) = delivered {
        j.fail(
            format!(
                "follow-up {} was refused ({}) but reached the provider (journal:{})",
                x.message_id, x.body, t.line
            ),
            [
                format!("exchange:{}", x.message_id),
                format!("journal:{}", t.line),
            ],
        );
    }
}

/// A follow-up sent to a task the harness had just read failed (or needing
/// a human) is refused by the fence, with the run-log event that proves it.
fn check_failed_task_refuses(j: &mut Judgement, e: &Evidence, x: &Exchange) {
    let Some(state) = x.state_before.filter(|s| s.failed()) else {
        return;
    };
    let id = &x.message_id;
    if !fenced(x) {
        j.fail(
            format!(
                "follow-up {id} was sent to a task that had {state} and answered {} {}: the fence must refuse it with 409 {FENCE_REASON}",
                x.status, x.body
            ),
            [format!("exchange:{id}")],
        );
        return;
    }
    let proved = e
        .payloads::<PriorOwnerFenceRefused>()
        .any(|(_, r)| r.message_id.as_ref() == Some(id));
    if !proved {
        j.fail(
            format!(
                "follow-up {id} was refused by the fence without its run-log event {FENCE_REASON}"
            ),
            [format!("exchange:{id}"), "events".to_owned()],
        );
    }
}

/// The step's `expect`: accepted (202), refused by the fence, or fenced
/// (refused if the task had failed when it was sent, else accepted).
fn check_step_expect(j: &mut Judgement, x: &Exchange) {
    let Some(expect) = x.expect else { return };
    if x.status == 0 {
        // No answer came: the request is indeterminate, nothing to hold.
        return;
    }
    let refused_state = x.state_before.is_some_and(|s| s.failed());
    let want_refused = match expect {
        ReplyExpect::Accepted => false,
        ReplyExpect::Refused => true,
        ReplyExpect::Fenced if x.state_before.is_none() => {
            j.unknown = Some(format!(
                "follow-up {} expects the fence but its task's state before it is unknown",
                x.message_id
            ));
            return;
        }
        ReplyExpect::Fenced => refused_state,
    };
    let ok = if want_refused {
        fenced(x)
    } else {
        x.status == 202
    };
    if !ok {
        let want = if want_refused {
            format!("409 {FENCE_REASON}")
        } else {
            "202".to_owned()
        };
        j.fail(
            format!(
                "follow-up {} expects {expect:?} (task {:?} when sent): {want}, but the runner answered {} {}",
                x.message_id,
                x.state_before.map(TaskState::as_str),
                x.status,
                x.body
            ),
            [format!("exchange:{}", x.message_id)],
        );
    }
}
