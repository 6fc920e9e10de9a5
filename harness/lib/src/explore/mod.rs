//! Random schedules: proptest strategies over the boundaries of a clean run
//! generate schedules of 1–4 events (kills, hangs, controller actions) at
//! boundaries named relative to what has happened so far, and a failing
//! schedule is shrunk by proptest to a minimal one (fewest events, earliest
//! boundaries, the plainest fault).
//!
//! `turncut explore` runs schedules until the first failure or its time
//! budget; `turncut wave --schedules K` adds K generated schedules per
//! scenario id to a wave. Both draw from the same strategy, seeded by the
//! wave or explore seed, so a seed names the same schedules on every machine
//! that discovers the same boundaries.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};

use crate::workflow::seeded_runner;

use crate::cell::CellEnv;
use crate::model::{
    CellResult, CellSpec, Cut, Event, Fault, FaultClass, READ_POINTS, Role, Verdict, WRITE_POINTS,
};
use crate::nemesis;
use crate::plan::{self, Boundary};
use crate::scenario::{self, Scenario};
use crate::wave::{self, Finished};

/// The faults a generated schedule draws from, in shrinking order (a
/// schedule shrinks towards the first). `power-cut` is not among them: a
/// scenario file's wave plans its power-cut cells where they count
/// (`Fault::power_cut_planned_at`), and a `--schedule` may name it; the
/// generated programs draw it too ([`WORKFLOW_FAULTS`]). The error answers
/// are drawn where they answer (one with no such point becomes
/// kill-runner, as any fault that does not apply), one of each rule of the
/// contract: a transient failure with `Retry-After`, an expired credential,
/// a full context window, a broken stream; the read faults are drawn from
/// the before-read points.
pub const SCHEDULE_FAULTS: [Fault; 15] = [
    Fault::KillRunner,
    Fault::KillProvider,
    Fault::KillBoth,
    Fault::FollowUp,
    Fault::Retry,
    Fault::FailWrite,
    Fault::DiskFull,
    Fault::HangProvider,
    Fault::ErrorAnswer,
    Fault::RateLimit,
    Fault::AuthExpired,
    Fault::ContextOverflow,
    Fault::StreamCut,
    Fault::FailRead,
    Fault::CorruptRead,
];

/// The faults a generated controller program's schedules draw from (the
/// wave's `--workflows` and `explore --workflows`): [`SCHEDULE_FAULTS`]
/// and `power-cut`, drawn at the points where the wave plans power cuts.
/// Where FUSE cannot be mounted the wave lists such a cell as skipped and
/// `explore --workflows` draws from [`SCHEDULE_FAULTS`] alone.
pub const WORKFLOW_FAULTS: [Fault; 16] = {
    let mut all = [Fault::PowerCut; 16];
    let mut i = 0;
    while i < SCHEDULE_FAULTS.len() {
        all[i] = SCHEDULE_FAULTS[i];
        i += 1;
    }
    all
};

/// How many events a generated schedule has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventCount {
    /// At least.
    pub min: usize,
    /// At most.
    pub max: usize,
}

impl Default for EventCount {
    fn default() -> Self {
        EventCount { min: 1, max: 4 }
    }
}

/// Parses `N` or `MIN-MAX` (1 ≤ MIN ≤ MAX ≤ [`plan::MAX_EVENTS`]).
pub fn parse_event_count(s: &str) -> Result<EventCount, String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let parse = |t: &str| t.trim().parse::<usize>().ok();
    match (parse(a), parse(b)) {
        (Some(min), Some(max)) if 1 <= min && min <= max && max <= plan::MAX_EVENTS => {
            Ok(EventCount { min, max })
        }
        _ => Err(format!(
            "--events {s:?}: give N or MIN-MAX with 1 <= MIN <= MAX <= {}",
            plan::MAX_EVENTS
        )),
    }
}

/// One scenario id's boundaries in a fixed order: the runner's in the order
/// the runner hit them, then the provider's in the order the provider hit
/// them (each process is sequential, so this order does not depend on how
/// the two interleaved).
pub fn ordered(boundaries: &[Boundary]) -> Vec<Boundary> {
    let mut runner: Vec<Boundary> = Vec::new();
    let mut provider: Vec<Boundary> = Vec::new();
    for b in boundaries {
        if b.role == Role::Runner {
            runner.push(b.clone());
        } else {
            provider.push(b.clone());
        }
    }
    runner.extend(provider);
    runner
}

