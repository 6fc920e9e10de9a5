//! The fault applier, the cell's cut side: which hits are events
//! (`is_next_event`), an acceptor that answers every other hit at once
//! (`accept_hits`), and the event loop that applies each event in the
//! order it was matched (`cut_loop`, `apply_event`): process faults, dealt
//! by the nemesis (`apply_signals` asks `nemesis::deal` and records what it
//! did), and restarts (`apply_fault`), controller requests
//! (`inject::inject_action`), storage faults (`apply_storage`,
//! `disk_comes_back`) and the turn-active sync point (`hold_for_sync`).
//! Every signal it sends, it asks the nemesis for.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::board::CutReport;
use super::doomed::EVENT_MARK;
use super::reads::{live_provider, read_before_fault};
use super::{Ctx, restart_after_fault, start_runner};
use crate::evidence::ActionKind;
use crate::model::{Event, Fault, FaultClass, Role};
use crate::nemesis;
use crate::runner_client::RunnerClient;

/// What the cut side's acceptor and its event loop share: how far the
/// count of the next event got and what no later event may count on.
#[derive(Default)]
struct Matcher {
    /// Hits of the next event's point since the previous event was reached.
    since: u64,
    /// Processes an event already matched has doomed (`doomed`): their
    /// hits count toward no later event.
    doomed: Vec<u32>,
    /// The runner whose disk is full (a `disk-full` event) and since when,
    /// until its next attempted write or an idle timeout without one.
    disk_full: Option<(u32, Instant)>,
}

/// The cut side of a cell: the cell's handles, a real product's model API
/// (never a fault's target) and the matcher.
struct CutSide {
    ctx: Ctx,
    model_api: Option<u32>,
    matcher: Mutex<Matcher>,
}

impl CutSide {
    fn act(&self, what: ActionKind, detail: Value) {
        self.ctx.rec.act(what, detail);
    }

    fn matcher(&self) -> std::sync::MutexGuard<'_, Matcher> {
        self.matcher.lock().expect("the cut side's matcher")
    }

    fn event(&self, stage: usize) -> &Event {
        &self.ctx.setup.events[stage]
    }
}

/// Starts the cut side of a cell on a thread of its own; joined at
/// teardown, it hands back what it owned (`lazy`, the power-cut cell's
/// mounts, among it).
pub(super) fn spawn(
    ctx: Ctx,
    listener: cutpoint::Listener,
    model_api: Option<u32>,
    lazy: Vec<lazyfs::LazyFs>,
) -> std::thread::JoinHandle<CutReport> {
    std::thread::spawn(move || {
        let side = CutSide {
            ctx,
            model_api,
            matcher: Mutex::new(Matcher::default()),
        };
        let mut report = CutReport {
            lazy,
            ..CutReport::default()
        };
        cut_loop(&listener, &side, &mut report);
        report
    })
}

/// Whether `hit` is the next event of the schedule: the first event by its
/// per-process occurrence, a later one by the count of its point's hits
/// since the previous event.
fn is_next_event(side: &CutSide, m: &mut Matcher, stage: usize, hit: &cutpoint::Hit) -> bool {
    let Some(event) = side.ctx.setup.events.get(stage) else {
        return false;
    };
    if event.cut.point != hit.point || m.doomed.contains(&hit.pid) {
        return false;
    }
    if stage == 0 {
        return event.cut.n == hit.n;
    }
    m.since += 1;
    m.since == event.cut.n
}

/// Why the acceptor handed a hit to the event loop.
enum Wanted {
    /// The next event of the schedule, with its index.
    Event(usize),
    /// A turn-active follow-up's sync point (and maybe also the next event).
    Sync(Option<usize>),
    /// The next write of a runner whose disk is full.
    DiskBack,
}

/// A hit handed to the event loop: the held hit, its process's start time
/// when it came in, and why.
type Handed = (cutpoint::HeldHit, Option<u64>, Wanted);

