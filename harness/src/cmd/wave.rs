//! `turncut wave`: plan every cell of the chosen scenarios (sampled,
//! sharded), run them and write the reports; with `--repeat N`, run them N
//! times and list the cells whose result differs.

use std::path::{Path, PathBuf};

use harness::model::Verdict;
use harness::{plan, wave};

use super::reports::{Job, run_and_report};
use super::{Exit, bad, clock_seed, env_for, matching_ids, plan_err, prepare_out};
use crate::{Common, WaveArgs};

/// `turncut wave`.
pub fn wave(exe: &Path, common: &Common, args: WaveArgs) -> Result<i32, Exit> {
    let (mut env, scenarios) = env_for(exe, common, None)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    let shard = args
        .shard
        .as_deref()
        .map(plan::parse_shard)
        .transpose()
        .map_err(|e| bad(format!("{e:#}")))?;
    let only = args.only.as_deref();
    let ids = matching_ids(&scenarios, only, args.real)?;
    let (ids, skipped) = wave::split_skipped(ids);
    for s in &skipped {
        eprintln!("skipped {}: {}", s.scenario_id, s.reason);
    }
    if let Some(out) = &args.out {
        prepare_out(out)?;
    }
    eprintln!("turncut wave (seed {seed}, jobs {})", args.jobs);
    let reach = args.reach.reach();
    env.recut = !reach.depth1_only;
    let cells = if ids.is_empty() {
        Vec::new()
    } else {
        wave::plan_cells(&env, &scenarios, &ids, seed, false, reach).map_err(plan_err)?
    };
    let first_recut = cells.len() + 1;
    let cells = wave::sample_real(cells, only, seed);
    let cells = plan::sample(cells, args.budget.map(|b| b as usize), seed);
    // One id for every shard of this wave: the seed and the cells planned
    // before sharding.
    let wave_id = wave::wave_id(seed, &cells);
    let cells = match shard {
        Some((i, n)) => plan::shard(cells, i, n),
        None => cells,
    };
    let jobs = args.jobs as usize;
    if args.repeat > 1 {
        let rounds = wave::run_repeated(&env, &scenarios, &cells, jobs, args.repeat);
        return Ok(report_repeats(&rounds));
    }
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("reports/out").join(&wave_id));
    prepare_out(&out)?;
    eprintln!("wave {wave_id}: {} cells", cells.len());
    let planned = cells.len();
    run_and_report(&Job {
        env: &env,
        scenarios: &scenarios,
        cells,
        planned,
        jobs,
        seed,
        shard,
        out: Some(&out),
        wave_id,
        max_fail: args.max_fail,
        skipped,
        stage2: reach.recuts.then_some(harness::recuts::Stage2 {
            wave_seed: seed,
            first_number: first_recut,
            budget: args.budget.map(|b| b as usize),
        }),
    })
}

/// Prints what `wave --repeat` found: per round the verdict counts and the
/// unreached cuts, then every cell whose verdict or path differed. Exit 1 if
/// a cell differed or did not pass.
fn report_repeats(rounds: &[Vec<wave::Finished>]) -> i32 {
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
            wave::unreached(&cells)
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
    i32::from(bad || !unstable.is_empty())
}
