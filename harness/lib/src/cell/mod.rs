//! One cell: an isolated run of a scenario with one cut and one fault.
//!
//! The cell gets its own temporary directory (runner state, provider journal
//! and ledger, cut socket) and a runner on a free loopback port. It arms the
//! cut through the runner's environment (which its providers inherit), drives
//! the scenario's steps over HTTP, and when the armed point is reached the cut
//! thread applies the fault (`nemesis`) and restarts what died. After a quiet
//! recovery phase (every wait is an event with a deadline) it collects the
//! evidence, kills what is left, records what survived, and hands the
//! evidence to the oracles. The cell never judges anything itself.
//!
//! Here: the cell's setup and its controller side; `steps` sends the scenario's
//! requests, `faults` is the cut side (the fault applier: it takes the
//! hits and applies each event's fault), `teardown` collects the final
//! evidence.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::evidence::{ActionKind, Evidence, TaskRead};
use crate::model::{CellSpec, Event, Fault, Role};
use crate::nemesis;
use crate::runner_client::RunnerProcess;
use crate::scenario::Scenario;

mod board;
mod doomed;
mod faults;
mod inject;
mod power;
mod reads;
mod reproduce;
mod setup;
mod steps;
mod tasks;
mod teardown;
use board::{Board, Recorder, Records};
pub use doomed::{EVENT_MARK, doomed_in_trace};
pub use inject::injected_message_id;
pub use power::{BACKING_DIR, ON_LAZY_MOUNTS, needs_lazy_mounts};
pub use reproduce::{
    reproduce_args, reproduce_command, reproduce_script, run_config, scenarios_arg,
};
pub use setup::{SYNC_POINT, schedule_of};
use setup::{Setup, turn_active_follow_ups};
use steps::{StepError, StepResult, run_steps};
pub use teardown::read_provider_evidence;
use teardown::teardown;

/// How cells run: programs, bounds and options shared by a wave.
#[derive(Clone, Debug)]
pub struct CellEnv {
    /// The `turncut` executable (runs the fakes).
    pub turncut: PathBuf,
    /// Program and leading arguments of the runner (`turncut runnerd`, or
    /// `--runner-cmd`).
    pub runner_cmd: Vec<String>,
    /// Extra runner arguments (e.g. `--seeded-bug NAME`).
    pub runner_extra: Vec<String>,
    /// The runner's provider idle timeout.
    pub idle_timeout_ms: u64,
    /// The idle timeout in `hang-provider` cells (at most `idle_timeout_ms`):
    /// a hung provider is detected only by it, so it sets those cells' cost.
    pub hang_idle_timeout_ms: u64,
    /// runnerd's `--provider-exit-grace-ms` (how long a provider whose
    /// turns all ended may take to exit on its own); `None`: its default.
    /// Not part of the runner contract, so only `turncut runnerd` gets it.
    pub exit_grace_ms: Option<u64>,
    /// Deadline for each wait of a cell.
    pub wait_ms: u64,
    /// Directory of the scenarios (for reproduce commands); empty for the
    /// scenarios built into turncut.
    pub scenarios_dir: PathBuf,
    /// Keep cell directories.
    pub keep: bool,
    /// Apply a scenario's `recut` (off in a depth-1-only wave).
    pub recut: bool,
    /// `--stress N`, recorded with the wave.
    pub stress: usize,
    /// Where the work these cells are part of reports its progress (the
    /// command's reporters; none by default). The cell itself reports
    /// nothing: the wave, planner and explorer do.
    pub progress: crate::progress::Progress,
}

impl CellEnv {
    /// Defaults for the `turncut` at `exe`.
    pub fn new(exe: &Path, scenarios_dir: &Path) -> CellEnv {
        CellEnv {
            turncut: exe.to_owned(),
            runner_cmd: vec![exe.display().to_string(), "runnerd".to_owned()],
            runner_extra: Vec::new(),
            idle_timeout_ms: 500,
            hang_idle_timeout_ms: 50,
            exit_grace_ms: None,
            wait_ms: 15_000,
            scenarios_dir: scenarios_dir.to_owned(),
            keep: false,
            recut: true,
            stress: 0,
            progress: crate::progress::Progress::default(),
        }
    }
}

