//! `turncut fidelity`: the crash-semantics differential. At each moment a
//! real product and its fake can both be cut at, the same client plays the
//! same scripted turn on each, SIGKILLs it there, restarts it on the same
//! state and reads back what a recovering runner would; the two readings
//! are compared field by field. A difference is either a fake defect (fix
//! the fake: it follows the real product) or a known, listed variant of the
//! real product that a runner must treat the same way.

use std::path::Path;
use std::time::{Duration, Instant};

pub mod acp;
pub mod codex;
pub mod opencode;

/// The script of the crash moments, for the fakes and for the fake model
/// API behind the real products: one message, one approved command that
/// runs 1.5 s (long enough to kill its provider while it runs, short enough
/// to wait for), a final message.
pub const MOMENT_SCRIPT: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = true, duration_ms = 1500 }]
final = "Created hello.txt."
"#;

/// Which moments a run of the differential plays (`turncut fidelity
/// --moments`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Moments {
    /// Every moment.
    #[default]
    All,
    /// The crash moments only (a SIGKILL at a point of the turn).
    Crash,
    /// The upstream-failure moments only (the model API fails the turn:
    /// codex, codex-acp and claude-agent-acp so far).
    Upstream,
}

impl Moments {
    /// Whether the crash moments are played.
    pub fn crash(self) -> bool {
        self != Moments::Upstream
    }

    /// Whether the upstream-failure moments are played.
    pub fn upstream(self) -> bool {
        self != Moments::Crash
    }
}

/// One compared field at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The real product's profile.
    pub product: &'static str,
    /// The moment, e.g. `TurnStarted`.
    pub moment: String,
    /// The field, e.g. `turn`.
    pub field: &'static str,
    /// What the real product showed.
    pub real: String,
    /// What the fake showed.
    pub fake: String,
    /// `same`, `known: <why>` or `DIFFERS`.
    pub verdict: String,
}

impl Row {
    /// Whether the difference is unexplained.
    pub fn differs(&self) -> bool {
        self.verdict == DIFFERS
    }
}

/// The verdict of an unexplained difference.
pub const DIFFERS: &str = "DIFFERS";

/// Rows of one moment: `fields` as (name, real, fake); `known` explains a
/// difference of the real product's reading, if it is a listed variant.
pub fn compare(
    product: &'static str,
    moment: &str,
    fields: Vec<(&'static str, String, String)>,
    known: Option<&str>,
) -> Vec<Row> {
    fields
        .into_iter()
        .map(|(field, real, fake)| {
            let verdict = match known {
                _ if real == fake => "same".to_owned(),
                Some(why) => format!("known: {why}"),
                None => DIFFERS.to_owned(),
            };
            Row {
                product,
                moment: moment.to_owned(),
                field,
                real,
                fake,
                verdict,
            }
        })
        .collect()
}

/// The table as text, one line per row, and a count line.
pub fn render(rows: &[Row]) -> String {
    let w = |f: fn(&Row) -> usize, min: usize| rows.iter().map(f).max().unwrap_or(0).max(min);
    let (mw, fw, rw, kw) = (
        w(|r| r.moment.len(), 6),
        w(|r| r.field.len(), 5),
        w(|r| r.real.len().min(48), 4),
        w(|r| r.fake.len().min(48), 4),
    );
    let mut out = format!(
        "{:<25} {:<mw$} {:<fw$} {:<rw$} {:<kw$} verdict\n",
        "profile", "moment", "field", "real", "fake"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<25} {:<mw$} {:<fw$} {:<rw$} {:<kw$} {}\n",
            r.product,
            r.moment,
            r.field,
            clip(&r.real),
            clip(&r.fake),
            r.verdict
        ));
    }
    let differs = rows.iter().filter(|r| r.differs()).count();
    let known = rows
        .iter()
        .filter(|r| r.verdict.starts_with("known"))
        .count();
    out.push_str(&format!(
        "{} rows: {} same, {known} known variants, {differs} unexplained differences\n",
        rows.len(),
        rows.len() - differs - known
    ));
    out
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 48 {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(47).collect::<String>())
    }
}

/// Waits, with a deadline, until `done` holds. `/proc` and files announce
/// nothing, so it re-checks, yielding the core between checks rather than
/// sleeping a guessed interval.
pub fn wait_until(
    what: &str,
    deadline: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<(), String> {
    let until = Instant::now() + deadline;
    while !done() {
        if Instant::now() >= until {
            return Err(format!("timed out after {deadline:?} waiting for {what}"));
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// The pids of running `effect` processes that write `ledger`: `effect`
/// and the ledger are arguments of their own (a shell whose command line
/// runs the effect is not one).
pub fn effect_pids(ledger: &Path) -> Vec<i32> {
    let needle = ledger.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let text = String::from_utf8_lossy(&cmdline);
            let args: Vec<&str> = text.split('\0').collect();
            let live = wire::procstat::live_start_time(*pid as u32).is_some();
            args.contains(&"effect") && args.contains(&needle.as_str()) && live
        })
        .collect()
}

/// The fake model API behind a real product at a moment: playing `script`,
/// its state, journal and ledger under `dir/model`, held at `hang` if given.
pub fn start_model_api(
    turncut: &Path,
    dir: &Path,
    script: &Path,
    hang: Option<&str>,
) -> Result<crate::real::ModelApi, String> {
    let args: Vec<&str> = hang
        .map(|point| ["--hang", point])
        .into_iter()
        .flatten()
        .collect();
    start_model_api_with(turncut, dir, script, &args)
}

/// The same, with the fault arguments `faults` (`--hang POINT`,
/// `--answer POINT=NAME`).
pub fn start_model_api_with(
    turncut: &Path,
    dir: &Path,
    script: &Path,
    faults: &[&str],
) -> Result<crate::real::ModelApi, String> {
    let model = dir.join("model");
    let mut cmd = crate::real::ModelApi::command(
        turncut,
        &model.join("state"),
        &model.join("journal.jsonl"),
        &model.join("ledger.jsonl"),
        script,
    );
    cmd.args(faults);
    crate::real::ModelApi::start(&mut cmd, Duration::from_secs(60)).map_err(|e| format!("{e:#}"))
}
