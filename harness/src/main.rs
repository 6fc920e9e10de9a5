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
use harness::model::{CellResult, CellSpec, Fault, RunConfig, Verdict, WaveResult};
use harness::{model, plan, report, scenario, wave};

/// Options every command that runs cells takes. The timeouts are options
/// without a default value here, so `replay` can tell a given value from the
/// one recorded in `wave.json`; [`CellEnv::new`] holds the defaults.
#[derive(Debug, Args, Clone)]
struct Common {
    /// Directory of scenario files [default: the scenarios built into turncut].
    #[arg(long, global = true)]
    scenarios: Option<PathBuf>,
    /// Run this runner instead of `turncut runnerd` (a command line; it must
    /// speak the runnerd CLI and control API).
    #[arg(long, global = true)]
    runner_cmd: Option<String>,
    /// Extra argument for the runner (repeatable), e.g. --runner-arg=--seeded-bug.
    #[arg(long = "runner-arg", global = true, allow_hyphen_values = true)]
    runner_args: Vec<String>,
    /// The runner's provider idle timeout in a cell [default: 500].
    #[arg(long, global = true)]
    idle_timeout_ms: Option<u64>,
    /// The idle timeout in hang-provider cells (a hung provider is found
    /// only by it); capped at --idle-timeout-ms [default: 50].
    #[arg(long, global = true)]
    hang_idle_timeout_ms: Option<u64>,
    /// Deadline of each wait in a cell [default: 15000].
    #[arg(long, global = true)]
    cell_wait_ms: Option<u64>,
    /// Keep every cell's temporary directory.
    #[arg(long, global = true)]
    keep: bool,
}

/// How many cells may fail before a wave stops scheduling new ones: enough
/// to show a pattern, few enough that a runner that cannot work at all ends
/// the wave in minutes rather than hours.
const DEFAULT_MAX_FAIL: usize = 20;

const RUN_EXAMPLES: &str = "Examples:
  turncut run everyday-workflows.runner-codex.local.single-task
  turncut run everyday-workflows.runner-codex.local.single-task \\
      --cut runner.turn_intent.persisted#1 --fault kill-runner

Faults: kill-runner, kill-provider, kill-both, hang-provider.
`turncut boundaries <scenario-id>` lists the cut points.";

const WAVE_EXAMPLES: &str = "Examples:
  turncut wave                                   # every cell of every built-in scenario
  turncut wave --seed 7 --budget 100 --jobs 2    # 100 cells sampled by seed 7
  turncut wave --seed 7 --shard 1/2 --out out/1  # half of a wave (CI matrix)
  turncut report merge out/1 out/2 --out out/all
  turncut wave --only runner-acpx-claude --max-fail 0

Exit codes: 0 all pass, 1 a check failed, 2 bad input, 3 harness error.";

const EXPLORE_EXAMPLES: &str = "Examples:
  turncut explore --time 10m                       # every scenario id
  turncut explore --time 2m --only runner-codex --seed 7
  turncut explore --time 1m --events 3-4           # longer schedules only

A failure prints the original and the minimal schedule and writes a report
(t001 original, t002 minimal) that `turncut replay DIR/cells/t002` re-runs.
Exit codes: 0 nothing failed, 1 a schedule failed, 2 bad input, 3 harness error.";

