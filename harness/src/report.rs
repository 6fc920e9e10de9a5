//! Renders a finished wave into the files a person or a CI system reads:
//! `wave.json` (the machine copy, read back by `turncut report merge`),
//! `summary.md` (for `$GITHUB_STEP_SUMMARY`), `junit.xml` (one test case per
//! cell) and `report.html` (a self-contained grid of cut point × fault per
//! scenario), plus the one-line progress text of a finished cell.
//!
//! Every sink here renders the same [`WaveResult`]; nothing in this module
//! judges a cell, runs anything or decides an exit code. It does not write the
//! per-cell evidence directories (`cells/t###/`), which belong to `evidence`,
//! and it does not draw sequence diagrams: the model carries no timeline yet,
//! so [`report_html`] only shows a timeline text a caller hands it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Deserialize;

use crate::model::{
    CellResult, Cut, Fault, OracleResult, Verdict, WAVE_FORMAT_VERSION, WaveResult,
};

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

/// Timeline texts (sequence diagrams with the cut marked) by cell id, shown in
/// the HTML side panel of a cell when present.
///
/// This is the hook for the DESIGN's per-cell sequence diagram: the model has
/// no timeline yet, so [`write_wave`] passes an empty map.
pub type Timelines = BTreeMap<String, String>;

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
    let junit = junit_xml(wave)?;
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

/// Reads a `wave.json`, checking its format version first so a file from
/// another turncut fails with a clear message instead of a field error.
pub fn read_wave(path: &Path) -> Result<WaveResult, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parse_error = |source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    };

    // Only the version is read first: a newer format may have changed every
    // other field, and "version 2 is not supported" beats "missing field x".
    #[derive(Deserialize)]
    struct VersionProbe {
        v: Option<serde_json::Value>,
    }
    let probe: VersionProbe = serde_json::from_str(&text).map_err(parse_error)?;
    match probe.v {
        None => {
            return Err(ReportError::MissingVersion {
                path: path.to_path_buf(),
            });
        }
        Some(v) if v.as_u64() != Some(u64::from(WAVE_FORMAT_VERSION)) => {
            return Err(ReportError::Version {
                path: path.to_path_buf(),
                found: v.to_string(),
                expected: WAVE_FORMAT_VERSION,
            });
        }
        Some(_) => {}
    }
    serde_json::from_str(&text).map_err(parse_error)
}

/// Joins the shards of one wave (`turncut report merge`) into one unsharded
/// wave with its cells sorted by cell id.
///
/// All waves must share the wave id and seed. When they are shards, every
/// shard `i/n` must be there exactly once, since a merged wave with a shard
/// missing would report a verdict over cells that never ran. A cell id seen
/// twice is an error. The merged `jobs` is the sum of the shards' (they ran
/// side by side on separate machines) and its wall time is the longest shard's.
pub fn merge(waves: Vec<WaveResult>) -> Result<WaveResult, ReportError> {
    let Some(first) = waves.first() else {
        return Err(ReportError::NothingToMerge);
    };
    let wave_id = first.wave_id.clone();
    let seed = first.seed;
    for other in &waves[1..] {
        if other.wave_id != wave_id || other.seed != seed {
            return Err(ReportError::WaveMismatch {
                first: wave_id,
                first_seed: seed,
                other: other.wave_id.clone(),
                other_seed: other.seed,
            });
        }
    }
    check_shards(&wave_id, &waves)?;

    let jobs = waves.iter().map(|w| w.jobs).sum();
    let duration_ms = waves.iter().map(|w| w.duration_ms).max().unwrap_or(0);
    let mut cells: Vec<CellResult> = waves.into_iter().flat_map(|w| w.cells).collect();
    cells.sort_by(|a, b| cell_id_key(&a.spec.cell_id).cmp(&cell_id_key(&b.spec.cell_id)));
    if let Some(pair) = cells
        .windows(2)
        .find(|pair| pair[0].spec.cell_id == pair[1].spec.cell_id)
    {
        return Err(ReportError::DuplicateCell {
            wave_id,
            cell_id: pair[0].spec.cell_id.clone(),
        });
    }
    Ok(WaveResult {
        v: WAVE_FORMAT_VERSION,
        wave_id,
        seed,
        shard: None,
        jobs,
        duration_ms,
        cells,
    })
}

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
    let unreached = crate::wave::unreached(&wave.cells);
    if wave.cells.iter().any(|c| c.spec.cut.is_some()) {
        facts.push(format!(
            "{unreached} cells did not reach their armed cut (tested nothing; not rerun)"
        ));
    }
    let _ = writeln!(out, "{}\n", facts.join(" · "));

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

    out.push_str("## Failing and unknown cells\n");
    let mut rows = 0;
    let not_passed = counts.cells - counts.pass;
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
    out
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
    if cell.verdict != Verdict::Pass
        && let Some((label, message)) = reasons(cell).into_iter().next()
    {
        let detail = one_line(&format!("{label}: {message}"));
        line.push_str("  ");
        line.push_str(&truncate(&detail, CELL_LINE_DETAIL_CHARS_MAX));
    }
    line
}

