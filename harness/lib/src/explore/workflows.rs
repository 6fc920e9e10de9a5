//! `turncut explore --workflows`: generated controller programs
//! (`crate::workflow`), each traced clean and then run under schedules drawn
//! as `explore` draws them, until one fails or the time is up.
//!
//! A failure is shrunk twice: its schedule first, with its program fixed
//! (proptest over the program's boundaries, as `explore` shrinks any
//! schedule), then its program, with the shrunk schedule fixed (the state
//! machine's shrinking: fewer and plainer steps, a smaller script; a
//! candidate whose cuts no longer happen passes, so it is not kept). A
//! failing clean run shrinks its program alone. The minimal program and
//! schedule are what a person adds to `scenarios/` as a regression.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::strategy::{Just, ValueTree};
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

use super::{
    EventCount, Found, Options, Tally, Target, is_failure, new_schedule, ordered, recut,
    run_until_failure, strategy, try_schedule,
};
use crate::cell::CellEnv;
use crate::model::{CellResult, Event, Fault};
use crate::plan;
use crate::scenario::Scenario;
use crate::wave::Finished;
use crate::workflow::seeded_runner;
use crate::workflow::{self, Program};

/// What `turncut explore --workflows` is asked to do.
pub struct WorkflowOptions {
    /// The schedules' options: budget, seed, events, jobs, shrinking.
    pub explore: Options,
    /// The profiles programs run on, in turn.
    pub profiles: Vec<String>,
    /// Schedules run per program (after its clean run).
    pub schedules: usize,
    /// How its schedules are drawn: [`super::WORKFLOW_DRAW`], without
    /// power cuts where FUSE cannot be mounted.
    pub draw: super::Draw,
}

/// A failing program, shrunk.
pub struct FoundWorkflow {
    /// The profile it failed on.
    pub profile: String,
    /// The program as drawn, and its case name.
    pub original_program: (Program, String),
    /// The minimal program, and its case name.
    pub minimal_program: (Program, String),
    /// The schedule (shrunk with the original program), the cells and the
    /// shrinking runs, as for a schedule.
    pub found: Found,
    /// The minimal schedule's cell on the minimal program.
    pub minimal: Finished,
    /// Cells run while shrinking the program.
    pub program_shrink_runs: usize,
}

/// The outcome of `turncut explore --workflows`.
pub struct WorkflowsExplored {
    /// Programs drawn (each traced clean once).
    pub programs: usize,
    /// Of those, programs of several tasks.
    pub several_tasks: usize,
    /// Cells run (clean runs and schedules; shrinking not included).
    pub cells: usize,
    /// Cells whose verdict was `unknown`.
    pub unknown: usize,
    /// Those cells, each with the program it ran (its case name and
    /// scenario file), so that each can be named and run again.
    pub unknown_cells: Vec<(CellResult, (String, String))>,
    /// Per profile: (programs, cells).
    pub per_profile: BTreeMap<String, (usize, usize)>,
    /// Recoveries whose every boundary was cut again (`recut`).
    pub recoveries: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// When the first failure was seen, from the start.
    pub first_failure_after: Option<Duration>,
    /// The failure, if one was found.
    pub found: Option<FoundWorkflow>,
}

/// What every explorer thread shares.
struct Shared {
    schedules: Tally,
    programs: AtomicUsize,
    several_tasks: AtomicUsize,
    per_profile: Mutex<BTreeMap<String, (usize, usize)>>,
    /// The recoveries cut again (`recut`).
    recovered: recut::Recovered,
    first_failure: Mutex<Option<Duration>>,
    found: Mutex<Option<FoundWorkflow>>,
    /// Each program drawn, by scenario id: its case name and scenario file.
    drawn: Mutex<BTreeMap<String, (String, String)>>,
}

