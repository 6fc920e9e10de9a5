//! Planning: discover the cut points of a scenario from a clean traced run,
//! then expand cells (point × occurrence × fault), seed them, sample them for
//! a budget and split them into shards.
//!
//! Nothing is hand-listed: the boundaries are whatever the runner and its
//! provider hit in a clean run. A provider fault is planned only at points
//! where the trace shows a live provider (between `provider_identity` and
//! `provider_stop` of the runner), so no cell fires a fault at nothing.

use crate::cell::{CellEnv, run_cell_traced};
use crate::model::{CellSpec, Cut, Event, Fault, Role, Verdict};
use crate::nemesis;
use crate::scenario::{CutSelection, Scenario};

/// A boundary of a clean run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The cut.
    pub cut: Cut,
    /// The process that reached it.
    pub role: Role,
    /// Whether a provider process is alive when it is hit.
    pub provider_alive: bool,
    /// Its durable segment in the clean run: how many durable writes of
    /// its own role (the runner's `runner.*.persisted`, a provider's
    /// `*.recorded`) came before it, counted per role because the runner's
    /// and a provider's hits interleave by timing while each one's own
    /// order does not. Boundaries of one role and segment leave that
    /// process's durable state the same behind a kill (see
    /// [`trim_by_segment`]).
    pub segment: usize,
}

/// Whether a hit is a durable write: the runner's `runner.<write>.persisted`
/// or a provider's `<proto>.<what>.recorded`.
pub fn is_durable_write(point: &str) -> bool {
    point.ends_with(".persisted") || point.ends_with(".recorded")
}

/// How many one-cut cells a process fault keeps per durable segment of an
/// `every-boundary` scenario (see [`trim_by_segment`]).
///
/// - `kill-runner` and `kill-provider`: 3 — the segment's first boundary
///   (the write itself), its last (just before the next write) and one more
///   drawn by the seed.
/// - `hang-provider`: 2, the first and the last. A hang leaves the state of
///   a `kill-provider` at the same boundary once the idle timeout kills the
///   provider; what it adds is how the runner finds a silent provider, and
///   what the provider's other threads do meanwhile, which the ends of a
///   segment show.
/// - `kill-both`: 1, drawn by the seed. It leaves the durable state of a
///   `kill-runner` at the same boundary (a `kill-runner` freezes the
///   providers, and the restarted runner kills them), so the two walk the
///   same recovery; they differ only in whether the old provider is still
///   there when the runner restarts, which does not depend on where in the
///   segment the cut fell.
pub fn segment_keep(fault: Fault) -> usize {
    match fault {
        Fault::KillBoth => 1,
        Fault::HangProvider => 2,
        _ => 3,
    }
}

/// Trims the one-cut process-fault cells of an `every-boundary` scenario to
/// [`segment_keep`] per durable segment (of one role: `Boundary::segment`)
/// and fault: the boundaries of one segment leave the same durable state
/// behind a kill, and the runner recovers from its durable state, so they
/// walk the same recovery path; the wave's room goes to cutting those
/// recoveries (`recuts`). What is kept of a segment changes with the seed
/// where a draw is made. Storage faults, controller actions and the clean
/// cell are never trimmed.
pub fn trim_by_segment(
    cells: Vec<Vec<crate::model::Event>>,
    boundaries: &[Boundary],
    seed: u64,
) -> Vec<Vec<crate::model::Event>> {
    use std::collections::BTreeMap;
    let segment_of = |c: &Cut| {
        boundaries
            .iter()
            .find(|b| &b.cut == c)
            .map(|b| (b.role, b.segment))
    };
    // Per (role, segment, fault): the boundaries in the planned order.
    let mut members: BTreeMap<((Role, usize), Fault), Vec<usize>> = BTreeMap::new();
    let order = |c: &Cut| boundaries.iter().position(|b| &b.cut == c);
    for events in &cells {
        if let [e] = events.as_slice()
            && e.fault.is_process()
            && let (Some(seg), Some(at)) = (segment_of(&e.cut), order(&e.cut))
        {
            members.entry((seg, e.fault)).or_default().push(at);
        }
    }
    let mut keep: std::collections::HashSet<(usize, Fault)> = Default::default();
    for (((role, seg), fault), mut at) in members {
        // The draw's seed names the segment: its role and its count.
        let draw = mix(seed ^ ((seg * 4 + role as usize) as u64) ^ ((fault as u64) << 32)) as usize;
        at.sort_unstable();
        for i in kept_of_segment(at.len(), segment_keep(fault), draw) {
            keep.insert((at[i], fault));
        }
    }
    cells
        .into_iter()
        .filter(|events| match events.as_slice() {
            [e] if e.fault.is_process() => {
                order(&e.cut).is_none_or(|at| keep.contains(&(at, e.fault)))
            }
            _ => true,
        })
        .collect()
}