/// The cut side: an acceptor answers every hit that needs nothing at once
/// (so a process, or the runner's store, never waits on a fault being
/// applied elsewhere) and hands the others to this loop, which applies them
/// one at a time in the order they were matched.
fn cut_loop(listener: &cutpoint::Listener, side: &CutSide, report: &mut CutReport) {
    let (tx, rx) = std::sync::mpsc::channel::<Handed>();
    std::thread::scope(|s| {
        s.spawn(move || accept_hits(listener, side, tx));
        loop {
            // A full disk comes back at the runner's next write, or once the
            // runner has written nothing for an idle timeout (it may have
            // nothing left to write until an operator frees the disk).
            let full = side.matcher().disk_full;
            let next = match full {
                Some((_, since)) => {
                    let until = since + Duration::from_millis(side.ctx.env.idle_timeout_ms);
                    rx.recv_timeout(until.saturating_duration_since(Instant::now()))
                }
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let (held, start, wanted) = match next {
                Ok(next) => next,
                Err(RecvTimeoutError::Timeout) => {
                    disk_freed_by_operator(side);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            match wanted {
                Wanted::DiskBack => disk_comes_back(side, held),
                Wanted::Sync(event) => {
                    if let Some(held) = hold_for_sync(&side.ctx, held, event.is_some())
                        && let Some(stage) = event
                    {
                        apply_event(side, report, held, start, stage);
                    }
                }
                Wanted::Event(stage) => apply_event(side, report, held, start, stage),
            }
        }
    });
}

/// Accepts hits until teardown; see [`cut_loop`].
fn accept_hits(listener: &cutpoint::Listener, side: &CutSide, tx: std::sync::mpsc::Sender<Handed>) {
    nemesis::prioritise_this_thread();
    while !side.ctx.board.read(|s| s.stop) {
        // Teardown wakes the listener; the deadline only bounds a missed wake.
        let held = match listener.accept_hit(Duration::from_millis(100)) {
            Ok(h) => h,
            Err(cutpoint::Error::Timeout { .. } | cutpoint::Error::Woken) => continue,
            Err(e) => {
                side.act(ActionKind::CutError, json!({ "error": e.to_string() }));
                continue;
            }
        };
        let start = nemesis::start_time(held.hit.pid);
        side.ctx.rec.process(&held.hit.role, held.hit.pid, start);
        let wanted = wanted(side, &held.hit);
        match wanted {
            Some(w) => {
                if let Err(std::sync::mpsc::SendError((held, _, _))) = tx.send((held, start, w)) {
                    let _ = held.resume();
                }
            }
            // Another event's point before its turn, or a respawned provider
            // that inherited the first arm: let it pass.
            None => {
                let _ = held.resume();
            }
        }
    }
}

/// What the event loop must do with `hit`, if anything. Matching the next
/// event moves the schedule on at once, so the count of a later event
/// starts right after the hit that matched the one before it.
fn wanted(side: &CutSide, hit: &cutpoint::Hit) -> Option<Wanted> {
    let mut m = side.matcher();
    let full = m.disk_full.map(|(pid, _)| pid);
    if full == Some(hit.pid) && hit.point.starts_with(crate::model::WRITE_POINTS) {
        m.disk_full = None;
        // Said before the write's failure is answered: a controller that
        // gets its 503 waits for the restart (`steps::send`).
        side.ctx.board.update(|s| s.disk_coming_back = true);
        return Some(Wanted::DiskBack);
    }
    let board = &side.ctx.board;
    let stage = board.read(|s| s.stage);
    let event = is_next_event(side, &mut m, stage, hit).then(|| {
        hold_runner_at_provider_hit(side, stage, hit);
        doom(side, &mut m, stage);
        m.since = 0;
        board.update(|s| s.stage = stage + 1);
        stage
    });
    let is_sync = side
        .ctx
        .setup
        .sync
        .as_ref()
        .is_some_and(|c| c.point == hit.point)
        && Role::of(&hit.role) == Role::Runner
        && board.update(|s| {
            let hold = s.sync_wanted && !s.sync_reached;
            s.sync_reached |= hold;
            hold
        });
    match (is_sync, event) {
        (true, e) => Some(Wanted::Sync(e)),
        (false, Some(stage)) => Some(Wanted::Event(stage)),
        (false, None) => None,
    }
}

/// Whether event `stage`, matched at `hit` of another process (a
/// provider's, the model API's), stops the runner until it is applied: the
/// runner is not held by that hit and would go on while the event waits its
/// turn in the loop. So is every process fault whose target the hit itself
/// names (a kill of the runner; a provider fault at the provider's own hit,
/// or at the model API's when the runner started it, as on the native
/// profile); a provider fault at a real product's model API asks the
/// runner which provider is live, so it cannot hold the runner.
fn holds_runner(side: &CutSide, stage: usize, hit: &cutpoint::Hit) -> bool {
    let fault = side.event(stage).fault;
    let named = nemesis::needs_provider(fault) && hit_is_provider(side, hit);
    stage > 0
        && fault.class() != FaultClass::Action
        && Role::of(&hit.role) != Role::Runner
        && (kills_runner(fault) || named)
}

/// Whether `fault` ends the runner (a kill of it, a power cut).
fn kills_runner(fault: Fault) -> bool {
    nemesis::blow(fault).kill_runner || fault == Fault::PowerCut
}

/// Whether `hit` is the runner's provider's own: a provider's, or the
/// model API's when no harness-started model API is there (the native
/// profile's model API is the provider the runner started).
fn hit_is_provider(side: &CutSide, hit: &cutpoint::Hit) -> bool {
    match Role::of(&hit.role) {
        Role::Provider => true,
        Role::Model => side.model_api.is_none(),
        Role::Runner | Role::Unknown => false,
    }
}

/// A later event at another process's hit ([`holds_runner`]) stops
/// (SIGSTOP) the runner the moment the hit matches, so that the fault lands
/// at that moment and not wherever the runner got to meanwhile (under load
/// it finished the turn and stopped the very provider held at the hit, and
/// the event could not be applied). The runner goes on (SIGCONT) once the
/// event is applied, unless the event killed it, or when it cannot be.
fn hold_runner_at_provider_hit(side: &CutSide, stage: usize, hit: &cutpoint::Hit) {
    if !holds_runner(side, stage, hit) {
        return;
    }
    if let Some(pid) = side.ctx.board.runner_pid()
        && nemesis::signal_pid(pid, nix::sys::signal::Signal::SIGSTOP).is_ok()
    {
        side.act(
            ActionKind::HoldRunner,
            json!({ "event": stage + 1, "pid": pid }),
        );
    }
}

/// Lets the runner held by [`hold_runner_at_provider_hit`] go on.
fn release_runner(side: &CutSide, stage: usize, hit: &cutpoint::Hit) {
    if holds_runner(side, stage, hit)
        && let Some(pid) = side.ctx.board.runner_pid()
    {
        let _ = nemesis::signal_pid(pid, nix::sys::signal::Signal::SIGCONT);
    }
}

/// Records the processes event `stage`, just matched, dooms (`doomed`).
fn doom(side: &CutSide, m: &mut Matcher, stage: usize) {
    let runner = side.ctx.board.runner_pid();
    let fault = side.event(stage).fault;
    let pids = super::doomed::doomed_by(fault, &side.ctx.setup.tag, runner, side.model_api);
    m.doomed.extend(pids);
}

/// Applies event `stage` at the held hit that matched it (`start`: its
/// process's start time when the hit came in).
fn apply_event(
    side: &CutSide,
    report: &mut CutReport,
    held: cutpoint::HeldHit,
    start: Option<u64>,
    stage: usize,
) {
    let event = side.event(stage).clone();
    let gone = stage > 0 && !nemesis::alive_same(held.hit.pid, start);
    if gone && aims_at_hit(side, stage, &held.hit) {
        not_applied(side, stage, held);
        return;
    }
    mark_trace(side, stage);
    let mut detail = json!({ "event": stage + 1, "point": held.hit.point, "n": held.hit.n, "role": held.hit.role, "pid": held.hit.pid, "fault": event.fault.as_str() });
    if gone {
        // An action, sent to the runner all the same (`aims_at`).
        detail["process_gone"] = json!(true);
    }
    side.act(
        if stage == 0 {
            ActionKind::CutReached
        } else {
            ActionKind::EventReached
        },
        detail,
    );
    if stage == 0 {
        report.cut_role = Some(Role::of(&held.hit.role));
    }
    if event.fault.class() == FaultClass::Action {
        // The request passes cut points of its own, so it runs on a thread of
        // its own; it counts as applied when it has its answer. Its runner
        // is taken now, in the order the events matched: a later event that
        // kills the runner must not leave it with none to send to.
        let ctx = side.ctx.clone();
        let client = ctx.board.client();
        std::thread::spawn(move || {
            super::inject::inject_action(&ctx, client, held, event.fault, stage);
            ctx.board.update(|s| s.applied += 1);
        });
        return;
    }
    let hit = held.hit.clone();
    let runner_held = holds_runner(side, stage, &hit);
    match apply_fault(side, report, event.fault, held, runner_held) {
        Ok(()) => {}
        Err(NotApplied::HoldClosed(_)) if stage > 0 && aims_at_hit(side, stage, &hit) => {
            // The process went away while the event was being applied (the
            // runner stopped a provider an earlier event had left it to
            // stop): as if it had been gone when the event matched.
            rewind(side, stage, &hit);
            return;
        }
        Err(e) => side
            .ctx
            .rec
            .error(format!("failed to apply {}: {e}", event.fault)),
    }
    // A runner the event did not kill goes on (a restarted one never stopped).
    if runner_held && !kills_runner(event.fault) {
        release_runner(side, stage, &hit);
    }
    side.ctx.board.update(|s| s.applied += 1);
}

/// Whether event `stage` acts on the process of `hit` itself, so that the
/// process being gone when the event comes to be applied means it cannot
/// be: any event at a runner's hit (its write, its moment), a provider
/// fault at the provider's own hit. A kill of the runner at a provider's
/// hit aims at the runner, held since the match (`holds_runner`): a
/// provider the runner stopped meanwhile (it got its last answer and
/// finished the turn before the harness came to the hit) does not stop it.
fn aims_at_hit(side: &CutSide, stage: usize, hit: &cutpoint::Hit) -> bool {
    let fault = side.event(stage).fault;
    aims_at(fault, Role::of(&hit.role), holds_runner(side, stage, hit))
}

/// [`aims_at_hit`] by the fault, the role of the hit's process and whether
/// the match held the runner. An action (a follow-up, a Retry) at a
/// provider's or the model API's hit aims at the runner's API, not at that
/// process: it is sent as soon as the harness comes to it, whether or not
/// the process is still there. Its moment was never exact — the runner is
/// not held for an action and goes on meanwhile — and a provider the runner
/// stopped in that time (its turn ended by another route; seen under load,
/// when the harness came to the hit 18 ms late) leaves the action's meaning
/// as it was: a follow-up or a Retry just after that point. At a runner's
/// own hit, the runner that hit it is the one to send to.
fn aims_at(fault: Fault, hit_role: Role, runner_held: bool) -> bool {
    if fault.class() == FaultClass::Action && hit_role != Role::Runner {
        return false;
    }
    hit_role == Role::Runner || nemesis::needs_provider(fault) || !runner_held
}

/// A later event matched a hit whose process an earlier event had killed
/// meanwhile (a write the dying runner had in flight): it is recorded as
/// not applied, and the schedule goes back to waiting for that event, so
/// the next hit of its point — the restarted runner's, as the schedule
/// means — gets it. One that never comes again leaves the cell `unknown`
/// (vacuity).
fn not_applied(side: &CutSide, stage: usize, held: cutpoint::HeldHit) {
    rewind(side, stage, &held.hit);
    let _ = held.resume();
}

/// Why a fault was not applied.
#[derive(Debug)]
enum NotApplied {
    /// The held hit's connection was closed: its process exited (or was
    /// killed) while it was held, so no reply reaches it.
    HoldClosed(std::io::Error),
    /// Anything else: a harness error.
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for NotApplied {
    fn from(e: anyhow::Error) -> Self {
        NotApplied::Failed(e)
    }
}

impl std::fmt::Display for NotApplied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotApplied::HoldClosed(e) => write!(f, "the held hit's process is gone: {e}"),
            NotApplied::Failed(e) => write!(f, "{e:#}"),
        }
    }
}

/// A reply written to a held hit: a closed connection is
/// [`NotApplied::HoldClosed`].
fn replied(r: std::io::Result<()>) -> Result<(), NotApplied> {
    r.map_err(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
            NotApplied::HoldClosed(e)
        }
        _ => NotApplied::Failed(e.into()),
    })
}

