//! Running many cells: plan a set of scenarios, run the cells on `--jobs`
//! worker threads, show progress, and collect one `WaveResult`.
//!
//! Progress is a bar on a terminal and one plain line per cell otherwise.
//! Evidence is kept only for cells that did not pass (and a timeline for
//! every cell), so a large wave stays small in memory. Writing reports is `report`'s job; this module only runs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use crate::cell::{CellEnv, run_cell};
use crate::evidence::Evidence;
use crate::model::{CellResult, CellSpec, RunConfig, Verdict, WAVE_FORMAT_VERSION, WaveResult};
use crate::plan;
use crate::scenario::{self, Scenario};

/// A finished cell kept for the report: its result and, unless it passed,
/// its evidence.
#[derive(Clone)]
pub struct Finished {
    /// The result.
    pub result: CellResult,
    /// Evidence of a cell that did not pass.
    pub evidence: Option<Evidence>,
    /// The cell's timeline (`Evidence::timeline`), kept for every cell: the
    /// report draws a sequence diagram from it, abbreviated for a passing
    /// cell.
    pub timeline: String,
    /// With `--keep`, the cell's kept directory (of the run whose result
    /// stands), which holds its `evidence.json` too.
    pub kept: Option<std::path::PathBuf>,
}

/// What a wave reaches beyond one cut per cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reach {
    /// Depth-2 cells per scenario id: a first process fault, then a second
    /// event at a boundary of the recovery, discovered from a traced run of
    /// the first (`discover::discover_after`).
    pub depth2: usize,
    /// Random schedules (`explore::draw`) per scenario id.
    pub schedules: usize,
    /// Stage 2: every recovery path the one-cut cells walk, cut again at
    /// each boundary of its recovery (`recuts`).
    pub recuts: bool,
    /// The old depth-1 wave: one process fault per cell, no `recut`, no
    /// controller-action or storage faults, no depth 2, no schedules.
    pub depth1_only: bool,
    /// Generated programs (`workflow::wave_programs`) the wave adds to the
    /// scenarios, each on every fake profile.
    pub workflows: usize,
    /// Random schedules per generated program and profile.
    pub workflow_schedules: usize,
}

impl Default for Reach {
    fn default() -> Self {
        Reach {
            depth2: 0,
            schedules: 2,
            recuts: true,
            depth1_only: false,
            workflows: 2,
            workflow_schedules: 6,
        }
    }
}

impl Reach {
    /// The depth-1-only wave.
    pub fn depth1() -> Reach {
        Reach {
            depth2: 0,
            schedules: 0,
            recuts: false,
            depth1_only: true,
            workflows: 0,
            workflow_schedules: 0,
        }
    }
}

/// Runs one cell. A cell whose armed cut is not reached (its path before
/// the cut depended on timing the harness does not hold, e.g. an idle
/// timeout on a loaded machine) runs once more, and says so: the result
/// carries `retried` and summary.md counts such cells. A second miss stands
/// as a `vacuity` failure, and is counted as an unreached cut.
pub fn run_one(env: &CellEnv, scenarios: &[Scenario], spec: &CellSpec) -> Finished {
    let Some((s, profile)) = scenario::find(scenarios, &spec.scenario_id) else {
        return Finished {
            result: CellResult {
                spec: spec.clone(),
                verdict: Verdict::Unknown,
                oracles: Vec::new(),
                outcome: Default::default(),
                duration_ms: 0,
                reproduce: String::new(),
                error: Some(format!("unknown scenario id {}", spec.scenario_id)),
                retried: None,
                reruns: Vec::new(),
            },
            evidence: None,
            timeline: String::new(),
            kept: None,
        };
    };
    let mut judged = crate::judge::judged(run_cell(env, s, &profile, spec));
    if spec.cut().is_some() && !judged.run.evidence.reached_cut {
        judged = crate::judge::judged(run_cell(env, s, &profile, spec));
        judged.result.retried = Some("the armed cut was not reached on the first attempt".into());
    }
    let crate::judge::Judged { run, result } =
        crate::timing::run_with_reruns(env, s, &profile, spec, judged);
    let timeline = run.evidence.timeline();
    if let Some(dir) = &run.kept {
        // `turncut judge DIR` reads it there: a kept directory is judged
        // like a report's `cells/t###/`.
        if let Err(e) = run.evidence.write(dir) {
            env.progress
                .note(&format!("writing the evidence into {}: {e}", dir.display()));
        }
    }
    // A kept cell's evidence goes to the report even when it passed, so
    // `cells/t###/` exists for every kept cell.
    let keep = result.verdict != Verdict::Pass || run.kept.is_some();
    let evidence = keep.then_some(run.evidence);
    Finished {
        result,
        evidence,
        timeline,
        kept: run.kept,
    }
}