impl CellEnv {
    /// Whether the runner is this build's runnerd (`turncut runnerd`), not a
    /// runner of `--runner-cmd`, which may claim fewer profiles.
    pub fn runs_runnerd(&self) -> bool {
        self.runner_cmd == [self.turncut.display().to_string(), "runnerd".to_owned()]
    }
}

/// A finished cell, not yet judged (`crate::judge::judged` does that): its
/// evidence and directory, and how it is run again.
pub struct CellRun {
    /// The cell.
    pub spec: CellSpec,
    /// The evidence.
    pub evidence: Evidence,
    /// Whether it ran: `false` when it could not even get a directory
    /// (`evidence.harness_error` says why), and there is nothing to judge.
    pub ran: bool,
    /// Its wall time.
    pub duration_ms: u64,
    /// The command that runs it again.
    pub reproduce: String,
    /// The cell's directory (removed on drop unless kept).
    pub dir: Option<tempfile::TempDir>,
    /// Where the kept directory is, when kept.
    pub kept: Option<PathBuf>,
}

/// The handles both sides of a cell use: its bounds and files, its setup,
/// the board where they meet and the recorder of what they did (see
/// `board`). Cloned into every thread of the cell; it holds no state of
/// its own.
#[derive(Clone)]
struct Ctx {
    env: CellEnv,
    layout: Layout,
    canary: String,
    setup: Arc<Setup>,
    board: Arc<Board>,
    rec: Recorder,
}

/// What the controller side owns for the whole cell, besides its evidence.
struct Cell {
    /// Where the records of both sides arrive.
    records: std::sync::mpsc::Receiver<board::Record>,
    /// The records collected so far.
    got: Records,
    /// A real product's cell: the product and its fake model API.
    real: Option<RealCell>,
    /// A power-cut cell's lazy mounts (`power::mount_disks`), until the cut
    /// side takes them.
    lazy: Vec<lazyfs::LazyFs>,
    /// Ends the cut side's wait for hits at teardown.
    waker: Option<cutpoint::Waker>,
    /// The cut side, once started; it hands back what it owned.
    cut_side: Option<std::thread::JoinHandle<board::CutReport>>,
}

/// What a cell of a `*-real` profile runs beside the runner.
struct RealCell {
    product: crate::real::Product,
    model_api: crate::real::ModelApi,
}

impl Cell {
    /// The pid of a real product's fake model API, which serves the whole
    /// cell (no provider, never a fault's target).
    fn model_api_pid(&self) -> Option<u32> {
        self.real.as_ref().map(|r| r.model_api.pid())
    }
}

/// Files a cell writes for the fake and the runner.
#[derive(Clone)]
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Runs one cell: its evidence, judged by the caller.
pub fn run_cell(env: &CellEnv, scenario: &Scenario, profile: &str, spec: &CellSpec) -> CellRun {
    run_cell_traced(env, scenario, profile, spec, None)
}

/// Runs one cell; with `trace`, every cut-point hit of the runner and its
/// providers is appended there (discovery).
pub fn run_cell_traced(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
    trace: Option<&Path>,
) -> CellRun {
    // One moment on both clocks: the recorder's times (since `started`)
    // become epoch times by `started_ms`. Taken apart (the epoch after the
    // cell directory was made), every harness time read late by that
    // directory's creation: under --stress 8, a Retry's request 50 ms after
    // the turn the runner started for it, judged the runner's own retry.
    let (started, started_ms) = (Instant::now(), wire::journal::now_ms());
    let events = schedule_of(scenario, spec, env.recut);
    let real_env = real_timeouts(env, profile);
    let env = real_env.as_ref().unwrap_or(env);
    let hang_env = hang_timeout(env, &events, scenario);
    let env = hang_env.as_ref().unwrap_or(env);
    let tmp = match crate::tempdirs::tempdir("cell") {
        Ok(t) => t,
        Err(e) => {
            return harness_failure(
                spec,
                env,
                started,
                format!("failed to create a cell directory: {e}"),
            );
        }
    };
    let layout = Layout {
        dir: tmp.path().to_owned(),
    };
    let canary = format!("turncut-canary-{:016x}", spec.seed);
    let mut ev = new_evidence(env, scenario, spec, &canary, started_ms);
    let (rec, records) = Recorder::new(started);
    let board = Board::default();
    board.update(|s| s.turn_active_left = turn_active_follow_ups(scenario));
    let ctx = Ctx {
        env: env.clone(),
        setup: Arc::new(Setup::new(scenario, events, trace, &layout.dir)),
        layout,
        canary,
        board: Arc::new(board),
        rec,
    };
    run_and_collect(&ctx, records, scenario, profile, spec, &mut ev);
    // A traced run (discovery, the doctor) is the harness's own: `--keep`
    // keeps the cells a person asked for, and says where; it kept these
    // too, silently, and nothing removed them.
    let (dir, kept) = if env.keep && trace.is_none() {
        let path = tmp.keep();
        let _ = crate::tempdirs::mark_kept(&path);
        (None, Some(path))
    } else {
        (Some(tmp), None)
    };
    CellRun {
        spec: spec.clone(),
        evidence: ev,
        ran: true,
        duration_ms: started.elapsed().as_millis() as u64,
        reproduce: reproduce(env, spec),
        dir,
        kept,
    }
}

