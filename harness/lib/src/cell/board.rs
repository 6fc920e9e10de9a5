//! Where a cell's controller side and its cut side meet, and what both record.
//!
//! A cell has two sides: the controller side (`steps`: the scenario's requests and
//! the waits on the task) and the cut side (`faults`: the hits, the faults,
//! the restarts). Each owns its own state; they share exactly two things:
//!
//! - the [`Board`]: the runner now running and how far the schedule got,
//!   under one lock, every change waking whoever waits on it. It is a
//!   monitor rather than a channel because the controller side's waits are
//!   conditions over it with a deadline ("a runner of a later generation",
//!   "the first event applied and the task settled"), asked from inside
//!   its HTTP retries;
//! - the [`Recorder`]: what either side did, sent as messages
//!   ([`Record`]) and collected by the controller side at teardown: no lock, and
//!   nothing the other side reads while the cell runs.
//!
//! What the cut side alone produced comes back to the controller side once, when
//! teardown joins it: the [`CutReport`].

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::Value;

use crate::evidence::{Action, ActionKind, Exchange, Op};
use crate::model::Role;
use crate::runner_client::{RunnerClient, RunnerProcess};

/// The state the two sides share: see the module doc.
#[derive(Default)]
pub(super) struct Status {
    /// The runner now running (none between a kill and its restart).
    pub runner: Option<RunnerProcess>,
    /// How many runners the cell has started.
    pub generation: u64,
    /// Events of the schedule matched so far (the index of the next one).
    /// Past 0 the first cut was reached: only a later event that found its
    /// process gone is taken back (`events::not_applied`).
    pub stage: usize,
    /// Events applied so far (one per matched event when done).
    pub applied: usize,
    /// The controller side waits for a turn in flight to send a turn-active
    /// follow-up: the next hit of the sync point holds the runner until it
    /// is sent (or given up on), when the controller side clears it.
    pub sync_wanted: bool,
    /// The runner is held at the sync point for the follow-up now wanted.
    pub sync_reached: bool,
    /// Turn-active follow-ups not sent yet: while any is left, every runner
    /// of the cell is armed at the sync point.
    pub turn_active_left: usize,
    /// The runner's full disk is being brought back: its next write after
    /// a `disk-full` event failed too (or it wrote nothing for an idle
    /// timeout), and the restart that frees the disk is under way.
    pub disk_coming_back: bool,
    /// Teardown has begun: the cut side takes no more hits.
    pub stop: bool,
}

/// The [`Status`] under its lock, and the condition its changes signal.
#[derive(Default)]
pub(super) struct Board {
    status: Mutex<Status>,
    changed: Condvar,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Status> {
        self.status.lock().expect("the cell's board")
    }

    /// A value read from the status.
    pub fn read<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        f(&self.lock())
    }

    /// Changes the status and wakes every waiter.
    pub fn update<T>(&self, f: impl FnOnce(&mut Status) -> T) -> T {
        let out = f(&mut self.lock());
        self.changed.notify_all();
        out
    }

    /// The client of the runner now running and its generation.
    pub fn client(&self) -> Option<(RunnerClient, u64)> {
        let s = self.lock();
        s.runner.as_ref().map(|r| (r.client(), s.generation))
    }

    /// The pid of the runner now running.
    pub fn runner_pid(&self) -> Option<u32> {
        self.read(|s| s.runner.as_ref().map(RunnerProcess::pid))
    }

    /// Waits until `done(status)` or `until`; whether it is done.
    pub fn wait_until(&self, until: Instant, done: impl Fn(&Status) -> bool) -> bool {
        let mut s = self.lock();
        while !done(&s) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .changed
                .wait_timeout(s, left)
                .expect("the cell's board")
                .0;
        }
        true
    }
}

/// One thing a side of the cell recorded.
pub(super) enum Record {
    /// Something the harness did, for the evidence's actions.
    Action(Action),
    /// A process the cell met: what it is, its pid and start time (the
    /// hygiene oracle's list of what must be gone at teardown).
    Process(String, u32, Option<u64>),
    /// A controller request the cut side made (a `follow-up` or `retry`
    /// event).
    Injected(Exchange, Vec<Op>),
    /// Why the cut side could not do what the schedule meant.
    Error(String),
}

/// Sends [`Record`]s; cloned into every thread of the cell.
#[derive(Clone)]
pub(super) struct Recorder {
    tx: Sender<Record>,
    started: Instant,
}

impl Recorder {
    /// A recorder for a cell started at `started`, and where its records
    /// arrive.
    pub fn new(started: Instant) -> (Recorder, Receiver<Record>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (Recorder { tx, started }, rx)
    }

    /// Milliseconds since the cell started.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn send(&self, r: Record) {
        // The receiver lives until teardown has joined every sender's thread.
        let _ = self.tx.send(r);
    }

    /// Records an action.
    pub fn act(&self, what: ActionKind, detail: Value) {
        self.send(Record::Action(Action {
            at_ms: self.now_ms(),
            what,
            detail,
        }));
    }

    /// Records a process of the cell.
    pub fn process(&self, role: &str, pid: u32, start: Option<u64>) {
        self.send(Record::Process(role.to_owned(), pid, start));
    }

    /// Records a controller request the cut side made, and each attempt.
    pub fn injected(&self, exchange: Exchange, ops: Vec<Op>) {
        self.send(Record::Injected(exchange, ops));
    }

    /// Records why the cut side failed.
    pub fn error(&self, e: String) {
        self.send(Record::Error(e));
    }
}

/// Every record received so far, sorted by kind.
#[derive(Default)]
pub(super) struct Records {
    pub actions: Vec<Action>,
    pub processes: Vec<(String, u32, Option<u64>)>,
    pub injected: Vec<(Exchange, Vec<Op>)>,
    pub errors: Vec<String>,
}

impl Records {
    /// Adds every record that has arrived on `rx`.
    pub fn drain(&mut self, rx: &Receiver<Record>) {
        for r in rx.try_iter() {
            match r {
                Record::Action(a) => self.actions.push(a),
                Record::Process(role, pid, start) => self.processes.push((role, pid, start)),
                Record::Injected(x, ops) => self.injected.push((x, ops)),
                Record::Error(e) => self.errors.push(e),
            }
        }
    }
}

/// A value per task of the cell, the first task's first.
pub(super) type PerTask<T> = Vec<(String, T)>;

/// What the cut side alone owned, handed back to the controller side at teardown.
#[derive(Default)]
pub(super) struct CutReport {
    /// The role of the process whose hit was the first cut.
    pub cut_role: Option<Role>,
    /// Each task's run log as the controller could read it right before a
    /// fault.
    pub events_before: Option<PerTask<Vec<Value>>>,
    /// `events_before` as it was at the last power cut: what the run log
    /// said was done before the cut, which `workspace_after_cut` must hold
    /// (a later fault's read may hold writes done after the cut).
    pub events_before_cut: Option<PerTask<Vec<Value>>>,
    /// Provider hits held until teardown (`faults::apply_signals`).
    pub holds: Vec<cutpoint::Holding>,
    /// Each task's workspace files right after the last power cut.
    pub workspace_after_cut: Option<PerTask<std::collections::BTreeMap<String, String>>>,
    /// A power-cut cell's lazy mounts.
    pub lazy: Vec<lazyfs::LazyFs>,
}