#[derive(Debug, Subcommand)]
enum Command {
    /// List scenario ids (optionally those containing PATTERN).
    List { pattern: Option<String> },
    /// Print the cut points of a clean traced run of a scenario.
    Boundaries { scenario_id: String },
    /// Run every cell of one scenario, or one cell with --cut and --fault.
    #[command(after_help = RUN_EXAMPLES)]
    Run {
        scenario_id: String,
        /// One cut, `point#n`.
        #[arg(long, requires = "fault")]
        cut: Option<String>,
        /// The fault at the cut.
        #[arg(long, requires = "cut", value_parser = fault_names())]
        fault: Option<String>,
        /// One cell with a schedule of events, `POINT#N/FAULT+POINT#N/FAULT…`:
        /// the first at its per-process occurrence, each later one at the
        /// N-th hit of its point after the event before it.
        #[arg(long, conflicts_with_all = ["cut", "fault"])]
        schedule: Option<String>,
        /// Parallel cells.
        #[arg(long, default_value_t = default_jobs(), value_parser = at_least_one)]
        jobs: u64,
        /// Also write reports here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Stop starting cells after N did not pass (0: never).
        #[arg(long, default_value_t = DEFAULT_MAX_FAIL)]
        max_fail: usize,
    },
    /// Run the wave: every cut point × fault of every scenario.
    #[command(after_help = WAVE_EXAMPLES)]
    Wave {
        /// Wave seed [default: from the clock; printed].
        #[arg(long)]
        seed: Option<u64>,
        /// Run only N cells, sampled by seed.
        #[arg(long, value_parser = at_least_one)]
        budget: Option<u64>,
        /// Run shard I of N (1-based), e.g. 2/4.
        #[arg(long)]
        shard: Option<String>,
        /// Parallel cells.
        #[arg(long, default_value_t = default_jobs(), value_parser = at_least_one)]
        jobs: u64,
        /// Report directory [default: reports/out/<wave-id>].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only scenario ids containing this.
        #[arg(long)]
        only: Option<String>,
        /// Stop starting cells after N did not pass and write the partial
        /// report (0: never).
        #[arg(long, default_value_t = DEFAULT_MAX_FAIL)]
        max_fail: usize,
        /// Run every cell N times and list the cells whose verdict or
        /// recovery path differ (exit 1 if any); no reports are written.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        #[command(flatten)]
        reach: ReachArgs,
    },
    /// Run random schedules of 1-4 events (kills, hangs, follow-ups,
    /// Retries, at boundaries relative to what happened before) until one
    /// fails or the time is up; a failing schedule is shrunk by proptest to
    /// a minimal one, printed with its replay command.
    #[command(after_help = EXPLORE_EXAMPLES)]
    Explore {
        /// Time budget, e.g. 90s, 10m, 1h.
        #[arg(long, default_value = "10m")]
        time: String,
        /// Seed [default: from the clock; printed].
        #[arg(long)]
        seed: Option<u64>,
        /// Only scenario ids containing this.
        #[arg(long)]
        only: Option<String>,
        /// Events per schedule: N or MIN-MAX (at most 8).
        #[arg(long, default_value = "1-4")]
        events: String,
        /// Parallel explorers.
        #[arg(long, default_value_t = default_jobs(), value_parser = at_least_one)]
        jobs: u64,
        /// At most this many candidates while shrinking a failure.
        #[arg(long, default_value_t = 200)]
        shrink_iters: u32,
        /// Runs of a shrinking candidate before it counts as passing.
        #[arg(long, default_value_t = 3, value_parser = at_least_one)]
        attempts: u64,
        /// Report directory for a failure [default: reports/explore/<seed>].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run one cell of a wave again the way the wave ran it (runner command,
    /// runner arguments, timeouts and scenarios from its wave.json; options
    /// given here win). Exit 1 when the result differs from the wave's.
    #[command(
        after_help = "Examples:\n  turncut replay reports/out/w-s7-1a2b3c4d/t042\n  turncut replay out/all/cells/t042 --runner-cmd ./my-runner"
    )]
    Replay { cell: PathBuf },
    /// Reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Run the default wave against every seeded bug of runnerd.
    Mutants {
        #[command(flatten)]
        reach: ReachArgs,
        /// Parallel cells.
        #[arg(long, default_value_t = default_jobs() as usize)]
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
    /// Many tasks on one runner state, the runner SIGKILLed at seeded moments
    /// (the spawn window included) and restarted each time; prints tasks
    /// lost, turns and effects duplicated, and orphan processes.
    ///
    /// Example: turncut crash-round --tasks 50 --kills 8 --seed 1
    CrashRound {
        /// Tasks, all on one runner state.
        #[arg(long, default_value_t = 50)]
        tasks: usize,
        /// Runner SIGKILLs before the final runner.
        #[arg(long, default_value_t = 8)]
        kills: usize,
        /// Seed of the kill moments [default: from the clock; printed].
        #[arg(long)]
        seed: Option<u64>,
        /// How long a round waits for its armed moment before killing anyway.
        #[arg(long, default_value_t = 5_000)]
        round_wait_ms: u64,
    },
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

/// How far a wave reaches beyond one cut per cell.
#[derive(Debug, Args, Clone)]
struct ReachArgs {
    /// 2: the default wave (one-cut cells, scenarios' recuts, controller
    /// actions, depth-2 and schedule cells); 1: one process fault per cell
    /// only (the old depth-1 wave).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    depth: u8,
    /// Depth-2 cells per scenario id (a second event during the recovery
    /// from a first cut, discovered from a traced run).
    #[arg(long, default_value_t = 2)]
    depth2: usize,
    /// Random schedules of 1-4 events per scenario id, drawn by the seed.
    #[arg(long, default_value_t = 2)]
    schedules: usize,
}

impl ReachArgs {
    fn reach(&self) -> wave::Reach {
        if self.depth == 1 {
            return wave::Reach::depth1();
        }
        wave::Reach {
            depth2: self.depth2,
            schedules: self.schedules,
            depth1_only: false,
        }
    }
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

/// The `--fault` values, listed in the help and checked by clap (exit 2
/// with the list and a did-you-mean).
fn fault_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Fault::ALL.map(Fault::as_str))
}