/// A cell's evidence before it runs: what it is, its canary, its
/// scenario's `[expect]` and script, and a lane for every task after the
/// first.
fn new_evidence(
    env: &CellEnv,
    scenario: &Scenario,
    spec: &CellSpec,
    canary: &str,
    started_ms: u64,
) -> Evidence {
    Evidence {
        started_ms,
        spec: Some(spec.clone()),
        fault: spec.fault(),
        canary: canary.to_owned(),
        expect: scenario.expect.clone(),
        script: Some(scenario.script.clone()),
        runner_idle_timeout_ms: Some(env.idle_timeout_ms),
        other_tasks: scenario
            .tasks()
            .iter()
            .skip(1)
            .map(|t| crate::evidence::TaskLane {
                id: (*t).to_owned(),
                ..Default::default()
            })
            .collect(),
        ..Evidence::default()
    }
}

/// Drives the cell and tears it down, collecting its evidence in `ev`: a
/// harness error is the controller side's, else the cut side's last one.
fn run_and_collect(
    ctx: &Ctx,
    records: std::sync::mpsc::Receiver<board::Record>,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
    ev: &mut Evidence,
) {
    let mut cell = Cell {
        records,
        got: Records::default(),
        real: None,
        lazy: Vec::new(),
        waker: None,
        cut_side: None,
    };
    match drive(ctx, &mut cell, scenario, profile, spec, ev) {
        Ok(()) => {}
        // A step the runner never answered ran out of time: the runner's
        // doing (liveness judges it); the cell still says it stopped short.
        Err(StepError::DeadlineMissed(why)) => {
            deadline_passed(ctx, ev);
            ev.harness_error = Some(why);
        }
        Err(StepError::Harness(e)) => ev.harness_error = Some(format!("{e:#}")),
    }
    // What the cut side could not do while the steps ran (the last of it).
    cell.got.drain(&cell.records);
    if let Some(e) = cell.got.errors.last() {
        ev.harness_error.get_or_insert(e.clone());
    }
    teardown(ctx, cell, ev);
}

/// `env` with the idle timeouts and the wait deadline raised to a real
/// product's floors ([`crate::real::idle_floor_ms`],
/// [`crate::real::hang_idle_floor_ms`], [`crate::real::wait_floor_ms`]) in
/// a real profile's cell.
pub(crate) fn real_timeouts(env: &CellEnv, profile: &str) -> Option<CellEnv> {
    wire::profiles::real(profile).map(|real| CellEnv {
        idle_timeout_ms: env.idle_timeout_ms.max(crate::real::idle_floor_ms(real)),
        hang_idle_timeout_ms: env
            .hang_idle_timeout_ms
            .max(crate::real::hang_idle_floor_ms(real)),
        wait_ms: env.wait_ms.max(crate::real::wait_floor_ms(real)),
        ..env.clone()
    })
}