/// Runs `cells` on `jobs` threads.
pub fn run_cells(
    env: &CellEnv,
    scenarios: &[Scenario],
    cells: &[CellSpec],
    jobs: usize,
) -> Vec<Finished> {
    run_cells_until(env, scenarios, cells, jobs, None)
}

/// A rough guess of a cell's wall time, for the order cells are taken in
/// ([`longest_first`]), never for a verdict: a generated program's cell
/// plays a whole workflow, each event adds a restart, a power cut a lazy
/// mount, a hung provider the runner's idle timer. From the default wave's
/// means (seed 1): a file's one-cut cell about 250 ms, its power cut
/// 600, a generated program's clean run 700.
pub fn expected_ms(spec: &CellSpec) -> u64 {
    let base = if spec.scenario_id.suite() == crate::workflow::SUITE {
        600
    } else {
        150
    };
    spec.events.iter().fold(base, |ms, e| {
        ms + match e.fault {
            crate::model::Fault::PowerCut => 400,
            crate::model::Fault::HangProvider => 200,
            _ => 100,
        }
    })
}

/// `cells` in the order they are taken: the costliest by `cost` first, so
/// that the last cells of a stage are short ones and no long cell runs
/// alone at its end. Results are reported in cell order whatever the order
/// they ran in.
pub fn longest_first(cells: &[CellSpec], cost: impl Fn(&CellSpec) -> u64) -> Vec<CellSpec> {
    crate::par::longest_first(cells, cost)
        .into_iter()
        .map(|i| cells[i].clone())
        .collect()
}

/// When a wave stops taking new cells (cells already running finish).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAfter {
    /// After N cells that did not pass (`--max-fail`): a broken runner ends
    /// the wave early, whatever its cells reached.
    NotPassing(usize),
    /// After N cells an oracle failed (`mutants`' first catch): a cell that
    /// missed its cut, or that a harness error cut short, caught nothing.
    Caught(usize),
}

/// Whether an oracle other than vacuity failed the cell and the harness
/// ran it whole (or stopped only because the runner let the cell's
/// deadline pass): a catch. A harness error or an unreached cut never is.
pub fn caught(r: &CellResult) -> bool {
    (r.error.is_none() || r.outcome.deadline_passed)
        && r.oracles.iter().any(crate::oracles::decisive)
}

/// Like [`run_cells`], but stops taking new cells by `stop`.
pub fn run_cells_until(
    env: &CellEnv,
    scenarios: &[Scenario],
    cells: &[CellSpec],
    jobs: usize,
    stop: Option<StopAfter>,
) -> Vec<Finished> {
    env.progress
        .emit(crate::progress::ProgressEvent::Batch { total: cells.len() });
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let decisive = AtomicUsize::new(0);
    let out: Mutex<Vec<Finished>> = Mutex::new(Vec::with_capacity(cells.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let stopped = match stop {
                        None => false,
                        Some(StopAfter::NotPassing(n)) => failed.load(Ordering::SeqCst) >= n,
                        Some(StopAfter::Caught(n)) => decisive.load(Ordering::SeqCst) >= n,
                    };
                    if INTERRUPTED.load(Ordering::SeqCst) || stopped {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(spec) = cells.get(i) else { return };
                    let finished = run_one(env, scenarios, spec);
                    if finished.result.verdict != Verdict::Pass {
                        failed.fetch_add(1, Ordering::SeqCst);
                        if caught(&finished.result) {
                            decisive.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    env.progress.emit(crate::progress::ProgressEvent::Cell {
                        done: done.fetch_add(1, Ordering::SeqCst) + 1,
                        total: cells.len(),
                        result: &finished.result,
                    });
                    out.lock().expect("results").push(finished);
                }
            });
        }
    });
    env.progress.emit(crate::progress::ProgressEvent::BatchDone);
    let mut v = out.into_inner().expect("results");
    crate::model::sort_cells(&mut v, |f| &f.result.spec.cell_id);
    v
}

