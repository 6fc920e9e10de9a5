//! The upstream-failure moments of the codex differential: for each
//! `wire::upstream::UpstreamFault`, the real `codex app-server` (pinned, its
//! own retries off as every `runner-codex-real` cell runs it), its model the
//! fake model API made to fail the turn's first model request with that
//! fault (a status fault answers `model.responses.received#1`, a stream
//! fault breaks the stream after `model.response_created.sent#1`), against
//! `fake-provider codex` failing at its own model point
//! `codex.model.requested#1` with the same fault. Both are armed from the
//! command line (`--answer POINT#N=NAME`), with no harness listening.
//!
//! The same client drives both: `thread/start`, `turn/start`, the turn to
//! its `turn/completed`, then the end of the process as a client that is
//! done ends it (stdin closed, no kill), and a fresh process on the same
//! home asked what a recovering runner asks (`thread/resume`, `thread/read
//! {includeTurns}`). Compared: the `error` notification (its error with the
//! model API's URL left out, and `willRetry`), the `turn/completed` turn,
//! and the turn as read back after the restart.

use std::path::Path;

use serde_json::{Value, json};
use wire::upstream::UpstreamFault;

use super::FakeCut;
use super::play::{Case, Provider, WAIT, turn_form, turn_start, without_ids};
use crate::codex_client::{CodexClient, Dir};
use crate::fidelity::{Fields, ModelRoute, Row, text, without_urls};
use crate::real::Product;

/// The turn both sides play: the model never answers it (its first request
/// fails), so any script does; the crash moments' one.
const SCRIPT: &str = crate::fidelity::MOMENT_SCRIPT;

/// What a client saw of a turn whose model failed, and what a fresh
/// process on the same home read back. Two readings are the same when
/// their compared [`AfterFailure::fields`] are (ids and times differ).
#[derive(Clone, Debug)]
pub struct AfterFailure {
    /// The `error` notifications' params, in order (URLs replaced).
    errors: Vec<Value>,
    /// The `turn/completed` notification's turn (URLs replaced).
    completed: Value,
    /// The process ended by itself once its stdin was closed.
    ended: bool,
    /// `thread/resume` succeeded, or its error (ids and paths left out).
    resume: Result<(), String>,
    /// The turn as `thread/read {includeTurns}` shows it after the restart
    /// (URLs replaced; `Null` when it is not there).
    read: Value,
}

impl AfterFailure {
    /// The compared fields, as text.
    fn fields(&self) -> Fields {
        let last = self.errors.last().cloned().unwrap_or(Value::Null);
        let error = &last["error"];
        // The turn's error, compared with the notification's.
        let versus = |e: &Value| match e {
            Value::Null => "null".to_owned(),
            e if e == error => "= error notification's".to_owned(),
            e => e.to_string(),
        };
        let keys = |e: &Value| match e.as_object() {
            Some(o) => o.keys().cloned().collect::<Vec<_>>().join(", "),
            None => e.to_string(),
        };
        vec![
            ("error notifications", self.errors.len().to_string()),
            ("error's fields", keys(error)),
            ("error.message", text(&error["message"])),
            ("error.codexErrorInfo", error["codexErrorInfo"].to_string()),
            (
                "error.additionalDetails",
                error["additionalDetails"].to_string(),
            ),
            ("willRetry", last["willRetry"].to_string()),
            ("turn/completed turn", turn_form(&self.completed)),
            ("turn/completed error", versus(&self.completed["error"])),
            ("ended on stdin close", self.ended.to_string()),
            (
                "thread/resume",
                match &self.resume {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => format!("error: {e}"),
                },
            ),
            (
                "turn after restart",
                match &self.read {
                    Value::Null => "absent".to_owned(),
                    t => turn_form(t),
                },
            ),
            ("turn error after restart", versus(&self.read["error"])),
        ]
    }
}

