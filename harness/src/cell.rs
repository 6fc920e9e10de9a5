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
            hang_idle_timeout_ms: 250,
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
    /// The runner whose disk is full (a `disk-full` event), until its next
    /// attempted write.
    disk_full: Mutex<Option<u32>>,
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

/// The schedule of a cell: its events, then a scenario's `recut` (with the
/// first cut's fault) when the cell names no later event itself and `recut`
/// is on.
pub fn schedule_of(scenario: &Scenario, spec: &CellSpec, recut: bool) -> Vec<Event> {
    let mut events = spec.schedule().unwrap_or_default();
    if events.len() == 1
        && recut
        && let Some(recut) = &scenario.recut
    {
        let fault = events[0].fault;
        events.push(Event {
            cut: recut.clone(),
            fault,
        });
    }
    events
}

/// What every runner of a cell is armed with (its providers inherit it): the
/// first cut as it is, each later event's point at every occurrence (`#*`: a
/// later event counts the hits of its point by any process after the event
/// before it), and with a `disk-full` event every before-write point (the
/// runner's next write after the disk filled is where the disk comes back).
/// Hits that are not the next event's go on at once.
fn arms_for(events: &[Event]) -> Vec<Cut> {
    let every = |point: &str| Cut {
        point: point.to_owned(),
        n: cutpoint::EVERY,
    };
    let mut arms: Vec<Cut> = events.first().map(|e| e.cut.clone()).into_iter().collect();
    let later = events.iter().skip(1).map(|e| every(&e.cut.point));
    let disk = events
        .iter()
        .any(|e| e.fault == Fault::DiskFull)
        .then(|| every(&format!("{}*", crate::model::WRITE_POINTS)));
    for cut in later.chain(disk) {
        if !arms.contains(&cut) {
            arms.push(cut);
        }
    }
    arms
}

/// Whether `hit` is the next event of the schedule: the first event by its
/// per-process occurrence, a later one by the count of its point's hits
/// since the previous event.
fn is_next_event(shared: &Shared, stage: usize, hit: &cutpoint::Hit) -> bool {
    let Some(event) = shared.events.get(stage) else {
        return false;
    };
    if event.cut.point != hit.point {
        return false;
    }
    if stage == 0 {
        return event.cut.n == hit.n;
    }
    let mut since = shared.since.lock().expect("since");
    *since += 1;
    *since == event.cut.n
}

/// Why the acceptor handed a hit to the event loop.
enum Wanted {
    /// The next event of the schedule, with its index.
    Event(usize),
    /// A turn-active follow-up's sync point (and maybe also the next event).
    Sync(Option<usize>),
    /// The next write of a runner whose disk is full.
    DiskBack,
}

/// The cut thread: an acceptor answers every hit that needs nothing at once
/// (so a process, or the runner's store, never waits on a fault being
/// applied elsewhere) and hands the others to this loop, which applies them
/// one at a time in the order they were matched.
fn cut_loop(
    listener: &cutpoint::Listener,
    shared: &Arc<Shared>,
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
) {
    let (tx, rx) = std::sync::mpsc::channel::<(cutpoint::HeldHit, Wanted)>();
    std::thread::scope(|s| {
        s.spawn(move || accept_hits(listener, shared, tx));
        for (held, wanted) in rx {
            match wanted {
                Wanted::DiskBack => disk_comes_back(shared, env, layout, canary, held),
                Wanted::Sync(event) => {
                    if let Some(held) = hold_for_sync(shared, env, held, event.is_some())
                        && let Some(stage) = event
                    {
                        apply_event(shared, env, layout, canary, held, stage);
                    }
                }
                Wanted::Event(stage) => apply_event(shared, env, layout, canary, held, stage),
            }
        }
    });
}

