//! The codex moments of the differential: the real `codex app-server`
//! (pinned, its model the fake model API) against `fake-provider codex`,
//! each SIGKILLed at a moment of a turn (`Moment`), then restarted on the
//! same home and asked what a recovering runner asks (`play.rs`).
//!
//! Where the real product's state at a moment depends on timing (right
//! after the `turn/start` response its writes race the kill: an interrupted
//! turn, a thread with no turn, an empty rollout or no thread at all), the
//! fake is cut at each of its points in that window, each a reading of its
//! own; a reading of the real product that one of them gives is the same.

use std::path::Path;

use super::{Row, compare};
use crate::real::Product;

mod play;
mod upstream;

pub use play::{AfterCrash, crash_at, turn_form};
pub use upstream::{AfterFailure, upstream_rows};

/// Where a turn is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Right after the `thread/start` response, before any turn.
    ThreadStarted,
    /// Right after the `turn/start` response.
    TurnStarted,
    /// Right after the `turn/start` response on a thread started with the
    /// approval policy `untrusted`, then the message sent again on the
    /// resumed thread: does its command ask first?
    PolicyLost,
    /// While the approved command runs (one process: the effect).
    CommandRunning,
    /// While the approved command runs as a shell with a child (the effect).
    ChildRunning,
    /// While turn 1 waits on its approval and a second `turn/start` was
    /// answered.
    SecondMessageQueued,
    /// After the `fileChange` item of an `apply_patch` started, before its
    /// approval request.
    PatchStarted,
    /// While the `fileChange` approval waits.
    PatchPending,
}

/// How the fake is stopped at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeCut {
    /// It exits by itself at this point (`--exit`): the client cannot see
    /// the moment in time to kill it there.
    Exit(&'static str),
    /// It is held at this point (`--hang`), then killed by the client.
    Hang(&'static str),
    /// The client kills it when it sees the moment, as the real one.
    Kill,
    /// It is not stopped: it fails its turn's first model request
    /// ([`FAKE_MODEL_POINT`]`#1`) with this upstream fault (`--answer`).
    Answer(wire::upstream::UpstreamFault),
}

/// The fake's model point, where it meets its model API's failures.
const FAKE_MODEL_POINT: &str = wire::upstream::PROVIDER_MODEL_POINTS[0];

/// The fake's points right after `turn/start`, the last first: the real
/// server answers before its writes are done, so a kill right after the
/// answer leaves any of these states.
const TURN_START_WINDOW: [FakeCut; 5] = [
    FakeCut::Exit("codex.turn_start.responded"),
    FakeCut::Exit("codex.turn.recorded"),
    FakeCut::Exit("codex.thread.recorded"),
    FakeCut::Exit("codex.rollout.created"),
    FakeCut::Exit("codex.turn_start.received"),
];

/// The moments' script: one message, one approved command that runs 1.5 s.
const COMMAND_SCRIPT: &str = super::MOMENT_SCRIPT;

/// The same, its command a shell whose child is the effect.
const CHILD_SCRIPT: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = true, duration_ms = 1500, nested_shell = true }]
final = "Created hello.txt."
"#;

/// A command the model does not ask to run unsandboxed: asked for under
/// `untrusted` only.
const UNASKED_SCRIPT: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command" }]
final = "Created hello.txt."
"#;

/// A patch adding `hello.txt`.
const PATCH_SCRIPT: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "add-hello", kind = "patch", path = "hello.txt" }]
final = "Created hello.txt."
"#;

/// Turn 1 as usual; the second message gets a final answer only.
const TWO_MESSAGE_SCRIPT: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = true }]
final = "Created hello.txt."

[[turn]]
final = "Second done."
"#;

impl Moment {
    /// Every moment, in turn order.
    pub const ALL: [Moment; 8] = [
        Moment::ThreadStarted,
        Moment::TurnStarted,
        Moment::PolicyLost,
        Moment::CommandRunning,
        Moment::ChildRunning,
        Moment::SecondMessageQueued,
        Moment::PatchStarted,
        Moment::PatchPending,
    ];

    /// The script both sides play.
    pub fn script(self) -> &'static str {
        match self {
            Moment::ChildRunning => CHILD_SCRIPT,
            Moment::PolicyLost => UNASKED_SCRIPT,
            Moment::PatchStarted | Moment::PatchPending => PATCH_SCRIPT,
            Moment::SecondMessageQueued => TWO_MESSAGE_SCRIPT,
            _ => COMMAND_SCRIPT,
        }
    }

    /// The fake's cuts at the moment: one, or the points of a window (the
    /// usual reading first).
    pub fn fake_cuts(self) -> &'static [FakeCut] {
        match self {
            Moment::ThreadStarted => &[FakeCut::Exit("codex.thread_start.responded")],
            Moment::TurnStarted | Moment::PolicyLost => &TURN_START_WINDOW,
            Moment::CommandRunning | Moment::ChildRunning => {
                &[FakeCut::Hang("codex.effect.spawned")]
            }
            // The user message, the agent message, then the patch's item.
            Moment::PatchStarted => &[FakeCut::Exit("codex.item_started.notified#3")],
            Moment::SecondMessageQueued | Moment::PatchPending => &[FakeCut::Kill],
        }
    }

    /// The approval policy the thread is started with, if any.
    fn policy(self) -> Option<&'static str> {
        (self == Moment::PolicyLost).then_some("untrusted")
    }

    /// Configuration the real codex gets on top of its profile's: the
    /// policy moment runs without a sandbox, so a command run without
    /// approval lands its effect on both sides (the fake has no sandbox).
    fn real_config(self) -> &'static [&'static str] {
        match self {
            Moment::PolicyLost => &["sandbox_mode=\"danger-full-access\""],
            // A patch in the workspace asks for approval only read-only
            // (what a cell of a script with patches runs with).
            Moment::PatchStarted | Moment::PatchPending => &["sandbox_mode=\"read-only\""],
            _ => &[],
        }
    }
}