/// Which of a segment's `len` boundaries (in order) a fault keeping `keep`
/// of them keeps: 1, the one `draw` picks; 2, the first and the last; 3,
/// those and one between them that `draw` picks.
fn kept_of_segment(len: usize, keep: usize, draw: usize) -> Vec<usize> {
    if len <= keep {
        return (0..len).collect();
    }
    match keep {
        0 => Vec::new(),
        1 => vec![draw % len],
        2 => vec![0, len - 1],
        _ => vec![0, 1 + draw % (len - 2), len - 1],
    }
}

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
    let dir = crate::tempdirs::tempdir("trace").map_err(|e| failed(e.to_string()))?;
    let trace = dir.path().join("trace.jsonl");
    let spec = CellSpec {
        cell_id: "discovery".into(),
        scenario_id: scenario.id(profile).into(),
        seed: 0,
        events: Vec::new(),
    };
    let crate::judge::Judged { run, result } =
        crate::judge::judged(run_cell_traced(env, scenario, profile, &spec, Some(&trace)));
    if let Some(e) = &result.error {
        return Err(DiscoveryFailed {
            message: format!("the clean traced run of {} failed: {e}", spec.scenario_id),
            result: Some(Box::new(result)),
        });
    }
    let hits = cutpoint::trace_read(&trace).map_err(|e| failed(e.to_string()))?;
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

/// The boundaries of a clean run's trace, in its order: each distinct
/// `point#n`, with whether a provider is alive when it is hit.
pub fn boundaries_of(hits: Vec<cutpoint::Hit>) -> Vec<Boundary> {
    let mut boundaries: Vec<Boundary> = Vec::new();
    let alive = provider_alive_at(&hits);
    let mut writes: std::collections::HashMap<Role, usize> = Default::default();
    for (h, provider_alive) in hits.into_iter().zip(alive) {
        let segment = writes.entry(Role::of(&h.role)).or_default();
        if is_durable_write(&h.point) {
            *segment += 1;
        }
        let segment = *segment;
        let cut = Cut {
            point: h.point.clone(),
            n: h.n,
        };
        if boundaries.iter().any(|b| b.cut == cut) {
            continue;
        }
        boundaries.push(Boundary {
            segment,
            cut,
            role: Role::of(&h.role),
            provider_alive,
        });
    }
    boundaries
}

