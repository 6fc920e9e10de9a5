//! `report.html`: the self-contained report for people.
//!
//! Sized for the default wave: a passing cell is one grid button, one
//! compact JSON record (its panel is built on demand by the script from the
//! record) and its abbreviated sequence (`sequence.rs`), while a cell that
//! did not pass carries its full details in a `<template>` and its full
//! sequence. The script draws a cell's sequence diagram when its panel
//! opens. Every cell text rendered here is escaped once, by `html()`; the
//! JSON is read with `JSON.parse` and shown with `textContent` (SVG text
//! too), so no cell text becomes markup.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::matrix;
use super::sequence::Sequences;
use super::{Counts, Timelines, by_scenario, format_ms, in_order, reasons, truncate};
use crate::model::{CellResult, Fault, OracleResult, Outcome, TaskState, Verdict, WaveResult};

const HTML_STYLE: &str = include_str!("report.css");

/// Filters, the panel (from a `<template>` or from the compact record) and
/// the URL fragment (`report.html#t012` opens that cell).
const HTML_SCRIPT: &str = include_str!("report.js");

/// The self-contained HTML report: a table of contents, filters, the cells
/// that did not pass grouped by their first failing oracle, and per scenario
/// a grid of cut point (rows) × fault (columns, [`Fault::ALL`] order), each
/// cell coloured by verdict; clicking one shows its details in a side panel.
/// `timelines` adds a sequence diagram to the cells it names.
pub fn report_html(wave: &WaveResult, timelines: &Timelines) -> String {
    let counts = Counts::of(wave.cells.iter());
    let verdict = wave.verdict();
    let mut out = String::with_capacity(8192 + wave.cells.len() * 160);
    let title = format!("turncut wave {}: {}", wave.wave_id, verdict.as_str());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{HTML_STYLE}</style>\n</head>\n<body>\n<main id=\"main\">\n",
        html(&title)
    );
    let _ = write!(
        out,
        "<h1>turncut wave <code>{}</code> <span class=\"v {}\">{}</span></h1>\n\
         <p>seed <code>{}</code> · {} cells: {} pass, {} unknown, {} fail · wall time {} · {} jobs{}</p>\n",
        html(&wave.wave_id),
        verdict.as_str(),
        verdict.as_str(),
        wave.seed,
        counts.cells,
        counts.pass,
        counts.unknown,
        counts.fail,
        format_ms(wave.duration_ms),
        wave.jobs,
        wave.shard
            .map(|(i, n)| format!(" · shard {i}/{n}"))
            .unwrap_or_default()
            + &timing_badge(wave)
    );
    if let Some(why) = &wave.stopped {
        let _ = writeln!(out, "<p class=\"warn\">Not complete: {}.</p>", html(why));
    }
    render_skipped(&mut out, wave);
    if wave.cells.is_empty() {
        out.push_str("<p>No cells ran.</p>\n");
    }
    let groups = by_scenario(wave);
    render_toc(&mut out, wave, &groups);
    render_filters(&mut out, wave);
    render_failures(&mut out, wave);
    for (i, (scenario, cells)) in groups.iter().enumerate() {
        render_grid(&mut out, i, scenario, cells);
    }
    out.push_str(
        "</main>\n<aside id=\"panel\"><button type=\"button\" id=\"panel-close\" title=\"close\">×</button>\
         <div id=\"panel-body\"><p class=\"muted\">Click a cell to see its oracles, outcome, \
         sequence diagram and reproduce command.</p></div></aside>\n",
    );
    for cell in wave.cells.iter().filter(|c| c.verdict != Verdict::Pass) {
        render_details(&mut out, cell, timelines.get(&cell.spec.cell_id));
    }
    let data = compact_data(wave, &groups, timelines);
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"cells\">{}</script>\n<script>{HTML_SCRIPT}</script>\n</body>\n</html>\n",
        data.replace("</", "<\\/")
    );
    out
}

/// The first oracle whose verdict is the cell's (or `harness error`).
/// One collapsed line per reason ids were skipped for, with the count.
fn render_skipped(out: &mut String, wave: &WaveResult) {
    for (reason, ids) in super::skipped_by_reason(&wave.skipped) {
        let list: Vec<String> = ids
            .iter()
            .map(|id| format!("<code>{}</code>", html(id)))
            .collect();
        let _ = writeln!(
            out,
            "<details class=\"warn skipped\"><summary>Skipped (not run, not passed): {} — {}</summary><p>{}</p></details>",
            ids.len(),
            html(reason),
            list.join(" ")
        );
    }
}

fn first_reason(cell: &CellResult) -> (String, String) {
    reasons(cell).into_iter().next().unwrap_or_default()
}

