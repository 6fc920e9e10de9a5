//! The end of a cell: the final task and run log read from the last runner,
//! every process of the cell killed (those still alive recorded as
//! survivors), then the provider's evidence read once nothing writes it
//! any more, and the canary searched for in every file.

use std::path::Path;

use super::board::{CutReport, PerTask};
use super::reads::workspace_files;
use super::{Cell, Ctx, Layout};
use crate::evidence::{ActionKind, Evidence, Op, OpKind, Source, TaskRead, Unreadable};
use crate::nemesis;
use crate::run_log::{Data, ProviderSpawned, RunLogEvent};

/// Ends the cell: the final runner reads, the cut side joined (it hands
/// back what it owned), the runner and every other process of the cell
/// killed, then the provider's evidence and the canary search.
pub(super) fn teardown(ctx: &Ctx, mut cell: Cell, ev: &mut Evidence) {
    read_runner_settled(ctx, ev);
    ctx.board.update(|s| s.stop = true);
    if let Some(w) = &cell.waker {
        w.wake();
    }
    let mut report = match cell.cut_side.take().map(std::thread::JoinHandle::join) {
        Some(Ok(report)) => report,
        Some(Err(_)) => {
            ev.harness_error
                .get_or_insert_with(|| "the cell's cut side panicked".into());
            CutReport::default()
        }
        // Set-up failed before the cut side started: the mounts are here.
        None => CutReport {
            lazy: std::mem::take(&mut cell.lazy),
            ..CutReport::default()
        },
    };
    if let Some(r) = ctx.board.update(|s| s.runner.take()) {
        let _ = nemesis::kill_runner(r);
    }
    (ev.reached_cut, ev.events_applied) = ctx.board.read(|s| (s.stage > 0, s.applied));
    ev.cut_role = report.cut_role;
    put_cut_report(ev, &mut report);
    // The journal as it is now names the commands to look for; the evidence
    // itself is read below, once every process of the cell is dead.
    let layout = &ctx.layout;
    let early = wire::journal::read(&layout.p("journal.jsonl")).unwrap_or_default();
    if let Err(e) = std::fs::read_to_string("/proc/self/stat") {
        ev.unreadable(Source::Processes, format!("/proc/self/stat: {e}"));
    }
    // A real product's model API serves the whole cell and ends with it.
    let model_url = cell.real.as_ref().map(|r| r.model_api.url.clone());
    let product = cell.real.take().map(|r| {
        r.model_api.stop();
        r.product
    });
    cell.got.drain(&cell.records);
    kill_survivors(layout, &cell.got.processes, &early, ev);
    report.holds.clear();
    read_provider_evidence(&layout.dir, ev);
    for task in &ctx.setup.tasks {
        read_workspace(&ctx.workspace(task), ev, task);
    }
    if let (Some(product), Some(url)) = (product, model_url) {
        name_real_effects(&layout.p("model-journal.jsonl"), ev);
        read_real_turns(&product, &url, &ctx.workspace(ctx.first_task()), ev);
    }
    search_canary(&layout.dir, ev);
    super::power::unmount_disks(ctx, std::mem::take(&mut report.lazy));
    cell.got.drain(&cell.records);
    ev.actions = std::mem::take(&mut cell.got.actions);
    for (exchange, ops) in cell.got.injected.drain(..) {
        ev.exchanges.push(exchange);
        ev.ops.extend(ops);
    }
}

