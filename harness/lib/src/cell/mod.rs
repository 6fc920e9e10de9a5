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
//! Here: the cell's setup and its driver; `steps` sends the scenario's
//! requests, `events` is the cut thread, `teardown` collects the final
//! evidence.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::evidence::{Action, Evidence, Exchange, Op};
use crate::model::{CellResult, CellSpec, Cut, Event, Fault, Outcome, Role, Verdict};
use crate::nemesis;
use crate::runner_client::{RunnerClient, RunnerProcess};
use crate::scenario::{FollowUpWhen, Scenario, Step};

mod doomed;
mod events;
mod power;
mod reproduce;
mod steps;
mod teardown;
pub use doomed::doomed_in_trace;
pub use events::{EVENT_MARK, injected_message_id, schedule_of};
use events::{arms_for, cut_loop};
pub use power::{BACKING_DIR, ON_LAZY_MOUNTS, needs_lazy_mounts};
pub use reproduce::{
    reproduce_args, reproduce_command, reproduce_script, run_config, scenarios_arg,
};
use steps::{run_steps, settled, wait_task, wait_until};
pub use teardown::read_provider_evidence;
use teardown::teardown;

/// Where a `turn-active` follow-up is sent: with the runner held right after
/// it persisted the turn's acceptance, so the turn is provably in flight.
pub const SYNC_POINT: &str = "runner.turn_accepted.persisted";

/// The task id every cell uses (cells are isolated, so one id is enough).
pub const TASK_ID: &str = "task-1";

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
            wait_ms: 15_000,
            scenarios_dir: scenarios_dir.to_owned(),
            keep: false,
            recut: true,
            stress: 0,
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

/// A finished cell: its result, evidence and directory.
pub struct CellRun {
    /// The judged result.
    pub result: CellResult,
    /// The evidence.
    pub evidence: Evidence,
    /// The cell's directory (removed on drop unless kept).
    pub dir: Option<tempfile::TempDir>,
    /// Where the kept directory is, when kept.
    pub kept: Option<PathBuf>,
}

/// State shared by the driver and the cut thread.
struct Shared {
    runner: Mutex<Option<RunnerProcess>>,
    generation: Mutex<u64>,
    changed: Condvar,
    actions: Mutex<Vec<Action>>,
    started: Instant,
    reached: AtomicBool,
    /// The schedule: the first cut, then later events (and a scenario's
    /// `recut`, with the first cut's fault).
    events: Vec<Event>,
    /// What every runner of the cell is armed with (see [`arms_for`]).
    arms: Vec<Cut>,
    /// The cut-point trace, when tracing (every runner of the cell writes it).
    trace: Option<PathBuf>,
    /// Hits of the next event's point since the previous event was reached.
    since: Mutex<u64>,
    /// The tag in the environment of every process of the cell.
    tag: String,
    /// Processes an event already matched has doomed (`doomed`): their
    /// hits count toward no later event.
    doomed: Mutex<Vec<u32>>,
    /// The runner whose disk is full (a `disk-full` event) and since when,
    /// until its next attempted write or an idle timeout without one.
    disk_full: Mutex<Option<(u32, Instant)>>,
    /// Index of the next event of the schedule.
    stage: std::sync::atomic::AtomicUsize,
    cut_role: Mutex<Option<Role>>,
    /// Faults applied so far (one per reached stage when done).
    faults_applied: std::sync::atomic::AtomicUsize,
    events_before: Mutex<Option<Vec<Value>>>,
    /// Every process the cell has met (what it is, its pid, its start
    /// time): the hygiene oracle's list of what must be gone at teardown.
    pids: Mutex<Vec<(String, u32, Option<u64>)>>,
    stop: AtomicBool,
    error: Mutex<Option<String>>,
    cut_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The sync point of a `turn-active` follow-up (the first turn acceptance).
    sync: Option<Cut>,
    /// The runner is held at the sync point.
    sync_reached: AtomicBool,
    /// The turn-active follow-up was sent (or given up on).
    follow_up_sent: AtomicBool,
    /// Provider hits held until teardown (see `apply_fault`).
    holds: Mutex<Vec<cutpoint::Holding>>,
    /// Ends the cut thread's wait for hits at teardown.
    waker: Mutex<Option<cutpoint::Waker>>,
    /// Controller requests the cut thread made (a `follow-up` fault).
    injected: Mutex<Vec<(Exchange, Op)>>,
    /// A real product's cell: the product and its fake model API.
    real: Mutex<Option<RealCell>>,
    /// A power-cut cell's lazy mounts (`power::mount_disks`).
    lazy: Mutex<Vec<lazyfs::LazyFs>>,
    /// The workspace's files right after the last power cut.
    workspace_after_cut: Mutex<Option<std::collections::BTreeMap<String, String>>>,
}

