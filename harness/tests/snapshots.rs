//! Snapshot reports of the recovery behaviour, checked by `cargo test`.
//!
//! For every built-in scenario and each of its profiles: the outcome matrix
//! (cut point × fault → final task state and cause; rows sorted by point name
//! and occurrence, runner first) of a fixed sample of at
//! most [`CELLS_PER_PROFILE`] cells (seed 7; the wave runs them all), every
//! one of which must pass every oracle, and the clean run's normalized
//! timeline. Every cell runs for real (runner, fake provider, signals). What is snapshotted is what a correct runner decides
//! deterministically: the recovery *path* (a continuation, or a fail-closed
//! close followed by Retry) can legitimately depend on how far the runner got
//! before the kill, so it is left out; the oracles judge it. A change in
//! recovery behaviour is a snapshot diff, reviewed with `cargo insta review`
//! (CI runs with `INSTA_UPDATE=no`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Condvar, Mutex, PoisonError};

use harness::cell::CellEnv;
use harness::model::{Fault, Verdict};
use harness::{plan, scenario, wave};

/// Cells snapshotted per scenario and profile (sampled by seed 7).
const CELLS_PER_PROFILE: usize = 80;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn scenarios_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// Scenarios whose cells run at once. The tests of this file run in
/// parallel, one per scenario; on a 2-core CI machine seven debug-build cells
/// at a time (each a runner, a fake and its tools) stretch a cell's waits
/// toward its idle timeouts, and the throughput is the same with two.
const SCENARIOS_AT_ONCE: usize = 2;

static RUNNING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A slot among [`SCENARIOS_AT_ONCE`], released on drop (also on panic).
struct Slot;

impl Slot {
    fn take() -> Slot {
        let (count, freed) = &RUNNING;
        let mut n = count.lock().unwrap_or_else(PoisonError::into_inner);
        while *n >= SCENARIOS_AT_ONCE {
            n = freed.wait(n).unwrap_or_else(PoisonError::into_inner);
        }
        *n += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let (count, freed) = &RUNNING;
        *count.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
        freed.notify_one();
    }
}

/// Runs every cell of `case` and renders the snapshot text.
fn check(case: &str) {
    let _slot = Slot::take();
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
        let env = CellEnv::new(exe(), &dir);
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
        let cells = plan::number(
            7,
            plan::expand(s, &d.boundaries)
                .expect("cells expand")
                .into_iter()
                .map(|(c, f)| (id.clone(), c, f))
                .collect(),
        );
        // A fixed sample per profile keeps `cargo test` within CI's budget;
        // the wave runs every cell.
        let cells = plan::sample(cells, Some(CELLS_PER_PROFILE), 7);
        let finished = wave::run_cells(&env, &scenarios, &cells, 1);
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
            "boundaries: {}, cells: {}\n\n",
            d.boundaries.len(),
            cells.len()
        ));
        // (provider?, point, n) → fault → outcome.
        let mut matrix: BTreeMap<(bool, String, u64), BTreeMap<Fault, String>> = BTreeMap::new();
        for f in &finished {
            let (Some(cut), Some(fault)) = (&f.result.spec.cut, f.result.spec.fault) else {
                continue;
            };
            // Rows go runner points first, then the provider's, each sorted
            // by point name and occurrence. Not in the clean run's order:
            // threads of one process (an HTTP fake's handlers and its turn)
            // interleave their hits by timing, and the snapshot must not.
            let provider = d
                .boundaries
                .iter()
                .find(|b| &b.cut == cut)
                .is_some_and(|b| b.role != "runner");
            let o = &f.result.outcome;
            let cell = match &o.cause {
                Some(c) => format!("{} ({c})", o.state),
                None => o.state.clone(),
            };
            matrix
                .entry((provider, cut.point.clone(), cut.n))
                .or_default()
                .insert(fault, cell);
        }
        let width = matrix
            .keys()
            .map(|(_, p, n)| format!("{p}#{n}").len())
            .max()
            .unwrap_or(10)
            .max(10);
        text.push_str(&format!("{:<width$}", "cut point"));
        for fault in Fault::ALL {
            text.push_str(&format!("  {:<15}", fault.as_str()));
        }
        text.push('\n');
        for ((_, point, n), row) in &matrix {
            text.push_str(&format!("{:<width$}", format!("{point}#{n}")));
            for fault in Fault::ALL {
                let v = row.get(&fault).map_or("-", String::as_str);
                text.push_str(&format!("  {v:<15}"));
            }
            text.push('\n');
        }
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
        insta::assert_snapshot!(case, text);
    });
}

#[test]
fn single_task() {
    check("single-task");
}

#[test]
fn recover_controller() {
    check("recover-controller");
}

#[test]
fn multi_tool_turn() {
    check("multi-tool-turn");
}

#[test]
fn cut_turn_start_retry() {
    check("cut-turn-start-retry");
}

#[test]
fn lost_active_turn() {
    check("lost-active-turn");
}

#[test]
fn pending_approval() {
    check("pending-approval");
}

#[test]
fn double_restart() {
    check("double-restart");
}