/// Accepts hits until teardown; see [`cut_loop`].
fn accept_hits(
    listener: &cutpoint::Listener,
    shared: &Shared,
    tx: std::sync::mpsc::Sender<(cutpoint::HeldHit, Wanted)>,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        // Teardown wakes the listener; the deadline only bounds a missed wake.
        let held = match listener.accept_hit(Duration::from_millis(100)) {
            Ok(h) => h,
            Err(cutpoint::Error::Timeout { .. } | cutpoint::Error::Woken) => continue,
            Err(e) => {
                shared.act("cut.error", json!({ "error": e.to_string() }));
                continue;
            }
        };
        shared.pids.lock().expect("pids").push((
            held.hit.role.clone(),
            held.hit.pid,
            nemesis::start_time(held.hit.pid),
        ));
        let wanted = wanted(shared, &held.hit);
        match wanted {
            Some(w) => {
                if let Err(std::sync::mpsc::SendError((held, _))) = tx.send((held, w)) {
                    let _ = held.resume();
                }
            }
            // Another event's point before its turn, or a respawned provider
            // that inherited the first arm: let it pass.
            None => {
                let _ = held.resume();
            }
        }
    }
}

/// What the event loop must do with `hit`, if anything. Matching the next
/// event moves the schedule on at once, so the count of a later event
/// starts right after the hit that matched the one before it.
fn wanted(shared: &Shared, hit: &cutpoint::Hit) -> Option<Wanted> {
    let full = *shared.disk_full.lock().expect("disk full");
    if full == Some(hit.pid) && hit.point.starts_with(crate::model::WRITE_POINTS) {
        *shared.disk_full.lock().expect("disk full") = None;
        return Some(Wanted::DiskBack);
    }
    let stage = shared.stage.load(Ordering::SeqCst);
    let event = is_next_event(shared, stage, hit).then(|| {
        *shared.since.lock().expect("since") = 0;
        shared.stage.store(stage + 1, Ordering::SeqCst);
        shared.reached.store(true, Ordering::SeqCst);
        stage
    });
    let is_sync = shared
        .sync
        .as_ref()
        .is_some_and(|c| c.point == hit.point && c.n == hit.n)
        && hit.role == "runner"
        && !shared.follow_up_sent.load(Ordering::SeqCst);
    match (is_sync, event) {
        (true, e) => Some(Wanted::Sync(e)),
        (false, Some(stage)) => Some(Wanted::Event(stage)),
        (false, None) => None,
    }
}

/// Applies event `stage` at the held hit that matched it.
fn apply_event(
    shared: &Arc<Shared>,
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
    held: cutpoint::HeldHit,
    stage: usize,
) {
    let event = shared.events[stage].clone();
    mark_trace(shared, stage);
    shared.act(
        if stage == 0 { "cut.reached" } else { "event.reached" },
        json!({ "event": stage + 1, "point": held.hit.point, "n": held.hit.n, "role": held.hit.role, "pid": held.hit.pid, "fault": event.fault.as_str() }),
    );
    if stage == 0 {
        *shared.cut_role.lock().expect("cut role") = Some(held.hit.role.clone());
    }
    if event.fault.is_action() {
        // The request passes cut points of its own, so it runs on a thread of
        // its own; it counts as applied when it has its answer.
        let (sh, env) = (Arc::clone(shared), env.clone());
        std::thread::spawn(move || {
            inject_action(&sh, &env, held, event.fault, stage);
            sh.faults_applied.fetch_add(1, Ordering::SeqCst);
            notify(&sh);
        });
        return;
    }
    if let Err(e) = apply_fault(shared, env, layout, canary, event.fault, held) {
        *shared.error.lock().expect("error") =
            Some(format!("failed to apply {}: {e:#}", event.fault));
    }
    shared.faults_applied.fetch_add(1, Ordering::SeqCst);
    notify(shared);
}

/// After a `disk-full` event, the runner's next attempted write fails too
/// (the disk is still full); then the harness restarts the runner, which
/// brings the disk back.
fn disk_comes_back(
    shared: &Shared,
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
    held: cutpoint::HeldHit,
) {
    let point = held.hit.point.clone();
    let _ = held.fail(cutpoint::IoFault::Enospc);
    shared.act("disk.still-full", json!({ "point": point }));
    if let Err(e) = restart_runner(shared, env, layout, canary, "disk.back") {
        *shared.error.lock().expect("error") =
            Some(format!("failed to bring the disk back: {e:#}"));
    }
    notify(shared);
}

/// SIGKILLs the current runner and starts the next one (`why` is recorded).
fn restart_runner(
    shared: &Shared,
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
    why: &str,
) -> anyhow::Result<()> {
    let runner = shared.runner.lock().expect("runner").take();
    if let Some(r) = runner {
        let pid = r.pid();
        r.kill()?;
        shared.act("fault.kill-runner", json!({ "pid": pid, "why": why }));
    }
    start_runner(env, layout, shared, canary)?;
    shared.act(why, json!({}));
    Ok(())
}

