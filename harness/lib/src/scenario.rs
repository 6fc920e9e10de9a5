//! Scenario files: parse, then validate, before anything runs.
//!
//! A scenario is one TOML file per case with a matrix of profiles inside
//! (DESIGN §6.1): the fake model's script, the controller's steps, the chaos
//! (which cut points, which faults) and expectations for a clean run. Each
//! profile of a file is one scenario id `<suite>.<profile>.<location>.<case>`.
//! Every problem is reported as `file:line:col: sentence`, and the CLI maps it
//! to exit code 2. This module does not run anything.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::model::Fault;

mod chaos;
mod steps;

/// Profiles a scenario may list: the built-in ones with fakes and with
/// real products (`wire::profiles`).
fn known_profiles() -> Vec<&'static str> {
    wire::profiles::names().collect()
}

/// A problem in a scenario file, with its place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}:{col}: {message}")]
pub struct ScenarioError {
    /// The file.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// A plain sentence with the fix.
    pub message: String,
}

/// When a follow-up is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowUpWhen {
    /// Right away.
    Now,
    /// Once a turn of the task is in flight (or the task settled).
    TurnActive,
    /// Once the task settled.
    Settled,
    /// Once the cell's first event was applied (a recovery is under way:
    /// the runner or a provider restarting, a write failed), or, when no
    /// event comes (a clean run), once the task settled.
    Recovering,
}

impl FollowUpWhen {
    /// The word a scenario file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FollowUpWhen::Now => "now",
            FollowUpWhen::TurnActive => "turn-active",
            FollowUpWhen::Settled => "settled",
            FollowUpWhen::Recovering => "recovering",
        }
    }
}

impl RetryWhen {
    /// The word a scenario file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryWhen::FailedClosed => "failed-closed",
            RetryWhen::Always => "always",
        }
    }
}

/// When the harness issues its Retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryWhen {
    /// Only if the task ended failed or needs_human.
    FailedClosed,
    /// Always (a Retry of a completed task must be refused with a reason).
    Always,
}

/// The task a step names when it names none: a scenario of one task never
/// names it.
pub const FIRST_TASK: &str = "task-1";

/// One controller step, on its task (`task = "task-2"` in the file; the
/// first task, [`FIRST_TASK`], when it names none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Submit the task.
    Submit {
        task: String,
        prompt: String,
        message_id: String,
    },
    /// Send a follow-up.
    FollowUp {
        task: String,
        text: String,
        message_id: String,
        when: FollowUpWhen,
        /// What the runner must answer, when the scenario says.
        expect: Option<ReplyExpect>,
    },
    /// Wait until the task settles.
    Await { task: String, state: String },
    /// Issue a Retry.
    Retry {
        task: String,
        when: RetryWhen,
        message_id: String,
    },
}

impl Step {
    /// The message id the step sends under, if it sends one.
    pub fn message_id(&self) -> Option<&str> {
        match self {
            Step::Submit { message_id, .. }
            | Step::FollowUp { message_id, .. }
            | Step::Retry { message_id, .. } => Some(message_id),
            Step::Await { .. } => None,
        }
    }

    /// The task the step acts on.
    pub fn task(&self) -> &str {
        match self {
            Step::Submit { task, .. }
            | Step::FollowUp { task, .. }
            | Step::Await { task, .. }
            | Step::Retry { task, .. } => task,
        }
    }

    /// The text a submit or a follow-up sends.
    pub fn text(&self) -> Option<&str> {
        match self {
            Step::Submit { prompt, .. } => Some(prompt),
            Step::FollowUp { text, .. } => Some(text),
            Step::Await { .. } | Step::Retry { .. } => None,
        }
    }
}

/// Which cut points a scenario cuts at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CutSelection {
    /// Every boundary of a clean traced run.
    EveryBoundary,
    /// Only these point names (every occurrence).
    Points(Vec<String>),
    /// No cuts: only the clean run.
    None,
}

pub use crate::model::{Expect, ReplyExpect};

