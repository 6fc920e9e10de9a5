//! Planning a wave: every scenario id's boundaries from clean traced runs,
//! its cells (one cut per boundary and fault, trimmed by durable segment,
//! the scenario's own cuts, storage faults, controller actions, random
//! schedules), checked before any cell runs.
//!
//! Planning holds on a loaded machine: a clean traced run that misses its
//! deadline, or whose provider the runner found silent, runs again with
//! longer timeouts (`timing`); a scenario id is traced twice and a third
//! time when the two disagree, and the points seen in some runs only are
//! listed (the plan keeps them all: it excludes nothing silently). An id
//! that still cannot be planned is listed as not run with its reason while
//! the rest of the wave runs, or, when the runner failed its run (a task
//! stranded), judged like a cell: the wave goes on, and goes red.

use crate::cell::CellEnv;
use crate::discover::{self, Discovery, DiscoveryFailed};
use crate::model::{CellResult, CellSpec, Event, Fault, Role, Skipped, Verdict};
use crate::plan;
use crate::scenario::{self, Scenario};
use crate::wave::Reach;

/// A wave's plan before sampling: its cells and what planning found.
#[derive(Debug, Default)]
pub struct Planned {
    /// The cells, numbered in a fixed order.
    pub cells: Vec<CellSpec>,
    /// Scenario ids that could not be planned here, with why.
    pub not_planned: Vec<Skipped>,
    /// Clean traced runs the runner failed, judged like cells.
    pub judged: Vec<CellResult>,
    /// Per scenario id, the boundaries some clean runs reached and others
    /// did not (timing decides them; each is still planned).
    pub timing_dependent: Vec<(String, Vec<String>)>,
}

/// A scenario id with its discovered boundaries.
struct Discovered<'a> {
    id: &'a String,
    scenario: &'a Scenario,
    profile: String,
    discovery: Discovery,
}

/// Why planning stopped.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A scenario file is wrong against what the clean runs showed (a cut
    /// point no profile reaches, a schedule none can run): bad input, with
    /// its place.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
    /// The harness could not plan.
    #[error(transparent)]
    Harness(#[from] anyhow::Error),
}

/// Plans every cell of `ids` (scenario ids) from the scenarios: discovers
/// boundaries with a clean traced run of each, checks every scenario's `cut`
/// list against them (a bad point is a `ScenarioError`, before any cell
/// runs), then expands, and adds the depth-2 and schedule cells of `reach`.
pub fn plan_cells(
    env: &CellEnv,
    scenarios: &[Scenario],
    ids: &[String],
    wave_seed: u64,
    quiet: bool,
    reach: Reach,
    jobs: usize,
) -> Result<Planned, PlanError> {
    let mut planned = Planned::default();
    // A quiet planning says nothing of its scenario ids: its notes go to
    // no reporter.
    let silent = crate::progress::Progress::default();
    let notes = if quiet { &silent } else { &env.progress };
    let found = discover_all(env, scenarios, ids, jobs, &mut planned, notes);
    for f in &found {
        check_points(env, f.scenario, &found)?;
        check_schedules(env, f.scenario, &found)?;
    }
    let mut all = Vec::new();
    for f in &found {
        let d = &f.discovery;
        let Some(mut cells) = one_cut_cells(f, reach, wave_seed, &mut planned, notes) else {
            continue;
        };
        let depth1 = cells.len();
        cells.extend(own_schedules(f));
        if f.scenario.generated {
            let seed = plan::cell_seed(wave_seed, f.id);
            cells.extend(crate::explore::draw(
                &d.boundaries,
                crate::explore::EventCount::default(),
                crate::explore::WORKFLOW_DRAW,
                seed,
                reach.workflow_schedules,
            ));
        } else if f.scenario.cut == crate::scenario::CutSelection::None {
            // `cut = "none"`: the clean run only, as the file says; no
            // schedule is drawn for it.
        } else if reach.depth1_only {
            cells.retain(|events| events.iter().all(|e| Fault::DEFAULT.contains(&e.fault)));
        } else {
            cells.extend(depth2_cells(env, f, &cells, reach.depth2, wave_seed)?);
            let seed = plan::cell_seed(wave_seed, f.id);
            cells.extend(crate::explore::draw(
                &d.boundaries,
                crate::explore::EventCount::default(),
                crate::explore::FILE_DRAW,
                seed,
                reach.schedules,
            ));
        }
        notes.note(&format!(
            "planned {}: {} boundaries, {} cells ({} one-cut, {} deeper; clean run {} in {} ms)",
            f.id,
            d.boundaries.len(),
            cells.len(),
            depth1.min(cells.len()),
            cells.len().saturating_sub(depth1),
            d.clean_state,
            d.clean_ms
        ));
        all.extend(cells.into_iter().map(|events| (f.id.clone(), events)));
    }
    planned.cells = plan::number_schedules(wave_seed, all);
    Ok(planned)
}