/// A storage fault: the held before-write hit is answered `fail EIO` (one
/// write fails) or `fail ENOSPC` (the disk is full until the runner's next
/// write, see [`disk_comes_back`]).
fn apply_storage(shared: &Shared, fault: Fault, held: cutpoint::HeldHit) -> anyhow::Result<()> {
    if held.hit.role != "runner" || !fault.applies_at(&held.hit.point) {
        shared.act(
            "fault.not-a-write",
            json!({ "fault": fault.as_str(), "point": held.hit.point }),
        );
        let _ = held.resume();
        return Ok(());
    }
    let (io, pid) = match fault {
        Fault::DiskFull => (cutpoint::IoFault::Enospc, Some(held.hit.pid)),
        _ => (cutpoint::IoFault::Eio, None),
    };
    *shared.disk_full.lock().expect("disk full") = pid;
    shared.act(
        &format!("fault.{fault}"),
        json!({ "point": held.hit.point, "errno": io.as_str() }),
    );
    held.fail(io)?;
    Ok(())
}

/// A turn-active follow-up's sync point: the runner is held while the
/// driver sends the follow-up. The follow-up's own request passes cut points
/// too, so unless this hit is also the next event, the hold waits on a
/// thread of its own and the cut loop keeps answering (`None`).
fn hold_for_sync(
    shared: &Arc<Shared>,
    env: &CellEnv,
    held: cutpoint::HeldHit,
    is_armed: bool,
) -> Option<cutpoint::HeldHit> {
    shared.sync_reached.store(true, Ordering::SeqCst);
    notify(shared);
    let until = Instant::now() + Duration::from_millis(env.wait_ms);
    if !is_armed {
        let sh = Arc::clone(shared);
        std::thread::spawn(move || {
            wait_until(&sh, until, || sh.follow_up_sent.load(Ordering::SeqCst));
            let _ = held.resume();
        });
        return None;
    }
    wait_until(shared, until, || {
        shared.follow_up_sent.load(Ordering::SeqCst)
    });
    Some(held)
}

/// Appends where event `stage` was applied to the cut-point trace, so that
/// discovery can tell the hits of recovery from those before the event.
fn mark_trace(shared: &Shared, stage: usize) {
    let Some(path) = &shared.trace else { return };
    let line = json!({ "role": "turncut", "pid": std::process::id(), "point": EVENT_MARK, "n": stage + 1 });
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()));
    if let Err(e) = appended {
        shared.act("trace.error", json!({ "error": e.to_string() }));
    }
}

/// The trace line a cell writes when it applies an event (`n` is the
/// event's number, from 1).
pub const EVENT_MARK: &str = "turncut.event.applied";

fn notify(shared: &Shared) {
    let _g = shared.generation.lock().expect("generation");
    shared.changed.notify_all();
}

fn apply_fault(
    shared: &Shared,
    env: &CellEnv,
    layout: &Layout,
    canary: &str,
    fault: crate::model::Fault,
    held: cutpoint::HeldHit,
) -> anyhow::Result<()> {
    let client = shared.client().map(|(c, _)| c);
    // What the controller could read before the fault: nothing of it may
    // vanish. At a before-write point the store is blocked on the held write,
    // so nothing can be read there.
    let at_write = held.hit.point.starts_with(crate::model::WRITE_POINTS);
    if let Some(c) = client.as_ref().filter(|_| !at_write)
        && let Ok(evs) = c.events(TASK_ID, 0)
    {
        *shared.events_before.lock().expect("events") = Some(evs);
    }
    if fault.is_storage() {
        return apply_storage(shared, fault, held);
    }
    let plan = nemesis::plan(fault);
    let provider = if held.hit.role == "provider" {
        Some(held.hit.pid)
    } else if plan.provider_signal.is_some() {
        client.as_ref().and_then(live_provider)
    } else {
        None
    };
    if plan.kill_runner {
        let runner = shared.runner.lock().expect("runner").take();
        if let Some(r) = runner {
            let pid = r.pid();
            r.kill()?;
            shared.act("fault.kill-runner", json!({ "pid": pid }));
        }
    }
    match (plan.provider_signal, provider) {
        (Some(signal), Some(pid)) => {
            nemesis::signal_group(pid, signal)?;
            shared.act(
                &format!("fault.{}", fault.as_str()),
                json!({ "provider_pid": pid, "signal": signal.as_str() }),
            );
        }
        (Some(_), None) => shared.act("fault.no-provider", json!({ "fault": fault.as_str() })),
        (None, _) => {}
    }
    if plan.kill_runner && plan.provider_signal.is_none() && held.hit.role == "provider" {
        // The provider stays busy at its cut while the runner restarts: the
        // restarted runner must stop it (old provider first). Released only at
        // teardown, after the survivors are counted, so a runner that skips
        // the stop leaves a live orphan for the hygiene oracle.
        shared
            .holds
            .lock()
            .expect("holds")
            .push(held.hold_forever());
    } else {
        // A runner hit goes on; a killed or stopped provider never reads it.
        let _ = held.resume();
    }
    if plan.kill_runner {
        start_runner(env, layout, shared, canary)?;
        shared.act(
            "restart",
            json!({ "next_event": shared.events.get(shared.stage.load(Ordering::SeqCst)).map(ToString::to_string) }),
        );
    }
    Ok(())
}