/// What a schedule strategy draws from.
#[derive(Clone, Copy, Debug)]
pub struct Draw {
    /// The faults, in shrinking order.
    pub faults: &'static [Fault],
    /// Whether a later event's fault (but a storage, read or power fault,
    /// which have their own points) lands inside a recovery half the time:
    /// at one of the runner's durable writes (`runner.*.persisted`) or at
    /// a provider's recovery lookup (`wire::upstream::LOOKUP_POINTS`, which
    /// a clean run never reaches). A second cut is worth most inside the
    /// recovery the first one caused: a recovery is a sequence of the
    /// runner's writes (a lost turn's mark, then its continuation's intent;
    /// a Retry's admission, then its run made current), where a runner
    /// that splits what must be one write is caught, and it asks the
    /// provider what it recorded, where a runner that reads a failed
    /// lookup as "absent" is. Drawn uniformly they are a few of a hundred
    /// boundaries, or none.
    pub into_recoveries: bool,
}

/// A scenario file's drawn schedules (`wave --schedules`, `turncut explore`).
pub const FILE_DRAW: Draw = Draw {
    faults: &SCHEDULE_FAULTS,
    into_recoveries: false,
};

/// A generated program's schedules (`wave --workflow-schedules`,
/// `explore --workflows`).
pub const WORKFLOW_DRAW: Draw = Draw {
    faults: &WORKFLOW_FAULTS,
    into_recoveries: true,
};

/// The schedule strategy over `boundaries` (see [`ordered`]): the first
/// event is a boundary with its per-process occurrence; a later event is a
/// boundary's point at its 1st or 2nd hit after the event before it. It
/// draws 1 to `count.max` events and shrinks down to one; [`new_schedule`]
/// draws until a schedule has at least `count.min`, so that a long failing
/// schedule can still shrink to a short one.
pub fn strategy(
    boundaries: Vec<Boundary>,
    count: EventCount,
    draw: Draw,
) -> impl Strategy<Value = Vec<Event>> {
    let raw = (any::<Index>(), 0..draw.faults.len(), 1u64..=2);
    let lookups = lookups(&boundaries);
    proptest::collection::vec(raw, 1..=count.max).prop_map(move |raw| {
        let points = Points::of(&boundaries, &lookups);
        raw.iter()
            .enumerate()
            .map(|(i, r)| points.event(i, draw, r))
            .collect()
    })
}

/// A new schedule tree with at least `min` events (the length is checked
/// at drawing only, never while shrinking).
pub fn new_schedule<S: Strategy<Value = Vec<Event>>>(
    strategy: &S,
    runner: &mut TestRunner,
    min: usize,
) -> Option<S::Tree> {
    (0..1_000)
        .filter_map(|_| strategy.new_tree(runner).ok())
        .find(|tree| tree.current().len() >= min)
}

/// A clean run's boundaries, by the faults that draw from them.
struct Points<'a> {
    all: &'a [Boundary],
    /// The before-write points (write faults).
    writes: Vec<&'a Boundary>,
    /// The before-read points (read faults).
    reads: Vec<&'a Boundary>,
    /// Where the wave plans a power cut.
    power: Vec<&'a Boundary>,
    /// The providers' own boundaries (a schedule's first provider kill or
    /// hang).
    provider: Vec<&'a Boundary>,
    /// Those of them right after an answer crossed (`.responded`: the
    /// provider answered the runner; `.answered`: the runner answered the
    /// provider): where the provider may hold what was answered before
    /// recording it.
    answered: Vec<&'a Boundary>,
    /// Every boundary but the before-read points (any other fault): a
    /// kill there leaves the state of the boundary before it (a read
    /// changes nothing), and a runner hits many of them.
    others: Vec<&'a Boundary>,
    /// Inside a recovery: the runner's durable writes and the provider's
    /// recovery lookups (see [`Draw::into_recoveries`]).
    recovery: Vec<&'a Boundary>,
    /// The providers' recovery lookups a clean run does not reach.
    lookups: &'a [Boundary],
}