/// The JUnit XML report: one suite per scenario (in the order the scenarios
/// first appear), one test case per cell.
pub fn junit_xml(wave: &WaveResult) -> Result<String, ReportError> {
    let mut report = Report::new(format!("turncut {}", wave.wave_id));
    report.set_time(Duration::from_millis(wave.duration_ms));
    for (scenario, cells) in by_scenario(wave) {
        let mut suite = TestSuite::new(scenario);
        suite.add_property(("wave_id", wave.wave_id.as_str()));
        suite.add_property(("seed", wave.seed.to_string().as_str()));
        suite.set_time(Duration::from_millis(
            cells.iter().map(|c| c.duration_ms).sum(),
        ));
        for cell in cells {
            suite.add_test_case(junit_case(cell));
        }
        report.add_test_suite(suite);
    }
    report.to_string().map_err(ReportError::Junit)
}

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

/// Checks that sharded waves are each shard of one run exactly once.
fn check_shards(wave_id: &str, waves: &[WaveResult]) -> Result<(), ReportError> {
    let shards: Vec<(u32, u32)> = waves.iter().filter_map(|w| w.shard).collect();
    if shards.is_empty() {
        return Ok(());
    }
    if shards.len() != waves.len() {
        return Err(ReportError::MixedSharding {
            wave_id: wave_id.to_owned(),
        });
    }
    let (_, count) = shards[0];
    let mut seen = std::collections::BTreeSet::new();
    for &(i, n) in &shards {
        if n != count {
            return Err(ReportError::ShardCountMismatch {
                wave_id: wave_id.to_owned(),
                first: format!("{}/{}", shards[0].0, count),
                other: format!("{i}/{n}"),
            });
        }
        if !seen.insert(i) {
            return Err(ReportError::DuplicateShard {
                wave_id: wave_id.to_owned(),
                shard: format!("{i}/{n}"),
            });
        }
    }
    // Counting distinct indexes works whether shards are numbered from 0 or 1.
    if seen.len() != count as usize {
        return Err(ReportError::MissingShards {
            wave_id: wave_id.to_owned(),
            found: seen.len(),
            count,
        });
    }
    Ok(())
}

/// Orders cell ids by their number, so `t1000` sorts after `t999` even though
/// ids are only zero-padded to three digits.
fn cell_id_key(id: &str) -> (&str, usize, &str, &str) {
    let digits_at = id.find(|c: char| c.is_ascii_digit()).unwrap_or(id.len());
    let (prefix, rest) = id.split_at(digits_at);
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..digits_end].trim_start_matches('0');
    (prefix, number.len(), number, id)
}

/// The cells of each scenario, scenarios in the order they first appear.
fn by_scenario(wave: &WaveResult) -> Vec<(&str, Vec<&CellResult>)> {
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
    groups
}

#[derive(Default)]
struct Counts {
    cells: usize,
    pass: usize,
    unknown: usize,
    fail: usize,
}

