//! `summary.md`, also appended to `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write as _;

use super::{Counts, JUNIT_XML, REPORT_HTML, SUMMARY_CELL_ROWS_MAX, SUMMARY_MESSAGE_CHARS_MAX};
use super::{by_scenario, format_ms, one_line, reasons, truncate};
use crate::model::{Verdict, WaveResult};

/// The markdown summary (also what the caller appends to
/// `$GITHUB_STEP_SUMMARY`).
///
/// It uses plain GitHub-flavoured markdown with no HTML, so it reads the same
/// raw in a terminal and rendered in a step summary.
pub fn summary_markdown(wave: &WaveResult) -> String {
    let mut out = String::new();
    let counts = Counts::of(wave.cells.iter());
    let _ = writeln!(
        out,
        "# turncut wave `{}`: {}\n",
        wave.wave_id,
        wave.verdict().as_str()
    );
    let _ = writeln!(out, "{}\n", facts(wave, &counts).join(" · "));
    if let Some(why) = &wave.stopped {
        let _ = writeln!(out, "**Not complete:** {}.\n", md_text(why));
    }
    for s in &wave.skipped {
        let _ = writeln!(
            out,
            "**Skipped** (not run, not passed) {}: {}\n",
            md_code(&s.scenario_id),
            md_text(&s.reason)
        );
    }

    if wave.cells.is_empty() {
        out.push_str("No cells ran.\n");
        return out;
    }

    out.push_str("| scenario | cells | pass | unknown | fail |\n|---|---:|---:|---:|---:|\n");
    for (scenario, cells) in by_scenario(wave) {
        let c = Counts::of(cells.iter().copied());
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            md_code(scenario),
            c.cells,
            c.pass,
            c.unknown,
            c.fail
        );
    }
    out.push('\n');

    if counts.pass == counts.cells {
        let _ = writeln!(out, "All {} cells passed.", counts.cells);
        return out;
    }
    failing_cells(&mut out, wave, counts.cells - counts.pass);
    out
}

/// The facts line under the title: seed, counts, time, jobs, shard, cells
/// run twice and cells that never reached their cut.
fn facts(wave: &WaveResult, counts: &Counts) -> Vec<String> {
    let mut facts = vec![
        format!("seed `{}`", wave.seed),
        format!(
            "{} cells: {} pass, {} unknown, {} fail",
            counts.cells, counts.pass, counts.unknown, counts.fail
        ),
        format!("wall time {}", format_ms(wave.duration_ms)),
        format!("{} jobs", wave.jobs),
    ];
    if let Some((i, n)) = wave.shard {
        facts.push(format!("shard {i}/{n}"));
    }
    let retried = wave.cells.iter().filter(|c| c.retried.is_some()).count();
    if retried > 0 {
        facts.push(format!(
            "{retried} cells ran twice (armed cut not reached at first)"
        ));
    }
    let (rerun, reruns) = super::timing_reruns(&wave.cells);
    facts.push(format!(
        "{rerun} cells ran again for timing ({reruns} reruns with longer timeouts: a provider found silent that no fault hung, or a task still running at the deadline)"
    ));
    if wave.run.stress > 0 {
        facts.push(format!("--stress {}", wave.run.stress));
    }
    let unreached = crate::model::unreached(&wave.cells);
    if wave.cells.iter().any(|c| c.spec.cut().is_some()) {
        facts.push(format!(
            "{unreached} cells did not reach their armed cut on either attempt (tested nothing)"
        ));
    }
    facts
}

/// The "Failing and unknown cells" section: a table per scenario, at most
/// [`SUMMARY_CELL_ROWS_MAX`] rows in all (`not_passed` counts them all).
fn failing_cells(out: &mut String, wave: &WaveResult, not_passed: usize) {
    out.push_str("## Failing and unknown cells\n");
    let mut rows = 0;
    'scenarios: for (scenario, cells) in by_scenario(wave) {
        let mut heading_written = false;
        for cell in cells.iter().filter(|c| c.verdict != Verdict::Pass) {
            if rows == SUMMARY_CELL_ROWS_MAX {
                let _ = writeln!(
                    out,
                    "\n…and {} more failing or unknown cells; see `{JUNIT_XML}` or `{REPORT_HTML}`.",
                    not_passed - rows
                );
                break 'scenarios;
            }
            if !heading_written {
                let _ = write!(
                    out,
                    "\n### {}\n\n| cell | cut | verdict | why | reproduce |\n|---|---|---|---|---|\n",
                    md_code(scenario)
                );
                heading_written = true;
            }
            // The scenario is the heading, so the row names only the cut and
            // fault; the full test-case name would make every row twice as wide.
            let name = cell.spec.name();
            let cut = name.strip_prefix(scenario).unwrap_or(&name);
            let why = reasons(cell)
                .iter()
                .map(|(label, message)| {
                    format!(
                        "{}: {}",
                        md_code(label),
                        md_text(&truncate(message, SUMMARY_MESSAGE_CHARS_MAX))
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                cell.spec.cell_id,
                md_code(cut),
                verdict_md(cell.verdict),
                why,
                md_code(&cell.reproduce)
            );
            rows += 1;
        }
    }
}

/// Escapes text for a markdown table cell: markup characters are
/// backslash-escaped (so a message cannot turn into a link, emphasis or raw
/// HTML), and line breaks become spaces because a table row is one line.
pub(super) fn md_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in one_line(s).chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '&' | '~'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A markdown code span for a table cell. The fence is one backtick longer
/// than any run inside, and `|` is escaped because GitHub splits table cells
/// on it even inside code.
pub(super) fn md_code(s: &str) -> String {
    // Only line breaks are replaced: collapsing spaces could change a quoted
    // argument of a reproduce command that someone copies from here.
    let s = s.replace(['\r', '\n'], " ").replace('|', "\\|");
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    if s.starts_with('`') || s.ends_with('`') {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

fn verdict_md(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "pass",
        Verdict::Unknown => "**unknown**",
        Verdict::Fail => "**fail**",
    }
}
