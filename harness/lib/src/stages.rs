//! A wave's two stages as one pipeline on `--jobs` threads: the one-cut
//! cells (stage 1), the traced recoveries of the paths they walked, and the
//! recovery cuts (stage 2, `recuts`).
//!
//! Stage 2 is a function of the whole of stage 1: a path's representative
//! is the first cell (by `recuts::representatives`' order) that walked it.
//! But the last cells of stage 1 run a few at a time, and a representative
//! is fixed as soon as no unfinished stage-1 cell could take its place
//! (`recuts::settled`). So once every stage-1 cell has started, a thread
//! with nothing else to do traces a settled representative, and then runs
//! the recovery cuts of its path, while the last stage-1 cells finish: the
//! cores do not wait for the slowest cell of stage 1, nor for the slowest
//! traced run. The cells are the same as `turncut plan --stage2` computes
//! from the finished stage 1; only when they run changes.
//!
//! A stage-2 cell's progress line waits until stage 2's size is known
//! (every representative traced): each stage is one batch on the console.
//!
//! Which cell is taken next: with a fail budget, each scenario's (in stage
//! 2, each representative's) cells in plan order, spread over the stage
//! ([`spread`]); without one, the longest first (`wave::longest_first`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};

use crate::cell::CellEnv;
use crate::model::{CellResult, CellSpec, Verdict};
use crate::progress::ProgressEvent;
use crate::recuts::{self, Reach, Representative, Stage2};
use crate::scenario::Scenario;
use crate::wave::{self, Finished, StopAfter};

/// What a wave's two stages ran.
pub struct Stages {
    /// The finished cells of both stages.
    pub finished: Vec<Finished>,
    /// What stage 2 reached, if every stage-1 cell ran.
    pub reach: Option<Reach>,
    /// The stage-2 cells planned (kept by the budget), run or not: a wave
    /// stopped inside stage 2 counts the rest as not run.
    pub stage2_planned: usize,
}

/// Runs a wave's cells (stage 1) and, unless stage 1 stopped early, the
/// recovery cuts of the paths they walked (stage 2), on `jobs` threads.
/// `stop` counts the cells of both stages that did not pass: once it is
/// reached no cell starts, though representatives are still traced, so
/// that the planned count of a wave stopped after its stage 1 is whole.
pub fn run_stages(
    env: &CellEnv,
    scenarios: &[Scenario],
    cells: &[CellSpec],
    jobs: usize,
    stop: Option<StopAfter>,
    stage2: Option<Stage2>,
) -> Stages {
    // A wave that stops at its first failures (`--max-fail`, `mutants`)
    // takes every scenario's first cell first ([`spread`]); one that runs
    // everything, the longest cells first.
    let first = match stop {
        Some(_) => spread(cells),
        None => wave::longest_first(cells, wave::expected_ms),
    };
    let pipe = Pipeline {
        env,
        scenarios,
        first: &first,
        stop,
        stage2,
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
    };
    env.progress
        .emit(ProgressEvent::Batch { total: first.len() });
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| pipe.work());
        }
    });
    pipe.finish()
}

/// `cells` in plan order within each scenario id, each id's cells spread
/// evenly over the stage ([`place`]): the first cell of every id comes
/// first (the simplest, a clean run where there is one, so a broken runner
/// fails a cell it is easy to read, and soon), and no stretch of the stage
/// is one scenario's cells alone. Some scenarios' cells mostly wait (a
/// provider's retry, a runner's idle timer): run together, as plan order
/// left them at the end of stage 1, they kept the cores half idle for ten
/// seconds.
fn spread(cells: &[CellSpec]) -> Vec<CellSpec> {
    let mut size: BTreeMap<&str, usize> = BTreeMap::new();
    for c in cells {
        *size.entry(c.scenario_id.as_str()).or_default() += 1;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut placed: Vec<(u64, usize)> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let id = c.scenario_id.as_str();
            let k = seen.entry(id).or_default();
            *k += 1;
            (place(*k - 1, size[id]), i)
        })
        .collect();
    placed.sort();
    placed.into_iter().map(|(_, i)| cells[i].clone()).collect()
}

/// Where the `k`-th (from 0) of `n` cells of one group sits in a stage, in
/// millionths: the first at the start, each other one in the middle of its
/// part of the stage.
fn place(k: usize, n: usize) -> u64 {
    match k {
        0 => 0,
        _ => ((2 * k - 1) as u64 * 500_000) / (n - 1).max(1) as u64,
    }
}

