//! `turncut doctor`: checks a runner against the runner contract
//! (`docs/runner-contract.md`, the spec in `runner_spec`) step by step,
//! before anyone spends a wave on it.
//!
//! For each profile it may claim, the runner is started exactly as a cell
//! starts it (`cell::cell_runner_command`, `cell::write_cell_inputs`): it
//! must announce its address and write its token; it must refuse a wrong
//! token and answer every call of the spec with a status and a body the spec
//! allows; a clean task (the `single-task` scenario's script), a follow-up
//! and a refused Retry must go through; the run log must have the kinds a
//! wave needs. A profile it refuses with 409 `unknown_profile` is not claimed.
//! Then one traced clean cell per claimed profile gives the oracles'
//! verdicts and the cut points a wave will cut. The first missing piece
//! stops the examination and names where the spec says it. This module
//! judges conformance to the contract, not recovery: that is the wave's.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cell::{CellEnv, cell_runner_command, write_cell_inputs};
use crate::model::{OracleResult, Role, Verdict};
use crate::plan::{Boundary, boundaries_of, expand};
use crate::run_log::RunLogEvent;
use crate::runner_client::{RunnerClient, RunnerProcess, task_view};
use crate::runner_spec::{self, KindStatus};
use crate::scenario::Scenario;

/// The task id the doctor's runner gets.
const TASK: &str = "doctor-1";

/// The first piece of the contract a runner lacks, and where the spec says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    /// What is missing or wrong.
    pub what: String,
    /// Where the contract says it (`docs/runner-contract.md §3`).
    pub spec: String,
}

fn missing(what: impl Into<String>, spec: &str) -> Missing {
    Missing {
        what: what.into(),
        spec: spec.to_owned(),
    }
}

/// What a traced clean cell of a claimed profile showed.
#[derive(Clone, Debug)]
pub struct Traced {
    /// The profile.
    pub profile: String,
    /// The oracles' verdicts on the clean cell.
    pub oracles: Vec<OracleResult>,
    /// The boundaries of its trace.
    pub boundaries: Vec<Boundary>,
    /// The cells a depth-1 wave plans for the scenario (the clean one included).
    pub cells: usize,
    /// The run-log kinds it wrote.
    pub kinds: Vec<String>,
}

/// What the doctor found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The checks that passed, in order.
    pub passed: Vec<String>,
    /// Profiles the runner admitted a task on.
    pub claimed: Vec<String>,
    /// Profiles it refused with `unknown_profile`.
    pub refused: Vec<String>,
    /// One traced clean cell per claimed profile.
    pub traced: Vec<Traced>,
    /// The first missing piece, if any: a wave cannot run.
    pub missing: Option<Missing>,
}

impl Report {
    /// Whether a wave can run on this runner (nothing is missing).
    pub fn ready(&self) -> bool {
        self.missing.is_none()
    }
}

/// Examines the runner of `env` on each of `profiles` with `scenario`'s
/// script (`single-task`).
pub fn examine(env: &CellEnv, scenario: &Scenario, profiles: &[String]) -> Report {
    let mut report = Report::default();
    for profile in profiles {
        match check_profile(env, scenario, profile, &mut report.passed) {
            Ok(true) => report.claimed.push(profile.clone()),
            Ok(false) => report.refused.push(profile.clone()),
            Err(m) => {
                report.missing = Some(m);
                return report;
            }
        }
    }
    if report.claimed.is_empty() {
        report.missing = Some(missing(
            format!(
                "the runner admitted a task on none of {profiles:?} (each answered 409 unknown_profile)"
            ),
            "docs/runner-contract.md §1 (profiles file)",
        ));
        return report;
    }
    for profile in report.claimed.clone() {
        match traced(env, scenario, &profile) {
            Ok(t) => report.traced.push(t),
            Err(m) => {
                report.missing = Some(m);
                return report;
            }
        }
    }
    report.missing = first_gap(&report.traced);
    report
}

/// One profile: start, auth, the API, a clean task, the run log. `Ok(false)`
/// when the runner refuses the profile.
fn check_profile(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    passed: &mut Vec<String>,
) -> Result<bool, Missing> {
    let dir = crate::tempdirs::tempdir("doctor")
        .map_err(|e| missing(format!("cannot create a directory: {e}"), "-"))?;
    write_cell_inputs(env, scenario, profile, dir.path())
        .map_err(|e| missing(format!("cannot write the cell's inputs: {e:#}"), "-"))?;
    let runner = start(env, dir.path(), passed)?;
    let claimed = examine_runner(env, dir.path(), &runner, profile, passed);
    let _ = runner.kill();
    // Whatever the runner left (a provider it did not stop) dies with the
    // examination, as it does with a cell.
    for (pid, _) in crate::nemesis::tagged_processes(&dir.path().display().to_string()) {
        let _ = crate::nemesis::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
    }
    claimed
}

