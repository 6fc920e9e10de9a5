//! The progress of long work (`wave`, `run`, `mutants`, `explore`) as one
//! stream of events, and the reporters that show it.
//!
//! The harness says what happens ([`emit`]: a note, a batch of cells
//! starting, a cell finished, a batch done); a reporter, chosen once by the
//! command line (`--message-format`), shows it:
//! - [`Format::Human`] (the default): notes on stderr, a progress bar with
//!   an ETA on a terminal (plain `[n/N] cell` lines otherwise), each cell
//!   that did not pass printed as it finishes;
//! - [`Format::Json`]: one JSON object per line on stdout, for tools
//!   (`{"type":"cell",…}`; the kinds are [`Event`]'s, documented
//!   in README.md, "Everyday use"). The final outcome is a `wave` line.
//!
//! Nothing else in the library prints progress: a new reporter is a new
//! [`Format`], not a new `eprintln!`.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use crate::model::{CellResult, Verdict};

/// How progress is shown (`--message-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// For people: stderr, a progress bar on a terminal.
    #[default]
    Human,
    /// For tools: JSON lines on stdout.
    Json,
}

impl Format {
    /// The format named `name` (`human`, `json`).
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "human" => Some(Format::Human),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// One thing that happened in long work.
pub enum Event<'a> {
    /// A sentence about the work (planning, stage 2, what was left out).
    Note(&'a str),
    /// A batch of `total` cells starts (a stage of a wave).
    Batch {
        /// Cells in the batch.
        total: usize,
    },
    /// A cell of the current batch finished, the `done`-th of `total`.
    Cell {
        /// Cells of the batch finished, this one included.
        done: usize,
        /// Cells in the batch.
        total: usize,
        /// Its result.
        result: &'a CellResult,
    },
    /// The current batch is over.
    BatchDone,
    /// A wave's outcome (counts, wave id, reports), as a JSON object; the
    /// human reporter leaves it to the caller's own summary.
    Outcome(Value),
}

/// The reporter the command line chose; human until [`set_format`].
static FORMAT: OnceLock<Format> = OnceLock::new();

/// The progress bar of the current batch (human, on a terminal).
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Chooses the reporter, once, before any work starts.
pub fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

/// The chosen format.
pub fn format() -> Format {
    FORMAT.get().copied().unwrap_or_default()
}

/// Reports `event` with the chosen reporter.
pub fn emit(event: Event<'_>) {
    match format() {
        Format::Human => human(&event),
        Format::Json => {
            if let Some(line) = json_line(&event) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        }
    }
}

/// A note (shorthand for `emit(Event::Note(…))`).
pub fn note(text: &str) {
    emit(Event::Note(text));
}

/// The JSON line of `event` (none for a batch's end).
pub fn json_line(event: &Event<'_>) -> Option<Value> {
    Some(match event {
        Event::Note(text) => json!({ "type": "note", "text": text }),
        Event::Batch { total } => json!({ "type": "batch", "cells": total }),
        Event::Cell {
            done,
            total,
            result,
        } => json!({
            "type": "cell",
            "done": done,
            "total": total,
            "cell_id": result.spec.cell_id,
            "name": result.spec.name(),
            "verdict": result.verdict.as_str(),
            "duration_ms": result.duration_ms,
            "failed": result
                .oracles
                .iter()
                .filter(|o| o.verdict != Verdict::Pass)
                .map(|o| json!({ "oracle": o.oracle, "verdict": o.verdict.as_str() }))
                .collect::<Vec<_>>(),
            "error": result.error,
            "timing_reruns": result.reruns.len(),
            "reproduce": result.reproduce,
        }),
        Event::BatchDone => return None,
        Event::Outcome(v) => {
            let mut v = v.clone();
            v["type"] = json!("wave");
            v
        }
    })
}

/// The human reporter.
fn human(event: &Event<'_>) {
    let mut bar = BAR.lock().expect("progress bar");
    match event {
        Event::Note(text) => match bar.as_ref() {
            Some(pb) => pb.println(*text),
            None => eprintln!("{text}"),
        },
        Event::Batch { total } => *bar = progress_bar(*total),
        Event::Cell {
            done,
            total,
            result,
        } => match bar.as_ref() {
            Some(pb) => {
                pb.inc(1);
                if result.verdict != Verdict::Pass {
                    pb.println(crate::report::cell_line(result));
                }
            }
            None => eprintln!("[{done}/{total}] {}", crate::report::cell_line(result)),
        },
        Event::BatchDone => {
            if let Some(pb) = bar.take() {
                pb.finish_and_clear();
            }
        }
        Event::Outcome(_) => {}
    }
}

/// The progress bar with ETA of `cells` cells, on a terminal only.
fn progress_bar(cells: usize) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(cells as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} cells, ETA {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    Some(pb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_name_their_type_and_a_batch_end_has_none() {
        assert_eq!(
            json_line(&Event::Note("planning")).unwrap(),
            json!({ "type": "note", "text": "planning" })
        );
        assert_eq!(
            json_line(&Event::Batch { total: 3 }).unwrap()["type"],
            "batch"
        );
        assert!(json_line(&Event::BatchDone).is_none());
        let outcome = json_line(&Event::Outcome(json!({ "wave_id": "w" }))).unwrap();
        assert_eq!(outcome, json!({ "type": "wave", "wave_id": "w" }));
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert_eq!(Format::parse("xml"), None);
    }
}