/// Records event `stage` as not applied at `hit` and sets the schedule
/// back to waiting for it ([`not_applied`]).
fn rewind(side: &CutSide, stage: usize, hit: &cutpoint::Hit) {
    side.act(
        ActionKind::EventNotApplied,
        json!({ "event": stage + 1, "point": hit.point, "pid": hit.pid,
                "why": "its process was gone (an earlier event killed it, or the runner stopped it) before the event was applied" }),
    );
    // The runner held when the hit matched goes on.
    release_runner(side, stage, hit);
    let mut m = side.matcher();
    let back = side.ctx.board.update(|s| {
        let back = s.stage == stage + 1;
        if back {
            s.stage = stage;
        }
        back
    });
    if back {
        m.since = 0;
    }
}

/// After a `disk-full` event, the runner's next attempted write fails too
/// (the disk is still full); then the harness restarts the runner, which
/// brings the disk back.
fn disk_comes_back(side: &CutSide, held: cutpoint::HeldHit) {
    let point = held.hit.point.clone();
    let _ = held.fail(cutpoint::IoFault::Enospc);
    side.act(ActionKind::DiskStillFull, json!({ "point": point }));
    disk_back(&side.ctx);
}

/// Restarts the runner, which brings its disk back.
fn disk_back(ctx: &Ctx) {
    if let Err(e) = restart_runner(ctx, ActionKind::DiskBack) {
        ctx.rec
            .error(format!("failed to bring the disk back: {e:#}"));
    }
    ctx.board.update(|s| s.disk_coming_back = false);
}

