//! Renders a finished wave into the files a person or a CI system reads:
//! `wave.json` (the machine copy, read back by `turncut report merge`),
//! `summary.md` (for `$GITHUB_STEP_SUMMARY`), `junit.xml` (one test case per
//! cell) and `report.html` (a self-contained grid of cut point × fault per
//! scenario), plus the one-line progress text of a finished cell.
//!
//! The reporters of the progress stream (`progress::Reporter`) live here
//! too: the console's ([`Human`], [`JsonLines`]: `console.rs`) and the
//! report directory's ([`ReportDir`], [`StepSummary`]: `dir.rs`), which
//! writes these files from the wave's end (`Event::WaveFinished`).
//!
//! Every sink here renders the same [`WaveResult`]; nothing in this module
//! judges a cell, runs anything or decides an exit code. It does not write the
//! per-cell evidence directories (`cells/t###/`), which belong to `evidence`.
//! Timelines are not part of the model: a caller hands them in
//! ([`write_wave_with`]), and `report.html` draws each cell's sequence
//! diagram from them. [`matrix`] places a scenario's cells by cut × fault.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::model::{CellResult, Verdict, WaveResult};

mod console;
mod dir;
mod html;
mod json;
mod junit;
mod markdown;
pub mod matrix;
mod merge;
mod sequence;
#[cfg(test)]
pub(crate) mod tests;

pub use console::{Format, Human, JsonLines, console, json_line};
pub use dir::{ReportDir, StepSummary};
pub use html::report_html;
pub use json::read_wave;
pub use junit::junit_xml;
pub use markdown::summary_markdown;
pub use merge::{merge, merge_stage1};

/// The machine-readable wave, read back by [`read_wave`].
pub const WAVE_JSON: &str = "wave.json";

/// The markdown summary.
pub const SUMMARY_MD: &str = "summary.md";

/// The JUnit XML report.
pub const JUNIT_XML: &str = "junit.xml";

/// The self-contained HTML report.
pub const REPORT_HTML: &str = "report.html";

/// At most this many failing or unknown cells are listed in `summary.md`, so a
/// wave where everything broke still fits GitHub's step-summary size limit.
pub const SUMMARY_CELL_ROWS_MAX: usize = 100;

/// An oracle message is cut to this many characters in `summary.md`.
pub const SUMMARY_MESSAGE_CHARS_MAX: usize = 300;

/// The detail of a [`cell_line`] is cut to this many characters.
pub const CELL_LINE_DETAIL_CHARS_MAX: usize = 160;

/// Timeline texts by cell id, defined with the event that carries them.
pub use crate::progress::Timelines;

/// Why a report could not be written, read or merged.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The report directory could not be created.
    #[error("creating report directory {}", .path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A report file could not be written or moved into place.
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A wave file could not be read.
    #[error("reading {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A wave file is not valid JSON or not a wave.
    #[error("parsing {}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A wave file has no `v` field.
    #[error("reading {}: no format version field \"v\"", .path.display())]
    MissingVersion { path: PathBuf },
    /// A wave file was written in a format this build does not read.
    #[error(
        "reading {}: wave format version {found} is not supported (this turncut reads version {expected})",
        .path.display()
    )]
    Version {
        path: PathBuf,
        found: String,
        expected: u32,
    },
    /// The wave could not be serialized to JSON.
    #[error("serializing {WAVE_JSON}")]
    Json(#[source] serde_json::Error),
    /// The JUnit report could not be serialized.
    #[error("serializing {JUNIT_XML}")]
    Junit(#[source] quick_junit::SerializeError),
    /// `merge` was given nothing.
    #[error("merging waves: no waves given")]
    NothingToMerge,
    /// Two of the merged waves are not shards of one wave.
    #[error(
        "merging waves: {first} (seed {first_seed}) and {other} (seed {other_seed}) are not shards of one wave"
    )]
    WaveMismatch {
        first: String,
        first_seed: u64,
        other: String,
        other_seed: u64,
    },
    /// Some merged waves are sharded and some are not.
    #[error("merging wave {wave_id}: an unsharded wave cannot be merged with shards")]
    MixedSharding { wave_id: String },
    /// Two shards disagree on how many shards there are.
    #[error("merging wave {wave_id}: shards {first} and {other} disagree on the shard count")]
    ShardCountMismatch {
        wave_id: String,
        first: String,
        other: String,
    },
    /// One shard was given twice.
    #[error("merging wave {wave_id}: shard {shard} given twice")]
    DuplicateShard { wave_id: String, shard: String },
    /// Not every shard was given, so the merged wave would hide the missing
    /// cells behind a verdict that looks complete.
    #[error("merging wave {wave_id}: {found} of {count} shards given")]
    MissingShards {
        wave_id: String,
        found: usize,
        count: u32,
    },
    /// A cell id appears in more than one shard.
    #[error("merging wave {wave_id}: cell {cell_id} appears more than once")]
    DuplicateCell { wave_id: String, cell_id: String },
    /// Stage-1 shards were given without the stage-2 runs planned from
    /// them, or the other way round, or with a wave that ran both stages.
    #[error(
        "merging wave {wave_id}: {found}, but not {missing} (stage 1 of every shard, then `turncut plan --stage2 <their dirs> --out plan2.json`, then `turncut wave --plan plan2.json` in shards: merge all of them)"
    )]
    StagesIncomplete {
        wave_id: String,
        found: String,
        missing: String,
    },
}