/// Explores generated programs until one fails or the budget is spent.
pub fn explore_workflows(env: &CellEnv, opts: &WorkflowOptions) -> WorkflowsExplored {
    let started = Instant::now();
    let shared = Shared {
        schedules: Tally {
            notes: env.progress.clone(),
            ..Tally::default()
        },
        programs: AtomicUsize::new(0),
        several_tasks: AtomicUsize::new(0),
        per_profile: Mutex::new(BTreeMap::new()),
        recovered: recut::Recovered::default(),
        first_failure: Mutex::new(None),
        found: Mutex::new(None),
        drawn: Mutex::new(BTreeMap::new()),
    };
    std::thread::scope(|s| {
        for job in 0..opts.explore.jobs.max(1) {
            let shared = &shared;
            s.spawn(move || explorer(env, opts, job, started, shared));
        }
    });
    let schedules = shared.schedules;
    let drawn = shared.drawn.into_inner().expect("drawn");
    let unknown_cells = schedules
        .unknown_cells
        .into_inner()
        .expect("unknown cells")
        .into_iter()
        .filter_map(|r| Some((drawn.get(&*r.spec.scenario_id)?.clone(), r)))
        .map(|(program, r)| (r, program))
        .collect();
    WorkflowsExplored {
        unknown_cells,
        programs: shared.programs.load(Ordering::SeqCst),
        several_tasks: shared.several_tasks.load(Ordering::SeqCst),
        cells: schedules.runs.load(Ordering::SeqCst),
        unknown: schedules.unknown.load(Ordering::SeqCst),
        per_profile: shared.per_profile.into_inner().expect("per profile"),
        recoveries: shared.recovered.count(),
        elapsed: started.elapsed(),
        first_failure_after: shared.first_failure.into_inner().expect("first failure"),
        found: shared.found.into_inner().expect("found"),
    }
}

/// The case name of program `n` of an exploration seeded `seed`.
pub fn case_name(seed: u64, n: usize) -> String {
    format!("s{seed}-w{n}")
}

/// One explorer thread: draws a program, runs its clean run and
/// `opts.schedules` schedules, and goes on to the next until the budget is
/// spent or some thread found a failure.
fn explorer(env: &CellEnv, opts: &WorkflowOptions, job: usize, started: Instant, shared: &Shared) {
    let o = &opts.explore;
    let mut runner = seeded_runner(plan::mix(o.seed ^ (job as u64) << 32), o.shrink_iters);
    let stopped = || {
        started.elapsed() >= o.budget
            || shared.schedules.stop.load(Ordering::SeqCst)
            || shared.schedules.claimed.load(Ordering::SeqCst)
            || crate::wave::INTERRUPTED.load(Ordering::SeqCst)
    };
    while !stopped() {
        let Some(tree) = workflow::new_tree(&mut runner) else {
            continue;
        };
        let n = shared.programs.fetch_add(1, Ordering::SeqCst) + 1;
        if Program::peek(&tree.current())
            .ops
            .contains(&workflow::Op::Submit)
        {
            shared.several_tasks.fetch_add(1, Ordering::SeqCst);
        }
        let profile = &opts.profiles[(n - 1) % opts.profiles.len()];
        let case = case_name(o.seed, n);
        if let Some(found) = try_program(
            env,
            opts,
            &mut runner,
            tree,
            profile,
            &case,
            started,
            shared,
        ) {
            shared.schedules.stop.store(true, Ordering::SeqCst);
            shared.found.lock().expect("found").get_or_insert(found);
        }
    }
}

/// Counts a cell of `profile` (a program's clean run or schedule).
fn count(shared: &Shared, profile: &str, id: &str, f: Option<&Finished>, new_program: bool) {
    shared.schedules.count(id, f);
    let mut per = shared.per_profile.lock().expect("per profile");
    let entry = per.entry(profile.to_owned()).or_default();
    entry.0 += usize::from(new_program);
    entry.1 += 1;
}