/// Parallel cells by default: twice the cores. A cell's processes mostly
/// wait on each other (measured on 2 cores: the default wave 5 min 37 s at
/// 4 jobs, 7 min 25 s at 2).
fn default_jobs() -> u64 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as u64 * 2)
}

/// A count of at least 1 (`--budget`, `--jobs`): 0 would run nothing and
/// pass.
fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1 (0 would run nothing)".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// Writes `text` to stdout; a closed pipe (`turncut list | head -1`) ends
/// turncut quietly with exit 0 instead of a panic.
fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("turncut: writing to stdout: {e}");
        std::process::exit(3);
    }
}

/// Maps a planning error: a scenario problem found against the boundaries
/// is bad input (exit 2), anything else a harness error.
fn plan_err(e: anyhow::Error) -> Exit {
    match e.downcast_ref::<scenario::ScenarioError>() {
        Some(se) => bad(se),
        None => harness_err(format!("{e:#}")),
    }
}

/// The cell environment and scenarios: options given on the command line,
/// else those `recorded` in a wave.json (replay), else the defaults.
fn env_for(
    exe: &Path,
    common: &Common,
    recorded: Option<&RunConfig>,
) -> Result<(CellEnv, Vec<scenario::Scenario>), Exit> {
    // Cell directories of harness processes that were killed (SIGKILL skips
    // their cleanup) go before new ones are made.
    let swept = harness::tempdirs::sweep_stale();
    if swept > 0 {
        eprintln!("turncut: removed {swept} cell directories left by killed turncut runs");
    }
    let dir = match (
        &common.scenarios,
        recorded.and_then(|r| r.scenarios.as_ref()),
    ) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(d)) if !Path::new(d).is_dir() => {
            return Err(bad(format!(
                "the wave ran the scenarios of {d}, which is not here; pass --scenarios DIR"
            )));
        }
        (None, r) => r.map(PathBuf::from),
    };
    let scenarios = scenario::load(dir.as_deref()).map_err(bad)?;
    let mut env = CellEnv::new(exe, &dir.unwrap_or_default());
    let runner_cmd = match (&common.runner_cmd, recorded) {
        (Some(cmd), _) => Some(cmd.split_whitespace().map(str::to_owned).collect()),
        (None, Some(r)) => r.runner_cmd.clone(),
        (None, None) => None,
    };
    if let Some(cmd) = runner_cmd {
        if cmd.is_empty() {
            return Err(bad("--runner-cmd is empty"));
        }
        env.runner_cmd = cmd;
    }
    env.runner_extra = match recorded {
        Some(r) if common.runner_args.is_empty() => r.runner_args.clone(),
        _ => common.runner_args.clone(),
    };
    let pick = |given: Option<u64>, recorded: Option<u64>, default: u64| {
        given.or(recorded.filter(|v| *v > 0)).unwrap_or(default)
    };
    env.idle_timeout_ms = pick(
        common.idle_timeout_ms,
        recorded.map(|r| r.idle_timeout_ms),
        env.idle_timeout_ms,
    );
    env.hang_idle_timeout_ms = pick(
        common.hang_idle_timeout_ms,
        recorded.map(|r| r.hang_idle_timeout_ms),
        env.hang_idle_timeout_ms,
    );
    env.wait_ms = pick(
        common.cell_wait_ms,
        recorded.map(|r| r.cell_wait_ms),
        env.wait_ms,
    );
    env.keep = common.keep;
    env.recut = !recorded.is_some_and(|r| r.depth1_only);
    Ok((env, scenarios))
}

