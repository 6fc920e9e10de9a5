//! `turncut wave` and `turncut plan`: plan every cell of the chosen
//! scenarios (sampled) once — or read a plan made elsewhere — run a shard of
//! it and write the reports; with `--repeat N`, run the cells N times and
//! list those whose result differs.

use std::path::{Path, PathBuf};

use harness::cell::CellEnv;
use harness::model::{Plan, Stages, Verdict};
use harness::scenario::Scenario;
use harness::{plan, planner, wave};

use super::reports::{Job, run_and_report};
use super::{Code, Exit, bad, clock_seed, emit, env_for, matching_ids, plan_err, prepare_out};
use crate::{Common, PlanArgs, SelectArgs, WaveArgs};

/// `turncut wave`: plans (or reads `--plan`), then runs the plan's cells
/// (its shard's) and reports.
pub fn wave(exe: &Path, common: &Common, args: WaveArgs) -> Result<Code, Exit> {
    let (env, mut scenarios) = env_for(exe, common, None)?;
    let shard = args
        .shard
        .as_deref()
        .map(plan::parse_shard)
        .transpose()
        .map_err(|e| bad(format!("{e:#}")))?;
    if let Some(out) = &args.out {
        prepare_out(out)?;
    }
    let plan = match &args.plan {
        Some(path) => {
            if args.select.given() {
                return Err(bad(format!(
                    "--plan {}: the plan fixes the selection; drop --seed, --budget, --only, --real and the reach options",
                    path.display()
                )));
            }
            read_plan(path, &mut scenarios)?
        }
        None => make_plan(&env, &mut scenarios, &args.select, args.jobs as usize)?,
    };
    env.progress.note(&format!(
        "turncut wave {} (seed {}, jobs {})",
        plan.wave_id, plan.seed, args.jobs
    ));
    let env = env_of_plan(env, &plan);
    let (cells, judged) = shard_of_plan(&scenarios, &plan, shard);
    let jobs = args.jobs as usize;
    if args.repeat > 1 {
        let rounds = wave::run_repeated(&env, &scenarios, &cells, jobs, args.repeat);
        return Ok(report_repeats(&rounds));
    }
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("reports/out").join(&plan.wave_id));
    prepare_report_dir(&env, &out, &plan, cells.len())?;
    let stages = stages_of(&env.progress, &plan, shard, &out);
    let planned = cells.len();
    run_and_report(&Job {
        env: &env,
        scenarios: &scenarios,
        cells,
        planned,
        jobs,
        seed: plan.seed,
        shard,
        out: Some(&out),
        wave_id: plan.wave_id.clone(),
        max_fail: args.max_fail,
        skipped: if shard.is_none_or(|(i, _)| i == 1) {
            plan.skipped.clone()
        } else {
            Vec::new()
        },
        judged,
        stage2: plan
            .stage2
            .filter(|_| stages == Stages::Both)
            .map(|s| harness::recuts::Stage2 {
                wave_seed: plan.seed,
                keep_ppm: s.keep_ppm,
            }),
        stages,
    })
}

/// Makes the wave's report directory `out` and writes the plan and its
/// generated programs into it.
fn prepare_report_dir(env: &CellEnv, out: &Path, plan: &Plan, cells: usize) -> Result<(), Exit> {
    prepare_out(out)?;
    env.progress
        .note(&format!("wave {}: {cells} cells", plan.wave_id));
    write_plan(&out.join(PLAN_IN_REPORT), plan)?;
    write_workflows(out, plan)
}

/// The plan a wave ran, beside its reports: `turncut plan --stage2` reads
/// it from each stage-1 shard's directory.
pub(super) const PLAN_IN_REPORT: &str = "plan.json";

/// Which stages a wave of `plan` runs: a shard of a plan with stage 2 runs
/// stage 1 only (stage 2 follows from every shard's results, not from its
/// own), and says how stage 2 is planned.
fn stages_of(
    progress: &harness::progress::Progress,
    plan: &Plan,
    shard: Option<(u32, u32)>,
    out: &Path,
) -> Stages {
    match plan.stages {
        Stages::Stage2 => Stages::Stage2,
        _ if shard.is_some() && plan.stage2.is_some() => {
            progress.note(&format!(
                "stage 1 only: once every shard is done, plan stage 2 from all of them: turncut plan --stage2 {} … --out plan2.json",
                out.display()
            ));
            Stages::Stage1
        }
        _ => Stages::Both,
    }
}