/// Writes `wave.json`, `summary.md`, `junit.xml` and `report.html` into `dir`
/// (created if missing).
///
/// Each file is written atomically (temp file + rename) so a killed harness
/// never leaves a half-written report. Everything is rendered before anything
/// is written, and `wave.json` is written last: its presence means the whole
/// set is there, which is what `report merge` relies on.
pub fn write_wave(dir: &Path, wave: &WaveResult) -> Result<(), ReportError> {
    write_wave_with(dir, wave, &Timelines::new())
}

/// Like [`write_wave`], with the timelines (sequence of what happened, cut
/// marked) of the cells that have one, shown in `report.html`.
pub fn write_wave_with(
    dir: &Path,
    wave: &WaveResult,
    timelines: &Timelines,
) -> Result<(), ReportError> {
    let json = serde_json::to_string_pretty(wave).map_err(ReportError::Json)?;
    let summary = summary_markdown(wave);
    let junit = junit_xml(wave, timelines)?;
    let html = report_html(wave, timelines);

    std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    write_atomically(dir, SUMMARY_MD, summary.as_bytes())?;
    write_atomically(dir, JUNIT_XML, junit.as_bytes())?;
    write_atomically(dir, REPORT_HTML, html.as_bytes())?;
    write_atomically(dir, WAVE_JSON, json.as_bytes())?;
    // The renames are durable only once the directory entry is: without this a
    // power cut could lose files the harness already announced.
    sync_dir(dir)
}

/// One short line per finished cell for plain (non-TTY) progress output:
/// id, verdict, name, duration and, unless the cell passed, why.
pub fn cell_line(cell: &CellResult) -> String {
    let mut line = format!(
        "{} {:<7} {}  {}",
        cell.spec.cell_id,
        cell.verdict.as_str(),
        cell.spec.name(),
        format_ms(cell.duration_ms)
    );
    if !cell.reruns.is_empty() {
        line.push_str(&format!("  [timing rerun ×{}]", cell.reruns.len()));
    }
    if cell.verdict != Verdict::Pass
        && let Some((label, message)) = reasons(cell).into_iter().next()
    {
        let detail = one_line(&format!("{label}: {message}"));
        line.push_str("  ");
        line.push_str(&truncate(&detail, CELL_LINE_DETAIL_CHARS_MAX));
    }
    line
}

/// Writes `bytes` to `dir/name` through a temp file in the same directory, so
/// the rename is atomic and a reader sees the old file or the new one.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), ReportError> {
    let path = dir.join(name);
    let write_error = |source| ReportError::Write {
        path: path.clone(),
        source,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(write_error)?;
    tmp.write_all(bytes).map_err(write_error)?;
    // Without the fsync a crash after the rename can leave an empty file under
    // the final name on filesystems that reorder data and metadata writes.
    tmp.as_file().sync_all().map_err(write_error)?;
    tmp.persist(&path).map_err(|e| write_error(e.error))?;
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), ReportError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| ReportError::Write {
            path: dir.to_path_buf(),
            source,
        })
}