/// The runner wrote nothing for an idle timeout after its disk filled: the
/// harness, as an operator would, frees the disk and restarts the runner.
fn disk_freed_by_operator(side: &CutSide) {
    let was_full = side.matcher().disk_full.take().is_some();
    if !was_full || side.ctx.board.read(|s| s.stop) {
        return;
    }
    side.ctx.board.update(|s| s.disk_coming_back = true);
    side.act(
        ActionKind::DiskQuiet,
        json!({ "idle_ms": side.ctx.env.idle_timeout_ms }),
    );
    disk_back(&side.ctx);
}

/// SIGKILLs the current runner (`nemesis::kill_runner`) and starts the
/// next one (`why` is recorded).
fn restart_runner(ctx: &Ctx, why: ActionKind) -> anyhow::Result<()> {
    if let Some(r) = ctx.board.update(|s| s.runner.take()) {
        let pid = nemesis::kill_runner(r)?;
        ctx.rec.act(
            ActionKind::Fault(Fault::KillRunner),
            json!({ "pid": pid, "why": why.to_string() }),
        );
    }
    start_runner(ctx)?;
    ctx.rec.act(why, json!({}));
    Ok(())
}

/// A storage fault: the held before-write hit is answered `fail EIO` (one
/// write fails) or `fail ENOSPC` (the disk is full until the runner's next
/// write, see [`disk_comes_back`]); the held before-read hit `fail EIO`
/// (one read fails) or `corrupt` (one read returns a corrupt page).
fn apply_storage(side: &CutSide, fault: Fault, held: cutpoint::HeldHit) -> Result<(), NotApplied> {
    if Role::of(&held.hit.role) != Role::Runner || !fault.applies_at(&held.hit.point) {
        side.act(
            ActionKind::NotAWrite,
            json!({ "fault": fault.as_str(), "point": held.hit.point }),
        );
        let _ = held.resume();
        return Ok(());
    }
    let (io, pid) = match fault {
        Fault::DiskFull => (
            cutpoint::IoFault::Enospc,
            Some((held.hit.pid, Instant::now())),
        ),
        Fault::CorruptRead => (cutpoint::IoFault::Corrupt, None),
        _ => (cutpoint::IoFault::Eio, None),
    };
    // Only a full disk sets it: a read fault applied while the disk is
    // full must not forget it, or the runner is never restarted with the
    // disk back and its tasks stay running (a generated program of two
    // tasks, seed 2: `disk-full` then `fail-read` at once).
    if pid.is_some() {
        side.matcher().disk_full = pid;
    }
    side.act(
        ActionKind::Fault(fault),
        match io.errno() {
            Some(_) => json!({ "point": held.hit.point, "errno": io.as_str() }),
            // A corrupt read has no errno: the reply says what it was.
            None => json!({ "point": held.hit.point, "reply": io.reply() }),
        },
    );
    replied(held.fail(io))
}