/// The recovery lookups of the providers among `boundaries` (by their
/// points' protocol prefix) that a clean run does not reach, as boundaries
/// of the provider.
fn lookups(boundaries: &[Boundary]) -> Vec<Boundary> {
    wire::upstream::LOOKUP_POINTS
        .iter()
        .filter(|p| {
            let protocol = p.split('.').next().unwrap_or_default();
            boundaries
                .iter()
                .any(|b| b.role != Role::Runner && b.cut.point.starts_with(&format!("{protocol}.")))
        })
        .filter(|p| !boundaries.iter().any(|b| b.cut.point == **p))
        .map(|p| Boundary {
            segment: 0,
            cut: Cut {
                point: (*p).to_owned(),
                n: 1,
            },
            role: Role::Provider,
            provider_alive: true,
        })
        .collect()
}

impl<'a> Points<'a> {
    fn of(all: &'a [Boundary], lookups: &'a [Boundary]) -> Points<'a> {
        let with = |keep: &dyn Fn(&Boundary) -> bool| all.iter().filter(|b| keep(b)).collect();
        Points {
            all,
            writes: with(&|b| b.cut.point.starts_with(WRITE_POINTS)),
            reads: with(&|b| b.cut.point.starts_with(READ_POINTS)),
            power: with(&|b| Fault::power_cut_planned_at(&b.cut.point, b.role)),
            provider: with(&|b| b.role != Role::Runner),
            answered: with(&|b| {
                b.role != Role::Runner
                    && (b.cut.point.ends_with(".responded") || b.cut.point.ends_with(".answered"))
            }),
            others: with(&|b| !b.cut.point.starts_with(READ_POINTS)),
            recovery: all
                .iter()
                .filter(|b| {
                    b.role == Role::Runner
                        && b.cut.point.starts_with("runner.")
                        && b.cut.point.ends_with(".persisted")
                })
                .chain(lookups)
                .collect(),
            lookups,
        }
    }

    /// Where an error-answer fault answers (`Fault::answers_at`): among the
    /// boundaries, and for a later event of a schedule that reaches into
    /// recoveries, at the recovery lookups too. Drawn among every boundary
    /// they were a few of a hundred (a program's model requests, its
    /// lookups), so a 429 or an expired key landed where it applies about
    /// once in a thousand events, and became `kill-runner` elsewhere.
    fn answering(&self, i: usize, draw: Draw, fault: Fault) -> Vec<&'a Boundary> {
        let lookups = match i > 0 && draw.into_recoveries {
            true => self.lookups,
            false => &[],
        };
        self.all
            .iter()
            .chain(lookups)
            .filter(|b| fault.applies_at(&b.cut.point))
            .collect()
    }

    /// The boundary event `i` lands at for `fault` (drawn `at`), and the
    /// fault: a storage fault draws from its own points only (a write
    /// fault from the before-write points, a read fault from the
    /// before-read ones), an error answer from where it answers; a fault with no point of its own, or that does
    /// not apply at the point drawn, becomes kill-runner (see
    /// `Fault::applies_at`).
    fn pick(&self, i: usize, draw: Draw, at: &Index, mut fault: Fault) -> (&'a Boundary, Fault) {
        if fault.class() == FaultClass::Answer {
            let answering = self.answering(i, draw, fault);
            if !answering.is_empty() {
                return (answering[at.index(answering.len())], fault);
            }
        }
        let own = match fault {
            Fault::PowerCut => &self.power,
            // A first kill or hang of the provider lands where the provider
            // is held, at a point of its own, half the time right after it
            // answered: between its answer and its record (a turn accepted,
            // then lost with it) are a few of a provider's twenty points.
            Fault::KillProvider | Fault::HangProvider if i == 0 && !self.provider.is_empty() => {
                let k = at.index(2 * self.provider.len());
                return match (k < self.provider.len(), self.answered.is_empty()) {
                    (true, _) | (false, true) => (self.provider[k % self.provider.len()], fault),
                    (false, false) => {
                        let a =
                            (k - self.provider.len()) * self.answered.len() / self.provider.len();
                        (self.answered[a], fault)
                    }
                };
            }
            f if f.is_read() => &self.reads,
            f if f.is_storage() => &self.writes,
            _ if i > 0 && draw.into_recoveries && !self.recovery.is_empty() => {
                let k = at.index(2 * self.others.len());
                if k < self.others.len() {
                    return self.applying(self.others[k], fault);
                }
                let w = (k - self.others.len()) * self.recovery.len() / self.others.len();
                return self.applying(self.recovery[w], fault);
            }
            _ => &self.others,
        };
        if own.is_empty() {
            fault = Fault::KillRunner;
            return self.applying(&self.all[at.index(self.all.len())], fault);
        }
        self.applying(own[at.index(own.len())], fault)
    }

    fn applying(&self, b: &'a Boundary, fault: Fault) -> (&'a Boundary, Fault) {
        match fault.applies_at(&b.cut.point) {
            true => (b, fault),
            false => (b, Fault::KillRunner),
        }
    }

    /// Event `i` of a schedule, from its drawn `(at, fault, occurrence)`.
    fn event(&self, i: usize, draw: Draw, (at, fault, occurrence): &(Index, usize, u64)) -> Event {
        let (b, mut fault) = self.pick(i, draw, at, draw.faults[*fault]);
        let cut = if i == 0 {
            // The first cut is a boundary as discovered; a provider
            // fault where no provider lives would fire at nothing.
            if nemesis::needs_provider(fault) && !b.provider_alive {
                fault = Fault::KillRunner;
            }
            b.cut.clone()
        } else {
            Cut {
                point: b.cut.point.clone(),
                n: *occurrence,
            }
        };
        Event { cut, fault }
    }
}

