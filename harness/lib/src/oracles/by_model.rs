//! The `contract` oracle's judgements that come from the contract model
//! (`crate::contract::model`) rather than from one recovery row: the
//! submit's answer, each message's effects against what its content asks
//! for, and a task nothing cut that did not complete.

use super::Judgement;
use super::model_input;
use crate::contract::model::{judge_effects, must_complete};
use crate::evidence::{ActionKind, Evidence, RequestKind, Source};
use crate::model::TaskState;

/// Every model judgement the `contract` oracle makes.
pub(super) fn check(j: &mut Judgement, e: &Evidence) {
    for (problem, at) in model_input::answer_problems(e, RequestKind::Submit) {
        j.fail(problem, [at]);
    }
    check_effects(j, e);
    check_completes(j, e);
}

/// Each message ran only the effects its content asks for, and a message a
/// completed turn answered ran every command it asks for.
fn check_effects(j: &mut Judgement, e: &Evidence) {
    if e.gap(Source::Ledger).is_some() {
        return;
    }
    let Some((messages, ledger)) = model_input::message_effects(e) else {
        return;
    };
    for (problem, at) in judge_effects(&messages, &ledger) {
        j.fail(problem, at);
    }
}

/// A cell that applied no event ran the program as written: its task
/// completes (the contract model's `must_complete`), whatever `[expect]`
/// says or omits.
fn check_completes(j: &mut Judgement, e: &Evidence) {
    let cut = e
        .actions
        .iter()
        .any(|a| matches!(a.what, ActionKind::Fault(_) | ActionKind::CutReached));
    if cut || !must_complete(e.events_applied) {
        return;
    }
    let Some(state) = e.state().filter(|s| s.settled()) else {
        return;
    };
    if state != TaskState::Completed {
        j.fail(
            format!(
                "nothing was cut, yet the task ended {state} (cause {:?}): with nothing cut the contract completes it",
                e.cause_code()
            ),
            ["task".to_owned()],
        );
    }
}