/// The note that opens stage 2.
const TRACING: &str = "stage 2: tracing the recovery of each path the one-cut cells walked …";

/// The work a thread takes next.
enum Task {
    /// A stage-1 cell (its index in `first`).
    First(usize),
    /// The traced run of a settled representative.
    Trace(Representative),
    /// A stage-2 cell.
    Second(CellSpec),
}

/// The order stage-2 cells are taken in: a cost first (0 when the wave
/// takes plan order), then the representative's cell id
/// (`model::cell_id_key`), then the cell's number among its recovery cuts.
type Order = (u64, (String, usize, String), usize);

/// The shared state of the pipeline.
struct Pipeline<'a> {
    env: &'a CellEnv,
    scenarios: &'a [Scenario],
    first: &'a [CellSpec],
    stop: Option<StopAfter>,
    stage2: Option<Stage2>,
    state: Mutex<State>,
    wake: Condvar,
}

/// What has been taken and what has finished.
#[derive(Default)]
struct State {
    /// Stage-1 cells taken.
    taken: usize,
    /// Stage-1 cells running (indices in `first`).
    running: BTreeSet<usize>,
    /// Stage-1 results so far.
    stage1: Vec<CellResult>,
    /// Cells that did not pass, and of them the catches (`wave::caught`).
    failed: usize,
    caught: usize,
    /// Representatives settled and not yet taken, the costliest first.
    ready: Vec<Representative>,
    /// Representatives taken (by cell id).
    traced: BTreeSet<String>,
    /// Traces running.
    tracing: usize,
    /// What each traced representative gave (its cells those the budget
    /// keeps), by its cell id.
    reached: BTreeMap<String, recuts::RepCells>,
    /// Stage-2 cells not yet taken, by the order they are taken in.
    queue: BTreeMap<Order, CellSpec>,
    /// Stage-2 cells running.
    running2: usize,
    /// Stage 2's size, once every representative is traced.
    total2: Option<usize>,
    /// Stage-2 results finished before `total2` was known, for the console.
    unshown: Vec<CellResult>,
    /// Stage-2 cells shown on the console.
    shown2: usize,
    /// Every finished cell.
    finished: Vec<Finished>,
}