/// `k` schedules of `boundaries` as `how` draws them, with `seed` (for
/// `wave --schedules` and `--workflow-schedules`).
pub fn draw(
    boundaries: &[Boundary],
    count: EventCount,
    how: Draw,
    seed: u64,
    k: usize,
) -> Vec<Vec<Event>> {
    let strategy = strategy(ordered(boundaries), count, how);
    let mut runner = seeded_runner(seed, 0);
    (0..k)
        .filter_map(|_| new_schedule(&strategy, &mut runner, count.min))
        .map(|tree| tree.current())
        .collect()
}

/// What `turncut explore` is asked to do.
pub struct Options {
    /// The time budget.
    pub budget: Duration,
    /// The seed.
    pub seed: u64,
    /// Events per schedule.
    pub events: EventCount,
    /// Parallel explorers.
    pub jobs: usize,
    /// Shrinking runs at most.
    pub shrink_iters: u32,
    /// Runs of a shrinking candidate before it counts as passing (a
    /// failure may depend on timing the harness does not hold).
    pub attempts: usize,
}

/// A failing schedule, shrunk.
pub struct Found {
    /// The scenario id.
    pub scenario_id: String,
    /// The first failing schedule, as run.
    pub original: Finished,
    /// The minimal failing schedule proptest shrank it to, run once more.
    pub minimal: Finished,
    /// Cells run while shrinking.
    pub shrink_runs: usize,
}

/// The outcome of an exploration.
pub struct Explored {
    /// Schedules run (shrinking runs not included).
    pub runs: usize,
    /// Schedules whose verdict was `unknown`.
    pub unknown: usize,
    /// Those cells, in the order they ended: each is named with its
    /// reproduce line, as a wave names its unknown cells.
    pub unknown_cells: Vec<CellResult>,
    /// Schedules per scenario id.
    pub per_id: std::collections::BTreeMap<String, usize>,
    /// Wall time.
    pub elapsed: Duration,
    /// The failure, if one was found.
    pub found: Option<Found>,
}

/// A scenario id ready to explore.
pub struct Target<'a> {
    /// The id.
    pub id: String,
    /// Its scenario.
    pub scenario: &'a Scenario,
    /// Its boundaries in [`ordered`] order.
    pub boundaries: Vec<Boundary>,
}

