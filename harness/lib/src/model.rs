//! The harness's result model: faults, verdicts, oracle results, cells and
//! waves, as stored in `wave.json` and rendered by every report.
//!
//! One history, many sinks: the terminal lines, `wave.json`, `summary.md`,
//! `junit.xml`, `report.html` and the snapshots all render these types. The
//! stored format carries a version and avoids `flatten` and `untagged`. This
//! module holds data only; running and judging live elsewhere.

use serde::{Deserialize, Serialize};

mod applies;
mod fault;
pub mod mutants;
mod oracle;
mod role;
mod scenario_id;
mod task_state;
pub use fault::{Fault, FaultClass};
pub use mutants::{MutantRow, MutantsResult};
pub use oracle::Oracle;
pub use role::Role;
pub use scenario_id::ScenarioId;
pub use task_state::TaskState;

/// Version of `wave.json`.
pub const WAVE_FORMAT_VERSION: u32 = 1;

/// A verdict: `fail` > `unknown` > `pass`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The property held.
    Pass,
    /// The evidence cannot decide.
    Unknown,
    /// The property was violated.
    Fail,
}

impl Verdict {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Unknown => "unknown",
            Verdict::Fail => "fail",
        }
    }
}

/// One oracle's judgement of one cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OracleResult {
    /// The oracle (stored as its name, e.g. `no-replay.turn`).
    pub oracle: Oracle,
    /// Its verdict.
    pub verdict: Verdict,
    /// A sentence: why it failed or could not decide (empty on pass).
    pub message: String,
    /// Pointers into the evidence (`journal.jsonl:12`, `events#7`).
    pub evidence: Vec<String>,
}

/// A cut: the `n`-th hit of `point` (1-based; what a process is armed
/// with is a [`cutpoint::Arm`], which may also be every hit).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cut {
    /// The cut-point name.
    pub point: String,
    /// The 1-based occurrence.
    pub n: u64,
}

impl Cut {
    /// What a process is armed with to hold at this cut (an arm may also
    /// hold every occurrence, `#*`; a cut is always one).
    pub fn arm(&self) -> cutpoint::Arm {
        cutpoint::Arm {
            point: self.point.clone(),
            n: self.n,
        }
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.point, self.n)
    }
}

/// The prefix of a runner's before-write points (`runner.write.turn_intent`):
/// where write faults apply.
pub const WRITE_POINTS: &str = "runner.write.";

/// The prefix of a runner's before-read points (`runner.read.turns`): where
/// read faults apply.
pub const READ_POINTS: &str = "runner.read.";

/// Whether `point` is a runner's before-write or before-read point, where
/// its store (one thread) waits while the hit is held.
pub fn is_store_point(point: &str) -> bool {
    point.starts_with(WRITE_POINTS) || point.starts_with(READ_POINTS)
}

/// One event of a schedule: at `cut`, apply `fault`.
///
/// The first event of a cell counts occurrences per process, as discovery
/// does (`runner.turn_intent.persisted#1` is the first hit in a runner); every
/// later event counts the hits of its point by any process of the cell after
/// the previous event's cut was reached, so `#1` is "the next one".
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Event {
    /// Where.
    pub cut: Cut,
    /// What.
    pub fault: Fault,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.cut, self.fault)
    }
}

/// Formats events as a schedule: `p#1/kill-runner+q#2/follow-up`.
pub fn format_schedule(events: &[Event]) -> String {
    events
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("+")
}

/// Parses a schedule written by [`format_schedule`]; the error names the
/// event and what is wrong with it.
pub fn parse_schedule(s: &str) -> Result<Vec<Event>, String> {
    let mut out = Vec::new();
    for (i, part) in s.split('+').enumerate() {
        let part = part.trim();
        let (cut, fault) = part.rsplit_once('/').ok_or_else(|| {
            format!("event {} ({part:?}) is not POINT#N/FAULT, e.g. runner.turn_intent.persisted#1/kill-runner", i + 1)
        })?;
        let (point, n) = cut
            .rsplit_once('#')
            .ok_or_else(|| format!("event {} ({part:?}): the cut needs #N", i + 1))?;
        let n: u64 = n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("event {} ({part:?}): #N must be a number from 1", i + 1))?;
        check_point_name(point).map_err(|e| format!("event {} ({part:?}): {e}", i + 1))?;
        let fault = Fault::parse(fault).ok_or_else(|| {
            let names: Vec<&str> = Fault::ALL.iter().map(|f| f.as_str()).collect();
            format!(
                "event {} ({part:?}): unknown fault {fault:?}; faults are {}",
                i + 1,
                names.join(", ")
            )
        })?;
        out.push(Event {
            cut: Cut {
                point: point.to_owned(),
                n,
            },
            fault,
        });
    }
    Ok(out)
}

