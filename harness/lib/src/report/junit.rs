//! `junit.xml`: one suite per scenario, one test case per cell.

use std::fmt::Write as _;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{ReportError, Timelines, by_scenario, one_line, reasons};
use crate::model::{CellResult, Verdict, WaveResult};

/// The JUnit XML report: one suite per scenario (in the order the scenarios
/// first appear), one test case per cell with `file=` the scenario file; a
/// case that did not pass has the cell's timeline in `<system-out>`.
pub fn junit_xml(wave: &WaveResult, timelines: &Timelines) -> Result<String, ReportError> {
    let mut report = Report::new(format!("turncut {}", wave.wave_id));
    report.set_time(Duration::from_millis(wave.duration_ms));
    for (scenario, cells) in by_scenario(wave) {
        let mut suite = TestSuite::new(scenario);
        suite.add_property(("wave_id", wave.wave_id.as_str()));
        suite.add_property(("seed", wave.seed.to_string().as_str()));
        let (rerun, reruns) = super::timing_reruns(cells.iter().copied());
        suite.add_property((
            "timing_reruns",
            format!("{reruns} ({rerun} cells)").as_str(),
        ));
        suite.set_time(Duration::from_millis(
            cells.iter().map(|c| c.duration_ms).sum(),
        ));
        for cell in cells {
            let mut case = junit_case(cell);
            if let Some(file) = wave.run.scenario_files.get(scenario) {
                case.extra.insert("file".into(), file.as_str().into());
            }
            if let Some(timeline) = timelines
                .get(&cell.spec.cell_id)
                .filter(|_| cell.verdict != Verdict::Pass)
            {
                case.set_system_out(timeline.as_str());
            }
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    for s in &wave.skipped {
        let mut suite = TestSuite::new(s.scenario_id.as_str());
        let mut status = TestCaseStatus::skipped();
        status.set_type("skipped").set_message(s.reason.as_str());
        let mut case = TestCase::new("not run here", status);
        case.set_classname(s.scenario_id.as_str());
        suite.add_test_case(case);
        report.add_test_suite(suite);
    }
    report.to_string().map_err(ReportError::Junit)
}

fn junit_case(cell: &CellResult) -> TestCase {
    let status = match cell.verdict {
        Verdict::Pass => TestCaseStatus::success(),
        Verdict::Fail => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_type("fail")
                .set_message(reason_message(cell))
                .set_description(junit_description(cell));
            status
        }
        // An unknown is an `<error type="unknown">`, not a `<skipped>`: CI
        // dashboards count skipped tests as fine and often fold them away,
        // but an undecided cell means a property went unchecked, which must
        // be seen. An error also stays apart from a `<failure>`, which is
        // kept for a property the runner provably violated.
        Verdict::Unknown => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status
                .set_type("unknown")
                .set_message(reason_message(cell))
                .set_description(junit_description(cell));
            status
        }
    };
    let mut case = TestCase::new(cell.spec.name(), status);
    case.set_classname(cell.spec.scenario_id.as_str())
        .set_time(Duration::from_millis(cell.duration_ms));
    case.add_property(("cell_id", cell.spec.cell_id.as_str()));
    case.add_property(("seed", cell.spec.seed.to_string().as_str()));
    for r in &cell.reruns {
        case.add_property(("timing_rerun", r.why.as_str()));
    }
    case
}

fn reason_message(cell: &CellResult) -> String {
    one_line(
        &reasons(cell)
            .iter()
            .map(|(label, message)| format!("{label}: {message}"))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

fn junit_description(cell: &CellResult) -> String {
    let mut out = String::new();
    for o in &cell.oracles {
        if o.verdict == Verdict::Pass {
            continue;
        }
        let _ = writeln!(out, "{} {}: {}", o.oracle, o.verdict.as_str(), o.message);
        for pointer in &o.evidence {
            let _ = writeln!(out, "  evidence: {pointer}");
        }
    }
    if let Some(error) = &cell.error {
        let _ = writeln!(out, "harness error: {error}");
    }
    let o = &cell.outcome;
    let _ = writeln!(
        out,
        "outcome: state {}, cause {}, reached cut {}, runs {}, continuations {}, retry {}",
        crate::model::TaskState::name(o.state),
        o.cause.as_deref().unwrap_or("none"),
        o.reached_cut,
        o.runs,
        o.continuations,
        o.retry_status
            .map_or_else(|| "none".to_owned(), |s| s.to_string())
    );
    let _ = writeln!(out, "seed: {}", cell.spec.seed);
    let _ = write!(out, "reproduce: {}", cell.reproduce);
    out
}
