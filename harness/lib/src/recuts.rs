//! Every recovery cut twice, by design rather than by draw: the second
//! stage of a wave.
//!
//! The one-cut cells of a wave (stage 1) each walk a recovery path (the
//! snapshot's path words: `continued → completed`, `re-sent → completed`, `failed
//! ambiguous_turn_start → retry → completed`, …). For every path a profile's
//! one-cut cells walked, in each scenario shape, the first cell that walked
//! it (in cell order) is its representative: a traced run of its event
//! (made again, up to three runs, until it walks the representative's path)
//! lists the boundaries of the recovery that follows, and each boundary of
//! that recovery — and where the path goes through a Retry, each boundary
//! of the Retry up to its first accepted turn — gets a second event:
//! `kill-runner`, `kill-provider` where a provider is alive, and
//! `fail-write` at the runner's before-write points; at its before-read
//! points only `fail-read` (the recovery's own reads of what it decides
//! from: a failed read read as "no such turn" lives there). The kills keep
//! three boundaries per durable segment of the recovery, as stage 1's
//! one-cut cells do ([`trim_by_segment`]): a kill anywhere in a segment
//! leaves the same durable state.
//!
//! A random draw put a second fault inside a recovery 126 times in a wave
//! of 6,136 cells and never inside a Retry's own writes; bugs that live
//! there (a lookup error read as "absent", a Retry made current by a second
//! write, a Retry that re-sends an answered message) passed every cell.
//!
//! This module chooses the cells; `wave` runs them after stage 1.

use std::collections::BTreeMap;

use crate::cell::CellEnv;
use crate::model::{CellResult, CellSpec, Event, Fault, READ_POINTS, Role, WRITE_POINTS};
use crate::plan::{self, Boundary};
use crate::scenario::{self, Scenario};

/// The path whose recovery is cut, and the stage-1 cell that walked it
/// first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Representative {
    /// The scenario id of the cell.
    pub scenario_id: String,
    /// Its one event.
    pub first: Event,
    /// The path it walked.
    pub path: String,
    /// The stage-1 cell.
    pub cell_id: String,
}

/// What stage 2 reached, for the report and the closing figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// Paths per profile (with their representative's recovery size).
    pub paths: BTreeMap<String, Vec<(String, usize)>>,
    /// Representatives whose traced run could not be made (with why).
    pub undiscovered: Vec<(String, String)>,
}

/// How much work a scenario's steps leave waiting behind a recovery: a
/// follow-up sent during the turn or at once, a Retry, a follow-up after
/// the task settled. A path's representative comes from the scenario that
/// leaves the most, so its recovery cuts reach that work too (a Retry that
/// re-sends an answered message while a follow-up waits needs one).
pub fn waiting_work(s: &Scenario) -> usize {
    s.steps
        .iter()
        .map(|step| match step {
            scenario::Step::FollowUp {
                when: scenario::FollowUpWhen::Settled,
                ..
            } => 1,
            scenario::Step::FollowUp { .. } => 2,
            scenario::Step::Retry { .. } => 1,
            _ => 0,
        })
        .sum()
}

/// The representatives of the paths walked by `stage1`'s one-cut cells:
/// per profile and path, the first cell (in cell order) of the scenario
/// that leaves the most work waiting ([`waiting_work`]) among the cells that
/// walked it and reached their cut. The count grows with the paths, not
/// with the boundaries or the scenarios.
pub fn representatives(scenarios: &[Scenario], stage1: &[CellResult]) -> Vec<Representative> {
    // A power cut's recovery walks the paths a kill-both's does, on a state
    // with less in it; cutting it again would put lazy mounts under stage
    // 2's cells, whose count follows the paths ([`rank`] leaves it out).
    let mut cells: Vec<(&CellResult, _)> = stage1
        .iter()
        .filter(|r| r.outcome.reached_cut)
        .filter(|r| !r.outcome.path.is_empty() && r.outcome.path != "unknown")
        .filter_map(|r| Some((r, rank(scenarios, &r.spec)?)))
        .collect();
    cells.sort_by_key(|(_, rank)| *rank);
    let mut seen: BTreeMap<(String, String), Representative> = BTreeMap::new();
    for (r, _) in cells {
        let Some(first) = r.spec.schedule() else {
            continue;
        };
        let key = (
            r.spec.scenario_id.profile().to_owned(),
            r.outcome.path.clone(),
        );
        seen.entry(key).or_insert_with(|| Representative {
            scenario_id: r.spec.scenario_id.to_string(),
            first: first[0].clone(),
            path: r.outcome.path.clone(),
            cell_id: r.spec.cell_id.clone(),
        });
    }
    let mut reps: Vec<Representative> = seen.into_values().collect();
    reps.sort_by(|a, b| {
        crate::model::cell_id_key(&a.cell_id).cmp(&crate::model::cell_id_key(&b.cell_id))
    });
    reps
}

