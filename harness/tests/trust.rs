//! Verdicts that cannot pass on missing evidence, with real processes.
//!
//! A runner that loses its state on restart (a wrapper deletes its database
//! before starting runnerd) must give `fail` or `unknown` in every cell whose
//! kill-runner fault restarted it, never `pass`.

mod common;

use std::path::Path;

use harness::cell::CellEnv;
use harness::model::{Fault, Verdict};
use harness::{plan, scenario, wave};

use common::exe;

fn scenarios_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// Cells of the state-losing test (sampled by seed 7 from the kill-runner cells).
const CELLS: usize = 12;

#[test]
fn a_runner_that_loses_its_state_on_restart_never_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = common::forgetful_runnerd(tmp.path());

    let dir = scenarios_dir();
    let scenarios = scenario::load_dir(&dir).unwrap();
    let s = scenarios.iter().find(|s| s.case == "single-task").unwrap();
    let profile = "runner-codex";
    let clean = CellEnv::new(exe(), &dir);
    let d = harness::discover::discover(&clean, s, profile).unwrap();
    let cells = plan::expand(s, &d.boundaries)
        .unwrap()
        .into_iter()
        .filter(|e| e.as_ref().is_some_and(|e| e.fault == Fault::KillRunner))
        .map(|e| (s.id(profile), e))
        .collect();
    let cells = plan::number(7, cells);
    // The runner's first two boundaries (before the submit's answer, the run
    // log then holds one event), then a sample of the rest.
    let first: Vec<&harness::model::Cut> = d
        .boundaries
        .iter()
        .filter(|b| b.role == harness::model::Role::Runner)
        .take(2)
        .map(|b| &b.cut)
        .collect();
    let (early, rest): (Vec<_>, Vec<_>) = cells
        .into_iter()
        .partition(|c| c.cut().is_some_and(|cut| first.contains(&cut)));
    let cells: Vec<_> = early
        .into_iter()
        .chain(plan::sample(rest, Some(CELLS), 7))
        .collect();
    let env = CellEnv {
        runner_cmd: vec![wrapper.display().to_string()],
        wait_ms: 6_000,
        ..clean
    };
    // Four at once: a cell whose task was lost waits out its deadline idle.
    let finished = wave::run_cells(&env, &scenarios, &cells, 4);
    let mut restarted = 0;
    let mut passed = Vec::new();
    for f in &finished {
        let r = &f.result;
        if !r.outcome.reached_cut {
            continue;
        }
        restarted += 1;
        let reasons: Vec<String> = r
            .oracles
            .iter()
            .filter(|o| o.verdict != Verdict::Pass)
            .map(|o| format!("{} {}: {}", o.verdict.as_str(), o.oracle, o.message))
            .collect();
        eprintln!(
            "{} {}: {}",
            r.verdict.as_str(),
            r.spec.name(),
            reasons.join("; ")
        );
        if r.verdict == Verdict::Pass {
            passed.push(r.spec.name());
        }
    }
    assert!(
        restarted > CELLS / 2,
        "only {restarted} cells restarted the runner"
    );
    assert!(
        passed.is_empty(),
        "cells passed although the runner lost its state: {passed:#?}"
    );
}

/// A follow-up whose POST the runner was killed in the middle of (held at
/// `runner.follow_up.persisted`) is recorded as an `info` attempt, then the
/// re-sent request's answer; the oracles hold the follow-up to "consumed
/// exactly once".
#[test]
fn a_follow_up_cut_mid_request_is_recorded_as_info_then_ok() {
    use harness::evidence::{OpKind, OpResult, RequestKind};
    use harness::model::{CellSpec, Cut};
    let dir = scenarios_dir();
    let scenarios = scenario::load_dir(&dir).unwrap();
    let s = scenarios
        .iter()
        .find(|s| s.case == "recover-controller")
        .unwrap();
    let profile = "runner-codex";
    let spec = CellSpec {
        cell_id: "t001".into(),
        scenario_id: s.id(profile).into(),
        seed: 1,
        events: vec![harness::model::Event {
            cut: Cut {
                point: "runner.follow_up.persisted".into(),
                n: 1,
            },
            fault: Fault::KillRunner,
        }],
    };
    let run = harness::cell::run_cell(&CellEnv::new(exe(), &dir), s, profile, &spec);
    let ops: Vec<(OpResult, Option<u16>)> = run
        .evidence
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Request(RequestKind::FollowUp))
        .map(|o| (o.result, o.status))
        .collect();
    assert_eq!(
        ops,
        vec![(OpResult::Info, None), (OpResult::Ok, Some(202))],
        "{}",
        run.evidence.timeline()
    );
    let result = harness::judge::judged(run).result;
    assert_eq!(result.verdict, Verdict::Pass, "{result:#?}");
}
