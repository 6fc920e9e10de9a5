//! `turncut explore` finds a defect with a random schedule and shrinks it.
//!
//! The runner under test is defective from the outside: a wrapper deletes its
//! database before every start, so any schedule that restarts it loses the
//! task. Exploring with 3-event schedules only, the first failure has three
//! events; proptest's shrinking must bring it down to one or two (the one
//! restart that loses the state), and running the minimal schedule again
//! fails the same oracle.

mod common;

use std::path::Path;
use std::time::Duration;

use harness::cell::CellEnv;
use harness::explore::{self, EventCount, Options};
use harness::scenario;

use common::exe;

#[test]
fn a_three_event_failure_shrinks_to_a_minimal_schedule_that_fails_the_same_oracle() {
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = common::forgetful_runnerd(tmp.path());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let scenarios = scenario::load_dir(&dir).unwrap();
    let id = "everyday-workflows.runner-codex.local.single-task".to_owned();
    let env = CellEnv {
        runner_cmd: vec![wrapper.display().to_string()],
        // A lost task only ends a cell at this deadline: keep it short.
        wait_ms: 1_500,
        ..CellEnv::new(exe(), &dir)
    };
    let targets = explore::targets(&env, &scenarios, std::slice::from_ref(&id)).unwrap();
    let opts = Options {
        budget: Duration::from_secs(120),
        seed: 3,
        events: EventCount { min: 3, max: 4 },
        jobs: 1,
        shrink_iters: 60,
        // The forgetful runner fails every schedule that restarts it.
        attempts: 1,
    };
    let explored = explore::explore(&env, &scenarios, &targets, &opts);
    let found = explored
        .found
        .unwrap_or_else(|| panic!("{} schedules ran and none failed", explored.runs));
    let original = found.original.result.spec.schedule().unwrap();
    let minimal = found.minimal.result.spec.schedule().unwrap();
    eprintln!(
        "original {}  →  minimal {} ({} shrinking runs)",
        harness::model::format_schedule(original),
        harness::model::format_schedule(minimal),
        found.shrink_runs
    );
    assert!(original.len() >= 3, "{original:?}");
    assert!((1..=2).contains(&minimal.len()), "not shrunk: {minimal:?}");
    assert!(explore::is_failure(&found.minimal));
    let again = explore::run_until_failure(&env, &scenarios, &id, minimal, 3);
    let failing = explore::failing_oracles(&again);
    assert!(
        explore::failing_oracles(&found.minimal)
            .iter()
            .any(|o| failing.contains(o)),
        "the minimal schedule run again fails {failing:?}, not {:?}",
        explore::failing_oracles(&found.minimal)
    );
}

/// `explore --workflows --shrink-iters 0` reports the failing program as
/// drawn. It panicked: proptest, told not to shrink, runs the program once
/// more and reads the state machine's tree right after that run, which the
/// tree refuses while its counter of seen steps is set.
#[test]
fn a_generated_failure_is_reported_unshrunk_when_shrinking_is_off() {
    use harness::explore::workflows::{self as wf, WorkflowOptions};
    let tmp = tempfile::tempdir().unwrap();
    let wrapper = common::forgetful_runnerd(tmp.path());
    let env = CellEnv {
        runner_cmd: vec![wrapper.display().to_string()],
        wait_ms: 1_500,
        ..CellEnv::new(exe(), Path::new(""))
    };
    let opts = WorkflowOptions {
        explore: Options {
            budget: Duration::from_secs(120),
            seed: 3,
            events: EventCount { min: 1, max: 2 },
            jobs: 1,
            shrink_iters: 0,
            attempts: 1,
        },
        profiles: vec!["runner-codex".to_owned()],
        schedules: 4,
        draw: explore::WORKFLOW_DRAW,
    };
    let explored = wf::explore_workflows(&env, &opts);
    let found = explored
        .found
        .unwrap_or_else(|| panic!("{} cells ran and none failed", explored.cells));
    assert_eq!(found.program_shrink_runs, 0);
    assert_eq!(
        found.original_program.0, found.minimal_program.0,
        "not shrunk"
    );
    assert!(explore::is_failure(&found.found.original));
}
