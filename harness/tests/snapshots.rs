//! Snapshot reports of the recovery behaviour, checked by `cargo test`.
//!
//! For every `scenarios/*.toml` (insta's `glob!`, one snapshot per file, no
//! `#[test]` per file) and each of its profiles: the outcome matrix (cut
//! point × fault; rows sorted by point name and occurrence, runner first) of
//! a fixed sample of at most [`CELLS_PER_PROFILE`] cells (chosen by a hash
//! of each cell's own name, so adding a boundary elsewhere does not reshuffle
//! it; the wave runs them all), every one of which must pass every oracle,
//! and the clean run's normalized timeline. Each entry is the cell's final
//! task state and cause; `·` is a cell not sampled, `n/a` a fault that does
//! not apply at that point. A change in recovery behaviour is a snapshot
//! diff, reviewed with `cargo insta review` (CI runs with `INSTA_UPDATE=no`).
//! `INSTA_GLOB_FILTER=single-task.toml` runs one file.
//!
//! The recovery *path* (`continued → completed`, `failed ambiguous_turn_start
//! → retry → completed`, …, `Outcome::path`, in `wave.json`) is not
//! snapshotted: two runs of this test on a loaded machine gave a different
//! path for 50 of 728 sampled entries (a provider the harness does not hold
//! finishes its turn or not while the runner restarts; an approval is pending
//! or not at the cut), all of them allowed by the contract and judged by the
//! oracles.

use std::collections::BTreeMap;
use std::path::Path;

use harness::cell::CellEnv;
use harness::model::{CellSpec, Cut, Fault, Verdict};
use harness::wave::Finished;
use harness::{plan, scenario, wave};

/// Cells snapshotted per scenario and profile (sampled by seed 7).
const CELLS_PER_PROFILE: usize = 80;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn scenarios_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// The idle timeout of hang-provider cells here (the wave's is shorter).
const SNAPSHOT_HANG_IDLE_MS: u64 = 250;

/// Cells of one profile run at once (2 cores on CI: more stretch a cell's
/// waits toward its idle timeouts).
const JOBS: usize = 2;

#[test]
fn scenarios() {
    insta::glob!("../../scenarios", "*.toml", |path| {
        let case = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a scenario file name");
        check(case);
    });
}