/// A candidate's place: its waiting work, reversed, then its cell id's
/// key (`model::cell_id_key`).
type Rank<'a> = (std::cmp::Reverse<usize>, (&'a str, usize, &'a str, &'a str));

/// Where a stage-1 cell stands among the candidates for a path of its
/// profile ([`representatives`]: the most waiting work first, then cell
/// order), or `None` if it cannot represent one whatever it walks (a
/// deeper cell, a power cut, an unknown scenario).
fn rank<'a>(scenarios: &[Scenario], spec: &'a CellSpec) -> Option<Rank<'a>> {
    if spec.depth() != 1 || spec.fault() == Some(Fault::PowerCut) || spec.schedule().is_none() {
        return None;
    }
    let (s, _) = scenario::find(scenarios, &spec.scenario_id)?;
    Some((
        std::cmp::Reverse(waiting_work(s)),
        crate::model::cell_id_key(&spec.cell_id),
    ))
}

/// The representatives of `finished` that no `running` stage-1 cell can
/// displace: none of them ranks before it in its profile. With every cell
/// of stage 1 finished, these are [`representatives`] of the whole; before,
/// each one given is already the whole's representative of its path, so
/// its recovery cuts can run while the last stage-1 cells finish.
pub fn settled(
    scenarios: &[Scenario],
    finished: &[CellResult],
    running: &[&CellSpec],
) -> Vec<Representative> {
    let open: Vec<_> = running
        .iter()
        .filter_map(|c| Some((c.scenario_id.profile(), rank(scenarios, c)?)))
        .collect();
    let by_id: std::collections::HashMap<&str, &CellSpec> = finished
        .iter()
        .map(|r| (r.spec.cell_id.as_str(), &r.spec))
        .collect();
    representatives(scenarios, finished)
        .into_iter()
        .filter(|rep| {
            let spec = by_id[rep.cell_id.as_str()];
            let mine = rank(scenarios, spec);
            !open
                .iter()
                .any(|(p, r)| *p == spec.scenario_id.profile() && Some(*r) < mine)
        })
        .collect()
}

/// Whether a boundary of a recovery is cut: every boundary but those that
/// only carry a message already decided elsewhere — a provider's
/// notification (`*.notified`) or response (`*.responded`), the runner's
/// receipt of them (`runner.<protocol>.*.received`) — whose kill leaves
/// the same state as the write or request next to it.
pub fn cut_in_recovery(b: &Boundary) -> bool {
    let p = b.cut.point.as_str();
    let runner_receipt =
        p.starts_with("runner.") && p.ends_with(".received") && !p.starts_with("runner.write.");
    !(p.ends_with(".notified") || p.ends_with(".responded") || runner_receipt)
}

