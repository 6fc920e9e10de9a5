//! `cause.structured`: every failure and refusal carries a cause from the
//! closed sets of `contract`.

use serde_json::Value;

use super::Judgement;
use super::Oracle;
use crate::contract;
use crate::evidence::{Evidence, Source};
use crate::model::OracleResult;
use crate::run_log::Kind;
use crate::runner_client::CauseView;

/// A typed cause as the JSON `check_cause` reads (the run log's causes are
/// kind-specific data, so both go through one check).
fn cause_value(c: &Option<CauseView>) -> Option<Value> {
    c.as_ref()
        .map(|c| serde_json::to_value(c).expect("a cause serializes"))
}

fn check_cause(j: &mut Judgement, cause: Option<&Value>, what: &str, at: String) {
    let Some(cause) = cause.filter(|c| !c.is_null()) else {
        j.fail(format!("{what} has no cause"), [at]);
        return;
    };
    let code = cause.get("code").and_then(Value::as_str);
    let recoverable = cause.get("recoverable").and_then(Value::as_bool);
    let message = cause
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
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
    let task = e.task_view().ok();
    if let Some(t) = task
        .as_ref()
        .filter(|t| matches!(t.state.as_str(), "failed" | "needs_human"))
    {
        check_cause(
            &mut j,
            cause_value(&t.cause).as_ref(),
            "the failed task",
            "task".to_owned(),
        );
    }
    for run in e.runs().iter().filter(|r| r.status == "failed") {
        let id = &run.run_id;
        check_cause(
            &mut j,
            cause_value(&run.cause).as_ref(),
            &format!("failed run {id}"),
            format!("task.runs.{id}"),
        );
    }
    for ev in &e.events {
        let seq = ev["seq"].as_i64().unwrap_or(0);
        let kind = Kind::of(ev);
        if kind == Kind::TurnFailed && ev.pointer("/data/cause").is_some() {
            check_cause(
                &mut j,
                ev.pointer("/data/cause"),
                "a turn.failed event",
                format!("events#{seq}"),
            );
        }
        if kind == Kind::RunSettled && ev.pointer("/data/state") != Some(&Value::from("completed"))
        {
            check_cause(
                &mut j,
                ev.pointer("/data/cause"),
                "a failed run.settled event",
                format!("events#{seq}"),
            );
        }
    }
    for x in &e.exchanges {
        if x.status == 409 {
            let reason = x
                .body
                .get("reason")
                .or_else(|| x.body.get("block_reason"))
                .and_then(Value::as_str);
            let listed = match x.kind.as_str() {
                "retry" => reason.is_some_and(|r| contract::RETRY_BLOCKS.contains(&r)),
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
    }
    j.done()
}