/// Runs the sampled cells of `case` and renders the snapshot text.
fn check(case: &str) {
    let dir = scenarios_dir();
    let scenarios = scenario::load_dir(&dir).expect("the built-in scenarios load");
    let s = scenarios
        .iter()
        .find(|s| s.case == case)
        .unwrap_or_else(|| panic!("no built-in scenario {case}"));
    let mut text = String::new();
    // Every listed cut point happens in the clean run of some profile.
    let mut unmatched: Option<std::collections::BTreeSet<String>> = None;
    for profile in &s.profiles {
        let id = s.id(profile);
        let mut env = CellEnv::new(exe(), &dir);
        // CI runs other tests beside this one: a healthy provider may pause
        // past the wave's short hang timeout there and be stopped as hung,
        // which changes the path a snapshot records.
        env.hang_idle_timeout_ms = SNAPSHOT_HANG_IDLE_MS;
        let d = plan::discover(&env, s, profile).expect("discovery runs");
        let here: std::collections::BTreeSet<String> = plan::unmatched_points(s, &d.boundaries)
            .into_iter()
            .collect();
        unmatched = Some(match unmatched {
            None => here,
            Some(u) => u.intersection(&here).cloned().collect(),
        });
        assert_eq!(
            d.clean_verdict,
            Verdict::Pass,
            "the clean run of {id} must pass"
        );
        let expanded = plan::number(
            7,
            plan::expand(s, &d.boundaries)
                .expect("cells expand")
                .into_iter()
                .map(|(c, f)| (id.clone(), c, f))
                .collect(),
        );
        // A fixed sample per profile keeps `cargo test` within CI's budget;
        // the wave runs every cell.
        let cells = plan::sample(expanded.clone(), Some(CELLS_PER_PROFILE), 7);
        let finished = run_reaching_cuts(&env, &scenarios, &cells);
        let failing: Vec<String> = finished
            .iter()
            .filter(|f| f.result.verdict != Verdict::Pass)
            .map(|f| {
                format!(
                    "{} {}: {}\n    {}",
                    f.result.verdict.as_str(),
                    f.result.spec.name(),
                    f.result
                        .oracles
                        .iter()
                        .filter(|o| o.verdict != Verdict::Pass)
                        .map(|o| format!("{}: {}", o.oracle, o.message))
                        .chain(f.result.error.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                    f.result.reproduce
                )
            })
            .collect();
        assert!(
            failing.is_empty(),
            "cells of {id} did not pass:\n{}",
            failing.join("\n")
        );

        text.push_str(&format!("# {id}\n# {}\n", s.title));
        text.push_str(&format!("clean run: {}\n", d.clean_state));
        text.push_str(&format!(
            "boundaries: {}, cells: {} sampled of {}\n",
            d.boundaries.len(),
            cells.len(),
            expanded.len()
        ));
        text.push_str(
            "entries: the recovery path, run by run (`→`); · not sampled; n/a not applicable\n\n",
        );
        text.push_str(&matrix(&d.boundaries, &expanded, &finished));
        text.push_str("\nclean timeline (run-log event kinds):\n");
        for kind in &d.clean_timeline {
            text.push_str(&format!("  {kind}\n"));
        }
        text.push('\n');
    }
    let unmatched = unmatched.unwrap_or_default();
    assert!(
        unmatched.is_empty(),
        "{case}: cut points that happen in no profile's clean run: {unmatched:?}"
    );
    insta::with_settings!({
        snapshot_path => "../../reports/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("scenario", text);
    });
}

/// Attempts per cell whose armed cut is not reached.
const ATTEMPTS: usize = 3;

/// Runs `cells`; a cell whose armed cut was not reached (its path before the
/// cut took a turn the harness does not hold, e.g. an idle timeout on a
/// loaded machine) runs again, at most [`ATTEMPTS`] times in all, said on
/// stderr. The wave never does this: there such a cell is reported and
/// counted. A snapshot records what the runner does *at* each cut, which a
/// cell that missed its cut cannot show.
fn run_reaching_cuts(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    cells: &[CellSpec],
) -> Vec<Finished> {
    let mut finished = wave::run_cells(env, scenarios, cells, JOBS);
    for attempt in 2..=ATTEMPTS {
        let missed: Vec<CellSpec> = finished
            .iter()
            .filter(|f| f.result.spec.cut.is_some() && !f.result.outcome.reached_cut)
            .map(|f| f.result.spec.clone())
            .collect();
        if missed.is_empty() {
            break;
        }
        eprintln!(
            "attempt {attempt}: {} cells did not reach their cut: {:?}",
            missed.len(),
            missed.iter().map(CellSpec::name).collect::<Vec<_>>()
        );
        let again = wave::run_cells(env, scenarios, &missed, JOBS);
        for f in again {
            if let Some(slot) = finished
                .iter_mut()
                .find(|old| old.result.spec.cell_id == f.result.spec.cell_id)
            {
                *slot = f;
            }
        }
    }
    finished
}

/// The outcome matrix: a row per cut point with a sampled cell, a column per
/// fault; each entry the cell's final state and cause, `·` for a cell not
/// sampled, `n/a` for a fault that does not apply there.
fn matrix(boundaries: &[plan::Boundary], expanded: &[CellSpec], finished: &[Finished]) -> String {
    // (provider?, point, n) → fault → entry. Rows go runner points first,
    // then the provider's, each sorted by point name and occurrence; not in
    // the clean run's order: threads of one process (an HTTP fake's handlers
    // and its turn) interleave their hits by timing, and the snapshot must not.
    type Row = (bool, String, u64);
    let row_of = |cut: &Cut| -> Row {
        let provider = boundaries
            .iter()
            .find(|b| &b.cut == cut)
            .is_some_and(|b| b.role != "runner");
        (provider, cut.point.clone(), cut.n)
    };
    let mut rows: BTreeMap<Row, BTreeMap<Fault, String>> = BTreeMap::new();
    for f in finished {
        let (Some(cut), Some(fault)) = (&f.result.spec.cut, f.result.spec.fault) else {
            continue;
        };
        let o = &f.result.outcome;
        rows.entry(row_of(cut))
            .or_default()
            .insert(fault, o.path.clone());
    }
    for c in expanded {
        if let (Some(cut), Some(fault)) = (&c.cut, c.fault)
            && let Some(row) = rows.get_mut(&row_of(cut))
        {
            row.entry(fault).or_insert_with(|| "·".to_owned());
        }
    }
    let point_width = rows
        .keys()
        .map(|(_, p, n)| format!("{p}#{n}").len())
        .max()
        .unwrap_or(10)
        .max(10);
    let width = |fault: Fault| {
        rows.values()
            .filter_map(|r| r.get(&fault))
            .map(|e| e.chars().count())
            .max()
            .unwrap_or(3)
            .max(fault.as_str().len())
    };
    let widths: Vec<usize> = Fault::ALL.into_iter().map(width).collect();
    let mut text = format!("{:<point_width$}", "cut point");
    for (fault, w) in Fault::ALL.into_iter().zip(&widths) {
        text.push_str(&format!("  {:<w$}", fault.as_str()));
    }
    let mut out = String::new();
    out.push_str(text.trim_end());
    out.push('\n');
    for ((_, point, n), row) in &rows {
        let mut line = format!("{:<point_width$}", format!("{point}#{n}"));
        for (fault, w) in Fault::ALL.into_iter().zip(&widths) {
            let v = row.get(&fault).map_or("n/a", String::as_str);
            line.push_str(&format!("  {v:<w$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
