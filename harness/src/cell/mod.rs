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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::evidence::{Action, Evidence, Exchange, Op, Source};
use crate::model::{CellResult, CellSpec, Cut, Event, Fault, Outcome, Verdict};
use crate::nemesis;
use crate::runner_client::{RunnerClient, RunnerProcess};
use crate::scenario::{FollowUpWhen, RetryWhen, Scenario, Step};

mod events;
pub use events::{EVENT_MARK, injected_message_id, schedule_of};
use events::{arms_for, cut_loop, notify};

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
        }
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
    /// The runner whose disk is full (a `disk-full` event) and since when,
    /// until its next attempted write or an idle timeout without one.
    disk_full: Mutex<Option<(u32, Instant)>>,
    /// Index of the next event of the schedule.
    stage: std::sync::atomic::AtomicUsize,
    cut_role: Mutex<Option<String>>,
    /// Faults applied so far (one per reached stage when done).
    faults_applied: std::sync::atomic::AtomicUsize,
    events_before: Mutex<Option<Vec<Value>>>,
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
}

impl Shared {
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
    let hang_env;
    let env = if events.iter().any(|e| e.fault == Fault::HangProvider) {
        hang_env = CellEnv {
            idle_timeout_ms: env.hang_idle_timeout_ms.min(env.idle_timeout_ms),
            ..env.clone()
        };
        &hang_env
    } else {
        env
    };
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
    let shared = Arc::new(Shared {
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
    });
    let mut ev = Evidence {
        started_ms: fake_provider::journal::now_ms(),
        spec: Some(spec.clone()),
        fault: spec.fault,
        canary: canary.clone(),
        expected_state: if spec.cut.is_none() {
            scenario.expect.final_state.clone()
        } else {
            None
        },
        ..Evidence::default()
    };
    let outcome = drive(
        env, scenario, profile, spec, &layout, &shared, &canary, &mut ev,
    );
    if let Err(e) = outcome {
        ev.harness_error = Some(format!("{e:#}"));
    }
    if let Some(e) = shared.error.lock().expect("error").take() {
        ev.harness_error.get_or_insert(e);
    }
    teardown(&layout, &shared, &mut ev);
    let oracles = crate::oracles::judge(&ev);
    let mut verdict = crate::oracles::worst(&oracles);
    if ev.harness_error.is_some() {
        verdict = verdict.max(Verdict::Unknown);
    }
    let result = CellResult {
        spec: spec.clone(),
        verdict,
        outcome: outcome_of(&ev),
        oracles,
        duration_ms: started.elapsed().as_millis() as u64,
        reproduce: reproduce(env, spec),
        error: ev.harness_error.clone(),
        retried: None,
    };
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
        },
        evidence: Evidence {
            harness_error: Some(error),
            ..Evidence::default()
        },
        dir: None,
        kept: None,
    }
}

/// The command that runs this cell again (see `wave::reproduce_command`).
pub fn reproduce(env: &CellEnv, spec: &CellSpec) -> String {
    crate::wave::reproduce_command(env, spec)
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
    }
}

/// The runner driver and the fake that serve a profile in cells.
pub fn profile_fake(
    profile: &str,
) -> Option<(&'static str, &'static str, &'static [&'static str])> {
    match profile {
        "runner-codex" => Some(("codex", "codex", &[])),
        "runner-acpx-claude" => Some(("acp", "acp", &[])),
        "runner-opencode" => Some(("opencode", "opencode", &["--port", "0"])),
        "runner-native-openai" => Some(("native", "model-api", &["--port", "0"])),
        _ => None,
    }
}

