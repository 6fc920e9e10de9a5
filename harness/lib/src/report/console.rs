//! The console reporters of the progress stream, one chosen by
//! `--message-format` ([`Format`]):
//! - [`Human`] (the default): notes on stderr, a progress bar with an ETA
//!   on a terminal (plain `[n/N] cell` lines otherwise), each cell that did
//!   not pass printed as it finishes; a wave's counts and its cells that did
//!   not pass, or the mutants table, on stdout at the end;
//! - [`JsonLines`]: one JSON object per line on stdout, for tools
//!   (`{"type":"cell",…}`; the kinds are documented in README.md, "Everyday
//!   use"), nothing else: a wave ends with a `wave` line, a mutants run with
//!   a `mutants` line.
//!
//! Both render the events only; neither decides an exit code or writes a
//! file.

use std::io::{IsTerminal as _, Write};

use serde_json::{Value, json};

use super::{cell_line, skipped_by_reason, timing_reruns};
use crate::model::{MutantsResult, Verdict, WaveResult};
use crate::progress::{Progress, ProgressEvent, Reporter};

/// How progress is shown on the console (`--message-format`).
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

    /// Its reporter.
    pub fn reporter(self) -> Box<dyn Reporter> {
        match self {
            Format::Human => Box::new(Human::default()),
            Format::Json => Box::new(JsonLines::new(std::io::stdout())),
        }
    }
}

/// A progress handle with the console reporter of `format` alone (a
/// command adds its report directory later).
pub fn console(format: Format) -> Progress {
    Progress::new(vec![format.reporter()])
}

/// The reporter for people.
#[derive(Default)]
pub struct Human {
    /// The progress bar of the current batch (on a terminal).
    bar: Option<indicatif::ProgressBar>,
}

