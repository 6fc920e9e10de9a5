//! Discovery: the traced runs that find a scenario's boundaries. A clean
//! traced run (`discover`) gives the boundaries planning cuts at; a traced
//! run with one event (`discover_after`, `walk_recovery`) gives the
//! boundaries of the recovery after it, numbered from that event. Each is
//! a real cell (`cell::run_cell_traced`) with a cut-point trace; what is
//! made of the boundaries is `plan`'s, which starts no process.

use crate::cell::{CellEnv, run_cell_traced};
use crate::model::{CellSpec, Verdict};
use crate::plan::{Boundary, boundaries_of, recovery_boundaries, schedule_cell};
use crate::scenario::Scenario;

/// The result of discovery.
pub struct Discovery {
    /// Boundaries in the order of the clean run.
    pub boundaries: Vec<Boundary>,
    /// The clean run's final state, verdict and duration.
    pub clean_state: String,
    /// The clean run's verdict.
    pub clean_verdict: Verdict,
    /// The clean run's judged result when it did not pass (its scenario's
    /// `[expect]`, say): planning reports it as a cell of its own, so a
    /// clean run's verdict never depends on whether a sampled wave kept
    /// the clean cell.
    pub clean_failure: Option<Box<crate::model::CellResult>>,
    /// Wall time of the clean run.
    pub clean_ms: u64,
    /// The clean run's run-log event kinds, in order, without the events
    /// whose place depends on when the harness acted (`message.queued`).
    pub clean_timeline: Vec<String>,
    /// Why the run may have taken a path of the machine's load, not the
    /// scenario's (`timing::silent_provider`: the runner found a provider
    /// silent that nothing hung): its boundaries include that recovery's.
    pub timing: Option<String>,
}

/// A clean traced run that could not give boundaries: why, and the run's
/// judged result when it ran (a runner that strands its task fails its
/// oracles here as in any cell).
#[derive(Debug)]
pub struct DiscoveryFailed {
    /// What went wrong.
    pub message: String,
    /// The run's result, when it ran.
    pub result: Option<Box<crate::model::CellResult>>,
}

impl std::fmt::Display for DiscoveryFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DiscoveryFailed {}

/// Runs `scenario` once, clean, with tracing, and lists its boundaries.
pub fn discover(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
) -> Result<Discovery, DiscoveryFailed> {
    let failed = |message: String| DiscoveryFailed {
        message,
        result: None,
    };
    let TracedClean { judged, hits } =
        traced_clean(env, scenario, profile, "discovery").map_err(|e| failed(e.to_string()))?;
    let crate::judge::Judged { run, result } = judged;
    if let Some(e) = &result.error {
        return Err(DiscoveryFailed {
            message: format!(
                "the clean traced run of {} failed: {e}",
                run.spec.scenario_id
            ),
            result: Some(Box::new(result)),
        });
    }
    let hits = hits.map_err(|e| failed(e.to_string()))?;
    Ok(Discovery {
        timing: crate::timing::silent_provider(&run.evidence),
        boundaries: boundaries_of(hits),
        clean_state: crate::model::TaskState::name(result.outcome.state).to_owned(),
        clean_verdict: result.verdict,
        clean_failure: (result.verdict != Verdict::Pass).then(|| Box::new(result.clone())),
        clean_ms: result.duration_ms,
        clean_timeline: run
            .evidence
            .events
            .iter()
            .filter_map(crate::run_log::RunLogEvent::kind_name)
            .filter(|k| *k != "message.queued")
            .map(str::to_owned)
            .collect(),
    })
}

/// A clean cell run with a trace in every process, judged: what
/// [`discover`] plans from and `turncut doctor` checks.
pub struct TracedClean {
    /// The cell and its verdict.
    pub judged: crate::judge::Judged,
    /// Every hit of its trace, in order.
    pub hits: Result<Vec<cutpoint::Hit>, cutpoint::Error>,
}

/// Runs the clean cell `cell_id` of `scenario` on `profile`, traced, in a
/// temporary directory (the trace is read before it goes); an error only
/// when that directory cannot be made.
pub fn traced_clean(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    cell_id: &str,
) -> std::io::Result<TracedClean> {
    let dir = crate::tempdirs::tempdir("trace")?;
    let trace = dir.path().join("trace.jsonl");
    let spec = CellSpec {
        cell_id: cell_id.into(),
        scenario_id: scenario.id(profile).into(),
        seed: 0,
        events: Vec::new(),
    };
    let judged = crate::judge::judged(run_cell_traced(env, scenario, profile, &spec, Some(&trace)));
    Ok(TracedClean {
        judged,
        hits: cutpoint::trace_read(&trace),
    })
}