/// An error answer: the held hit, where its process received a request, is
/// answered `answer <fault>` and the process answers that request with the
/// fault's error (`wire::upstream`). At a point that answers nothing it is
/// recorded as `fault.not-an-answer` and the hit goes on.
fn apply_answer(side: &CutSide, fault: Fault, held: cutpoint::HeldHit) -> Result<(), NotApplied> {
    if !fault.applies_at(&held.hit.point) {
        side.act(
            ActionKind::NotAnAnswer,
            json!({ "fault": fault.as_str(), "point": held.hit.point }),
        );
        let _ = held.resume();
        return Ok(());
    }
    side.act(
        ActionKind::Fault(fault),
        json!({ "point": held.hit.point, "role": held.hit.role, "pid": held.hit.pid }),
    );
    replied(held.answer(fault.as_str()))
}

/// A turn-active follow-up's sync point, reached while the controller side wants
/// it: the runner is held while the controller side sends the follow-up. The
/// follow-up's own request passes cut points too, so unless this hit is
/// also the next event, the hold waits on a thread of its own and the cut
/// loop keeps answering (`None`). When it is the next event, the loop
/// holds it until the follow-up is answered, or until a later event is
/// matched meanwhile: the follow-up's own request reached that event's
/// point (its write, say) and waits on this loop, which applies the events
/// in the order they were matched, this one first. (Waiting for the answer
/// there held both sides until the cell's deadline, and the runner was
/// charged with what the harness left running.)
fn hold_for_sync(ctx: &Ctx, held: cutpoint::HeldHit, is_armed: bool) -> Option<cutpoint::HeldHit> {
    let until = Instant::now() + Duration::from_millis(ctx.env.wait_ms);
    if !is_armed {
        let board = Arc::clone(&ctx.board);
        std::thread::spawn(move || {
            board.wait_until(until, |s| !s.sync_wanted);
            let _ = held.resume();
        });
        return None;
    }
    let matched = ctx.board.read(|s| s.stage);
    ctx.board
        .wait_until(until, |s| !s.sync_wanted || s.stage > matched);
    Some(held)
}