/// Runs one program: its clean run (a failure there shrinks the program
/// alone), then its schedules; a failing schedule is shrunk, then the
/// program under the shrunk schedule.
#[allow(clippy::too_many_arguments)]
fn try_program<T: ValueTree<Value = workflow::Drawn>>(
    env: &CellEnv,
    opts: &WorkflowOptions,
    runner: &mut TestRunner,
    tree: T,
    profile: &str,
    case: &str,
    started: Instant,
    shared: &Shared,
) -> Option<FoundWorkflow> {
    let program = Program::peek(&tree.current());
    let scenario = program.scenario(case, &[profile], workflow::CHAOS).ok()?;
    let id = scenario.id(profile);
    let scenarios = std::slice::from_ref(&scenario);
    let file = program.scenario_toml(case, &[profile], workflow::CHAOS);
    shared
        .drawn
        .lock()
        .expect("drawn")
        .insert(id.clone(), (case.to_owned(), file));
    let (discovery, clean) = clean_run(env, &scenario, profile);
    count(shared, profile, &id, clean.as_ref(), true);
    if let Some(clean) = clean.filter(is_failure) {
        note_first(shared, started);
        if !claim(shared) {
            return None;
        }
        let found = Found {
            scenario_id: id.clone(),
            original: clean,
            minimal: run_until_failure(env, scenarios, &id, &[], opts.explore.attempts),
            shrink_runs: 0,
        };
        return Some(shrink_program(
            env, opts, runner, tree, profile, case, found,
        ));
    }
    let discovery = discovery?;
    let target = Target {
        id: id.clone(),
        scenario: &scenario,
        boundaries: ordered(&discovery.boundaries),
    };
    let schedules = strategy(target.boundaries.clone(), opts.explore.events, opts.draw);
    for _ in 0..opts.schedules {
        let s_tree = new_schedule(&schedules, runner, opts.explore.events.min)?;
        if let Some(found) = run_drawn(env, opts, runner, &target, s_tree, shared) {
            note_first(shared, started);
            return Some(shrink_program(
                env, opts, runner, tree, profile, case, found,
            ));
        }
        if shared.schedules.claimed.load(Ordering::SeqCst) {
            return None;
        }
    }
    let found = recut_recoveries(env, opts, runner, &target, profile, started, shared)?;
    note_first(shared, started);
    Some(shrink_program(
        env, opts, runner, tree, profile, case, found,
    ))
}

/// First events more ([`first_events`]), each traced: a sample of the
/// boundaries of the recovery it walked is cut again where that recovery
/// was not cut before (`recut`), until one fails, another explorer claims
/// a failure or the budget is spent.
fn recut_recoveries(
    env: &CellEnv,
    opts: &WorkflowOptions,
    runner: &mut TestRunner,
    target: &Target<'_>,
    profile: &str,
    started: Instant,
    shared: &Shared,
) -> Option<Found> {
    let firsts = first_events(opts, runner, target, profile, shared);
    // Each recovery is traced only while there is time: a traced run is a
    // cell (a hang cell's can take seconds), and all of them up front ran
    // an exploration 26 s past its budget.
    let out_of_time = || {
        started.elapsed() >= opts.explore.budget || shared.schedules.claimed.load(Ordering::SeqCst)
    };
    for first in firsts {
        if out_of_time() {
            return None;
        }
        // A power cut's recovery is not cut again (`recovery_schedules`):
        // the first event is run alone, judged, so that new power points
        // are reached as new kill points are (`runner.item.persisted#1`
        // on OpenCode, where `resend-lost-output` lives, was left to the
        // four random schedules of a program).
        if first.fault == Fault::PowerCut {
            let alone = Just(vec![first]);
            if let Some(found) = run_drawn(env, opts, runner, target, alone, shared) {
                return Some(found);
            }
            continue;
        }
        let recuts = recut::recovery_schedules(
            env,
            target.scenario,
            profile,
            &first,
            &shared.recovered,
            runner.rng(),
        );
        for events in recuts {
            if out_of_time() {
                return None;
            }
            if let Some(found) = run_drawn(env, opts, runner, target, Just(events), shared) {
                return Some(found);
            }
        }
    }
    None
}

