//! Timing never decides a verdict silently: a cell whose failure only an
//! idle timeout or the cell's deadline produced, on a process the harness
//! did not hang, runs again with longer timeouts; every rerun is counted
//! and shown.
//!
//! The harness knows which process it hung and when (its `fault.hang-*`
//! actions). A `provider_unresponsive` in the run log for any other
//! process, or a task still running at the cell's deadline (whatever
//! failed: every oracle then judged a run cut short), is a timing outcome
//! on a loaded machine: the cell
//! runs again with the idle timeout ×4 (a hang cell's up to the non-hang
//! timeout, then both; a real product's from its floors) and the deadline
//! ×2, at most twice. Only a cell that fails without such a shape at the
//! longer timeouts fails; one that keeps the shape at the last rerun is
//! `unknown` with the reason, never a pass. A runner whose log had shown no
//! progress (only providers started and stopped, or nothing) for half the
//! deadline (5 s at least) is stuck, at any attempt: a
//! stuck runner stays stuck at any timeout, and a loaded machine slows a
//! log, it does not stop it, so such a cell keeps its failures, rerun no
//! more;
//! and a runner that says it gave up on a provider sooner than the idle
//! timeout it was given (`provider_unresponsive`'s `idle_ms`) is not slowed
//! by load: its failure is never a timing outcome.

use std::collections::HashSet;

use crate::cell::{CellEnv, run_cell};
use crate::evidence::{ActionKind, Evidence};
use crate::judge::{Judged, judged};
use crate::model::{CellResult, CellSpec, Fault, Rerun, Verdict};
use crate::run_log::{Kind, ProviderUnresponsive, RunLogEvent};
use crate::scenario::Scenario;

/// How much longer a rerun waits: the idle timeout ×4, the deadline ×2.
const IDLE_FACTOR: u64 = 4;
const WAIT_FACTOR: u64 = 2;
/// At most this many timing reruns of one cell.
const RERUNS_MAX: usize = 2;

/// Why a failed cell's result may be the machine's and not the runner's,
/// if it may: a provider the runner found silent although the harness hung
/// none of its processes ([`silent_provider`]), or a deadline that passed:
/// a task still running then leaves every oracle judging a run cut short
/// (the run log read then, the provider's store after the teardown), so
/// whatever failed, the longer deadline decides.
pub fn timing_shape(ev: &Evidence) -> Option<String> {
    silent_provider(ev).or_else(|| {
        ev.deadline_passed
            .then(|| "the task was still running at the cell's deadline".to_owned())
    })
}

/// The first provider the runner found silent although the harness hung
/// none of its processes (planning traces such a run again), in any task's
/// run log.
pub fn silent_provider(ev: &Evidence) -> Option<String> {
    ev.task_views()
        .iter()
        .find_map(|(_, view)| silent_provider_of_task(view))
}

/// [`silent_provider`] in one task's view.
fn silent_provider_of_task(ev: &Evidence) -> Option<String> {
    if gave_up_early(ev) {
        return None;
    }
    let hung: HashSet<u64> = ev
        .actions
        .iter()
        .filter(|a| a.what == ActionKind::Fault(Fault::HangProvider))
        .flat_map(|a| [a.provider_pid(), a.provider_pgid()])
        .flatten()
        .collect();
    let (_, e) = ev
        .payloads::<ProviderUnresponsive>()
        .find(|(_, e)| e.pid.is_none_or(|pid| !hung.contains(&pid)))?;
    Some(format!(
        "the runner found provider pid {} silent ({}), and no fault was applied to it",
        e.pid.map_or_else(|| "null".to_owned(), |p| p.to_string()),
        e.detail.as_deref().unwrap_or("idle timeout")
    ))
}

/// Whether a run-log event is progress toward settling the task: anything
/// but a provider's start and stop. A runner that only starts and stops
/// providers spins (a seeded bug's runner did so 130 times in 8 s), and a
/// loaded machine cannot make a correct runner do that for long: it gives
/// up on a provider lost five times in a run, and settles.
fn is_progress(e: &RunLogEvent) -> bool {
    let lifecycle = matches!(
        e.kind(),
        Kind::ProviderSpawnIntent
            | Kind::ProviderSpawned
            | Kind::ProviderStopped
            | Kind::ProviderSpawnSwept
            | Kind::ProviderUnresponsive
            | Kind::ProviderExited
    );
    !lifecycle
}

/// How long the runner's log had shown no progress ([`is_progress`]) when
/// the cell's deadline passed (milliseconds), if it passed and said when.
fn quiet_at_deadline(ev: &Evidence) -> Option<u64> {
    let at = ev
        .actions
        .iter()
        .find(|a| a.what == ActionKind::DeadlinePassed)?
        .at_ms;
    let last = ev
        .events
        .iter()
        .filter(|e| is_progress(e))
        .filter_map(|e| u64::try_from(e.ts_ms).ok())
        .max()
        .map_or(0, |t| t.saturating_sub(ev.started_ms));
    Some(at.saturating_sub(last))
}