/// The checks of one started runner on `profile`.
fn examine_runner(
    env: &CellEnv,
    dir: &Path,
    runner: &RunnerProcess,
    profile: &str,
    passed: &mut Vec<String>,
) -> Result<bool, Missing> {
    let c = runner.client();
    check_auth(runner, &c, passed)?;
    let ws = dir.join("ws").display().to_string();
    let body = json!({"task_id": TASK, "message_id": "doctor-m1", "prompt": "Create hello.txt", "profile": profile, "workspace": ws});
    let (status, answer) = request(&c, "POST", "/v1/tasks", "/v1/tasks", Some(&body))?;
    if status == 409 && answer["reason"] == "unknown_profile" {
        passed.push(format!(
            "{profile}: refused with 409 unknown_profile (not claimed)"
        ));
        return Ok(false);
    }
    expect(status, 201, "POST /v1/tasks of a clean task", &answer)?;
    let (again, answer2) = request(&c, "POST", "/v1/tasks", "/v1/tasks", Some(&body))?;
    if again != 201 || answer2 != answer {
        return Err(missing(
            format!(
                "POST /v1/tasks sent again answered {again} {answer2}, not the first answer {answer}: a request a restart cut off is sent again"
            ),
            "docs/runner-contract.md §3 (idempotent by ids)",
        ));
    }
    passed.push(format!("{profile}: POST /v1/tasks 201, the same again 201"));
    check_errors(&c, passed)?;
    settle(env, &c, profile, "the clean task")?;
    follow_up_and_retry(env, &c, profile, passed)?;
    check_task_and_log(&c, profile, passed)?;
    Ok(true)
}

/// Starts the runner as a cell does: its listening line and its token.
fn start(env: &CellEnv, dir: &Path, passed: &mut Vec<String>) -> Result<RunnerProcess, Missing> {
    let mut cmd = cell_runner_command(env, dir, "turncut-canary-doctor", None);
    let runner = RunnerProcess::start(
        &mut cmd,
        &dir.join("state"),
        &dir.join("runnerd.stderr"),
        Duration::from_millis(env.wait_ms),
    )
    .map_err(|e| {
        missing(
            format!(
                "the runner did not start as a cell starts it ({}): {e:#}",
                env.runner_cmd.join(" ")
            ),
            "docs/runner-contract.md §1 (print `listening on http://ADDR`, write DIR/token)",
        )
    })?;
    passed.push(format!(
        "start: listening on {}, token in --state-dir/token",
        runner.base
    ));
    Ok(runner)
}

/// A wrong token is refused 401; the right one reads `/v1/health`.
fn check_auth(
    runner: &RunnerProcess,
    c: &RunnerClient,
    passed: &mut Vec<String>,
) -> Result<(), Missing> {
    let wrong = RunnerClient::new(&runner.base, "not-the-token-0123456789");
    let (s, b) = wrong.get("/v1/health").map_err(|e| {
        missing(
            format!("GET /v1/health failed: {e:#}"),
            "docs/runner-contract.openapi.json /v1/health",
        )
    })?;
    if s != 401 {
        return Err(missing(
            format!("GET /v1/health with a wrong token answered {s} {b}, not 401"),
            "docs/runner-contract.md §1 (bearer token)",
        ));
    }
    conforms("/v1/health", "GET", s, &b)?;
    let (s, b) = request(c, "GET", "/v1/health", "/v1/health", None)?;
    expect(s, 200, "GET /v1/health", &b)?;
    passed.push("auth: a wrong token 401, the token reads /v1/health".to_owned());
    Ok(())
}

