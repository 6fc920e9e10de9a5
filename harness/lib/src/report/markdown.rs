//! `summary.md`, also appended to `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write as _;

use super::{Counts, JUNIT_XML, REPORT_HTML, SUMMARY_CELL_ROWS_MAX, SUMMARY_MESSAGE_CHARS_MAX};
use super::{by_scenario, format_ms, in_order, one_line, reasons, truncate};
use crate::model::{CellResult, Verdict, WaveResult};

/// The markdown summary (also what the caller appends to
/// `$GITHUB_STEP_SUMMARY`), in the order a reader needs it: the verdict and
/// the figures, a line saying what did not complete or did not run, the
/// cells that did not pass grouped by their first failing oracle, the
/// skipped cells grouped by reason (one line per reason, the ids in a
/// collapsed block), and last the count of cells per scenario.
///
/// It is GitHub-flavoured markdown whose only HTML is the `<details>` block
/// around a long id list, so it reads the same raw in a terminal and
/// rendered in a step summary.
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
    let skips = super::skipped_by_reason(&wave.skipped);
    if !skips.is_empty() {
        let _ = writeln!(
            out,
            "**Skipped:** {} not run, not passed, for {} {} (see [Skipped](#skipped)).\n",
            wave.skipped.len(),
            skips.len(),
            if skips.len() == 1 {
                "reason"
            } else {
                "reasons"
            }
        );
    }
    if wave.cells.is_empty() {
        out.push_str("No cells ran.\n");
    } else if counts.pass == counts.cells {
        let _ = writeln!(out, "All {} cells passed.", counts.cells);
    } else {
        failing_cells(&mut out, wave, counts.cells - counts.pass);
    }
    skipped_section(&mut out, &skips);
    if !wave.cells.is_empty() {
        per_scenario(&mut out, wave);
    }
    out
}

/// The "Skipped" section: one line per reason with its count, the ids in a
/// collapsed `<details>` block.
fn skipped_section(out: &mut String, skips: &[(&str, Vec<&str>)]) {
    if skips.is_empty() {
        return;
    }
    out.push_str(
        "\n## Skipped\n\nNot run, not passed: each reason with how many ids it skipped.\n\n",
    );
    for (reason, ids) in skips {
        let _ = writeln!(out, "- **{}** skipped: {}", ids.len(), md_text(reason));
        let list = ids
            .iter()
            .map(|id| md_code(id))
            .collect::<Vec<_>>()
            .join(" · ");
        let _ = writeln!(
            out,
            "  <details><summary>the {} ids</summary>\n\n  {list}\n\n  </details>\n",
            ids.len()
        );
    }
}

/// The cells per scenario and their verdicts.
fn per_scenario(out: &mut String, wave: &WaveResult) {
    out.push_str("\n## Cells per scenario\n\n| scenario | cells | pass | unknown | fail |\n|---|---:|---:|---:|---:|\n");
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

/// The "Failing and unknown cells" section: a table per first failing
/// oracle (the one most cells share first, as `report.html` groups them),
/// at most [`SUMMARY_CELL_ROWS_MAX`] rows in all (`not_passed` counts them
/// all).
fn failing_cells(out: &mut String, wave: &WaveResult, not_passed: usize) {
    out.push_str("## Failing and unknown cells, by first failing oracle\n");
    let mut rows = 0;
    'groups: for (oracle, cells) in by_first_oracle(wave) {
        let _ = write!(
            out,
            "\n### {} ({})\n\n| cell | name | verdict | why | reproduce |\n|---|---|---|---|---|\n",
            md_code(&oracle),
            cells.len()
        );
        for cell in cells {
            if rows == SUMMARY_CELL_ROWS_MAX {
                let _ = writeln!(
                    out,
                    "\n…and {} more failing or unknown cells; see `{JUNIT_XML}` or `{REPORT_HTML}`.",
                    not_passed - rows
                );
                break 'groups;
            }
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
                md_code(&cell.spec.name()),
                verdict_md(cell.verdict),
                why,
                md_code(&cell.reproduce)
            );
            rows += 1;
        }
    }
}

/// The cells that did not pass, by their first failing oracle, the largest
/// group first; cells in number order within a group.
fn by_first_oracle(wave: &WaveResult) -> Vec<(String, Vec<&CellResult>)> {
    let mut groups: std::collections::BTreeMap<String, Vec<&CellResult>> = Default::default();
    for cell in in_order(wave)
        .into_iter()
        .filter(|c| c.verdict != Verdict::Pass)
    {
        let oracle = reasons(cell).into_iter().next().unwrap_or_default().0;
        groups.entry(oracle).or_default().push(cell);
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by_key(|(_, cells)| std::cmp::Reverse(cells.len()));
    groups
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