/// Every process the cell knew of (the runners and hits recorded as
/// `seen`, the providers the run log names, the commands the journal
/// `early` names) and every process that still carries the cell's tag is
/// recorded as a survivor if alive, then killed: the cell must not leave
/// orphans behind.
fn kill_survivors(
    layout: &Layout,
    seen: &[(String, u32, Option<u64>)],
    early: &[wire::journal::Entry],
    ev: &mut Evidence,
) {
    // Every process the cell knew of must be gone now that the runner is.
    let mut known = seen.to_vec();
    for (_, s) in ev.payloads::<ProviderSpawned>() {
        known.push(("provider".into(), s.pid as u32, s.start_time));
    }
    for e in ev.other_tasks.iter().flat_map(|l| &l.events) {
        if let Data::ProviderSpawned(s) = &e.data {
            known.push(("provider".into(), s.pid as u32, s.start_time));
        }
    }
    // Commands a fake Codex ran in sessions of their own outlive its
    // process group; the runner's stop must have ended them too.
    for e in early {
        if e.fact.as_deref() == Some("effect.spawned")
            && let Some(pid) = e.data["pid"].as_u64()
        {
            known.push(("command".into(), pid as u32, e.data["start_time"].as_u64()));
        }
    }
    known.sort();
    known.dedup();
    for (role, pid, start) in &known {
        if nemesis::alive_same(*pid, *start) {
            ev.survivors.push(format!("{role} pid {pid}"));
            // Record, then clean up: the cell must not leave orphans behind.
            let _ = nemesis::signal_group(*pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    // Whatever still carries the cell's tag was started under the runner and
    // never stopped (a provider's child in a session of its own, say).
    for (pid, cmdline) in nemesis::tagged_processes(&layout.dir.display().to_string()) {
        if !known.iter().any(|(_, p, _)| *p == pid) {
            ev.survivors.push(format!("pid {pid} ({cmdline})"));
            let _ = nemesis::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Every file of the workspace `ws` (through the lazy mount of a power-cut
/// cell: what survived the cut and whatever recovery wrote after it).
fn read_workspace(ws: &Path, ev: &mut Evidence, task: &str) {
    let (read, gaps) = workspace_files(ws);
    let root = ws.display().to_string();
    let gaps = gaps.into_iter().map(|reason| Unreadable {
        source: Source::Workspace,
        reason,
    });
    match ev.lane_mut(task) {
        Some(lane) => {
            (lane.workspace_root, lane.workspace) = (root, Some(read));
            lane.unreadable.extend(gaps);
        }
        None => {
            (ev.workspace_root, ev.workspace) = (root, Some(read));
            ev.unreadable.extend(gaps);
        }
    }
}

/// What the cut side read of each task before its faults, in each task's
/// place.
fn put_cut_report(ev: &mut Evidence, report: &mut CutReport) {
    let events = |r: Option<PerTask<Vec<serde_json::Value>>>| -> PerTask<Vec<RunLogEvent>> {
        r.unwrap_or_default()
            .into_iter()
            .map(|(t, evs)| (t, RunLogEvent::read_all(evs)))
            .collect()
    };
    for (task, evs) in events(report.events_before.take()) {
        match ev.lane_mut(&task) {
            Some(lane) => lane.events_before_fault = Some(evs),
            None => ev.events_before_fault = Some(evs),
        }
    }
    for (task, evs) in events(report.events_before_cut.take()) {
        match ev.lane_mut(&task) {
            Some(lane) => lane.events_before_power_cut = Some(evs),
            None => ev.events_before_power_cut = Some(evs),
        }
    }
    for (task, files) in report.workspace_after_cut.take().unwrap_or_default() {
        match ev.lane_mut(&task) {
            Some(lane) => lane.workspace_after_cut = Some(files),
            None => ev.workspace_after_cut = Some(files),
        }
    }
}

/// The runner's message ids of the effects a real product's tools ran
/// under ids its model API derived ([`crate::real::name_effects`]).
fn name_real_effects(model_journal: &Path, ev: &mut Evidence) {
    match wire::journal::read(model_journal) {
        Ok(model) => {
            crate::real::name_effects(&mut ev.ledger, &model, &ev.journal);
            for l in &mut ev.ledger {
                l.by = crate::evidence::controller_id(&l.by);
            }
            ev.model_journal = model;
        }
        Err(e) => ev.unreadable(Source::Journal, format!("{}: {e}", model_journal.display())),
    }
}

/// A real product's turns, read through its own API from its home (the
/// fakes' stores are empty in its cell).
fn read_real_turns(product: &crate::real::Product, model_url: &str, ws: &Path, ev: &mut Evidence) {
    match product.recorded_turns(model_url, ws, READ_REAL_WITHIN, &ev.journal) {
        Ok(turns) => {
            ev.provider_turns = turns
                .into_iter()
                .map(|mut t| {
                    t.client_id = t.client_id.as_deref().map(crate::evidence::controller_id);
                    t.authorized_by = crate::evidence::controller_id(&t.authorized_by);
                    t
                })
                .collect()
        }
        Err(e) => ev.unreadable(
            Source::ProviderStore,
            format!("{} ({}): {e}", product.real.name, product.bin.display()),
        ),
    }
}

/// How long reading a real product's state back may take (it starts a
/// fresh server on its home).
const READ_REAL_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Records every file under the cell directory `dir` that holds the
/// canary (it must be nowhere), and every file that could not be read.
fn search_canary(dir: &Path, ev: &mut Evidence) {
    let (files, problems) = crate::runner_client::walk_files(dir);
    for p in problems {
        ev.unreadable(Source::Files, p);
    }
    for file in files {
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            // A socket or a file removed while the cell ended is no gap.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                ev.unreadable(Source::Files, format!("{}: {e}", file.display()));
                continue;
            }
        };
        if memchr::memmem::find(&bytes, ev.canary.as_bytes()).is_some() {
            let rel = file.strip_prefix(dir).unwrap_or(&file);
            ev.canary_found_in.push(rel.display().to_string());
        }
    }
}

/// How many times the final reads are made again because an event was
/// matched while they were made.
const READS_AGAIN_MAX: usize = 3;

/// The schedule's state as the final reads see it: events matched and
/// applied, and the runner's generation.
fn schedule_state(ctx: &Ctx) -> (usize, usize, u64) {
    ctx.board.read(|s| (s.stage, s.applied, s.generation))
}

/// [`read_runner`], made again when an event of the schedule was matched
/// while it read: a later event at a boundary after the write that settled
/// the task (`runner.run_settled.persisted`, a kill of the runner) comes
/// in after the quiet phase saw the task settled, and the reads then
/// describe a runner the event killed meanwhile (under `--stress 8` the run
/// log read failed with "connection reset" and the cell came out
/// `unknown`). The reads are made again once the event is applied and the
/// task has settled with the runner now running (each time said in the
/// actions), never passed over. An event matched before the reads whose
/// fault is still being applied is waited for first: its application could
/// outlast both reads and leave the state they compare unchanged.
fn read_runner_settled(ctx: &Ctx, ev: &mut Evidence) {
    for _ in 0..READS_AGAIN_MAX {
        if ctx.board.read(|s| s.applied < s.stage) {
            ctx.rec.act(
                ActionKind::ReadWait,
                serde_json::json!({ "why": "an event matched before the final reads is still being applied" }),
            );
            super::settle_after_late_event(ctx);
        }
        let before = schedule_state(ctx);
        let (ops, unreadable) = (ev.ops.len(), ev.unreadable.len());
        read_runner(ctx, ev);
        if schedule_state(ctx) == before {
            return;
        }
        ctx.rec.act(
            ActionKind::ReadAgain,
            serde_json::json!({ "why": "an event was matched while the runner was read" }),
        );
        ev.ops.truncate(ops);
        ev.unreadable.truncate(unreadable);
        super::settle_after_late_event(ctx);
    }
    read_runner(ctx, ev);
}

/// The final task view and run log of every task, read at the end of the
/// cell, each whole or recorded as unreadable (a view from an earlier wait
/// does not stand in for a failed final read).
fn read_runner(ctx: &Ctx, ev: &mut Evidence) {
    let client = ctx.board.client().map(|(c, _)| c);
    for task in &ctx.setup.tasks {
        let read = match &client {
            Some(client) => read_task(ctx, client, task, &mut ev.ops),
            None => TaskEnd::unread("no runner was running at the end of the cell"),
        };
        read.put(ev, task);
    }
}

/// One task's final reads.
struct TaskEnd {
    task: Option<TaskRead>,
    events: Option<Vec<RunLogEvent>>,
    unreadable: Vec<Unreadable>,
}

impl TaskEnd {
    /// Nothing read, for `why`.
    fn unread(why: &str) -> TaskEnd {
        TaskEnd {
            task: None,
            events: None,
            unreadable: [Source::Task, Source::RunLog]
                .map(|source| Unreadable {
                    source,
                    reason: why.to_owned(),
                })
                .into(),
        }
    }

    /// Puts the reads in task `task`'s place: the evidence's own for the
    /// first task, its lane for another (a lane's earlier gaps of these
    /// sources replaced: the reads may be made again).
    fn put(self, ev: &mut Evidence, task: &str) {
        match ev.lane_mut(task) {
            Some(lane) => {
                lane.unreadable
                    .retain(|u| !matches!(u.source, Source::Task | Source::RunLog));
                lane.task = self.task.or(lane.task.take());
                lane.events = self.events.unwrap_or(std::mem::take(&mut lane.events));
                lane.unreadable.extend(self.unreadable);
            }
            None => {
                ev.task = self.task.or(ev.task.take());
                ev.events = self.events.unwrap_or(std::mem::take(&mut ev.events));
                ev.unreadable.extend(self.unreadable);
            }
        }
    }
}

/// Task `task`'s final view and run log from `client`, each read recorded
/// as an op.
fn read_task(
    ctx: &Ctx,
    client: &crate::runner_client::RunnerClient,
    task: &str,
    ops: &mut Vec<Op>,
) -> TaskEnd {
    let mut end = TaskEnd {
        task: None,
        events: None,
        unreadable: Vec::new(),
    };
    let mut gap = |source, reason| end.unreadable.push(Unreadable { source, reason });
    let at_ms = ctx.rec.now_ms();
    let view = client.task(task);
    ops.push(Op::of(OpKind::ReadTask, "", at_ms, &view));
    match view {
        Ok((200, t)) => end.task = Some(TaskRead::read(t)),
        Ok((status, body)) => gap(Source::Task, format!("GET task answered {status}: {body}")),
        Err(e) => gap(Source::Task, format!("GET task: {e:#}")),
    }
    let at_ms = ctx.rec.now_ms();
    let events = client.events(task, 0).map(|evs| (200, evs));
    ops.push(Op::of(OpKind::ReadEvents, "", at_ms, &events));
    match events {
        Ok((_, evs)) => end.events = Some(RunLogEvent::read_all(evs)),
        Err(e) => gap(Source::RunLog, format!("GET events: {e:#}")),
    }
    end
}

/// The provider's journal, the effect ledger and every fake's store under
/// the cell directory `dir`, each read whole or recorded as unreadable.
pub fn read_provider_evidence(dir: &Path, ev: &mut Evidence) {
    match wire::journal::read(&dir.join("journal.jsonl")) {
        Ok(j) => ev.journal = j,
        Err(e) => ev.unreadable(Source::Journal, e.to_string()),
    }
    match wire::ledger::read(&dir.join("ledger.jsonl")) {
        Ok(l) => ev.ledger = l,
        Err(e) => ev.unreadable(Source::Ledger, e.to_string()),
    }
    for l in &mut ev.ledger {
        l.by = crate::evidence::controller_id(&l.by);
    }
    let (turns, problems) = crate::evidence::read_provider_turns(&dir.join("state/providers"));
    ev.provider_turns = turns;
    for p in problems {
        ev.unreadable(Source::ProviderStore, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell directory with a journal, a ledger and a Codex store, each
    /// whole; `break_it` then damages one.
    fn read_with(break_it: impl Fn(&Path)) -> Evidence {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("journal.jsonl"), "").unwrap();
        std::fs::write(d.join("ledger.jsonl"), "").unwrap();
        let threads = d.join("state/providers/p1/threads");
        std::fs::create_dir_all(&threads).unwrap();
        std::fs::write(threads.join("th.json"), "{}").unwrap();
        break_it(d);
        let mut ev = Evidence::default();
        read_provider_evidence(d, &mut ev);
        ev
    }

    fn sources(ev: &Evidence) -> Vec<Source> {
        ev.unreadable.iter().map(|u| u.source).collect()
    }

    #[test]
    fn provider_evidence_is_read_whole_or_recorded_as_unreadable() {
        assert_eq!(sources(&read_with(|_| {})), vec![]);
        // A torn line inside the journal (a line in flight at the end is not
        // yet part of it; see `journal::read`).
        let torn =
            read_with(|d| std::fs::write(d.join("journal.jsonl"), "{\"v\":1,\"gen\n").unwrap());
        assert_eq!(sources(&torn), vec![Source::Journal]);
        let ledger = read_with(|d| {
            std::fs::remove_file(d.join("ledger.jsonl")).unwrap();
            std::fs::create_dir(d.join("ledger.jsonl")).unwrap();
        });
        assert_eq!(sources(&ledger), vec![Source::Ledger]);
        let store = read_with(|d| {
            std::fs::write(d.join("state/providers/p1/threads/th.json"), "{\"id\":").unwrap()
        });
        assert_eq!(sources(&store), vec![Source::ProviderStore]);
        assert!(
            store.unreadable[0].reason.contains("th.json"),
            "{:?}",
            store.unreadable
        );
    }

    /// The canary anywhere in any file under the cell directory, at its
    /// start, its end or across a 4 KiB boundary, is found; a file with only
    /// part of it is not.
    #[test]
    fn the_canary_is_found_in_any_file_and_only_whole() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let canary = "turncut-canary-00000000000000ab";
        std::fs::create_dir_all(d.join("state/providers")).unwrap();
        let mut across = vec![b'x'; 4096 - 10];
        across.extend_from_slice(canary.as_bytes());
        std::fs::write(d.join("state/providers/store.bin"), &across).unwrap();
        std::fs::write(d.join("start.log"), format!("{canary} at the start")).unwrap();
        std::fs::write(d.join("part.log"), &canary[..canary.len() - 1]).unwrap();
        let mut ev = Evidence {
            canary: canary.to_owned(),
            ..Evidence::default()
        };
        search_canary(d, &mut ev);
        ev.canary_found_in.sort();
        assert_eq!(
            ev.canary_found_in,
            ["start.log", "state/providers/store.bin"]
        );
    }
}