/// A validated scenario file.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The file.
    pub path: PathBuf,
    /// Suite name.
    pub suite: String,
    /// Case name.
    pub case: String,
    /// Location (`local`).
    pub location: String,
    /// Profiles, each a scenario id.
    pub profiles: Vec<String>,
    /// One line for people.
    pub title: String,
    /// The fake model's script, each turn answering the texts of the steps
    /// in order unless the file says which texts a turn answers
    /// (`Script::answering_in_order`): a Retry that re-sends a follow-up's
    /// text into a fresh conversation gets the follow-up's turn.
    pub script: wire::script::Script,
    /// Controller steps.
    pub steps: Vec<Step>,
    /// Cut points.
    pub cut: CutSelection,
    /// Faults.
    pub faults: Vec<Fault>,
    /// A second cut, armed in the runner restarted after the first fault
    /// (a cut during recovery); the same fault is applied there.
    pub recut: Option<crate::model::Cut>,
    /// Clean-run expectations.
    pub expect: Expect,
    /// Where each point name of a `cut` list is in the file (line, column),
    /// for errors found once the boundaries are known.
    pub cut_places: std::collections::BTreeMap<String, (usize, usize)>,
    /// Schedules every wave runs for each profile (`[chaos] schedules`, as
    /// `turncut explore --emit-scenario` writes a shrunk failure), with the
    /// place of each in the file.
    pub schedules: Vec<OwnSchedule>,
    /// A program the wave generated (`workflow::wave_programs`), not a
    /// file: planned as its clean run and drawn schedules, no one-cut cells.
    pub generated: bool,
}

/// A `[chaos] schedules` entry: its events, and its place in the file
/// (line, column).
pub type OwnSchedule = (Vec<crate::model::Event>, (usize, usize));

impl Scenario {
    /// The scenario id for `profile`.
    pub fn id(&self, profile: &str) -> String {
        crate::model::ScenarioId::new(&self.suite, profile, &self.location, &self.case).to_string()
    }

    /// What the controller does, step by step (`submit,follow-up@TurnActive,await,retry@FailedClosed`):
    /// two scenarios with one shape leave the same work waiting behind a
    /// recovery.
    pub fn shape(&self) -> String {
        let step = |s: &Step| match s {
            Step::Submit { .. } => "submit".to_owned(),
            Step::FollowUp { when, .. } => format!("follow-up@{when:?}"),
            Step::Await { .. } => "await".to_owned(),
            Step::Retry { when, .. } => format!("retry@{when:?}"),
        };
        let on = |s: &Step| match s.task() {
            FIRST_TASK => step(s),
            task => format!("{}:{task}", step(s)),
        };
        self.steps.iter().map(on).collect::<Vec<_>>().join(",")
    }

    /// The tasks the steps submit, in the order they submit them.
    pub fn tasks(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Submit { .. }))
            .map(Step::task)
            .collect()
    }

    /// The scenario ids of this file: one per profile.
    pub fn ids(&self) -> Vec<String> {
        self.profiles.iter().map(|p| self.id(p)).collect()
    }

    /// An error at the place of the cut point `name` in this file (its
    /// `cut` list), or at the top of the file when it is not listed there.
    pub fn error_at_point(&self, name: &str, message: impl Into<String>) -> ScenarioError {
        let (line, col) = self.cut_places.get(name).copied().unwrap_or((1, 1));
        ScenarioError {
            path: self.path.display().to_string(),
            line,
            col,
            message: message.into(),
        }
    }
}

/// The profile of a scenario id `<suite>.<profile>.<location>.<case>`
/// (what [`Scenario::id`] puts second).
pub fn profile_of(scenario_id: &str) -> &str {
    crate::model::ScenarioId::part_of(scenario_id, 1)
}

