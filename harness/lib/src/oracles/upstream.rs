//! The `upstream` oracle: a run that met an injected provider error or
//! model API failure ends with the cause the contract names for it, and is
//! retried by the runner only as the contract lets it
//! (`docs/recovery-contract.md`, "Upstream failures").
//!
//! The harness knows what it injected and where: the fake's own journal
//! records each injected answer (`fault.answer`, at the moment it answered)
//! and every request the model API received and what it answered, with its
//! time. So the judgement is exact, not "some structured cause": a 429
//! closed `provider_protocol_error` fails here although `cause.structured`
//! passes it. What this oracle does not judge: a replayed effect after an
//! automatic retry (no-replay.effect), a Retry that does not work
//! (retry.works), a task left running (liveness).

use serde_json::Value;
use wire::journal::{Entry, EntryKind};
use wire::upstream::{self as up, UpstreamFault};

use super::{Judgement, Oracle};
use crate::contract;
use crate::evidence::{Evidence, Source};
use crate::model::{Fault, FaultClass};
use crate::runner_client::RunView;

/// The model API's one route.
const RESPONSES: &str = "/v1/responses";

/// Judges every error answer the provider's journal shows was injected.
pub fn upstream(e: &Evidence) -> crate::model::OracleResult {
    let mut j = Judgement::new(Oracle::Upstream).needs(e, &[Source::Journal]);
    for inj in injected(e) {
        judge_cause(&mut j, e, &inj);
        if inj.fault.upstream().is_some() {
            judge_retries(&mut j, e, &inj);
        }
    }
    j.done()
}

/// What the contract's cause for a run that met `fault` at `point` is.
pub fn expected_cause(fault: Fault, point: &str) -> Option<&'static str> {
    if let Some(u) = fault.upstream() {
        return Some(match u {
            UpstreamFault::RateLimit => "upstream_rate_limited",
            UpstreamFault::ServerError => "upstream_server_error",
            UpstreamFault::Unavailable | UpstreamFault::Overload => "upstream_overloaded",
            UpstreamFault::AuthExpired => "upstream_unauthorized",
            UpstreamFault::ContextOverflow => "context_window_exceeded",
            UpstreamFault::StreamCut
            | UpstreamFault::StreamTruncated
            | UpstreamFault::MalformedEvent => "upstream_stream_broken",
        });
    }
    if fault != Fault::ErrorAnswer {
        return None;
    }
    Some(if point.ends_with(".initialize.received") {
        "provider_start_failed"
    } else if up::LOOKUP_POINTS.contains(&point) {
        "provider_lookup_failed"
    } else {
        "provider_protocol_error"
    })
}

/// Whether a run's failure with `code` is the contract's answer to an
/// error the harness injected (for the contract oracle, which otherwise
/// takes only a fail-closed cause after a fault).
pub fn justifies(e: &Evidence, code: &str) -> bool {
    injected(e)
        .iter()
        .any(|i| expected_cause(i.fault, &i.point) == Some(code))
}

/// One injected error answer, as the fake journaled it (`line` and
/// `generation` set), or, where the answering process's journal is not in
/// the evidence (a real product's harness-started model API), as the
/// harness's own action recorded it.
struct Injected {
    fault: Fault,
    point: String,
    /// Its journal line (1-based), when journaled, and its time.
    line: Option<usize>,
    ts_ms: u64,
    generation: Option<String>,
}

fn injected(e: &Evidence) -> Vec<Injected> {
    let journaled: Vec<Injected> = e
        .journal
        .iter()
        .enumerate()
        .filter(|(_, en)| en.fact.as_deref() == Some("fault.answer"))
        .filter_map(|(i, en)| {
            let fault = Fault::parse(en.data["answer"].as_str()?)?;
            (fault.class() == FaultClass::Answer).then(|| Injected {
                fault,
                point: en.data["point"].as_str().unwrap_or_default().to_owned(),
                line: Some(i + 1),
                ts_ms: en.ts_ms,
                generation: Some(en.generation.clone()),
            })
        })
        .collect();
    if !journaled.is_empty() {
        return journaled;
    }
    e.actions
        .iter()
        .filter_map(|a| {
            let fault = Fault::parse(a.what.strip_prefix("fault.")?)?;
            (fault.class() == FaultClass::Answer).then(|| Injected {
                fault,
                point: a.detail["point"].as_str().unwrap_or_default().to_owned(),
                line: None,
                ts_ms: e.started_ms + a.at_ms,
                generation: None,
            })
        })
        .collect()
}

/// The run that met the fault: the latest created no later than it.
fn run_at(e: &Evidence, ts_ms: u64) -> Option<RunView> {
    e.runs()
        .into_iter()
        .filter(|r| u64::try_from(r.created_ms).is_ok_and(|c| c <= ts_ms))
        .max_by_key(|r| r.created_ms)
}

