//! `turncut explore`: random schedules until one fails or the time is up;
//! a failure is shrunk, printed and written as a two-cell report.

use std::path::{Path, PathBuf};
use std::time::Instant;

use harness::cell::CellEnv;
use harness::{model, scenario, wave};

use super::reports::write_reports;
use super::{Code, Exit, bad, clock_seed, env_for, harness_err, matching_ids, prepare_out};
use crate::{Common, ExploreArgs};

/// `turncut explore`: exit 0 when no schedule failed, 1 when one did.
pub fn explore(exe: &Path, common: &Common, args: &ExploreArgs) -> Result<Code, Exit> {
    use harness::explore as ex;
    let budget = humantime::parse_duration(&args.time)
        .map_err(|e| bad(format!("--time {:?}: {e}; e.g. 90s, 10m, 1h", args.time)))?;
    if budget.is_zero() {
        return Err(bad("--time 0 would explore nothing; give e.g. 90s or 10m"));
    }
    let events = ex::parse_event_count(&args.events).map_err(bad)?;
    if args.workflows {
        return super::explore_workflows::explore_workflows(exe, common, args, budget, events);
    }
    let (env, scenarios) = env_for(exe, common, None)?;
    let ids = matching_ids(&scenarios, args.only.as_deref(), false)?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    common.progress.note(&format!(
        "turncut explore (seed {seed}, {} scenario ids, {} events per schedule, {} job(s), {})",
        ids.len(),
        args.events,
        args.jobs,
        args.time
    ));
    let targets = ex::targets(&env, &scenarios, &ids).map_err(|e| harness_err(format!("{e:#}")))?;
    let opts = ex::Options {
        budget,
        seed,
        events,
        jobs: args.jobs as usize,
        shrink_iters: args.shrink_iters,
        attempts: args.attempts as usize,
    };
    wave::install_interrupt_handler();
    let explored = ex::explore(&env, &scenarios, &targets, &opts);
    let minutes = explored.elapsed.as_secs_f64() / 60.0;
    println!(
        "explored {} schedules in {:.1} s ({:.0} per minute), {} unknown, over {} scenario ids",
        explored.runs,
        explored.elapsed.as_secs_f64(),
        explored.runs as f64 / minutes.max(1e-9),
        explored.unknown,
        explored.per_id.len()
    );
    print_unknown(&env, &explored.unknown_cells);
    let Some(found) = explored.found else {
        println!("no schedule failed");
        return Ok(Code::Pass);
    };
    report_found(&env, &scenarios, seed, args, found)
}

/// Names each cell whose verdict was `unknown`: its scenario id and
/// schedule, why no oracle could decide, and the command that runs it again.
pub(super) fn print_unknown(env: &CellEnv, cells: &[model::CellResult]) {
    for r in cells {
        println!(
            "unknown: {} under {}",
            r.spec.scenario_id,
            model::format_schedule(&r.spec.events)
        );
        let why = r
            .oracles
            .iter()
            .filter(|o| o.verdict == model::Verdict::Unknown)
            .map(|o| format!("{}: {}", o.oracle.as_str(), o.message));
        for line in why.chain(r.error.iter().map(|e| format!("harness error: {e}"))) {
            println!("  {line}");
        }
        println!(
            "  run it: {}",
            harness::cell::reproduce_command(env, &r.spec)
        );
    }
}

/// Prints the original and the minimal failing schedule and writes them
/// as a report (`t001`, `t002`) that `turncut replay` re-runs; exit 1.
fn report_found(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    seed: u64,
    args: &ExploreArgs,
    found: harness::explore::Found,
) -> Result<Code, Exit> {
    use harness::explore as ex;
    let mut original = found.original;
    let mut minimal = found.minimal;
    original.result.spec.cell_id = "t001".into();
    minimal.result.spec.cell_id = "t002".into();
    let schedule = |f: &wave::Finished| model::format_schedule(&f.result.spec.events);
    println!("FAILED: {}", found.scenario_id);
    println!(
        "  original ({} events): {}  [{}]",
        original.result.spec.depth(),
        schedule(&original),
        ex::failing_oracles(&original).join(", ")
    );
    println!(
        "  minimal  ({} events, {} shrinking runs): {}  [{}]",
        minimal.result.spec.depth(),
        found.shrink_runs,
        schedule(&minimal),
        ex::failing_oracles(&minimal).join(", ")
    );
    if !ex::is_failure(&minimal) {
        println!(
            "  note: the minimal schedule passed when run once more (a timing-dependent failure)"
        );
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/explore").join(format!("s{seed}")));
    prepare_out(&out)?;
    let finished = vec![original, minimal];
    let result = wave::wave_result(
        &wave::WaveMeta {
            wave_id: format!("explore-s{seed}"),
            seed,
            shard: None,
            jobs: args.jobs as usize,
            run: harness::cell::run_config(env, scenarios),
            skipped: Vec::new(),
            stages: harness::model::Stages::Both,
        },
        Instant::now(),
        &finished,
        finished.len(),
        None,
    );
    write_reports(env, &out, &result, &finished)?;
    println!(
        "  replay the minimal schedule: {}",
        finished[1].result.reproduce
    );
    println!("  or: turncut replay {}", out.join("cells/t002").display());
    Ok(Code::NotPass)
}