/// The clean cell and one-cut cells of `f` (trimmed by segment where the
/// scenario cuts every boundary), or `None` when the id is not planned.
/// The scenario's points were checked against every profile; one its own
/// family names that this profile's clean run never reaches is the
/// runner's behaviour (a seeded bug, a runner that takes another path),
/// not a mistake in the file: the id is not planned, and said, while the
/// rest of the wave is.
fn one_cut_cells(
    f: &Discovered<'_>,
    reach: Reach,
    wave_seed: u64,
    planned: &mut Planned,
    notes: &crate::progress::Progress,
) -> Option<Vec<Vec<Event>>> {
    if f.scenario.generated {
        // A generated program: its clean run only (its drawn schedules come
        // later; its one-cut cells would outnumber the files' own).
        return Some(vec![Vec::new()]);
    }
    let d = &f.discovery;
    let expanded = match plan::expand(f.scenario, &d.boundaries) {
        Ok(expanded) => expanded,
        Err(e) => {
            notes.note(&format!("planning {}: not planned: {e:#}", f.id));
            planned.not_planned.push(Skipped {
                scenario_id: f.id.clone(),
                reason: format!("its clean run takes another path: {e:#}"),
            });
            return None;
        }
    };
    let cells: Vec<Vec<Event>> = expanded
        .into_iter()
        .map(|event| event.into_iter().collect())
        .collect();
    if f.scenario.cut == crate::scenario::CutSelection::EveryBoundary && reach.recuts {
        let seed = plan::cell_seed(wave_seed ^ 0x7217, f.id);
        return Some(plan::trim_by_segment(cells, &d.boundaries, seed));
    }
    Some(cells)
}

/// Discovers the boundaries of every scenario id, sorted in the fixed order
/// cells are numbered in; an id that cannot be discovered goes to
/// `planned` (not planned, or judged). The ids' clean runs are traced on
/// `jobs` threads (each id's own runs one after another); what they found
/// is taken in the ids' order, so the plan does not depend on the threads.
fn discover_all<'a>(
    env: &CellEnv,
    scenarios: &'a [Scenario],
    ids: &'a [String],
    jobs: usize,
    planned: &mut Planned,
    notes: &crate::progress::Progress,
) -> Vec<Discovered<'a>> {
    // A generated program's clean runs play a whole workflow: taken first.
    let generated =
        |id: &String| u64::from(crate::model::ScenarioId::part_of(id, 0) == crate::workflow::SUITE);
    let traced = crate::par::map_longest_first(ids, jobs, generated, |id| {
        let (scenario, profile) = scenario::find(scenarios, id)?;
        Some((scenario, discover_steady(env, scenario, &profile), profile))
    });
    let mut found = Vec::new();
    for (id, traced) in ids.iter().zip(traced) {
        let Some((scenario, traced, profile)) = traced else {
            planned.not_planned.push(Skipped {
                scenario_id: id.clone(),
                reason: format!("unknown scenario id {id}; `turncut list` shows the ids"),
            });
            continue;
        };
        let mut discovery = match traced {
            Ok((d, unsteady)) => {
                if !unsteady.is_empty() {
                    notes.note(&format!(
                        "planning {id}: {} boundaries depend on timing (reached in some clean runs only): {}",
                        unsteady.len(),
                        unsteady.join(", ")
                    ));
                    planned.timing_dependent.push((id.clone(), unsteady));
                }
                d
            }
            Err(failed) => {
                unplannable(planned, id, failed, notes);
                continue;
            }
        };
        if let Some(r) = discovery.clean_failure.take() {
            judge_clean_run(planned, id, *r, notes);
        }
        // Threads of the runner and of a fake interleave by timing, so the
        // clean run's order of boundaries varies from run to run while their
        // set does not: cells are numbered in a fixed order (runner points
        // first, then by name and occurrence), so every shard of a wave,
        // planned on its own machine, numbers the same cells the same way.
        discovery.boundaries.sort_by(|a, b| {
            (a.role != Role::Runner, &a.cut).cmp(&(b.role != Role::Runner, &b.cut))
        });
        found.push(Discovered {
            id,
            scenario,
            profile,
            discovery,
        });
    }
    found
}