/// The recovery after the first event, as the boundaries to cut: every
/// boundary ([`cut_in_recovery`]) up to the first turn accepted after the
/// event (the recovered turn: the restart, the lookup, the decision and
/// its writes, the continuation or re-send), then the runner's writes up to
/// the second acceptance (the next message's turn, whose intent may fail
/// after the recovery); and, when a Retry is admitted later, every boundary
/// from its admission to its first accepted turn (stop proof, fresh
/// conversation, first turn).
pub fn span(after: &[Boundary]) -> Vec<&Boundary> {
    let accepted = |b: &Boundary| b.cut.point == "runner.turn_accepted.persisted";
    let nth_accepted = |n: usize| {
        after
            .iter()
            .enumerate()
            .filter(|(_, b)| accepted(b))
            .nth(n)
            .map_or(after.len(), |(i, _)| i + 1)
    };
    let (first, second) = (nth_accepted(0), nth_accepted(1));
    let mut out: Vec<&Boundary> = after[..first]
        .iter()
        .filter(|b| cut_in_recovery(b))
        .collect();
    out.extend(
        after[first..second]
            .iter()
            .filter(|b| b.cut.point.starts_with(WRITE_POINTS)),
    );
    if let Some(r) = after[second..]
        .iter()
        .position(|b| b.cut.point == "runner.write.retry_admitted")
    {
        let from = second + r;
        let to = after[from..]
            .iter()
            .position(accepted)
            .map_or(after.len(), |i| from + i + 1);
        out.extend(after[from..to].iter().filter(|b| cut_in_recovery(b)));
    }
    out
}

/// The second events at boundary `b`: `kill-runner` everywhere but at a
/// before-read point, `kill-provider` at a provider's own boundary (a
/// provider killed while the runner works is lost at the provider's next
/// boundary anyway), `fail-write` at a before-write point, `error-answer`
/// at a provider's recovery lookup (`wire::upstream::LOOKUP_POINTS`: a
/// lookup happens only in a recovery, where its error decides whether a
/// turn is sent again), and only `fail-read` at a before-read point: a kill
/// there leaves the state of the boundary before it (a read changes
/// nothing), and `corrupt-read` walks the same retry (stage 1 plans both at
/// every read of a clean run).
pub fn second_faults(b: &Boundary) -> Vec<Fault> {
    if b.cut.point.starts_with(READ_POINTS) {
        return vec![Fault::FailRead];
    }
    let write = b.cut.point.starts_with(WRITE_POINTS);
    let mut out = vec![Fault::KillRunner];
    if write {
        out.push(Fault::FailWrite);
    } else if b.role != Role::Runner && b.provider_alive {
        out.push(Fault::KillProvider);
    }
    if wire::upstream::LOOKUP_POINTS.contains(&b.cut.point.as_str()) {
        out.push(Fault::ErrorAnswer);
    }
    out
}

/// The second events of a recovery's `span` (in its trace order), with
/// each process fault kept at [`plan::segment_keep`] boundaries per
/// durable segment of one role, as stage 1 trims its one-cut cells
/// ([`plan::trim_by_segment`]): a kill anywhere in one segment leaves the
/// same durable state, so the recovery from it walks the same path. The
/// storage faults (`fail-write`, `fail-read`) and `error-answer` are kept
/// at every boundary: each fails a different write, read or lookup.
/// `draw` picks the middle boundary a segment keeps.
pub fn trim_by_segment<'a>(span: &[&'a Boundary], draw: u64) -> Vec<(&'a Boundary, Fault)> {
    let seconds: Vec<(&Boundary, Fault)> = span
        .iter()
        .flat_map(|b| second_faults(b).into_iter().map(move |f| (*b, f)))
        .collect();
    let mut members: BTreeMap<((Role, usize), Fault), Vec<usize>> = BTreeMap::new();
    for (i, (b, fault)) in seconds.iter().enumerate() {
        if fault.is_process() {
            members
                .entry(((b.role, b.segment), *fault))
                .or_default()
                .push(i);
        }
    }
    let keep = plan::kept_per_segment(members, draw);
    seconds
        .into_iter()
        .enumerate()
        .filter(|(i, (_, fault))| !fault.is_process() || keep.contains(&(*i, *fault)))
        .map(|(_, s)| s)
        .collect()
}