/// What a cell of a `*-real` profile runs beside the runner.
struct RealCell {
    product: crate::real::Product,
    model_api: crate::real::ModelApi,
}

impl Shared {
    /// The pid of the runner now running, if one is.
    fn runner_pid(&self) -> Option<u32> {
        self.runner
            .lock()
            .expect("runner")
            .as_ref()
            .map(|r| r.pid())
    }

    /// The pid of a real product's fake model API, which serves the whole
    /// cell (no provider, never a fault's target).
    fn model_api_pid(&self) -> Option<u32> {
        self.real
            .lock()
            .expect("real")
            .as_ref()
            .map(|r| r.model_api.pid())
    }

    /// The state of a new cell that runs the schedule `events`.
    fn new(
        scenario: &Scenario,
        events: Vec<Event>,
        started: Instant,
        trace: Option<&Path>,
        layout: &Layout,
    ) -> Shared {
        Shared {
            runner: Mutex::new(None),
            generation: Mutex::new(0),
            changed: Condvar::new(),
            actions: Mutex::new(Vec::new()),
            started,
            reached: AtomicBool::new(false),
            arms: arms_for(&events),
            events,
            trace: trace.map(Path::to_owned),
            since: Mutex::new(0),
            tag: layout.dir.display().to_string(),
            doomed: Mutex::new(Vec::new()),
            disk_full: Mutex::new(None),
            stage: std::sync::atomic::AtomicUsize::new(0),
            cut_role: Mutex::new(None),
            faults_applied: std::sync::atomic::AtomicUsize::new(0),
            events_before: Mutex::new(None),
            pids: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            cut_thread: Mutex::new(None),
            holds: Mutex::new(Vec::new()),
            waker: Mutex::new(None),
            injected: Mutex::new(Vec::new()),
            real: Mutex::new(None),
            lazy: Mutex::new(Vec::new()),
            workspace_after_cut: Mutex::new(None),
            sync: scenario
                .steps
                .iter()
                .any(|st| {
                    matches!(
                        st,
                        Step::FollowUp {
                            when: FollowUpWhen::TurnActive,
                            ..
                        }
                    )
                })
                .then(|| Cut {
                    point: SYNC_POINT.to_owned(),
                    n: 1,
                }),
            sync_reached: AtomicBool::new(false),
            follow_up_sent: AtomicBool::new(false),
        }
    }

    fn act(&self, what: &str, detail: Value) {
        let at_ms = self.started.elapsed().as_millis() as u64;
        self.actions.lock().expect("actions").push(Action {
            at_ms,
            what: what.to_owned(),
            detail,
        });
    }

    fn client(&self) -> Option<(RunnerClient, u64)> {
        let gen_now = *self.generation.lock().expect("generation");
        self.runner
            .lock()
            .expect("runner")
            .as_ref()
            .map(|r| (r.client(), gen_now))
    }

    /// Waits until the runner generation moves past `seen`, or `until`.
    fn wait_generation(&self, seen: u64, until: Instant) {
        let mut g = self.generation.lock().expect("generation");
        while *g == seen {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            g = self.changed.wait_timeout(g, left).expect("generation").0;
        }
    }
}