/// How many times a clean traced run of one id may go before its id is
/// given up: a run that fails is tried again with longer timeouts.
const DISCOVERY_ATTEMPTS: usize = 3;

/// One clean traced run that holds under load: a failed run, or one in
/// which the runner found a provider silent that nothing hung (its trace
/// holds a recovery the load caused: `Discovery::timing`), is tried again
/// with the timeouts `timing` gives a rerun (idle ×4, deadline ×2). A run
/// still silent at the longest timeouts fails with its reason (the id is
/// then listed as not planned, `unplannable`).
pub fn discover_retrying(
    env: &CellEnv,
    s: &Scenario,
    profile: &str,
) -> Result<Discovery, DiscoveryFailed> {
    let mut env = env.clone();
    let mut last = None;
    for attempt in 1..=DISCOVERY_ATTEMPTS {
        let outcome = discover::discover(&env, s, profile);
        let why = match &outcome {
            Ok(d) => match &d.timing {
                None => return outcome,
                Some(why) => why.clone(),
            },
            Err(e) => e.message.clone(),
        };
        // A rerun is never quiet: the clean run is traced again, and says so.
        if attempt < DISCOVERY_ATTEMPTS {
            env.progress.note(&format!(
                "turncut: the clean run of {} did not hold (attempt {attempt}, idle timeout {} ms, \
                 wait {} ms): {why}; tracing it again with longer timeouts",
                s.id(profile),
                env.idle_timeout_ms,
                env.wait_ms
            ));
        }
        last = Some(outcome);
        env = crate::timing::longer(&env, false);
    }
    // A trace that holds a recovery the load caused is not the clean run's:
    // its id is not planned (listed, with why), never planned from it.
    match last.expect("at least one attempt") {
        Ok(d) => match d.timing {
            Some(why) => Err(DiscoveryFailed {
                message: format!(
                    "the clean run of {} took a recovery at every timeout tried: {why}",
                    s.id(profile)
                ),
                result: None,
            }),
            None => Ok(d),
        },
        failed => failed,
    }
}

/// A scenario id's boundaries from clean traced runs that agree: two runs,
/// and a third when they differ in a boundary, its durable segment or
/// whether a provider is alive at it (threads of the runner and of a fake
/// interleave by timing). The plan then holds each boundary any run
/// reached, with the segment and provider flag most runs saw
/// ([`steady_union`]); what differed is returned to be listed.
fn discover_steady(
    env: &CellEnv,
    s: &Scenario,
    profile: &str,
) -> Result<(Discovery, Vec<String>), DiscoveryFailed> {
    let first = discover_retrying(env, s, profile)?;
    let second = discover_retrying(env, s, profile)?;
    if shape(&first.boundaries) == shape(&second.boundaries) {
        return Ok((first, Vec::new()));
    }
    let third = discover_retrying(env, s, profile)?;
    let runs = [
        first.boundaries.clone(),
        second.boundaries,
        third.boundaries,
    ];
    let (boundaries, unsteady) = steady_union(&runs);
    Ok((
        Discovery {
            boundaries,
            ..first
        },
        unsteady,
    ))
}

/// What planning takes from a boundary: cut → (segment, provider alive).
fn shape(b: &[plan::Boundary]) -> std::collections::BTreeMap<String, (usize, bool)> {
    b.iter()
        .map(|b| (b.cut.to_string(), (b.segment, b.provider_alive)))
        .collect()
}