/// The stage-2 cells of `stage1`, with what they reach. A stage-2 cell is
/// named after its representative: `t042.7` is the seventh recovery cut of
/// `t042`'s path, the same name in every shard and every run that picks
/// the same representative. The traced runs of the representatives run on `jobs`
/// threads.
pub fn recovery_cells(
    env: &CellEnv,
    scenarios: &[Scenario],
    stage1: &[CellResult],
    wave_seed: u64,
    jobs: usize,
) -> (Vec<CellSpec>, Reach) {
    let reps = representatives(scenarios, stage1);
    let took = stage1_ms(stage1);
    let traced = crate::par::map_longest_first(
        &reps,
        jobs,
        |rep| took.get(rep.cell_id.as_str()).copied().unwrap_or(0),
        |rep| trace(env, scenarios, rep),
    );
    let mut reach = Reach::default();
    let mut cells = Vec::new();
    for (rep, after) in reps.iter().zip(traced) {
        let got = rep_cells(rep, after, wave_seed);
        reach.add(rep, &got);
        cells.extend(got.cells);
    }
    (cells, reach)
}

/// What one representative's traced recovery gives.
#[derive(Clone, Debug)]
pub struct RepCells {
    /// The size of its recovery's span, or why it could not be traced.
    pub span: Result<usize, String>,
    /// Its stage-2 cells (before a budget keeps its share, [`kept`]).
    pub cells: Vec<CellSpec>,
}

/// The stage-2 cells of `rep`, from its traced recovery `after`: the
/// second events of the recovery's [`span`] kept by [`trim_by_segment`],
/// numbered in a fixed order.
pub fn rep_cells(rep: &Representative, after: Traced, wave_seed: u64) -> RepCells {
    let after = match after {
        Ok(a) => a,
        Err(e) => {
            return RepCells {
                span: Err(e),
                cells: Vec::new(),
            };
        }
    };
    let span = span(&after);
    let draw = plan::cell_seed(wave_seed ^ 0x5e67, &rep.cell_id);
    let mut seconds = trim_by_segment(&span, draw);
    // Threads of the runner and of a provider interleave by timing, so
    // two traces of one recovery list its boundaries in orders that
    // differ while their set does not: the cells are numbered in a fixed
    // order (runner points first, then by name and occurrence), as the
    // planner numbers stage 1, so `turncut plan --stage2` and a wave's own
    // stage 2 name the same cell the same way.
    seconds.sort_by(|(a, _), (b, _)| {
        (a.role != Role::Runner, &a.cut).cmp(&(b.role != Role::Runner, &b.cut))
    });
    let cells = seconds
        .into_iter()
        .enumerate()
        .map(|(k, (b, fault))| {
            let second = Event {
                cut: b.cut.clone(),
                fault,
            };
            plan::schedule_cell(
                wave_seed,
                format!("{}.{}", rep.cell_id, k + 1),
                rep.scenario_id.clone(),
                &[rep.first.clone(), second],
            )
        })
        .collect();
    RepCells {
        span: Ok(span.len()),
        cells,
    }
}

/// Each stage-1 cell's wall time, by cell id.
pub fn stage1_ms(stage1: &[CellResult]) -> std::collections::HashMap<&str, u64> {
    stage1
        .iter()
        .map(|r| (r.spec.cell_id.as_str(), r.duration_ms))
        .collect()
}

/// How a wave's stage 2 is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage2 {
    /// The wave's seed (stage-2 cells are seeded by it and their names).
    pub wave_seed: u64,
    /// With `--budget`, the share of stage-2 cells kept, in parts per
    /// million: each cell is kept or not by its own seed, so a shard keeps
    /// exactly its part of what the whole wave would.
    pub keep_ppm: Option<u32>,
}

/// Whether stage-2 cell `c` is kept at `keep_ppm`.
pub fn kept(c: &CellSpec, wave_seed: u64, keep_ppm: Option<u32>) -> bool {
    keep_ppm.is_none_or(|ppm| {
        plan::cell_seed(wave_seed ^ 0x2ec7, &c.name()) % 1_000_000 < u64::from(ppm)
    })
}

