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

use wire::upstream::{self as up, UpstreamFault};

use super::{Judgement, Oracle};
use crate::contract;
use crate::evidence::{Evidence, InjectedAnswer, Source};
use crate::model::Fault;
use crate::runner_client::RunView;

/// Judges every error answer the provider's journal shows was injected.
pub fn upstream(e: &Evidence) -> crate::model::OracleResult {
    let mut j = Judgement::new(Oracle::Upstream).needs(e, &[Source::Journal]);
    for inj in e.injected_answers() {
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
    e.injected_answers()
        .iter()
        .any(|i| expected_cause(i.fault, &i.point) == Some(code))
}

/// The run that met the fault: the latest created no later than it.
fn run_at(e: &Evidence, ts_ms: u64) -> Option<&RunView> {
    e.runs()
        .iter()
        .filter(|r| u64::try_from(r.created_ms).is_ok_and(|c| c <= ts_ms))
        .max_by_key(|r| r.created_ms)
}

/// The faulted run ends with the contract's cause for the fault: exactly,
/// with the right `recoverable`; a transient upstream failure may instead
/// have been retried to completion.
fn judge_cause(j: &mut Judgement, e: &Evidence, inj: &InjectedAnswer) {
    let Some(want) = expected_cause(inj.fault, &inj.point) else {
        return;
    };
    let at = inj.line.map_or_else(
        || "actions".to_owned(),
        |l| format!("{}:{l}", inj.journal.label()),
    );
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
        // Another event from when the fault was reached on may decide the
        // run: a provider held at the fault's cut answers it only once
        // released, after a kill at the second event (under --stress 8,
        // 53 ms after it; the provider, stopped by the restarted runner
        // before it recorded the failure, left the turn interrupted).
        _ if e.other_event_since(
            inj.fault,
            e.reached_ms(inj.fault).unwrap_or(inj.ts_ms).min(inj.ts_ms),
        ) => {}
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
/// controller's first Retry. None after an expired credential or a full
/// context window; after a 429, the first not sooner than its
/// `Retry-After`. Where a provider stands between the runner and the model
/// (a fake provider's model point; a real product, whose model API
/// journals apart), the model requests are the provider's own (the real
/// products retry by themselves, measured) and the runner's retries are the
/// turns it starts ([`judge_turn_retries`]).
fn judge_retries(j: &mut Judgement, e: &Evidence, inj: &InjectedAnswer) {
    let Some(u) = inj.fault.upstream() else {
        return;
    };
    if up::PROVIDER_MODEL_POINTS.contains(&inj.point.as_str())
        || inj.journal == crate::evidence::JournalOf::ModelApi
    {
        return judge_turn_retries(j, e, inj, u);
    }
    let (Some(line), Some(generation)) = (inj.line, inj.generation.as_deref()) else {
        if !u.transient() || u.retry_after_s().is_some() {
            j.unknown = Some(format!(
                "{} was injected where the evidence holds no journal of the model API: whether the runner retried it is not judged",
                inj.fault
            ));
        }
        return;
    };
    let until = e.first_retry_ms().unwrap_or(u64::MAX);
    let after = e.model_exchanges_after(inj.journal, line, generation, until);
    let label = inj.journal.label();
    let requests: Vec<_> = after.iter().filter(|x| x.status.is_none()).collect();
    if !u.transient() {
        if let Some(first) = requests.first() {
            j.fail(
                format!(
                    "the runner asked the model API again by itself after {} ({} request(s) after {label}:{line}); the contract never retries it",
                    inj.fault,
                    requests.len(),
                ),
                [format!("{label}:{}", first.line)],
            );
        }
        return;
    }
    let (Some(wait_ms), Some(status)) = (u.retry_after_s().map(|s| s * 1000), u.status()) else {
        return;
    };
    // The 429's answer, then the next request: the wait between them.
    let answered = after.iter().find(|x| x.status == Some(status));
    let next = answered.and_then(|a| requests.iter().find(|r| r.line > a.line));
    if let (Some(out), Some(next)) = (answered, next) {
        // One millisecond of slack: both times are truncated to the ms.
        if next.ts_ms + 1 < out.ts_ms + wait_ms {
            j.fail(
                format!(
                    "the runner asked the model API again {} ms after a {status} with Retry-After {} s",
                    next.ts_ms.saturating_sub(out.ts_ms),
                    wait_ms / 1000
                ),
                [format!("{label}:{}", next.line)],
            );
        }
    }
}

/// A fake provider's model failed (a provider's model point). A provider
/// that retried it itself and went on leaves nothing for the runner to
/// retry. One that failed the turn retries nothing, so a turn the runner
/// starts after it knew of the failure is its retry: none may start after
/// an expired credential or a full context window before the controller's
/// first Retry; after a 429, none sooner than its `Retry-After`.
fn judge_turn_retries(j: &mut Judgement, e: &Evidence, inj: &InjectedAnswer, u: UpstreamFault) {
    let Some(known) = failure_known_ms(e, inj) else {
        return;
    };
    let until = e.first_retry_ms().unwrap_or(u64::MAX);
    let starts: Vec<_> = crate::evidence::turn_starts_in(&e.journal)
        .into_iter()
        .filter(|t| t.entry.ts_ms > known && t.entry.ts_ms < until)
        .collect();
    let Some(first) = starts.first() else {
        return;
    };
    let soon = u
        .retry_after_s()
        .is_some_and(|s| first.entry.ts_ms + 1 < inj.ts_ms + s * 1000);
    if !u.transient() || soon {
        j.fail(
            format!(
                "the runner started a turn again by itself {} ms after the provider's model failed with {} ({} turn start(s) before any Retry); {}",
                first.entry.ts_ms.saturating_sub(inj.ts_ms),
                inj.fault,
                starts.len(),
                if soon {
                    "sooner than its Retry-After"
                } else {
                    "the contract never retries it"
                }
            ),
            [format!("journal:{}", first.line)],
        );
    }
}

/// Since when the runner could know that the provider failed the turn that
/// met `inj`: when the fake recorded it failed, where a lookup tells why a
/// turn failed (Codex keeps `codexErrorInfo`, OpenCode the answer's
/// error); on ACP, whose lookup replays no such thing, and with a real
/// product, only once the runner recorded the failure itself (`turn.failed` with the contract's
/// cause), for after a restart that came before, a continuation of a turn
/// it cannot tell from a lost one is the contract's recovery. `None` when
/// the provider did not fail the turn.
fn failure_known_ms(e: &Evidence, inj: &InjectedAnswer) -> Option<u64> {
    // A real product's journal is its wire's, with no fact of its own: only
    // the runner's record tells that it failed the turn.
    if inj.journal == crate::evidence::JournalOf::Provider {
        let failed = e.journal.iter().find(|en| {
            en.ts_ms >= inj.ts_ms
                && en.fact.as_deref() == Some("turn.finished")
                && en.data["status"] == "failed"
        })?;
        let lookup_tells = e
            .profile()
            .and_then(wire::profiles::facts)
            .is_some_and(|f| f.protocol != wire::profiles::Protocol::Acp);
        if lookup_tells {
            return Some(failed.ts_ms);
        }
    }
    let want = expected_cause(inj.fault, &inj.point)?;
    e.events
        .iter()
        .filter(|ev| u64::try_from(ev.ts_ms).is_ok_and(|t| t >= inj.ts_ms))
        .find(|ev| {
            ev.payload::<crate::run_log::TurnFailed>()
                .and_then(|t| t.cause.clone().flatten())
                .is_some_and(|c| c.code.as_deref() == Some(want))
        })
        .and_then(|ev| u64::try_from(ev.ts_ms).ok())
}

#[cfg(test)]
mod tests;