fn unknown_id(scenarios: &[scenario::Scenario], id: &str) -> Exit {
    let ids: Vec<String> = scenarios.iter().flat_map(|s| s.ids()).collect();
    bad(format!(
        "unknown scenario id {id}{}; `turncut list` shows the ids",
        scenario::did_you_mean(id, ids.iter().map(String::as_str))
    ))
}

/// Creates the report directory before any cell runs, so a bad `--out`
/// (e.g. under a regular file) is bad input, not a loss after the wave.
fn prepare_out(out: &Path) -> Result<(), Exit> {
    if let Err(e) = std::fs::create_dir_all(out) {
        let file = out.ancestors().find(|a| a.is_file());
        return Err(bad(match file {
            Some(f) => format!(
                "--out {}: {} is a file, not a directory",
                out.display(),
                f.display()
            ),
            None => format!("--out {}: cannot create it: {e}", out.display()),
        }));
    }
    tempfile::tempfile_in(out)
        .map(drop)
        .map_err(|e| bad(format!("--out {}: cannot write there: {e}", out.display())))
}

fn run(exe: &Path, cli: WithCommon) -> Result<i32, Exit> {
    let common = cli.common;
    match cli.command {
        Command::Runnerd { .. } | Command::FakeProvider { .. } => {
            unreachable!("dispatched in main")
        }
        Command::CrashRound {
            tasks,
            kills,
            seed,
            round_wait_ms,
        } => crash_round(exe, &common, tasks, kills, seed, round_wait_ms),
        Command::Demo => match harness::demo::run(exe, common.keep) {
            Ok(true) => Ok(0),
            Ok(false) => Ok(1),
            Err(e) => Err(harness_err(format!("demo failed: {e:#}"))),
        },
        Command::List { pattern } => {
            let (_, scenarios) = env_for(exe, &common, None)?;
            let mut text = String::new();
            for s in &scenarios {
                for id in s.ids() {
                    if pattern.as_ref().is_none_or(|p| id.contains(p.as_str())) {
                        text.push_str(&format!("{id}\t{}\n", s.title));
                    }
                }
            }
            emit(&text);
            Ok(0)
        }
        Command::Boundaries { scenario_id } => boundaries(exe, &common, &scenario_id),
        Command::Run {
            scenario_id,
            cut,
            fault,
            schedule,
            jobs,
            out,
            max_fail,
        } => {
            let (env, scenarios) = env_for(exe, &common, None)?;
            let seed = 0;
            let (s, profile) = scenario::find(&scenarios, &scenario_id)
                .ok_or_else(|| unknown_id(&scenarios, &scenario_id))?;
            if let Some(out) = &out {
                prepare_out(out)?;
            }
            let schedule = schedule
                .as_deref()
                .map(model::parse_schedule)
                .transpose()
                .map_err(|e| bad(format!("--schedule: {e}")))?;
            let cells = match (cut, fault) {
                _ if schedule.is_some() => {
                    let events = schedule.expect("checked");
                    let d = plan::discover(&env, s, &profile)
                        .map_err(|e| harness_err(format!("{e:#}")))?;
                    plan::check_schedule(&d.boundaries, &scenario_id, &events).map_err(bad)?;
                    vec![plan::schedule_cell(
                        seed,
                        "t001".into(),
                        scenario_id.clone(),
                        &events,
                    )]
                }
                (Some(cut), Some(fault)) => {
                    let cut = plan::parse_cut(&cut).map_err(|e| bad(format!("{e:#}")))?;
                    let fault = Fault::parse(&fault).expect("clap checked the fault name");
                    let d = plan::discover(&env, s, &profile)
                        .map_err(|e| harness_err(format!("{e:#}")))?;
                    plan::check_cut(&d.boundaries, &scenario_id, &cut, fault).map_err(bad)?;
                    plan::number(seed, vec![(scenario_id.clone(), Some(cut), Some(fault))])
                }
                _ => wave::plan_cells(
                    &env,
                    &scenarios,
                    std::slice::from_ref(&scenario_id),
                    seed,
                    false,
                    wave::Reach::default(),
                )
                .map_err(plan_err)?,
            };
            let planned = cells.len();
            run_and_report(&Job {
                env: &env,
                scenarios: &scenarios,
                cells,
                planned,
                jobs: jobs as usize,
                seed,
                shard: None,
                out: out.as_deref(),
                wave_id: format!("run-{scenario_id}"),
                max_fail,
            })
        }
        Command::Wave {
            seed,
            budget,
            shard,
            jobs,
            out,
            only,
            max_fail,
            repeat,
            reach,
        } => {
            let (mut env, scenarios) = env_for(exe, &common, None)?;
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
            if let Some(out) = &out {
                prepare_out(out)?;
            }
            eprintln!("turncut wave (seed {seed}, jobs {jobs})");
            let reach = reach.reach();
            env.recut = !reach.depth1_only;
            let cells =
                wave::plan_cells(&env, &scenarios, &ids, seed, false, reach).map_err(plan_err)?;
            let cells = plan::sample(cells, budget.map(|b| b as usize), seed);
            // One id for every shard of this wave: the seed and the cells
            // planned before sharding.
            let wave_id = wave::wave_id(seed, &cells);
            let cells = match shard {
                Some((i, n)) => plan::shard(cells, i, n),
                None => cells,
            };
            if repeat > 1 {
                return Ok(report_repeats(&wave::run_repeated(
                    &env,
                    &scenarios,
                    &cells,
                    jobs as usize,
                    repeat,
                )));
            }
            let out = out.unwrap_or_else(|| PathBuf::from("reports/out").join(&wave_id));
            prepare_out(&out)?;
            eprintln!("wave {wave_id}: {} cells", cells.len());
            let planned = cells.len();
            run_and_report(&Job {
                env: &env,
                scenarios: &scenarios,
                cells,
                planned,
                jobs: jobs as usize,
                seed,
                shard,
                out: Some(&out),
                wave_id,
                max_fail,
            })
        }
        Command::Replay { cell } => replay(exe, &common, &cell),
        Command::Explore {
            time,
            seed,
            only,
            events,
            jobs,
            shrink_iters,
            attempts,
            out,
        } => explore(
            exe,
            &common,
            &ExploreArgs {
                time,
                seed,
                only,
                events,
                jobs: jobs as usize,
                shrink_iters,
                attempts: attempts as usize,
                out,
            },
        ),
        Command::Report {
            command: ReportCommand::Merge { dirs, out },
        } => merge(&dirs, &out),
        Command::Mutants {
            reach,
            jobs,
            bugs,
            budget,
            profiles,
            full,
        } => harness::mutants::run(
            exe,
            &common.scenarios,
            &harness::mutants::Selection {
                jobs,
                only: bugs.as_deref(),
                budget,
                profiles: profiles.as_deref(),
                full,
                reach: reach.reach(),
            },
        )
        .map_err(|e| harness_err(format!("{e:#}"))),
    }
}