/// ` (did you mean "x"?)` for the candidate closest to `word`, or nothing
/// when none is close (at most a third of the word's characters differ).
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let best = candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .min();
    match best {
        Some((d, c)) if d > 0 && d <= word.chars().count().div_ceil(3) => {
            format!(" (did you mean {c:?}?)")
        }
        _ => String::new(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    suite: Spanned<String>,
    case: Spanned<String>,
    #[serde(default)]
    location: Option<Spanned<String>>,
    profiles: Spanned<Vec<Spanned<String>>>,
    title: String,
    #[serde(default)]
    script: Option<Spanned<wire::script::Script>>,
    steps: Spanned<Vec<Spanned<steps::RawStep>>>,
    #[serde(default)]
    chaos: Option<chaos::RawChaos>,
    #[serde(default)]
    expect: Option<RawExpect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default)]
    follow_ups_consumed: Option<usize>,
    #[serde(default)]
    final_state: Option<Spanned<String>>,
    #[serde(default)]
    effects: Option<usize>,
}

struct Ctx<'a> {
    path: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: std::ops::Range<usize>, message: impl Into<String>) -> ScenarioError {
        let (line, col) = wire::script::line_col(self.text, span.start);
        ScenarioError {
            path: self.path.to_owned(),
            line,
            col,
            message: message.into(),
        }
    }
}

fn check_name(ctx: &Ctx<'_>, what: &str, v: &Spanned<String>) -> Result<(), ScenarioError> {
    let s = v.get_ref();
    let ok = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ctx.err(
            v.span(),
            format!("{what} {s:?} must be lowercase letters, digits and dashes (it becomes part of the scenario id)"),
        ))
    }
}

/// Parses and validates one scenario file's text.
pub fn parse(text: &str, path: &str) -> Result<Scenario, ScenarioError> {
    let ctx = Ctx { path, text };
    let raw: RawScenario = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        ctx.err(span, e.message().trim_end().to_owned())
    })?;
    check_name(&ctx, "suite", &raw.suite)?;
    check_name(&ctx, "case", &raw.case)?;
    let location = match &raw.location {
        Some(l) => {
            check_name(&ctx, "location", l)?;
            l.get_ref().clone()
        }
        None => "local".to_owned(),
    };
    let profiles = parse_profiles(&ctx, &raw.profiles)?;
    let script = raw
        .script
        .map(Spanned::into_inner)
        .unwrap_or_else(wire::script::Script::builtin);
    if let Err(m) = script.validate() {
        return Err(ctx.err(0..0, format!("script: {m}")));
    }
    let steps = steps::parse_steps(&ctx, &raw.steps)?;
    let script = script.answering_in_order(steps.iter().filter_map(Step::text));
    let mut cut_places = std::collections::BTreeMap::new();
    let schedules = match raw.chaos.as_ref().and_then(|ch| ch.schedules.as_ref()) {
        None => Vec::new(),
        Some(list) => chaos::parse_schedules(&ctx, list)?,
    };
    let (cut, faults, recut) = match raw.chaos {
        None => (CutSelection::EveryBoundary, Fault::DEFAULT.to_vec(), None),
        Some(ch) => chaos::parse_chaos(&ctx, &ch, &mut cut_places)?,
    };
    let expect = match raw.expect {
        None => Expect::default(),
        Some(e) => parse_expect(&ctx, e)?,
    };
    Ok(Scenario {
        path: PathBuf::from(path),
        suite: raw.suite.into_inner(),
        case: raw.case.into_inner(),
        location,
        profiles,
        title: raw.title,
        script,
        steps,
        cut,
        faults,
        recut,
        expect,
        cut_places,
        schedules,
        generated: false,
    })
}

/// The `profiles` list: at least one, each known and supported, none twice.
fn parse_profiles(
    ctx: &Ctx<'_>,
    raw: &Spanned<Vec<Spanned<String>>>,
) -> Result<Vec<String>, ScenarioError> {
    if raw.get_ref().is_empty() {
        return Err(ctx.err(
            raw.span(),
            "profiles is empty: list at least one, e.g. [\"runner-codex\"]",
        ));
    }
    let mut profiles = Vec::new();
    for p in raw.get_ref() {
        let name = p.get_ref();
        if wire::profiles::facts(name).is_none() {
            return Err(ctx.err(
                p.span(),
                format!(
                    "unknown profile {name:?}; known profiles: {}",
                    known_profiles().join(", ")
                ),
            ));
        }
        if profiles.contains(name) {
            return Err(ctx.err(p.span(), format!("profile {name:?} is listed twice")));
        }
        profiles.push(name.clone());
    }
    Ok(profiles)
}