/// Why a wave ran fewer cells than planned: `--max-fail` or Ctrl-C. A
/// wave interrupted at all is incomplete even when every cell it had
/// planned ran: the interruption may have come while its stage 2 was
/// being planned, before those cells were counted.
pub fn stop_reason(
    planned: usize,
    finished: &[Finished],
    max_fail: Option<usize>,
) -> Option<String> {
    stop_reason_with(
        planned,
        finished,
        max_fail,
        INTERRUPTED.load(Ordering::SeqCst),
    )
}

fn stop_reason_with(
    planned: usize,
    finished: &[Finished],
    max_fail: Option<usize>,
    interrupted: bool,
) -> Option<String> {
    let not_run = planned.saturating_sub(finished.len());
    if interrupted {
        return Some(format!(
            "interrupted (Ctrl-C or SIGTERM); {not_run} planned cells did not run, and stage 2's recovery cuts may not all have been planned"
        ));
    }
    if not_run == 0 {
        return None;
    }
    let failed = finished
        .iter()
        .filter(|f| f.result.verdict != Verdict::Pass)
        .count();
    Some(match max_fail {
        Some(n) if failed >= n => format!(
            "stopped after {failed} cells did not pass (--max-fail {n}); {not_run} planned cells did not run"
        ),
        _ => format!("{not_run} planned cells did not run"),
    })
}

/// What identifies a wave and how it ran, besides its cells.
pub struct WaveMeta {
    /// The wave id ([`wave_id`]).
    pub wave_id: String,
    /// The wave seed.
    pub seed: u64,
    /// Shard `i/n`, if sharded.
    pub shard: Option<(u32, u32)>,
    /// Parallel cells.
    pub jobs: usize,
    /// How the cells ran.
    pub run: RunConfig,
    /// Scenario ids that could not run here.
    pub skipped: Vec<crate::model::Skipped>,
    /// Which stages of its plan the wave runs.
    pub stages: crate::model::Stages,
}

/// Cells of each scenario id of a real product's profile that a wave runs
/// when `--only` does not name the profile: a real product's cell costs
/// about twice a fake's, and its every cell runs with `--only`.
pub const REAL_CELLS_UNNAMED: usize = 40;

/// `cells` with those of each real product's scenario id sampled to
/// [`REAL_CELLS_UNNAMED`] (by `seed`), unless `only` names that profile;
/// prints what it left out.
pub fn sample_real(
    cells: Vec<CellSpec>,
    only: Option<&str>,
    seed: u64,
    progress: &crate::progress::Progress,
) -> Vec<CellSpec> {
    let sampled =
        |p: &str| wire::profiles::real(p).is_some() && !only.is_some_and(|o| o.contains(p));
    let mut by_id: std::collections::BTreeMap<String, Vec<CellSpec>> = Default::default();
    let mut out = Vec::new();
    for c in cells {
        if sampled(c.scenario_id.profile()) {
            by_id.entry(c.scenario_id.to_string()).or_default().push(c);
        } else {
            out.push(c);
        }
    }
    for (id, cells) in by_id {
        let all = cells.len();
        let kept = plan::sample(cells, Some(REAL_CELLS_UNNAMED), seed);
        if kept.len() < all {
            progress.note(&format!(
                "sampled {} of {all} cells of {id} (a real product; --only {} runs them all)",
                kept.len(),
                crate::scenario::profile_of(&id)
            ));
        }
        out.extend(kept);
    }
    crate::model::sort_cells(&mut out, |c| &c.cell_id);
    out
}