/// The stage-2 cells of a wave whose stage 1 gave `stage1` (every cell of
/// it: a part would miss paths), kept by `s2`'s budget share: what a wave
/// runs after its stage 1, and what `turncut plan --stage2` plans from the
/// results of every shard's stage 1. The same results give the same cells.
pub fn plan_stage2(
    env: &CellEnv,
    scenarios: &[Scenario],
    stage1: &[CellResult],
    s2: Stage2,
    jobs: usize,
) -> (Vec<CellSpec>, Reach) {
    env.progress
        .note("stage 2: tracing the recovery of each path the one-cut cells walked …");
    let (cells, reach) = recovery_cells(env, scenarios, stage1, s2.wave_seed, jobs);
    let cells: Vec<CellSpec> = cells
        .into_iter()
        .filter(|c| kept(c, s2.wave_seed, s2.keep_ppm))
        .collect();
    env.progress.note(&reach.summary(cells.len()));
    (cells, reach)
}

impl Reach {
    /// Adds what `rep`'s traced recovery gave.
    pub fn add(&mut self, rep: &Representative, got: &RepCells) {
        match &got.span {
            Ok(n) => self
                .paths
                .entry(scenario::profile_of(&rep.scenario_id).to_owned())
                .or_default()
                .push((rep.path.clone(), *n)),
            Err(e) => self
                .undiscovered
                .push((format!("{}@{}", rep.scenario_id, rep.first), e.clone())),
        }
    }

    /// One paragraph for the console: paths per profile and cells.
    pub fn summary(&self, cells: usize) -> String {
        if self.paths.is_empty() {
            return format!(
                "stage 2: {cells} recovery cells: no one-cut cell walked a recovery path"
            );
        }
        let mut text = format!("stage 2: {cells} recovery cells over");
        for (profile, paths) in &self.paths {
            let boundaries: usize = paths.iter().map(|(_, n)| n).sum();
            text.push_str(&format!(
                " {profile} {} paths ({boundaries} boundaries);",
                paths.len()
            ));
        }
        for (rep, why) in &self.undiscovered {
            text.push_str(&format!("\n  not traced {rep}: {why}"));
        }
        text
    }
}

/// A representative's traced recovery, or why it could not be traced.
pub type Traced = Result<Vec<Boundary>, String>;

