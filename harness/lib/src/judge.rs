//! A produced cell judged: the one place a cell's evidence becomes its
//! result. The cell only produces evidence (`cell::run_cell`); the wave,
//! planning, the doctor and the timing policy judge what it produced here,
//! through the one judge of the oracles (`oracles::judge_cell`, which
//! `turncut judge` runs on saved evidence too).

use crate::cell::CellRun;
use crate::evidence::{Evidence, RequestKind};
use crate::model::{CellResult, Outcome, Verdict};

/// A cell's run and its judged result.
pub struct Judged {
    /// What the cell produced.
    pub run: CellRun,
    /// The oracles' verdicts on it.
    pub result: CellResult,
}

/// `run` judged: the oracles' verdicts on its evidence (at least `unknown`
/// after a harness error) and its outcome; a cell that never ran is
/// `unknown` with no oracle.
pub fn judged(run: CellRun) -> Judged {
    let ev = &run.evidence;
    let (verdict, oracles, outcome) = if run.ran {
        let (verdict, oracles) = crate::oracles::judge_cell(ev);
        (verdict, oracles, outcome(ev))
    } else {
        (Verdict::Unknown, Vec::new(), Outcome::default())
    };
    let result = CellResult {
        spec: run.spec.clone(),
        verdict,
        outcome,
        oracles,
        duration_ms: run.duration_ms,
        reproduce: run.reproduce.clone(),
        error: ev.harness_error.clone(),
        retried: None,
        reruns: Vec::new(),
    };
    Judged { run, result }
}

/// What the cell ended with, as reports show it.
pub fn outcome(ev: &Evidence) -> Outcome {
    Outcome {
        state: ev.state(),
        cause: ev.cause_code().map(str::to_owned),
        reached_cut: ev.reached_cut,
        events_applied: ev.events_applied,
        runs: ev.runs().len(),
        continuations: ev.provider_turns.iter().filter(|t| t.continuation).count(),
        retry_status: ev
            .exchanges
            .iter()
            .find(|x| x.kind == RequestKind::Retry)
            .map(|x| x.status),
        path: ev.path(),
        effects: ev.ledger.len(),
        deadline_passed: ev.deadline_passed,
    }
}