/// The message id a controller-action event sends: `fx1` for the
/// follow-up of the first event, `rx2` for the Retry of the second, …
pub fn injected_message_id(fault: Fault, stage: usize) -> String {
    let prefix = if fault == Fault::Retry { "rx" } else { "fx" };
    format!("{prefix}{}", stage + 1)
}

/// A controller-action event (`follow-up`, `retry`): while the hit is held,
/// the controller sends the request; the hit goes on once it is answered (or
/// after a short bound, when the held process itself is what would answer
/// it). The request is recorded like any controller request, so the oracles
/// hold it to the same rules (a follow-up consumed exactly once or refused by
/// the fence; a Retry admitted only for a failed task, and then working).
fn inject_action(
    shared: &Shared,
    env: &CellEnv,
    held: cutpoint::HeldHit,
    fault: Fault,
    stage: usize,
) {
    let message_id = injected_message_id(fault, stage);
    let (kind, text) = match fault {
        Fault::Retry => ("retry", ""),
        _ => ("follow_up", "Also add a CHANGELOG"),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some((client, _)) = shared.client() {
        let id = message_id.clone();
        std::thread::spawn(move || {
            let answer = match fault {
                Fault::Retry => client.retry(TASK_ID, &id),
                _ => client.follow_up(TASK_ID, &id, text),
            };
            let _ = tx.send(answer);
        });
    }
    let at_ms = shared.started.elapsed().as_millis() as u64;
    let bound = Duration::from_millis(env.wait_ms.min(2_000));
    let first = rx.recv_timeout(bound);
    let _ = held.resume();
    let answer = match first {
        Ok(a) => a,
        Err(_) => rx
            .recv_timeout(Duration::from_millis(env.wait_ms))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer before the deadline"))),
    };
    // No answer: the request may or may not have been applied (an `info` op).
    let op = Op::of(kind, &message_id, at_ms, &answer);
    let (status, body) = answer.unwrap_or_else(|e| (0, json!({ "error": format!("{e:#}") })));
    shared.act(
        &format!("fault.{fault}"),
        json!({ "message_id": message_id, "status": status }),
    );
    let exchange = Exchange {
        kind: kind.to_owned(),
        message_id,
        text: text.to_owned(),
        status,
        body,
    };
    shared
        .injected
        .lock()
        .expect("injected")
        .push((exchange, op));
}

/// The provider process the runner currently has, from its run log.
fn live_provider(client: &RunnerClient) -> Option<u32> {
    let events = client.events(TASK_ID, 0).ok()?;
    let mut live: Vec<u32> = Vec::new();
    for e in events {
        match e["kind"].as_str() {
            Some("provider.spawned") => {
                if let Some(pid) = e.pointer("/data/pid").and_then(Value::as_u64) {
                    live.push(pid as u32);
                }
            }
            Some("provider.stopped") => {
                if let Some(pid) = e.pointer("/data/identity/pid").and_then(Value::as_u64) {
                    live.retain(|p| *p != pid as u32);
                }
            }
            _ => {}
        }
    }
    live.last().copied()
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