fn check_point_name(point: &str) -> Result<(), String> {
    let ok = !point.is_empty()
        && point.contains('.')
        && point
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{point:?} is not a cut-point name such as runner.turn_intent.persisted"
        ))
    }
}

/// What one cell is: a scenario, and a schedule of events (none: a clean
/// run; the first is the armed cut).
///
/// Stored as it always was (`cut`, `fault` and `then`, [`SpecOnDisk`]), so
/// `wave.json`, plans and snapshots written before keep their meaning and
/// their hashes; a stored cut without its fault (or the reverse) is an
/// error when read, never half a cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SpecOnDisk", into = "SpecOnDisk")]
pub struct CellSpec {
    /// `t001`, `t002`, … within a wave.
    pub cell_id: String,
    /// `<suite>.<profile>.<location>.<case>`.
    pub scenario_id: ScenarioId,
    /// The cell's seed, derived from the wave seed and the cell id.
    pub seed: u64,
    /// Every event of the cell, the armed cut first; empty for a clean cell.
    pub events: Vec<Event>,
}

/// A [`CellSpec`] as stored: the armed cut and its fault, then the events
/// after it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpecOnDisk {
    cell_id: String,
    scenario_id: ScenarioId,
    cut: Option<Cut>,
    fault: Option<Fault>,
    seed: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    then: Vec<Event>,
}

impl TryFrom<SpecOnDisk> for CellSpec {
    type Error = String;

    fn try_from(d: SpecOnDisk) -> Result<CellSpec, String> {
        let events = match (d.cut, d.fault) {
            (Some(cut), Some(fault)) => std::iter::once(Event { cut, fault })
                .chain(d.then)
                .collect(),
            (None, None) if d.then.is_empty() => Vec::new(),
            _ => {
                return Err(format!(
                    "cell {}: a cut needs its fault and later events need a first cut",
                    d.cell_id
                ));
            }
        };
        Ok(CellSpec {
            cell_id: d.cell_id,
            scenario_id: d.scenario_id,
            seed: d.seed,
            events,
        })
    }
}

impl From<CellSpec> for SpecOnDisk {
    fn from(s: CellSpec) -> SpecOnDisk {
        let mut events = s.events.into_iter();
        let first = events.next();
        SpecOnDisk {
            cell_id: s.cell_id,
            scenario_id: s.scenario_id,
            cut: first.as_ref().map(|e| e.cut.clone()),
            fault: first.map(|e| e.fault),
            seed: s.seed,
            then: events.collect(),
        }
    }
}

impl CellSpec {
    /// The JUnit test-case name: `<scenario-id>@<point>#<n>/<fault>` (with
    /// `+<point>#<n>/<fault>` per later event), or `<scenario-id>@clean`.
    pub fn name(&self) -> String {
        match self.schedule() {
            Some(events) => format!("{}@{}", self.scenario_id, format_schedule(events)),
            None => format!("{}@clean", self.scenario_id),
        }
    }

    /// Every event of the cell, the first cut first; `None` for a clean cell.
    pub fn schedule(&self) -> Option<&[Event]> {
        (!self.events.is_empty()).then_some(self.events.as_slice())
    }

    /// The armed cut (the first event's), if any.
    pub fn cut(&self) -> Option<&Cut> {
        self.events.first().map(|e| &e.cut)
    }

    /// The first event's fault, if any.
    pub fn fault(&self) -> Option<Fault> {
        self.events.first().map(|e| e.fault)
    }

    /// The events after the first cut.
    pub fn then(&self) -> &[Event] {
        self.events.get(1..).unwrap_or_default()
    }

    /// How deep the cell reaches: 0 clean, 1 one cut, 2 and more a cell with
    /// later events.
    pub fn depth(&self) -> usize {
        self.events.len()
    }
}

/// Orders cell ids by their number, so `t1000` sorts after `t999` even though
/// ids are only zero-padded to three digits.
pub fn cell_id_key(id: &str) -> (&str, usize, &str, &str) {
    let digits_at = id.find(|c: char| c.is_ascii_digit()).unwrap_or(id.len());
    let (prefix, rest) = id.split_at(digits_at);
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..digits_end].trim_start_matches('0');
    (prefix, number.len(), number, id)
}

