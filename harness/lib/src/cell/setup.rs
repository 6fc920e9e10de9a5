//! A cell's setup: what it runs, fixed before it starts and read by both
//! of its sides, never changed (`Setup`: the schedule, what every runner
//! is armed with, the trace, the tag, the sync point, the tasks). It runs
//! nothing itself.

use std::path::{Path, PathBuf};

use cutpoint::Arm;

use crate::model::{CellSpec, Event, Fault};
use crate::scenario::{FollowUpWhen, Scenario, Step};

/// Where a `turn-active` follow-up is sent: with the runner held right after
/// it persisted the turn's acceptance, so the turn is provably in flight.
pub const SYNC_POINT: &str = "runner.turn_accepted.persisted";

/// The schedule of a cell: its events, then a scenario's `recut` (with the
/// first cut's fault) when the cell names no later event itself and `recut`
/// is on.
pub fn schedule_of(scenario: &Scenario, spec: &CellSpec, recut: bool) -> Vec<Event> {
    let mut events = spec.events.clone();
    if events.len() == 1
        && recut
        && let Some(recut) = &scenario.recut
    {
        let fault = events[0].fault;
        events.push(Event {
            cut: recut.clone(),
            fault,
        });
    }
    events
}

/// What every runner of a cell is armed with (its providers inherit it): the
/// first cut as it is, each later event's point at every occurrence (`#*`: a
/// later event counts the hits of its point by any process after the event
/// before it), and with a `disk-full` event every before-write point (the
/// runner's next write after the disk filled is where the disk comes back).
/// Hits that are not the next event's go on at once.
pub(super) fn arms_for(events: &[Event]) -> Vec<Arm> {
    let every = |point: &str| Arm {
        point: point.to_owned(),
        n: cutpoint::EVERY,
    };
    let mut arms: Vec<Arm> = events.first().map(|e| e.cut.arm()).into_iter().collect();
    let later = events.iter().skip(1).map(|e| every(&e.cut.point));
    let disk = events
        .iter()
        .any(|e| e.fault == Fault::DiskFull)
        .then(|| every(&format!("{}*", crate::model::WRITE_POINTS)));
    for cut in later.chain(disk) {
        if !arms.contains(&cut) {
            arms.push(cut);
        }
    }
    arms
}

/// What a cell runs, fixed before it starts: read by both sides, never
/// changed.
pub(super) struct Setup {
    /// The schedule: the first cut, then later events (and a scenario's
    /// `recut`, with the first cut's fault).
    pub events: Vec<Event>,
    /// What every runner of the cell is armed with (see [`arms_for`]).
    pub arms: Vec<Arm>,
    /// The cut-point trace, when tracing (every runner of the cell writes it).
    pub trace: Option<PathBuf>,
    /// The tag in the environment of every process of the cell.
    pub tag: String,
    /// The sync point of the scenario's `turn-active` follow-ups: every turn
    /// acceptance, held only while the controller side wants one (`Status::sync_wanted`).
    pub sync: Option<Arm>,
    /// The script adds a file through `apply_patch` (a real codex then runs
    /// with its read-only sandbox: `Product::command_for`).
    pub patches: bool,
    /// The tasks the steps submit, the first first.
    pub tasks: Vec<String>,
}

/// How many of the scenario's follow-ups wait for a turn in flight.
pub(super) fn turn_active_follow_ups(scenario: &Scenario) -> usize {
    scenario
        .steps
        .iter()
        .filter(|st| {
            matches!(
                st,
                Step::FollowUp {
                    when: FollowUpWhen::TurnActive,
                    ..
                }
            )
        })
        .count()
}

impl Setup {
    /// The setup of a cell in `dir` that runs the schedule `events` (its
    /// processes are tagged with the directory).
    pub fn new(scenario: &Scenario, events: Vec<Event>, trace: Option<&Path>, dir: &Path) -> Setup {
        let turn_active = turn_active_follow_ups(scenario) > 0;
        let patches = scenario
            .script
            .turns
            .iter()
            .flat_map(|t| &t.tools)
            .any(|t| t.kind == wire::script::ToolKind::Patch);
        Setup {
            patches,
            tasks: scenario.tasks().into_iter().map(str::to_owned).collect(),
            arms: arms_for(&events),
            events,
            trace: trace.map(Path::to_owned),
            tag: dir.display().to_string(),
            sync: turn_active.then(|| Arm {
                point: SYNC_POINT.to_owned(),
                n: cutpoint::EVERY,
            }),
        }
    }
}