/// The least quiet that can call a runner stuck, whatever the deadline.
const STUCK_QUIET_MIN_MS: u64 = 5_000;

/// A runner that made no progress for half of the cell's deadline, and for
/// at least [`STUCK_QUIET_MIN_MS`], is stuck, not slow: a loaded machine
/// slows a runner's log, it does not stop it. Such a cell keeps its
/// failures, with no (further) rerun.
fn stuck(ev: &Evidence, wait_ms: u64) -> Option<String> {
    let quiet = quiet_at_deadline(ev)?;
    (quiet >= (wait_ms / 2).max(STUCK_QUIET_MIN_MS)).then(|| {
        format!(
            "the runner's log showed no progress for the last {quiet} ms of a {wait_ms} ms deadline: stuck, not slow"
        )
    })
}

/// `env` with longer timeouts for a rerun: a hang cell's idle timeout grows
/// up to the non-hang one, then both grow (a real product's floors start
/// them equal).
pub fn longer(env: &CellEnv, hangs: bool) -> CellEnv {
    let mut e = env.clone();
    if hangs && env.hang_idle_timeout_ms < env.idle_timeout_ms {
        e.hang_idle_timeout_ms = (env.hang_idle_timeout_ms * IDLE_FACTOR).min(env.idle_timeout_ms);
    } else {
        e.idle_timeout_ms = env.idle_timeout_ms * IDLE_FACTOR;
        if hangs {
            e.hang_idle_timeout_ms = e.idle_timeout_ms;
        }
    }
    e.wait_ms = env.wait_ms * WAIT_FACTOR;
    e
}

/// Whether the runner says it gave up on a provider after less than the
/// idle timeout it was given (`provider_unresponsive`'s `idle_ms`): load
/// makes a provider slower, never a timer shorter, so such a failure is the
/// runner's and no rerun may hide it.
fn gave_up_early(ev: &Evidence) -> bool {
    let Some(given) = ev.runner_idle_timeout_ms else {
        return false;
    };
    ev.payloads::<ProviderUnresponsive>()
        .any(|(_, e)| e.idle_ms.is_some_and(|waited| waited < given))
}

/// Decides on a judged cell: a failure of timing's shape runs again with
/// longer timeouts (at most [`RERUNS_MAX`] times), and every rerun is
/// recorded in the result.
pub fn run_with_reruns(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
    mut run: Judged,
) -> Judged {
    let hangs = spec.schedule().is_some_and(|s| {
        s.iter()
            .any(|e| e.fault == crate::model::Fault::HangProvider)
    });
    // A real product's cell runs at its floors: reruns grow from there.
    let mut env = crate::cell::real_timeouts(env, profile).unwrap_or_else(|| env.clone());
    let mut reruns: Vec<Rerun> = Vec::new();
    while run.result.verdict != Verdict::Pass {
        let Some(why) = timing_shape(&run.run.evidence) else {
            break;
        };
        if stuck(&run.run.evidence, env.wait_ms).is_some() {
            break;
        }
        if reruns.len() >= RERUNS_MAX {
            undecided(&mut run.result, &why);
            break;
        }
        env = longer(&env, hangs);
        reruns.push(Rerun {
            why,
            idle_timeout_ms: env.idle_timeout_ms,
            hang_idle_timeout_ms: env.hang_idle_timeout_ms,
            cell_wait_ms: env.wait_ms,
        });
        run = judged(run_cell(&env, scenario, profile, spec));
    }
    run.result.reruns = reruns;
    run
}