/// `env` with the hang idle timeout, when the schedule hangs a provider (a
/// hung provider is found only by the idle timeout), and with runnerd's exit
/// grace the cell's idle timeout, at most runnerd's default: a hang that
/// lands after the provider's last answer leaves it stopped (SIGSTOP) when
/// its run ends, a stopped process cannot exit on its own, and the default
/// grace made such a cell 2 s of waiting (67 cells of the default wave); the
/// idle timeout is the margin the cell already gives a healthy provider that
/// load slows. In a cell of several
/// tasks every task's healthy providers share that timeout, so it is
/// [`SEVERAL_TASKS_HANG_FACTOR`] times longer there (still at most the
/// runner's idle timeout): at 50 ms a loaded machine had them stopped as
/// hung in one generated program's cell in seven (timing reruns, counted).
/// A healthy provider is silent while a scripted command runs
/// (`duration_ms`): the timeout is longer than the longest by the hang
/// timeout too. Without that a generated program with a 300 ms command had
/// its healthy provider stopped as hung in every attempt but the last
/// (two timing reruns, a minute of waits, at every hang cell of it).
fn hang_timeout(env: &CellEnv, events: &[Event], scenario: &Scenario) -> Option<CellEnv> {
    let hang = match scenario.tasks().len() {
        0 | 1 => env.hang_idle_timeout_ms,
        _ => env.hang_idle_timeout_ms * SEVERAL_TASKS_HANG_FACTOR,
    };
    let hang = hang + longest_silence_ms(&scenario.script);
    events
        .iter()
        .any(|e| e.fault == Fault::HangProvider)
        .then(|| CellEnv {
            idle_timeout_ms: hang.min(env.idle_timeout_ms),
            exit_grace_ms: Some(env.idle_timeout_ms.min(wire::profiles::EXIT_GRACE_MS)),
            ..env.clone()
        })
}

/// The longest a healthy provider of `script` is silent: its longest
/// scripted command (`duration_ms`).
fn longest_silence_ms(script: &wire::script::Script) -> u64 {
    script
        .turns
        .iter()
        .flat_map(|t| &t.tools)
        .map(|t| t.duration_ms)
        .max()
        .unwrap_or(0)
}

/// How many times the hang idle timeout a cell of several tasks uses.
const SEVERAL_TASKS_HANG_FACTOR: u64 = 4;

fn harness_failure(spec: &CellSpec, env: &CellEnv, started: Instant, error: String) -> CellRun {
    CellRun {
        spec: spec.clone(),
        evidence: Evidence {
            harness_error: Some(error),
            ..Evidence::default()
        },
        ran: false,
        duration_ms: started.elapsed().as_millis() as u64,
        reproduce: reproduce(env, spec),
        dir: None,
        kept: None,
    }
}

/// The command that runs this cell again (see [`reproduce_command`]).
pub fn reproduce(env: &CellEnv, spec: &CellSpec) -> String {
    reproduce_command(env, spec)
}

/// The runner driver and the fake that serve a profile in cells.
/// (`wire::profiles`, the one profile table).
pub fn profile_fake(
    profile: &str,
) -> Option<(&'static str, &'static str, &'static [&'static str])> {
    wire::profiles::builtin(profile).map(|p| (p.protocol.as_str(), p.fake, p.fake_args))
}

fn write_script(scenario: &Scenario, layout: &Layout) -> anyhow::Result<()> {
    let script = toml::to_string(&scenario.script)?;
    std::fs::write(layout.p("script.toml"), script)?;
    std::fs::create_dir_all(layout.p("ws"))?;
    Ok(())
}

/// The profile file of a fake profile's cell: the fake, playing the
/// scenario's script, is the provider.
fn write_fake_profile(env: &CellEnv, profile: &str, layout: &Layout) -> anyhow::Result<()> {
    let Some((driver, fake, extra)) = profile_fake(profile) else {
        anyhow::bail!("profile {profile} has no fake provider in this build");
    };
    let mut command: Vec<String> = vec![
        env.turncut.display().to_string(),
        "fake-provider".into(),
        fake.into(),
        "--state-dir".into(),
        "{provider_dir}".into(),
        "--journal".into(),
        layout.p("journal.jsonl").display().to_string(),
        "--ledger".into(),
        layout.p("ledger.jsonl").display().to_string(),
        "--script".into(),
        layout.p("script.toml").display().to_string(),
        // A long-lived child in a session of its own, as real providers keep
        // tool shells: hygiene is judged on a real-looking process tree.
        "--child".into(),
        "sleep".into(),
    ];
    command.extend(extra.iter().map(|a| a.to_string()));
    let profiles = format!(
        "[profile.{profile}]\ndriver = \"{driver}\"\ncommand = {}\ncredential_socket = true\n",
        serde_json::to_string(&command)?
    );
    std::fs::write(layout.p("profiles.toml"), profiles)?;
    Ok(())
}