/// The error answers of the spec: unknown task, bad JSON, unknown path.
fn check_errors(c: &RunnerClient, passed: &mut Vec<String>) -> Result<(), Missing> {
    let unknown = [
        ("GET", "/v1/tasks/{id}", "/v1/tasks/doctor-none", None),
        (
            "GET",
            "/v1/tasks/{id}/events",
            "/v1/tasks/doctor-none/events",
            None,
        ),
        (
            "POST",
            "/v1/tasks/{id}/messages",
            "/v1/tasks/doctor-none/messages",
            Some(json!({"message_id": "x", "text": "x"})),
        ),
        (
            "POST",
            "/v1/tasks/{id}/retry",
            "/v1/tasks/doctor-none/retry",
            Some(json!({"message_id": "x"})),
        ),
    ];
    for (method, spec_path, path, body) in unknown {
        let (s, b) = request(c, method, spec_path, path, body.as_ref())?;
        expect(s, 404, &format!("{method} {path} (an unknown task)"), &b)?;
        if b["reason"] != "unknown_task" {
            return Err(missing(
                format!(
                    "{method} {spec_path}: the runner has no such call (an unknown task answered 404 {b})"
                ),
                &format!(
                    "docs/runner-contract.openapi.json paths.{spec_path}.{}",
                    method.to_ascii_lowercase()
                ),
            ));
        }
    }
    let (s, b) = c
        .post_raw("/v1/tasks", "{not json")
        .map_err(|e| missing(format!("POST /v1/tasks failed: {e:#}"), "-"))?;
    expect(s, 400, "POST /v1/tasks with a body that is not JSON", &b)?;
    conforms("/v1/tasks", "POST", s, &b)?;
    passed.push(
        "errors: 404 unknown_task on every task call, 400 on bad JSON, each {error, reason}"
            .to_owned(),
    );
    Ok(())
}

/// A follow-up is queued (202) and consumed; a Retry of the completed task
/// is refused with a listed block reason.
fn follow_up_and_retry(
    env: &CellEnv,
    c: &RunnerClient,
    profile: &str,
    passed: &mut Vec<String>,
) -> Result<(), Missing> {
    let path = format!("/v1/tasks/{TASK}/messages");
    let body = json!({"message_id": "doctor-f1", "text": "And once more."});
    let (s, b) = request(c, "POST", "/v1/tasks/{id}/messages", &path, Some(&body))?;
    expect(s, 202, "POST …/messages to a completed task", &b)?;
    let deadline = Duration::from_millis(env.wait_ms);
    c.wait_task(TASK, deadline, |t| {
        t["state"] == "completed" && t["queued_messages"].as_array().is_some_and(Vec::is_empty)
    })
    .map_err(|e| {
        missing(
            format!("{profile}: the follow-up was not consumed: {e:#}"),
            "docs/runner-contract.md §3",
        )
    })?;
    let path = format!("/v1/tasks/{TASK}/retry");
    let (s, b) = request(
        c,
        "POST",
        "/v1/tasks/{id}/retry",
        &path,
        Some(&json!({"message_id": "doctor-r1"})),
    )?;
    expect(s, 409, "POST …/retry of a completed task", &b)?;
    passed.push(format!(
        "{profile}: a follow-up 202 and consumed; a Retry of a completed task 409 {}",
        b["block_reason"]
    ));
    Ok(())
}

/// The task view and the run log: typed views, the schema, the stream, and
/// the kinds a wave needs.
fn check_task_and_log(
    c: &RunnerClient,
    profile: &str,
    passed: &mut Vec<String>,
) -> Result<(), Missing> {
    let path = format!("/v1/tasks/{TASK}");
    let (s, view) = request(c, "GET", "/v1/tasks/{id}", &path, None)?;
    expect(s, 200, "GET /v1/tasks/{id}", &view)?;
    task_view(&view).map_err(|e| {
        missing(
            format!("the harness cannot read the task view: {e}"),
            "docs/runner-contract.md §3 (the task view)",
        )
    })?;
    let events = c.events(TASK, 0).map_err(|e| {
        missing(
            format!("GET …/events failed: {e:#}"),
            "docs/runner-contract.openapi.json /v1/tasks/{id}/events",
        )
    })?;
    RunLogEvent::parse_all(&events)
        .map_err(|e| missing(e.to_string(), "docs/runner-contract.md §4"))?;
    for ev in &events {
        runner_spec::check_event(ev).map_err(|errs| {
            missing(
                format!(
                    "run-log event {ev} does not fit the schema: {}",
                    errs.join("; ")
                ),
                "docs/runner-contract.events.schema.json",
            )
        })?;
    }
    check_vocabulary(profile, &events)?;
    let sse = c.sse_lines(TASK, 1, Duration::from_secs(10)).map_err(|e| {
        missing(
            format!("the event stream (Accept: text/event-stream) failed: {e:#}"),
            "docs/runner-contract.md §3",
        )
    })?;
    let first: Option<Value> = sse.first().and_then(|l| serde_json::from_str(l).ok());
    if first.as_ref() != events.first() {
        return Err(missing(
            format!("the event stream's first data line is {sse:?}, not the run log's first event"),
            "docs/runner-contract.md §3",
        ));
    }
    passed.push(format!(
        "{profile}: the task view and {} run-log events fit the spec; the stream serves them",
        events.len()
    ));
    Ok(())
}