fn boundaries(exe: &Path, common: &Common, scenario_id: &str) -> Result<i32, Exit> {
    let (env, scenarios) = env_for(exe, common, None)?;
    let (s, profile) = scenario::find(&scenarios, scenario_id)
        .ok_or_else(|| unknown_id(&scenarios, scenario_id))?;
    let d = plan::discover(&env, s, &profile).map_err(|e| harness_err(format!("{e:#}")))?;
    let mut text = format!(
        "{scenario_id}: {} boundaries (clean run: {}, {} ms)\n",
        d.boundaries.len(),
        d.clean_state,
        d.clean_ms
    );
    for b in &d.boundaries {
        text.push_str(&format!(
            "{:<9} {:<60} {}\n",
            b.role,
            b.cut.to_string(),
            if b.provider_alive {
                "provider alive"
            } else {
                "no provider"
            }
        ));
    }
    emit(&text);
    Ok(if d.clean_verdict == Verdict::Pass {
        0
    } else {
        1
    })
}

/// `turncut report merge`: joins the shards, copies their `cells/`
/// directories and writes the merged reports.
fn merge(dirs: &[PathBuf], out: &Path) -> Result<i32, Exit> {
    let mut waves = Vec::new();
    for d in dirs {
        waves.push(report::read_wave(&d.join("wave.json")).map_err(bad)?);
    }
    let merged = report::merge(waves).map_err(bad)?;
    prepare_out(out)?;
    clear_old_cells(out)?;
    for d in dirs {
        let cells = d.join("cells");
        if cells.is_dir() {
            copy_dir(&cells, &out.join("cells"))
                .map_err(|e| harness_err(format!("copying {}: {e}", cells.display())))?;
        }
    }
    report::write_wave(out, &merged).map_err(harness_err)?;
    append_step_summary(&merged);
    emit(&report::summary_markdown(&merged));
    Ok(exit_for(merged.verdict()))
}