/// Discovers the boundaries of every id.
pub fn targets<'a>(
    env: &CellEnv,
    scenarios: &'a [Scenario],
    ids: &[String],
) -> anyhow::Result<Vec<Target<'a>>> {
    let mut out = Vec::new();
    for id in ids {
        let (scenario, profile) = scenario::find(scenarios, id)
            .ok_or_else(|| anyhow::anyhow!("unknown scenario id {id}"))?;
        let d = crate::discover::discover(env, scenario, &profile)?;
        anyhow::ensure!(
            !d.boundaries.is_empty(),
            "a clean run of {id} hit no boundary"
        );
        out.push(Target {
            id: id.clone(),
            scenario,
            boundaries: ordered(&d.boundaries),
        });
    }
    Ok(out)
}

/// Whether a cell found a defect: an oracle other than `vacuity` failed (a
/// later event that never came is no defect; a first cut that was not
/// reached tested nothing either way).
pub fn is_failure(f: &Finished) -> bool {
    f.result.oracles.iter().any(crate::oracles::decisive)
}

/// The failing oracles of a cell, by name.
pub fn failing_oracles(f: &Finished) -> Vec<String> {
    f.result
        .oracles
        .iter()
        .filter(|o| o.verdict == Verdict::Fail)
        .map(|o| o.oracle.as_str().to_owned())
        .collect()
}