fn render_toc(out: &mut String, wave: &WaveResult, groups: &[(&str, Vec<&CellResult>)]) {
    out.push_str("<nav id=\"toc\"><h2>Contents</h2>\n<ul>\n");
    let bad = wave
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .count();
    if bad > 0 {
        let _ = writeln!(
            out,
            "<li><a href=\"#failures\">Failing and unknown cells</a> ({bad})</li>"
        );
    }
    for (i, (scenario, cells)) in groups.iter().enumerate() {
        let c = Counts::of(cells.iter().copied());
        let _ = writeln!(
            out,
            "<li><a href=\"#s{i}\"><code>{}</code></a> <span class=\"counts\">{} cells{}</span></li>",
            html(scenario),
            c.cells,
            if c.cells == c.pass {
                ", all pass".to_owned()
            } else {
                format!(": {} fail, {} unknown", c.fail, c.unknown)
            }
        );
    }
    out.push_str("</ul></nav>\n");
}

fn render_filters(out: &mut String, wave: &WaveResult) {
    let mut oracles: Vec<String> = wave
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .map(|c| first_reason(c).0)
        .collect();
    oracles.sort();
    oracles.dedup();
    let mut profiles: Vec<&str> = wave
        .cells
        .iter()
        .map(|c| c.spec.scenario_id.profile())
        .collect();
    profiles.sort();
    profiles.dedup();
    let select = |out: &mut String, id: &str, label: &str, values: &[&str]| {
        let _ = write!(
            out,
            "<label>{label} <select id=\"f-{id}\"><option value=\"\">all</option>"
        );
        for v in values {
            let _ = write!(out, "<option>{}</option>", html(v));
        }
        out.push_str("</select></label>\n");
    };
    out.push_str("<div id=\"filters\">\n");
    select(out, "v", "verdict", &["pass", "unknown", "fail"]);
    select(out, "f", "fault", &Fault::ALL.map(Fault::as_str));
    let oracles: Vec<&str> = oracles.iter().map(String::as_str).collect();
    select(out, "o", "failing oracle", &oracles);
    select(out, "p", "profile", &profiles);
    out.push_str("<span id=\"shown\" class=\"muted\"></span></div>\n");
    out.push_str(
        "<p class=\"legend\"><span class=\"c pass\">pass</span> <span class=\"c unknown\">unknown</span> \
         <span class=\"c fail\">fail</span> — the colour is the verdict, the text how the task ended \
         (<code>done</code> completed, <code>human</code> needs_human, <code>no state</code> unreadable); \
         click a cell for details.</p>\n",
    );
}