impl Counts {
    fn of<'a>(cells: impl Iterator<Item = &'a CellResult>) -> Counts {
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
fn reasons(cell: &CellResult) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = cell
        .oracles
        .iter()
        .filter(|o| o.verdict == cell.verdict && o.verdict != Verdict::Pass)
        .map(|o| (o.oracle.clone(), o.message.clone()))
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
        o.state,
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

/// Escapes text for a markdown table cell: markup characters are
/// backslash-escaped (so a message cannot turn into a link, emphasis or raw
/// HTML), and line breaks become spaces because a table row is one line.
fn md_text(s: &str) -> String {
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
fn md_code(s: &str) -> String {
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

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Cuts `s` to at most `chars_max` characters, ending with `…` when cut.
fn truncate(s: &str, chars_max: usize) -> String {
    if s.chars().count() <= chars_max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(chars_max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A wall time for people: `143 ms`, `12.3 s`, `4 min 05 s`.
fn format_ms(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1_000.0)
    } else {
        let s = ms / 1_000;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

const HTML_STYLE: &str = r#"
:root { font-family: system-ui, sans-serif; color: #1f2328; }
body { margin: 0; }
main { margin-right: 42vw; padding: 1rem 1.5rem; }
code, pre { font-family: ui-monospace, monospace; font-size: 0.9em; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
.counts { font-weight: normal; color: #59636e; font-size: 0.9rem; }
.muted { color: #59636e; }
table.grid { border-collapse: collapse; }
table.grid th, table.grid td { border: 1px solid #d1d9e0; padding: 2px 4px; vertical-align: top; }
table.grid thead th { background: #f6f8fa; font-weight: 600; white-space: nowrap; }
table.grid tbody th { text-align: left; font-weight: normal; white-space: nowrap; }
.c { display: inline-block; border: 1px solid; border-radius: 4px; padding: 1px 6px; margin: 1px;
     font: inherit; font-size: 0.85em; cursor: pointer; white-space: nowrap; }
.c.pass { background: #dafbe1; border-color: #1a7f37; }
.c.unknown { background: #fff1c2; border-color: #bf8700; }
.c.fail { background: #ffd7d5; border-color: #cf222e; }
.c.sel { outline: 3px solid #0969da; }
.v { font-size: 0.8em; padding: 1px 6px; border-radius: 4px; }
.v.pass { background: #dafbe1; } .v.unknown { background: #fff1c2; } .v.fail { background: #ffd7d5; }
ul.bad { list-style: none; padding-left: 0; }
#panel { position: fixed; top: 0; right: 0; bottom: 0; width: 40vw; overflow: auto;
         border-left: 1px solid #d1d9e0; background: #f6f8fa; padding: 0 1rem; box-sizing: border-box; }
#panel dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; }
#panel dt { color: #59636e; } #panel dd { margin: 0; }
table.oracles { border-collapse: collapse; width: 100%; }
table.oracles th, table.oracles td { border: 1px solid #d1d9e0; padding: 2px 4px; text-align: left; vertical-align: top; }
table.oracles td:first-child { white-space: nowrap; }
table.oracles tr.fail td { background: #ffd7d5; } table.oracles tr.unknown td { background: #fff1c2; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #fff; border: 1px solid #d1d9e0; padding: 6px; }
.error { color: #cf222e; }
@media (max-width: 900px) { main { margin-right: 0; } #panel { position: static; width: auto; } }
"#;

/// Moves a cell's pre-rendered `<template>` into the side panel and keeps the
/// choice in the URL fragment, so a link to `report.html#t012` opens that cell.
const HTML_SCRIPT: &str = r#"
(function () {
  var body = document.getElementById('panel-body');
  function show(id) {
    var t = document.getElementById('d-' + id);
    if (!t) return;
    body.replaceChildren(t.content.cloneNode(true));
    document.querySelectorAll('[data-cell]').forEach(function (e) {
      e.classList.toggle('sel', e.dataset.cell === id);
    });
  }
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest('[data-cell]');
    if (!b) return;
    show(b.dataset.cell);
    history.replaceState(null, '', '#' + encodeURIComponent(b.dataset.cell));
  });
  if (location.hash.length > 1) show(decodeURIComponent(location.hash.slice(1)));
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CellSpec, Outcome};

    const INJECTION: &str = "</script><b>x";
    const FAIL_MESSAGE: &str = "message m1 started 2 primary turns";
    const FAIL_REPRODUCE: &str = "turncut run everyday.runner-codex.local.single --cut runner.turn_intent.persisted#1 --fault kill-runner --seed 7";

    fn oracle(name: &str, verdict: Verdict, message: &str) -> OracleResult {
        OracleResult {
            oracle: name.to_owned(),
            verdict,
            message: message.to_owned(),
            evidence: if verdict == Verdict::Pass {
                vec![]
            } else {
                vec!["journal.jsonl:12".to_owned(), "events#7".to_owned()]
            },
        }
    }

    fn cell(
        id: &str,
        scenario: &str,
        cut: Option<(&str, u64)>,
        fault: Option<Fault>,
        oracles: Vec<OracleResult>,
    ) -> CellResult {
        let verdict = oracles
            .iter()
            .map(|o| o.verdict)
            .max()
            .unwrap_or(Verdict::Unknown);
        CellResult {
            spec: CellSpec {
                cell_id: id.to_owned(),
                scenario_id: scenario.to_owned(),
                cut: cut.map(|(point, n)| Cut {
                    point: point.to_owned(),
                    n,
                }),
                fault,
                seed: 7,
            },
            verdict,
            oracles,
            outcome: Outcome {
                state: "completed".to_owned(),
                cause: None,
                reached_cut: cut.is_some(),
                runs: 1,
                continuations: 0,
                retry_status: None,
                ..Outcome::default()
            },
            duration_ms: 143,
            reproduce: format!("turncut replay reports/out/w/{id}"),
            error: None,
            retried: None,
        }
    }

    /// Two scenarios; t003 fails, t004 is unknown, the rest pass.
    fn sample_wave() -> WaveResult {
        let a = "everyday.runner-codex.local.single";
        let b = "everyday.runner-codex.local.follow-up";
        let pass = |name| oracle(name, Verdict::Pass, "");
        let mut failing = cell(
            "t003",
            a,
            Some(("runner.turn_intent.persisted", 1)),
            Some(Fault::KillRunner),
            vec![
                oracle("no-replay.turn", Verdict::Fail, FAIL_MESSAGE),
                pass("contract"),
            ],
        );
        failing.reproduce = FAIL_REPRODUCE.to_owned();
        failing.outcome.state = "failed".to_owned();
        failing.outcome.cause = Some("provider_lost".to_owned());
        let mut unknown = cell(
            "t004",
            b,
            Some(("codex.turn.recorded", 2)),
            Some(Fault::HangProvider),
            vec![
                pass("no-replay.turn"),
                oracle(
                    "liveness",
                    Verdict::Unknown,
                    &format!("state unreadable {INJECTION}"),
                ),
            ],
        );
        unknown.outcome.state = "unknown".to_owned();
        WaveResult {
            v: WAVE_FORMAT_VERSION,
            wave_id: "w-20250101T000000-s7".to_owned(),
            seed: 7,
            shard: None,
            jobs: 2,
            duration_ms: 2_500,
            cells: vec![
                cell("t001", a, None, None, vec![pass("no-replay.turn")]),
                cell(
                    "t002",
                    a,
                    Some(("runner.turn_intent.persisted", 1)),
                    Some(Fault::KillProvider),
                    vec![pass("no-replay.turn")],
                ),
                failing,
                unknown,
                cell(
                    "t005",
                    b,
                    Some(("codex.turn.recorded", 2)),
                    Some(Fault::KillBoth),
                    vec![pass("no-replay.turn")],
                ),
            ],
        }
    }

    fn written_sample() -> (tempfile::TempDir, WaveResult) {
        let dir = tempfile::tempdir().unwrap();
        let wave = sample_wave();
        write_wave(&dir.path().join("out"), &wave).unwrap();
        (dir, wave)
    }

    fn read(dir: &tempfile::TempDir, name: &str) -> String {
        std::fs::read_to_string(dir.path().join("out").join(name)).unwrap()
    }

    #[test]
    fn write_wave_writes_exactly_the_four_files() {
        let (dir, _) = written_sample();
        let mut names: Vec<String> = std::fs::read_dir(dir.path().join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [JUNIT_XML, REPORT_HTML, SUMMARY_MD, WAVE_JSON]);
    }

    #[test]
    fn read_wave_round_trips() {
        let (dir, wave) = written_sample();
        let back = read_wave(&dir.path().join("out").join(WAVE_JSON)).unwrap();
        assert_eq!(back, wave);
    }

    #[test]
    fn read_wave_rejects_another_version_naming_it_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WAVE_JSON);
        let mut value = serde_json::to_value(sample_wave()).unwrap();
        value["v"] = 99.into();
        std::fs::write(&path, value.to_string()).unwrap();
        let err = read_wave(&path).unwrap_err();
        assert!(matches!(err, ReportError::Version { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("version 99"), "{message}");
        assert!(message.contains(&path.display().to_string()), "{message}");
    }

    #[test]
    fn read_wave_rejects_missing_version_and_bad_json_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WAVE_JSON);
        std::fs::write(&path, r#"{"wave_id": "w"}"#).unwrap();
        let err = read_wave(&path).unwrap_err();
        assert!(matches!(err, ReportError::MissingVersion { .. }), "{err:?}");
        std::fs::write(&path, "{not json").unwrap();
        let err = read_wave(&path).unwrap_err();
        assert!(matches!(err, ReportError::Parse { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()));
    }

    #[test]
    fn junit_has_one_case_per_cell_a_failure_and_an_unknown_error() {
        let (dir, wave) = written_sample();
        let xml = read(&dir, JUNIT_XML);
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        assert_eq!(root.attribute("name"), Some("turncut w-20250101T000000-s7"));

        let suites: Vec<_> = root
            .children()
            .filter(|n| n.has_tag_name("testsuite"))
            .map(|n| n.attribute("name").unwrap())
            .collect();
        assert_eq!(
            suites,
            [
                "everyday.runner-codex.local.single",
                "everyday.runner-codex.local.follow-up"
            ]
        );

        let cases: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        let names: Vec<_> = cases.iter().map(|n| n.attribute("name").unwrap()).collect();
        let expected: Vec<_> = wave.cells.iter().map(|c| c.spec.name()).collect();
        assert_eq!(names, expected);
        for (case, cell) in cases.iter().zip(&wave.cells) {
            assert_eq!(
                case.attribute("classname"),
                Some(cell.spec.scenario_id.as_str())
            );
        }

        let failures: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("failure"))
            .collect();
        assert_eq!(failures.len(), 1);
        assert_eq!(
            failures[0].parent().unwrap().attribute("name"),
            Some("everyday.runner-codex.local.single@runner.turn_intent.persisted#1/kill-runner")
        );
        let message = failures[0].attribute("message").unwrap();
        assert!(message.contains("no-replay.turn") && message.contains(FAIL_MESSAGE));
        let description = failures[0].text().unwrap();
        assert!(description.contains("journal.jsonl:12"), "{description}");
        assert!(description.contains(FAIL_REPRODUCE), "{description}");

        let errors: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("error"))
            .collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].attribute("type"), Some("unknown"));
        assert_eq!(
            errors[0].parent().unwrap().attribute("name"),
            Some("everyday.runner-codex.local.follow-up@codex.turn.recorded#2/hang-provider")
        );
        assert!(errors[0].attribute("message").unwrap().contains(INJECTION));
        assert_eq!(
            doc.descendants()
                .filter(|n| n.has_tag_name("skipped"))
                .count(),
            0
        );
    }

    #[test]
    fn summary_names_the_failure_its_message_and_reproduce_command() {
        let (dir, _) = written_sample();
        let summary = read(&dir, SUMMARY_MD);
        assert!(
            summary.starts_with("# turncut wave `w-20250101T000000-s7`: fail"),
            "{summary}"
        );
        assert!(
            summary.contains("5 cells: 3 pass, 1 unknown, 1 fail"),
            "{summary}"
        );
        assert!(
            summary.contains(&format!("`{FAIL_REPRODUCE}`")),
            "{summary}"
        );
        assert!(summary.contains(FAIL_MESSAGE), "{summary}");
        assert!(summary.contains("| t004 |"), "{summary}");
        // The injected markup is escaped, so GitHub shows it as text.
        assert!(!summary.contains("<b>"), "{summary}");
        assert!(!summary.contains("All 5 cells passed"), "{summary}");
    }

    #[test]
    fn summary_of_a_passing_wave_says_so_in_one_line() {
        let mut wave = sample_wave();
        wave.cells.retain(|c| c.verdict == Verdict::Pass);
        let summary = summary_markdown(&wave);
        assert!(summary.contains("All 3 cells passed."), "{summary}");
        assert!(!summary.contains("Failing"), "{summary}");
    }

    #[test]
    fn html_escapes_cell_text_and_has_only_its_own_script() {
        let (dir, _) = written_sample();
        let html = read(&dir, REPORT_HTML);
        assert!(!html.contains(INJECTION));
        assert!(!html.contains("<b>x"));
        assert!(html.contains("&lt;/script&gt;&lt;b&gt;x"));
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(html.matches("</script>").count(), 1);
        // No external assets: everything the page needs is inline.
        assert!(!html.contains("src="));
        assert!(!html.contains("href="));
    }

    #[test]
    fn html_grid_puts_each_cell_under_its_fault() {
        let html = report_html(&sample_wave(), &Timelines::new());
        // Row runner.turn_intent.persisted#1: kill-runner is t003, kill-provider t002.
        let row_start = html
            .find("<tr><th><code>runner.turn_intent.persisted#1</code></th>")
            .unwrap();
        let row = &html[row_start..row_start + html[row_start..].find("</tr>").unwrap()];
        let tds: Vec<&str> = row.split("<td>").skip(1).collect();
        assert_eq!(tds.len(), Fault::ALL.len());
        assert!(tds[0].contains("data-cell=\"t003\"") && tds[0].contains("failed · provider_lost"));
        assert!(tds[1].contains("data-cell=\"t002\""));
        assert!(!tds[2].contains("data-cell") && !tds[3].contains("data-cell"));
        assert!(html.contains("<tr><th>clean run</th>"));
        for id in ["t001", "t002", "t003", "t004", "t005"] {
            assert!(html.contains(&format!("<template id=\"d-{id}\">")), "{id}");
        }
    }

    #[test]
    fn html_shows_a_timeline_only_when_given() {
        let wave = sample_wave();
        assert!(!report_html(&wave, &Timelines::new()).contains("<h4>timeline</h4>"));
        let timelines =
            Timelines::from([("t003".to_owned(), "harness -> runner: <cut>".to_owned())]);
        let html = report_html(&wave, &timelines);
        assert_eq!(html.matches("<h4>timeline</h4>").count(), 1);
        assert!(html.contains("harness -&gt; runner: &lt;cut&gt;"));
    }

    #[test]
    fn cell_line_shows_verdict_name_duration_and_first_reason() {
        let wave = sample_wave();
        assert_eq!(
            cell_line(&wave.cells[2]),
            format!(
                "t003 fail    everyday.runner-codex.local.single@runner.turn_intent.persisted#1/kill-runner  143 ms  no-replay.turn: {FAIL_MESSAGE}"
            )
        );
        assert_eq!(
            cell_line(&wave.cells[0]),
            "t001 pass    everyday.runner-codex.local.single@clean  143 ms"
        );
        let mut long = wave.cells[3].clone();
        long.oracles[1].message = "x".repeat(500);
        let line = cell_line(&long);
        let detail = line.split("  ").last().unwrap();
        assert_eq!(detail.chars().count(), CELL_LINE_DETAIL_CHARS_MAX);
        assert!(detail.starts_with("liveness: xxx") && detail.ends_with('…'));
    }

    #[test]
    fn cell_line_prefers_the_harness_error_for_an_unknown_cell() {
        let mut cell = sample_wave().cells[3].clone();
        cell.error = Some("runner did not start\nwithin 5000 ms".to_owned());
        assert!(
            cell_line(&cell).ends_with("  harness error: runner did not start within 5000 ms"),
            "{}",
            cell_line(&cell)
        );
    }

    fn shards() -> (WaveResult, WaveResult, WaveResult) {
        let whole = sample_wave();
        let mut one = whole.clone();
        let mut two = whole.clone();
        one.shard = Some((1, 2));
        two.shard = Some((2, 2));
        one.jobs = 1;
        two.jobs = 1;
        one.duration_ms = 2_500;
        two.duration_ms = 1_200;
        one.cells = whole.cells.iter().step_by(2).cloned().collect();
        two.cells = whole.cells.iter().skip(1).step_by(2).cloned().collect();
        (whole, one, two)
    }

    #[test]
    fn merge_reassembles_shards_sorted_by_cell_id() {
        let (whole, one, two) = shards();
        assert_eq!(merge(vec![two, one]).unwrap(), whole);
    }

    #[test]
    fn merge_sorts_cell_ids_by_number() {
        let mut wave = sample_wave();
        wave.cells.truncate(2);
        wave.cells[0].spec.cell_id = "t1000".to_owned();
        wave.cells[1].spec.cell_id = "t999".to_owned();
        let merged = merge(vec![wave]).unwrap();
        let ids: Vec<_> = merged
            .cells
            .iter()
            .map(|c| c.spec.cell_id.as_str())
            .collect();
        assert_eq!(ids, ["t999", "t1000"]);
    }

    #[test]
    fn merge_rejects_different_waves_naming_both() {
        let (_, one, mut two) = shards();
        two.wave_id = "w-20250102T000000-s7".to_owned();
        let err = merge(vec![one.clone(), two]).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ReportError::WaveMismatch { .. }));
        assert!(
            message.contains("w-20250101T000000-s7") && message.contains("w-20250102T000000-s7")
        );

        let (_, _, mut two) = shards();
        two.seed = 8;
        let err = merge(vec![one, two]).unwrap_err();
        assert!(err.to_string().contains("seed 8"), "{err}");
    }

    #[test]
    fn merge_rejects_duplicate_cells() {
        let (_, mut one, two) = shards();
        one.cells.push(two.cells[0].clone());
        let err = merge(vec![one, two]).unwrap_err();
        assert!(matches!(err, ReportError::DuplicateCell { ref cell_id, .. } if cell_id == "t002"));
        assert!(err.to_string().contains("t002"));
    }

    #[test]
    fn merge_rejects_missing_repeated_or_mismatched_shards() {
        let (whole, one, two) = shards();
        let err = merge(vec![one.clone()]).unwrap_err();
        assert!(
            matches!(
                err,
                ReportError::MissingShards {
                    found: 1,
                    count: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = merge(vec![one.clone(), one.clone()]).unwrap_err();
        assert!(matches!(err, ReportError::DuplicateShard { .. }), "{err:?}");
        let mut three = two.clone();
        three.shard = Some((2, 3));
        let err = merge(vec![one.clone(), three]).unwrap_err();
        assert!(
            matches!(err, ReportError::ShardCountMismatch { .. }),
            "{err:?}"
        );
        let err = merge(vec![whole, two]).unwrap_err();
        assert!(matches!(err, ReportError::MixedSharding { .. }), "{err:?}");
        assert!(matches!(
            merge(vec![]).unwrap_err(),
            ReportError::NothingToMerge
        ));
    }

    #[test]
    fn markdown_code_spans_survive_backticks_and_pipes() {
        assert_eq!(md_code("a|b"), "`a\\|b`");
        assert_eq!(md_code("say `hi`"), "`` say `hi` ``");
        assert_eq!(md_text("*x* <b>"), "\\*x\\* \\<b\\>");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_ms(143), "143 ms");
        assert_eq!(format_ms(12_345), "12.3 s");
        assert_eq!(format_ms(245_000), "4 min 05 s");
    }
}