/// The boundaries of the recovery after `first`: `scenario` runs once with
/// that one event and a trace in every process (restarted runners and new
/// providers included); every hit after the event was applied is a
/// boundary, numbered by its occurrence after the event (the numbering a
/// later event of a schedule uses).
pub fn discover_after(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    first: &crate::model::Event,
) -> anyhow::Result<Vec<Boundary>> {
    discover_after_walking(env, scenario, profile, first, None)
}

/// How many traced runs [`discover_after_walking`] makes at most to see the
/// recovery path it is asked for.
const WALK_TRACES: usize = 3;

/// [`discover_after`], for the recovery of `path` when given: the event's
/// recovery can walk another path in another run (the provider recorded the
/// turn before the kill or not), so a traced run that walked another path is
/// made again, [`WALK_TRACES`] runs at most (then the last stands). Stage 2
/// traces each representative this way, so the boundaries it cuts are those
/// of the path the representative walked, whichever run traces it.
pub fn discover_after_walking(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    first: &crate::model::Event,
    path: Option<&str>,
) -> anyhow::Result<Vec<Boundary>> {
    Ok(walk_recovery(env, scenario, profile, first, path)?.1)
}

/// [`discover_after_walking`], with the recovery path the traced run
/// walked (`explore --workflows` keys what it cut again by it).
pub fn walk_recovery(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    first: &crate::model::Event,
    path: Option<&str>,
) -> anyhow::Result<(String, Vec<Boundary>)> {
    let spec = schedule_cell(
        0,
        "discovery".into(),
        scenario.id(profile),
        std::slice::from_ref(first),
    );
    let mut found = reached_after(env, scenario, profile, &spec)?;
    for _ in 1..WALK_TRACES {
        if path.is_none_or(|p| found.3 == p) {
            break;
        }
        found = reached_after(env, scenario, profile, &spec)?;
    }
    let (hits, mark, doomed, walked) = found;
    // The remains of what the event killed are not its recovery
    // (`cell::doomed`): the cell would not count them either.
    let out = recovery_boundaries(&hits, mark, |h| {
        h.point == crate::cell::EVENT_MARK || doomed.contains(&h.pid)
    });
    Ok((walked, out))
}

/// A traced run of `spec` that reached its event. A cut whose reach
/// depends on timing can be missed once, as a cell's can (`wave::run_one`
/// runs such a cell once more): so can this run.
fn reached_after(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
) -> anyhow::Result<TracedAfter> {
    match traced_after(env, scenario, profile, spec)? {
        Some(found) => Ok(found),
        None => traced_after(env, scenario, profile, spec)?.ok_or_else(|| {
            anyhow::anyhow!(
                "the traced run of {} never reached its cut (twice)",
                spec.name()
            )
        }),
    }
}

/// How many times a traced run after an event is run again with longer
/// timeouts when the load made the runner find a provider silent.
const TIMING_RETRACES: usize = 2;

/// A traced run after an event: its hits, the index of the event's mark,
/// the pids the event doomed and the recovery path it walked.
type TracedAfter = (Vec<cutpoint::Hit>, usize, Vec<u32>, String);

/// One traced run of the discovery cell `spec`, or `None` when the run
/// never reached the event.
fn traced_after(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
) -> anyhow::Result<Option<TracedAfter>> {
    let hangs = spec.schedule().is_some_and(|s| {
        s.iter()
            .any(|e| e.fault == crate::model::Fault::HangProvider)
    });
    let mut env = env.clone();
    let mut attempt = 0;
    let (dir, run) = loop {
        let dir = crate::tempdirs::tempdir("trace")?;
        let trace = dir.path().join("trace.jsonl");
        let run = run_cell_traced(&env, scenario, profile, spec, Some(&trace));
        // A provider the runner found silent that nothing hung is the load's
        // recovery, not the event's: traced again with longer timeouts.
        let timing = crate::timing::silent_provider(&run.evidence).is_some();
        if !timing || attempt == TIMING_RETRACES {
            break (dir, run);
        }
        attempt += 1;
        env = crate::timing::longer(&env, hangs);
    };
    let trace = dir.path().join("trace.jsonl");
    if let Some(e) = &run.evidence.harness_error {
        anyhow::bail!("the traced run of {} failed: {e}", spec.name());
    }
    let hits = cutpoint::trace_read(&trace)?;
    let mark = hits
        .iter()
        .position(|h| h.point == crate::cell::EVENT_MARK && h.n == 1);
    let doomed = crate::cell::doomed_in_trace(&trace, 1)?;
    let path = run.evidence.path();
    Ok(mark.map(|m| (hits, m, doomed, path)))
}
