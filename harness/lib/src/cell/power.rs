//! The power cut of a cell (`power-cut`): the cell's disks on lazy mounts
//! (`mount_disks`), and the cut itself (`cut_power`): every process of the
//! cell frozen and SIGKILLed (`nemesis::power_loss`), every write not
//! yet durable dropped, the runner started again on what survived.
//!
//! Only a cell whose schedule holds a `power-cut` mounts anything: the
//! runner's state directory (with the providers' directories inside it,
//! `state/providers/…`) and the workspace each sit on a lazy mount whose
//! backing directory is `disk/state`, `disk/ws`; every other cell keeps
//! plain directories, so its cost does not change. The journal, the effect
//! ledger, the cut socket and the trace stay off the mounts: they are the
//! world's record, not the machine's disk. A cell that cannot mount fails
//! with a harness error (`unknown`, never a pass); the wave lists power-cut
//! cells as skipped where FUSE is unavailable before any runs.

use std::time::{Duration, Instant};

use serde_json::json;

use super::board::CutReport;
use super::{Ctx, restart_after_fault};
use crate::evidence::ActionKind;
use crate::model::{Event, Fault};
use crate::nemesis;

/// The cell directories that sit on lazy mounts in a power-cut cell.
pub const ON_LAZY_MOUNTS: [&str; 2] = ["state", "ws"];

/// Where the backing directories of a cell's lazy mounts are (under the
/// cell directory): `disk/state`, `disk/ws`. A kept cell's state is there
/// once the mounts are gone.
pub const BACKING_DIR: &str = "disk";

/// How many changed paths a `fault.power-cut` action names (the count is
/// always whole).
const CHANGES_LISTED_MAX: usize = 20;

/// Whether the schedule cuts the power anywhere.
pub fn needs_lazy_mounts(events: &[Event]) -> bool {
    events.iter().any(|e| e.fault == Fault::PowerCut)
}

/// Mounts the cell's state directory and workspace on lazy mounts (see the
/// module doc); they are unmounted at teardown ([`unmount_disks`]).
pub(super) fn mount_disks(ctx: &Ctx) -> anyhow::Result<Vec<lazyfs::LazyFs>> {
    if let Some(why) = lazyfs::unavailable() {
        anyhow::bail!("a power-cut cell needs FUSE: {why}");
    }
    let layout = &ctx.layout;
    let mut mounts = Vec::new();
    for name in ON_LAZY_MOUNTS {
        let backing = layout.p(BACKING_DIR).join(name);
        std::fs::create_dir_all(&backing)?;
        std::fs::create_dir_all(layout.p(name))?;
        // The guard is this wave's `turncut` exec'd, not a fork of the
        // wave process (`lazyfs::GuardProgram`).
        let guard = lazyfs::GuardProgram::new(&ctx.env.turncut);
        mounts.push(lazyfs::LazyFs::mount_guarded_by(
            &backing,
            &layout.p(name),
            &guard,
        )?);
    }
    ctx.rec
        .act(ActionKind::DisksLazy, json!({ "mounted": ON_LAZY_MOUNTS }));
    Ok(mounts)
}

/// Unmounts the cell's lazy mounts once every process of the cell is dead
/// (lazily if one still holds a file there: it is served until it leaves).
pub(super) fn unmount_disks(ctx: &Ctx, mounts: Vec<lazyfs::LazyFs>) {
    for fs in mounts {
        if let Err(e) = fs.unmount() {
            ctx.rec.act(
                ActionKind::DisksUnmountError,
                json!({ "error": e.to_string() }),
            );
        }
    }
}

/// Applies a `power-cut` at the held hit: every process of the cell is
/// frozen and SIGKILLed, the power is cut on every lazy mount once none is
/// left inside, and the runner starts again on the surviving state (its
/// providers start through it).
pub(super) fn cut_power(
    ctx: &Ctx,
    report: &mut CutReport,
    held: cutpoint::HeldHit,
) -> anyhow::Result<()> {
    let runner = ctx.board.update(|s| s.runner.take());
    let killed = nemesis::power_loss(&ctx.setup.tag, runner)?;
    // The held process is dead; its hit needs no answer.
    drop(held);
    let until = Instant::now() + Duration::from_millis(ctx.env.wait_ms);
    for pid in &killed {
        nemesis::wait_gone(*pid, until);
    }
    // Every process of the cell is dead (or the cut below is refused):
    // whatever a provider journaled before now may be gone from its store.
    let dead_at_epoch_ms = wire::journal::now_ms();
    let mut changed: Vec<String> = Vec::new();
    let mut took_ms = 0;
    {
        let mounts = &mut report.lazy;
        anyhow::ensure!(
            !mounts.is_empty(),
            "power-cut in a cell without lazy mounts (the schedule was read wrong)"
        );
        for fs in mounts.iter_mut() {
            let cut = cut_when_idle(fs, until)?;
            took_ms += cut.took.as_millis() as u64;
            let mount = fs
                .mountpoint()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned());
            changed.extend(cut.changes.iter().map(|c| {
                format!(
                    "{}/{} {:?}",
                    mount.as_deref().unwrap_or("?"),
                    c.path,
                    c.kind
                )
            }));
        }
    }
    // What survived on disk, before the runner can write anything again:
    // `durable.effect` holds it to what the run log said was done before
    // the cut.
    let mut after = Vec::new();
    let mut gaps = Vec::new();
    for task in &ctx.setup.tasks {
        let (files, problems) = super::reads::workspace_files(&ctx.workspace(task));
        after.push((task.clone(), files));
        gaps.extend(problems);
    }
    report.workspace_after_cut = Some(after);
    ctx.rec.act(
        ActionKind::Fault(Fault::PowerCut),
        json!({ "killed": killed, "dead_at_epoch_ms": dead_at_epoch_ms,
                "changes": changed.len(), "took_ms": took_ms, "workspace_unreadable": gaps,
                "changed": changed.iter().take(CHANGES_LISTED_MAX).collect::<Vec<_>>() }),
    );
    restart_after_fault(ctx)
}

/// Cuts the power under `fs` once nothing uses it: a process still inside
/// after the census (a tool command that lost the cell's tag) is one of the
/// cell's (the mount is the cell's own) and is SIGKILLed too.
fn cut_when_idle(fs: &mut lazyfs::LazyFs, until: Instant) -> anyhow::Result<lazyfs::PowerLoss> {
    loop {
        match fs.cut_power() {
            Ok(cut) => return Ok(cut),
            Err(lazyfs::Error::Busy { pids, .. }) if Instant::now() < until => {
                if pids.is_empty() {
                    // Busy without a holder in /proc: a process between its
                    // exit and the release of its last mapping.
                    std::thread::sleep(Duration::from_millis(5));
                }
                nemesis::kill_mount_users(&pids);
                for pid in pids {
                    nemesis::wait_gone(pid, until);
                }
            }
            Err(e) => anyhow::bail!("failed to {e}"),
        }
    }
}