/// Sorts cells by the number in their id (`t757` before `t1000`): the one
/// order of `wave.json`, every report and the terminal.
pub fn sort_cells<T>(cells: &mut [T], id: impl Fn(&T) -> &str) {
    cells.sort_by(|a, b| cell_id_key(id(a)).cmp(&cell_id_key(id(b))));
}

/// How the cell's task ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Final task state; `None` when the harness could not read it (stored
    /// as the state's name, `unknown` for none).
    #[serde(with = "task_state::or_unknown")]
    pub state: Option<TaskState>,
    /// The final cause code, if any.
    pub cause: Option<String>,
    /// Whether the armed cut was reached.
    pub reached_cut: bool,
    /// Events of the schedule applied (the first cut counts; 0 or 1 for a
    /// one-cut cell).
    #[serde(default)]
    pub events_applied: usize,
    /// Runs of the task.
    pub runs: usize,
    /// Continuation turns the provider recorded.
    pub continuations: usize,
    /// Whether a Retry was issued, and its HTTP status.
    pub retry_status: Option<u16>,
    /// The recovery path, run by run, e.g. `continued → completed` or
    /// `failed ambiguous_turn_start → retry → completed`.
    #[serde(default)]
    pub path: String,
    /// Effects in the ledger.
    #[serde(default)]
    pub effects: usize,
    /// The cell's deadline passed while it waited on the runner (an answer
    /// to a request, or the task settling): the runner's doing, which
    /// liveness judges, not the harness's (`steps::DeadlineMissed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadline_passed: bool,
}

/// The result of one cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellResult {
    /// What ran.
    pub spec: CellSpec,
    /// The worst oracle verdict (or `unknown` on a harness error).
    pub verdict: Verdict,
    /// Every oracle's result, in a fixed order.
    pub oracles: Vec<OracleResult>,
    /// How the task ended.
    pub outcome: Outcome,
    /// Wall time of the cell.
    pub duration_ms: u64,
    /// The command that runs this cell again.
    pub reproduce: String,
    /// A harness error that stopped the cell, if any.
    pub error: Option<String>,
    /// Why the cell was run a second time (its armed cut was not reached on
    /// the first attempt); the result is the second attempt's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<String>,
    /// Timing reruns: the cell failed in a shape only timing produces and
    /// ran again with longer timeouts (`timing`); the result is the last
    /// attempt's. Never quiet: every report shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reruns: Vec<Rerun>,
}

impl CellResult {
    /// A result of `spec` with `verdict` and `outcome` and nothing else
    /// (no oracle, no error, no rerun): the tests' fixture.
    #[cfg(test)]
    pub fn bare(spec: CellSpec, verdict: Verdict, outcome: Outcome) -> CellResult {
        CellResult {
            spec,
            verdict,
            oracles: Vec::new(),
            outcome,
            duration_ms: 1,
            reproduce: String::new(),
            error: None,
            retried: None,
            reruns: Vec::new(),
        }
    }
}

/// One timing rerun of a cell: why, and the timeouts it ran with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rerun {
    /// What looked like timing (`timing::timing_shape`).
    pub why: String,
    /// The runner's idle timeout of the rerun.
    pub idle_timeout_ms: u64,
    /// The hang cells' idle timeout of the rerun.
    pub hang_idle_timeout_ms: u64,
    /// The cell's wait deadline of the rerun.
    pub cell_wait_ms: u64,
}

/// How the cells of a wave ran, recorded so that `turncut replay` runs a
/// cell again the same way (older `wave.json` files read as the defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The turncut version that ran the wave.
    #[serde(default)]
    pub turncut_version: String,
    /// The absolute path of the turncut that ran the wave.
    #[serde(default)]
    pub turncut_path: String,
    /// `--runner-cmd`, split into words; `None` for the built-in
    /// `turncut runnerd`.
    #[serde(default)]
    pub runner_cmd: Option<Vec<String>>,
    /// `--runner-arg` values.
    #[serde(default)]
    pub runner_args: Vec<String>,
    /// `--idle-timeout-ms`.
    #[serde(default)]
    pub idle_timeout_ms: u64,
    /// `--hang-idle-timeout-ms`.
    #[serde(default)]
    pub hang_idle_timeout_ms: u64,
    /// `--cell-wait-ms`.
    #[serde(default)]
    pub cell_wait_ms: u64,
    /// The absolute `--scenarios` directory; `None` for the scenarios built
    /// into turncut.
    #[serde(default)]
    pub scenarios: Option<String>,
    /// A depth-1-only wave (`wave --depth 1`): scenarios' `recut` off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub depth1_only: bool,
    /// The file of each scenario id (`scenarios/<file>.toml` for a built-in
    /// one), for JUnit's `file=`.
    #[serde(default)]
    pub scenario_files: std::collections::BTreeMap<String, String>,
    /// `--stress N`: busy worker processes that ran beside the cells.
    #[serde(default)]
    pub stress: usize,
}

