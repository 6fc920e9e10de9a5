//! Running planned cells and reporting them: the wave result, `cells/t###/`
//! for every cell that did not pass, then the wave's end on the progress
//! stream, which the command's reporters show and store (the console's
//! outcome, the report files and `$GITHUB_STEP_SUMMARY`: `harness::report`).
//! Shared by `run`, `wave`, `explore` and `report merge`.

use std::path::Path;
use std::time::Instant;

use harness::cell::CellEnv;
use harness::model::{CellSpec, WaveResult};
use harness::progress::{Progress, ProgressEvent, Timelines};
use harness::{report, scenario, wave};

use super::{Code, Exit, harness_err};

/// Removes the `cells/` of an earlier report in `out` (a wave id is the
/// same for the same seed, so `reports/out/<wave-id>` is written again):
/// a cell that failed then and passes now must not keep its old directory.
pub(super) fn clear_old_cells(out: &Path) -> Result<(), Exit> {
    let cells = out.join("cells");
    if !out.join(report::WAVE_JSON).is_file() || !cells.is_dir() {
        return Ok(());
    }
    std::fs::remove_dir_all(&cells)
        .map_err(|e| harness_err(format!("removing the old {}: {e}", cells.display())))
}

/// The reporters that store a wave in `out`: the report files, and the
/// step summary on GitHub Actions.
pub(super) fn store_reporters(progress: &Progress, out: &Path) {
    progress.add(Box::new(report::ReportDir::new(out)));
    if let Some(step) = report::StepSummary::from_env() {
        progress.add(Box::new(step));
    }
}

/// Writes the report files of `wave` into `out` outside any command's
/// stream (`explore`'s two cells, `report merge`): through the same
/// reporters, on their own.
pub(super) fn store_wave(out: &Path, wave: &WaveResult, timelines: &Timelines) -> Result<(), Exit> {
    let progress = Progress::default();
    store_reporters(&progress, out);
    progress.emit(ProgressEvent::WaveFinished { wave, timelines });
    progress.finish().map_err(harness_err)
}

/// The report of cells run outside a wave's stream (`explore`'s original
/// and minimal cells): `cells/t###/` and the report files.
pub(super) fn write_reports(
    env: &CellEnv,
    out: &Path,
    result: &WaveResult,
    finished: &[wave::Finished],
) -> Result<(), Exit> {
    write_cells(env, out, finished)?;
    store_wave(out, result, &timelines(finished))?;
    env.progress.note(&format!("reports in {}", out.display()));
    Ok(())
}

/// Cells to run and how to report them.
pub(super) struct Job<'a> {
    pub env: &'a CellEnv,
    pub scenarios: &'a [scenario::Scenario],
    pub cells: Vec<CellSpec>,
    pub planned: usize,
    pub jobs: usize,
    pub seed: u64,
    pub shard: Option<(u32, u32)>,
    pub out: Option<&'a Path>,
    pub wave_id: String,
    pub max_fail: usize,
    /// Scenario ids that could not run here.
    pub skipped: Vec<harness::model::Skipped>,
    /// The recovery cuts of the paths the cells walk (stage 2), if any.
    pub stage2: Option<harness::recuts::Stage2>,
    /// Planning runs the runner failed, judged like cells.
    pub judged: Vec<harness::model::CellResult>,
    /// Which stages of the plan run.
    pub stages: harness::model::Stages,
}

/// Runs the job's cells, writes the reports (with `out`) and prints the
/// outcome; the exit code is 1 when a cell did not pass or did not run.
pub(super) fn run_and_report(job: &Job<'_>) -> Result<Code, Exit> {
    let started = Instant::now();
    let max_fail = (job.max_fail > 0).then_some(job.max_fail);
    wave::install_interrupt_handler();
    let (cells, no_fuse) = wave::split_power_cut(job.cells.clone());
    note_skipped(&job.env.progress, &no_fuse);
    let stages = harness::stages::run_stages(
        job.env,
        job.scenarios,
        &cells,
        job.jobs,
        max_fail.map(wave::StopAfter::NotPassing),
        job.stage2,
    );
    let mut finished = stages.finished;
    finished.extend(job.judged.iter().map(|r| wave::Finished {
        result: r.clone(),
        evidence: None,
        timeline: String::new(),
        kept: None,
    }));
    let planned = (job.planned + stages.stage2_planned + job.judged.len())
        .saturating_sub(no_fuse.len())
        .max(finished.len());
    let stopped = wave::stop_reason(planned, &finished, max_fail);
    let result = wave::wave_result(
        &wave::WaveMeta {
            wave_id: job.wave_id.clone(),
            seed: job.seed,
            shard: job.shard,
            jobs: job.jobs,
            run: harness::cell::run_config(job.env, job.scenarios),
            skipped: job.skipped.iter().cloned().chain(no_fuse).collect(),
            stages: job.stages,
        },
        started,
        &finished,
        planned,
        stopped,
    );
    let progress = &job.env.progress;
    if let Some(out) = job.out {
        write_cells(job.env, out, &finished)?;
        store_reporters(progress, out);
        progress.note(&format!("reports in {}", out.display()));
    }
    note_kept(progress, job.out, &finished);
    progress.emit(ProgressEvent::WaveFinished {
        wave: &result,
        timelines: &timelines(&finished),
    });
    progress.finish().map_err(harness_err)?;
    let whole = result.not_run == 0 && result.stopped.is_none();
    Ok(Code::of(result.verdict()).max(Code::pass_if(whole)))
}

