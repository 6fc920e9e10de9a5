//! `cause.structured`: every failure and refusal carries a cause from the
//! closed sets of `contract`.

use super::Judgement;
use super::Oracle;
use crate::contract;
use crate::evidence::{Evidence, RequestKind, Source};
use crate::model::{OracleResult, TaskState};
use crate::run_log::{self, Data};
use crate::runner_client::CauseView;

/// A cause as `check_cause` judges it: the task view's (typed, whole) and
/// the run log's (read leniently, so a missing field is a finding here)
/// both come as this.
struct Fields<'a> {
    code: Option<&'a str>,
    recoverable: Option<bool>,
    message: &'a str,
}

impl<'a> From<&'a CauseView> for Fields<'a> {
    fn from(c: &'a CauseView) -> Fields<'a> {
        Fields {
            code: Some(&c.code),
            recoverable: Some(c.recoverable),
            message: &c.message,
        }
    }
}

impl<'a> From<&'a run_log::Cause> for Fields<'a> {
    fn from(c: &'a run_log::Cause) -> Fields<'a> {
        Fields {
            code: c.code.as_deref(),
            recoverable: c.recoverable,
            message: c.message.as_deref().unwrap_or_default(),
        }
    }
}

fn check_cause(j: &mut Judgement, cause: Option<Fields<'_>>, what: &str, at: String) {
    let Some(cause) = cause else {
        j.fail(format!("{what} has no cause"), [at]);
        return;
    };
    let (code, recoverable, message) = (cause.code, cause.recoverable, cause.message);
    match code.and_then(|c| contract::recoverable(c).map(|r| (c, r))) {
        None => j.fail(
            format!("{what} has cause {code:?}, outside the closed set"),
            [at],
        ),
        Some((c, expected)) => {
            if recoverable != Some(expected) {
                j.fail(
                    format!(
                        "{what}: cause {c} must have recoverable: {expected}, not {recoverable:?}"
                    ),
                    [at],
                );
            } else if message.trim().is_empty() {
                j.fail(
                    format!("{what}: cause {c} has no message for a person"),
                    [at],
                );
            }
        }
    }
}

/// Every failed or refused run has a cause from the closed set with the right
/// `recoverable` flag; every refusal names a listed reason.
pub fn cause_structured(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::CauseStructured).needs(e, &[Source::Task, Source::RunLog]);
    if let Some(t) = e.task().filter(|t| t.state.failed()) {
        check_cause(
            &mut j,
            t.cause.as_ref().map(Fields::from),
            "the failed task",
            "task".to_owned(),
        );
    }
    for run in e.runs().iter().filter(|r| r.status == "failed") {
        let id = &run.run_id;
        check_cause(
            &mut j,
            run.cause.as_ref().map(Fields::from),
            &format!("failed run {id}"),
            format!("task.runs.{id}"),
        );
    }
    for ev in &e.events {
        let at = format!("events#{}", ev.seq);
        match &ev.data {
            Data::TurnFailed(f) => {
                if let Some(cause) = &f.cause {
                    let cause = cause.as_ref().map(Fields::from);
                    check_cause(&mut j, cause, "a turn.failed event", at);
                }
            }
            Data::RunSettled(s) if s.state != TaskState::Completed => {
                let cause = s.cause.as_ref().map(Fields::from);
                check_cause(&mut j, cause, "a failed run.settled event", at);
            }
            _ => {}
        }
    }
    for x in e.exchanges.iter().filter(|x| x.status == 409) {
        let reason = x.reason().or(x.block_reason());
        let listed = match x.kind {
            RequestKind::Retry => reason.is_some_and(|r| contract::RETRY_BLOCKS.contains(&r)),
            _ => reason.is_some_and(|r| contract::REFUSALS.contains(&r)),
        };
        if !listed {
            j.fail(
                format!(
                    "the {} of {} was refused without a listed reason: {}",
                    x.kind, x.message_id, x.body
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
    }
    j.done()
}