/// Plays the turn on `provider` in `case` to its end, ends the process as
/// a done client does, restarts it and reads back what a runner would.
fn fail_turn(provider: &Provider, case: &Case) -> Result<AfterFailure, String> {
    let mut client = provider.start(true)?;
    let thread = client
        .request(
            "thread/start",
            json!({ "cwd": case.ws.display().to_string() }),
        )
        .map_err(|e| format!("thread/start: {e}"))?
        .pointer("/thread/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let turn = client
        .request("turn/start", turn_start(&thread, "Create hello.txt", "m-1"))
        .map_err(|e| format!("turn/start: {e}"))?
        .pointer("/turn/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let completed = client
        .wait_for("turn/completed", |m| m["method"] == "turn/completed")
        .map_err(|e| e.to_string())?;
    let errors = notifications(&client, "error");
    let ended = client.close_within(WAIT);
    let mut again = provider.start(false)?;
    let resume = again
        .request(
            "thread/resume",
            json!({ "threadId": thread, "excludeTurns": true }),
        )
        .map(drop)
        .map_err(|e| e.to_string());
    let read = again
        .request(
            "thread/read",
            json!({ "threadId": thread, "includeTurns": true }),
        )
        .unwrap_or(Value::Null);
    again.close_within(WAIT);
    let read = read
        .pointer("/thread/turns")
        .and_then(Value::as_array)
        .and_then(|ts| ts.iter().find(|t| t["id"] == turn.as_str()))
        .map_or(Value::Null, without_urls);
    Ok(AfterFailure {
        errors: errors.iter().map(without_urls).collect(),
        completed: without_urls(&completed["params"]["turn"]),
        ended,
        resume: without_ids(resume),
        read,
    })
}

/// The params of every `method` notification `client` received.
fn notifications(client: &CodexClient, method: &str) -> Vec<Value> {
    client
        .transcript
        .iter()
        .filter(|(dir, m)| *dir == Dir::Received && m["method"] == method && m.get("id").is_none())
        .map(|(_, m)| m["params"].clone())
        .collect()
}

/// The fake codex's reading of `fault`, in `dir`.
pub fn fake_upstream(
    turncut: &Path,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let case = Case::with_script(dir, SCRIPT)?;
    let fake = crate::demo::FakeCodex::via(turncut, &dir.join("fake"));
    let provider = Provider::Fake(fake, case.script.clone(), FakeCut::Answer(fault));
    fail_turn(&provider, &case)
}

/// The real codex's reading of `fault`, in `dir`.
pub fn real_upstream(
    turncut: &Path,
    codex: &Path,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let case = Case::with_script(dir, SCRIPT)?;
    let model = crate::fidelity::start_failing_model_api(
        turncut,
        dir,
        &case.script,
        ModelRoute::Responses,
        fault,
    )?;
    let product = Product {
        real: wire::profiles::real("runner-codex-real").ok_or("no runner-codex-real profile")?,
        bin: codex.to_owned(),
        home: dir.join("codex-home"),
    };
    let argv = product
        .command(&model.url, &dir.display().to_string())
        .map_err(|e| format!("{e:#}"))?;
    let seen = fail_turn(&Provider::Real(argv), &case);
    model.stop();
    seen
}

/// The rows of each of `faults`, the real codex played `runs` times at
/// each (each distinct reading its own rows, with how often it came up).
pub fn upstream_rows(
    turncut: &Path,
    codex: &Path,
    dir: &Path,
    runs: u32,
    faults: &[UpstreamFault],
) -> Result<Vec<Row>, String> {
    // One listed variant (a reset read early); any other difference here
    // is a fake defect.
    crate::fidelity::upstream_fault_rows(
        "runner-codex-real",
        dir,
        runs,
        faults,
        |fault, case| Ok(fake_upstream(turncut, fault, case)?.fields()),
        |fault, case| Ok(real_upstream(turncut, codex, fault, case)?.fields()),
        |field, real, fake| {
            (field == "error.message" && crate::fidelity::reset_read_early(real, fake))
                .then_some(crate::fidelity::RESET_EARLY)
        },
    )
}
