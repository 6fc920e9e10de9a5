//! The progress of long work (`wave`, `run`, `mutants`, `explore`) as one
//! stream of typed events, fanned out to a list of reporters.
//!
//! The harness says what happens ([`Progress::emit`]: a note, a batch of
//! cells starting, a cell finished, a batch done, a wave or a mutants run
//! finished); every [`Reporter`] of the list built once from the command
//! line sees every event, in order, and shows or stores it its own way: the
//! console reporters (`report::Human`, `report::JsonLines`, one chosen by
//! `--message-format`) and the report directory (`report::ReportDir`, with
//! `--out`; `report::StepSummary`, with `$GITHUB_STEP_SUMMARY`).
//!
//! This module knows no reporter and renders nothing: it holds the events,
//! the trait and the handle the work carries (`CellEnv::progress`). Nothing
//! in the library prints progress or outcomes but a reporter: a new way to
//! show them is a new [`Reporter`], not a new `println!`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::model::{CellResult, MutantsResult, WaveResult};

/// Timeline texts (`Evidence::timeline`, the cut marked) by cell id, handed
/// to the reports with the wave ([`ProgressEvent::WaveFinished`]): the sequence
/// diagram in a cell's HTML side panel and its `<system-out>` in
/// `junit.xml`. `wave.json` does not keep them, so a merged report
/// (`report::write_wave`) has none.
pub type Timelines = BTreeMap<String, String>;

/// One thing that happened in long work.
#[derive(Clone, Copy, Debug)]
pub enum ProgressEvent<'a> {
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
    /// A wave (`wave`, `run`) finished: its result, which every report
    /// renders, and its cells' timelines.
    WaveFinished {
        /// The wave.
        wave: &'a WaveResult,
        /// Each cell's timeline.
        timelines: &'a Timelines,
    },
    /// `turncut mutants` finished: the bug × profile table.
    MutantsFinished(&'a MutantsResult),
}

/// A sink of the stream: shows or stores every event it is given.
pub trait Reporter: Send {
    /// Shows or stores `event`. A reporter that cannot write keeps the
    /// error for [`Reporter::finish`]; the work goes on.
    fn report(&mut self, event: &ProgressEvent<'_>);

    /// The end of the work: what the reporter failed to write, if anything
    /// (a report file; the console's own writes are best effort).
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The reporters of a command: a handle every part of the work holds a
/// clone of (worker threads too); each event goes to every reporter, in the
/// order they were added, one event at a time. The default has none and
/// shows nothing.
#[derive(Clone, Default)]
pub struct Progress {
    reporters: Arc<Mutex<Vec<Box<dyn Reporter>>>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Progress({} reporters)", self.lock().len())
    }
}

impl Progress {
    /// A handle on `reporters`.
    pub fn new(reporters: Vec<Box<dyn Reporter>>) -> Progress {
        Progress {
            reporters: Arc::new(Mutex::new(reporters)),
        }
    }

    /// Adds `reporter` after the others, for every clone of the handle (the
    /// report directory, once the command knows it).
    pub fn add(&self, reporter: Box<dyn Reporter>) {
        self.lock().push(reporter);
    }

    /// Gives `event` to every reporter.
    pub fn emit(&self, event: ProgressEvent<'_>) {
        for r in self.lock().iter_mut() {
            r.report(&event);
        }
    }

    /// A note (shorthand for `emit(ProgressEvent::Note(…))`).
    pub fn note(&self, text: &str) {
        self.emit(ProgressEvent::Note(text));
    }

    /// Ends the work: every reporter's [`Reporter::finish`], the errors
    /// joined.
    pub fn finish(&self) -> Result<(), String> {
        let errors: Vec<String> = self
            .lock()
            .iter_mut()
            .filter_map(|r| r.finish().err())
            .collect();
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors.join("; ")),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Box<dyn Reporter>>> {
        // A reporter that panicked mid-event leaves nothing half-shared
        // that the next event could not be shown over.
        self.reporters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the kind of every event it sees.
    struct Recording(Arc<Mutex<Vec<String>>>, Option<&'static str>);

    impl Reporter for Recording {
        fn report(&mut self, event: &ProgressEvent<'_>) {
            let kind = match event {
                ProgressEvent::Note(t) => format!("note {t}"),
                ProgressEvent::Batch { total } => format!("batch {total}"),
                ProgressEvent::Cell { done, result, .. } => {
                    format!("cell {done} {}", result.spec.cell_id)
                }
                ProgressEvent::BatchDone => "batch done".into(),
                ProgressEvent::WaveFinished { wave, .. } => format!("wave {}", wave.wave_id),
                ProgressEvent::MutantsFinished(m) => format!("mutants {}", m.rows.len()),
            };
            self.0.lock().unwrap().push(kind);
        }

        fn finish(&mut self) -> Result<(), String> {
            self.1.map_or(Ok(()), |e| Err(e.to_owned()))
        }
    }

    #[test]
    fn every_reporter_of_the_list_receives_every_event_in_order() {
        let (a, b) = (Arc::default(), Arc::default());
        let progress = Progress::new(vec![Box::new(Recording(Arc::clone(&a), None))]);
        // A clone is the same list: a reporter added through it is seen by
        // every holder, as the report directory is once the wave knows it.
        progress
            .clone()
            .add(Box::new(Recording(Arc::clone(&b), Some("disk full"))));
        let wave = crate::report::tests::sample_wave();
        let cell = wave.cells[0].clone();
        let mutants = MutantsResult {
            rows: Vec::new(),
            control: true,
            duration_ms: 1,
        };
        let timelines = Timelines::new();
        let events = [
            ProgressEvent::Note("planning"),
            ProgressEvent::Batch { total: 1 },
            ProgressEvent::Cell {
                done: 1,
                total: 1,
                result: &cell,
            },
            ProgressEvent::BatchDone,
            ProgressEvent::WaveFinished {
                wave: &wave,
                timelines: &timelines,
            },
            ProgressEvent::MutantsFinished(&mutants),
        ];
        for e in events {
            progress.emit(e);
        }
        let seen = a.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "note planning".to_owned(),
                "batch 1".to_owned(),
                format!("cell 1 {}", cell.spec.cell_id),
                "batch done".to_owned(),
                format!("wave {}", wave.wave_id),
                "mutants 0".to_owned()
            ]
        );
        assert_eq!(*b.lock().unwrap(), seen);
        assert_eq!(progress.finish(), Err("disk full".to_owned()));
        assert_eq!(Progress::default().finish(), Ok(()));
    }
}
