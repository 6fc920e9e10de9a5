//! Running many cells: plan a set of scenarios, run the cells on `--jobs`
//! worker threads, show progress, and collect one `WaveResult`.
//!
//! Progress is a bar on a terminal and one plain line per cell otherwise.
//! Evidence is kept only for cells that did not pass, so a large wave stays
//! small in memory. Writing reports is `report`'s job; this module only runs.

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::cell::{CellEnv, run_cell};
use crate::evidence::Evidence;
use crate::model::{CellResult, CellSpec, Verdict, WAVE_FORMAT_VERSION, WaveResult};
use crate::plan;
use crate::scenario::{self, Scenario};

/// A finished cell kept for the report: its result and, unless it passed,
/// its evidence.
pub struct Finished {
    /// The result.
    pub result: CellResult,
    /// Evidence of a cell that did not pass.
    pub evidence: Option<Evidence>,
}

/// Plans every cell of `ids` (scenario ids) from the scenarios: discovers
/// boundaries with a clean traced run of each, then expands.
pub fn plan_cells(
    env: &CellEnv,
    scenarios: &[Scenario],
    ids: &[String],
    wave_seed: u64,
    quiet: bool,
) -> anyhow::Result<Vec<CellSpec>> {
    let mut all = Vec::new();
    for id in ids {
        let (s, profile) = scenario::find(scenarios, id).ok_or_else(|| {
            anyhow::anyhow!("unknown scenario id {id}; `turncut list` shows the ids")
        })?;
        let d = plan::discover(env, s, &profile)?;
        let cells = plan::expand(s, &d.boundaries)?;
        if !quiet {
            eprintln!(
                "planned {id}: {} boundaries, {} cells (clean run {} in {} ms)",
                d.boundaries.len(),
                cells.len(),
                d.clean_state,
                d.clean_ms
            );
        }
        all.extend(cells.into_iter().map(|(c, f)| (id.clone(), c, f)));
    }
    Ok(plan::number(wave_seed, all))
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

/// Like [`run_cells`], but stops taking new cells once `stop_after` cells
/// did not pass although they reached their armed cut (a cell that missed
/// it tested nothing; cells already running finish).
pub fn run_cells_until(
    env: &CellEnv,
    scenarios: &[Scenario],
    cells: &[CellSpec],
    jobs: usize,
    stop_after: Option<usize>,
) -> Vec<Finished> {
    let bar = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new(cells.len() as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} cells  {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        Some(pb)
    } else {
        None
    };
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let decisive = AtomicUsize::new(0);
    let out: Mutex<Vec<Finished>> = Mutex::new(Vec::with_capacity(cells.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    if stop_after.is_some_and(|n| decisive.load(Ordering::SeqCst) >= n) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(spec) = cells.get(i) else { return };
                    let finished = match scenario::find(scenarios, &spec.scenario_id) {
                        Some((s, profile)) => {
                            // A cell whose armed cut is not reached is not run
                            // again: it is reported as such (vacuity, and the
                            // count in summary.md), never quietly retried.
                            let run = run_cell(env, s, &profile, spec);
                            let evidence =
                                (run.result.verdict != Verdict::Pass).then_some(run.evidence);
                            Finished {
                                result: run.result,
                                evidence,
                            }
                        }
                        None => Finished {
                            result: CellResult {
                                spec: spec.clone(),
                                verdict: Verdict::Unknown,
                                oracles: Vec::new(),
                                outcome: Default::default(),
                                duration_ms: 0,
                                reproduce: String::new(),
                                error: Some(format!("unknown scenario id {}", spec.scenario_id)),
                                retried: None,
                            },
                            evidence: None,
                        },
                    };
                    if finished.result.verdict != Verdict::Pass {
                        failed.fetch_add(1, Ordering::SeqCst);
                        if unreached(std::slice::from_ref(&finished.result)) == 0 {
                            decisive.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    match &bar {
                        Some(pb) => {
                            pb.inc(1);
                            pb.set_message(format!(
                                "{} not passing",
                                failed.load(Ordering::SeqCst)
                            ));
                            if finished.result.verdict != Verdict::Pass {
                                pb.println(crate::report::cell_line(&finished.result));
                            }
                        }
                        None => eprintln!("{}", crate::report::cell_line(&finished.result)),
                    }
                    out.lock().expect("results").push(finished);
                }
            });
        }
    });
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let mut v = out.into_inner().expect("results");
    v.sort_by(|a, b| a.result.spec.cell_id.cmp(&b.result.spec.cell_id));
    v
}

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
            eprintln!("round {} of {times}", round + 1);
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
        let reached = if f.result.spec.cut.is_some() && !f.result.outcome.reached_cut {
            " (cut not reached)"
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

/// Cells whose armed cut was not reached.
pub fn unreached(cells: &[CellResult]) -> usize {
    cells
        .iter()
        .filter(|c| c.spec.cut.is_some() && !c.outcome.reached_cut)
        .count()
}

/// Assembles a wave.
pub fn wave_result(
    wave_id: &str,
    seed: u64,
    shard: Option<(u32, u32)>,
    jobs: usize,
    started: Instant,
    finished: &[Finished],
) -> WaveResult {
    WaveResult {
        v: WAVE_FORMAT_VERSION,
        wave_id: wave_id.to_owned(),
        seed,
        shard,
        jobs,
        duration_ms: started.elapsed().as_millis() as u64,
        cells: finished.iter().map(|f| f.result.clone()).collect(),
    }
}

/// `w-<UTC yyyymmddThhmmss>-s<seed>`.
pub fn wave_id(seed: u64) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm), proleptic Gregorian, UTC.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "w-{y:04}{m:02}{d:02}T{:02}{:02}{:02}-s{seed}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cut, Fault, Outcome};

    fn finished(id: &str, verdict: Verdict, path: &str, reached: bool) -> Finished {
        Finished {
            result: CellResult {
                spec: CellSpec {
                    cell_id: id.into(),
                    scenario_id: "s.runner-codex.local.c".into(),
                    cut: Some(Cut {
                        point: format!("runner.p{id}"),
                        n: 1,
                    }),
                    fault: Some(Fault::KillRunner),
                    seed: 1,
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
            },
            evidence: None,
        }
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
            unreached(
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
    fn wave_ids_have_the_documented_shape() {
        let id = super::wave_id(7);
        assert!(id.starts_with("w-20"), "{id}");
        assert!(id.ends_with("-s7"), "{id}");
        assert_eq!(id.len(), "w-20261130T012345-s7".len(), "{id}");
        assert_eq!(&id[10..11], "T");
    }
}
