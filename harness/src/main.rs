//! The `turncut` binary: the harness CLI, and a multi-call entry point so that
//! `turncut fake-provider …` and `turncut runnerd …` run the fakes and the
//! runner from the same build. The dispatch calls only each program's `main`;
//! the harness itself never uses runner internals.
//!
//! This file holds the command line (every flag and help text) and the
//! dispatch; each subcommand's work is in `cmd/`.
//!
//! Exit codes: 0 all pass, 1 an oracle failed (or gave no verdict), 2 bad
//! input, 3 harness error.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use harness::model::Fault;
use harness::wave;

mod cmd;

use cmd::{Code, Exit, harness_err};

/// Options every command that runs cells takes. The timeouts are options
/// without a default value here, so `replay` can tell a given value from the
/// one recorded in `wave.json`; [`harness::cell::CellEnv::new`] holds the
/// defaults.
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
    /// CPU pressure: N busy worker processes beside the cells for the whole
    /// command (recorded in wave.json), to check that verdicts and the
    /// runner's timeouts hold on a loaded host.
    #[arg(long, global = true, default_value_t = 0)]
    stress: usize,
    /// How progress and the outcome are shown: `human` (stderr, a progress
    /// bar on a terminal; the outcome on stdout) or `json` (one JSON object
    /// per line on stdout: `note`, `batch`, `cell`, `wave`, `mutants`; README.md, "Everyday use").
    #[arg(long, global = true, default_value = "human", value_parser = ["human", "json"])]
    message_format: String,
    /// The reporters of the command's progress, built from the command
    /// line once it is parsed (`--message-format`); not a flag.
    #[arg(skip)]
    progress: harness::progress::Progress,
}

/// How many cells may fail before a wave stops scheduling new ones: enough
/// to show a pattern, few enough that a runner that cannot work at all ends
/// the wave in minutes rather than hours.
const DEFAULT_MAX_FAIL: usize = 20;

const RUN_EXAMPLES: &str = "Examples:
  turncut run everyday-workflows.runner-codex.local.single-task
  turncut run everyday-workflows.runner-codex.local.single-task \\
      --cut runner.turn_intent.persisted#1 --fault kill-runner

Faults: kill-runner, kill-provider, kill-both, hang-provider, power-cut (the
state and the workspace on lazy mounts: every unsynced write lost; needs FUSE),
follow-up, retry, fail-write, disk-full (at runner.write.* points), fail-read,
corrupt-read (at runner.read.* points).
`turncut boundaries <scenario-id>` lists the cut points.";

const WAVE_EXAMPLES: &str = "Examples:
  turncut wave                                   # every cell of every built-in scenario
  turncut wave --seed 7 --budget 100 --jobs 2    # 100 cells sampled by seed 7
  turncut wave --seed 7 --shard 1/2 --out out/1  # stage 1 of half a wave (CI matrix;
                                                 # stage 2: see turncut plan --help)
  turncut wave --only runner-acpx-claude --max-fail 0

Exit codes: 0 all pass, 1 a check failed, 2 bad input, 3 harness error.";

const PLAN_EXAMPLES: &str = "Examples:
  turncut plan --seed 7 --out plan.json          # prints the wave id
  turncut wave --plan plan.json --shard 1/2 --out out/1   # stage 1, half
  turncut wave --plan plan.json --shard 2/2 --out out/2
  turncut plan --stage2 out/1 out/2 --out plan2.json      # stage 2 from both halves
  turncut wave --plan plan2.json --shard 1/2 --out out/3
  turncut wave --plan plan2.json --shard 2/2 --out out/4
  turncut report merge out/1 out/2 out/3 out/4 --out out/all

