//! The `turncut` binary: the harness CLI, and a multi-call entry point so that
//! `turncut fake-provider …` and `turncut runnerd …` run the fakes and the
//! runner from the same build. The dispatch calls only each program's `main`;
//! the harness itself never uses runner internals.
//!
//! Exit codes: 0 all pass, 1 an oracle failed (or gave no verdict), 2 bad
//! input, 3 harness error.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use harness::cell::CellEnv;
use harness::model::{CellSpec, Fault, Verdict};
use harness::{plan, report, scenario, wave};

/// Options every command that runs cells takes.
#[derive(Debug, Args, Clone)]
struct Common {
    /// Directory of scenario files [default: ./scenarios, else the built-in ones].
    #[arg(long, global = true)]
    scenarios: Option<PathBuf>,
    /// Run this runner instead of `turncut runnerd` (a command line; it must
    /// speak the runnerd CLI and control API).
    #[arg(long, global = true)]
    runner_cmd: Option<String>,
    /// Extra argument for the runner (repeatable), e.g. --runner-arg=--seeded-bug.
    #[arg(long = "runner-arg", global = true, allow_hyphen_values = true)]
    runner_args: Vec<String>,
    /// The runner's provider idle timeout in a cell.
    #[arg(long, global = true, default_value_t = 500)]
    idle_timeout_ms: u64,
    /// The idle timeout in hang-provider cells (a hung provider is found
    /// only by it); capped at --idle-timeout-ms.
    #[arg(long, global = true, default_value_t = 250)]
    hang_idle_timeout_ms: u64,
    /// Deadline of each wait in a cell.
    #[arg(long, global = true, default_value_t = 15_000)]
    cell_wait_ms: u64,
    /// Keep every cell's temporary directory.
    #[arg(long, global = true)]
    keep: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List scenario ids (optionally those containing PATTERN).
    List { pattern: Option<String> },
    /// Print the cut points of a clean traced run of a scenario.
    Boundaries { scenario_id: String },
    /// Run every cell of one scenario, or one cell with --cut and --fault.
    Run {
        scenario_id: String,
        /// One cut, `point#n`.
        #[arg(long, requires = "fault")]
        cut: Option<String>,
        /// The fault at the cut.
        #[arg(long, requires = "cut")]
        fault: Option<String>,
        /// Parallel cells.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Also write reports here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run the wave: every cut point × fault of every scenario.
    Wave {
        /// Wave seed [default: from the clock; printed].
        #[arg(long)]
        seed: Option<u64>,
        /// Run only N cells, sampled by seed.
        #[arg(long)]
        budget: Option<usize>,
        /// Run shard I of N (1-based), e.g. 2/4.
        #[arg(long)]
        shard: Option<String>,
        /// Parallel cells.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Report directory [default: reports/out/<wave-id>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only scenario ids containing this.
        #[arg(long)]
        only: Option<String>,
        /// Run every cell N times and list the cells whose verdict or
        /// recovery path differ (exit 1 if any); no reports are written.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
    },
    /// Run one cell of a wave again: `turncut replay <wave-dir>/t###`.
    Replay { cell: PathBuf },
    /// Reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Run the default wave against every seeded bug of runnerd.
    Mutants {
        /// Parallel cells.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Only these bugs (comma-separated).
        #[arg(long)]
        bugs: Option<String>,
        /// Cells per bug and profile (sampled by seed); all by default.
        #[arg(long)]
        budget: Option<usize>,
        /// Only these profiles (comma-separated); all by default.
        #[arg(long)]
        profiles: Option<String>,
        /// Run every cell for every bug (counts every failing cell) instead
        /// of stopping at the first catch.
        #[arg(long)]
        full: bool,
    },
    /// Drive the fake Codex provider through a turn and a crash sweep.
    Demo,
    /// Run the reference runner (same as the standalone `runnerd` binary).
    #[command(name = "runnerd", disable_help_flag = true)]
    Runnerd {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run a fake provider (same as the standalone `fake-provider` binary).
    #[command(name = "fake-provider", disable_help_flag = true)]
    FakeProvider {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

#[derive(Debug, Subcommand)]
enum ReportCommand {
    /// Merge sharded wave directories into one report.
    Merge {
        /// Wave directories (each with a wave.json).
        dirs: Vec<PathBuf>,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Restart-chaos harness for AI-agent runners.
#[derive(Debug, Parser)]
#[command(name = "turncut", version, about)]
struct WithCommon {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

/// An error with its exit code.
struct Exit(i32, String);

fn bad(m: impl std::fmt::Display) -> Exit {
    Exit(2, m.to_string())
}

fn harness_err(m: impl std::fmt::Display) -> Exit {
    Exit(3, m.to_string())
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let exe = std::env::current_exe().unwrap_or_else(|_| "turncut".into());
    // The runner and the fakes parse their own arguments, so they are
    // dispatched before clap sees anything.
    if args.get(1).is_some_and(|a| a == "fake-provider") {
        let forwarded =
            std::iter::once(OsString::from("fake-provider")).chain(args[2..].iter().cloned());
        let self_cmd = vec![exe.into_os_string(), OsString::from("fake-provider")];
        std::process::exit(fake_provider::cli::main(forwarded, self_cmd));
    }
    if args.get(1).is_some_and(|a| a == "runnerd") {
        let forwarded = std::iter::once(OsString::from("runnerd")).chain(args[2..].iter().cloned());
        std::process::exit(runner::cli::main(forwarded));
    }
    let cli = match WithCommon::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(&exe, cli) {
        Ok(code) => std::process::exit(code),
        Err(Exit(code, message)) => {
            eprintln!("turncut: {message}");
            std::process::exit(code);
        }
    }
}

fn env_for(exe: &Path, common: &Common) -> Result<(CellEnv, Vec<scenario::Scenario>), Exit> {
    let dir = common
        .scenarios
        .clone()
        .unwrap_or_else(plan::default_scenarios_dir);
    let scenarios = scenario::load_dir(&dir).map_err(bad)?;
    let mut env = CellEnv::new(exe, &dir);
    if let Some(cmd) = &common.runner_cmd {
        env.runner_cmd = cmd.split_whitespace().map(str::to_owned).collect();
        if env.runner_cmd.is_empty() {
            return Err(bad("--runner-cmd is empty"));
        }
    }
    env.runner_extra = common.runner_args.clone();
    env.idle_timeout_ms = common.idle_timeout_ms;
    env.hang_idle_timeout_ms = common.hang_idle_timeout_ms;
    env.wait_ms = common.cell_wait_ms;
    env.keep = common.keep;
    Ok((env, scenarios))
}

fn run(exe: &Path, cli: WithCommon) -> Result<i32, Exit> {
    let common = cli.common;
    match cli.command {
        Command::Runnerd { .. } | Command::FakeProvider { .. } => {
            unreachable!("dispatched in main")
        }
        Command::Demo => match harness::demo::run(exe, common.keep) {
            Ok(true) => Ok(0),
            Ok(false) => Ok(1),
            Err(e) => Err(harness_err(format!("demo failed: {e:#}"))),
        },
        Command::List { pattern } => {
            let (_, scenarios) = env_for(exe, &common)?;
            for s in &scenarios {
                for id in s.ids() {
                    if pattern.as_ref().is_none_or(|p| id.contains(p.as_str())) {
                        println!("{id}\t{}", s.title);
                    }
                }
            }
            Ok(0)
        }
        Command::Boundaries { scenario_id } => {
            let (env, scenarios) = env_for(exe, &common)?;
            let (s, profile) = scenario::find(&scenarios, &scenario_id).ok_or_else(|| {
                bad(format!(
                    "unknown scenario id {scenario_id}; `turncut list` shows the ids"
                ))
            })?;
            let d = plan::discover(&env, s, &profile).map_err(|e| harness_err(format!("{e:#}")))?;
            println!(
                "{scenario_id}: {} boundaries (clean run: {}, {} ms)",
                d.boundaries.len(),
                d.clean_state,
                d.clean_ms
            );
            for b in &d.boundaries {
                println!(
                    "{:<9} {:<60} {}",
                    b.role,
                    b.cut.to_string(),
                    if b.provider_alive {
                        "provider alive"
                    } else {
                        "no provider"
                    }
                );
            }
            Ok(if d.clean_verdict == Verdict::Pass {
                0
            } else {
                1
            })
        }
        Command::Run {
            scenario_id,
            cut,
            fault,
            jobs,
            out,
        } => {
            let (env, scenarios) = env_for(exe, &common)?;
            let seed = 0;
            // An unknown id is bad input, checked before anything runs.
            scenario::find(&scenarios, &scenario_id).ok_or_else(|| {
                bad(format!(
                    "unknown scenario id {scenario_id}; `turncut list` shows the ids"
                ))
            })?;
            let cells = match (cut, fault) {
                (Some(cut), Some(fault)) => {
                    let cut = plan::parse_cut(&cut).map_err(|e| bad(format!("{e:#}")))?;
                    let fault = Fault::parse(&fault).ok_or_else(|| {
                        bad(format!(
                            "unknown fault {fault:?}; faults are {}",
                            Fault::ALL.map(Fault::as_str).join(", ")
                        ))
                    })?;
                    plan::number(seed, vec![(scenario_id.clone(), Some(cut), Some(fault))])
                }
                _ => wave::plan_cells(
                    &env,
                    &scenarios,
                    std::slice::from_ref(&scenario_id),
                    seed,
                    false,
                )
                .map_err(|e| harness_err(format!("{e:#}")))?,
            };
            run_and_report(
                &env,
                &scenarios,
                &cells,
                jobs,
                seed,
                None,
                out.as_deref(),
                &format!("run-{scenario_id}"),
            )
        }
        Command::Wave {
            seed,
            budget,
            shard,
            jobs,
            out,
            only,
            repeat,
        } => {
            let (env, scenarios) = env_for(exe, &common)?;
            let seed = seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_secs())
            });
            let shard = shard
                .as_deref()
                .map(plan::parse_shard)
                .transpose()
                .map_err(|e| bad(format!("{e:#}")))?;
            let ids: Vec<String> = scenarios
                .iter()
                .flat_map(|s| s.ids())
                .filter(|id| only.as_ref().is_none_or(|o| id.contains(o.as_str())))
                .collect();
            if ids.is_empty() {
                return Err(bad("no scenario matches --only"));
            }
            let wave_id = wave::wave_id(seed);
            eprintln!("turncut wave {wave_id} (seed {seed}, jobs {jobs})");
            let cells = wave::plan_cells(&env, &scenarios, &ids, seed, false)
                .map_err(|e| harness_err(format!("{e:#}")))?;
            let cells = plan::sample(cells, budget, seed);
            let cells = match shard {
                Some((i, n)) => plan::shard(cells, i, n),
                None => cells,
            };
            if repeat > 1 {
                return Ok(report_repeats(&wave::run_repeated(
                    &env, &scenarios, &cells, jobs, repeat,
                )));
            }
            let out = out.unwrap_or_else(|| PathBuf::from("reports/out").join(&wave_id));
            run_and_report(
                &env,
                &scenarios,
                &cells,
                jobs,
                seed,
                shard,
                Some(&out),
                &wave_id,
            )
        }
        Command::Replay { cell } => replay(exe, &common, &cell),
        Command::Report {
            command: ReportCommand::Merge { dirs, out },
        } => {
            let mut waves = Vec::new();
            for d in &dirs {
                waves.push(report::read_wave(&d.join("wave.json")).map_err(bad)?);
            }
            let merged = report::merge(waves).map_err(bad)?;
            report::write_wave(&out, &merged).map_err(harness_err)?;
            println!("{}", report::summary_markdown(&merged));
            Ok(exit_for(merged.verdict()))
        }
        Command::Mutants {
            jobs,
            bugs,
            budget,
            profiles,
            full,
        } => harness::mutants::run(
            exe,
            &common.scenarios,
            jobs,
            bugs.as_deref(),
            budget,
            profiles.as_deref(),
            full,
        )
        .map_err(|e| harness_err(format!("{e:#}"))),
    }
}

fn exit_for(v: Verdict) -> i32 {
    match v {
        Verdict::Pass => 0,
        Verdict::Unknown | Verdict::Fail => 1,
    }
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

#[allow(clippy::too_many_arguments)]
fn run_and_report(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    cells: &[CellSpec],
    jobs: usize,
    seed: u64,
    shard: Option<(u32, u32)>,
    out: Option<&Path>,
    wave_id: &str,
) -> Result<i32, Exit> {
    let started = Instant::now();
    let finished = wave::run_cells(env, scenarios, cells, jobs);
    let result = wave::wave_result(wave_id, seed, shard, jobs, started, &finished);
    if let Some(out) = out {
        let timelines: report::Timelines = finished
            .iter()
            .filter_map(|f| {
                f.evidence
                    .as_ref()
                    .map(|e| (f.result.spec.cell_id.clone(), e.timeline()))
            })
            .collect();
        report::write_wave_with(out, &result, &timelines).map_err(harness_err)?;
        for f in &finished {
            if let Some(ev) = &f.evidence {
                let dir = out.join("cells").join(&f.result.spec.cell_id);
                ev.write(&dir)
                    .map_err(|e| harness_err(format!("failed to write {}: {e}", dir.display())))?;
                std::fs::write(dir.join("timeline.txt"), ev.timeline())
                    .map_err(|e| harness_err(format!("failed to write timeline.txt: {e}")))?;
                let script = format!(
                    "#!/bin/sh\n# {}\n{}\n",
                    f.result.spec.name(),
                    f.result.reproduce
                );
                std::fs::write(dir.join("reproduce.sh"), script)
                    .map_err(|e| harness_err(format!("failed to write reproduce.sh: {e}")))?;
            }
        }
        if let Ok(summary) = std::env::var("GITHUB_STEP_SUMMARY") {
            use std::io::Write as _;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(summary)
            {
                let _ = f.write_all(report::summary_markdown(&result).as_bytes());
            }
        }
        eprintln!("reports in {}", out.display());
    }
    let counts = |v: Verdict| result.cells.iter().filter(|c| c.verdict == v).count();
    let mut times: Vec<u64> = result.cells.iter().map(|c| c.duration_ms).collect();
    times.sort_unstable();
    let median = times.get(times.len() / 2).copied().unwrap_or(0);
    println!(
        "{}: {} cells, {} pass, {} unknown, {} fail; median cell {median} ms; wall {:.1} s",
        result.wave_id,
        result.cells.len(),
        counts(Verdict::Pass),
        counts(Verdict::Unknown),
        counts(Verdict::Fail),
        result.duration_ms as f64 / 1000.0
    );
    for c in result.cells.iter().filter(|c| c.verdict != Verdict::Pass) {
        println!("  {}", report::cell_line(c));
        println!("    reproduce: {}", c.reproduce);
    }
    Ok(exit_for(result.verdict()))
}

fn replay(exe: &Path, common: &Common, cell: &Path) -> Result<i32, Exit> {
    let cell_id = cell
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.starts_with('t'))
        .ok_or_else(|| bad(format!("{}: expected <wave-dir>/t###", cell.display())))?
        .to_owned();
    let mut wave_dir = cell.parent().unwrap_or(Path::new(".")).to_owned();
    if wave_dir.file_name().is_some_and(|n| n == "cells") {
        wave_dir = wave_dir.parent().unwrap_or(Path::new(".")).to_owned();
    }
    let wave = report::read_wave(&wave_dir.join("wave.json")).map_err(bad)?;
    let old = wave
        .cells
        .iter()
        .find(|c| c.spec.cell_id == cell_id)
        .ok_or_else(|| bad(format!("{} has no cell {cell_id}", wave_dir.display())))?;
    let (env, scenarios) = env_for(exe, common)?;
    let (s, profile) = scenario::find(&scenarios, &old.spec.scenario_id).ok_or_else(|| {
        bad(format!(
            "scenario {} is not in the scenario directory",
            old.spec.scenario_id
        ))
    })?;
    let run = harness::cell::run_cell(&env, s, &profile, &old.spec);
    println!("{}", report::cell_line(&run.result));
    if run.result.verdict == old.verdict && run.result.outcome.state == old.outcome.state {
        println!(
            "same result as in {}: {} ({})",
            wave.wave_id,
            old.verdict.as_str(),
            old.outcome.state
        );
    } else {
        println!(
            "DIFFERENT from {}: was {} ({}), now {} ({})",
            wave.wave_id,
            old.verdict.as_str(),
            old.outcome.state,
            run.result.verdict.as_str(),
            run.result.outcome.state
        );
    }
    Ok(exit_for(run.result.verdict))
}