/// `ids` split into those that can run here and those that cannot (a real
/// product that is not installed), each of those with its reason.
pub fn split_skipped(
    ids: Vec<String>,
    progress: &crate::progress::Progress,
) -> (Vec<String>, Vec<crate::model::Skipped>) {
    let mut run = Vec::new();
    let mut skipped = Vec::new();
    for id in ids {
        match crate::real::unavailable(crate::scenario::profile_of(&id), progress) {
            Some(reason) => skipped.push(crate::model::Skipped {
                scenario_id: id,
                reason,
            }),
            None => run.push(id),
        }
    }
    (run, skipped)
}

/// `cells` split into those that can run here and the power-cut cells
/// that cannot (FUSE cannot be mounted: `lazyfs::unavailable`), each of
/// those listed by its name with the reason: skipped, never passed.
pub fn split_power_cut(cells: Vec<CellSpec>) -> (Vec<CellSpec>, Vec<crate::model::Skipped>) {
    split_power_cut_with(cells, lazyfs::unavailable())
}

fn split_power_cut_with(
    cells: Vec<CellSpec>,
    unavailable: Option<String>,
) -> (Vec<CellSpec>, Vec<crate::model::Skipped>) {
    let Some(why) = unavailable else {
        return (cells, Vec::new());
    };
    let (cut, run): (Vec<CellSpec>, Vec<CellSpec>) = cells
        .into_iter()
        .partition(|c| c.schedule().is_some_and(crate::cell::needs_lazy_mounts));
    let skipped = cut
        .iter()
        .map(|c| crate::model::Skipped {
            scenario_id: c.name(),
            reason: format!(
                "a power-cut cell needs a lazy mount, and FUSE cannot be used here: {why}"
            ),
        })
        .collect();
    (run, skipped)
}

/// Assembles a wave of `planned` cells of which `finished` ran.
/// Runs `cells` `times` times over (`wave --repeat`), each time on `jobs`
/// threads; one result list per round.
pub fn run_repeated(
    env: &CellEnv,
    scenarios: &[Scenario],
    cells: &[CellSpec],
    jobs: usize,
    times: usize,
) -> Vec<Vec<Finished>> {
    (0..times.max(1))
        .map(|round| {
            env.progress
                .note(&format!("round {} of {times}", round + 1));
            run_cells(env, scenarios, cells, jobs)
        })
        .collect()
}

/// A cell whose verdict or recovery path differed between rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unstable {
    /// The cell's name.
    pub name: String,
    /// `verdict path` of each round, in round order.
    pub rounds: Vec<String>,
}

/// The cells whose verdict or path differ between `rounds` (each in cell-id
/// order, as [`run_cells`] returns them).
pub fn unstable(rounds: &[Vec<Finished>]) -> Vec<Unstable> {
    let Some(first) = rounds.first() else {
        return Vec::new();
    };
    let seen = |f: &Finished| {
        let reached = if f.result.spec.cut().is_some() && !f.result.outcome.reached_cut {
            " (cut not reached)"
        } else if f.result.retried.is_some() {
            // Reached only on its second attempt: the first one missed.
            " (cut reached on the second attempt)"
        } else {
            ""
        };
        format!(
            "{} {}{reached}",
            f.result.verdict.as_str(),
            f.result.outcome.path
        )
    };
    let mut out = Vec::new();
    for (i, cell) in first.iter().enumerate() {
        let all: Vec<String> = rounds.iter().filter_map(|r| r.get(i)).map(seen).collect();
        if all.iter().any(|s| *s != all[0]) {
            out.push(Unstable {
                name: cell.result.spec.name(),
                rounds: all,
            });
        }
    }
    out
}

/// Assembles a wave.
pub fn wave_result(
    meta: &WaveMeta,
    started: Instant,
    finished: &[Finished],
    planned: usize,
    stopped: Option<String>,
) -> WaveResult {
    WaveResult {
        v: WAVE_FORMAT_VERSION,
        wave_id: meta.wave_id.clone(),
        seed: meta.seed,
        shard: meta.shard,
        jobs: meta.jobs,
        duration_ms: started.elapsed().as_millis() as u64,
        cells: finished.iter().map(|f| f.result.clone()).collect(),
        run: meta.run.clone(),
        not_run: planned.saturating_sub(finished.len()),
        stopped,
        skipped: meta.skipped.clone(),
        stages: meta.stages,
    }
}