/// [`FIRSTS_PER_SCHEDULE`] first events per schedule to trace, drawn as a
/// schedule's first event is: those whose point and fault no program of
/// this profile traced before come first (`Recovered::first_new`), so that
/// an exploration reaches a provider's kill at the one point where a bug
/// lives in tens of programs, not hundreds; the rest of the draw fills up.
fn first_events(
    opts: &WorkflowOptions,
    runner: &mut TestRunner,
    target: &Target<'_>,
    profile: &str,
    shared: &Shared,
) -> Vec<Event> {
    let one = EventCount { min: 1, max: 1 };
    let firsts = strategy(target.boundaries.clone(), one, opts.draw);
    let wanted = opts.schedules * FIRSTS_PER_SCHEDULE;
    let drawn: Vec<Event> = (0..wanted * FIRST_DRAWS)
        .filter_map(|_| {
            new_schedule(&firsts, runner, 1)?
                .current()
                .into_iter()
                .next()
        })
        .collect();
    let (mut new, mut seen) = (Vec::new(), Vec::new());
    for e in drawn {
        // Only what is traced is recorded as traced.
        match new.len() < wanted && shared.recovered.first_new(profile, &e) {
            true => new.push(e),
            false => seen.push(e),
        }
    }
    new.into_iter().chain(seen).take(wanted).collect()
}

/// First events traced per random schedule of a program: a traced first
/// event is one cell, and the recoveries it finds are where the second
/// cuts go; at one per schedule (4 a program) a 4-minute exploration of
/// Codex traced 40, of some 300 points and faults.
const FIRSTS_PER_SCHEDULE: usize = 3;

/// Draws per first event traced ([`first_events`]): drawing costs no cell,
/// and late in an exploration most draws were traced before.
const FIRST_DRAWS: usize = 30;

/// Runs one schedule of a program (shrunk if it fails) and counts its cell
/// for the program's profile.
fn run_drawn<T: ValueTree<Value = Vec<Event>>>(
    env: &CellEnv,
    opts: &WorkflowOptions,
    runner: &mut TestRunner,
    target: &Target<'_>,
    s_tree: T,
    shared: &Shared,
) -> Option<Found> {
    let before = shared.schedules.runs.load(Ordering::SeqCst);
    let scenarios = std::slice::from_ref(target.scenario);
    let found = try_schedule(
        env,
        scenarios,
        target,
        &opts.explore,
        runner,
        s_tree,
        &shared.schedules,
    );
    if shared.schedules.runs.load(Ordering::SeqCst) > before {
        let profile = crate::scenario::profile_of(&target.id).to_owned();
        let mut per = shared.per_profile.lock().expect("per profile");
        per.entry(profile).or_default().1 += 1;
    }
    found
}

/// A program's clean traced run: its boundaries (none when it could not be
/// traced), and its judged result when it did not pass.
fn clean_run(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
) -> (Option<crate::discover::Discovery>, Option<Finished>) {
    let (discovery, clean) = match crate::discover::discover(env, scenario, profile) {
        Ok(mut d) => {
            let clean = d.clean_failure.take();
            (Some(d), clean)
        }
        Err(failed) => (None, failed.result),
    };
    let clean = clean.map(|r| Finished {
        result: *r,
        evidence: None,
        timeline: String::new(),
        kept: None,
    });
    (discovery, clean)
}

/// Records when the first failure was seen.
fn note_first(shared: &Shared, started: Instant) {
    shared
        .first_failure
        .lock()
        .expect("first failure")
        .get_or_insert(started.elapsed());
}