The plan holds every cell, the runner command and the timeouts; a shard runs
exactly its cells, whatever its machine's load, so the shards of one plan
always merge. Stage 2 (every recovery cut of the paths stage 1 walked)
follows from every shard's stage-1 results, so it is planned once they are
all in; the merged report equals `turncut wave --plan plan.json` unsharded.
Exit codes: 0 planned, 2 bad input, 3 harness error.";

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
    Run(RunArgs),
    /// Run the wave: every cut point × fault of every scenario.
    #[command(after_help = WAVE_EXAMPLES)]
    Wave(WaveArgs),
    /// Plan a wave once, to run anywhere (`turncut wave --plan FILE
    /// --shard I/N`): every cell, written to --out; prints the wave id.
    #[command(after_help = PLAN_EXAMPLES)]
    Plan(PlanArgs),
    /// Run random schedules of 1-4 events (kills, hangs, follow-ups,
    /// Retries, at boundaries relative to what happened before) until one
    /// fails or the time is up; a failing schedule is shrunk by proptest to
    /// a minimal one, printed with its replay command.
    #[command(after_help = EXPLORE_EXAMPLES)]
    Explore(ExploreArgs),
    /// Run one cell of a wave again the way the wave ran it (runner command,
    /// runner arguments, timeouts and scenarios from its wave.json; options
    /// given here win). Exit 1 when the result differs from the wave's.
    #[command(
        after_help = "Examples:\n  turncut replay reports/out/w-s7-1a2b3c4d/t042\n  turncut replay out/all/cells/t042 --runner-cmd ./my-runner"
    )]
    Replay { cell: PathBuf },
    /// Run the oracles again on a saved cell's evidence (a wave report's
    /// `cells/t###`, or its evidence.json), nothing else run: how an oracle
    /// change is checked against old evidence. Exit 0 when every oracle
    /// passes, 1 when one fails or cannot decide, 2 when there is no
    /// evidence there.
    #[command(
        after_help = "Examples:\n  turncut judge reports/out/w-s7-1a2b3c4d/cells/t042\n  turncut judge saved/evidence.json"
    )]
    Judge { cell: PathBuf },
    /// Reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Run the default wave against every seeded bug of runnerd.
    Mutants(MutantsArgs),
    /// The real products of the `*-real` profiles: where each pinned
    /// program is, or why it is missing; `--install` installs the missing
    /// ones with npm (under target/npm, or $TURNCUT_NPM_PREFIX).
    Providers {
        /// Install the missing ones with npm.
        #[arg(long)]
        install: bool,
    },
    /// The crash-semantics differential of each real product and its fake
    /// (the real codex app-server and fake codex, the real opencode serve
    /// and fake OpenCode, the real ACP agents and fake ACP): kill each at a
    /// moment both can be cut at, or fail its turn's model request with each
    /// upstream fault (every product but `opencode acp`), restart it on the
    /// same state and compare what a recovering runner reads back, field by
    /// field. Exit 0 when every
    /// difference is explained, 1 when one is not or a product is missing
    /// (`turncut providers --install`), 2 on a bad argument.
    ///
    /// Example: turncut fidelity --only runner-codex-real --moments upstream
    Fidelity(cmd::providers::FidelityArgs),
    /// Check a runner (--runner-cmd; runnerd by default) against the runner
    /// contract (docs/runner-contract.md) before a wave: it starts it as a
    /// cell does, makes every call of the spec, runs a clean task per
    /// profile it claims and a traced clean cell, and prints which oracles
    /// can judge it and how many boundaries a wave cuts. Exit 0 when a wave
    /// can run, 2 with the first missing piece and where the spec says it.
    ///
    /// Example: turncut doctor --runner-cmd './my-runner --verbose' --profile runner-codex
    Doctor {
        /// Only these fake profiles (repeatable) [default: every one].
        #[arg(long = "profile")]
        profiles: Vec<String>,
    },
    /// Drive the fake Codex provider through a turn and a crash sweep.
    Demo,
    /// Many tasks on one runner state, the runner SIGKILLed at seeded moments
    /// (the spawn window included) and restarted each time; prints tasks
    /// lost, turns and effects duplicated, and orphan processes.
    ///
    /// Example: turncut crash-round --tasks 50 --kills 8 --seed 1
    CrashRound(CrashRoundArgs),
    /// A lazy file system (docs/lazyfs.md): a FUSE passthrough that drops,
    /// at a power cut, every write not yet made durable.
    Lazyfs {
        #[command(subcommand)]
        command: LazyfsCommand,
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

#[derive(Debug, Subcommand)]
enum LazyfsCommand {
    /// Serve BACKING at MOUNTPOINT in the foreground. SIGUSR1 cuts the
    /// power (BACKING becomes the durable image, mounted again; the changes
    /// are printed); SIGTERM or Ctrl-C unmounts, prints the counters (writes,
    /// bytes, fsyncs per path) and exits 0. Every process using the mount
    /// must be gone before a cut. Exit 2 on a bad directory, 3 when FUSE
    /// cannot be used here.
    ///
    /// Example: turncut lazyfs mount /tmp/b /tmp/m & … kill -USR1 %1
    Mount {
        backing: PathBuf,
        mountpoint: PathBuf,
    },
}

// The argument structs of the subcommands below carry no doc comment: the
// variant's comment above is the subcommand's help.

#[derive(Debug, Args)]
struct RunArgs {
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
}

#[derive(Debug, Args)]
struct WaveArgs {
    /// Run exactly the cells of this plan (`turncut plan --out FILE`): no
    /// planning, whatever this machine's load; the selection options below
    /// are the plan's.
    #[arg(long)]
    plan: Option<PathBuf>,
    #[command(flatten)]
    select: SelectArgs,
    /// Run shard I of N (1-based), e.g. 2/4: whole groups of scenario ids
    /// (a profile and a scenario shape). A shard runs stage 1 only and
    /// leaves its plan in --out: `turncut plan --stage2` plans stage 2 from
    /// every shard's results.
    #[arg(long)]
    shard: Option<String>,
    /// Parallel cells (and clean runs traced while planning).
    #[arg(long, default_value_t = default_jobs(), value_parser = at_least_one)]
    jobs: u64,
    /// Report directory [default: reports/out/<wave-id>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Stop starting cells after N did not pass and write the partial
    /// report (0: never).
    #[arg(long, default_value_t = DEFAULT_MAX_FAIL)]
    max_fail: usize,
    /// Run every cell N times and list the cells whose verdict or
    /// recovery path differ (exit 1 if any); no reports are written.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
}

/// What a wave runs: `turncut plan` and `turncut wave` take the same.
#[derive(Debug, Args, Clone, PartialEq, Eq)]
struct SelectArgs {
    /// Wave seed [default: from the clock; printed].
    #[arg(long)]
    seed: Option<u64>,
    /// Run only N cells, sampled by seed.
    #[arg(long, value_parser = at_least_one)]
    budget: Option<u64>,
    /// Only scenario ids containing this (a real product's ids only when it
    /// names the profile, e.g. --only runner-codex-real).
    #[arg(long)]
    only: Option<String>,
    /// Also the real products' scenario ids (runner-codex-real,
    /// runner-opencode-real), sampled to 40 cells per id; a product that is
    /// not installed is listed as skipped.
    #[arg(long)]
    real: bool,
    #[command(flatten)]
    reach: ReachArgs,
}

#[derive(Debug, Args)]
struct PlanArgs {
    #[command(flatten)]
    select: SelectArgs,
    /// Plan stage 2 instead: from the report directories of every shard's
    /// stage 1 (`turncut wave --plan PLAN --shard I/N --out DIR`, which
    /// leaves its plan in DIR), the recovery cuts of the paths they walked,
    /// as a plan to run in shards too; then `report merge` all of them.
    #[arg(long, num_args = 1.., value_name = "DIR")]
    stage2: Vec<PathBuf>,
    /// Parallel traced runs while planning (stage 1's clean runs, stage 2's
    /// recoveries).
    #[arg(long, default_value_t = default_jobs(), value_parser = at_least_one)]
    jobs: u64,
    /// Where to write the plan (JSON).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct ExploreArgs {
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
    /// Generated workflows instead of the scenario files: controller
    /// programs drawn by a state machine (follow-ups at every moment, the
    /// same follow-up again, Retries, the same Retry again, 1-3 tasks on
    /// one runner, scripts of 1-3 turns), each traced clean and run under
    /// drawn schedules; --only
    /// picks profiles (a profile's whole name picks it alone, a part of one
    /// every profile containing it) [default: the four fakes].
    #[arg(long)]
    workflows: bool,
    /// With --workflows: schedules run per program after its clean run.
    #[arg(long, default_value_t = 4, requires = "workflows")]
    per_program: usize,
    /// With --workflows: write the shrunk failing program as a scenario
    /// file into DIR (its `[chaos] schedules` holds the shrunk schedule),
    /// ready to add to scenarios/ as a regression.
    #[arg(long, value_name = "DIR", requires = "workflows")]
    emit_scenario: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct MutantsArgs {
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
    /// Plan the control (the cells of an id a bug cannot plan) but do not
    /// run it: checking a few bugs again takes minutes, not the control's
    /// whole wave. The table then says the control did not run, and exit 0
    /// means only that every bug run was caught.
    #[arg(long)]
    no_control: bool,
    /// The seed the cells are planned, drawn (random schedules, stage 2)
    /// and sampled with.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Debug, Args)]
struct CrashRoundArgs {
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
}

/// How far a wave reaches beyond one cut per cell.
#[derive(Debug, Args, Clone, PartialEq, Eq)]
struct ReachArgs {
    /// 2: the default wave (one-cut cells, scenarios' recuts, controller
    /// actions, depth-2 and schedule cells); 1: one process fault per cell
    /// only (the old depth-1 wave).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    depth: u8,
    /// Random depth-2 cells per scenario id (a second event at a boundary
    /// of the recovery from a first cut drawn by the seed); the recovery
    /// cuts of stage 2 cut every boundary of every path's recovery anyway.
    #[arg(long, default_value_t = 0)]
    depth2: usize,
    /// Stage 2 off: no recovery cuts after the one-cut cells.
    #[arg(long)]
    no_recuts: bool,
    /// Random schedules of 1-4 events per scenario id, drawn by the seed.
    #[arg(long, default_value_t = 2)]
    schedules: usize,
    /// Generated controller programs added to the scenarios (drawn by the
    /// seed, each on every fake profile; ids `generated.PROFILE.local.seedS-pN`,
    /// which `turncut run` finds again without a file); 0: none.
    #[arg(long, default_value_t = 2)]
    workflows: usize,
    /// Random schedules of 1-4 events per generated program and profile,
    /// beside its clean run.
    #[arg(long, default_value_t = 6)]
    workflow_schedules: usize,
}

impl SelectArgs {
    /// Whether any selection option was given (they are the plan's with
    /// `--plan`).
    fn given(&self) -> bool {
        use clap::FromArgMatches as _;
        let defaults = clap::Command::new("defaults");
        let defaults = <SelectArgs as Args>::augment_args(defaults).get_matches_from(["defaults"]);
        let defaults = SelectArgs::from_arg_matches(&defaults).expect("the defaults parse");
        *self != defaults
    }

    /// The options as a command line, for a plan's `selection`.
    fn command_line(&self, seed: u64) -> String {
        let mut words = vec![format!("--seed {seed}")];
        if let Some(b) = self.budget {
            words.push(format!("--budget {b}"));
        }
        if let Some(o) = &self.only {
            words.push(format!("--only {o}"));
        }
        if self.real {
            words.push("--real".into());
        }
        let r = &self.reach;
        words.push(format!(
            "--depth {} --depth2 {} --schedules {} --workflows {} --workflow-schedules {}",
            r.depth, r.depth2, r.schedules, r.workflows, r.workflow_schedules
        ));
        if r.no_recuts {
            words.push("--no-recuts".into());
        }
        words.join(" ")
    }
}

impl ReachArgs {
    fn reach(&self) -> wave::Reach {
        if self.depth == 1 {
            return wave::Reach::depth1();
        }
        wave::Reach {
            depth2: self.depth2,
            schedules: self.schedules,
            recuts: !self.no_recuts,
            depth1_only: false,
            workflows: self.workflows,
            workflow_schedules: self.workflow_schedules,
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

fn main() {
    // A lazy mount's guard (the `turncut` that mounted starts this binary
    // as one, `lazyfs::GuardProgram`) serves and exits here.
    lazyfs::serve_guard_if_asked();
    cutpoint::die_with_parent();
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
    if args
        .get(1)
        .is_some_and(|a| a == harness::stress::WORKER_ARG)
    {
        harness::stress::work();
    }
    if args.get(1).is_some_and(|a| a == "runnerd") {
        let forwarded = std::iter::once(OsString::from("runnerd")).chain(args[2..].iter().cloned());
        std::process::exit(runner::cli::main(forwarded));
    }
    large_buffers_mapped();
    let cli = match WithCommon::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(&exe, cli) {
        Ok(code) => std::process::exit(code.status()),
        Err(Exit(code, message)) => {
            eprintln!("turncut: {message}");
            std::process::exit(code.status());
        }
    }
}

/// Serves every allocation of 1 MiB or more with fresh pages of its own.
/// A lazy mount's FUSE session (`fuser`) allocates a zeroed 16 MiB read
/// buffer; once glibc has freed one mapped chunk that large it raises its
/// threshold and serves the next from a heap, where `calloc` writes all
/// 16 MiB (4,096 pages faulted in, per power-cut cell) for the few pages a
/// request ever uses. A fresh mapping is zero already and faults in only
/// the pages touched.
fn large_buffers_mapped() {
    // SAFETY: mallopt(3) only sets a parameter of the allocator; it is
    // called before this process starts any thread.
    unsafe {
        nix::libc::mallopt(nix::libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// The `--fault` values, listed in the help and checked by clap (exit 2
/// with the list and a did-you-mean).
fn fault_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(Fault::ALL.map(Fault::as_str))
}

/// Parallel cells by default: four per core. A cell's processes mostly
/// wait on each other: alone, a cell keeps a core 30 % busy. Measured on 2
/// cores, the default wave at seed 1 took 6 min 53 s at 8 jobs and 7 min
/// 52 s at 4, the same CPU (693 s) in both, no cell unknown and no rerun
/// (docs/ci.md, "The default wave, quiet (2026-12-07, a third pass)"); at 6
/// jobs it had cost more CPU a cell than at 4 before a provider's stop read
/// every process's environment once instead of three times.
fn default_jobs() -> u64 {
    std::thread::available_parallelism().map_or(4, |n| n.get() as u64 * 4)
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

/// Runs a parsed command; `Ok` is the exit code.
/// `--message-format json` promises JSON lines only on stdout: the commands
/// whose output is the progress stream (`run`, `wave`, `mutants`) take it;
/// the others print tables and text for people, and refuse it (exit 2)
/// rather than mix the two.
fn json_output_refused(cli: &WithCommon) -> Option<String> {
    let json = harness::report::Format::parse(&cli.common.message_format)
        == Some(harness::report::Format::Json);
    let streams = match &cli.command {
        Command::Run(_) | Command::Mutants(_) => true,
        Command::Wave(args) => args.repeat <= 1,
        _ => false,
    };
    (json && !streams).then(|| {
        "--message-format json: this command prints text for people; JSON lines are for `run`, `wave` (without --repeat) and `mutants`".to_owned()
    })
}

fn run(exe: &Path, cli: WithCommon) -> Result<Code, Exit> {
    if let Some(why) = json_output_refused(&cli) {
        return Err(cmd::bad(why));
    }
    let mut common = cli.common;
    common.progress = harness::report::console(
        harness::report::Format::parse(&common.message_format).unwrap_or_default(),
    );
    // The workers live until the command returns (and die with turncut).
    let stress = harness::stress::Stress::start(exe, common.stress)
        .map_err(|e| harness_err(format!("failed to start --stress workers: {e}")))?;
    if stress.workers() > 0 {
        eprintln!(
            "turncut: --stress {}: {} busy workers beside the cells",
            common.stress,
            stress.workers()
        );
    }
    match cli.command {
        Command::Runnerd { .. } | Command::FakeProvider { .. } => {
            unreachable!("dispatched in main")
        }
        Command::CrashRound(args) => cmd::crash_round::run(exe, &common, &args),
        Command::Lazyfs {
            command:
                LazyfsCommand::Mount {
                    backing,
                    mountpoint,
                },
        } => cmd::lazyfs::mount(&backing, &mountpoint),
        Command::Demo => match harness::demo::run(exe, common.keep) {
            Ok(ok) => Ok(Code::pass_if(ok)),
            Err(e) => Err(harness_err(format!("demo failed: {e:#}"))),
        },
        Command::Doctor { profiles } => cmd::doctor::doctor(exe, &common, &profiles),
        Command::List { pattern } => cmd::list::list(exe, &common, pattern.as_deref()),
        Command::Providers { install } => Ok(cmd::providers::providers(install, &common.progress)),
        Command::Fidelity(args) => Ok(cmd::providers::fidelity(exe, &args, &common.progress)),
        Command::Boundaries { scenario_id } => cmd::list::boundaries(exe, &common, &scenario_id),
        Command::Run(args) => cmd::run::run(exe, &common, args),
        Command::Wave(args) => cmd::wave::wave(exe, &common, args),
        Command::Plan(args) => cmd::wave::plan(exe, &common, args),
        Command::Replay { cell } => cmd::replay::replay(exe, &common, &cell),
        Command::Judge { cell } => cmd::judge::judge(&cell),
        Command::Explore(args) => cmd::explore::explore(exe, &common, &args),
        Command::Report {
            command: ReportCommand::Merge { dirs, out },
        } => cmd::merge::merge(&dirs, &out),
        Command::Mutants(args) => harness::mutants::run(
            exe,
            &common.scenarios,
            &harness::mutants::Selection {
                bugs: &seeded_bugs(),
                jobs: args.jobs,
                only: args.bugs.as_deref(),
                budget: args.budget,
                profiles: args.profiles.as_deref(),
                full: args.full,
                control: !args.no_control,
                reach: args.reach.reach(),
                seed: args.seed,
                progress: &common.progress,
            },
        )
        .map(Code::pass_if)
        .map_err(|e| harness_err(format!("{e:#}"))),
    }
}

/// runnerd's seeded bugs, from its own list (the one definition).
fn seeded_bugs() -> Vec<harness::mutants::Bug> {
    runner::seeded::SeededBug::ALL
        .iter()
        .map(|b| harness::mutants::Bug {
            name: b.as_str(),
            protocols: wire::profiles::BUILTIN
                .iter()
                .map(|p| p.protocol)
                .filter(|&p| b.fires(p))
                .collect(),
        })
        .collect()
}