/// The cells and judged planning runs of `shard` of `plan` (all without
/// one): whole groups of scenario ids ([`planner::shard_of_groups`]); a
/// judged run of an id with no cells goes to shard 1.
fn shard_of_plan(
    scenarios: &[Scenario],
    plan: &Plan,
    shard: Option<(u32, u32)>,
) -> (
    Vec<harness::model::CellSpec>,
    Vec<harness::model::CellResult>,
) {
    let Some((i, n)) = shard else {
        return (plan.cells.clone(), plan.judged.clone());
    };
    let of = planner::shard_of_groups(scenarios, &plan.cells, n);
    let mine = |id: &str| of.get(id).map_or(i == 1, |s| *s == i);
    (
        plan.cells
            .iter()
            .filter(|c| mine(&c.scenario_id))
            .cloned()
            .collect(),
        plan.judged
            .iter()
            .filter(|r| mine(&r.spec.scenario_id))
            .cloned()
            .collect(),
    )
}

/// Writes `plan` to `path` (JSON); a failure is bad input (the path).
fn write_plan(path: &Path, plan: &Plan) -> Result<(), Exit> {
    let text = serde_json::to_string_pretty(plan).expect("a plan serializes");
    write_file_atomically(path, text.as_bytes())
        .map_err(|e| bad(format!("{}: {e}", path.display())))
}

/// `turncut plan`: plans a wave (or, with `--stage2`, its stage 2) and
/// writes the plan.
pub fn plan(exe: &Path, common: &Common, args: PlanArgs) -> Result<Code, Exit> {
    let (env, mut scenarios) = env_for(exe, common, None)?;
    let plan = if args.stage2.is_empty() {
        make_plan(&env, &mut scenarios, &args.select, args.jobs as usize)?
    } else {
        if args.select.given() {
            return Err(bad(
                "--stage2: the stage-1 plan fixes the selection; drop --seed, --budget, --only, --real and the reach options"
                    .to_owned(),
            ));
        }
        super::stage2::plan_stage2(env, &mut scenarios, &args.stage2, args.jobs as usize)?
    };
    write_plan(&args.out, &plan)?;
    common.progress.note(&format!(
        "plan {}: {} {}cells{}, {} skipped, {} judged planning runs; written to {}",
        plan.wave_id,
        plan.cells.len(),
        if plan.stages == Stages::Stage2 {
            "stage-2 "
        } else {
            ""
        },
        if plan.stage2.is_some() {
            " and stage 2"
        } else {
            ""
        },
        plan.skipped.len(),
        plan.judged.len(),
        args.out.display()
    ));
    emit(&format!("{}\n", plan.wave_id));
    Ok(Code::Pass)
}