/// The run log of a clean task has every kind a wave needs, gapless.
fn check_vocabulary(profile: &str, events: &[Value]) -> Result<(), Missing> {
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for k in runner_spec::kinds() {
        // A clean task never admits a Retry.
        if k.status == KindStatus::Required
            && k.kind != "stopped_conversation_verified"
            && !kinds.contains(&k.kind.as_str())
        {
            return Err(missing(
                format!(
                    "{profile}: the run log of a clean task has no {} event (read by {})",
                    k.kind,
                    k.read_by.join(", ")
                ),
                &format!(
                    "docs/runner-contract.md §4; docs/runner-contract.events.schema.json $defs/{}",
                    k.kind
                ),
            ));
        }
    }
    for (i, ev) in events.iter().enumerate() {
        if ev["seq"].as_i64() != Some(i as i64 + 1) {
            return Err(missing(
                format!(
                    "{profile}: the run log is not gapless: position {} holds seq {}",
                    i + 1,
                    ev["seq"]
                ),
                "docs/runner-contract.md §4",
            ));
        }
    }
    Ok(())
}

/// Waits until the task settles completed.
fn settle(env: &CellEnv, c: &RunnerClient, profile: &str, what: &str) -> Result<(), Missing> {
    let task = c
        .wait_settled(TASK, Duration::from_millis(env.wait_ms))
        .map_err(|e| {
            missing(
                format!("{profile}: {what} did not settle: {e:#}"),
                "docs/runner-contract.md §3, §4 (the event stream wakes the harness)",
            )
        })?;
    if task["state"] != "completed" {
        return Err(missing(
            format!(
                "{profile}: {what} ended {} ({})",
                task["state"], task["cause"]
            ),
            "docs/recovery-contract.md",
        ));
    }
    Ok(())
}

/// One request; its answer checked against the spec.
fn request(
    c: &RunnerClient,
    method: &str,
    spec_path: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), Missing> {
    let answer = match body {
        Some(b) => c.post(path, b),
        None => c.get(path),
    };
    let (s, b) = answer.map_err(|e| {
        missing(
            format!("{method} {path} failed: {e:#}"),
            "docs/runner-contract.openapi.json",
        )
    })?;
    conforms(spec_path, method, s, &b)?;
    Ok((s, b))
}

fn conforms(spec_path: &str, method: &str, status: u16, body: &Value) -> Result<(), Missing> {
    runner_spec::check_response(spec_path, method, status, body).map_err(|errs| {
        missing(
            format!(
                "{method} {spec_path} answered {status} {body}: {}",
                errs.join("; ")
            ),
            &format!(
                "docs/runner-contract.openapi.json paths.{spec_path}.{}",
                method.to_ascii_lowercase()
            ),
        )
    })
}

fn expect(status: u16, want: u16, what: &str, body: &Value) -> Result<(), Missing> {
    if status == want {
        return Ok(());
    }
    Err(missing(
        format!("{what} answered {status} {body}, not {want}"),
        "docs/runner-contract.md §3",
    ))
}

/// One traced clean cell of `profile`: verdicts, boundaries, kinds.
fn traced(env: &CellEnv, scenario: &Scenario, profile: &str) -> Result<Traced, Missing> {
    let traced = crate::discover::traced_clean(env, scenario, profile, "doctor")
        .map_err(|e| missing(format!("cannot create a directory: {e}"), "-"))?;
    let crate::judge::Judged { run, result } = traced.judged;
    if let Some(e) = &result.error {
        return Err(missing(
            format!("{profile}: the traced clean cell failed: {e}"),
            "docs/runner-contract.md §1",
        ));
    }
    let hits = traced.hits.unwrap_or_default();
    let boundaries = boundaries_of(hits);
    let cells = expand(scenario, &boundaries).map(|c| c.len()).unwrap_or(0);
    Ok(Traced {
        profile: profile.to_owned(),
        oracles: result.oracles,
        boundaries,
        cells,
        kinds: run
            .evidence
            .events
            .iter()
            .filter_map(RunLogEvent::kind_name)
            .map(str::to_owned)
            .collect(),
    })
}