/// The union of several clean runs' boundaries, each with the segment and
/// provider flag most runs that reached it saw (ties: the smaller segment,
/// no live provider, so no provider fault is planned where one may find
/// nothing to kill), in the order of the run that first has it; and the
/// boundaries the runs did not agree on, each with what differed.
pub fn steady_union(runs: &[Vec<plan::Boundary>]) -> (Vec<plan::Boundary>, Vec<String>) {
    let shapes: Vec<_> = runs.iter().map(|r| shape(r)).collect();
    let mut out: Vec<plan::Boundary> = Vec::new();
    let mut unsteady = Vec::new();
    for b in runs.iter().flatten() {
        let key = b.cut.to_string();
        if out.iter().any(|o| o.cut == b.cut) {
            continue;
        }
        let seen: Vec<(usize, bool)> = shapes.iter().filter_map(|s| s.get(&key).copied()).collect();
        let mut segments: Vec<usize> = seen.iter().map(|(s, _)| *s).collect();
        segments.sort_unstable();
        let segment = majority(&segments).unwrap_or(b.segment);
        let alive = 2 * seen.iter().filter(|(_, a)| *a).count() > seen.len();
        let mut why = Vec::new();
        if seen.len() < runs.len() {
            why.push(format!("reached in {} of {} runs", seen.len(), runs.len()));
        }
        if segments.first() != segments.last() {
            why.push(format!("segment {segments:?}, planned as {segment}"));
        }
        if seen.iter().any(|(_, a)| *a != alive) {
            why.push(format!(
                "a provider alive in some runs only, planned as {alive}"
            ));
        }
        if !why.is_empty() {
            unsteady.push(format!("{key} ({})", why.join("; ")));
        }
        out.push(plan::Boundary {
            segment,
            provider_alive: alive,
            ..b.clone()
        });
    }
    (out, unsteady)
}

/// The value most of the sorted `values` hold (ties: the smallest).
fn majority(values: &[usize]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for v in values {
        let n = values.iter().filter(|w| *w == v).count();
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((*v, n));
        }
    }
    best.map(|(v, _)| v)
}