/// Whether an event of the schedule other than the answer was applied at
/// or after the answer: then the run may end by that event's rules.
fn later_event(e: &Evidence, inj: &Injected) -> bool {
    e.actions.iter().any(|a| {
        let at = e.started_ms + a.at_ms;
        (a.what == "cut.reached" || a.what == "event.reached")
            && at + 50 >= inj.ts_ms
            && a.detail["fault"].as_str().and_then(Fault::parse) != Some(inj.fault)
    })
}

/// The faulted run ends with the contract's cause for the fault: exactly,
/// with the right `recoverable`; a transient upstream failure may instead
/// have been retried to completion.
fn judge_cause(j: &mut Judgement, e: &Evidence, inj: &Injected) {
    let Some(want) = expected_cause(inj.fault, &inj.point) else {
        return;
    };
    let at = inj
        .line
        .map_or_else(|| "actions".to_owned(), |l| format!("journal:{l}"));
    let Some(run) = run_at(e, inj.ts_ms) else {
        j.unknown = Some(format!(
            "no run of the task was created before {} was injected at {}",
            inj.fault, inj.point
        ));
        return;
    };
    let transient = inj.fault.upstream().is_some_and(UpstreamFault::transient);
    let got = run.cause.as_ref();
    match (run.status.as_str(), got) {
        ("completed", _) if transient => {}
        ("failed", Some(c)) if c.code == want => {
            if c.recoverable != contract::recoverable(want).unwrap_or(!c.recoverable) {
                j.fail(
                    format!(
                        "run {} met {} at {} and failed {want} with recoverable {}; the contract says {}",
                        run.run_id,
                        inj.fault,
                        inj.point,
                        c.recoverable,
                        !c.recoverable
                    ),
                    [at, format!("task.runs.{}", run.run_id)],
                );
            }
        }
        _ if later_event(e, inj) => {}
        (status, got) => j.fail(
            format!(
                "run {} met {} at {} and ended {status} {}; the contract's cause is {want}{}",
                run.run_id,
                inj.fault,
                inj.point,
                got.map_or("without a cause".to_owned(), |c| format!(
                    "with {} (recoverable {})",
                    c.code, c.recoverable
                )),
                if transient {
                    " (or the run completes after the runner's retries)"
                } else {
                    ""
                }
            ),
            [at, format!("task.runs.{}", run.run_id)],
        ),
    }
}

/// The model requests the runner made by itself after an injected model
/// API failure: those of the same API process after it, before the
/// controller's first Retry (a harness-started model API of a real product
/// serves the Retry too, so the Retry's invocation is the bound). None after an expired credential or a full
/// context window; after a 429, the first not sooner than its
/// `Retry-After`.
fn judge_retries(j: &mut Judgement, e: &Evidence, inj: &Injected) {
    let Some(u) = inj.fault.upstream() else {
        return;
    };
    let (Some(line), Some(generation)) = (inj.line, inj.generation.as_deref()) else {
        if !u.transient() || u.retry_after_s().is_some() {
            j.unknown = Some(format!(
                "{} was injected where the evidence holds no journal of the model API: whether the runner retried it is not judged",
                inj.fault
            ));
        }
        return;
    };
    let retry_at = e
        .ops
        .iter()
        .filter(|o| o.kind == "retry")
        .map(|o| e.started_ms + o.at_ms)
        .min()
        .unwrap_or(u64::MAX);
    let after: Vec<(usize, &Entry)> = e
        .journal
        .iter()
        .enumerate()
        .skip(line)
        .filter(|(_, en)| en.generation == generation && en.ts_ms < retry_at)
        .filter(|(_, en)| is_request(en))
        .collect();
    if !u.transient() {
        if let Some((line, _)) = after.first() {
            j.fail(
                format!(
                    "the runner asked the model API again by itself after {} ({} request(s) after journal:{}); the contract never retries it",
                    inj.fault,
                    after.len(),
                    line
                ),
                [format!("journal:{}", line + 1)],
            );
        }
        return;
    }
    let Some(wait_ms) = u.retry_after_s().map(|s| s * 1000) else {
        return;
    };
    // The 429's answer, then the next request: the wait between them.
    let answered = e
        .journal
        .iter()
        .skip(line)
        .find(|en| en.kind == EntryKind::Out && en.data["status"] == u.status().unwrap_or(0));
    if let (Some(out), Some((line, next))) = (answered, after.first()) {
        // One millisecond of slack: both times are truncated to the ms.
        if next.ts_ms + 1 < out.ts_ms + wait_ms {
            j.fail(
                format!(
                    "the runner asked the model API again {} ms after a 429 with Retry-After {} s",
                    next.ts_ms.saturating_sub(out.ts_ms),
                    wait_ms / 1000
                ),
                [format!("journal:{}", line + 1)],
            );
        }
    }
}

fn is_request(en: &Entry) -> bool {
    en.kind == EntryKind::In && en.data.get("path").and_then(Value::as_str) == Some(RESPONSES)
}

#[cfg(test)]
mod tests;