/// A whole wave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveResult {
    /// Format version, [`WAVE_FORMAT_VERSION`].
    pub v: u32,
    /// `w-s<seed>-<hash of the planned cells>`: the same for every shard of
    /// one wave (older files: `w-<UTC yyyymmddThhmmss>-s<seed>`).
    pub wave_id: String,
    /// The wave seed.
    pub seed: u64,
    /// Shard `i/n`, if sharded.
    pub shard: Option<(u32, u32)>,
    /// Parallel cells.
    pub jobs: usize,
    /// Wall time.
    pub duration_ms: u64,
    /// Cells in id order.
    pub cells: Vec<CellResult>,
    /// How the cells ran (for `turncut replay`).
    #[serde(default)]
    pub run: RunConfig,
    /// Planned cells that did not run (the wave stopped early).
    #[serde(default)]
    pub not_run: usize,
    /// Why the wave stopped before running every planned cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Scenario ids that could not run here (a real product that is not
    /// installed), with the reason: listed as skipped, never as passed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Which stages of its plan this wave ran (both, the default, is not
    /// written); `report merge` joins one complete set of each phase.
    #[serde(default, skip_serializing_if = "Stages::is_both")]
    pub stages: Stages,
}

/// Which stages of a wave a plan holds or a run ran (`recuts`: stage 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stages {
    /// Stage 1, then stage 2 from its results when the plan has one.
    #[default]
    Both,
    /// Stage 1 alone: a shard leaves stage 2 to `turncut plan --stage2`.
    Stage1,
    /// The cells `turncut plan --stage2` planned from every shard's stage 1.
    Stage2,
}

impl Stages {
    /// Whether this is the default, [`Stages::Both`].
    pub fn is_both(&self) -> bool {
        *self == Stages::Both
    }
}

/// A scenario id a wave did not run, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The scenario id.
    pub scenario_id: String,
    /// Why it could not run, and how to make it run.
    pub reason: String,
}

impl WaveResult {
    /// The worst verdict of all cells (`pass` for an empty wave).
    pub fn verdict(&self) -> Verdict {
        self.cells
            .iter()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(Verdict::Pass)
    }
}

/// A scenario's `[expect]`: what its clean run must show. Every field is
/// judged (`oracles::contract`): `final_state` and `effects` on the clean
/// run, `follow_ups_consumed` on the clean run too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expect {
    /// Follow-ups consumed by turns.
    pub follow_ups_consumed: Option<usize>,
    /// Final state of the clean run.
    pub final_state: Option<String>,
    /// Effects in the ledger after the clean run.
    pub effects: Option<usize>,
}

/// What a scenario step expects the runner to answer its request
/// (`follow_up = { …, expect = "fenced" }`), judged by the `fence` oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplyExpect {
    /// Accepted (202).
    Accepted,
    /// Refused by the fence (409 `prior_owner_fence_refused`).
    Refused,
    /// Refused when the task had failed (or needed a human) when it was
    /// sent, accepted otherwise: the fence, whichever way the cell went.
    Fenced,
}

impl std::str::FromStr for ReplyExpect {
    type Err = ();

    fn from_str(s: &str) -> Result<ReplyExpect, ()> {
        match s {
            "accepted" => Ok(ReplyExpect::Accepted),
            "refused" => Ok(ReplyExpect::Refused),
            "fenced" => Ok(ReplyExpect::Fenced),
            _ => Err(()),
        }
    }
}

/// Format version of a plan file (`turncut plan`).
pub const PLAN_FORMAT_VERSION: u32 = 1;