/// Whether this explorer is the one that shrinks (the first to claim).
fn claim(shared: &Shared) -> bool {
    shared
        .schedules
        .claimed
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// Shrinks the program of `found` with its minimal schedule fixed, and
/// runs the minimal schedule on the minimal program once more.
fn shrink_program<T: ValueTree<Value = workflow::Drawn>>(
    env: &CellEnv,
    opts: &WorkflowOptions,
    runner: &mut TestRunner,
    tree: T,
    profile: &str,
    case: &str,
    found: Found,
) -> FoundWorkflow {
    let original_program = Program::peek(&tree.current());
    // Shrinking off (`--shrink-iters 0`): proptest would run the program once
    // more and then read the tree's value right after that run, which the
    // state machine's tree refuses (a panic: its counter of seen steps is set).
    if opts.explore.shrink_iters == 0 {
        let same = original_program.clone();
        return found_workflow(original_program, same, profile, case, found, 0);
    }
    let schedule: Vec<Event> = found.minimal.result.spec.events.clone();
    let min_case = format!("{case}-min");
    env.progress.note(&format!(
        "explore: shrinking the program of {} under {}",
        found.scenario_id,
        crate::model::format_schedule(&schedule)
    ));
    let runs = AtomicUsize::new(0);
    let outcome = runner.run_one(tree, |drawn| {
        let program = Program::of(&drawn);
        runs.fetch_add(1, Ordering::SeqCst);
        match run_program(
            env,
            &program,
            profile,
            &min_case,
            &schedule,
            opts.explore.attempts,
        ) {
            Some(f) if is_failure(&f) => Err(TestCaseError::fail("still fails")),
            _ => Ok(()),
        }
    });
    let minimal_program = match outcome {
        Err(TestError::Fail(_, drawn)) => Program::peek(&drawn),
        _ => original_program.clone(),
    };
    let minimal = run_program(
        env,
        &minimal_program,
        profile,
        &min_case,
        &schedule,
        opts.explore.attempts,
    )
    .unwrap_or_else(|| found.minimal.clone());
    FoundWorkflow {
        minimal,
        ..found_workflow(
            original_program,
            minimal_program,
            profile,
            case,
            found,
            runs.load(Ordering::SeqCst),
        )
    }
}

/// A failure found on `original`, shrunk to `minimal` in `runs` runs; its
/// minimal cell is the schedule's own until the minimal program runs it.
fn found_workflow(
    original: Program,
    minimal: Program,
    profile: &str,
    case: &str,
    found: Found,
    runs: usize,
) -> FoundWorkflow {
    FoundWorkflow {
        profile: profile.to_owned(),
        original_program: (original, case.to_owned()),
        minimal_program: (minimal, format!("{case}-min")),
        minimal: found.minimal.clone(),
        found,
        program_shrink_runs: runs,
    }
}

/// Runs `schedule` on `program` (case `case` on `profile`); `None` when
/// the program is no valid scenario.
fn run_program(
    env: &CellEnv,
    program: &Program,
    profile: &str,
    case: &str,
    schedule: &[Event],
    attempts: usize,
) -> Option<Finished> {
    let scenario: Scenario = program.scenario(case, &[profile], workflow::CHAOS).ok()?;
    let id = scenario.id(profile);
    Some(run_until_failure(
        env,
        std::slice::from_ref(&scenario),
        &id,
        schedule,
        attempts,
    ))
}

/// The `[chaos]` body of a shrunk failure's scenario file: its schedule
/// alone (none for a failing clean run).
pub fn emitted_chaos(schedule: &[Event]) -> String {
    if schedule.is_empty() {
        return "cut = \"none\"\nfaults = []\n".to_owned();
    }
    format!(
        "cut = \"none\"\nfaults = []\nschedules = [\"{}\"]\n",
        crate::model::format_schedule(schedule)
    )
}

/// The default count of events per schedule of a generated program.
pub fn default_events() -> EventCount {
    EventCount::default()
}