/// The `[expect]` table.
fn parse_expect(ctx: &Ctx<'_>, e: RawExpect) -> Result<Expect, ScenarioError> {
    if let Some(s) = &e.final_state
        && !matches!(s.get_ref().as_str(), "completed" | "failed" | "needs_human")
    {
        return Err(ctx.err(
            s.span(),
            format!("expect.final_state = {:?} is not one of \"completed\", \"failed\", \"needs_human\"", s.get_ref()),
        ));
    }
    Ok(Expect {
        follow_ups_consumed: e.follow_ups_consumed,
        final_state: e.final_state.map(Spanned::into_inner),
        effects: e.effects,
    })
}

/// The scenarios built into turncut: (file name, text) of every
/// `scenarios/*.toml` of the source tree, embedded at build time.
pub const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_scenarios.rs"));

/// The scenarios of `dir`, or the built-in ones ([`BUILTIN`], named
/// `scenarios/<file>` in errors and reports) when there is none.
pub fn load(dir: Option<&Path>) -> Result<Vec<Scenario>, ScenarioError> {
    match dir {
        Some(dir) => load_dir(dir),
        None => load_texts(
            BUILTIN
                .iter()
                .map(|(name, text)| (format!("scenarios/{name}"), (*text).to_owned()))
                .collect(),
        ),
    }
}

/// Loads every `*.toml` file of `dir` (sorted by name). Any bad file fails the
/// whole load, and duplicate scenario ids are an error naming both files.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, ScenarioError> {
    let whole = |message: String| ScenarioError {
        path: dir.display().to_string(),
        line: 1,
        col: 1,
        message,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| {
        whole(format!(
            "cannot read the scenario directory ({e}); pass --scenarios DIR"
        ))
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|x| x.to_str()) == Some("toml"))
        .collect();
    files.sort();
    let mut texts = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| ScenarioError {
            path: f.display().to_string(),
            line: 1,
            col: 1,
            message: format!("cannot read the file: {e}"),
        })?;
        texts.push((f.display().to_string(), text));
    }
    if texts.is_empty() {
        return Err(whole(
            "no *.toml scenario files here; pass --scenarios DIR".to_owned(),
        ));
    }
    load_texts(texts)
}

/// Parses (path, text) pairs; duplicate scenario ids are an error naming
/// both files.
fn load_texts(texts: Vec<(String, String)>) -> Result<Vec<Scenario>, ScenarioError> {
    let mut out: Vec<Scenario> = Vec::new();
    for (path, text) in texts {
        let s = parse(&text, &path)?;
        for id in s.ids() {
            if let Some(other) = out.iter().find(|o| o.ids().contains(&id)) {
                return Err(ScenarioError {
                    path,
                    line: 1,
                    col: 1,
                    message: format!(
                        "scenario id {id} is also declared by {}",
                        other.path.display()
                    ),
                });
            }
        }
        out.push(s);
    }
    Ok(out)
}

