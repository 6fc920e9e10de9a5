//! `turncut explore --workflows`: generated controller programs until one
//! fails or the time is up; a failure is shrunk (schedule, then program),
//! printed, written as a two-cell report and, with `--emit-scenario DIR`,
//! as a scenario file a person adds to `scenarios/`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::cell::CellEnv;
use harness::explore::workflows::{self as wf, FoundWorkflow, WorkflowOptions};
use harness::explore::{self as ex, EventCount};
use harness::{model, wave};

use super::reports::write_reports;
use super::{Code, Exit, bad, clock_seed, env_for, harness_err, prepare_out};
use crate::{Common, ExploreArgs};

/// The profiles `--only` names (a name, which picks that profile alone, or
/// a part of one): the four fakes by default; a real product's profile only
/// when named.
fn profiles(only: Option<&str>) -> Result<Vec<String>, Exit> {
    if let Some(o) = only
        && wire::profiles::names().any(|p| p == o)
    {
        return Ok(vec![o.to_owned()]);
    }
    let chosen: Vec<String> = wire::profiles::names()
        .filter(|p| match only {
            Some(o) => p.contains(o),
            None => wire::profiles::builtin(p).is_some(),
        })
        .map(str::to_owned)
        .collect();
    if chosen.is_empty() {
        return Err(bad(format!(
            "--only {:?} names no profile; profiles are {}",
            only.unwrap_or_default(),
            wire::profiles::names().collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(chosen)
}

/// How the schedules are drawn: power cuts too where FUSE can be mounted
/// (said when it cannot).
fn how_drawn(progress: &harness::progress::Progress) -> ex::Draw {
    match lazyfs::unavailable() {
        None => ex::WORKFLOW_DRAW,
        Some(why) => {
            progress.note(&format!(
                "power cuts are not drawn: FUSE cannot be mounted here ({why})"
            ));
            ex::Draw {
                faults: &ex::SCHEDULE_FAULTS,
                ..ex::WORKFLOW_DRAW
            }
        }
    }
}

/// `turncut explore --workflows`: exit 0 when no program failed, 1 when one did.
pub fn explore_workflows(
    exe: &Path,
    common: &Common,
    args: &ExploreArgs,
    budget: Duration,
    events: EventCount,
) -> Result<Code, Exit> {
    let (env, _) = env_for(exe, common, None)?;
    let profiles = profiles(args.only.as_deref())?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    common.progress.note(&format!(
        "turncut explore --workflows (seed {seed}, profiles {}, {} schedules of {} events per program, {} job(s), {})",
        profiles.join(", "),
        args.per_program,
        args.events,
        args.jobs,
        args.time
    ));
    let opts = WorkflowOptions {
        explore: ex::Options {
            budget,
            seed,
            events,
            jobs: args.jobs as usize,
            shrink_iters: args.shrink_iters,
            attempts: args.attempts as usize,
        },
        profiles,
        schedules: args.per_program,
        draw: how_drawn(&env.progress),
    };
    wave::install_interrupt_handler();
    let mut explored = wf::explore_workflows(&env, &opts);
    print_figures(&explored);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("reports/explore").join(format!("workflows-s{seed}")));
    name_unknown(&env, &out, &explored.unknown_cells)?;
    let Some(found) = explored.found.take() else {
        println!("no program failed");
        return Ok(Code::Pass);
    };
    report_found(&env, seed, args, &out, found)
}

/// Writes the program of each `unknown` cell into `OUT/unknown/` and names
/// the cell with the command that runs it from there.
fn name_unknown(
    env: &CellEnv,
    out: &Path,
    cells: &[(model::CellResult, (String, String))],
) -> Result<(), Exit> {
    if cells.is_empty() {
        return Ok(());
    }
    let dir = out.join("unknown");
    prepare_out(&dir)?;
    for (_, (case, file)) in cells {
        write(&dir.join(format!("{case}.toml")), file)?;
    }
    let mut env = env.clone();
    env.scenarios_dir = dir;
    let results: Vec<model::CellResult> = cells.iter().map(|(r, _)| r.clone()).collect();
    super::explore::print_unknown(&env, &results);
    Ok(())
}

/// Programs and cells, per minute and per profile.
fn print_figures(x: &wf::WorkflowsExplored) {
    let minutes = x.elapsed.as_secs_f64() / 60.0;
    println!(
        "explored {} programs ({} of several tasks) and {} cells in {:.1} s ({:.1} programs and {:.0} cells per minute), {} unknown",
        x.programs,
        x.several_tasks,
        x.cells,
        x.elapsed.as_secs_f64(),
        x.programs as f64 / minutes.max(1e-9),
        x.cells as f64 / minutes.max(1e-9),
        x.unknown
    );
    for (profile, (programs, cells)) in &x.per_profile {
        println!("  {profile}: {programs} programs, {cells} cells");
    }
    println!(
        "  {} recoveries were cut again (a sample of {} second cuts at a recovery's first walk, {} at each later one, none run twice)",
        x.recoveries,
        harness::explore::recut::PER_RECOVERY,
        harness::explore::recut::PER_VISIT_AGAIN
    );
    if let Some(at) = x.first_failure_after {
        println!("first failure after {:.1} s", at.as_secs_f64());
    }
}

/// Prints the original and minimal program and schedule, writes both
/// programs as scenario files and the two cells as a report; exit 1.
fn report_found(
    env: &CellEnv,
    seed: u64,
    args: &ExploreArgs,
    out: &Path,
    f: FoundWorkflow,
) -> Result<Code, Exit> {
    prepare_out(out)?;
    let dir = out.join("workflows");
    let schedule = f.minimal.result.spec.events.clone();
    let (program, case) = &f.minimal_program;
    let minimal_toml = program.scenario_toml(case, &[&f.profile], &wf::emitted_chaos(&schedule));
    let (original, original_case) = &f.original_program;
    let original_schedule = &f.found.original.result.spec.events.clone();
    let original_toml = original.scenario_toml(
        original_case,
        &[&f.profile],
        &wf::emitted_chaos(original_schedule),
    );
    write(&dir.join(format!("{original_case}.toml")), &original_toml)?;
    write(&dir.join(format!("{case}.toml")), &minimal_toml)?;
    if let Some(emit) = &args.emit_scenario {
        write(&emit.join(format!("{case}.toml")), &minimal_toml)?;
    }
    let mut env = env.clone();
    env.scenarios_dir = dir.clone();
    let mut cells = vec![f.found.original, f.minimal];
    for (i, c) in cells.iter_mut().enumerate() {
        c.result.spec.cell_id = format!("t{:03}", i + 1);
        c.result.reproduce = harness::cell::reproduce_command(&env, &c.result.spec);
    }
    println!("FAILED: {} on {}", f.found.scenario_id, f.profile);
    println!(
        "  original: {} steps, schedule {}  [{}]",
        original.ops.len(),
        model::format_schedule(original_schedule),
        ex::failing_oracles(&cells[0]).join(", ")
    );
    println!(
        "  minimal:  {} steps, schedule {}  [{}] ({} schedule and {} program shrinking runs)",
        program.ops.len(),
        model::format_schedule(&schedule),
        ex::failing_oracles(&cells[1]).join(", "),
        f.found.shrink_runs,
        f.program_shrink_runs
    );
    println!("  {}", program.title());
    if !ex::is_failure(&cells[1]) {
        println!(
            "  note: the minimal program passed when run once more (a timing-dependent failure)"
        );
    }
    write_report(&env, seed, args, out, &cells)?;
    println!(
        "  the minimal program: {}",
        dir.join(format!("{case}.toml")).display()
    );
    if let Some(emit) = &args.emit_scenario {
        println!(
            "  written as a scenario: {} (add it to scenarios/ as a regression)",
            emit.join(format!("{case}.toml")).display()
        );
    }
    println!("  run it: {}", cells[1].result.reproduce);
    Ok(Code::NotPass)
}

fn write_report(
    env: &CellEnv,
    seed: u64,
    args: &ExploreArgs,
    out: &Path,
    cells: &[wave::Finished],
) -> Result<(), Exit> {
    let result = wave::wave_result(
        &wave::WaveMeta {
            wave_id: format!("explore-workflows-s{seed}"),
            seed,
            shard: None,
            jobs: args.jobs as usize,
            run: harness::cell::run_config(env, &[]),
            skipped: Vec::new(),
            stages: harness::model::Stages::Both,
        },
        Instant::now(),
        cells,
        cells.len(),
        None,
    );
    write_reports(env, out, &result, cells)
}

fn write(path: &Path, text: &str) -> Result<(), Exit> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| harness_err(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::fs::write(path, text)
        .map_err(|e| harness_err(format!("cannot write {}: {e}", path.display())))
}
