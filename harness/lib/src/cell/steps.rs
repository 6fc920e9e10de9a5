//! The controller's side of a cell: the scenario's steps as HTTP requests
//! to whichever runner is running (re-sent across restarts, a 503 sent
//! again), and the waits on the task, each with the cell's deadline.

use std::path::Path;
use std::time::Instant;

use serde::Deserialize as _;
use serde_json::{Value, json};

use super::Ctx;
use crate::evidence::{ActionKind, Evidence, Exchange, Op, OpKind, RequestKind, Source};
use crate::model::TaskState;
use crate::nemesis;
use crate::runner_client::RunnerClient;
use crate::scenario::{FollowUpWhen, RetryWhen, Scenario, Step};

pub(super) fn settled(t: &Value) -> bool {
    matches!(
        t["state"].as_str(),
        Some("completed" | "failed" | "needs_human")
    )
}

/// What stopped a cell's steps short.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A step that waited on the runner until the cell's deadline: no
    /// answer to a request, or a task that never reached the state the step
    /// waits for. It is the runner's doing (a stranded task fails liveness),
    /// unlike a harness error; the cell still records it as what stopped its
    /// steps.
    #[error("{0}")]
    DeadlineMissed(String),
    /// Anything else: the harness could not go on.
    #[error(transparent)]
    Harness(#[from] anyhow::Error),
}

/// A step's result.
pub type StepResult<T> = Result<T, StepError>;

/// Calls `f` with the current runner's client until it succeeds, across
/// runner restarts: a failed call waits for the next runner generation (the
/// nemesis restarts a killed runner at once), until the deadline.
pub(super) fn with_runner<T>(
    ctx: &Ctx,
    until: Instant,
    mut f: impl FnMut(&RunnerClient) -> anyhow::Result<T>,
) -> StepResult<T> {
    let board = &ctx.board;
    loop {
        let seen = match board.client() {
            Some((client, generation)) => match f(&client) {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() >= until => {
                    return Err(StepError::DeadlineMissed(format!("{e:#}")));
                }
                Err(_) => generation,
            },
            None => {
                // The nemesis is between killing the runner and restarting it.
                if Instant::now() >= until {
                    return Err(anyhow::anyhow!("no runner came back before the deadline").into());
                }
                board.read(|s| s.generation)
            }
        };
        board.wait_until(until, |s| s.generation != seen);
    }
}

/// Waits for task `task` to satisfy `pred` across runner restarts.
pub(super) fn wait_task(
    ctx: &Ctx,
    until: Instant,
    task: &str,
    pred: impl Fn(&Value) -> bool,
) -> StepResult<Value> {
    // Out of time, the wait's error is the deadline missed (`with_runner`).
    with_runner(ctx, until, |client| {
        let left = until.saturating_duration_since(Instant::now());
        anyhow::ensure!(!left.is_zero(), "the deadline passed");
        client.wait_task(task, left, &pred)
    })
}

/// A controller request: its task, kind, path, message id and text.
#[derive(Clone, Copy)]
struct Request<'a> {
    task: &'a str,
    kind: RequestKind,
    path: &'a str,
    message_id: &'a str,
    text: &'a str,
}

/// Attempts of a controller request answered 503 (`storage_failed`).
const SEND_ATTEMPTS_503: usize = 4;

