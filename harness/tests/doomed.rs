//! A later event of a schedule lands on the recovery, never on the remains
//! of what the event before it killed (`harness/lib/src/cell/doomed.rs`).
//!
//! After `kill-runner` at the runner's turn acceptance, the old Codex
//! provider lives on until the restarted runner stops it, and goes on with
//! its turn meanwhile: it asks for the command's approval. Counted, that
//! hit would take the second event (`kill-provider`) most of the time, and
//! the fault would kill a process already on its way out (a cell that
//! judges nothing of the recovery), or, when the restarted runner stops it
//! first, never come (`unknown`). The event must land on a provider the
//! restarted runner started.

mod common;

use common::exe;
use harness::cell::{self, CellEnv};
use harness::evidence::ActionKind;
use harness::model::{Verdict, parse_schedule};
use harness::run_log::ProviderSpawned;
use harness::{plan, scenario};

const ID: &str = "everyday-workflows.runner-codex.local.single-task";
const PROFILE: &str = "runner-codex";
const SCHEDULE: &str = "runner.turn_accepted.persisted#1/kill-runner+codex.item_command_execution_request_approval.requested#1/kill-provider";

/// Runs the schedule once: (verdict, the provider pids the run log shows
/// spawned in order, the pid the second event was applied to).
fn run_once(env: &CellEnv) -> (Verdict, Vec<u64>, Option<u64>) {
    let scenarios = scenario::load_dir(&env.scenarios_dir).expect("scenarios load");
    let s = scenarios
        .iter()
        .find(|s| s.id(PROFILE) == ID)
        .expect("the scenario");
    let profile = PROFILE;
    let events = parse_schedule(SCHEDULE).expect("the schedule parses");
    let spec = plan::schedule_cell(1, "t001".into(), s.id(profile), &events);
    let run = cell::run_cell(env, s, profile, &spec);
    let spawned = run
        .evidence
        .payloads::<ProviderSpawned>()
        .map(|(_, s)| s.pid)
        .collect();
    let second = run
        .evidence
        .actions
        .iter()
        .find(|a| a.what == ActionKind::EventReached)
        .and_then(|a| a.pid());
    (harness::judge::judged(run).result.verdict, spawned, second)
}

#[test]
fn a_later_event_never_lands_on_the_provider_the_first_one_doomed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let env = CellEnv::new(exe(), &dir);
    // The old provider's approval request races its stop: a few runs give
    // the race its chances.
    for round in 0..4 {
        let (verdict, spawned, second) = run_once(&env);
        assert_eq!(verdict, Verdict::Pass, "round {round}");
        let first_provider = spawned.first().copied();
        let second =
            second.unwrap_or_else(|| panic!("round {round}: the second event was never reached"));
        assert_ne!(
            Some(second),
            first_provider,
            "round {round}: the second event landed on the provider the first one doomed (spawned: {spawned:?})"
        );
    }
}