/// A wave's plan, computed once and run anywhere (`turncut plan`, `turncut
/// wave --plan`): every cell, how the cells run, and what planning found.
/// Its wave id is a hash of what it runs, so the shards of one plan merge
/// whatever each shard's machine did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Format version, [`PLAN_FORMAT_VERSION`].
    pub v: u32,
    /// The wave id: the seed and a hash of the cells, stage 2 and the
    /// scenario sources.
    pub wave_id: String,
    /// The wave seed.
    pub seed: u64,
    /// How the cells run (runner command and arguments, timeouts,
    /// scenarios, turncut version).
    pub run: RunConfig,
    /// SHA-256 of every scenario source the plan was made from, in order.
    pub scenarios_sha256: String,
    /// The selection options, as a command line (for people).
    pub selection: String,
    /// The cells, sampled, in cell order.
    pub cells: Vec<CellSpec>,
    /// Stage 2 (the recovery cuts of the paths the cells walk), if on.
    pub stage2: Option<Stage2Plan>,
    /// Scenario ids not run, with why (a real product missing, an id that
    /// could not be planned).
    pub skipped: Vec<Skipped>,
    /// Clean traced runs of planning that the runner failed, judged like
    /// cells (ids `p###`).
    pub judged: Vec<CellResult>,
    /// Per scenario id, the boundaries only some clean runs reached.
    pub timing_dependent: Vec<(String, Vec<String>)>,
    /// How many generated programs of the plan's seed its scenarios hold
    /// (`workflow::wave_programs`), so a reader of the plan draws them again.
    #[serde(default)]
    pub workflows: usize,
    /// `Both` for `turncut plan` (`stage2` says whether stage 2 follows),
    /// `Stage2` for `turncut plan --stage2`; never `Stage1`.
    #[serde(default, skip_serializing_if = "Stages::is_both")]
    pub stages: Stages,
}

/// Stage 2 of a plan: which of its cells are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage2Plan {
    /// With `--budget`, the share of stage-2 cells kept (parts per million:
    /// the share of stage-1 cells the budget kept).
    pub keep_ppm: Option<u32>,
}

/// Cells whose armed cut was not reached.
pub fn unreached(cells: &[CellResult]) -> usize {
    cells
        .iter()
        .filter(|c| c.spec.cut().is_some() && !c.outcome.reached_cut)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_id_has_its_parts_and_is_stored_as_its_text() {
        let id = ScenarioId::new("everyday-workflows", "runner-codex", "local", "single-task");
        assert_eq!(
            (id.suite(), id.profile()),
            ("everyday-workflows", "runner-codex")
        );
        assert_eq!(id, "everyday-workflows.runner-codex.local.single-task");
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            r#""everyday-workflows.runner-codex.local.single-task""#
        );
        assert_eq!(ScenarioId::from("s").profile(), "", "an id written by hand");
    }

    #[test]
    fn each_storage_fault_applies_at_its_own_kind_of_point() {
        let (write, read, other) = (
            "runner.write.turn_intent",
            "runner.read.turns",
            "runner.turn_intent.persisted",
        );
        for f in [Fault::FailWrite, Fault::DiskFull] {
            assert!(f.applies_at(write) && !f.applies_at(read) && !f.applies_at(other));
        }
        for f in [Fault::FailRead, Fault::CorruptRead] {
            assert!(f.applies_at(read) && !f.applies_at(write) && !f.applies_at(other));
        }
        for f in [Fault::KillRunner, Fault::PowerCut] {
            assert!(f.applies_at(read) && f.applies_at(write) && f.applies_at(other));
        }
        for f in [Fault::KillProvider, Fault::FollowUp, Fault::HangProvider] {
            assert!(!f.applies_at(read) && !f.applies_at(write) && f.applies_at(other));
        }
        assert!(is_store_point(read) && is_store_point(write) && !is_store_point(other));
    }

    #[test]
    fn a_cell_spec_is_stored_as_it_always_was_and_half_a_cut_is_refused() {
        let old = r#"{"cell_id":"t002","scenario_id":"s.p.l.c","cut":{"point":"a.b","n":1},"fault":"kill-runner","seed":9,"then":[{"cut":{"point":"c.d","n":2},"fault":"fail-write"}]}"#;
        let spec: CellSpec = serde_json::from_str(old).unwrap();
        assert_eq!(spec.depth(), 2);
        assert_eq!(spec.fault(), Some(Fault::KillRunner));
        assert_eq!(spec.then()[0].fault, Fault::FailWrite);
        assert_eq!(serde_json::to_string(&spec).unwrap(), old, "the same bytes");
        let clean =
            r#"{"cell_id":"t001","scenario_id":"s.p.l.c","cut":null,"fault":null,"seed":1}"#;
        let spec: CellSpec = serde_json::from_str(clean).unwrap();
        assert_eq!((spec.depth(), spec.name()), (0, "s.p.l.c@clean".to_owned()));
        assert_eq!(serde_json::to_string(&spec).unwrap(), clean);
        let half = r#"{"cell_id":"t003","scenario_id":"s","cut":{"point":"a.b","n":1},"fault":null,"seed":1}"#;
        let err = serde_json::from_str::<CellSpec>(half)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a cut needs its fault"), "{err}");
    }
}