/// An oracle that says `unknown` on a clean cell has a gap in its evidence:
/// a wave would judge nothing with it.
fn first_gap(traced: &[Traced]) -> Option<Missing> {
    traced.iter().find_map(|t| {
        t.oracles
            .iter()
            .find(|o| o.verdict == Verdict::Unknown)
            .map(|o| {
                missing(
                    format!(
                        "{}: on a clean cell, {} says unknown: {}",
                        t.profile, o.oracle, o.message
                    ),
                    "docs/runner-contract.md §7",
                )
            })
    })
}

/// The report as a person reads it: the checks, the oracles table, the cut
/// points, the verdict.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    for p in &r.passed {
        out.push_str(&format!("  ok  {p}\n"));
    }
    if !r.claimed.is_empty() {
        out.push_str(&format!("\nprofiles claimed: {}\n", r.claimed.join(", ")));
    }
    for t in &r.traced {
        out.push_str(&render_traced(t));
    }
    match &r.missing {
        None => out.push_str("\na wave can run: exit 0\n"),
        Some(m) => out.push_str(&format!("\nMISSING: {}\n  the spec: {}\n", m.what, m.spec)),
    }
    out
}

fn render_traced(t: &Traced) -> String {
    let mut out = format!("\n{} (a traced clean cell of single-task):\n", t.profile);
    out.push_str(&format!(
        "  {:<18} {:<8} {}\n",
        "oracle", "verdict", "why / what it reads that this runner never wrote"
    ));
    let kinds = runner_spec::kinds();
    for o in &t.oracles {
        let unread: Vec<String> = kinds
            .iter()
            .filter(|k| {
                k.read_by.iter().any(|r| r == o.oracle.as_str()) && !t.kinds.contains(&k.kind)
            })
            .map(|k| k.kind.clone())
            .collect();
        let why = if o.verdict == Verdict::Pass {
            if unread.is_empty() {
                "judges".to_owned()
            } else {
                format!("judges; not seen here: {}", unread.join(", "))
            }
        } else {
            o.message.clone()
        };
        out.push_str(&format!(
            "  {:<18} {:<8} {why}\n",
            o.oracle,
            o.verdict.as_str()
        ));
    }
    out.push_str(&cut_point_notes(t));
    out
}

/// The traced run's cut points (runner, before-write, before-read,
/// provider) and what a wave cannot do with them.
fn cut_point_notes(t: &Traced) -> String {
    let mut out = String::new();
    let runner: Vec<&Boundary> = t
        .boundaries
        .iter()
        .filter(|b| b.role == Role::Runner)
        .collect();
    let of = |prefix: &str| {
        runner
            .iter()
            .filter(|b| b.cut.point.starts_with(prefix))
            .count()
    };
    let (writes, reads) = (
        of(crate::model::WRITE_POINTS),
        of(crate::model::READ_POINTS),
    );
    out.push_str(&format!(
        "  cut points: {} boundaries ({} runner, of which {} before-write and {} before-read; {} provider); a depth-1 wave of single-task plans {} cells\n",
        t.boundaries.len(), runner.len(), writes, reads, t.boundaries.len() - runner.len(), t.cells
    ));
    for (point, why) in [
        (
            crate::cell::SYNC_POINT,
            "a turn-active follow-up (follow-up-race) waits for it",
        ),
        (
            "runner.provider_identity.persisted",
            "provider faults at runner points are planned after it",
        ),
    ] {
        if !runner.iter().any(|b| b.cut.point == point) {
            out.push_str(&format!("  note: the runner never passes {point}: {why}\n"));
        }
    }
    for o in t.oracles.iter().filter(|o| o.verdict == Verdict::Fail) {
        out.push_str(&format!(
            "  note: the clean cell already fails {}: every cell of a wave will show it\n",
            o.oracle
        ));
    }
    for (n, what) in [
        (
            writes,
            "runner.write.* point: a wave plans no storage fault (fail-write, disk-full)",
        ),
        (
            reads,
            "runner.read.* point: a wave plans no read fault (fail-read, corrupt-read)",
        ),
    ] {
        if n == 0 {
            out.push_str(&format!("  note: no {what}\n"));
        }
    }
    out
}
