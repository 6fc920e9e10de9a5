//! `turncut run`: every cell of one scenario id, one cell with `--cut` and
//! `--fault`, or one cell with a `--schedule`.

use std::path::Path;

use harness::cell::CellEnv;
use harness::model::{self, CellSpec, Fault};
use harness::{plan, scenario, wave};

use super::reports::{Job, run_and_report};
use super::{Code, Exit, bad, env_for, harness_err, plan_err, prepare_out, unknown_id};
use crate::{Common, RunArgs};

/// The seed of `turncut run`'s cells: fixed, so a cell id names one cell.
const RUN_SEED: u64 = 0;

/// `turncut run ID [--cut P#N --fault F | --schedule S]`.
pub fn run(exe: &Path, common: &Common, args: RunArgs) -> Result<Code, Exit> {
    let (env, mut scenarios) = env_for(exe, common, None)?;
    let scenario_id = &args.scenario_id;
    harness::workflow::add_wave_program(&mut scenarios, scenario_id);
    let (s, profile) = scenario::find(&scenarios, scenario_id)
        .ok_or_else(|| unknown_id(&scenarios, scenario_id))?;
    if let Some(out) = &args.out {
        prepare_out(out)?;
    }
    let (_, skipped) = wave::split_skipped(vec![scenario_id.clone()], &env.progress);
    for s in &skipped {
        common
            .progress
            .note(&format!("skipped {}: {}", s.scenario_id, s.reason));
    }
    let (cells, judged) = match skipped.is_empty() {
        true => cells_of(&env, &scenarios, s, &profile, &args)?,
        false => (Vec::new(), Vec::new()),
    };
    let planned = cells.len();
    // Every cell of the scenario id: its recovery cuts too.
    let every = args.schedule.is_none() && args.cut.is_none();
    let stage2 = every.then_some(harness::recuts::Stage2 {
        wave_seed: RUN_SEED,
        keep_ppm: None,
    });
    run_and_report(&Job {
        env: &env,
        scenarios: &scenarios,
        cells,
        planned,
        jobs: args.jobs as usize,
        seed: RUN_SEED,
        shard: None,
        out: args.out.as_deref(),
        wave_id: format!("run-{scenario_id}"),
        max_fail: args.max_fail,
        skipped,
        stage2,
        judged,
        stages: harness::model::Stages::Both,
    })
}

/// The cells `turncut run` plays: the one of `--schedule`, the one of
/// `--cut` and `--fault`, or every cell of the scenario id.
fn cells_of(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    s: &scenario::Scenario,
    profile: &str,
    args: &RunArgs,
) -> Result<(Vec<CellSpec>, Vec<harness::model::CellResult>), Exit> {
    let scenario_id = &args.scenario_id;
    let schedule = args
        .schedule
        .as_deref()
        .map(model::parse_schedule)
        .transpose()
        .map_err(|e| bad(format!("--schedule: {e}")))?;
    let cells = match (schedule, &args.cut, &args.fault) {
        (Some(events), _, _) => {
            let d = harness::planner::discover_retrying(env, s, profile)
                .map_err(|e| harness_err(format!("{e:#}")))?;
            plan::check_schedule(&d.boundaries, scenario_id, &events).map_err(bad)?;
            vec![plan::schedule_cell(
                RUN_SEED,
                "t001".into(),
                scenario_id.clone(),
                &events,
            )]
        }
        (None, Some(cut), Some(fault)) => one_cut(env, s, profile, scenario_id, cut, fault)?,
        _ => {
            let p = harness::planner::plan_cells(
                env,
                scenarios,
                std::slice::from_ref(scenario_id),
                RUN_SEED,
                false,
                wave::Reach::default(),
                1,
            )
            .map_err(plan_err)?;
            if let Some(s) = p.not_planned.first() {
                return Err(harness_err(s.reason.clone()));
            }
            return Ok((p.cells, p.judged));
        }
    };
    Ok((cells, Vec::new()))
}

/// The one cell of `--cut` and `--fault`, checked against the boundaries of
/// a clean traced run.
fn one_cut(
    env: &CellEnv,
    s: &scenario::Scenario,
    profile: &str,
    scenario_id: &str,
    cut: &str,
    fault: &str,
) -> Result<Vec<CellSpec>, Exit> {
    let cut = plan::parse_cut(cut).map_err(|e| bad(format!("{e:#}")))?;
    let fault = Fault::parse(fault).expect("clap checked the fault name");
    let d = harness::planner::discover_retrying(env, s, profile)
        .map_err(|e| harness_err(format!("{e:#}")))?;
    plan::check_cut(&d.boundaries, scenario_id, &cut, fault).map_err(bad)?;
    Ok(plan::number(
        RUN_SEED,
        vec![(
            scenario_id.to_owned(),
            Some(harness::model::Event { cut, fault }),
        )],
    ))
}