/// Sends one controller request, re-sent across runner restarts (the API is
/// idempotent on ids), and records every attempt as an op, the final answer
/// as an action and an exchange (status 0 when none came before the
/// deadline); returns the HTTP status.
fn send(
    ctx: &Ctx,
    until: Instant,
    ev: &mut Evidence,
    req: Request<'_>,
    body: &Value,
) -> StepResult<u16> {
    let Request {
        task,
        kind,
        path,
        message_id,
        text,
    } = req;
    // A 503 (`storage_failed`) changed nothing and may be repeated, as a
    // controller would; a few attempts outlast a full disk that the harness
    // brings back with a runner restart.
    let mut answer: StepResult<(u16, Value)> = Err(anyhow::anyhow!("not sent").into());
    let sent_at_ms = ctx.rec.now_ms();
    for _ in 0..SEND_ATTEMPTS_503 {
        answer = with_runner(ctx, until, |client| {
            let at_ms = ctx.rec.now_ms();
            let answer = client
                .post(path, body)
                .map_err(|e| e.context(format!("POST {path}")));
            ev.ops
                .push(Op::of(OpKind::Request(kind), message_id, at_ms, &answer));
            answer
        });
        if !matches!(answer, Ok((503, _))) {
            break;
        }
        // A full disk comes back with a runner restart: once it is under
        // way the attempts wait for it, or they could all be spent before
        // it (under load: four 503s in 6 ms, the restart 32 ms later, and a
        // wave cell `unknown` on a missing task).
        ctx.board.wait_until(until, |s| !s.disk_coming_back);
    }
    let (status, answer) = match answer {
        Ok(a) => a,
        Err(e) => (0, json!({ "error": format!("{e:#}") })),
    };
    ctx.rec.act(
        ActionKind::Request(kind),
        json!({ "message_id": message_id, "status": status }),
    );
    ev.exchanges.push(Exchange {
        task: task.to_owned(),
        kind,
        message_id: message_id.to_owned(),
        text: text.to_owned(),
        status,
        body: answer.clone(),
        state_before: None,
        expect: None,
        sent_at_ms,

        answered_at_ms: ctx.rec.now_ms(),
        injected: false,
    });
    if status == 0 {
        return Err(StepError::DeadlineMissed(format!(
            "{kind} {message_id}: no answer before the deadline: {answer}"
        )));
    }
    Ok(status)
}

/// Runs the scenario's steps against whichever runner is running, until
/// the last one or an error (a request with no answer before `until`).
pub(super) fn run_steps(
    ctx: &Ctx,
    scenario: &Scenario,
    profile: &str,
    model_api: Option<u32>,
    until: Instant,
    ev: &mut Evidence,
) -> StepResult<()> {
    for step in &scenario.steps {
        let task = step.task();
        match step {
            Step::Submit {
                prompt, message_id, ..
            } => {
                let body = json!({
                    "task_id": task, "message_id": message_id, "prompt": prompt,
                    "profile": profile, "workspace": ctx.workspace(task).display().to_string(),
                });
                let req = Request {
                    task,
                    kind: RequestKind::Submit,
                    path: "/v1/tasks",
                    message_id,
                    text: prompt,
                };
                send(ctx, until, ev, req, &body)?;
            }
            Step::FollowUp {
                text,
                message_id,
                when,
                expect,
                ..
            } => {
                let sent = follow_up(ctx, until, ev, task, (text, message_id), *when);
                if let Some(x) = ev
                    .exchanges
                    .last_mut()
                    .filter(|x| x.message_id == *message_id)
                {
                    x.expect = *expect;
                }
                sent?
            }
            Step::Await { .. } => {
                wait_task(ctx, until, task, settled)?;
                ctx.rec.act(ActionKind::Settled, json!({ "task": task }));
            }
            Step::Retry {
                when, message_id, ..
            } => {
                retry(ctx, model_api, until, ev, task, message_id, *when)?;
            }
        }
    }
    Ok(())
}