/// Removes the `cells/` of an earlier report in `out` (a wave id is the
/// same for the same seed, so `reports/out/<wave-id>` is written again):
/// a cell that failed then and passes now must not keep its old directory.
fn clear_old_cells(out: &Path) -> Result<(), Exit> {
    let cells = out.join("cells");
    if !out.join(report::WAVE_JSON).is_file() || !cells.is_dir() {
        return Ok(());
    }
    std::fs::remove_dir_all(&cells)
        .map_err(|e| harness_err(format!("removing the old {}: {e}", cells.display())))
}

/// Copies a directory tree (file modes too, so `reproduce.sh` stays
/// executable).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Appends the summary to `$GITHUB_STEP_SUMMARY` when it is set (GitHub
/// Actions); a failure to write it is reported but does not fail the wave.
fn append_step_summary(wave: &WaveResult) {
    let Ok(path) = std::env::var("GITHUB_STEP_SUMMARY") else {
        return;
    };
    use std::io::Write as _;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(report::summary_markdown(wave).as_bytes()));
    if let Err(e) = written {
        eprintln!("turncut: appending to $GITHUB_STEP_SUMMARY ({path}): {e}");
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

/// Cells to run and how to report them.
struct Job<'a> {
    env: &'a CellEnv,
    scenarios: &'a [scenario::Scenario],
    cells: Vec<CellSpec>,
    planned: usize,
    jobs: usize,
    seed: u64,
    shard: Option<(u32, u32)>,
    out: Option<&'a Path>,
    wave_id: String,
    max_fail: usize,
}

fn run_and_report(job: &Job<'_>) -> Result<i32, Exit> {
    let started = Instant::now();
    let max_fail = (job.max_fail > 0).then_some(job.max_fail);
    wave::install_interrupt_handler();
    let finished = wave::run_cells_until(
        job.env,
        job.scenarios,
        &job.cells,
        job.jobs,
        max_fail.map(wave::StopAfter::NotPassing),
    );
    let stopped = wave::stop_reason(job.planned, &finished, max_fail);
    let result = wave::wave_result(
        &wave::WaveMeta {
            wave_id: job.wave_id.clone(),
            seed: job.seed,
            shard: job.shard,
            jobs: job.jobs,
            run: wave::run_config(job.env, job.scenarios),
        },
        started,
        &finished,
        job.planned,
        stopped,
    );
    if let Some(out) = job.out {
        write_reports(job.env, out, &result, &finished)?;
    }
    print_outcome(&result);
    Ok(exit_for(result.verdict()).max(i32::from(result.not_run > 0)))
}