impl Reporter for Human {
    fn report(&mut self, event: &ProgressEvent<'_>) {
        match event {
            ProgressEvent::Note(text) => match &self.bar {
                Some(pb) => pb.println(*text),
                None => eprintln!("{text}"),
            },
            ProgressEvent::Batch { total } => self.bar = progress_bar(*total),
            ProgressEvent::Cell {
                done,
                total,
                result,
            } => match &self.bar {
                Some(pb) => {
                    pb.inc(1);
                    if result.verdict != Verdict::Pass {
                        pb.println(cell_line(result));
                    }
                }
                None => eprintln!("[{done}/{total}] {}", cell_line(result)),
            },
            ProgressEvent::BatchDone => {
                if let Some(pb) = self.bar.take() {
                    pb.finish_and_clear();
                }
            }
            ProgressEvent::WaveFinished { wave, .. } => to_stdout(&wave_text(wave)),
            ProgressEvent::MutantsFinished(m) => to_stdout(&mutants_text(m)),
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`turncut wave … | head`) is
/// nobody's loss.
fn to_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
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

/// A wave's counts, what stopped or skipped it, and every cell that did not
/// pass with its reproduce command.
fn wave_text(result: &WaveResult) -> String {
    let counts = |v: Verdict| result.cells.iter().filter(|c| c.verdict == v).count();
    let mut times: Vec<u64> = result.cells.iter().map(|c| c.duration_ms).collect();
    times.sort_unstable();
    let median = times.get(times.len() / 2).copied().unwrap_or(0);
    let (rerun, reruns) = timing_reruns(&result.cells);
    let mut text = format!(
        "{}: {} cells, {} pass, {} unknown, {} fail; median cell {median} ms; wall {:.1} s; {rerun} cells ran again for timing ({reruns} reruns)\n",
        result.wave_id,
        result.cells.len(),
        counts(Verdict::Pass),
        counts(Verdict::Unknown),
        counts(Verdict::Fail),
        result.duration_ms as f64 / 1000.0
    );
    if let Some(why) = &result.stopped {
        text.push_str(&format!("NOT COMPLETE: {why}\n"));
    }
    for (reason, ids) in skipped_by_reason(&result.skipped) {
        text.push_str(&format!(
            "SKIPPED {} (not run, not passed; listed in summary.md): {reason}\n",
            ids.len()
        ));
    }
    for c in result.cells.iter().filter(|c| c.verdict != Verdict::Pass) {
        text.push_str(&format!(
            "  {}\n    reproduce: {}\n",
            cell_line(c),
            c.reproduce
        ));
    }
    text
}

/// The bug × profile table (markdown) and the verdict line.
fn mutants_text(m: &MutantsResult) -> String {
    let mut text = String::from(
        "| bug | profile | caught by (failing cells) | failing / cells run | example |\n|---|---|---|---|---|\n",
    );
    for r in &m.rows {
        text.push_str(&format!(
            "| {}{} | {} | {} | {} / {} | {} |\n",
            r.bug,
            if r.good() { "" } else { " **NOT OK**" },
            r.profile,
            r.caught_by_text("—"),
            r.failing,
            r.cells,
            r.example.as_deref().unwrap_or("—")
        ));
    }
    text.push_str(&format!(
        "mutants: {} in {:.0} s\n",
        match (m.ok(), m.control) {
            (true, true) => "every bug caught, control clean",
            (true, false) => "every bug caught (the control did not run)",
            (false, _) => "FAILED",
        },
        m.duration_ms as f64 / 1000.0
    ));
    text
}

/// The reporter for tools: one JSON object per line on its writer.
pub struct JsonLines<W> {
    out: W,
}

impl<W: Write + Send> JsonLines<W> {
    /// JSON lines on `out` (stdout).
    pub fn new(out: W) -> JsonLines<W> {
        JsonLines { out }
    }
}

impl<W: Write + Send> Reporter for JsonLines<W> {
    fn report(&mut self, event: &ProgressEvent<'_>) {
        if let Some(line) = json_line(event) {
            let _ = writeln!(self.out, "{line}").and_then(|()| self.out.flush());
        }
    }
}

/// The JSON line of `event` (none for a batch's end).
pub fn json_line(event: &ProgressEvent<'_>) -> Option<Value> {
    Some(match event {
        ProgressEvent::Note(text) => json!({ "type": "note", "text": text }),
        ProgressEvent::Batch { total } => json!({ "type": "batch", "cells": total }),
        ProgressEvent::Cell {
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
        ProgressEvent::BatchDone => return None,
        ProgressEvent::WaveFinished { wave, .. } => wave_line(wave),
        ProgressEvent::MutantsFinished(m) => mutants_line(m),
    })
}

/// The `wave` line: the wave's counts (its `type` last, where it has
/// always been).
fn wave_line(result: &WaveResult) -> Value {
    let counts = |v: Verdict| result.cells.iter().filter(|c| c.verdict == v).count();
    let (rerun, reruns) = timing_reruns(&result.cells);
    let mut line = json!({
        "wave_id": result.wave_id,
        "verdict": result.verdict().as_str(),
        "cells": result.cells.len(),
        "pass": counts(Verdict::Pass),
        "unknown": counts(Verdict::Unknown),
        "fail": counts(Verdict::Fail),
        "not_run": result.not_run,
        "stopped": result.stopped,
        "skipped": result.skipped.len(),
        "timing_rerun_cells": rerun,
        "timing_reruns": reruns,
        "duration_ms": result.duration_ms,
    });
    line["type"] = json!("wave");
    line
}

/// The `mutants` line: the table's rows and whether they are all good.
fn mutants_line(m: &MutantsResult) -> Value {
    let rows: Vec<Value> = m
        .rows
        .iter()
        .map(|r| {
            json!({
                "bug": r.bug,
                "profile": r.profile,
                "good": r.good(),
                "caught_by": r.caught_by,
                "failing": r.failing,
                "cells": r.cells,
                "example": r.example,
            })
        })
        .collect();
    json!({
        "type": "mutants",
        "ok": m.ok(),
        "control": m.control,
        "rows": rows,
        "duration_ms": m.duration_ms,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::model::MutantRow;
    use crate::model::mutants::CONTROL;

    /// A writer whose bytes the test reads back after the reporter had them.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn row(bug: &str, caught_by: &[(&str, usize)], failing: usize) -> MutantRow {
        MutantRow {
            bug: bug.to_owned(),
            profile: "runner-codex".to_owned(),
            cells: 4,
            caught_by: caught_by
                .iter()
                .map(|(o, n)| ((*o).to_owned(), *n))
                .collect::<BTreeMap<_, _>>(),
            failing,
            example: (failing > 0).then(|| "a | cell \"name\"".to_owned()),
        }
    }

    #[test]
    fn a_mutants_run_in_json_is_json_lines_only() {
        let buf = Shared::default();
        let progress = Progress::new(vec![Box::new(JsonLines::new(buf.clone()))]);
        let wave = super::super::tests::sample_wave();
        // What `mutants::run` emits: notes, a batch of cells per bug and
        // profile, then the table.
        progress.note("building runnerd with --features seeded-bugs into target/seeded …");
        progress.note("turncut mutants: seed 7");
        progress.emit(ProgressEvent::Batch { total: 2 });
        for (i, c) in wave.cells.iter().take(2).enumerate() {
            progress.emit(ProgressEvent::Cell {
                done: i + 1,
                total: 2,
                result: c,
            });
        }
        progress.emit(ProgressEvent::BatchDone);
        progress.note("bug on runner-codex: 1 of 4 cells run not passing; caught by no-replay.turn (1) (3 s so far)");
        let result = MutantsResult {
            rows: vec![
                row(CONTROL, &[], 0),
                row("skip-fsync", &[("no-replay.turn", 1)], 1),
                row("lose-turn", &[("vacuity", 2)], 2),
            ],
            control: true,
            duration_ms: 3_400,
        };
        progress.emit(ProgressEvent::MutantsFinished(&result));
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
            .collect();
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["note", "note", "batch", "cell", "cell", "note", "mutants"]
        );
        let last = &lines[6];
        assert_eq!(last["ok"], false, "vacuity alone catches no bug");
        assert_eq!(last["rows"][1]["good"], true);
        assert_eq!(last["rows"][1]["caught_by"]["no-replay.turn"], 1);
        assert_eq!(last["rows"][2]["good"], false);
        assert_eq!(last["rows"][0]["bug"], CONTROL);
    }

    #[test]
    fn the_human_mutants_table_is_the_markdown_table_and_its_verdict() {
        let result = MutantsResult {
            rows: vec![row(CONTROL, &[], 0), row("lose-turn", &[("vacuity", 2)], 2)],
            control: true,
            duration_ms: 3_400,
        };
        let text = mutants_text(&result);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "| bug | profile | caught by (failing cells) | failing / cells run | example |",
                "|---|---|---|---|---|",
                "| (none) | runner-codex | — | 0 / 4 | — |",
                "| lose-turn **NOT OK** | runner-codex | vacuity (2) | 2 / 4 | a | cell \"name\" |",
                "mutants: FAILED in 3 s",
            ]
        );
    }

    #[test]
    fn json_lines_name_their_type_and_a_batch_end_has_none() {
        assert_eq!(
            json_line(&ProgressEvent::Note("planning")).unwrap(),
            json!({ "type": "note", "text": "planning" })
        );
        assert_eq!(
            json_line(&ProgressEvent::Batch { total: 3 }).unwrap()["type"],
            "batch"
        );
        assert!(json_line(&ProgressEvent::BatchDone).is_none());
        let wave = super::super::tests::sample_wave();
        let timelines = crate::progress::Timelines::new();
        let line = json_line(&ProgressEvent::WaveFinished {
            wave: &wave,
            timelines: &timelines,
        })
        .unwrap();
        assert_eq!(line["type"], "wave");
        assert_eq!(line["wave_id"], wave.wave_id.as_str());
        assert_eq!(line["cells"], wave.cells.len());
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert_eq!(Format::parse("xml"), None);
    }
}