/// Every cell, by the number in its id.
pub(crate) fn in_order(wave: &WaveResult) -> Vec<&CellResult> {
    let mut cells: Vec<&CellResult> = wave.cells.iter().collect();
    crate::model::sort_cells(&mut cells, |c| &c.spec.cell_id);
    cells
}

/// The skipped ids grouped by their reason (what `summary.md`, `report.html`
/// and the console show: one line per reason, never one per id), the most common reason first
/// (then by reason), each list in the wave's order.
pub fn skipped_by_reason(skipped: &[crate::model::Skipped]) -> Vec<(&str, Vec<&str>)> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in skipped {
        match groups.iter_mut().find(|(reason, _)| *reason == s.reason) {
            Some((_, ids)) => ids.push(&s.scenario_id),
            None => groups.push((&s.reason, vec![&s.scenario_id])),
        }
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    groups
}

/// The cells of each scenario, scenarios in the order they first appear.
pub(crate) fn by_scenario(wave: &WaveResult) -> Vec<(&str, Vec<&CellResult>)> {
    let mut groups: Vec<(&str, Vec<&CellResult>)> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for cell in &wave.cells {
        let scenario = cell.spec.scenario_id.as_str();
        let i = *index.entry(scenario).or_insert_with(|| {
            groups.push((scenario, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(cell);
    }
    for (_, cells) in &mut groups {
        crate::model::sort_cells(cells, |c| &c.spec.cell_id);
    }
    groups
}

#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) cells: usize,
    pub(crate) pass: usize,
    pub(crate) unknown: usize,
    pub(crate) fail: usize,
}

impl Counts {
    pub(crate) fn of<'a>(cells: impl Iterator<Item = &'a CellResult>) -> Counts {
        let mut counts = Counts::default();
        for cell in cells {
            counts.cells += 1;
            match cell.verdict {
                Verdict::Pass => counts.pass += 1,
                Verdict::Unknown => counts.unknown += 1,
                Verdict::Fail => counts.fail += 1,
            }
        }
        counts
    }
}

/// Why a cell did not pass, as (label, message) pairs: the oracles whose
/// verdict is the cell's, and a harness error when the cell has one.
///
/// A harness error comes first for an unknown cell, because it is usually why
/// every oracle could not decide; for a failed cell the failing oracles lead.
pub(crate) fn reasons(cell: &CellResult) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = cell
        .oracles
        .iter()
        .filter(|o| o.verdict == cell.verdict && o.verdict != Verdict::Pass)
        .map(|o| (o.oracle.as_str().to_owned(), o.message.clone()))
        .collect();
    if let Some(error) = &cell.error {
        let entry = ("harness error".to_owned(), error.clone());
        if cell.verdict == Verdict::Fail {
            out.push(entry);
        } else {
            out.insert(0, entry);
        }
    }
    if out.is_empty() && cell.verdict != Verdict::Pass {
        // A verdict no oracle explains is a harness bug, but the report must
        // still say something rather than print an empty reason.
        out.push((
            "verdict".to_owned(),
            format!("{} with no oracle saying why", cell.verdict.as_str()),
        ));
    }
    out
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Cuts `s` to at most `chars_max` characters, ending with `…` when cut.
pub(crate) fn truncate(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(chars_max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A wall time for people: `143 ms`, `12.3 s`, `4 min 05 s`.
pub(crate) fn format_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else {
        let s = ms / 1_000;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// How many cells ran again for timing (`timing`), and the reruns in all.
pub fn timing_reruns<'a>(cells: impl IntoIterator<Item = &'a CellResult>) -> (usize, usize) {
    cells.into_iter().fold((0, 0), |(n, all), c| {
        (n + usize::from(!c.reruns.is_empty()), all + c.reruns.len())
    })
}