/// `w-s<seed>-<8 hex digits>`: the seed and a hash of the planned cells
/// (before sharding), so every shard of one wave, on any machine and at any
/// time, gets the same id and `report merge` can join them.
pub fn wave_id(seed: u64, planned: &[CellSpec]) -> String {
    let mut h = plan::mix(seed);
    for c in planned {
        h = plan::cell_seed(h, &format!("{} {}", c.cell_id, c.name()));
    }
    format!("w-s{seed}-{:08x}", h >> 32)
}

/// Set by the first Ctrl-C or SIGTERM: no new cell starts, the running ones
/// finish (their teardown stops every process they started, a real product
/// the runner left behind included) and the partial report is written. A
/// second one ends turncut at once.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: nix::libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the Ctrl-C handler of a wave (SIGINT and SIGTERM, one-shot:
/// the handler resets itself, so the second signal has the default effect).
pub fn install_interrupt_handler() {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(on_sigint),
        SaFlags::SA_RESETHAND | SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        let _ = unsafe { sigaction(signal, &action) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cut, Fault, Outcome};

    /// A generated program's schedule goes before a file's power cut, which
    /// goes before its plain kill and its clean run; ties keep plan order.
    #[test]
    fn a_stage_takes_its_longest_cells_first() {
        let cell = |id: &str, scenario: &str, schedule: &str| {
            let events = crate::model::parse_schedule(schedule).unwrap_or_default();
            plan::schedule_cell(1, id.into(), scenario.into(), &events)
        };
        let file = "restart-chaos.runner-codex.local.c";
        let generated = "generated.runner-codex.local.seed1-p0";
        let cells = vec![
            cell("t001", file, ""),
            cell("t002", file, "runner.turn_intent.persisted#1/kill-runner"),
            cell("t003", file, "runner.turn_intent.persisted#1/power-cut"),
            cell(
                "t004",
                generated,
                "runner.turn_intent.persisted#1/kill-runner+runner.turn_accepted.persisted#1/fail-write",
            ),
            cell("t005", file, "runner.turn_accepted.persisted#1/kill-runner"),
        ];
        let order: Vec<String> = longest_first(&cells, expected_ms)
            .into_iter()
            .map(|c| c.cell_id)
            .collect();
        assert_eq!(order, ["t004", "t003", "t002", "t005", "t001"]);
    }

    #[test]
    fn without_fuse_every_power_cut_cell_is_skipped_with_the_reason() {
        let cell = |id: &str, first: Fault, then: Option<Fault>| {
            let cut = |p: &str| Cut {
                point: p.into(),
                n: 1,
            };
            let mut events = vec![crate::model::Event {
                cut: cut("runner.turn_intent.persisted"),
                fault: first,
            }];
            events.extend(then.map(|fault| crate::model::Event {
                cut: cut("runner.turn_accepted.persisted"),
                fault,
            }));
            plan::schedule_cell(1, id.into(), "s.runner-codex.local.c".into(), &events)
        };
        let cells = vec![
            cell("t001", Fault::KillBoth, None),
            cell("t002", Fault::PowerCut, None),
            cell("t003", Fault::KillRunner, Some(Fault::PowerCut)),
        ];
        let (run, skipped) = split_power_cut_with(cells.clone(), None);
        assert_eq!((run.len(), skipped.len()), (3, 0), "FUSE here: all run");
        let (run, skipped) = split_power_cut_with(cells, Some("no /dev/fuse".into()));
        assert_eq!(run.len(), 1);
        assert_eq!(run[0].cell_id, "t001");
        assert_eq!(skipped.len(), 2);
        assert!(skipped.iter().all(|s| s.reason.contains("no /dev/fuse")));
        assert!(skipped[1].scenario_id.contains("/power-cut"), "{skipped:?}");
    }

    fn finished(id: &str, verdict: Verdict, path: &str, reached: bool) -> Finished {
        Finished {
            result: CellResult {
                spec: CellSpec {
                    cell_id: id.into(),
                    scenario_id: "s.runner-codex.local.c".into(),
                    seed: 1,
                    events: vec![crate::model::Event {
                        cut: Cut {
                            point: format!("runner.p{id}"),
                            n: 1,
                        },
                        fault: Fault::KillRunner,
                    }],
                },
                verdict,
                oracles: Vec::new(),
                outcome: Outcome {
                    path: path.into(),
                    reached_cut: reached,
                    ..Outcome::default()
                },
                duration_ms: 1,
                reproduce: String::new(),
                error: None,
                retried: None,
                reruns: Vec::new(),
            },
            evidence: None,
            timeline: String::new(),
            kept: None,
        }
    }

    /// A stranded task stops the cell's steps at the deadline: that error is
    /// the runner's, so liveness failing there is a catch; any other error
    /// is the harness's and never one, whatever failed beside it.
    #[test]
    fn a_deadline_the_runner_let_pass_is_a_catch_and_a_harness_error_is_not() {
        let mut r = finished("t001", Verdict::Fail, "", true).result;
        r.oracles = vec![crate::model::OracleResult {
            oracle: crate::oracles::Oracle::Liveness,
            verdict: Verdict::Fail,
            message: "the task is still running after the cell's deadline".into(),
            evidence: Vec::new(),
        }];
        assert!(caught(&r));
        r.error = Some("follow_up f1: no answer before the deadline".into());
        assert!(!caught(&r), "an error the cell cannot place is no catch");
        r.outcome.deadline_passed = true;
        assert!(caught(&r));
        r.oracles[0].oracle = crate::oracles::Oracle::Vacuity;
        assert!(!caught(&r), "a missed cut catches nothing");
    }

    /// A wave interrupted after every cell it had counted ran (in stage
    /// 2's planning, or with stage 2's cells not yet counted) is stopped,
    /// never whole: it once reported all pass and exited 0.
    #[test]
    fn an_interrupted_wave_is_stopped_even_with_every_counted_cell_run() {
        let done = vec![finished("t001", Verdict::Pass, "completed", true)];
        assert_eq!(stop_reason_with(1, &done, None, false), None);
        let why = stop_reason_with(1, &done, None, true).expect("stopped");
        assert!(
            why.contains("interrupted") && why.contains("0 planned"),
            "{why}"
        );
        let why = stop_reason_with(3, &done, Some(5), false).expect("stopped");
        assert_eq!(why, "2 planned cells did not run");
    }

    #[test]
    fn unstable_lists_cells_whose_verdict_or_path_differ() {
        let round = |p2: &str, v3: Verdict, reached: bool| {
            vec![
                finished("t001", Verdict::Pass, "completed", true),
                finished("t002", Verdict::Pass, p2, true),
                finished("t003", v3, "completed", reached),
            ]
        };
        let rounds = vec![
            round("continued → completed", Verdict::Pass, true),
            round(
                "failed ambiguous_turn_start → retry → completed",
                Verdict::Pass,
                true,
            ),
            round("continued → completed", Verdict::Fail, false),
        ];
        let u = unstable(&rounds);
        let names: Vec<&str> = u.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "s.runner-codex.local.c@runner.pt002#1/kill-runner",
                "s.runner-codex.local.c@runner.pt003#1/kill-runner"
            ]
        );
        assert_eq!(u[1].rounds[2], "fail completed (cut not reached)");
        assert_eq!(
            crate::model::unreached(
                &rounds[2]
                    .iter()
                    .map(|f| f.result.clone())
                    .collect::<Vec<_>>()
            ),
            1
        );
        assert!(unstable(&rounds[..1]).is_empty());
    }

    #[test]
    fn wave_ids_depend_on_the_seed_and_the_planned_cells_only() {
        let cells = plan::number(7, vec![("s.a".to_owned(), None), ("s.b".to_owned(), None)]);
        let id = wave_id(7, &cells);
        assert!(id.starts_with("w-s7-"), "{id}");
        assert_eq!(id.len(), "w-s7-".len() + 8, "{id}");
        assert_eq!(wave_id(7, &cells), id, "deterministic");
        assert_ne!(wave_id(8, &cells), id);
        assert_ne!(wave_id(7, &cells[..1]), id);
    }
}
