//! The oracles: each reads a cell's evidence and gives a named verdict.
//!
//! A verdict is pass, fail or unknown (fail > unknown > pass); a failure says
//! what was violated and points into the evidence (`journal:12`, `events#7`,
//! `ledger:3`). Oracles judge the runner against the provider's own record
//! (journal), what really ran (ledger) and the contract tables in `crate::contract`,
//! never against the runner's claims alone. Every oracle has a test that shows
//! it failing on deliberately broken evidence (`tests.rs`).
//!
//! One module per family: `no_replay`, `cause`, `contract`, `retry`,
//! `fence`, `no_loss`, `durable`, `upstream`; the small ones (liveness, secrecy, hygiene, vacuity) and the
//! `Judgement` they all fill are here.

use crate::evidence::{ActionKind, Evidence, Source};
use crate::model::{Fault, OracleResult, TaskState, Verdict};

mod acceptance;
mod by_model;
mod cause;
mod contract;
mod durable;
mod fence;
mod model_input;
mod no_loss;
mod no_replay;
mod read_faults;
mod retry;
mod upstream;

pub use cause::cause_structured;
pub use contract::contract_oracle;
pub use durable::durable_effect;
pub use fence::fence;
pub use no_loss::no_loss;
pub use no_replay::{no_replay_effect, no_replay_turn};
pub use retry::retry_works;
pub use upstream::{expected_cause, upstream};

/// An oracle's name (defined with the result model, which stores it).
pub use crate::model::Oracle;

/// The oracles' names, in report order ([`Oracle::ALL`]).
pub const ORACLES: [&str; 13] = {
    let mut names = [""; 13];
    let mut i = 0;
    while i < names.len() {
        names[i] = Oracle::ALL[i].as_str();
        i += 1;
    }
    names
};

/// Whether `o` caught something: an oracle other than vacuity failed (a
/// cell that missed its cut tested nothing, so its vacuity failure is no
/// catch).
pub fn decisive(o: &OracleResult) -> bool {
    o.verdict == Verdict::Fail && o.oracle != Oracle::Vacuity
}

/// Judges a cell: every oracle, in [`ORACLES`] order, on each task's view
/// of the evidence ([`Evidence::task_views`]); with several tasks, an
/// oracle's verdict is its worst on any task, and each problem names its
/// task.
pub fn judge(e: &Evidence) -> Vec<OracleResult> {
    let views = e.task_views();
    let mut judged = views.iter().map(|(task, v)| (task, judge_task(v)));
    let Some((first, mut merged)) = judged.next() else {
        return Vec::new();
    };
    if views.len() == 1 {
        return merged;
    }
    for r in &mut merged {
        name_task(r, first);
    }
    for (task, results) in judged {
        for (m, mut r) in merged.iter_mut().zip(results) {
            name_task(&mut r, task);
            merge(m, r);
        }
    }
    merged
}

/// `r`'s problems (or its reason for `unknown`) said of task `task`.
fn name_task(r: &mut OracleResult, task: &str) {
    if !r.message.is_empty() {
        r.message = format!("{task}: {}", r.message);
    }
}

/// `r`, an oracle's result on another task, merged into `m`, its result on
/// the tasks before: the worse verdict, the messages of that verdict, the
/// evidence of both (each said once).
fn merge(m: &mut OracleResult, r: OracleResult) {
    if r.verdict > m.verdict {
        *m = r;
        return;
    }
    if r.verdict == m.verdict && !r.message.is_empty() {
        m.message = format!("{}; {}", m.message, r.message);
        for at in r.evidence {
            if !m.evidence.contains(&at) {
                m.evidence.push(at);
            }
        }
    }
}

/// Every oracle on one task's view, in [`ORACLES`] order.
fn judge_task(e: &Evidence) -> Vec<OracleResult> {
    vec![
        no_replay_turn(e),
        no_replay_effect(e),
        cause_structured(e),
        contract_oracle(e),
        retry_works(e),
        fence(e),
        no_loss(e),
        durable_effect(e),
        liveness(e),
        secrecy(e),
        hygiene(e),
        vacuity(e),
        upstream(e),
    ]
}

/// A cell's verdicts on its evidence: every oracle's, and the cell's, the
/// worst of them (at least `unknown` after a harness error). The cell and
/// `turncut judge` both take them from here.
pub fn judge_cell(e: &Evidence) -> (Verdict, Vec<OracleResult>) {
    let oracles = judge(e);
    let mut verdict = worst(&oracles);
    if e.harness_error.is_some() {
        verdict = verdict.max(Verdict::Unknown);
    }
    (verdict, oracles)
}

/// The worst verdict of a list (`pass` when empty).
pub fn worst(results: &[OracleResult]) -> Verdict {
    results
        .iter()
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Pass)
}

/// Collects violations; no violation is a pass.
struct Judgement {
    oracle: Oracle,
    problems: Vec<String>,
    evidence: Vec<String>,
    unknown: Option<String>,
}

impl Judgement {
    fn new(oracle: Oracle) -> Judgement {
        Judgement {
            oracle,
            problems: Vec::new(),
            evidence: Vec::new(),
            unknown: None,
        }
    }