/// Files a cell writes for the fake and the runner.
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Runs one cell and judges it.
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
    let started = Instant::now();
    let events = schedule_of(scenario, spec, env.recut);
    let real_env = real_timeouts(env, profile);
    let env = real_env.as_ref().unwrap_or(env);
    let hang_env = hang_timeout(env, &events);
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
    let shared = Arc::new(Shared::new(scenario, events, started, trace, &layout));
    let mut ev = Evidence {
        started_ms: wire::journal::now_ms(),
        spec: Some(spec.clone()),
        fault: spec.fault(),
        canary: canary.clone(),
        expect: scenario.expect.clone(),
        runner_idle_timeout_ms: Some(env.idle_timeout_ms),
        ..Evidence::default()
    };
    let outcome = drive(
        env, scenario, profile, spec, &layout, &shared, &canary, &mut ev,
    );
    if let Err(e) = outcome {
        // A step the runner never answered ran out of time: the runner's
        // doing (liveness judges it); the cell still says it stopped short.
        if e.downcast_ref::<steps::DeadlineMissed>().is_some() {
            ev.deadline_passed = true;
        }
        ev.harness_error = Some(format!("{e:#}"));
    }
    if let Some(e) = shared.error.lock().expect("error").take() {
        ev.harness_error.get_or_insert(e);
    }
    teardown(&layout, &shared, &mut ev);
    let result = judged(env, spec, &ev, started);
    let (dir, kept) = if env.keep {
        let path = tmp.keep();
        let _ = crate::tempdirs::mark_kept(&path);
        (None, Some(path))
    } else {
        (Some(tmp), None)
    };
    CellRun {
        result,
        evidence: ev,
        dir,
        kept,
    }
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
/// hung provider is found only by the idle timeout).
fn hang_timeout(env: &CellEnv, events: &[Event]) -> Option<CellEnv> {
    events
        .iter()
        .any(|e| e.fault == Fault::HangProvider)
        .then(|| CellEnv {
            idle_timeout_ms: env.hang_idle_timeout_ms.min(env.idle_timeout_ms),
            ..env.clone()
        })
}

/// The cell's result: the oracles' verdicts on its evidence (at least
/// `unknown` after a harness error) and its outcome.
fn judged(env: &CellEnv, spec: &CellSpec, ev: &Evidence, started: Instant) -> CellResult {
    let (verdict, oracles) = crate::oracles::judge_cell(ev);
    CellResult {
        spec: spec.clone(),
        verdict,
        outcome: outcome_of(ev),
        oracles,
        duration_ms: started.elapsed().as_millis() as u64,
        reproduce: reproduce(env, spec),
        error: ev.harness_error.clone(),
        retried: None,
        reruns: Vec::new(),
    }
}

fn harness_failure(spec: &CellSpec, env: &CellEnv, started: Instant, error: String) -> CellRun {
    CellRun {
        result: CellResult {
            spec: spec.clone(),
            verdict: Verdict::Unknown,
            oracles: Vec::new(),
            outcome: Outcome {
                state: "unknown".into(),
                ..Outcome::default()
            },
            duration_ms: started.elapsed().as_millis() as u64,
            reproduce: reproduce(env, spec),
            error: Some(error.clone()),
            retried: None,
            reruns: Vec::new(),
        },
        evidence: Evidence {
            harness_error: Some(error),
            ..Evidence::default()
        },
        dir: None,
        kept: None,
    }
}

/// The command that runs this cell again (see [`reproduce_command`]).
pub fn reproduce(env: &CellEnv, spec: &CellSpec) -> String {
    reproduce_command(env, spec)
}

fn outcome_of(ev: &Evidence) -> Outcome {
    Outcome {
        state: ev.state(),
        cause: ev.cause_code(),
        reached_cut: ev.reached_cut,
        events_applied: ev.events_applied,
        runs: ev.runs().len(),
        continuations: ev.provider_turns.iter().filter(|t| t.continuation).count(),
        retry_status: ev
            .exchanges
            .iter()
            .find(|x| x.kind == "retry")
            .map(|x| x.status),
        path: ev.path(),
        effects: ev.ledger.len(),
        deadline_passed: ev.deadline_passed,
    }
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
        "[profile.{profile}]\ndriver = \"{driver}\"\ncommand = {}\ncredential_fifo = true\n",
        serde_json::to_string(&command)?
    );
    std::fs::write(layout.p("profiles.toml"), profiles)?;
    Ok(())
}

/// The fake model API of a real profile's cell, playing the scenario's
/// script, writing the cell's ledger and its own journal
/// (`model-journal.jsonl`: the cell's `journal.jsonl` is the product's); its cut points are
/// armed like the runner's, under the role [`crate::real::MODEL_ROLE`].
fn start_model_api(
    env: &CellEnv,
    layout: &Layout,
    shared: &Shared,
) -> anyhow::Result<crate::real::ModelApi> {
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
    let arms: Vec<String> = shared.arms.iter().map(ToString::to_string).collect();
    if !arms.is_empty() {
        cmd.env(cutpoint::ENV_ARM, arms.join(","));
    }
    if let Some(t) = &shared.trace {
        cmd.env(cutpoint::ENV_TRACE, t);
    }
    crate::real::ModelApi::start(&mut cmd, Duration::from_millis(env.wait_ms))
}

