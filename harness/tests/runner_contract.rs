//! The runner contract's machine-readable spec (`docs/runner-contract.openapi.json`,
//! `docs/runner-contract.events.schema.json`, built in as `harness::runner_spec`)
//! against the two programs it describes:
//!
//! - what runnerd serves: a real `turncut runnerd` with the fake Codex, every
//!   call of the spec made for real (success and error answers), each answer
//!   validated against the spec, every run-log event against the events
//!   schema, and the spec's routes equal to runnerd's route table;
//! - what the harness parses: the view schemas are closed exactly as the typed
//!   views are (`TaskView`, `RunView`, `TurnView`, `CauseView`, and the
//!   envelope of `run_log::RunLogEvent`): the same field names; an unknown
//!   field is refused by both; a field the harness needs is required by the
//!   spec. Every event runnerd wrote parses as a typed `RunLogEvent`, its
//!   payload included.
//!
//! A change to either program that the spec does not follow fails here.

use std::path::Path;
use std::time::Duration;

use harness::run_log::RunLogEvent;
use harness::runner_client::{
    CauseView, RunnerClient, RunnerCommand, RunnerProcess, TaskView, task_view, write_fake_profile,
};
use harness::runner_spec;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// The fake's script: one turn with an approved command (approval requests
/// and command items in the run log).
const SCRIPT: &str = "[[turn]]\nsay = [\"Looking.\"]\ntools = [{ key = \"k\", kind = \"command\", approval = true }]\nfinal = \"Done.\"\n";

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// A runnerd with two profiles: `runner-codex` on the fake Codex and
/// `broken`, whose provider cannot start (a failed task, for the Retry and
/// the cause fields).
fn start(dir: &Path) -> RunnerProcess {
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    std::fs::write(dir.join("script.toml"), SCRIPT).unwrap();
    let profiles =
        write_fake_profile(exe(), "runner-codex", dir, &dir.join("script.toml")).unwrap();
    let mut text = std::fs::read_to_string(&profiles).unwrap();
    text.push_str(
        "[profile.broken]\ndriver = \"codex\"\ncommand = [\"/nonexistent/turncut-provider\"]\n",
    );
    std::fs::write(&profiles, text).unwrap();
    let mut cmd = RunnerCommand::via(exe()).command(
        &dir.join("state"),
        &[
            "--profiles".into(),
            profiles.display().to_string(),
            "--provider-idle-timeout-ms".into(),
            "5000".into(),
        ],
    );
    RunnerProcess::start(&mut cmd, &dir.join("state"), &dir.join("stderr.log"), WAIT).unwrap()
}

/// One call: the spec's path, the real path, the method, a body, the status
/// runnerd must answer; the answer is checked against the spec.
struct Call<'a> {
    spec_path: &'a str,
    path: String,
    method: &'a str,
    body: Option<Value>,
    status: u16,
}

fn call(c: &RunnerClient, k: &Call<'_>) -> Value {
    let (status, body) = match (k.method, &k.body) {
        ("GET", _) => c.get(&k.path).unwrap(),
        ("POST", Some(b)) => c.post(&k.path, b).unwrap(),
        ("POST", None) => c.post_raw(&k.path, "{not json").unwrap(),
        (m, _) => panic!("no such method {m}"),
    };
    assert_eq!(
        status, k.status,
        "{} {} answered {status} {body}, expected {}",
        k.method, k.path, k.status
    );
    if let Err(errs) = runner_spec::check_response(k.spec_path, k.method, status, &body) {
        panic!(
            "{} {} answered {status} {body}, which the spec does not allow: {errs:?}",
            k.method, k.path
        );
    }
    body
}