/// Appends where event `stage` was applied to the cut-point trace, so that
/// discovery can tell the hits of recovery from those before the event.
fn mark_trace(side: &CutSide, stage: usize) {
    let Some(path) = &side.ctx.setup.trace else {
        return;
    };
    let mut line = json!({ "role": "turncut", "pid": std::process::id(), "point": EVENT_MARK, "n": stage + 1 });
    super::doomed::mark(&mut line, &side.matcher().doomed);
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    if let Err(e) = appended {
        side.act(ActionKind::TraceError, json!({ "error": e.to_string() }));
    }
}

/// Applies a process, storage ([`apply_storage`]) or power fault at the
/// held hit, by its class; a controller action is sent by the caller.
fn apply_fault(
    side: &CutSide,
    report: &mut CutReport,
    fault: Fault,
    held: cutpoint::HeldHit,
    runner_held: bool,
) -> Result<(), NotApplied> {
    let client = side.ctx.board.client().map(|(c, _)| c);
    // A runner stopped at the match cannot answer: no read, no check.
    let reader = client.as_ref().filter(|_| !runner_held);
    if let Some(evs) = read_before_fault(&side.ctx.setup.tasks, reader, &held.hit) {
        report.events_before = Some(evs);
    }
    if fault == Fault::PowerCut {
        report.events_before_cut = report.events_before.clone();
    }
    match fault.class() {
        FaultClass::Storage => apply_storage(side, fault, held),
        FaultClass::Power => Ok(super::power::cut_power(&side.ctx, report, held)?),
        FaultClass::Process => Ok(apply_signals(side, report, fault, held, client)?),
        FaultClass::Answer => apply_answer(side, fault, held),
        FaultClass::Action => {
            let _ = held.resume();
            Err(anyhow::anyhow!("{fault} is a controller action, not applied by a signal").into())
        }
    }
}

/// The provider a process fault signals: the one whose hit it is, else
/// the runner's live provider; none for a fault that signals no provider.
fn provider_of(
    side: &CutSide,
    hit: &cutpoint::Hit,
    blow: &nemesis::Blow,
    client: Option<&RunnerClient>,
) -> Option<u32> {
    if hit_is_provider(side, hit) {
        Some(hit.pid)
    } else if blow.provider_signal.is_some() {
        client.and_then(|c| live_provider(c, &side.ctx.setup.tasks))
    } else {
        None
    }
}

