//! `report.html`: the self-contained report for people.

use std::fmt::Write as _;

use super::{Counts, Timelines, by_scenario, format_ms, truncate};
use crate::model::{CellResult, Cut, Fault, OracleResult, Verdict, WaveResult};

/// The self-contained HTML report: per scenario a grid of cut point (rows, in
/// the order the cells appear) × fault (columns, [`Fault::ALL`] order), each
/// cell coloured by verdict; clicking one shows its details in a side panel.
///
/// Everything is rendered here in Rust and escaped once, by `html()`; the
/// inline script only moves a cell's pre-rendered details into the panel, so
/// no cell text ever passes through JavaScript string handling. `timelines`
/// adds a sequence-diagram text to the cells it names (see [`Timelines`]).
pub fn report_html(wave: &WaveResult, timelines: &Timelines) -> String {
    let counts = Counts::of(wave.cells.iter());
    let verdict = wave.verdict();
    let mut out = String::with_capacity(4096 + wave.cells.len() * 1024);
    let title = format!("turncut wave {}: {}", wave.wave_id, verdict.as_str());
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{HTML_STYLE}</style>\n</head>\n<body>\n<main>\n",
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
    );
    out.push_str(
        "<p class=\"legend\"><span class=\"c pass\">pass</span> <span class=\"c unknown\">unknown</span> \
         <span class=\"c fail\">fail</span> — each cell shows how the task ended; click one for details.</p>\n",
    );
    if wave.cells.is_empty() {
        out.push_str("<p>No cells ran.</p>\n");
    }

    let not_passed: Vec<&CellResult> = wave
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .collect();
    if !not_passed.is_empty() {
        out.push_str("<h2>Failing and unknown cells</h2>\n<ul class=\"bad\">\n");
        for cell in not_passed {
            let _ = writeln!(
                out,
                "<li>{} <code>{}</code></li>",
                cell_button(cell, &cell.spec.cell_id),
                html(&cell.spec.name())
            );
        }
        out.push_str("</ul>\n");
    }

    for (scenario, cells) in by_scenario(wave) {
        render_grid(&mut out, scenario, &cells);
    }
    out.push_str("</main>\n<aside id=\"panel\"><div id=\"panel-body\"><p class=\"muted\">Click a cell to see its oracles, outcome and reproduce command.</p></div></aside>\n");
    for cell in &wave.cells {
        render_details(&mut out, cell, timelines.get(&cell.spec.cell_id));
    }
    let _ = write!(out, "<script>{HTML_SCRIPT}</script>\n</body>\n</html>\n");
    out
}

fn render_grid(out: &mut String, scenario: &str, cells: &[&CellResult]) {
    // A row per cut, in the order cells first reach it; clean runs (no cut or
    // no fault) get their own full-width row because no fault column fits them.
    struct Row<'a> {
        cut: Option<&'a Cut>,
        by_fault: [Vec<&'a CellResult>; Fault::ALL.len()],
        clean: Vec<&'a CellResult>,
    }
    let mut rows: Vec<Row> = Vec::new();
    for &cell in cells {
        let (cut, fault) = match (&cell.spec.cut, cell.spec.fault) {
            (Some(cut), Some(fault)) => (Some(cut), Some(fault)),
            _ => (None, None),
        };
        let i = match rows.iter().position(|r| r.cut == cut) {
            Some(i) => i,
            None => {
                rows.push(Row {
                    cut,
                    by_fault: Default::default(),
                    clean: Vec::new(),
                });
                rows.len() - 1
            }
        };
        match fault {
            Some(fault) => {
                let column = Fault::ALL
                    .iter()
                    .position(|f| *f == fault)
                    .expect("Fault::ALL lists every fault");
                rows[i].by_fault[column].push(cell);
            }
            None => rows[i].clean.push(cell),
        }
    }

    let c = Counts::of(cells.iter().copied());
    let _ = write!(
        out,
        "<section>\n<h2><code>{}</code> <span class=\"counts\">{} cells: {} pass, {} unknown, {} fail</span></h2>\n\
         <table class=\"grid\">\n<thead><tr><th>cut point</th>",
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

fn cell_button(cell: &CellResult, text: &str) -> String {
    let title = format!(
        "{} {}: {}",
        cell.spec.cell_id,
        cell.verdict.as_str(),
        cell.spec.name()
    );
    format!(
        "<button type=\"button\" class=\"c {}\" data-cell=\"{}\" title=\"{}\">{}</button>",
        cell.verdict.as_str(),
        html(&cell.spec.cell_id),
        html(&title),
        html(text)
    )
}

/// The short text of a grid cell: the final state, and the cause when there
/// is one, abbreviated so four columns fit on a laptop screen.
fn outcome_abbrev(cell: &CellResult) -> String {
    let state = match cell.outcome.state.as_str() {
        "completed" => "done".to_owned(),
        "needs_human" => "human".to_owned(),
        other => truncate(other, 10),
    };
    match &cell.outcome.cause {
        Some(cause) => format!("{state} · {}", truncate(cause, 18)),
        None => state,
    }
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
        .cut
        .as_ref()
        .map_or_else(|| "none".to_owned(), |c| c.to_string());
    let fault = spec.fault.map_or("none", |f| f.as_str());
    for (term, value) in [
        ("scenario", spec.scenario_id.clone()),
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

    let o = &cell.outcome;
    out.push_str("<h4>outcome</h4>\n<dl>");
    for (term, value) in [
        ("state", o.state.clone()),
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

    let _ = writeln!(
        out,
        "<h4>reproduce</h4>\n<pre class=\"cmd\">{}</pre>",
        html(&cell.reproduce)
    );
    if let Some(timeline) = timeline {
        let _ = writeln!(
            out,
            "<h4>timeline</h4>\n<pre class=\"timeline\">{}</pre>",
            html(timeline)
        );
    }
    out.push_str("</template>\n");
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
        html(&o.oracle),
        o.verdict.as_str(),
        html(&o.message),
        evidence
    );
}

/// Escapes text for HTML element content and quoted attribute values alike.
fn html(s: &str) -> String {
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

const HTML_STYLE: &str = include_str!("report.css");

/// Moves a cell's pre-rendered `<template>` into the side panel and keeps the
/// choice in the URL fragment, so a link to `report.html#t012` opens that cell.
const HTML_SCRIPT: &str = include_str!("report.js");