/// The cells that did not pass, grouped by their first failing oracle (the
/// group most cells share first), each with its message inline.
fn render_failures(out: &mut String, wave: &WaveResult) {
    let mut groups: BTreeMap<String, Vec<(&CellResult, String)>> = BTreeMap::new();
    for cell in in_order(wave)
        .into_iter()
        .filter(|c| c.verdict != Verdict::Pass)
    {
        let (oracle, message) = first_reason(cell);
        groups.entry(oracle).or_default().push((cell, message));
    }
    if groups.is_empty() {
        return;
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by_key(|(_, cells)| std::cmp::Reverse(cells.len()));
    out.push_str(
        "<section id=\"failures\"><h2>Failing and unknown cells, by first failing oracle</h2>\n",
    );
    for (oracle, cells) in groups {
        let _ = writeln!(
            out,
            "<details open><summary><code>{}</code> ({})</summary>\n<ul class=\"bad\">",
            html(&oracle),
            cells.len()
        );
        for (cell, message) in cells {
            let _ = writeln!(
                out,
                "<li>{} <code>{}</code><br><span class=\"msg\">{}</span></li>",
                cell_button(cell, &cell.spec.cell_id),
                html(&cell.spec.name()),
                html(&truncate(&message, 400))
            );
        }
        out.push_str("</ul></details>\n");
    }
    out.push_str("</section>\n");
}

fn render_grid(out: &mut String, index: usize, scenario: &str, cells: &[&CellResult]) {
    // A row per cut, in the order cells first reach it (cell order); clean
    // runs (no cut or no fault) get their own full-width row.
    let rows = matrix::rows(cells.iter().map(|c| (&c.spec, *c)));

    let c = Counts::of(cells.iter().copied());
    let _ = write!(
        out,
        "<section id=\"s{index}\" class=\"scenario\" data-p=\"{}\">\n<h2><code>{}</code> <span class=\"counts\">{} cells: {} pass, {} unknown, {} fail</span></h2>\n\
         <table class=\"grid\">\n<thead><tr><th>cut point</th>",
        html(crate::scenario::profile_of(scenario)),
        html(scenario),
        c.cells,
        c.pass,
        c.unknown,
        c.fail
    );
    for fault in Fault::ALL {
        let _ = write!(out, "<th>{}</th>", html(fault.as_str()));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &rows {
        match row.cut {
            Some(cut) => {
                let _ = write!(out, "<tr><th><code>{}</code></th>", html(&cut.to_string()));
                for slot in &row.by_fault {
                    out.push_str("<td>");
                    for cell in slot {
                        out.push_str(&cell_button(cell, &outcome_abbrev(cell)));
                    }
                    out.push_str("</td>");
                }
            }
            None => {
                let _ = write!(
                    out,
                    "<tr><th>clean run</th><td colspan=\"{}\">",
                    Fault::ALL.len()
                );
                for cell in &row.clean {
                    out.push_str(&cell_button(cell, &outcome_abbrev(cell)));
                }
                out.push_str("</td>");
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// A grid button: class is the verdict, `data-f` the fault and, unless the
/// cell passed, `data-o` its first failing oracle (for the filters). The
/// name is in the panel and the compact record, not in a title, to keep a
/// passing cell small.
fn cell_button(cell: &CellResult, text: &str) -> String {
    // A faulted cell's fault is its grid column (the script reads it from
    // the column, in `Fault::ALL` order like the fault filter); only a clean
    // cell, which spans the columns, says it has none.
    let fault = match cell.spec.fault() {
        Some(_) => "",
        None => " data-f=\"\"",
    };
    let oracle = if cell.verdict == Verdict::Pass {
        String::new()
    } else {
        format!(" data-o=\"{}\"", html(&first_reason(cell).0))
    };
    // No `type`: there is no form, so a button submits nothing.
    format!(
        "<button class=\"c {}\" data-cell=\"{}\"{fault}{oracle}>{}</button>",
        cell.verdict.as_str(),
        html(&cell.spec.cell_id),
        html(text)
    )
}

/// The short text of a grid cell: how the task ended (never the verdict,
/// which is the colour), and the cause when there is one.
fn outcome_abbrev(cell: &CellResult) -> String {
    let state = match cell.outcome.state {
        Some(TaskState::Completed) => "done".to_owned(),
        Some(TaskState::NeedsHuman) => "human".to_owned(),
        None => "no state".to_owned(),
        Some(other) => truncate(other.as_str(), 10),
    };
    match &cell.outcome.cause {
        Some(cause) => format!("{state} · {}", truncate(cause, 18)),
        None => state,
    }
}

/// The compact records the script builds a passing cell's panel from, and
/// every cell's sequence: `{"oracles": [names], "scenarios": [ids], "cuts":
/// [cuts], "cells": {id: [scenario, cut, fault, verdict, state, cause, ms,
/// seed, runs, continuations, retry, reached]}, "seq": …}` (indexes into the
/// lists; `seq` is [`Sequences::into_json`]).
fn compact_data(
    wave: &WaveResult,
    groups: &[(&str, Vec<&CellResult>)],
    timelines: &Timelines,
) -> String {
    let mut oracles: Vec<&str> = Vec::new();
    for c in &wave.cells {
        for o in &c.oracles {
            if !oracles.contains(&o.oracle.as_str()) {
                oracles.push(o.oracle.as_str());
            }
        }
    }
    let scenarios: Vec<&str> = groups.iter().map(|(s, _)| *s).collect();
    let mut cuts: Vec<String> = Vec::new();
    let mut cut_index: BTreeMap<String, usize> = BTreeMap::new();
    let mut cells = serde_json::Map::new();
    for c in &wave.cells {
        let cut = c.spec.cut().as_ref().map(|cut| {
            *cut_index.entry(cut.to_string()).or_insert_with(|| {
                cuts.push(cut.to_string());
                cuts.len() - 1
            })
        });
        let o = &c.outcome;
        let record = serde_json::json!([
            scenarios.iter().position(|s| c.spec.scenario_id == *s),
            cut,
            c.spec.fault().map(|f| f.as_str()),
            c.verdict.as_str(),
            o.state,
            o.cause,
            c.duration_ms,
            c.spec.seed.to_string(),
            o.runs,
            o.continuations,
            o.retry_status,
            o.reached_cut,
        ]);
        cells.insert(c.spec.cell_id.clone(), record);
    }
    let mut sequences = Sequences::default();
    for c in in_order(wave) {
        if let Some(timeline) = timelines.get(&c.spec.cell_id) {
            sequences.add(c, timeline);
        }
    }
    serde_json::json!({
        "oracles": oracles,
        "scenarios": scenarios,
        "cuts": cuts,
        "cells": cells,
        "seq": sequences.into_json(),
    })
    .to_string()
}

fn render_details(out: &mut String, cell: &CellResult, timeline: Option<&String>) {
    let spec = &cell.spec;
    let _ = write!(
        out,
        "<template id=\"d-{}\">\n<h3>{} <span class=\"v {}\">{}</span></h3>\n<p><code>{}</code></p>\n<dl>",
        html(&spec.cell_id),
        html(&spec.cell_id),
        cell.verdict.as_str(),
        cell.verdict.as_str(),
        html(&spec.name())
    );
    let cut = spec
        .cut()
        .as_ref()
        .map_or_else(|| "none".to_owned(), |c| c.to_string());
    let fault = spec.fault().map_or("none", |f| f.as_str());
    for (term, value) in [
        ("scenario", spec.scenario_id.to_string()),
        ("cut", cut),
        ("fault", fault.to_owned()),
        ("seed", spec.seed.to_string()),
        ("duration", format_ms(cell.duration_ms)),
    ] {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", html(term), html(&value));
    }
    out.push_str("</dl>\n");
    if let Some(error) = &cell.error {
        let _ = writeln!(out, "<p class=\"error\">harness error: {}</p>", html(error));
    }
    if let Some(why) = &cell.retried {
        let _ = writeln!(out, "<p class=\"muted\">ran twice: {}</p>", html(why));
    }
    for r in &cell.reruns {
        let _ = writeln!(
            out,
            "<p class=\"badge timing\">timing rerun (idle {} ms, hang idle {} ms, deadline {} ms): {}</p>",
            r.idle_timeout_ms,
            r.hang_idle_timeout_ms,
            r.cell_wait_ms,
            html(&r.why)
        );
    }

    render_oracles(out, cell);
    render_outcome(out, &cell.outcome);

    let _ = writeln!(
        out,
        "<h4>reproduce</h4>\n<pre class=\"cmd\">{}</pre>",
        html(&cell.reproduce)
    );
    if let Some(timeline) = timeline {
        let _ = writeln!(
            out,
            "<h4>sequence</h4>\n<div class=\"seq\" data-seq=\"{}\"></div>\n<details><summary>timeline as text</summary><pre class=\"timeline\">{}</pre></details>",
            html(&spec.cell_id),
            html(timeline)
        );
    }
    out.push_str("</template>\n");
}

/// A cell's oracle table (or the note that no oracle judged it).
fn render_oracles(out: &mut String, cell: &CellResult) {
    out.push_str("<h4>oracles</h4>\n");
    if cell.oracles.is_empty() {
        out.push_str("<p class=\"muted\">no oracle judged this cell</p>\n");
    } else {
        out.push_str("<table class=\"oracles\"><tr><th>oracle</th><th>verdict</th><th>message</th><th>evidence</th></tr>\n");
        for o in &cell.oracles {
            render_oracle_row(out, o);
        }
        out.push_str("</table>\n");
    }
}

/// A cell's outcome: how the task ended and how the runner got there.
fn render_outcome(out: &mut String, o: &Outcome) {
    out.push_str("<h4>outcome</h4>\n<dl>");
    for (term, value) in [
        ("state", TaskState::name(o.state).to_owned()),
        (
            "cause",
            o.cause.clone().unwrap_or_else(|| "none".to_owned()),
        ),
        ("reached cut", o.reached_cut.to_string()),
        ("runs", o.runs.to_string()),
        ("continuations", o.continuations.to_string()),
        (
            "retry",
            o.retry_status
                .map_or_else(|| "none".to_owned(), |s| format!("HTTP {s}")),
        ),
    ] {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", html(term), html(&value));
    }
    out.push_str("</dl>\n");
}

fn render_oracle_row(out: &mut String, o: &OracleResult) {
    let evidence = o
        .evidence
        .iter()
        .map(|e| format!("<code>{}</code>", html(e)))
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(
        out,
        "<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
        o.verdict.as_str(),
        html(o.oracle.as_str()),
        o.verdict.as_str(),
        html(&o.message),
        evidence
    );
}

/// Escapes text for HTML element content and quoted attribute values alike.
pub(super) fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The header's badge of timing reruns (always shown: a rerun is never
/// quiet, and none is worth saying too).
fn timing_badge(wave: &WaveResult) -> String {
    let (rerun, reruns) = super::timing_reruns(&wave.cells);
    let stress = if wave.run.stress > 0 {
        format!(" · --stress {}", wave.run.stress)
    } else {
        String::new()
    };
    format!(" · <span class=\"badge timing\">{reruns} timing reruns ({rerun} cells)</span>{stress}")
}