fn write_inputs(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    layout: &Layout,
) -> anyhow::Result<()> {
    let script = toml::to_string(&scenario.script)?;
    std::fs::write(layout.p("script.toml"), script)?;
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
        "[profile.{profile}]\ndriver = \"{driver}\"\ncommand = {}\n",
        serde_json::to_string(&command)?
    );
    std::fs::write(layout.p("profiles.toml"), profiles)?;
    std::fs::create_dir_all(layout.p("ws"))?;
    Ok(())
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
        .env(cutpoint::ENV_ROLE, "runner")
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
    write_inputs(env, scenario, profile, layout)?;
    let listener = cutpoint::Listener::bind(layout.p("cut.sock"))?;
    *shared.waker.lock().expect("waker") = Some(listener.waker()?);
    start_runner(env, layout, shared, canary)?;
    shared.act(
        "runner.started",
        json!({ "armed": spec.cut.as_ref().map(ToString::to_string) }),
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
        if spec.cut.is_some() {
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

/// Waits on the cell's condition variable until `done()` or the deadline.
fn wait_until(shared: &Shared, until: Instant, done: impl Fn() -> bool) {
    let mut g = shared.generation.lock().expect("generation");
    while !done() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        g = shared.changed.wait_timeout(g, left).expect("generation").0;
    }
}

fn settled(t: &Value) -> bool {
    matches!(
        t["state"].as_str(),
        Some("completed" | "failed" | "needs_human")
    )
}

/// Calls `f` with the current runner's client until it succeeds, across
/// runner restarts: a failed call waits for the next runner generation (the
/// nemesis restarts a killed runner at once), until the deadline.
fn with_runner<T>(
    shared: &Shared,
    until: Instant,
    mut f: impl FnMut(&RunnerClient) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    loop {
        let Some((client, generation)) = shared.client() else {
            // The nemesis is between killing the runner and restarting it.
            anyhow::ensure!(
                Instant::now() < until,
                "no runner came back before the deadline"
            );
            let seen = *shared.generation.lock().expect("generation");
            shared.wait_generation(seen, until);
            continue;
        };
        match f(&client) {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => shared.wait_generation(generation, until),
        }
    }
}

/// Waits for the task to satisfy `pred` across runner restarts.
fn wait_task(
    shared: &Shared,
    until: Instant,
    pred: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    with_runner(shared, until, |client| {
        let left = until.saturating_duration_since(Instant::now());
        anyhow::ensure!(!left.is_zero(), "the deadline passed");
        client.wait_task(TASK_ID, left, &pred)
    })
}

/// Attempts of a controller request answered 503 (`storage_failed`).
const SEND_ATTEMPTS_503: usize = 4;

/// Sends one controller request, re-sent across runner restarts (the API is
/// idempotent on ids), and records every attempt as an op, the final answer
/// as an action and an exchange (status 0 when none came before the
/// deadline); returns the HTTP status.
#[allow(clippy::too_many_arguments)]
fn send(
    shared: &Shared,
    until: Instant,
    ev: &mut Evidence,
    kind: &str,
    path: &str,
    body: &Value,
    message_id: &str,
    text: &str,
) -> anyhow::Result<u16> {
    // A 503 (`storage_failed`) changed nothing and may be repeated, as a
    // controller would; a few attempts outlast a full disk that the harness
    // brings back with a runner restart.
    let mut answer = Err(anyhow::anyhow!("not sent"));
    for _ in 0..SEND_ATTEMPTS_503 {
        answer = with_runner(shared, until, |client| {
            let at_ms = shared.started.elapsed().as_millis() as u64;
            let answer = client
                .post(path, body)
                .map_err(|e| e.context(format!("POST {path}")));
            ev.ops.push(Op::of(kind, message_id, at_ms, &answer));
            answer
        });
        if !matches!(answer, Ok((503, _))) {
            break;
        }
    }
    let (status, answer) = match answer {
        Ok(a) => a,
        Err(e) => (0, json!({ "error": format!("{e:#}") })),
    };
    shared.act(kind, json!({ "message_id": message_id, "status": status }));
    ev.exchanges.push(Exchange {
        kind: kind.to_owned(),
        message_id: message_id.to_owned(),
        text: text.to_owned(),
        status,
        body: answer.clone(),
    });
    anyhow::ensure!(
        status != 0,
        "{kind} {message_id}: no answer before the deadline: {answer}"
    );
    Ok(status)
}

fn run_steps(
    scenario: &Scenario,
    profile: &str,
    shared: &Shared,
    layout: &Layout,
    until: Instant,
    ev: &mut Evidence,
) -> anyhow::Result<()> {
    let workspace = layout.p("ws");
    for step in &scenario.steps {
        match step {
            Step::Submit { prompt, message_id } => {
                let body = json!({
                    "task_id": TASK_ID, "message_id": message_id, "prompt": prompt,
                    "profile": profile, "workspace": workspace.display().to_string(),
                });
                send(
                    shared,
                    until,
                    ev,
                    "submit",
                    "/v1/tasks",
                    &body,
                    message_id,
                    prompt,
                )?;
            }
            Step::FollowUp {
                text,
                message_id,
                when,
            } => {
                match when {
                    FollowUpWhen::Now => {}
                    FollowUpWhen::TurnActive => {
                        // The runner is held at the sync point, unless a cut
                        // came first; then the task state is the best signal.
                        wait_until(shared, until, || {
                            shared.sync_reached.load(Ordering::SeqCst)
                                || shared.stage.load(Ordering::SeqCst) > 0
                        });
                        if !shared.sync_reached.load(Ordering::SeqCst) {
                            let _ = wait_task(shared, until, |t| settled(t) || turn_active(t));
                        }
                    }
                    FollowUpWhen::Settled => {
                        let _ = wait_task(shared, until, settled);
                    }
                }
                let path = format!("/v1/tasks/{TASK_ID}/messages");
                let body = json!({ "message_id": message_id, "text": text });
                send(
                    shared,
                    until,
                    ev,
                    "follow_up",
                    &path,
                    &body,
                    message_id,
                    text,
                )?;
                if *when == FollowUpWhen::TurnActive {
                    shared.follow_up_sent.store(true, Ordering::SeqCst);
                    notify(shared);
                }
            }
            Step::Await(_) => {
                wait_task(shared, until, settled)?;
                shared.act("settled", json!({}));
            }
            Step::Retry { when, message_id } => {
                let task = wait_task(shared, until, settled)?;
                let failed = matches!(task["state"].as_str(), Some("failed" | "needs_human"));
                if failed || *when == RetryWhen::Always {
                    let path = format!("/v1/tasks/{TASK_ID}/retry");
                    let body = json!({ "message_id": message_id });
                    // The stop proof, from the process table: every provider
                    // process alive before the Retry must be gone at its 201.
                    let before = cell_providers(&layout.p("cut.sock"));
                    let status = send(shared, until, ev, "retry", &path, &body, message_id, "")?;
                    if status == 201 {
                        match before {
                            Ok(procs) => ev.alive_at_retry.extend(
                                procs
                                    .into_iter()
                                    .filter(|(pid, start, _)| {
                                        nemesis::alive_same(*pid, Some(*start))
                                    })
                                    .map(|(pid, _, cmd)| format!("pid {pid} ({cmd})")),
                            ),
                            Err(e) => ev.unreadable(Source::Processes, e),
                        }
                        // The 201 follows the durable admission, so the task
                        // reads `running` until the Retry run settles.
                        wait_task(shared, until, settled)?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn turn_active(t: &Value) -> bool {
    t["runs"]
        .as_array()
        .and_then(|runs| runs.last())
        .and_then(|r| r["turns"].as_array())
        .and_then(|turns| turns.last())
        .is_some_and(|turn| matches!(turn["status"].as_str(), Some("intent" | "accepted")))
}

fn teardown(layout: &Layout, shared: &Shared, ev: &mut Evidence) {
    read_runner(shared, ev);
    shared.stop.store(true, Ordering::SeqCst);
    if let Some(w) = shared.waker.lock().expect("waker").as_ref() {
        w.wake();
    }
    if let Some(t) = shared.cut_thread.lock().expect("cut thread").take() {
        let _ = t.join();
    }
    if let Some(r) = shared.runner.lock().expect("runner").take() {
        let _ = r.kill();
    }
    ev.reached_cut = shared.reached.load(Ordering::SeqCst);
    ev.events_applied = shared.faults_applied.load(Ordering::SeqCst);
    ev.cut_role = shared.cut_role.lock().expect("cut role").clone();
    ev.events_before_fault = shared.events_before.lock().expect("events").take();
    // The journal as it is now names the commands to look for; the evidence
    // itself is read below, once every process of the cell is dead.
    let early = fake_provider::journal::read(&layout.p("journal.jsonl")).unwrap_or_default();
    if let Err(e) = std::fs::read_to_string("/proc/self/stat") {
        ev.unreadable(Source::Processes, format!("/proc/self/stat: {e}"));
    }
    // Every process the cell knew of must be gone now that the runner is.
    let mut known = shared.pids.lock().expect("pids").clone();
    for e in &ev.events {
        if e["kind"] == "provider.spawned"
            && let Some(pid) = e.pointer("/data/pid").and_then(Value::as_u64)
        {
            let start = e.pointer("/data/start_time").and_then(Value::as_u64);
            known.push(("provider".into(), pid as u32, start));
        }
    }
    // Commands a fake Codex ran in sessions of their own outlive its
    // process group; the runner's stop must have ended them too.
    for e in &early {
        if e.fact.as_deref() == Some("effect.spawned")
            && let Some(pid) = e.data["pid"].as_u64()
        {
            known.push(("command".into(), pid as u32, e.data["start_time"].as_u64()));
        }
    }
    known.sort();
    known.dedup();
    for (role, pid, start) in &known {
        if nemesis::alive_same(*pid, *start) {
            ev.survivors.push(format!("{role} pid {pid}"));
            // Record, then clean up: the cell must not leave orphans behind.
            let _ = nemesis::signal_group(*pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    // Whatever still carries the cell's tag was started under the runner and
    // never stopped (a provider's child in a session of its own, say).
    for (pid, cmdline) in nemesis::tagged_processes(&layout.dir.display().to_string()) {
        if !known.iter().any(|(_, p, _)| *p == pid) {
            ev.survivors.push(format!("pid {pid} ({cmdline})"));
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    shared.holds.lock().expect("holds").clear();
    read_provider_evidence(&layout.dir, ev);
    ev.actions = shared.actions.lock().expect("actions").clone();
    for (exchange, op) in shared.injected.lock().expect("injected").drain(..) {
        ev.exchanges.push(exchange);
        ev.ops.push(op);
    }
    // The canary must be nowhere in the cell's files.
    let (files, problems) = crate::runner_client::walk_files(&layout.dir);
    for p in problems {
        ev.unreadable(Source::Files, p);
    }
    for file in files {
        let bytes = match std::fs::read(&file) {
            Ok(b) => b,
            // A socket or a file removed while the cell ended is no gap.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                ev.unreadable(Source::Files, format!("{}: {e}", file.display()));
                continue;
            }
        };
        if bytes
            .windows(ev.canary.len())
            .any(|w| w == ev.canary.as_bytes())
        {
            let rel = file.strip_prefix(&layout.dir).unwrap_or(&file);
            ev.canary_found_in.push(rel.display().to_string());
        }
    }
}

/// The final task view and run log, read at the end of the cell, each whole
/// or recorded as unreadable (a view from an earlier wait does not stand in
/// for a failed final read).
fn read_runner(shared: &Shared, ev: &mut Evidence) {
    let Some((client, _)) = shared.client() else {
        ev.unreadable(Source::Task, "no runner was running at the end of the cell");
        ev.unreadable(
            Source::RunLog,
            "no runner was running at the end of the cell",
        );
        return;
    };
    let at_ms = shared.started.elapsed().as_millis() as u64;
    let task = client.task(TASK_ID);
    ev.ops.push(Op::of("read.task", "", at_ms, &task));
    match task {
        Ok((200, t)) => ev.task = t,
        Ok((status, body)) => {
            ev.unreadable(Source::Task, format!("GET task answered {status}: {body}"))
        }
        Err(e) => ev.unreadable(Source::Task, format!("GET task: {e:#}")),
    }
    let at_ms = shared.started.elapsed().as_millis() as u64;
    let events = client.events(TASK_ID, 0).map(|evs| (200, evs));
    ev.ops.push(Op::of("read.events", "", at_ms, &events));
    match events {
        Ok((_, evs)) => ev.events = evs,
        Err(e) => ev.unreadable(Source::RunLog, format!("GET events: {e:#}")),
    }
}

/// The provider's journal, the effect ledger and every fake's store under
/// the cell directory `dir`, each read whole or recorded as unreadable.
pub fn read_provider_evidence(dir: &Path, ev: &mut Evidence) {
    match fake_provider::journal::read(&dir.join("journal.jsonl")) {
        Ok(j) => ev.journal = j,
        Err(e) => ev.unreadable(Source::Journal, e.to_string()),
    }
    match fake_provider::ledger::read(&dir.join("ledger.jsonl")) {
        Ok(l) => ev.ledger = l,
        Err(e) => ev.unreadable(Source::Ledger, e.to_string()),
    }
    for l in &mut ev.ledger {
        l.by = crate::evidence::controller_id(&l.by);
    }
    let (turns, problems) = crate::evidence::read_provider_turns(&dir.join("state/providers"));
    ev.provider_turns = turns;
    for p in problems {
        ev.unreadable(Source::ProviderStore, p);
    }
}

/// The live provider processes of the cell (pid, start time, command line),
/// found in the process table by the cut socket every process of the cell
/// inherits (`TURNCUT_CUT_SOCKET`), whatever the runner says about them:
/// `fake-provider` processes (providers and their effect commands).
fn cell_providers(socket: &Path) -> Result<Vec<(u32, u64, String)>, String> {
    let entry = format!("{}={}", cutpoint::ENV_SOCKET, socket.display());
    let mut found = nemesis::processes_with_env(&entry)?;
    found.retain(|(_, _, cmd)| cmd.contains("fake-provider"));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell directory with a journal, a ledger and a Codex store, each
    /// whole; `break_it` then damages one.
    fn read_with(break_it: impl Fn(&Path)) -> Evidence {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("journal.jsonl"), "").unwrap();
        std::fs::write(d.join("ledger.jsonl"), "").unwrap();
        let threads = d.join("state/providers/p1/threads");
        std::fs::create_dir_all(&threads).unwrap();
        std::fs::write(threads.join("th.json"), "{}").unwrap();
        break_it(d);
        let mut ev = Evidence::default();
        read_provider_evidence(d, &mut ev);
        ev
    }

    fn sources(ev: &Evidence) -> Vec<Source> {
        ev.unreadable.iter().map(|u| u.source).collect()
    }

    #[test]
    fn provider_evidence_is_read_whole_or_recorded_as_unreadable() {
        assert_eq!(sources(&read_with(|_| {})), vec![]);
        // A torn line inside the journal (a line in flight at the end is not
        // yet part of it; see `journal::read`).
        let torn =
            read_with(|d| std::fs::write(d.join("journal.jsonl"), "{\"v\":1,\"gen\n").unwrap());
        assert_eq!(sources(&torn), vec![Source::Journal]);
        let ledger = read_with(|d| {
            std::fs::remove_file(d.join("ledger.jsonl")).unwrap();
            std::fs::create_dir(d.join("ledger.jsonl")).unwrap();
        });
        assert_eq!(sources(&ledger), vec![Source::Ledger]);
        let store = read_with(|d| {
            std::fs::write(d.join("state/providers/p1/threads/th.json"), "{\"id\":").unwrap()
        });
        assert_eq!(sources(&store), vec![Source::ProviderStore]);
        assert!(
            store.unreadable[0].reason.contains("th.json"),
            "{:?}",
            store.unreadable
        );
    }
}
