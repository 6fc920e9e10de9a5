//! `turncut fidelity`: the crash-semantics differential. At each moment a
//! real product and its fake can both be cut at, the same client plays the
//! same scripted turn on each, SIGKILLs it there, restarts it on the same
//! state and reads back what a recovering runner would; the two readings
//! are compared field by field. A difference is either a fake defect (fix
//! the fake: it follows the real product) or a known, listed variant of the
//! real product that a runner must treat the same way.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use wire::journal::{Entry, EntryKind};
use wire::upstream::UpstreamFault;

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
    /// codex, `opencode serve`, codex-acp and claude-agent-acp; not
    /// `opencode acp`).
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

/// A reading's compared fields, in order: (name, value as text).
pub type Fields = Vec<(&'static str, String)>;

/// The distinct readings of `runs` plays (at least one), each with how
/// often it came up, in the order first seen; `play(run)` plays run `run`.
pub fn distinct_readings(
    runs: u32,
    mut play: impl FnMut(u32) -> Result<Fields, String>,
) -> Result<Vec<(Fields, u32)>, String> {
    let mut seen: Vec<(Fields, u32)> = Vec::new();
    for run in 0..runs.max(1) {
        let reading = play(run)?;
        match seen.iter_mut().find(|(r, _)| *r == reading) {
            Some((_, n)) => *n += 1,
            None => seen.push((reading, 1)),
        }
    }
    Ok(seen)
}

/// The label of a reading of `moment` that came up `n` times in `runs`:
/// the moment alone when it was played once.
pub fn label(moment: &str, n: u32, runs: u32) -> String {
    match runs {
        0 | 1 => moment.to_owned(),
        _ => format!("{moment} {n}/{runs}"),
    }
}

/// The upstream rows of `product` for each of `faults`: the fake's reading
/// (`fake`, played once in `DIR/<fault>/fake`) against the real product's
/// (`real`, played `runs` times in `DIR/<fault>/real-<run>`), each distinct
/// reading its own rows with how often it came up; `known` names the
/// listed variant of a differing field (`field`, real, fake), if any.
pub fn upstream_fault_rows(
    product: &'static str,
    dir: &Path,
    runs: u32,
    faults: &[wire::upstream::UpstreamFault],
    fake: impl Fn(wire::upstream::UpstreamFault, &Path) -> Result<Fields, String>,
    real: impl Fn(wire::upstream::UpstreamFault, &Path) -> Result<Fields, String>,
    known: impl Fn(&str, &str, &str) -> Option<&'static str>,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for &fault in faults {
        let name = fault.as_str();
        let fake = fake(fault, &dir.join(format!("{name}/fake")))?;
        let readings = distinct_readings(runs, |run| {
            real(fault, &dir.join(format!("{name}/real-{run}")))
        })?;
        for (reading, n) in readings {
            let label = label(&format!("Upstream {name}"), n, runs);
            for (field, r, f) in paired(reading, fake.clone()) {
                let why = known(field, &r, &f);
                rows.extend(compare(product, &label, vec![(field, r, f)], why));
            }
        }
    }
    Ok(rows)
}

/// Why a Codex-based product's reset stream may read otherwise than the
/// fake's (codex-acp and `codex app-server` alike).
pub const RESET_EARLY: &str = "a reset stream reads, by when the reset reaches Codex, as a \
    failed body read (the fake's) or as a failed send (\"error sending request\"): both `other`, \
    both \"stream disconnected before completion\"";

/// Whether `real` and `fake` are the messages of a stream reset read its
/// two ways by Codex: the fake's failed body read, the real product's
/// failed send (when the reset reached it before the response's head).
pub fn reset_read_early(real: &str, fake: &str) -> bool {
    const BROKEN: &str = "stream disconnected before completion: ";
    fake == format!("{BROKEN}Transport error: network error: error decoding response body")
        && real.starts_with(&format!("{BROKEN}error sending request"))
}

/// The real and the fake reading's fields side by side, as [`compare`]
/// takes them.
pub fn paired(real: Fields, fake: Fields) -> Vec<(&'static str, String, String)> {
    real.into_iter()
        .zip(fake)
        .map(|((field, r), (_, f))| (field, r, f))
        .collect()
}