/// The reports, and `cells/t###/` (evidence, timeline, reproduce.sh) for
/// every cell that did not pass.
fn write_reports(
    env: &CellEnv,
    out: &Path,
    result: &WaveResult,
    finished: &[wave::Finished],
) -> Result<(), Exit> {
    let timelines: report::Timelines = finished
        .iter()
        .filter(|f| !f.timeline.is_empty())
        .map(|f| (f.result.spec.cell_id.clone(), f.timeline.clone()))
        .collect();
    clear_old_cells(out)?;
    report::write_wave_with(out, result, &timelines).map_err(harness_err)?;
    for f in finished {
        let Some(ev) = &f.evidence else { continue };
        let dir = out.join("cells").join(&f.result.spec.cell_id);
        let write = || -> std::io::Result<()> {
            ev.write(&dir)?;
            std::fs::write(dir.join("timeline.txt"), &f.timeline)?;
            let script = dir.join("reproduce.sh");
            std::fs::write(&script, wave::reproduce_script(env, &f.result))?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        };
        write().map_err(|e| harness_err(format!("failed to write {}: {e}", dir.display())))?;
    }
    append_step_summary(result);
    eprintln!("reports in {}", out.display());
    Ok(())
}

fn print_outcome(result: &WaveResult) {
    let counts = |v: Verdict| result.cells.iter().filter(|c| c.verdict == v).count();
    let mut times: Vec<u64> = result.cells.iter().map(|c| c.duration_ms).collect();
    times.sort_unstable();
    let median = times.get(times.len() / 2).copied().unwrap_or(0);
    let mut text = format!(
        "{}: {} cells, {} pass, {} unknown, {} fail; median cell {median} ms; wall {:.1} s\n",
        result.wave_id,
        result.cells.len(),
        counts(Verdict::Pass),
        counts(Verdict::Unknown),
        counts(Verdict::Fail),
        result.duration_ms as f64 / 1000.0
    );
    if let Some(why) = &result.stopped {
        text.push_str(&format!("NOT COMPLETE: {why}\n"));
    }
    for c in result.cells.iter().filter(|c| c.verdict != Verdict::Pass) {
        text.push_str(&format!(
            "  {}\n    reproduce: {}\n",
            report::cell_line(c),
            c.reproduce
        ));
    }
    emit(&text);
}

/// The wave directory and cell id of `<wave-dir>/t###` or
/// `<wave-dir>/cells/t###`.
fn cell_path(cell: &Path) -> Result<(PathBuf, String), Exit> {
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
    Ok((wave_dir, cell_id))
}

fn replay(exe: &Path, common: &Common, cell: &Path) -> Result<i32, Exit> {
    let (wave_dir, cell_id) = cell_path(cell)?;
    let wave = report::read_wave(&wave_dir.join("wave.json")).map_err(bad)?;
    let old = wave
        .cells
        .iter()
        .find(|c| c.spec.cell_id == cell_id)
        .ok_or_else(|| bad(format!("{} has no cell {cell_id}", wave_dir.display())))?;
    let version = env!("CARGO_PKG_VERSION");
    if !wave.run.turncut_version.is_empty() && wave.run.turncut_version != version {
        eprintln!(
            "turncut: warning: the wave ran on turncut {}, this is {version}",
            wave.run.turncut_version
        );
    }
    let (env, scenarios) = env_for(exe, common, Some(&wave.run))?;
    if scenario::find(&scenarios, &old.spec.scenario_id).is_none() {
        return Err(bad(format!(
            "scenario {} is not in the scenarios; pass the wave's --scenarios DIR",
            old.spec.scenario_id
        )));
    }
    let run = wave::run_one(&env, &scenarios, &old.spec);
    let new = &run.result;
    let failing = |c: &CellResult| -> Vec<String> {
        c.oracles
            .iter()
            .filter(|o| o.verdict != Verdict::Pass)
            .map(|o| format!("{} {}", o.oracle, o.verdict.as_str()))
            .collect()
    };
    let same = new.verdict == old.verdict
        && new.outcome.state == old.outcome.state
        && failing(new) == failing(old);
    let mut text = format!("{}\n", report::cell_line(new));
    let describe = |c: &CellResult| {
        format!(
            "{} ({}{})",
            c.verdict.as_str(),
            c.outcome.state,
            failing(c)
                .iter()
                .map(|f| format!(", {f}"))
                .collect::<String>()
        )
    };
    if same {
        text.push_str(&format!(
            "same result as in {}: {}\n",
            wave.wave_id,
            describe(old)
        ));
    } else {
        text.push_str(&format!(
            "DIFFERENT from {}: was {}, now {}\n",
            wave.wave_id,
            describe(old),
            describe(new)
        ));
    }
    emit(&text);
    Ok(if same { exit_for(new.verdict) } else { 1 })
}

