//! `fence`: the prior-owner fence judged on both sides, and every
//! follow-up's answer. Each answer is one the contract model allows for what
//! the controller had sent before and knew of the task (a follow-up to a
//! task that failed, or needs a human, is refused with 409
//! `prior_owner_fence_refused`; the same id and text again is the same
//! message; an id with other content is refused `id_conflict`), a fenced
//! follow-up has its run-log proof, and a refused follow-up's content
//! reaches no provider; a scenario step's own `expect` is held too.
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
    for (problem, at) in super::model_input::answer_problems(e, RequestKind::FollowUp) {
        j.fail(problem, [at]);
    }
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.kind == RequestKind::FollowUp)
    {
        check_refused_reaches_nothing(&mut j, e, x);
        check_fence_proved(&mut j, e, x);
        check_step_expect(&mut j, x);
    }
    j.done()
}

/// Whether the runner refused `x` with the fence's reason.
fn fenced(x: &Exchange) -> bool {
    x.status == 409 && x.reason() == Some(FENCE_REASON)
}

/// What a request the runner refused (409, so definitely not applied)
/// carried never reaches a provider, not even as a delivery. Its content
/// is its id with its text: an id the runner refused as `id_conflict`
/// (it holds that id with other content) reaches the provider with the
/// text it was admitted with, which this request did not carry; and the
/// same content sent again and admitted later (the task completed
/// meanwhile, say: found by a generated workflow) reaches it as that
/// request's.
fn check_refused_reaches_nothing(j: &mut Judgement, e: &Evidence, x: &Exchange) {
    if x.status != 409 {
        return;
    }
    let admitted_again = e.exchanges.iter().any(|o| {
        o.kind == x.kind
            && o.message_id == x.message_id
            && o.text == x.text
            && ((200..300).contains(&o.status) || o.status == 0)
    });
    if admitted_again {
        return;
    }
    let delivered = e.turn_starts().into_iter().find(|t| {
        t.client_id.as_deref() == Some(x.message_id.as_str()) && t.text.contains(&x.text)
    });
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

/// A follow-up the fence refused has the run-log event that proves it
/// (whether it had to be refused is the model's judgement, above).
fn check_fence_proved(j: &mut Judgement, e: &Evidence, x: &Exchange) {
    if !fenced(x) {
        return;
    }
    let id = &x.message_id;
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

/// The step's `expect`: accepted (202), refused (any 4xx, as
/// `docs/scenarios.md` defines it: the fence, or `id_conflict`), or fenced
/// (refused by the fence if the task had failed when it was sent, else
/// accepted).
fn check_step_expect(j: &mut Judgement, x: &Exchange) {
    let Some(expect) = x.expect else { return };
    if x.status == 0 {
        // No answer came: the request is indeterminate, nothing to hold.
        return;
    }
    let refused_state = x.state_before.is_some_and(|s| s.failed());
    let want_refused = match expect {
        ReplyExpect::Accepted => false,
        ReplyExpect::Refused if (400..500).contains(&x.status) => return,
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
        let want = match expect {
            ReplyExpect::Refused => "a refusal (4xx)".to_owned(),
            _ if want_refused => format!("409 {FENCE_REASON}"),
            _ => "202".to_owned(),
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