/// Finds the scenario and profile of an id.
pub fn find<'a>(scenarios: &'a [Scenario], id: &str) -> Option<(&'a Scenario, String)> {
    scenarios.iter().find_map(|s| {
        s.profiles
            .iter()
            .find(|p| s.id(p) == id)
            .map(|p| (s, p.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
suite = "everyday-workflows"
case = "recover-controller"
profiles = ["runner-codex"]
title = "A follow-up queued during an active turn survives a controller restart"

[[script.turn]]
say = ["Looking."]
tools = [{ key = "write-hello", kind = "command", approval = true }]
final = "Created hello.txt."

[[steps]]
submit = { prompt = "Create hello.txt" }
[[steps]]
follow_up = { text = "Also add a README", when = "turn-active" }
[[steps]]
await = "settled"
[[steps]]
retry = { when = "failed-closed" }

[chaos]
cut = "every-boundary"
faults = ["kill-runner", "kill-provider", "kill-both", "hang-provider"]

[expect]
follow_ups_consumed = 1
"#;

    fn check_err(text: &str, line: usize, needle: &str) {
        let e = parse(text, "s.toml").unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert!(e.to_string().starts_with(&format!("s.toml:{line}:")), "{e}");
        assert!(e.message.contains(needle), "{e}");
    }

    #[test]
    fn a_full_scenario_parses() {
        let s = parse(GOOD, "s.toml").unwrap();
        assert_eq!(
            s.ids(),
            ["everyday-workflows.runner-codex.local.recover-controller"]
        );
        assert_eq!(s.steps.len(), 4);
        assert_eq!(
            s.steps[1],
            Step::FollowUp {
                task: FIRST_TASK.into(),
                text: "Also add a README".into(),
                message_id: "f1".into(),
                when: FollowUpWhen::TurnActive,
                expect: None,
            }
        );
        assert_eq!(s.faults, Fault::DEFAULT.to_vec());
        assert_eq!(s.expect.follow_ups_consumed, Some(1));
    }

    /// Steps on a second task: its own submit first, its own default ids,
    /// and the mistakes a person makes with tasks named at their step.
    #[test]
    fn a_second_task_is_submitted_before_its_steps_and_its_ids_are_its_own() {
        let two = GOOD.replace(
            "[[steps]]\nawait",
            "[[steps]]\ntask = \"task-2\"\nsubmit = { prompt = \"Create notes.txt\" }\n[[steps]]\ntask = \"task-2\"\nfollow_up = { text = \"More\" }\n[[steps]]\nawait",
        );
        let s = parse(&two, "s.toml").unwrap();
        assert_eq!(s.tasks(), ["task-1", "task-2"]);
        let ids: Vec<(&str, Option<&str>)> = s
            .steps
            .iter()
            .map(|st| (st.task(), st.message_id()))
            .collect();
        assert_eq!(
            ids,
            [
                ("task-1", Some("m1")),
                ("task-1", Some("f1")),
                ("task-2", Some("task-2-m1")),
                ("task-2", Some("task-2-f1")),
                ("task-1", None),
                ("task-1", Some("r1")),
            ]
        );
        assert!(s.shape().contains("follow-up@Now:task-2"), "{}", s.shape());
        // A step on a task never submitted.
        check_err(
            &GOOD.replace("[[steps]]\nawait", "[[steps]]\ntask = \"task-2\"\nawait"),
            16,
            "task-2 is not submitted yet",
        );
        // One id for two tasks' messages.
        check_err(
            &two.replace(
                "follow_up = { text = \"More\" }",
                "follow_up = { text = \"More\", message_id = \"f1\" }",
            ),
            19,
            "message id \"f1\" is already task-1's",
        );
        // A task submitted twice.
        check_err(
            &two.replace(
                "follow_up = { text = \"More\" }",
                "submit = { prompt = \"Again\" }",
            ),
            19,
            "task-2 is submitted once",
        );
        check_err(
            &two.replace(
                "task = \"task-2\"\nfollow_up",
                "task = \"Task 2\"\nfollow_up",
            ),
            20,
            "lowercase",
        );
    }

    #[test]
    fn bad_files_name_the_place_and_the_fix() {
        check_err(
            &GOOD.replace("kill-both", "kill-all"),
            23,
            "unknown fault \"kill-all\"",
        );
        check_err(
            &GOOD.replace("\"turn-active\"", "\"later\""),
            15,
            "not one of",
        );
        check_err(
            &GOOD.replace("runner-codex", "runner-foo"),
            4,
            "unknown profile",
        );
        check_err(
            &GOOD.replace("await = \"settled\"", "awaits = \"settled\""),
            17,
            "unknown field",
        );
        check_err(
            &GOOD.replace("suite = \"everyday-workflows\"", "suite = \"Everyday\""),
            2,
            "lowercase",
        );
        check_err(
            &GOOD.replace(
                "[[steps]]\nsubmit",
                "[[steps]]\nawait = \"settled\"\nsubmit",
            ),
            12,
            "exactly one",
        );
        check_err("suite = \n", 1, "");
        check_err(
            &GOOD.replace("cut = \"every-boundary\"", "cut = 5"),
            22,
            "cut must be",
        );
    }
}