/// Whether a provider is alive at each hit of a trace: a provider hit is
/// by definition from a live provider; a runner hit has one only inside a
/// window the runner opened with a recorded identity and has not closed
/// with a recorded stop. A killed runner's providers are stopped by the
/// next one, so its window counts until that stop.
fn provider_alive_at(hits: &[cutpoint::Hit]) -> Vec<bool> {
    let mut alive = 0i64;
    hits.iter()
        .map(|h| {
            let role = Role::of(&h.role);
            if role == Role::Runner {
                match h.point.as_str() {
                    "runner.provider_identity.persisted" => alive += 1,
                    "runner.provider_stop.persisted" => alive = (alive - 1).max(0),
                    _ => {}
                }
            }
            role == Role::Provider || alive > 0
        })
        .collect()
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
    let mut counts: std::collections::HashMap<&str, u64> = Default::default();
    let mut out: Vec<Boundary> = Vec::new();
    let alive = provider_alive_at(&hits);
    for (h, alive) in hits.iter().zip(alive).skip(mark + 1) {
        // The remains of what the event killed are not its recovery
        // (`cell::doomed`): the cell would not count them either.
        if h.point == crate::cell::EVENT_MARK || doomed.contains(&h.pid) {
            continue;
        }
        let n = counts.entry(h.point.as_str()).or_default();
        *n += 1;
        out.push(Boundary {
            cut: Cut {
                point: h.point.clone(),
                n: *n,
            },
            role: Role::of(&h.role),
            provider_alive: alive,
            segment: 0,
        });
    }
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

/// The listed cut points of `scenario` that never happen in this clean run
/// (`boundaries`): points of other protocols, or runner points of another
/// driver. A point in no profile's list is a mistake; the snapshot tests
/// check the built-in scenarios for it.
pub fn unmatched_points(scenario: &Scenario, boundaries: &[Boundary]) -> Vec<String> {
    match &scenario.cut {
        CutSelection::Points(names) => names
            .iter()
            .filter(|n| !boundaries.iter().any(|b| &b.cut.point == *n))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// The components whose cut points a scenario may name.
pub const POINT_FAMILIES: &[&str] = &["runner", "codex", "acp", "opencode", "model"];

/// The cuts and faults of one scenario: the clean cell first, then every
/// selected boundary × fault.
pub fn expand(scenario: &Scenario, boundaries: &[Boundary]) -> anyhow::Result<Vec<Option<Event>>> {
    let mut out = vec![None];
    let selected: Vec<&Boundary> = match &scenario.cut {
        CutSelection::None => Vec::new(),
        CutSelection::EveryBoundary => boundaries.iter().collect(),
        CutSelection::Points(names) => {
            // A scenario names provider points of every protocol it runs on
            // (`codex.turn.recorded`, `acp.turn.recorded`, …); a point of a
            // provider family this profile does not run is not for it. A
            // point of its own family that never happens is a mistake.
            let families: std::collections::HashSet<&str> = boundaries
                .iter()
                .filter_map(|b| b.cut.point.split('.').next())
                .collect();
            for n in names {
                let family = n.split('.').next().unwrap_or_default();
                if !POINT_FAMILIES.contains(&family) {
                    anyhow::bail!(
                        "{}: point {n} belongs to no component; points start with one of {}",
                        scenario.path.display(),
                        POINT_FAMILIES.join(", ")
                    );
                }
            }
            // Runner points can belong to one driver (`runner.tool_*` exist
            // only where the runner executes tools): absent ones are skipped
            // here and listed by `unmatched_points`.
            let names: Vec<&String> = names
                .iter()
                .filter(|n| n.split('.').next().is_some_and(|f| families.contains(f)))
                .filter(|n| {
                    !n.starts_with("runner.") || boundaries.iter().any(|b| &b.cut.point == *n)
                })
                .collect();
            for n in &names {
                if !boundaries.iter().any(|b| &&b.cut.point == n) {
                    anyhow::bail!(
                        "{}: point {n} never happens in a clean run; `turncut boundaries` lists the points",
                        scenario.path.display()
                    );
                }
            }
            boundaries
                .iter()
                .filter(|b| names.contains(&&b.cut.point))
                .collect()
        }
    };
    for b in selected {
        for &fault in &scenario.faults {
            if planned_at(b, fault) {
                debug_assert!(fault.applies_at(&b.cut.point));
                out.push(Some(Event {
                    cut: b.cut.clone(),
                    fault,
                }));
            }
        }
    }
    Ok(out)
}

/// Whether a one-cut cell of `fault` is planned at boundary `b`: a provider
/// fault needs a live provider; before-write and before-read points are
/// where storage faults apply (each kind at its own), and the other faults
/// cut at the boundaries after each write (explore and depth-2 cells reach
/// the before-write points with any fault); a power cut where
/// `Fault::power_cut_planned_at` says.
fn planned_at(b: &Boundary, fault: Fault) -> bool {
    let store_point = crate::model::is_store_point(&b.cut.point);
    if fault.class() == crate::model::FaultClass::Answer {
        // Where the process answers a request (`Fault::applies_at`).
        return fault.applies_at(&b.cut.point);
    }
    if nemesis::needs_provider(fault) && !b.provider_alive {
        return false;
    }
    if fault.is_storage() != store_point || !fault.applies_at(&b.cut.point) {
        return false;
    }
    fault != Fault::PowerCut || Fault::power_cut_planned_at(&b.cut.point, b.role)
}

/// Checks a `--cut`/`--fault` pair against the boundaries of a clean run
/// of `scenario_id`, before any cell runs: the point must happen, the
/// occurrence must be reached, and a provider fault needs a live provider.
pub fn check_cut(
    boundaries: &[Boundary],
    scenario_id: &str,
    cut: &Cut,
    fault: Fault,
) -> Result<(), String> {
    let hits: Vec<&Boundary> = boundaries
        .iter()
        .filter(|b| b.cut.point == cut.point)
        .collect();
    let listing = format!("`turncut boundaries {scenario_id}` lists them");
    let Some(last) = hits.iter().map(|b| b.cut.n).max() else {
        let dym = crate::scenario::did_you_mean(
            &cut.point,
            boundaries.iter().map(|b| b.cut.point.as_str()),
        );
        return Err(format!(
            "--cut {cut}: a clean run of {scenario_id} never reaches point {}{dym}; {listing}",
            cut.point
        ));
    };
    let Some(at) = hits.iter().find(|b| b.cut.n == cut.n) else {
        return Err(format!(
            "--cut {cut}: a clean run of {scenario_id} reaches {} {last} time(s), so #{} never happens; {listing}",
            cut.point, cut.n
        ));
    };
    if nemesis::needs_provider(fault) && !at.provider_alive {
        return Err(format!(
            "--fault {fault} at {cut}: no provider process is alive there; use kill-runner"
        ));
    }
    check_fault_point(fault, &cut.point)
}

/// A write fault needs a runner's before-write point, a read fault a
/// before-read point.
fn check_fault_point(fault: Fault, point: &str) -> Result<(), String> {
    if fault.applies_at(point) {
        return Ok(());
    }
    if fault.is_read() {
        return Err(format!(
            "{fault} at {point}: read faults apply only at the runner's before-read points ({}*, e.g. runner.read.turns); `turncut boundaries` lists them",
            crate::model::READ_POINTS
        ));
    }
    if fault.is_storage() {
        return Err(format!(
            "{fault} at {point}: write faults apply only at the runner's before-write points ({}*, e.g. runner.write.turn_intent); `turncut boundaries` lists them",
            crate::model::WRITE_POINTS
        ));
    }
    if point.starts_with(crate::model::READ_POINTS) {
        return Err(format!(
            "{fault} at {point}: a before-read point takes only fail-read, corrupt-read, kill-runner and power-cut; cut at another boundary instead"
        ));
    }
    Err(format!(
        "{fault} at {point}: a before-write point takes only fail-write, disk-full, kill-runner and power-cut; cut after the write instead (its .persisted point)"
    ))
}

/// The most events a schedule may have.
pub const MAX_EVENTS: usize = 8;

/// Checks a `--schedule` against the boundaries of a clean run of
/// `scenario_id`, before any cell runs: the first event as [`check_cut`]
/// checks a cut; each later event's point must belong to the runner or this
/// profile's provider (a point of another protocol can never happen).
pub fn check_schedule(
    boundaries: &[Boundary],
    scenario_id: &str,
    events: &[crate::model::Event],
) -> Result<(), String> {
    let Some(first) = events.first() else {
        return Err("the schedule is empty".to_owned());
    };
    if events.len() > MAX_EVENTS {
        return Err(format!(
            "the schedule has {} events; at most {MAX_EVENTS}",
            events.len()
        ));
    }
    check_cut(boundaries, scenario_id, &first.cut, first.fault)?;
    let families: std::collections::HashSet<&str> = boundaries
        .iter()
        .filter_map(|b| b.cut.point.split('.').next())
        .collect();
    for (i, e) in events.iter().enumerate().skip(1) {
        check_fault_point(e.fault, &e.cut.point).map_err(|m| format!("event {}: {m}", i + 1))?;
        let family = e.cut.point.split('.').next().unwrap_or_default();
        if !families.contains(family) {
            let mut known: Vec<&str> = families.iter().copied().collect();
            known.sort();
            return Err(format!(
                "event {} ({e}): {scenario_id} runs no component with {family}.* points (its points start with {}); `turncut boundaries {scenario_id}` lists them",
                i + 1,
                known.join(", ")
            ));
        }
    }
    Ok(())
}

/// A cell of `scenario_id` running `events`, seeded by its name.
pub fn schedule_cell(
    wave_seed: u64,
    cell_id: String,
    scenario_id: String,
    events: &[crate::model::Event],
) -> CellSpec {
    let mut spec = CellSpec {
        cell_id,
        scenario_id: scenario_id.into(),
        seed: 0,
        events: events.to_vec(),
    };
    spec.seed = cell_seed(wave_seed, &spec.name());
    spec
}

/// Checks the `cut` list of `scenario` against `boundaries`, the union of
/// the clean runs of its profiles: every point must belong to a component
/// and happen in at least one of them. The error has the point's place in
/// the file and the closest boundary name.
pub fn check_points(
    scenario: &Scenario,
    boundaries: &[Boundary],
) -> Result<(), crate::scenario::ScenarioError> {
    let CutSelection::Points(names) = &scenario.cut else {
        return Ok(());
    };
    for n in names {
        let family = n.split('.').next().unwrap_or_default();
        if !POINT_FAMILIES.contains(&family) {
            return Err(scenario.error_at_point(
                n,
                format!(
                    "cut point {n} belongs to no component; points start with one of {}",
                    POINT_FAMILIES.join(", ")
                ),
            ));
        }
        if !boundaries.iter().any(|b| &b.cut.point == n) {
            let dym =
                crate::scenario::did_you_mean(n, boundaries.iter().map(|b| b.cut.point.as_str()));
            return Err(scenario.error_at_point(
                n,
                format!(
                    "cut point {n} never happens in a clean run of any profile of this scenario{dym}; `turncut boundaries <scenario-id>` lists the points"
                ),
            ));
        }
    }
    Ok(())
}

/// SplitMix64: a small, well-known mixing function for deterministic seeds.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The seed of a cell, from the wave seed and the cell's name.
pub fn cell_seed(wave_seed: u64, name: &str) -> u64 {
    let mut h = mix(wave_seed);
    for b in name.bytes() {
        h = mix(h ^ u64::from(b));
    }
    h
}

/// Numbers cells of schedules (an empty one is a clean cell) `t001…` in
/// order and seeds them.
pub fn number_schedules(
    wave_seed: u64,
    cells: Vec<(String, Vec<crate::model::Event>)>,
) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .map(|(i, (id, events))| schedule_cell(wave_seed, format!("t{:03}", i + 1), id, &events))
        .collect()
}

/// Numbers cells `t001…` in order and seeds them: each a clean run or one
/// cut with its fault.
pub fn number(wave_seed: u64, cells: Vec<(String, Option<Event>)>) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .map(|(i, (scenario_id, event))| {
            let mut spec = CellSpec {
                cell_id: format!("t{:03}", i + 1),
                scenario_id: scenario_id.into(),
                seed: 0,
                events: event.into_iter().collect(),
            };
            spec.seed = cell_seed(wave_seed, &spec.name());
            spec
        })
        .collect()
}

/// Keeps `budget` cells chosen by seed (all when the budget covers them),
/// in their original order.
pub fn sample(cells: Vec<CellSpec>, budget: Option<usize>, wave_seed: u64) -> Vec<CellSpec> {
    let Some(budget) = budget.filter(|b| *b < cells.len()) else {
        return cells;
    };
    let mut keyed: Vec<(u64, usize)> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| (cell_seed(wave_seed ^ 0x5eed, &c.name()), i))
        .collect();
    keyed.sort();
    let mut keep: Vec<usize> = keyed.into_iter().take(budget).map(|(_, i)| i).collect();
    keep.sort();
    keep.into_iter().map(|i| cells[i].clone()).collect()
}