/// A follow-up step on `task`: waits for its moment (`when`), then sends
/// (text, message id).
fn follow_up(
    ctx: &Ctx,
    until: Instant,
    ev: &mut Evidence,
    task: &str,
    (text, message_id): (&str, &str),
    when: FollowUpWhen,
) -> StepResult<()> {
    let mut state_before = None;
    match when {
        FollowUpWhen::Now => {}
        FollowUpWhen::TurnActive => {
            // From now on the next turn acceptance holds the runner (the
            // cut side), and its run-log event wakes this wait; a turn
            // already in flight, or a settled task (no turn may come, and
            // waiting for one would wait out the deadline), ends it at once.
            // With several tasks the acceptance held may be another task's:
            // then this one's next event sends it, whatever its state.
            ctx.board.update(|s| s.sync_wanted = true);
            let held = || ctx.board.read(|s| s.sync_reached);
            let _ = wait_task(ctx, until, task, |t| settled(t) || turn_active(t) || held());
        }
        FollowUpWhen::Recovering => {
            // The first event's fault makes the runner or a provider log
            // (or restart), which wakes this wait; a clean run settles.
            let applied = || ctx.board.read(|s| s.applied > 0);
            let _ = wait_task(ctx, until, task, |t| settled(t) || applied());
        }
        FollowUpWhen::Settled => {
            // The state it was sent in: a failed task must refuse it.
            state_before = wait_task(ctx, until, task, settled)
                .ok()
                .and_then(|t| TaskState::deserialize(&t["state"]).ok());
        }
    }
    let path = format!("/v1/tasks/{task}/messages");
    let body = json!({ "message_id": message_id, "text": text });
    let req = Request {
        task,
        kind: RequestKind::FollowUp,
        path: &path,
        message_id,
        text,
    };
    let sent = send(ctx, until, ev, req, &body);
    if let Some(x) = ev.exchanges.last_mut() {
        x.state_before = state_before;
    }
    if when == FollowUpWhen::TurnActive {
        ctx.board.update(|s| {
            s.sync_wanted = false;
            s.sync_reached = false;
            s.turn_active_left = s.turn_active_left.saturating_sub(1);
        });
    }
    sent?;
    Ok(())
}

/// A Retry step on `task`: once it settled, sent if it failed (or
/// `always`); every provider process of the task alive before it must be
/// gone at its 201.
fn retry(
    ctx: &Ctx,
    model_api: Option<u32>,
    until: Instant,
    ev: &mut Evidence,
    task: &str,
    message_id: &str,
    when: RetryWhen,
) -> StepResult<()> {
    let view = wait_task(ctx, until, task, settled)?;
    let failed = matches!(view["state"].as_str(), Some("failed" | "needs_human"));
    if !failed && when != RetryWhen::Always {
        return Ok(());
    }
    let path = format!("/v1/tasks/{task}/retry");
    let body = json!({ "message_id": message_id });
    // The stop proof, from the process table: every provider
    // process alive before the Retry must be gone at its 201.
    let before = task_providers(ctx, task, model_api);
    let req = Request {
        task,
        kind: RequestKind::Retry,
        path: &path,
        message_id,
        text: "",
    };
    let sent = send(ctx, until, ev, req, &body);
    // The state the Retry was sent in: what the contract allows it.
    if let Some(x) = ev.exchanges.last_mut() {
        x.state_before = TaskState::deserialize(&view["state"]).ok();
    }
    let status = sent?;
    if status == 201 {
        match before {
            Ok(procs) => ev.alive_at_retry_of(task).extend(
                procs
                    .into_iter()
                    .filter(|(pid, start, _)| nemesis::alive_same(*pid, Some(*start)))
                    .map(|(pid, _, cmd)| format!("pid {pid} ({cmd})")),
            ),
            Err(e) => ev.unreadable(Source::Processes, e),
        }
        // The 201 follows the durable admission, so the task
        // reads `running` until the Retry run settles.
        wait_task(ctx, until, task, settled)?;
    }
    Ok(())
}

/// The live provider processes of task `task` ([`cell_providers`]; with
/// several tasks, those working in its workspace), a real product's model
/// API left out: it serves the whole cell and is no provider.
fn task_providers(
    ctx: &Ctx,
    task: &str,
    model_api: Option<u32>,
) -> Result<Vec<(u32, u64, String)>, String> {
    let mut procs = cell_providers(&ctx.layout.p("cut.sock"))?;
    procs.retain(|(pid, _, _)| Some(*pid) != model_api);
    if ctx.setup.tasks.len() > 1 {
        let ws = ctx.workspace(task);
        procs.retain(|(pid, _, _)| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == ws)
        });
    }
    Ok(procs)
}

fn turn_active(t: &Value) -> bool {
    t["runs"]
        .as_array()
        .and_then(|runs| runs.last())
        .and_then(|r| r["turns"].as_array())
        .and_then(|turns| turns.last())
        .is_some_and(|turn| matches!(turn["status"].as_str(), Some("intent" | "accepted")))
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