impl Pipeline<'_> {
    /// One thread: takes work until there is none left.
    fn work(&self) {
        while let Some(task) = self.take() {
            match task {
                Task::First(i) => {
                    let done = wave::run_one(self.env, self.scenarios, &self.first[i]);
                    self.first_done(i, done);
                }
                Task::Trace(rep) => {
                    let traced = recuts::trace(self.env, self.scenarios, &rep);
                    self.traced(rep, traced);
                }
                Task::Second(spec) => {
                    let done = wave::run_one(self.env, self.scenarios, &spec);
                    self.second_done(done);
                }
            }
            self.wake.notify_all();
        }
        self.wake.notify_all();
    }

    /// The next task, waiting while none is ready but some may come; none
    /// once nothing is left (or the wave is interrupted).
    fn take(&self) -> Option<Task> {
        let mut st = self.state.lock().expect("pipeline");
        loop {
            if wave::INTERRUPTED.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(task) = self.next(&mut st) {
                return Some(task);
            }
            if self.over(&st) {
                return None;
            }
            st = self.wake.wait(st).expect("pipeline");
        }
    }

    /// Whether the fail budget is spent.
    fn stopped(&self, st: &State) -> bool {
        match self.stop {
            None => false,
            Some(StopAfter::NotPassing(n)) => st.failed >= n,
            Some(StopAfter::Caught(n)) => st.caught >= n,
        }
    }

    /// Whether stage 2 is under way: it was asked for, and every stage-1
    /// cell was taken.
    fn second_stage(&self, st: &State) -> bool {
        self.stage2.is_some() && st.taken == self.first.len()
    }

    /// The task to take now, if one is ready: a stage-1 cell (until the
    /// fail budget is spent), else a settled representative's trace (even
    /// then, so stage 2's size is whole), else a stage-2 cell.
    fn next(&self, st: &mut State) -> Option<Task> {
        let stopped = self.stopped(st);
        if st.taken < self.first.len() {
            if stopped {
                return None;
            }
            st.taken += 1;
            st.running.insert(st.taken - 1);
            return Some(Task::First(st.taken - 1));
        }
        if self.second_stage(st) && !st.ready.is_empty() {
            let rep = st.ready.remove(0);
            if st.traced.is_empty() {
                self.env.progress.note(TRACING);
            }
            st.traced.insert(rep.cell_id.clone());
            st.tracing += 1;
            return Some(Task::Trace(rep));
        }
        if stopped {
            return None;
        }
        let (_, spec) = st.queue.pop_first()?;
        st.running2 += 1;
        Some(Task::Second(spec))
    }

    /// Whether no task is left, now or to come: nothing runs that could
    /// settle a representative or add a cell.
    fn over(&self, st: &State) -> bool {
        let idle = st.running.is_empty() && st.tracing == 0 && st.running2 == 0;
        let stage1_over = st.taken == self.first.len() || self.stopped(st);
        idle && stage1_over && (st.queue.is_empty() || self.stopped(st)) && st.ready.is_empty()
    }

    fn first_done(&self, i: usize, done: Finished) {
        let mut st = self.state.lock().expect("pipeline");
        st.running.remove(&i);
        self.count(&mut st, &done.result);
        st.stage1.push(done.result.clone());
        let n = st.stage1.len();
        self.env.progress.emit(ProgressEvent::Cell {
            done: n,
            total: self.first.len(),
            result: &done.result,
        });
        st.finished.push(done);
        if n == self.first.len() {
            self.env.progress.emit(ProgressEvent::BatchDone);
        }
        self.settle(&mut st);
    }

    /// Counts a cell that did not pass against the fail budget.
    fn count(&self, st: &mut State, r: &CellResult) {
        if r.verdict != Verdict::Pass {
            st.failed += 1;
            if wave::caught(r) {
                st.caught += 1;
            }
        }
    }

    /// Adds the representatives no unfinished stage-1 cell can displace to
    /// `ready` (every one, once stage 1 is over), the costliest first.
    fn settle(&self, st: &mut State) {
        if !self.second_stage(st) {
            return;
        }
        let running: Vec<&CellSpec> = st.running.iter().map(|&i| &self.first[i]).collect();
        let settled = recuts::settled(self.scenarios, &st.stage1, &running);
        let took = recuts::stage1_ms(&st.stage1);
        for rep in settled {
            let known = st.traced.contains(&rep.cell_id)
                || st.ready.iter().any(|r| r.cell_id == rep.cell_id);
            if !known {
                st.ready.push(rep);
            }
        }
        st.ready
            .sort_by_key(|r| std::cmp::Reverse(took.get(r.cell_id.as_str()).copied()));
        self.announce(st);
    }

    fn traced(&self, rep: Representative, traced: recuts::Traced) {
        let s2 = self.stage2.expect("stage 2 is traced only when asked for");
        let mut got = recuts::rep_cells(&rep, traced, s2.wave_seed);
        got.cells
            .retain(|c| recuts::kept(c, s2.wave_seed, s2.keep_ppm));
        let mut st = self.state.lock().expect("pipeline");
        st.tracing -= 1;
        let took = st
            .stage1
            .iter()
            .find(|r| r.spec.cell_id == rep.cell_id)
            .map_or(0, |r| r.duration_ms);
        let (prefix, len, number, _) = crate::model::cell_id_key(&rep.cell_id);
        for (k, c) in got.cells.iter().enumerate() {
            // Spread over the stage when the wave stops at its first
            // failures; else the longest representative's cells first (its
            // time orders them: a recovery cut walks its path and then some).
            let first = match self.stop {
                Some(_) => place(k, got.cells.len()),
                None => u64::MAX - took,
            };
            let order = (first, (prefix.to_owned(), len, number.to_owned()), k);
            st.queue.insert(order, c.clone());
        }
        st.reached.insert(rep.cell_id.clone(), got);
        self.announce(&mut st);
    }

    /// Once every representative is traced: stage 2 opens.
    fn announce(&self, st: &mut State) {
        let whole = st.stage1.len() == self.first.len();
        if st.total2.is_none() && whole && st.ready.is_empty() && st.tracing == 0 {
            self.open(st);
        }
    }

    /// Stage 2's summary and batch, and the lines of the stage-2 cells that
    /// finished before.
    fn open(&self, st: &mut State) {
        if self.stage2.is_none() {
            return;
        }
        let total = Self::planned2(st);
        st.total2 = Some(total);
        if st.traced.is_empty() {
            self.env.progress.note(TRACING);
        }
        self.env.progress.note(&self.reach(st).summary(total));
        self.env.progress.emit(ProgressEvent::Batch { total });
        if total == 0 {
            self.env.progress.emit(ProgressEvent::BatchDone);
        }
        for r in std::mem::take(&mut st.unshown) {
            self.show2(st, &r);
        }
    }

    /// Stage 2's cells (those the budget keeps: [`Pipeline::traced`]
    /// keeps no other).
    fn planned2(st: &State) -> usize {
        st.reached.values().map(|g| g.cells.len()).sum()
    }

    fn second_done(&self, done: Finished) {
        let mut st = self.state.lock().expect("pipeline");
        st.running2 -= 1;
        self.count(&mut st, &done.result);
        match st.total2 {
            Some(_) => self.show2(&mut st, &done.result),
            None => st.unshown.push(done.result.clone()),
        }
        st.finished.push(done);
    }

    fn show2(&self, st: &mut State, r: &CellResult) {
        st.shown2 += 1;
        let total = st.total2.unwrap_or(0);
        self.env.progress.emit(ProgressEvent::Cell {
            done: st.shown2,
            total,
            result: r,
        });
        if st.shown2 == total {
            self.env.progress.emit(ProgressEvent::BatchDone);
        }
    }

    /// What stage 2 reached: the representatives of the whole of stage 1,
    /// in their order, each traced or not.
    fn reach(&self, st: &State) -> Reach {
        let mut reach = Reach::default();
        for rep in recuts::representatives(self.scenarios, &st.stage1) {
            match st.reached.get(&rep.cell_id) {
                Some(got) => reach.add(&rep, got),
                None => reach.undiscovered.push((
                    format!("{}@{}", rep.scenario_id, rep.first),
                    "interrupted before it was traced".into(),
                )),
            }
        }
        reach
    }

    /// The stages' outcome, once every thread is done.
    fn finish(&self) -> Stages {
        let mut st = std::mem::take(&mut *self.state.lock().expect("pipeline"));
        let whole = st.stage1.len() == self.first.len();
        if !whole || self.first.is_empty() {
            // Stage 1 stopped, was interrupted or had no cell: its batch
            // ends here.
            self.env.progress.emit(ProgressEvent::BatchDone);
        }
        if whole && st.total2.is_none() && self.stage2.is_some() {
            // Interrupted while tracing: what was traced is stage 2.
            self.open(&mut st);
        }
        if st.total2.is_some_and(|t| st.shown2 < t) {
            self.env.progress.emit(ProgressEvent::BatchDone);
        }
        let reach = self.stage2.filter(|_| whole).map(|_| self.reach(&st));
        let stage2_planned = st.total2.unwrap_or(0);
        crate::model::sort_cells(&mut st.finished, |f| &f.result.spec.cell_id);
        Stages {
            finished: st.finished,
            reach,
            stage2_planned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(id: &str, scenario: &str) -> CellSpec {
        crate::plan::schedule_cell(1, id.into(), scenario.into(), &[])
    }

    /// Each scenario's cells keep their plan order, every scenario's first
    /// cell comes before any second one, and a scenario's cells are spread
    /// over the stage instead of run in one stretch.
    #[test]
    fn a_stage_takes_every_scenario_s_first_cell_first_and_spreads_the_rest() {
        let a = "restart-chaos.runner-codex.local.a";
        let b = "restart-chaos.runner-codex.local.b";
        let c = "restart-chaos.runner-codex.local.c";
        let cells = [
            cell("t1", a),
            cell("t2", a),
            cell("t3", a),
            cell("t4", a),
            cell("t5", b),
            cell("t6", b),
            cell("t7", c),
        ];
        let order: Vec<String> = spread(&cells).into_iter().map(|c| c.cell_id).collect();
        assert_eq!(order, ["t1", "t5", "t7", "t2", "t3", "t6", "t4"]);
        assert_eq!(place(0, 4), 0);
        assert_eq!(place(1, 4), 166_666);
        assert_eq!(place(3, 4), 833_333);
        assert!(spread(&[]).is_empty());
    }
}