/// The cells of shard `index` (1-based) of `count`.
pub fn shard(cells: Vec<CellSpec>, index: u32, count: u32) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .filter(|(i, _)| (*i as u32) % count == index - 1)
        .map(|(_, c)| c)
        .collect()
}

/// Parses `P#N`.
pub fn parse_cut(s: &str) -> anyhow::Result<Cut> {
    let arms = cutpoint::parse_arm(s)?;
    match arms.as_slice() {
        [a] => Ok(Cut {
            point: a.point.clone(),
            n: a.n,
        }),
        _ => anyhow::bail!("--cut takes one point such as runner.turn_intent.persisted#1"),
    }
}

/// Parses `I/N`.
pub fn parse_shard(s: &str) -> anyhow::Result<(u32, u32)> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--shard takes I/N, e.g. 1/4"))?;
    let (i, n): (u32, u32) = (i.trim().parse()?, n.trim().parse()?);
    anyhow::ensure!(
        n >= 1 && (1..=n).contains(&i),
        "--shard {s}: I must be between 1 and N"
    );
    Ok((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment of five boundaries keeps three cells of `kill-runner` and
    /// `kill-provider` (its ends and one drawn), two of `hang-provider` (its
    /// ends) and one of `kill-both` (drawn); storage faults are not trimmed.
    #[test]
    fn a_segment_keeps_each_process_fault_its_own_count() {
        let boundaries: Vec<Boundary> = (1..=5)
            .map(|n| Boundary {
                cut: Cut {
                    point: "acp.x".into(),
                    n,
                },
                role: Role::Provider,
                provider_alive: true,
                segment: 0,
            })
            .collect();
        let faults = [
            Fault::KillRunner,
            Fault::KillProvider,
            Fault::HangProvider,
            Fault::KillBoth,
            Fault::FailWrite,
        ];
        let cells: Vec<Vec<Event>> = boundaries
            .iter()
            .flat_map(|b| {
                faults.iter().map(|f| {
                    vec![Event {
                        cut: b.cut.clone(),
                        fault: *f,
                    }]
                })
            })
            .collect();
        for seed in 0..20 {
            let kept = trim_by_segment(cells.clone(), &boundaries, seed);
            let of = |f: Fault| -> Vec<u64> {
                kept.iter()
                    .filter(|e| e[0].fault == f)
                    .map(|e| e[0].cut.n)
                    .collect()
            };
            for f in [Fault::KillRunner, Fault::KillProvider] {
                let n = of(f);
                assert_eq!(n.len(), 3, "{f}: {n:?}");
                assert!(n.contains(&1) && n.contains(&5), "{f}: {n:?}");
            }
            assert_eq!(of(Fault::HangProvider), vec![1, 5]);
            assert_eq!(of(Fault::KillBoth).len(), 1);
            assert_eq!(of(Fault::FailWrite).len(), 5);
        }
        assert_eq!(kept_of_segment(2, 3, 7), vec![0, 1]);
        assert_eq!(kept_of_segment(1, 2, 7), vec![0]);
    }

    fn specs(n: usize) -> Vec<CellSpec> {
        number(
            7,
            (0..n)
                .map(|i| {
                    (
                        "s".to_owned(),
                        Some(Event {
                            cut: Cut {
                                point: format!("p.{i}.x"),
                                n: 1,
                            },
                            fault: Fault::KillRunner,
                        }),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn seeds_and_samples_are_deterministic() {
        let a = specs(50);
        let b = specs(50);
        assert_eq!(a, b);
        assert_eq!(a[0].cell_id, "t001");
        let s1 = sample(a.clone(), Some(10), 7);
        let s2 = sample(b, Some(10), 7);
        assert_eq!(s1, s2);
        assert_eq!(s1.len(), 10);
        assert_ne!(
            sample(a.clone(), Some(10), 8),
            s1,
            "another seed samples other cells"
        );
        assert_eq!(sample(a.clone(), Some(100), 7).len(), 50);
    }

    #[test]
    fn shards_partition_the_cells() {
        let all = specs(17);
        let mut joined: Vec<CellSpec> = (1..=3).flat_map(|i| shard(all.clone(), i, 3)).collect();
        joined.sort_by(|x, y| x.cell_id.cmp(&y.cell_id));
        assert_eq!(joined, all);
        assert!(parse_shard("0/3").is_err());
        assert!(parse_shard("4/3").is_err());
        assert_eq!(parse_shard("2/3").unwrap(), (2, 3));
    }
}