/// The traced run of `rep`'s event: the boundaries of the recovery after
/// it, from a run that walked `rep`'s path (`discover`).
pub fn trace(env: &CellEnv, scenarios: &[Scenario], rep: &Representative) -> Traced {
    if crate::wave::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        return Err("interrupted before it was traced".into());
    }
    let Some((s, profile)) = scenario::find(scenarios, &rep.scenario_id) else {
        return Err(format!("unknown scenario id {}", rep.scenario_id));
    };
    crate::discover::discover_after_walking(env, s, &profile, &rep.first, Some(&rep.path))
        .map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Cut;

    fn b(point: &str, n: u64, alive: bool) -> Boundary {
        Boundary {
            segment: 0,
            cut: Cut {
                point: point.into(),
                n,
            },
            role: if point.starts_with("runner.") {
                Role::Runner
            } else {
                Role::Provider
            },
            provider_alive: alive,
        }
    }

    #[test]
    fn the_span_is_the_recovered_turn_the_next_writes_and_a_later_retry() {
        let after = vec![
            b("runner.provider_identity.persisted", 1, true),
            b("codex.thread_read.received", 1, true),
            b("codex.thread_read.responded", 1, true),
            b("runner.turn_accepted.persisted", 1, true),
            b("codex.item.recorded", 1, true),
            b("runner.write.turn_intent", 1, true),
            b("runner.turn_intent.persisted", 1, true),
            b("runner.turn_accepted.persisted", 2, true),
            b("runner.run_settled.persisted", 1, false),
            b("runner.write.retry_admitted", 1, false),
            b("runner.retry_admitted.persisted", 1, false),
            b("codex.item_completed.notified", 1, true),
            b("runner.turn_accepted.persisted", 3, true),
            b("runner.turn_ended.persisted", 1, true),
        ];
        let got: Vec<String> = span(&after).iter().map(|b| b.cut.to_string()).collect();
        assert_eq!(
            got,
            [
                "runner.provider_identity.persisted#1",
                "codex.thread_read.received#1",
                "runner.turn_accepted.persisted#1",
                "runner.write.turn_intent#1",
                "runner.write.retry_admitted#1",
                "runner.retry_admitted.persisted#1",
                "runner.turn_accepted.persisted#3",
            ]
        );
        assert_eq!(span(&after[..3]).len(), 2, "no acceptance: to the end");
    }

    fn walked(cell_id: &str, scenario_id: &str, event: &str, path: &str) -> CellResult {
        let events = crate::model::parse_schedule(event).unwrap();
        CellResult::bare(
            plan::schedule_cell(1, cell_id.into(), scenario_id.into(), &events),
            crate::model::Verdict::Pass,
            crate::model::Outcome {
                state: Some(crate::model::TaskState::Completed),
                reached_cut: true,
                path: path.into(),
                ..Default::default()
            },
        )
    }

    /// A path is the whole of it, run by run: a continuation followed by a
    /// follow-up's run is not the continuation of that follow-up's turn,
    /// nor a continuation with nothing after it. Keyed by the recovery
    /// words alone (2026-12-04), stage 2 cut only one of them per profile,
    /// and `retry-decides-by-primary-turn` (a continued turn, then a failed
    /// follow-up run, then a Retry) escaped OpenCode at seed 13.
    #[test]
    fn one_recovery_followed_by_other_runs_is_another_path() {
        let scenarios = scenario::load(None).unwrap();
        let retry = "restart-chaos.runner-codex.local.cut-turn-start-retry";
        let single = "everyday-workflows.runner-codex.local.single-task";
        let stage1 = [
            walked(
                "t001",
                single,
                "runner.turn_accepted.persisted#1/kill-runner",
                "continued → completed",
            ),
            walked(
                "t002",
                retry,
                "runner.turn_accepted.persisted#1/kill-runner",
                "continued → completed → follow-up → completed",
            ),
            walked(
                "t003",
                retry,
                "runner.turn_intent.persisted#1/kill-runner",
                "continued → completed → follow-up → completed",
            ),
            walked(
                "t006",
                retry,
                "runner.turn_accepted.persisted#2/kill-runner",
                "completed → follow-up → continued → completed",
            ),
        ];
        let reps = representatives(&scenarios, &stage1);
        let got: Vec<&str> = reps.iter().map(|r| r.cell_id.as_str()).collect();
        assert_eq!(got, ["t001", "t002", "t006"]);
    }

    /// A representative is settled only when no running cell of its
    /// profile ranks before it; whatever order the cells finish in, each
    /// one settled early is the whole stage's representative of its path.
    #[test]
    fn a_representative_settles_only_when_no_running_cell_can_displace_it() {
        let scenarios = scenario::load(None).unwrap();
        let retry = "restart-chaos.runner-codex.local.cut-turn-start-retry";
        let single = "everyday-workflows.runner-codex.local.single-task";
        let other = "everyday-workflows.runner-opencode.local.single-task";
        let cut = |n: u64| format!("runner.turn_accepted.persisted#{n}/kill-runner");
        let stage1 = [
            walked("t001", single, &cut(1), "continued → completed"),
            walked("t002", retry, &cut(1), "continued → completed"),
            walked("t003", retry, &cut(2), "re-sent → completed"),
            walked("t004", other, &cut(1), "continued → completed"),
            walked("t005", single, &cut(2), "re-sent → completed"),
            walked("t006", other, &cut(2), "re-sent → completed"),
        ];
        let whole = representatives(&scenarios, &stage1);
        let ids = |reps: &[Representative]| -> Vec<String> {
            reps.iter().map(|r| r.cell_id.clone()).collect()
        };
        // The Retry scenario leaves more work waiting than the single task:
        // t002 represents "continued" although t001 comes first.
        assert_eq!(ids(&whole), ["t002", "t003", "t004", "t006"]);
        // t001 finished, t002 running: t001 is no representative yet.
        let running = [&stage1[1].spec];
        assert!(settled(&scenarios, &stage1[..1], &running).is_empty());
        // t004 (another profile) settles while codex's t002 runs.
        let done = [stage1[0].clone(), stage1[3].clone()];
        assert_eq!(ids(&settled(&scenarios, &done, &running)), ["t004"]);
        // Every order of finishing: whatever settles while cells are still
        // unfinished is the whole's representative, and once none is, all
        // of them are settled.
        let mut draw = 7u64;
        for _ in 0..200 {
            let mut order: Vec<usize> = (0..stage1.len()).collect();
            for i in (1..order.len()).rev() {
                draw = draw
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                order.swap(i, (draw >> 33) as usize % (i + 1));
            }
            for k in 0..=order.len() {
                let done: Vec<CellResult> = order[..k].iter().map(|&i| stage1[i].clone()).collect();
                let pending: Vec<&CellSpec> = order[k..].iter().map(|&i| &stage1[i].spec).collect();
                for rep in settled(&scenarios, &done, &pending) {
                    assert!(whole.contains(&rep), "{order:?} at {k}: {rep:?}");
                }
                if k == order.len() {
                    assert_eq!(settled(&scenarios, &done, &pending), whole);
                }
            }
        }
    }

    /// A kill anywhere in one durable segment leaves the same state: a
    /// segment of five runner boundaries keeps three `kill-runner` cells
    /// (its first, its last, one drawn), every `fail-write` and `fail-read`,
    /// and a segment of two keeps both.
    #[test]
    fn a_recovery_keeps_three_kills_a_segment_and_every_storage_fault() {
        let seg = |point: &str, n: u64, segment: usize| Boundary {
            segment,
            ..b(point, n, false)
        };
        let after = [
            seg("runner.turn_intent.persisted", 1, 1),
            seg("runner.turn.sent", 1, 1),
            seg("runner.read.turns", 1, 1),
            seg("runner.write.item", 1, 1),
            seg("runner.write.item", 2, 1),
            seg("runner.write.turn_ended", 1, 1),
            seg("runner.turn_ended.persisted", 1, 2),
            seg("runner.write.run_settled", 1, 2),
        ];
        let span: Vec<&Boundary> = after.iter().collect();
        for draw in 0..20 {
            let kept = trim_by_segment(&span, draw);
            let count = |f: Fault, segment: usize| {
                kept.iter()
                    .filter(|(b, k)| *k == f && b.segment == segment)
                    .count()
            };
            assert_eq!(count(Fault::KillRunner, 1), 3, "draw {draw}");
            assert_eq!(count(Fault::KillRunner, 2), 2);
            assert_eq!(count(Fault::FailWrite, 1), 3);
            assert_eq!(count(Fault::FailRead, 1), 1);
            let first_and_last = [
                "runner.turn_intent.persisted#1",
                "runner.write.turn_ended#1",
            ];
            for cut in first_and_last {
                assert!(
                    kept.iter()
                        .any(|(b, k)| *k == Fault::KillRunner && b.cut.to_string() == cut),
                    "{cut} kept"
                );
            }
        }
    }

    #[test]
    fn second_faults_follow_the_boundary() {
        assert_eq!(
            second_faults(&b("runner.write.turn_intent", 1, true)),
            [Fault::KillRunner, Fault::FailWrite]
        );
        assert_eq!(
            second_faults(&b("codex.thread_read.received", 1, true)),
            [Fault::KillRunner, Fault::KillProvider, Fault::ErrorAnswer]
        );
        assert_eq!(
            second_faults(&b("codex.turn_start.received", 1, true)),
            [Fault::KillRunner, Fault::KillProvider]
        );
        assert_eq!(
            second_faults(&b("runner.run_settled.persisted", 1, false)),
            [Fault::KillRunner]
        );
        assert_eq!(
            second_faults(&b("runner.turn_accepted.persisted", 1, true)),
            [Fault::KillRunner]
        );
        // A read changes nothing: a kill there is the kill before it.
        assert_eq!(
            second_faults(&b("runner.read.turns", 2, true)),
            [Fault::FailRead]
        );
    }
}