/// The profile file of a real profile's cell: the real product, pinned,
/// its model the cell's fake model API; the runner hands it the credential
/// as its API key.
fn write_real_profile(
    env: &CellEnv,
    real: &'static wire::profiles::Real,
    layout: &Layout,
    shared: &Shared,
) -> anyhow::Result<()> {
    let bin = crate::real::locate(real).map_err(|e| anyhow::anyhow!("{}: {e}", real.name))?;
    let product = crate::real::Product {
        real,
        bin,
        home: layout.p("product"),
    };
    let model_api = start_model_api(env, layout, shared)?;
    let mut command = product.command(&model_api.url, &layout.dir.display().to_string())?;
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
    *shared.real.lock().expect("real") = Some(RealCell { product, model_api });
    Ok(())
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
    arms: &[Cut],
    sync: Option<&Cut>,
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

fn start_runner(
    env: &CellEnv,
    layout: &Layout,
    shared: &Shared,
    canary: &str,
) -> anyhow::Result<()> {
    // While a turn-active follow-up is pending, the runner is also armed at
    // the sync point so the follow-up lands while the turn is provably active.
    let sync = shared
        .sync
        .as_ref()
        .filter(|_| !shared.follow_up_sent.load(Ordering::SeqCst));
    let arms = if shared.stage.load(Ordering::SeqCst) < shared.events.len() {
        &shared.arms[..]
    } else {
        &[]
    };
    let mut cmd = runner_command(env, layout, canary, arms, sync, shared.trace.as_deref());
    let runner = RunnerProcess::start(
        &mut cmd,
        &layout.p("state"),
        &layout.p("runnerd.stderr"),
        Duration::from_millis(env.wait_ms),
    )?;
    let pid = runner.pid();
    shared
        .pids
        .lock()
        .expect("pids")
        .push(("runner".into(), pid, nemesis::start_time(pid)));
    *shared.runner.lock().expect("runner") = Some(runner);
    *shared.generation.lock().expect("generation") += 1;
    shared.changed.notify_all();
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn drive(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    spec: &CellSpec,
    layout: &Layout,
    shared: &Arc<Shared>,
    canary: &str,
    ev: &mut Evidence,
) -> anyhow::Result<()> {
    write_script(scenario, layout)?;
    if power::needs_lazy_mounts(&shared.events) {
        power::mount_disks(layout, shared)?;
    }
    let listener = cutpoint::Listener::bind(layout.p("cut.sock"))?;
    *shared.waker.lock().expect("waker") = Some(listener.waker()?);
    match wire::profiles::real(profile) {
        Some(real) => write_real_profile(env, real, layout, shared)?,
        None => write_fake_profile(env, profile, layout)?,
    }
    start_runner(env, layout, shared, canary)?;
    shared.act(
        "runner.started",
        json!({ "armed": spec.cut().as_ref().map(ToString::to_string) }),
    );

    let cut_thread = {
        let shared = Arc::clone(shared);
        let env = env.clone();
        let layout = Layout {
            dir: layout.dir.clone(),
        };
        let canary = canary.to_owned();
        std::thread::spawn(move || {
            cut_loop(&listener, &shared, &env, &layout, &canary);
        })
    };

    let until = Instant::now() + Duration::from_millis(env.wait_ms);
    let result = run_steps(scenario, profile, shared, layout, until, ev);
    // Quiet recovery phase: the armed cut was reached and its fault applied
    // (the steps may finish before a late cut is even hit), no fault is in
    // flight, and the task has settled with the runner that is now running.
    loop {
        if spec.cut().is_some() {
            wait_until(shared, until, || {
                let stage = shared.stage.load(Ordering::SeqCst);
                stage >= 1 && shared.faults_applied.load(Ordering::SeqCst) >= stage
            });
        }
        match wait_task(shared, until, settled) {
            Ok(task) => ev.task = task,
            Err(_) => {
                ev.deadline_passed = true;
                break;
            }
        }
        let stage = shared.stage.load(Ordering::SeqCst);
        if shared.faults_applied.load(Ordering::SeqCst) >= stage {
            break;
        }
    }
    // The cut thread keeps running until teardown has read the final
    // evidence: a runner it restarted dies with it (PR_SET_PDEATHSIG follows
    // the spawning thread).
    *shared.cut_thread.lock().expect("cut thread") = Some(cut_thread);
    result
}