/// A clean traced run that settled but did not pass (an oracle failed, or
/// the scenario's `[expect]` did not hold): a planning cell `p###` of the
/// wave, while the id is planned from its trace as usual.
fn judge_clean_run(
    planned: &mut Planned,
    id: &str,
    mut r: CellResult,
    notes: &crate::progress::Progress,
) {
    r.spec.cell_id = format!("p{:03}", planned.judged.len() + 1);
    notes.note(&format!(
        "planning {id}: its clean run did not pass ({:?}): {}",
        r.verdict,
        r.oracles
            .iter()
            .filter(|o| o.verdict != Verdict::Pass)
            .map(|o| format!("{}: {}", o.oracle, o.message))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    planned.judged.push(r);
}

/// An id whose clean run could not be traced: judged like a cell when the
/// runner failed it (an oracle other than vacuity failed), else listed as
/// not run with the reason.
fn unplannable(
    planned: &mut Planned,
    id: &str,
    failed: DiscoveryFailed,
    notes: &crate::progress::Progress,
) {
    let runner_failed = failed
        .result
        .as_ref()
        .filter(|r| r.oracles.iter().any(crate::oracles::decisive));
    if let Some(r) = runner_failed {
        let mut r = (**r).clone();
        r.spec.cell_id = format!("p{:03}", planned.judged.len() + 1);
        r.verdict = r.verdict.max(Verdict::Fail);
        notes.note(&format!(
            "planning {id}: the runner failed its clean run: {}",
            failed.message
        ));
        planned.judged.push(r);
    } else {
        notes.note(&format!("planning {id}: not planned: {}", failed.message));
        planned.not_planned.push(Skipped {
            scenario_id: id.to_owned(),
            reason: format!(
                "could not be planned ({} clean traced runs with longer timeouts each): {}",
                DISCOVERY_ATTEMPTS, failed.message
            ),
        });
    }
}

/// `k` depth-2 cells of one scenario id: first events chosen by seed among
/// its one-cut cells with a process kill (they lead to a recovery), each
/// followed by one event chosen by seed among the boundaries of that
/// recovery, as a traced run of the first event shows them.
fn depth2_cells(
    env: &CellEnv,
    f: &Discovered<'_>,
    one_cut: &[Vec<Event>],
    k: usize,
    wave_seed: u64,
) -> anyhow::Result<Vec<Vec<Event>>> {
    let mut firsts: Vec<(u64, &Event)> = one_cut
        .iter()
        .filter_map(|events| events.first())
        .filter(|e| {
            matches!(
                e.fault,
                Fault::KillRunner | Fault::KillProvider | Fault::KillBoth
            )
        })
        .map(|e| {
            (
                plan::cell_seed(wave_seed ^ 0xd2, &format!("{}@{e}", f.id)),
                e,
            )
        })
        .collect();
    firsts.sort();
    let mut out = Vec::new();
    for (seed, first) in firsts.into_iter().take(k) {
        // The before-read points are cut by stage 2 at every recovery
        // (`recuts::second_faults`); the draw keeps to the rest, as before
        // they existed.
        let after: Vec<plan::Boundary> =
            discover::discover_after(env, f.scenario, &f.profile, first)?
                .into_iter()
                .filter(|b| !b.cut.point.starts_with(crate::model::READ_POINTS))
                .collect();
        if after.is_empty() {
            continue;
        }
        let b = &after[(seed % after.len() as u64) as usize];
        let faults: Vec<Fault> = crate::explore::SCHEDULE_FAULTS
            .into_iter()
            .filter(|f| f.applies_at(&b.cut.point))
            .collect();
        let fault = faults[(plan::mix(seed) % faults.len() as u64) as usize];
        out.push(vec![
            first.clone(),
            Event {
                cut: b.cut.clone(),
                fault,
            },
        ]);
    }
    Ok(out)
}

/// The scenario's own `[chaos] schedules` that this profile's clean run
/// can run (a schedule names one protocol's points).
fn own_schedules(f: &Discovered<'_>) -> Vec<Vec<Event>> {
    f.scenario
        .schedules
        .iter()
        .filter(|(events, _)| plan::check_schedule(&f.discovery.boundaries, f.id, events).is_ok())
        .map(|(events, _)| events.clone())
        .collect()
}

/// Every `[chaos] schedules` entry of `s` runs on at least one of its
/// planned profiles; otherwise the file is wrong (its place, and why the
/// first profile refused it). Against a runner other than this build's
/// runnerd (`--runner-cmd`, a seeded runnerd) it is that runner's path, as
/// for a named point (`check_points`): the schedule plans no cell, and is
/// said. (`turncut mutants` stopped with exit 3 at `idle-timeout-in-micros`,
/// whose clean runs end before the schedule's first cut.)
fn check_schedules(env: &CellEnv, s: &Scenario, found: &[Discovered<'_>]) -> Result<(), PlanError> {
    let mine: Vec<&Discovered> = found.iter().filter(|f| f.scenario.path == s.path).collect();
    for (events, (line, col)) in &s.schedules {
        let why: Vec<String> = mine
            .iter()
            .map(|f| plan::check_schedule(&f.discovery.boundaries, f.id, events))
            .filter_map(Result::err)
            .collect();
        if mine.is_empty() || why.len() < mine.len() {
            continue;
        }
        let refused = format!(
            "{} runs on {}: {}",
            crate::model::format_schedule(events),
            match env.runs_runnerd() {
                true => "none of the planned profiles",
                false => "no clean run of this runner (no cell)",
            },
            why[0]
        );
        if !env.runs_runnerd() {
            let place = format!("{}:{line}:{col}", s.path.display());
            env.progress.note(&format!("{place}: schedule {refused}"));
            continue;
        }
        return Err(crate::scenario::ScenarioError {
            path: s.path.display().to_string(),
            line: *line,
            col: *col,
            message: format!("schedules: {refused}"),
        }
        .into());
    }
    Ok(())
}

/// Checks the `cut` list of `s` against the boundaries of all its profiles
/// (a runner point may exist in one driver only); profiles not planned
/// (`--only`) are discovered only when a point is missing from the others.
fn check_points(env: &CellEnv, s: &Scenario, found: &[Discovered<'_>]) -> Result<(), PlanError> {
    let mine: Vec<&Discovered> = found.iter().filter(|f| f.scenario.path == s.path).collect();
    let mut union: Vec<plan::Boundary> = mine
        .iter()
        .flat_map(|f| f.discovery.boundaries.iter().cloned())
        .collect();
    if plan::check_points(s, &union).is_err() && !env.runs_runnerd() {
        // A runner of `--runner-cmd` names its own runner points and may
        // claim one profile only (docs/runner-contract.md §1, §6): the
        // points its clean runs never show plan no cell, and are said.
        env.progress.note(&format!(
            "{}: named cut points no clean run of this runner shows (no cell there): {}",
            s.path.display(),
            plan::unmatched_points(s, &union).join(", ")
        ));
        return Ok(());
    }
    if plan::check_points(s, &union).is_err() {
        // A real product that is not installed shows no boundaries here.
        for p in s
            .profiles
            .iter()
            .filter(|p| crate::real::unavailable(p, &env.progress).is_none())
        {
            if !mine.iter().any(|f| &f.profile == p) {
                let d = discover::discover(env, s, p).map_err(anyhow::Error::from)?;
                union.extend(d.boundaries);
            }
        }
    }
    plan::check_points(s, &union)?;
    Ok(())
}

/// What a wave runs: the chosen scenario ids and the options that shape
/// the plan (`turncut plan` and `turncut wave` take the same ones).
pub struct Selection<'a> {
    /// The scenario ids to plan.
    pub ids: Vec<String>,
    /// Scenario ids that cannot run here (a real product not installed).
    pub skipped: Vec<Skipped>,
    /// The wave seed.
    pub seed: u64,
    /// Cells to sample (`--budget`).
    pub budget: Option<usize>,
    /// `--only`.
    pub only: Option<&'a str>,
    /// The wave's reach.
    pub reach: Reach,
    /// Clean traced runs at once while planning (the wave's `--jobs`).
    pub jobs: usize,
    /// The options as a command line, for people reading the plan.
    pub command_line: String,
}

/// Plans a wave: every cell of the selection, sampled, with its wave id.
pub fn make_plan(
    env: &CellEnv,
    scenarios: &[Scenario],
    sel: &Selection<'_>,
) -> Result<crate::model::Plan, PlanError> {
    let planned = if sel.ids.is_empty() {
        Planned::default()
    } else {
        plan_cells(
            env, scenarios, &sel.ids, sel.seed, false, sel.reach, sel.jobs,
        )?
    };
    let cells = crate::wave::sample_real(planned.cells, sel.only, sel.seed, &env.progress);
    let before = cells.len();
    let cells = plan::sample(cells, sel.budget, sel.seed);
    let stage2 = sel.reach.recuts.then_some(crate::model::Stage2Plan {
        keep_ppm: keep_ppm(cells.len(), before, sel.budget),
    });
    let scenarios_sha256 = scenarios_sha256(scenarios);
    let mut skipped = sel.skipped.clone();
    skipped.extend(planned.not_planned);
    Ok(crate::model::Plan {
        v: crate::model::PLAN_FORMAT_VERSION,
        wave_id: plan_id(sel.seed, &cells, stage2.is_some(), &scenarios_sha256),
        seed: sel.seed,
        run: crate::cell::run_config(env, scenarios),
        scenarios_sha256,
        selection: sel.command_line.clone(),
        cells,
        stage2,
        skipped,
        judged: planned.judged,
        timing_dependent: planned.timing_dependent,
        workflows: scenarios
            .iter()
            .filter(|s| s.generated)
            .map(|s| &s.case)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        stages: crate::model::Stages::Both,
    })
}

/// SHA-256 of the scenarios as parsed, in order: two plans made from
/// different scenario files never share a wave id.
pub fn scenarios_sha256(scenarios: &[Scenario]) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for s in scenarios {
        h.update(format!("{s:?}").as_bytes());
    }
    format!("{:x}", h.finalize())
}

/// The wave id of a plan: the seed, then a hash of its cells, whether it
/// has stage 2 and its scenarios.
pub fn plan_id(seed: u64, cells: &[CellSpec], stage2: bool, scenarios_sha256: &str) -> String {
    let mut h = plan::mix(seed ^ u64::from(stage2));
    h = plan::cell_seed(h, scenarios_sha256);
    for c in cells {
        h = plan::cell_seed(h, &format!("{} {}", c.cell_id, c.name()));
    }
    format!("w-s{seed}-{:08x}", h >> 32)
}

/// The shard of a cell's scenario id: its profile and scenario shape form
/// one group (stage 2 picks one path representative per group), and the
/// groups go to shards greedily by size, so every shard derives exactly its
/// part of the unsharded stage 2.
pub fn shard_of_groups(
    scenarios: &[Scenario],
    cells: &[CellSpec],
    count: u32,
) -> std::collections::BTreeMap<String, u32> {
    use std::collections::BTreeMap;
    let group = |id: &str| -> String {
        let shape = scenario::find(scenarios, id)
            .map(|(s, _)| s.shape())
            .unwrap_or_default();
        format!("{} {shape}", scenario::profile_of(id))
    };
    let mut sizes: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    for c in cells {
        let g = sizes.entry(group(&c.scenario_id)).or_default();
        g.0 += 1;
        if !g.1.iter().any(|id| c.scenario_id == *id) {
            g.1.push(c.scenario_id.to_string());
        }
    }
    let mut groups: Vec<(String, usize, Vec<String>)> =
        sizes.into_iter().map(|(k, (n, ids))| (k, n, ids)).collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut load = vec![0usize; count.max(1) as usize];
    let mut out = BTreeMap::new();
    for (_, n, ids) in groups {
        let (i, _) = load
            .iter()
            .enumerate()
            .min_by_key(|(i, l)| (**l, *i))
            .expect("at least one shard");
        load[i] += n;
        for id in ids {
            out.insert(id, i as u32 + 1);
        }
    }
    out
}

/// The cells of shard `index` (1-based) of `count` ([`shard_of_groups`]).
pub fn shard(
    scenarios: &[Scenario],
    cells: Vec<CellSpec>,
    index: u32,
    count: u32,
) -> Vec<CellSpec> {
    let of = shard_of_groups(scenarios, &cells, count);
    cells
        .into_iter()
        .filter(|c| of.get(c.scenario_id.as_str()) == Some(&index))
        .collect()
}

/// The share of cells a budget kept, in parts per million (`None`: all).
pub fn keep_ppm(kept: usize, of: usize, budget: Option<usize>) -> Option<u32> {
    budget
        .filter(|_| kept < of)
        .map(|_| ((kept as u64 * 1_000_000) / of.max(1) as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cut, Role};

    fn b(point: &str, segment: usize, alive: bool) -> plan::Boundary {
        plan::Boundary {
            cut: Cut {
                point: point.into(),
                n: 1,
            },
            role: Role::Runner,
            provider_alive: alive,
            segment,
        }
    }

    #[test]
    fn runs_that_agree_are_steady() {
        let run = vec![b("runner.a", 0, false), b("acp.b", 1, true)];
        let (out, unsteady) = steady_union(&[run.clone(), run.clone(), run]);
        assert!(unsteady.is_empty(), "{unsteady:?}");
        assert_eq!(shape(&out).len(), 2);
    }

    /// A boundary's segment and provider flag come from most runs, so one
    /// run's interleaving does not change the plan; every disagreement
    /// and a boundary some runs missed are listed, and nothing is dropped.
    #[test]
    fn most_runs_decide_a_boundary_and_every_disagreement_is_listed() {
        let runs = [
            vec![b("runner.a", 2, true), b("acp.b", 1, true)],
            vec![
                b("runner.a", 3, false),
                b("acp.b", 1, true),
                b("acp.c", 4, true),
            ],
            vec![b("runner.a", 2, true), b("acp.b", 1, true)],
        ];
        let (out, unsteady) = steady_union(&runs);
        let got = shape(&out);
        assert_eq!(got["runner.a#1"], (2, true));
        assert_eq!(got["acp.b#1"], (1, true));
        assert_eq!(
            got["acp.c#1"],
            (4, true),
            "a boundary one run reached is kept"
        );
        assert_eq!(unsteady.len(), 2, "{unsteady:?}");
        assert!(
            unsteady[0].starts_with(
                "runner.a#1 (segment [2, 2, 3], planned as 2; a provider alive in some runs only"
            ),
            "{unsteady:?}"
        );
        assert!(
            unsteady[1].starts_with("acp.c#1 (reached in 1 of 3 runs"),
            "{unsteady:?}"
        );
    }
}