/// Explores `targets` until a schedule fails or the budget is spent; the
/// failing schedule is shrunk and its minimal form run once more.
pub fn explore(
    env: &CellEnv,
    scenarios: &[Scenario],
    targets: &[Target<'_>],
    opts: &Options,
) -> Explored {
    let started = Instant::now();
    let shared = Tally {
        stop: AtomicBool::new(false),
        claimed: AtomicBool::new(false),
        runs: AtomicUsize::new(0),
        notes: env.progress.clone(),
        ..Tally::default()
    };
    std::thread::scope(|s| {
        for job in 0..opts.jobs.max(1) {
            let shared = &shared;
            s.spawn(move || explorer(env, scenarios, targets, opts, job, started, shared));
        }
    });
    Explored {
        runs: shared.runs.load(Ordering::SeqCst),
        unknown: shared.unknown.load(Ordering::SeqCst),
        unknown_cells: shared.unknown_cells.into_inner().expect("unknown cells"),
        per_id: shared.per_id.into_inner().expect("per id"),
        elapsed: started.elapsed(),
        found: shared.found.into_inner().expect("found"),
    }
}

/// What the explorer threads of one run count together (the cells run,
/// those `unknown`, per scenario id) and the one failure they found; not
/// the progress stream (`crate::progress`).
#[derive(Default)]
struct Tally {
    stop: AtomicBool,
    /// An explorer is shrinking a failure: the others stop.
    claimed: AtomicBool,
    runs: AtomicUsize,
    unknown: AtomicUsize,
    /// The cells counted in `unknown`.
    unknown_cells: Mutex<Vec<CellResult>>,
    per_id: Mutex<std::collections::BTreeMap<String, usize>>,
    found: Mutex<Option<Found>>,
    /// Where the count of schedules run is said.
    notes: crate::progress::Progress,
}

impl Tally {
    /// Counts one cell of `id`: `f` is its result, `None` for a clean run
    /// that passed (discovery keeps no result of it).
    fn count(&self, id: &str, f: Option<&Finished>) {
        let runs = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(f) = f.filter(|f| f.result.verdict == Verdict::Unknown) {
            self.unknown.fetch_add(1, Ordering::SeqCst);
            self.unknown_cells
                .lock()
                .expect("unknown cells")
                .push(f.result.clone());
        }
        *self
            .per_id
            .lock()
            .expect("per id")
            .entry(id.to_owned())
            .or_default() += 1;
        if runs.is_multiple_of(25) {
            self.notes.note(&format!("explore: {runs} schedules run"));
        }
    }
}

/// One explorer thread: round-robin over the targets, one schedule at a
/// time, until the budget is spent or some thread found a failure.
fn explorer(
    env: &CellEnv,
    scenarios: &[Scenario],
    targets: &[Target<'_>],
    opts: &Options,
    job: usize,
    started: Instant,
    shared: &Tally,
) {
    let mut runner = seeded_runner(plan::mix(opts.seed ^ (job as u64) << 32), opts.shrink_iters);
    let strategies: Vec<_> = targets
        .iter()
        .map(|t| strategy(t.boundaries.clone(), opts.events, FILE_DRAW))
        .collect();
    let mut next = job;
    while started.elapsed() < opts.budget
        && !shared.stop.load(Ordering::SeqCst)
        && !shared.claimed.load(Ordering::SeqCst)
    {
        let i = next % targets.len();
        next += opts.jobs.max(1);
        let target = &targets[i];
        let Some(tree) = new_schedule(&strategies[i], &mut runner, opts.events.min) else {
            continue;
        };
        if let Some(found) = try_schedule(env, scenarios, target, opts, &mut runner, tree, shared) {
            shared.stop.store(true, Ordering::SeqCst);
            shared.found.lock().expect("found").get_or_insert(found);
        }
    }
}

/// Runs one generated schedule; on a failure, lets proptest shrink it and
/// runs the minimal schedule once more.
fn try_schedule<T: proptest::strategy::ValueTree<Value = Vec<Event>>>(
    env: &CellEnv,
    scenarios: &[Scenario],
    target: &Target<'_>,
    opts: &Options,
    runner: &mut TestRunner,
    tree: T,
    shared: &Tally,
) -> Option<Found> {
    let original: Mutex<Option<Finished>> = Mutex::new(None);
    let mine = AtomicBool::new(false);
    let runs = AtomicUsize::new(0);
    let outcome = runner.run_one(tree, |events| {
        let n = runs.fetch_add(1, Ordering::SeqCst);
        // One failure is shrunk at a time: another explorer's later find is
        // left alone (it counts as passing, so its shrinking ends at once).
        if n > 0 && !mine.load(Ordering::SeqCst) {
            return Ok(());
        }
        if n > 0 && n.is_multiple_of(10) {
            env.progress
                .note(&format!("explore: shrinking, {n} candidates tried"));
        }
        let f = if n == 0 {
            let f = run_schedule(env, scenarios, &target.id, &events);
            shared.count(&target.id, Some(&f));
            f
        } else {
            // A failure may depend on timing the harness does not hold: a
            // candidate counts as passing only when it passes every attempt,
            // so a flaky pass does not stop the shrinking early.
            run_until_failure(env, scenarios, &target.id, &events, opts.attempts)
        };
        if !is_failure(&f) {
            return Ok(());
        }
        if n == 0 {
            let first = shared
                .claimed
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
            if !first {
                return Ok(());
            }
            mine.store(true, Ordering::SeqCst);
            env.progress
                .note(&format!("explore: {} failed; shrinking it", target.id));
        }
        let why = failing_oracles(&f).join(", ");
        original.lock().expect("original").get_or_insert(f);
        Err(TestCaseError::fail(why))
    });
    match outcome {
        Err(TestError::Fail(_, minimal)) => {
            let original = original.into_inner().expect("original")?;
            let minimal = run_until_failure(env, scenarios, &target.id, &minimal, opts.attempts);
            Some(Found {
                scenario_id: target.id.clone(),
                original,
                minimal,
                shrink_runs: runs.load(Ordering::SeqCst).saturating_sub(1),
            })
        }
        _ => None,
    }
}

/// Runs `events` up to `attempts` times and returns the first failing run
/// (or the last passing one).
pub fn run_until_failure(
    env: &CellEnv,
    scenarios: &[Scenario],
    id: &str,
    events: &[Event],
    attempts: usize,
) -> Finished {
    let mut last = run_schedule(env, scenarios, id, events);
    for _ in 1..attempts {
        if is_failure(&last) {
            break;
        }
        last = run_schedule(env, scenarios, id, events);
    }
    last
}

/// Runs `events` on `id` as one cell.
pub fn run_schedule(env: &CellEnv, scenarios: &[Scenario], id: &str, events: &[Event]) -> Finished {
    let spec: CellSpec = plan::schedule_cell(0, "t001".into(), id.to_owned(), events);
    wave::run_one(env, scenarios, &spec)
}

pub mod recut;
pub mod workflows;

#[cfg(test)]
mod tests;