/// The fake model API's route a real product asks its model on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelRoute {
    /// OpenAI's Responses API (`POST /v1/responses`): codex, codex-acp,
    /// OpenCode.
    Responses,
    /// Anthropic's Messages API (`POST /v1/messages`): claude-agent-acp.
    Messages,
}

/// The fake model API of a real product's turn, in `dir`, armed to fail
/// it with `fault` (`--answer POINT#N=NAME`): at its route's first request
/// (a status fault), or in its stream after the first event (a stream
/// fault).
pub fn start_failing_model_api(
    turncut: &Path,
    dir: &Path,
    script: &Path,
    route: ModelRoute,
    fault: UpstreamFault,
) -> Result<crate::real::ModelApi, String> {
    let [responses, messages] = wire::upstream::MODEL_REQUEST_POINTS;
    let point = match (route, fault.is_stream()) {
        (ModelRoute::Responses, true) => "model.response_created.sent#1".to_owned(),
        (ModelRoute::Messages, true) => "model.message_start.sent#1".to_owned(),
        (ModelRoute::Responses, false) => format!("{responses}#1"),
        (ModelRoute::Messages, false) => format!("{messages}#1"),
    };
    let answer = format!("{point}={}", fault.as_str());
    start_model_api_with(turncut, dir, script, &["--answer", &answer])
}

/// Where a URL is in a compared text: the real products name their model
/// API's (`http://127.0.0.1:PORT/v1/responses`), the fakes a fixed one.
const URL: &str = "<model-url>";

/// `v` with every URL in its strings replaced by `<model-url>` (a URL
/// ends at a space, a `)` or a `,`: codex-acp names it in parentheses).
pub fn without_urls(v: &Value) -> Value {
    let word = |w: &str| match w.find("http://").or_else(|| w.find("https://")) {
        Some(i) => {
            let end = w[i..].find([')', ',']).map_or(w.len(), |j| i + j);
            format!("{}{URL}{}", &w[..i], &w[end..])
        }
        None => w.to_owned(),
    };
    match v {
        Value::String(s) => Value::String(s.split(' ').map(word).collect::<Vec<_>>().join(" ")),
        Value::Array(a) => Value::Array(a.iter().map(without_urls).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), without_urls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `v` with every object's keys in order: JSON's key order means nothing,
/// and a build of serde_json may keep the order they came in.
pub fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&o[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The model requests a real product made: the requests its fake model API
/// received on either model route (its journal).
pub fn model_api_requests(journal: &[Entry]) -> usize {
    journal
        .iter()
        .filter(|e| e.kind == EntryKind::In)
        .filter(|e| {
            matches!(
                e.data["path"].as_str(),
                Some("/v1/messages" | "/v1/responses")
            )
        })
        .count()
}

/// The model requests a fake provider made: its `model.requested` facts
/// (its journal).
pub fn fake_requests(journal: &[Entry]) -> usize {
    journal
        .iter()
        .filter(|e| e.kind == EntryKind::Fact && e.fact.as_deref() == Some("model.requested"))
        .count()
}

/// A JSON string as its text, `-` for none, anything else as JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// The table as text, one line per row, then each unexplained difference
/// whose values the table clips in full, and a count line.
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
    // An unexplained difference in full: the table clips long values.
    for r in rows
        .iter()
        .filter(|r| r.differs() && (r.real != clip(&r.real) || r.fake != clip(&r.fake)))
    {
        out.push_str(&format!(
            "{} {} {}:\n  real: {}\n  fake: {}\n",
            r.product, r.moment, r.field, r.real, r.fake
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

#[cfg(test)]
mod tests {
    use super::reset_read_early;

    const BODY: &str = "stream disconnected before completion: Transport error: network error: error decoding response body";

    #[test]
    fn a_reset_read_before_the_head_is_a_known_variant_only_against_the_fakes_body_read() {
        let send =
            "stream disconnected before completion: error sending request for url (<model-url>)";
        assert!(reset_read_early(send, BODY));
        assert!(reset_read_early(
            "stream disconnected before completion: error sending request",
            BODY
        ));
        // Any other pair is a difference to explain.
        assert!(!reset_read_early(BODY, send));
        assert!(!reset_read_early(
            "stream disconnected before completion: stream closed before response.completed",
            BODY
        ));
        assert!(!reset_read_early("unexpected status 503", BODY));
    }
}