/// A cell whose failure keeps timing's shape at the longest timeouts: its
/// failures become `unknown` with the reason.
fn undecided(result: &mut CellResult, why: &str) {
    for o in result
        .oracles
        .iter_mut()
        .filter(|o| o.verdict == Verdict::Fail)
    {
        o.verdict = Verdict::Unknown;
        o.message = format!("timing: {why}, at the longest timeouts too; {}", o.message);
    }
    result.verdict = crate::oracles::worst(&result.oracles).max(Verdict::Unknown);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Action;
    use serde_json::{Value, json};

    fn read(events: Vec<Value>) -> Vec<RunLogEvent> {
        RunLogEvent::read_all(events)
    }

    fn unresponsive(pid: u64) -> Value {
        json!({ "v": 1, "task_id": "t", "seq": 1, "run_id": null, "ts_ms": 1,
                "kind": "provider_unresponsive", "data": { "pid": pid, "detail": "the provider was silent for 52 ms" } })
    }

    #[test]
    fn a_silent_provider_the_harness_did_not_hang_is_timing() {
        let mut ev = Evidence {
            events: read(vec![unresponsive(7)]),
            ..Evidence::default()
        };
        assert!(timing_shape(&ev).unwrap().contains("pid 7"));
        ev.actions.push(Action {
            at_ms: 1,
            what: ActionKind::Fault(Fault::HangProvider),
            detail: json!({ "provider_pid": 7 }),
        });
        assert_eq!(timing_shape(&ev), None, "the harness hung it");
    }

    /// A second task's silent provider is timing too: its run log is its
    /// lane's, not the evidence's own.
    #[test]
    fn a_silent_provider_of_another_task_is_timing() {
        let mut ev = Evidence::default();
        assert_eq!(timing_shape(&ev), None);
        ev.other_tasks.push(crate::evidence::TaskLane {
            id: "task-2".into(),
            events: read(vec![unresponsive(9)]),
            ..Default::default()
        });
        assert!(timing_shape(&ev).unwrap().contains("pid 9"));
    }

    #[test]
    fn a_silent_leader_of_a_group_the_harness_hung_is_not_timing() {
        // acpx's shape: the fault held the agent (pid 8), in its queue
        // owner's group (pgid 7); the runner names the owner silent.
        let mut ev = Evidence {
            events: read(vec![unresponsive(7)]),
            ..Evidence::default()
        };
        assert!(timing_shape(&ev).is_some(), "nothing hung yet");
        ev.actions.push(Action {
            at_ms: 1,
            what: ActionKind::Fault(Fault::HangProvider),
            detail: json!({ "provider_pid": 8, "provider_pgid": 7 }),
        });
        assert_eq!(timing_shape(&ev), None, "the harness hung its group");
    }

    #[test]
    fn a_runner_that_gave_up_before_its_idle_timeout_is_not_timing() {
        let mut silent = unresponsive(7);
        silent["data"]["idle_ms"] = json!(500);
        let mut ev = Evidence {
            events: read(vec![silent.clone()]),
            runner_idle_timeout_ms: Some(500),
            ..Evidence::default()
        };
        assert!(timing_shape(&ev).is_some(), "waited 500 of 500");
        silent["data"]["idle_ms"] = json!(0);
        ev.events = read(vec![silent]);
        assert_eq!(
            timing_shape(&ev),
            None,
            "gave up after 0 ms of 500: load cannot shorten a timer"
        );
    }

    #[test]
    fn a_deadline_is_timing_and_a_settled_task_is_not() {
        let ev = Evidence {
            deadline_passed: true,
            ..Evidence::default()
        };
        assert!(timing_shape(&ev).is_some());
        // Planning asks only for a silent provider: it times its own runs.
        assert_eq!(silent_provider(&ev), None);
        assert_eq!(timing_shape(&Evidence::default()), None);
    }

    #[test]
    fn a_runner_quiet_for_half_the_deadline_is_stuck_and_a_busy_one_is_not() {
        let at = |ms| crate::evidence::Action {
            at_ms: ms,
            what: ActionKind::DeadlinePassed,
            detail: Value::Null,
        };
        let event = |ts| serde_json::json!({ "kind": "turn.intent", "ts_ms": ts });
        let mut ev = Evidence {
            deadline_passed: true,
            started_ms: 1_000,
            events: read(vec![event(1_100), event(1_500)]),
            actions: vec![at(8_000)],
            ..Evidence::default()
        };
        // Quiet from 500 ms to the deadline at 8 s: stuck.
        assert!(stuck(&ev, 8_000).is_some());
        // Quiet for 7.5 s of a 20 s deadline: not yet told apart.
        assert_eq!(stuck(&ev, 20_000), None);
        // Quiet for all of a short deadline, but less than 5 s: not told apart.
        let short = Evidence {
            actions: vec![at(2_000)],
            ..ev.clone()
        };
        assert_eq!(stuck(&short, 2_000), None);
        // Only providers started and stopped since: spinning, stuck.
        let mut spinning = ev.clone();
        for ts in (2_000..8_000).step_by(100) {
            let kind = [
                "provider.spawn_intent",
                "provider.spawned",
                "provider.stopped",
            ][ts as usize % 3];
            spinning
                .events
                .extend(read(vec![serde_json::json!({ "kind": kind, "ts_ms": ts })]));
        }
        assert!(stuck(&spinning, 8_000).is_some());
        // Its last event 1 s before the deadline: slow, not stuck.
        ev.events.extend(read(vec![event(8_000)]));
        assert_eq!(stuck(&ev, 8_000), None);
        // No word of when the deadline passed: never called stuck.
        ev.actions.clear();
        assert_eq!(stuck(&ev, 8_000), None);
    }

    #[test]
    fn longer_timeouts_grow_until_the_cap() {
        let env = CellEnv::new(std::path::Path::new("turncut"), std::path::Path::new(""));
        let e = longer(&env, true);
        assert_eq!((e.hang_idle_timeout_ms, e.wait_ms), (200, 30_000));
        let e = longer(&e, true);
        assert_eq!(
            e.hang_idle_timeout_ms, 500,
            "capped at the non-hang idle timeout"
        );
        let at_cap = longer(&e, true);
        assert_eq!(
            (at_cap.hang_idle_timeout_ms, at_cap.idle_timeout_ms),
            (2_000, 2_000),
            "at the cap both grow (a real product's floors start there)"
        );
        assert_eq!(longer(&env, false).idle_timeout_ms, 2_000);
    }
}