/// The fake model API of a real profile's cell, playing the scenario's
/// script, writing the cell's ledger and its own journal
/// (`model-journal.jsonl`: the cell's `journal.jsonl` is the product's); its cut points are
/// armed like the runner's, under the role [`crate::real::MODEL_ROLE`].
fn start_model_api(ctx: &Ctx) -> anyhow::Result<crate::real::ModelApi> {
    let (env, layout) = (&ctx.env, &ctx.layout);
    let mut cmd = crate::real::ModelApi::command(
        &env.turncut,
        &layout.p("model"),
        &layout.p("model-journal.jsonl"),
        &layout.p("ledger.jsonl"),
        &layout.p("script.toml"),
    );
    cmd.env(cutpoint::ENV_SOCKET, layout.p("cut.sock"))
        .env(cutpoint::ENV_ROLE, crate::real::MODEL_ROLE.as_str())
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_TRACE)
        .env_remove(nemesis::TAG_ENV);
    let arms: Vec<String> = ctx.setup.arms.iter().map(ToString::to_string).collect();
    if !arms.is_empty() {
        cmd.env(cutpoint::ENV_ARM, arms.join(","));
    }
    if let Some(t) = &ctx.setup.trace {
        cmd.env(cutpoint::ENV_TRACE, t);
    }
    crate::real::ModelApi::start(&mut cmd, Duration::from_millis(env.wait_ms))
}

/// The profile file of a real profile's cell: the real product, pinned,
/// its model the cell's fake model API; the runner hands it the credential
/// as its API key.
fn write_real_profile(ctx: &Ctx, real: &'static wire::profiles::Real) -> anyhow::Result<RealCell> {
    let (env, layout) = (&ctx.env, &ctx.layout);
    let bin = crate::real::locate(real).map_err(|e| anyhow::anyhow!("{}: {e}", real.name))?;
    let product = crate::real::Product {
        real,
        bin,
        home: layout.p("product"),
    };
    let model_api = start_model_api(ctx)?;
    let mut command = product.command_for(
        &model_api.url,
        &layout.dir.display().to_string(),
        ctx.setup.patches,
    )?;
    {
        // The wire evidence a fake journals itself, from a tap in front.
        let mut tap = vec![
            env.turncut.display().to_string(),
            "fake-provider".into(),
            product.tap().into(),
            "--journal".into(),
            layout.p("journal.jsonl").display().to_string(),
            "--".into(),
        ];
        tap.append(&mut command);
        command = tap;
    }
    let driver = wire::profiles::facts(real.name).map_or("", |p| p.protocol.as_str());
    let profiles = format!(
        "[profile.{}]\ndriver = \"{driver}\"\ncommand = {}\n{}",
        real.name,
        serde_json::to_string(&command)?,
        product.credential_lines()
    );
    std::fs::write(layout.p("profiles.toml"), profiles)?;
    Ok(RealCell { product, model_api })
}

/// The command a cell starts its runner with, for a cell directory `dir`
/// (`dir/state`, `dir/profiles.toml`, `dir/cut.sock`), disarmed and traced
/// to `trace` if given: what `turncut doctor` starts, so it starts a runner
/// exactly as a cell does.
pub fn cell_runner_command(
    env: &CellEnv,
    dir: &Path,
    canary: &str,
    trace: Option<&Path>,
) -> Command {
    let layout = Layout {
        dir: dir.to_owned(),
    };
    runner_command(env, &layout, canary, &[], None, trace)
}

/// Writes a cell's inputs into `dir`: the scenario's script, the workspace
/// `dir/ws` and the profiles file in which `profile` runs its fake provider.
pub fn write_cell_inputs(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let layout = Layout {
        dir: dir.to_owned(),
    };
    write_script(scenario, &layout)?;
    write_fake_profile(env, profile, &layout)
}