/// One reading of the fake at a moment, with the cut that gave it.
type FakeReading = (FakeCut, AfterCrash);

/// The fake's readings at `moment`, one per cut, each in its own directory
/// under `dir`.
pub fn fake_at(turncut: &Path, moment: Moment, dir: &Path) -> Result<Vec<FakeReading>, String> {
    let mut out = Vec::new();
    for (i, cut) in moment.fake_cuts().iter().enumerate() {
        let case = play::Case::new(&dir.join(format!("fake-{i}")), moment)?;
        let fake = crate::demo::FakeCodex::via(turncut, &case.dir.join("fake"));
        let ledger = fake.ledger();
        let provider = play::Provider::Fake(fake, case.script.clone(), *cut);
        out.push((*cut, crash_at(&provider, moment, &case, &ledger)?));
    }
    Ok(out)
}

/// The real codex's reading at `moment`, in `dir`.
pub fn real_at(
    turncut: &Path,
    codex: &Path,
    moment: Moment,
    dir: &Path,
) -> Result<AfterCrash, String> {
    let case = play::Case::new(dir, moment)?;
    let model = super::start_model_api(turncut, dir, &case.script, None)?;
    let product = Product {
        real: wire::profiles::real("runner-codex-real").ok_or("no runner-codex-real profile")?,
        bin: codex.to_owned(),
        home: dir.join("codex-home"),
    };
    let mut argv = product
        .command(&model.url, &dir.display().to_string())
        .map_err(|e| format!("{e:#}"))?;
    for config in moment.real_config() {
        argv.extend(["-c".to_owned(), (*config).to_owned()]);
    }
    let seen = crash_at(
        &play::Provider::Real(argv),
        moment,
        &case,
        &dir.join("model/ledger.jsonl"),
    );
    model.stop();
    seen
}

/// The rows of every codex moment `which` names (crash moments, then
/// upstream failures), the real codex played `runs` times at each (each
/// distinct reading its own rows, with how often it came up).
pub fn rows(
    turncut: &Path,
    codex: &Path,
    dir: &Path,
    runs: u32,
    which: super::Moments,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    if which.crash() {
        rows = rows_of(turncut, codex, dir, runs, &Moment::ALL)?;
    }
    if which.upstream() {
        let faults = wire::upstream::UpstreamFault::ALL;
        rows.extend(upstream_rows(
            turncut,
            codex,
            &dir.join("upstream"),
            runs,
            &faults,
        )?);
    }
    Ok(rows)
}

/// The rows of `moments`.
pub fn rows_of(
    turncut: &Path,
    codex: &Path,
    dir: &Path,
    runs: u32,
    moments: &[Moment],
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for &moment in moments {
        let fake = fake_at(turncut, moment, &dir.join(format!("{moment:?}")))?;
        let mut seen: Vec<(AfterCrash, u32)> = Vec::new();
        for run in 0..runs.max(1) {
            let case = dir.join(format!("{moment:?}/real-{run}"));
            let real = real_at(turncut, codex, moment, &case)?;
            match seen.iter_mut().find(|(r, _)| *r == real) {
                Some((_, n)) => *n += 1,
                None => seen.push((real, 1)),
            }
        }
        for (real, n) in seen {
            rows.extend(moment_rows(moment, n, runs, &real, &fake));
        }
    }
    Ok(rows)
}

/// The rows of one reading of the real codex at `moment`, against the
/// fake's reading that equals it or else the closest one.
fn moment_rows(
    moment: Moment,
    n: u32,
    runs: u32,
    real: &AfterCrash,
    fake: &[FakeReading],
) -> Vec<Row> {
    // The fake's reading that differs in the fewest fields (none: the same).
    let differing = |f: &AfterCrash| {
        let (a, b) = (real.fields(), f.fields());
        a.iter().zip(&b).filter(|(x, y)| x != y).count()
    };
    let (cut, matched) = fake
        .iter()
        .min_by_key(|(_, f)| differing(f))
        .expect("every moment has a fake cut");
    let mut label = match runs {
        0 | 1 => format!("{moment:?}"),
        _ => format!("{moment:?} {n}/{runs}"),
    };
    if fake.len() > 1
        && let FakeCut::Exit(point) = cut
    {
        label.push_str(&format!(" (fake: {point})"));
    }
    let fields = real
        .fields()
        .into_iter()
        .zip(matched.fields())
        .map(|((name, r), (_, f))| (name, r, f))
        .collect();
    compare("runner-codex-real", &label, fields, None)
}