    /// The oracle needs `sources`: one that cannot be judged from makes it
    /// `unknown` (unless it finds a violation in what it could read).
    fn needs(mut self, e: &Evidence, sources: &[Source]) -> Judgement {
        let gaps: Vec<String> = sources.iter().filter_map(|s| e.gap(*s)).collect();
        if !gaps.is_empty() {
            self.unknown = Some(gaps.join("; "));
        }
        self
    }

    fn fail(&mut self, problem: String, evidence: impl IntoIterator<Item = String>) {
        self.problems.push(problem);
        self.evidence.extend(evidence);
    }

    fn done(self) -> OracleResult {
        let (verdict, message) = if !self.problems.is_empty() {
            (Verdict::Fail, self.problems.join("; "))
        } else if let Some(u) = self.unknown {
            (Verdict::Unknown, u)
        } else {
            (Verdict::Pass, String::new())
        };
        OracleResult {
            oracle: self.oracle,
            verdict,
            message,
            evidence: self.evidence,
        }
    }
}

/// No task is still running after the cell's deadline.
pub fn liveness(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::Liveness).needs(e, &[Source::Task]);
    // The final state decides: a task that settled just after the harness
    // stopped waiting is slow, not stuck.
    if let Some(state @ (TaskState::Running | TaskState::Queued)) = e.state() {
        j.fail(
            format!("the task is still {state} after the cell's deadline"),
            ["task".to_owned()],
        );
    }
    j.done()
}

/// The canary credential appears nowhere: no state file, log, event, report or
/// tool environment.
pub fn secrecy(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new(Oracle::Secrecy).needs(e, &[Source::RunLog, Source::Ledger, Source::Files]);
    for f in &e.canary_found_in {
        j.fail(format!("the canary credential is in {f}"), [f.clone()]);
    }
    let events = serde_json::to_string(&e.events).unwrap_or_default();
    if !e.canary.is_empty() && events.contains(&e.canary) {
        j.fail(
            "the canary credential is in the run log".to_owned(),
            ["events".to_owned()],
        );
    }
    for (i, l) in e.ledger.iter().enumerate() {
        if l.saw_secret {
            j.fail(
                format!("tool {} saw a credential in its environment", l.key),
                [format!("ledger:{}", i + 1)],
            );
        }
    }
    j.done()
}

/// Whether the storage faults applied justify a run's `storage_failed`: a
/// write fault (`fail-write`, `disk-full`), or read faults as
/// `read_faults::justify_storage_failed` says.
fn storage_fault_applied(e: &Evidence) -> bool {
    e.actions.iter().any(|a| {
        matches!(
            a.what,
            ActionKind::Fault(Fault::FailWrite | Fault::DiskFull)
        )
    }) || read_faults::justify_storage_failed(e)
}

/// Whether the faults the cell applied justify a run's failing with
/// `code` after a cut, as the contract lets any run fail: a fail-closed
/// cause, `storage_failed` after a storage fault, `provider_protocol_error`
/// after a power cut took turns the provider never synced (the contract's
/// row "a conversation with a completed turn, or with a turn whose output
/// the runner holds | no thread"), or the contract's answer to an injected
/// upstream error. A run's own `[expect]` and the turns it ran are the
/// callers' to judge.
fn cut_justifies(e: &Evidence, code: &str) -> bool {
    crate::contract::FAIL_CLOSED.contains(&code)
        || (code == "storage_failed" && storage_fault_applied(e))
        || (code == "provider_protocol_error" && !e.turns_lost_to_power_cut().is_empty())
        || upstream::justifies(e, code)
}

/// No process of the cell is alive after the cell.
pub fn hygiene(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::Hygiene).needs(e, &[Source::Processes]);
    for s in &e.survivors {
        j.fail(format!("{s} is still alive after the cell"), [s.clone()]);
    }
    j.done()
}

/// The cell reached its armed cut: a pass that tested nothing is a failure.
pub fn vacuity(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::Vacuity);
    let armed = e.spec.as_ref().is_some_and(|s| s.cut().is_some());
    if armed && !e.reached_cut && e.harness_error.is_some() {
        j.unknown = Some("the harness failed before the armed cut was reached".to_owned());
    } else if armed && !e.reached_cut {
        j.fail(
            "the armed cut point was never reached: the cell tested nothing".to_owned(),
            ["actions".to_owned()],
        );
    }
    if let Some(missed) = event_never_applied(e) {
        j.unknown = Some(missed);
    }
    j.done()
}

/// A later event that matched a hit of a process already gone and never
/// came again (`cell::faults::not_applied`): the schedule ran only in part.
fn event_never_applied(e: &Evidence) -> Option<String> {
    let not = e
        .actions
        .iter()
        .filter(|a| a.what == ActionKind::EventNotApplied)
        .find(|a| {
            !e.actions.iter().any(|r| {
                r.what == ActionKind::EventReached && r.at_ms >= a.at_ms && r.event() == a.event()
            })
        })?;
    let or_null = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
    Some(format!(
        "event {} ({}) matched a hit of pid {}, which was already gone, and never came again: the schedule was applied only in part",
        or_null(not.event().map(|n| n.to_string())),
        or_null(not.point().map(|p| format!("{p:?}"))),
        or_null(not.pid().map(|p| p.to_string())),
    ))
}

#[cfg(test)]
mod tests;