fn crash_round(
    exe: &Path,
    common: &Common,
    tasks: usize,
    kills: usize,
    seed: Option<u64>,
    round_wait_ms: u64,
) -> Result<i32, Exit> {
    if tasks == 0 {
        return Err(bad("--tasks must be at least 1"));
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    eprintln!("crash round: {tasks} tasks, {kills} runner kills, seed {seed}");
    let opts = harness::crash_round::Options {
        tasks,
        kills,
        seed,
        wait: std::time::Duration::from_millis(common.cell_wait_ms.unwrap_or(0).max(60_000)),
        round_wait: std::time::Duration::from_millis(round_wait_ms),
        keep: common.keep,
    };
    let figures = harness::crash_round::run(exe, &opts)
        .map_err(|e| harness_err(format!("crash round failed: {e:#}")))?;
    print!("{}", harness::crash_round::render(&figures));
    Ok(if figures.clean() { 0 } else { 1 })
}

struct ExploreArgs {
    time: String,
    seed: Option<u64>,
    only: Option<String>,
    events: String,
    jobs: usize,
    shrink_iters: u32,
    attempts: usize,
    out: Option<PathBuf>,
}

fn explore(exe: &Path, common: &Common, args: &ExploreArgs) -> Result<i32, Exit> {
    use harness::explore as ex;
    let budget = humantime::parse_duration(&args.time)
        .map_err(|e| bad(format!("--time {:?}: {e}; e.g. 90s, 10m, 1h", args.time)))?;
    if budget.is_zero() {
        return Err(bad("--time 0 would explore nothing; give e.g. 90s or 10m"));
    }
    let events = ex::parse_event_count(&args.events).map_err(bad)?;
    let (env, scenarios) = env_for(exe, common, None)?;
    let ids = matching_ids(&scenarios, args.only.as_deref())?;
    let seed = args.seed.unwrap_or_else(clock_seed);
    eprintln!(
        "turncut explore (seed {seed}, {} scenario ids, {} events per schedule, {} job(s), {})",
        ids.len(),
        args.events,
        args.jobs,
        args.time
    );
    let targets = ex::targets(&env, &scenarios, &ids).map_err(plan_err)?;
    let opts = ex::Options {
        budget,
        seed,
        events,
        jobs: args.jobs,
        shrink_iters: args.shrink_iters,
        attempts: args.attempts,
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
    let Some(found) = explored.found else {
        println!("no schedule failed");
        return Ok(0);
    };
    report_found(&env, &scenarios, seed, args, found)
}

fn report_found(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    seed: u64,
    args: &ExploreArgs,
    found: harness::explore::Found,
) -> Result<i32, Exit> {
    use harness::explore as ex;
    let mut original = found.original;
    let mut minimal = found.minimal;
    original.result.spec.cell_id = "t001".into();
    minimal.result.spec.cell_id = "t002".into();
    let schedule =
        |f: &wave::Finished| model::format_schedule(&f.result.spec.schedule().unwrap_or_default());
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
            jobs: args.jobs,
            run: wave::run_config(env, scenarios),
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
    Ok(1)
}

/// The scenario ids containing `only` (all without it); none is bad input.
fn matching_ids(scenarios: &[scenario::Scenario], only: Option<&str>) -> Result<Vec<String>, Exit> {
    let ids: Vec<String> = scenarios
        .iter()
        .flat_map(|s| s.ids())
        .filter(|id| only.is_none_or(|o| id.contains(o)))
        .collect();
    if ids.is_empty() {
        return Err(bad(
            "no scenario matches --only; `turncut list` shows the ids",
        ));
    }
    Ok(ids)
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}