#[test]
fn runnerd_answers_as_the_spec_says_and_the_harness_parses_what_the_spec_allows() {
    let dir = tempfile::tempdir().unwrap();
    let runner = start(dir.path());
    let c = runner.client();
    let ws = dir.path().join("ws").display().to_string();
    let task = |id: &str, profile: &str, prompt: &str| json!({"task_id": id, "message_id": format!("{id}-m1"), "prompt": prompt, "profile": profile, "workspace": ws});
    let calls = [
        ("/v1/health", "/v1/health".to_owned(), "GET", None, 200),
        (
            "/v1/tasks",
            "/v1/tasks".into(),
            "POST",
            Some(task("t1", "runner-codex", "hi")),
            201,
        ),
        // The same request again: the same answer (a re-sent request).
        (
            "/v1/tasks",
            "/v1/tasks".into(),
            "POST",
            Some(task("t1", "runner-codex", "hi")),
            201,
        ),
        (
            "/v1/tasks",
            "/v1/tasks".into(),
            "POST",
            Some(task("t1", "runner-codex", "other")),
            409,
        ),
        (
            "/v1/tasks",
            "/v1/tasks".into(),
            "POST",
            Some(task("t2", "no-such-profile", "hi")),
            409,
        ),
        ("/v1/tasks", "/v1/tasks".into(), "POST", None, 400),
        ("/v1/tasks/{id}", "/v1/tasks/nope".into(), "GET", None, 404),
        (
            "/v1/tasks/{id}/events",
            "/v1/tasks/nope/events".into(),
            "GET",
            None,
            404,
        ),
        (
            "/v1/tasks/{id}/events",
            "/v1/tasks/t1/events?after=x".into(),
            "GET",
            None,
            400,
        ),
        (
            "/v1/tasks/{id}/messages",
            "/v1/tasks/nope/messages".into(),
            "POST",
            Some(json!({"message_id": "f", "text": "x"})),
            404,
        ),
        (
            "/v1/tasks/{id}/retry",
            "/v1/tasks/nope/retry".into(),
            "POST",
            Some(json!({"message_id": "r"})),
            404,
        ),
    ];
    let mut seen: Vec<(String, String)> = Vec::new();
    for (spec_path, path, method, body, status) in calls {
        call(
            &c,
            &Call {
                spec_path,
                path,
                method,
                body,
                status,
            },
        );
        seen.push((method.to_owned(), spec_path.to_owned()));
    }
    // Unknown paths and methods answer the spec's error shape too.
    let (s, b) = c.get("/v1/nothing-here").unwrap();
    assert_eq!((s, b["reason"].as_str()), (404, Some("no_route")), "{b}");
    runner_spec::check_component("Error", &b).unwrap();
    let unauthorized = RunnerClient::new(&runner.base, "wrong-token-0123456789");
    let (s, b) = unauthorized.get("/v1/health").unwrap();
    assert_eq!(s, 401);
    runner_spec::check_response("/v1/health", "GET", 401, &b).unwrap();

    c.wait_settled("t1", WAIT).unwrap();
    let follow_up = Call {
        spec_path: "/v1/tasks/{id}/messages",
        path: "/v1/tasks/t1/messages".into(),
        method: "POST",
        body: Some(json!({"message_id": "t1-f1", "text": "and more"})),
        status: 202,
    };
    call(&c, &follow_up);
    seen.push(("POST".into(), follow_up.spec_path.into()));
    c.wait_task("t1", WAIT, |t| {
        t["state"] == "completed"
            && t["queued_messages"]
                .as_array()
                .is_some_and(|q| q.is_empty())
            && t["runs"].as_array().is_some_and(|r| r.len() == 2)
    })
    .unwrap();
    let retry_completed = Call {
        spec_path: "/v1/tasks/{id}/retry",
        path: "/v1/tasks/t1/retry".into(),
        method: "POST",
        body: Some(json!({"message_id": "t1-r1"})),
        status: 409,
    };
    call(&c, &retry_completed);

    // A task whose provider cannot start fails with a cause; its Retry is
    // admitted after the stop proof and fails the same way.
    call(
        &c,
        &Call {
            spec_path: "/v1/tasks",
            path: "/v1/tasks".into(),
            method: "POST",
            body: Some(task("t3", "broken", "hi")),
            status: 201,
        },
    );
    c.wait_settled("t3", WAIT).unwrap();
    call(
        &c,
        &Call {
            spec_path: "/v1/tasks/{id}/retry",
            path: "/v1/tasks/t3/retry".into(),
            method: "POST",
            body: Some(json!({"message_id": "t3-r1"})),
            status: 201,
        },
    );
    seen.push(("POST".into(), "/v1/tasks/{id}/retry".into()));
    c.wait_task("t3", WAIT, |t| {
        t["state"] == "failed" && t["runs"].as_array().is_some_and(|r| r.len() == 2)
    })
    .unwrap();

    let mut kinds: Vec<String> = Vec::new();
    for id in ["t1", "t3"] {
        let view = call(
            &c,
            &Call {
                spec_path: "/v1/tasks/{id}",
                path: format!("/v1/tasks/{id}"),
                method: "GET",
                body: None,
                status: 200,
            },
        );
        task_view(&view).unwrap_or_else(|e| panic!("the harness cannot read {id}: {e}"));
        check_views_agree(&view);
        let events = c.events(id, 0).unwrap();
        RunLogEvent::parse_all(&events).unwrap();
        for ev in &events {
            if let Err(errs) = runner_spec::check_event(ev) {
                panic!("run-log event {ev} does not fit the events schema: {errs:?}");
            }
            check_event_view_agrees(ev);
            kinds.push(ev["kind"].as_str().unwrap().to_owned());
        }
    }
    seen.push(("GET".into(), "/v1/tasks/{id}".into()));
    check_sse(&c);
    // Every operation of the spec was made for real.
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen,
        runner_spec::operations(),
        "calls made vs the spec's operations"
    );
    // Every kind runnerd wrote, and every contract event it can write, is in
    // the spec; so are the kinds this run must have shown.
    let documented: Vec<String> = runner_spec::kinds().into_iter().map(|k| k.kind).collect();
    let contract_events = runner::causes::ContractEvent::ALL
        .iter()
        .map(|e| e.as_str().to_owned());
    for k in kinds.iter().cloned().chain(contract_events) {
        assert!(
            documented.contains(&k),
            "run-log kind {k} is not in the events schema"
        );
    }
    for k in [
        "task.admitted",
        "turn.intent",
        "turn.accepted",
        "turn.finished",
        "run.settled",
        "provider.spawned",
        "provider.stopped",
        "stopped_conversation_verified",
        "retry.admitted",
        "message.queued",
        "provider_request",
        "item.completed",
    ] {
        assert!(
            kinds.iter().any(|x| x == k),
            "the runs never wrote {k}: {kinds:?}"
        );
    }
    runner.kill().unwrap();
}