fn runner_command(
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
    arms: &[cutpoint::Arm],
    sync: Option<&cutpoint::Arm>,
    trace: Option<&Path>,
) -> Command {
    let mut cmd = Command::new(&env.runner_cmd[0]);
    cmd.args(&env.runner_cmd[1..])
        .arg("--state-dir")
        .arg(layout.p("state"))
        .args(["--listen", "127.0.0.1:0"])
        .arg("--profiles")
        .arg(layout.p("profiles.toml"))
        .args([
            "--provider-idle-timeout-ms",
            &env.idle_timeout_ms.to_string(),
        ])
        .args(["--provider-term-grace-ms", "100"])
        .args(exit_grace_args(env))
        .args(&env.runner_extra)
        .env(cutpoint::ENV_SOCKET, layout.p("cut.sock"))
        .env(cutpoint::ENV_ROLE, Role::Runner.as_str())
        .env("TURNCUT_PROVIDER_API_KEY", canary)
        .env("RUST_LOG", "info")
        .env(nemesis::TAG_ENV, &layout.dir)
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_TRACE);
    let arms: Vec<String> = arms.iter().chain(sync).map(ToString::to_string).collect();
    if !arms.is_empty() {
        cmd.env(cutpoint::ENV_ARM, arms.join(","));
    }
    if let Some(t) = trace {
        cmd.env(cutpoint::ENV_TRACE, t);
    }
    cmd
}

/// The exit grace's argument, for `turncut runnerd` only (a runner of
/// `--runner-cmd` speaks the contract's options alone).
fn exit_grace_args(env: &CellEnv) -> Vec<String> {
    match env.exit_grace_ms {
        Some(ms) if env.runs_runnerd() => {
            vec!["--provider-exit-grace-ms".to_owned(), ms.to_string()]
        }
        _ => Vec::new(),
    }
}

/// Starts the cell's next runner (either side may) and puts it on the
/// board.
fn start_runner(ctx: &Ctx) -> anyhow::Result<()> {
    // While a turn-active follow-up is pending, the runner is also armed at
    // the sync point so the follow-up lands while the turn is provably active.
    let (left, stage) = ctx.board.read(|s| (s.turn_active_left, s.stage));
    let setup = &ctx.setup;
    let sync = setup.sync.as_ref().filter(|_| left > 0);
    let arms = if stage < setup.events.len() {
        &setup.arms[..]
    } else {
        &[]
    };
    let layout = &ctx.layout;
    let mut cmd = runner_command(
        &ctx.env,
        layout,
        &ctx.canary,
        arms,
        sync,
        setup.trace.as_deref(),
    );
    let runner = RunnerProcess::start(
        &mut cmd,
        &layout.p("state"),
        &layout.p("runnerd.stderr"),
        Duration::from_millis(ctx.env.wait_ms),
    )?;
    let pid = runner.pid();
    ctx.rec.process("runner", pid, nemesis::start_time(pid));
    ctx.board.update(|s| {
        s.runner = Some(runner);
        s.generation += 1;
    });
    Ok(())
}

/// Starts the next runner after a fault ended the last one, and records
/// the restart with the event the new runner waits for.
fn restart_after_fault(ctx: &Ctx) -> anyhow::Result<()> {
    start_runner(ctx)?;
    let stage = ctx.board.read(|s| s.stage);
    ctx.rec.act(
        ActionKind::Restart,
        json!({ "next_event": ctx.setup.events.get(stage).map(ToString::to_string) }),
    );
    Ok(())
}

/// Sets the cell up, starts its first runner and its cut side, runs the
/// scenario's steps and waits out the quiet recovery phase.
fn drive(
    ctx: &Ctx,
    cell: &mut Cell,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
    ev: &mut Evidence,
) -> StepResult<()> {
    start(ctx, cell, scenario, profile, spec)?;
    let until = Instant::now() + Duration::from_millis(ctx.env.wait_ms);
    let result = run_steps(ctx, scenario, profile, cell.model_api_pid(), until, ev);
    quiet_phase(ctx, spec, until, ev);
    result
}