/// One progress note per reason cells or scenarios are skipped for, with
/// the count: a reason that skips 184 cells is said once, not 184 times.
pub(super) fn note_skipped(progress: &Progress, skipped: &[harness::model::Skipped]) {
    for (reason, ids) in report::skipped_by_reason(skipped) {
        progress.note(&format!("skipping {}: {reason}", ids.len()));
    }
}

/// Each finished cell's timeline, for the reports.
pub(super) fn timelines(finished: &[wave::Finished]) -> Timelines {
    finished
        .iter()
        .filter(|f| !f.timeline.is_empty())
        .map(|f| (f.result.spec.cell_id.clone(), f.timeline.clone()))
        .collect()
}

/// `cells/t###/` (evidence, timeline, reproduce.sh) for every cell that did
/// not pass or was kept (`--keep`: with a `kept` link to the cell's
/// directory), after those of an earlier report in `out` are gone; the
/// stream does not carry the evidence, so the command writes them.
pub(super) fn write_cells(
    env: &CellEnv,
    out: &Path,
    finished: &[wave::Finished],
) -> Result<(), Exit> {
    clear_old_cells(out)?;
    for f in finished {
        let Some(ev) = &f.evidence else { continue };
        let dir = out.join("cells").join(&f.result.spec.cell_id);
        let write = || -> std::io::Result<()> {
            ev.write(&dir)?;
            if let Some(kept) = &f.kept {
                let link = dir.join(KEPT_LINK);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(kept, link)?;
            }
            std::fs::write(dir.join("timeline.txt"), &f.timeline)?;
            let script = dir.join("reproduce.sh");
            std::fs::write(&script, harness::cell::reproduce_script(env, &f.result))?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        };
        write().map_err(|e| harness_err(format!("failed to write {}: {e}", dir.display())))?;
    }
    Ok(())
}

/// The name, inside a report's `cells/t###/`, of the link to the cell's
/// kept directory (`--keep`).
const KEPT_LINK: &str = "kept";

/// How many kept cells are named one per line; more are counted.
const KEPT_LINES_MAX: usize = 20;

/// Says where `--keep` left each cell: its `cells/t###/` in the report
/// (which `turncut judge` reads, with the `kept` link to the directory), or
/// the directory itself without `--out` (it holds `evidence.json` too).
fn note_kept(progress: &Progress, out: Option<&Path>, finished: &[wave::Finished]) {
    let kept: Vec<(&str, &Path)> = finished
        .iter()
        .filter_map(|f| Some((f.result.spec.cell_id.as_str(), f.kept.as_deref()?)))
        .collect();
    for (id, dir) in kept.iter().take(KEPT_LINES_MAX) {
        let line = match out {
            Some(out) => format!(
                "kept {id}: {} (its directory: {}; turncut judge {0})",
                out.join("cells").join(id).display(),
                dir.display()
            ),
            None => format!("kept {id}: {} (turncut judge {0})", dir.display()),
        };
        progress.note(&line);
    }
    if kept.len() > KEPT_LINES_MAX {
        let place = match out {
            Some(out) => format!("{}/cells/t###/{KEPT_LINK}", out.display()),
            None => format!("{}/turncut-cell-*", harness::tempdirs::root().display()),
        };
        progress.note(&format!(
            "…and {} more kept cells, in {place}",
            kept.len() - KEPT_LINES_MAX
        ));
    }
}