/// Whether the harness's typed view reads a value.
type Reads = fn(&Value) -> bool;

/// A view runnerd served: the spec and the harness agree field for field on
/// it and on every variation of it (each field dropped, an unknown one added).
fn check_views_agree(view: &Value) {
    let parsed: TaskView = task_view(view).unwrap();
    let cause = CauseView {
        code: "storage_failed".into(),
        recoverable: false,
        message: "m".into(),
    };
    let mut samples: Vec<(&str, Value, Reads)> = vec![
        ("TaskView", serde_json::to_value(&parsed).unwrap(), |v| {
            TaskView::deserialize(v).is_ok()
        }),
        ("Cause", serde_json::to_value(&cause).unwrap(), |v| {
            CauseView::deserialize(v).is_ok()
        }),
    ];
    for run in &parsed.runs {
        samples.push(("RunView", serde_json::to_value(run).unwrap(), |v| {
            harness::runner_client::RunView::deserialize(v).is_ok()
        }));
        for turn in &run.turns {
            samples.push(("TurnView", serde_json::to_value(turn).unwrap(), |v| {
                harness::runner_client::TurnView::deserialize(v).is_ok()
            }));
        }
    }
    for (name, sample, harness_reads) in samples {
        agree(
            name,
            &sample,
            harness_reads,
            |v| runner_spec::check_component(name, v).is_ok(),
            runner_spec::component_fields(name),
        );
    }
}

fn check_event_view_agrees(ev: &Value) {
    agree(
        "RunLogEvent",
        ev,
        |v| RunLogEvent::deserialize(v).is_ok(),
        |v| runner_spec::check_event(v).is_ok(),
        runner_spec::event_fields(),
    );
}

use serde::Deserialize as _;

/// `sample` fits both; its field names are the spec's; an unknown field is
/// refused by both; dropping a field the harness needs is refused by the spec.
fn agree(
    name: &str,
    sample: &Value,
    harness_reads: impl Fn(&Value) -> bool,
    spec_allows: impl Fn(&Value) -> bool,
    (fields, required): (Vec<String>, Vec<String>),
) {
    assert!(
        harness_reads(sample) && spec_allows(sample),
        "{name}: {sample}"
    );
    let mut keys: Vec<String> = sample.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, fields, "{name}: the harness's fields vs the spec's");
    let mut extra = sample.clone();
    extra["surprise"] = json!(1);
    assert!(
        !harness_reads(&extra),
        "{name}: the harness reads an unknown field"
    );
    assert!(
        !spec_allows(&extra),
        "{name}: the spec allows an unknown field"
    );
    for f in &fields {
        let mut less = sample.clone();
        less.as_object_mut().unwrap().remove(f);
        if !harness_reads(&less) {
            assert!(
                required.contains(f),
                "{name}.{f}: the harness needs it, the spec does not require it"
            );
        }
    }
}

/// The event stream: `data:` lines, each one event of the schema.
fn check_sse(c: &RunnerClient) {
    let lines = c.sse_lines("t1", 3, WAIT).unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for l in lines {
        let ev: Value = serde_json::from_str(&l).unwrap();
        runner_spec::check_event(&ev).unwrap();
    }
}

/// The spec's operations are runnerd's route table (`runner/src/api.rs`).
#[test]
fn the_spec_lists_exactly_runnerds_routes() {
    let api = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../runner/src/api.rs"))
        .unwrap();
    let mut routes: Vec<(String, String)> = api
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix(".route(\"")?;
            let (path, rest) = rest.split_once('"')?;
            let method = rest.trim_start_matches(", ").split('(').next()?;
            Some((method.to_ascii_uppercase(), path.to_owned()))
        })
        .collect();
    routes.sort();
    assert_eq!(routes.len(), 6, "{routes:?}");
    assert_eq!(routes, runner_spec::operations());
}