/// Writes the generated programs of `plan` to `out/workflows/` as scenario
/// files, for a person to read (and to add to `scenarios/` if one fails).
fn write_workflows(out: &Path, plan: &Plan) -> Result<(), Exit> {
    if plan.workflows == 0 {
        return Ok(());
    }
    let dir = out.join("workflows");
    std::fs::create_dir_all(&dir).map_err(|e| bad(format!("{}: {e}", dir.display())))?;
    for (name, text) in harness::workflow::wave_sources(plan.seed, plan.workflows) {
        let path = dir.join(name);
        write_file_atomically(&path, text.as_bytes())
            .map_err(|e| bad(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}

/// Plans the wave of `select` on this machine, after adding the generated
/// programs of its seed to `scenarios`; the clean runs are traced on `jobs`
/// threads.
fn make_plan(
    env: &CellEnv,
    scenarios: &mut Vec<Scenario>,
    select: &SelectArgs,
    jobs: usize,
) -> Result<Plan, Exit> {
    let seed = select.seed.unwrap_or_else(clock_seed);
    let reach = select.reach.reach();
    if !reach.depth1_only {
        scenarios.extend(harness::workflow::wave_programs(seed, reach.workflows));
    }
    let scenarios: &[Scenario] = scenarios;
    let only = select.only.as_deref();
    let ids = matching_ids(scenarios, only, select.real)?;
    let (ids, skipped) = wave::split_skipped(ids, &env.progress);
    super::reports::note_skipped(&env.progress, &skipped);
    let mut env = env.clone();
    env.recut = !reach.depth1_only;
    env.progress.note(&format!("planning (seed {seed}) …"));
    planner::make_plan(
        &env,
        scenarios,
        &planner::Selection {
            ids,
            skipped,
            seed,
            budget: select.budget.map(|b| b as usize),
            only,
            reach,
            jobs,
            command_line: select.command_line(seed),
        },
    )
    .map_err(plan_err)
}

/// Reads a plan, refusing one made from other scenarios or by another
/// turncut version (its cells would not mean the same).
pub(super) fn read_plan(path: &Path, scenarios: &mut Vec<Scenario>) -> Result<Plan, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("--plan {}: {e}", path.display())))?;
    let plan: Plan = serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "--plan {}: not a turncut plan: {e}",
            path.display()
        ))
    })?;
    if plan.v != harness::model::PLAN_FORMAT_VERSION {
        return Err(bad(format!(
            "--plan {}: plan format {} (this turncut reads {})",
            path.display(),
            plan.v,
            harness::model::PLAN_FORMAT_VERSION
        )));
    }
    let version = env!("CARGO_PKG_VERSION");
    if plan.run.turncut_version != version {
        return Err(bad(format!(
            "--plan {}: made by turncut {}, this is {version}; plan again with this turncut",
            path.display(),
            plan.run.turncut_version
        )));
    }
    scenarios.retain(|s| !s.generated);
    scenarios.extend(harness::workflow::wave_programs(plan.seed, plan.workflows));
    if plan.scenarios_sha256 != planner::scenarios_sha256(scenarios) {
        return Err(bad(format!(
            "--plan {}: made from other scenarios than these (pass the same --scenarios, or plan again)",
            path.display()
        )));
    }
    Ok(plan)
}

/// The cell environment of a plan: its runner command, arguments and
/// timeouts (given options still win, as for `replay`).
pub(super) fn env_of_plan(mut env: CellEnv, plan: &Plan) -> CellEnv {
    let r = &plan.run;
    if let Some(cmd) = &r.runner_cmd {
        env.runner_cmd = cmd.clone();
    }
    if env.runner_extra.is_empty() {
        env.runner_extra = r.runner_args.clone();
    }
    env.idle_timeout_ms = r.idle_timeout_ms;
    env.hang_idle_timeout_ms = r.hang_idle_timeout_ms;
    env.wait_ms = r.cell_wait_ms;
    env.recut = !r.depth1_only;
    env
}

/// Writes `bytes` to `path` through a temporary file in its directory.
fn write_file_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Prints what `wave --repeat` found: per round the verdict counts and the
/// unreached cuts, then every cell whose verdict or path differed. Exit 1 if
/// a cell differed or did not pass.
fn report_repeats(rounds: &[Vec<wave::Finished>]) -> Code {
    let mut bad = false;
    for (i, round) in rounds.iter().enumerate() {
        let not_passing = round
            .iter()
            .filter(|f| f.result.verdict != Verdict::Pass)
            .count();
        let cells: Vec<_> = round.iter().map(|f| f.result.clone()).collect();
        bad |= not_passing > 0;
        println!(
            "round {}: {} cells, {not_passing} not passing, {} unreached cuts",
            i + 1,
            round.len(),
            harness::model::unreached(&cells)
        );
    }
    if let Some(first) = rounds.first() {
        let mut paths: std::collections::BTreeMap<&str, usize> = Default::default();
        for f in first {
            *paths.entry(f.result.outcome.path.as_str()).or_default() += 1;
        }
        println!("cells per path (round 1):");
        for (path, n) in paths {
            println!("  {n:>5}  {path}");
        }
    }
    let unstable = wave::unstable(rounds);
    println!("{} cells differ between rounds", unstable.len());
    for u in &unstable {
        println!("  {}", u.name);
        for (i, r) in u.rounds.iter().enumerate() {
            println!("    round {}: {r}", i + 1);
        }
    }
    Code::pass_if(!bad && unstable.is_empty())
}