/// The cell's inputs written, its runner started armed and its cut side
/// spawned: everything before the steps.
fn start(
    ctx: &Ctx,
    cell: &mut Cell,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
) -> anyhow::Result<()> {
    let layout = &ctx.layout;
    write_script(scenario, layout)?;
    if power::needs_lazy_mounts(&ctx.setup.events) {
        cell.lazy = power::mount_disks(ctx)?;
    }
    tasks::make_workspaces(ctx)?;
    let listener = cutpoint::Listener::bind(layout.p("cut.sock"))?;
    cell.waker = Some(listener.waker()?);
    match wire::profiles::real(profile) {
        Some(real) => cell.real = Some(write_real_profile(ctx, real)?),
        None => write_fake_profile(&ctx.env, profile, layout)?,
    }
    start_runner(ctx)?;
    ctx.rec.act(
        ActionKind::RunnerStarted,
        json!({ "armed": spec.cut().as_ref().map(ToString::to_string) }),
    );
    // The cut side runs until teardown has read the final evidence: a
    // runner it restarted dies with it (PR_SET_PDEATHSIG follows the
    // spawning thread).
    cell.cut_side = Some(faults::spawn(
        ctx.clone(),
        listener,
        cell.model_api_pid(),
        std::mem::take(&mut cell.lazy),
    ));
    Ok(())
}

/// The cell's deadline passed while it waited on the runner: said in the
/// evidence, and when (`timing` tells a stuck runner from a slow one by
/// how long its log had been quiet then).
fn deadline_passed(ctx: &Ctx, ev: &mut Evidence) {
    // Said once: a step and the quiet phase after it may both miss it.
    if !ev.deadline_passed {
        ev.deadline_passed = true;
        ctx.rec.act(ActionKind::DeadlinePassed, json!({}));
    }
}

/// How long the task is read once more when the deadline passed while the
/// cell waited on a cut its run never reached.
const UNREACHED_CUT_READ: Duration = Duration::from_secs(1);

/// The deadline of the quiet phase's wait for a settled task: the cell's,
/// or, when it passed while the cell waited on an armed cut its run never
/// reached, a last read. A task settled by then did not let the deadline
/// pass: the harness waited on a cut (under load a healthy provider found
/// silent takes another path), and a silent provider, not a deadline, is
/// the timing shape such a cell has (`timing::timing_shape`).
fn settle_deadline(ctx: &Ctx, spec: &CellSpec, until: Instant) -> Instant {
    let now = Instant::now();
    let unreached = spec.cut().is_some() && ctx.board.read(|s| s.stage == 0);
    match now >= until && unreached {
        true => now + UNREACHED_CUT_READ,
        false => until,
    }
}

/// Waits, for at most the cell's wait from now, until every matched event
/// is applied and the task has settled with the runner now running: the
/// final reads are made again after an event matched while they were made
/// (`teardown::read_runner_settled`). What the reads then find is judged
/// as it is; a task that does not settle is read unsettled.
fn settle_after_late_event(ctx: &Ctx) {
    let until = Instant::now() + Duration::from_millis(ctx.env.wait_ms);
    ctx.board.wait_until(until, |s| s.applied >= s.stage);
    let _ = ctx.wait_all_settled(until);
}

/// The quiet recovery phase: the armed cut was reached and its fault
/// applied (the steps may finish before a late cut is even hit), no fault
/// is in flight, and every task has settled with the runner that is now
/// running, with no event applied since they were read settled.
fn quiet_phase(ctx: &Ctx, spec: &CellSpec, until: Instant, ev: &mut Evidence) {
    let board = &ctx.board;
    loop {
        if spec.cut().is_some() {
            board.wait_until(until, |s| s.stage >= 1 && s.applied >= s.stage);
        }
        let applied = board.read(|s| s.applied);
        match ctx.wait_all_settled(settle_deadline(ctx, spec, until)) {
            Ok(task) => ev.task = Some(TaskRead::read(task)),
            Err(_) => {
                deadline_passed(ctx, ev);
                break;
            }
        }
        // An event applied while the tasks were waited for (an injected
        // follow-up that reopened a task read settled before it) means
        // the tasks are waited for again.
        if board.read(|s| s.applied >= s.stage && s.applied == applied) {
            break;
        }
    }
}

#[cfg(test)]
mod tests;
