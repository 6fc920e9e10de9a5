//! `turncut plan --stage2 DIR…`: stage 2 of a wave run in shards, planned
//! once from the stage-1 results of every shard.
//!
//! Stage 2 cuts the recovery of every path the one-cut cells walked
//! (`recuts`), so it follows from the results of all of stage 1: a shard
//! planning it from its own part would miss the paths other shards walked,
//! and shards under different loads would plan different cells. Here the
//! stage-1 reports are joined exactly as `report merge` joins them (every
//! shard once, every cell run) and stage 2 is planned from the whole, as an
//! unsharded wave plans it after its stage 1; its cells then run in shards
//! like any plan's. It does not run a cell itself, only the traced runs of
//! each path's representative.

use std::path::{Path, PathBuf};

use harness::cell::CellEnv;
use harness::model::{Plan, Stages};
use harness::report;
use harness::scenario::Scenario;

use super::wave::{PLAN_IN_REPORT, env_of_plan, read_plan};
use super::{Exit, bad};

/// The stage-2 plan of the stage-1 shards whose report directories are
/// `dirs`: the same wave id, seed and run settings as their plan, the
/// stage-2 cells, [`Stages::Stage2`].
pub(super) fn plan_stage2(
    env: CellEnv,
    scenarios: &mut Vec<Scenario>,
    dirs: &[PathBuf],
    jobs: usize,
) -> Result<Plan, Exit> {
    let (plan, waves) = read_stage1(scenarios, dirs)?;
    let scenarios: &[Scenario] = scenarios;
    let Some(s2) = plan.stage2 else {
        return Err(bad(format!(
            "--stage2: plan {} has no stage 2 (it was planned with --no-recuts or --depth1-only): its shards are the whole wave",
            plan.wave_id
        )));
    };
    let stage1 = report::merge_stage1(waves).map_err(|e| bad(format!("--stage2: {e}")))?;
    if stage1.not_run > 0 || stage1.stopped.is_some() {
        return Err(bad(format!(
            "--stage2: stage 1 of {} did not run every cell ({} not run{}): stage 2 planned from a part of it would not be the wave's; run the shards that stopped again",
            plan.wave_id,
            stage1.not_run,
            stage1
                .stopped
                .as_deref()
                .map(|s| format!("; {s}"))
                .unwrap_or_default()
        )));
    }
    let env = env_of_plan(env, &plan);
    let (cells, _) = harness::recuts::plan_stage2(
        &env,
        scenarios,
        &stage1.cells,
        harness::recuts::Stage2 {
            wave_seed: plan.seed,
            keep_ppm: s2.keep_ppm,
        },
        jobs,
    );
    Ok(Plan {
        selection: format!("{} (stage 2)", plan.selection),
        cells,
        stage2: None,
        skipped: Vec::new(),
        judged: Vec::new(),
        timing_dependent: Vec::new(),
        stages: Stages::Stage2,
        ..plan
    })
}

/// The one plan the stage-1 reports in `dirs` ran (each keeps it as
/// [`PLAN_IN_REPORT`]) and their waves; each must have run stage 1 alone.
fn read_stage1(
    scenarios: &mut Vec<Scenario>,
    dirs: &[PathBuf],
) -> Result<(Plan, Vec<harness::model::WaveResult>), Exit> {
    let mut plan: Option<(Plan, &Path)> = None;
    let mut waves = Vec::new();
    for dir in dirs {
        let file = dir.join(PLAN_IN_REPORT);
        if !file.is_file() {
            return Err(bad(format!(
                "--stage2 {}: no {PLAN_IN_REPORT}: not the report directory of a wave shard (turncut wave --plan PLAN --shard I/N --out DIR)",
                dir.display()
            )));
        }
        let this = read_plan(&file, scenarios)?;
        match &plan {
            Some((first, from)) if *first != this => {
                return Err(bad(format!(
                    "--stage2 {}: ran another plan than {} (give the shards of one plan)",
                    dir.display(),
                    from.display()
                )));
            }
            Some(_) => {}
            None => plan = Some((this, dir)),
        }
        let wave = report::read_wave(&dir.join(report::WAVE_JSON))
            .map_err(|e| bad(format!("--stage2 {}: {e}", dir.display())))?;
        if wave.stages != Stages::Stage1 {
            return Err(bad(format!(
                "--stage2 {}: this wave ran {}, not stage 1 alone (stage 1 is run in shards: turncut wave --plan PLAN --shard I/N)",
                dir.display(),
                match wave.stages {
                    Stages::Stage2 => "stage 2",
                    _ => "both stages",
                }
            )));
        }
        waves.push(wave);
    }
    let (plan, _) = plan.expect("clap requires at least one --stage2 directory");
    Ok((plan, waves))
}