/// Applies a process fault at the held hit: the nemesis deals its blow
/// (`nemesis::deal`), told where it lands, and this records what it did;
/// then the runner it killed is restarted.
fn apply_signals(
    side: &CutSide,
    report: &mut CutReport,
    fault: Fault,
    held: cutpoint::HeldHit,
    client: Option<RunnerClient>,
) -> anyhow::Result<()> {
    let blow = nemesis::blow(fault);
    let board = &side.ctx.board;
    let hit_role = Role::of(&held.hit.role);
    let aim = nemesis::Aim {
        tag: &side.ctx.setup.tag,
        runner_at_hit: (hit_role == Role::Runner).then_some(held.hit.pid),
        runner_pgid: board.update(|s| s.runner.as_ref().map(|r| r.pid())),
        provider: provider_of(side, &held.hit, &blow, client.as_ref()),
    };
    let take_runner = || board.update(|s| s.runner.take());
    nemesis::deal(blow, aim, take_runner, |dealt| {
        record_dealt(side, fault, dealt)
    })?;
    if blow.kill_runner && blow.provider_signal.is_none() && hit_role == Role::Provider {
        // The provider stays busy at its cut while the runner restarts: the
        // restarted runner must stop it (old provider first). Released only at
        // teardown, after the survivors are counted, so a runner that skips
        // the stop leaves a live orphan for the hygiene oracle.
        report.holds.push(held.hold_forever());
    } else {
        // A runner hit goes on; a killed or stopped provider never reads it.
        let _ = held.resume();
    }
    if blow.kill_runner {
        restart_after_fault(&side.ctx)?;
    }
    Ok(())
}

/// Records a step of a process fault the nemesis dealt.
fn record_dealt(side: &CutSide, fault: Fault, dealt: nemesis::Dealt) {
    match dealt {
        nemesis::Dealt::Frozen { pids, forks_left } => {
            let mut data = json!({ "pids": pids });
            if !forks_left.is_empty() {
                // A fork of the runner not yet exec'ed: the runner's, left to exec.
                data["runner_forks_left"] = json!(forks_left);
            }
            side.act(ActionKind::FreezeProviders, data);
        }
        nemesis::Dealt::RunnerKilled { pid } => {
            side.act(ActionKind::Fault(Fault::KillRunner), json!({ "pid": pid }));
        }
        nemesis::Dealt::ProviderSignalled {
            pid,
            target,
            signal,
        } => {
            // The group's leader (acpx's queue owner) is a provider the runner
            // may name too: `timing` counts both as faulted.
            let pgid = match target {
                nemesis::Target::Group(g) => Some(g),
                _ => None,
            };
            side.act(
                ActionKind::Fault(fault),
                json!({ "provider_pid": pid, "provider_pgid": pgid, "signal": signal.as_str(), "target": format!("{target:?}") }),
            );
        }
        nemesis::Dealt::NoProvider => {
            side.act(ActionKind::NoProvider, json!({ "fault": fault.as_str() }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_of_the_held_runner_at_a_provider_s_hit_does_not_need_that_provider() {
        // The native runner stopped the model API after its last answer,
        // before the harness came to the hit: the runner is still there.
        assert!(!aims_at(Fault::KillRunner, Role::Model, true));
        assert!(!aims_at(Fault::KillRunner, Role::Provider, true));
        // A provider fault needs the provider it was matched at.
        assert!(aims_at(Fault::KillProvider, Role::Model, true));
        assert!(aims_at(Fault::HangProvider, Role::Provider, true));
        assert!(aims_at(Fault::KillBoth, Role::Provider, true));
        // Anything at a runner's hit needs that runner (a write a dying
        // runner had in flight is not the restarted runner's).
        assert!(aims_at(Fault::KillRunner, Role::Runner, false));
        assert!(aims_at(Fault::FailWrite, Role::Runner, false));
        // A runner not held at the match went on: the moment is gone.
        assert!(aims_at(Fault::KillRunner, Role::Provider, false));
        // An action goes to the runner's API, wherever a provider was;
        // at a runner's hit, to that runner.
        for role in [Role::Provider, Role::Model] {
            assert!(!aims_at(Fault::FollowUp, role, false));
            assert!(!aims_at(Fault::Retry, role, false));
        }
        assert!(aims_at(Fault::FollowUp, Role::Runner, false));
    }

    /// A reply written to a held hit whose process has exited fails with
    /// a broken pipe: the event was not applied (the cell goes back to
    /// waiting for it), which is no harness error; any other failure is.
    #[test]
    fn a_reply_to_a_hit_whose_process_exited_is_a_closed_hold() {
        use std::io::Write as _;
        let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(theirs);
        let closed = replied(ours.write_all(b"answer auth-expired\n"));
        assert!(
            matches!(closed, Err(NotApplied::HoldClosed(_))),
            "{closed:?}"
        );
        let other = replied(Err(std::io::Error::other("kill failed")));
        assert!(matches!(other, Err(NotApplied::Failed(_))), "{other:?}");
        assert!(replied(Ok(())).is_ok());
    }
}
