//! The upstream-failure moments of the OpenCode differential: for each
//! `wire::upstream::UpstreamFault`, the real `opencode serve` (pinned, its
//! model the fake model API made to fail the turn's first model request
//! with that fault: a status fault answers `model.responses.received#1`, a
//! stream fault breaks the stream after `model.response_created.sent#1`)
//! against `fake-provider opencode` failing at its own model point
//! `opencode.model.requested#1` with the same fault. Both are armed from
//! the command line (`--answer POINT#N=NAME`), with no harness listening.
//!
//! The same client drives both: `GET /event`, `POST /session`,
//! `prompt_async` under a driver-style message id, the `bash` permission
//! granted once, and the session's events read until the turn has ended (a
//! `session.idle` once every answer the events announced is completed: the
//! real server goes idle once when a turn completes, twice when it fails,
//! before and after storing the failed answer; the events are compared up
//! to the first). Then every command is
//! waited for, the session's messages read, the server's group killed (a
//! SIGKILL loses nothing of either), and a fresh server on the same data
//! asked what a recovering runner asks (`GET /session/{id}`, `GET
//! /session/{id}/message`). Compared: the session's events (statuses,
//! errors, idles), each `retry` status and the wait its `next` announces
//! (from the failure, as both journal it),
//! the `session.error`s (their data with the model API's URL and the
//! response's date left out), the answers, their parts and their stored
//! error, the compaction after an overflow, the turn's status and error as
//! the runner's driver reads them (`wire::stores::opencode`), the effects,
//! the model requests, and the messages after the restart.

use std::path::Path;

use serde_json::{Value, json};
use wire::journal::Entry;
use wire::stores::opencode::{UNSTORED_OVERFLOW, turn_error, turn_status};
use wire::upstream::{OPENCODE_RETRY_WAIT_MS, UpstreamFault};

use super::{Events, Server, Subject, WAIT, answer_form, answers_of, case, client_id, part_form};
use crate::fidelity::{
    Fields, ModelRoute, Row, effect_pids, fake_requests, model_api_requests, sorted,
    start_failing_model_api, text, wait_until, without_urls,
};
use crate::real::Product;

/// The profile compared.
const PROFILE: &str = "runner-opencode-real";

/// What a client saw of a turn whose model failed, and what a fresh
/// server on the same data read back. Two readings are the same when their
/// compared [`AfterFailure::fields`] are (ids and times differ).
#[derive(Clone, Debug)]
pub struct AfterFailure {
    /// What the session's events said while the turn ran.
    seen: Seen,
    /// The wait each `retry` status announced, counted from the failure
    /// (the fault's `fault.answer` in the journal), as [`wait_class`] has
    /// it.
    waits: Vec<String>,
    /// The turn as the session's messages show it once it ended.
    live: Fields,
    /// Effects in the ledger once every command ended.
    effects: usize,
    /// The model requests the server made.
    model_requests: usize,
    /// `GET /session/{id}` after the restart.
    session_after: u16,
    /// The turn as the restarted server's messages show it.
    after: Fields,
}

/// What the session's events said while the turn ran.
#[derive(Clone, Debug, Default)]
struct Seen {
    /// `status <type>`, `error <name>` and `idle`, in order, a repeat of
    /// the one before left out, up to the first `idle`: where a runner's
    /// driver ends the turn (a failed turn's second `idle`, after its
    /// answer is stored, comes before or after the answer's last update on
    /// the real server, by timing).
    events: Vec<String>,
    /// Each `retry` status's attempt and message, and its `next` (ms since
    /// the epoch).
    retries: Vec<(String, i64)>,
    /// The `session.error`s' errors, in order.
    errors: Vec<Value>,
}

impl Seen {
    /// Notes an event, unless it repeats the one before or comes after
    /// the first `idle`.
    fn note(&mut self, what: String) {
        let idle = self.events.iter().any(|e| e == "idle");
        if !idle && self.events.last() != Some(&what) {
            self.events.push(what);
        }
    }
}

impl AfterFailure {
    /// The compared fields, as text.
    fn fields(&self) -> Fields {
        let seen = &self.seen;
        let joined = |items: Vec<String>, sep: &str| match items.is_empty() {
            true => "-".to_owned(),
            false => items.join(sep),
        };
        let retries = seen.retries.iter().map(|(r, _)| r.clone()).collect();
        let waits = self.waits.clone();
        let names = seen.errors.iter().map(|e| text(&e["name"])).collect();
        let messages = seen.errors.iter().map(|e| text(&e["data"]["message"]));
        let first = seen.errors.first().map(normalized);
        let mut fields = vec![
            ("session events", seen.events.join(", ")),
            ("retry statuses", joined(retries, "; ")),
            ("retry waits", joined(waits, ", ")),
            ("session.error names", joined(names, ", ")),
            ("session.error messages", joined(messages.collect(), " | ")),
            (
                "first session.error data",
                first
                    .as_ref()
                    .map_or("-".to_owned(), |e| e["data"].to_string()),
            ),
        ];
        fields.extend(self.live.clone());
        fields.extend([
            ("effects in ledger", self.effects.to_string()),
            ("model requests", self.model_requests.to_string()),
            ("GET session after restart", self.session_after.to_string()),
            (
                "turn after restart",
                if self.after == self.live {
                    "= before".to_owned()
                } else {
                    format!("{:?}", self.after)
                },
            ),
        ]);
        fields
    }
}

/// A wait in ms, counted from the failure, as whether it honours a 1 s
/// `Retry-After`: `< 1 s` (the fake's own 250 ms) or `≥ 1 s` (a 429's
/// `Retry-After`, OpenCode's 2 s backoff). Only the lower bound is stable:
/// both sides count from their journal's `fault.answer`, so the client's
/// delay in reading the event does not move it, but the server's own delay
/// in announcing it does, upwards (a loaded machine made a 429's 1 s read
/// over 2 s once in three runs).
fn wait_class(ms: i64) -> String {
    if ms < 1000 { "< 1 s" } else { "≥ 1 s" }.to_owned()
}

/// An error with what differs by run or by side left out: the model API's
/// URL, the response's `date`; its `responseBody` parsed (the fake model
/// API's JSON, whose key order depends on the build); keys in order.
fn normalized(error: &Value) -> Value {
    let mut e = without_urls(error);
    if let Some(date) = e.pointer_mut("/data/responseHeaders/date") {
        *date = json!("<date>");
    }
    if let Some(body) = e.pointer_mut("/data/responseBody")
        && let Some(parsed) = body.as_str().and_then(|b| serde_json::from_str(b).ok())
    {
        *body = parsed;
    }
    sorted(&e)
}

/// What a runner reads of the turn of `message_id` from the session's
/// messages; `first` is the first error the events named (the stored
/// error reads `= first session.error` when it is that one).
fn read_turn(messages: &Value, message_id: &str, first: Option<&Value>) -> Fields {
    let (answers, parts) = answers_of(messages, message_id);
    let list = messages.as_array().map_or(&[][..], Vec::as_slice);
    let last = list
        .iter()
        .map(|m| &m["info"])
        .rfind(|i| i["role"] == "assistant" && i["parentID"] == message_id);
    let stored = match last.map(|i| &i["error"]) {
        None | Some(Value::Null) => "-".to_owned(),
        Some(e) if Some(normalized(e)) == first.map(normalized) => {
            "= first session.error".to_owned()
        }
        Some(e) => normalized(e).to_string(),
    };
    let error = match turn_error(list, message_id) {
        Some(e) if e["data"]["message"] == UNSTORED_OVERFLOW => {
            format!("{} (stored on no message)", text(&e["name"]))
        }
        Some(e) => text(&e["name"]),
        None => "-".to_owned(),
    };
    vec![
        ("answers", or_none(answers.join("; "))),
        ("parts", or_none(parts.join(", "))),
        ("stored error", stored),
        ("compaction", compaction(list, message_id)),
        (
            "turn status (driver)",
            turn_status(list, message_id).to_owned(),
        ),
        ("turn error (driver)", error),
    ]
}

/// `text`, or `-` when it is empty.
fn or_none(text: String) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text
    }
}

/// The messages after user message `message_id` that do not answer it (a
/// compaction: its user message's parts, its summary answer), or `-`.
fn compaction(messages: &[Value], message_id: &str) -> String {
    let later: Vec<String> = messages
        .iter()
        .skip_while(|m| m["info"]["id"] != message_id)
        .skip(1)
        .filter(|m| m["info"]["parentID"] != message_id)
        .map(|m| {
            let info = &m["info"];
            let parts: Vec<String> = m["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| match p["type"].as_str() {
                    Some("compaction") => Some(format!(
                        "compaction auto={} overflow={}",
                        p["auto"], p["overflow"]
                    )),
                    _ => part_form(p),
                })
                .collect();
            match info["role"].as_str() {
                Some("user") => format!("user [{}]", parts.join(", ")),
                _ => format!(
                    "{} summary={} {} [{}]",
                    text(&info["agent"]),
                    info["summary"],
                    answer_form(info),
                    parts.join(", ")
                ),
            }
        })
        .collect();
    or_none(later.join("; "))
}

/// Where a side keeps what the comparison reads.
struct Paths<'a> {
    /// The workspace the server runs in.
    ws: &'a Path,
    /// The effect ledger.
    ledger: &'a Path,
    /// The journal its model requests are counted in.
    journal: &'a Path,
    /// Counts them there.
    count: fn(&[Entry]) -> usize,
    /// Where the server's stderr goes.
    log: &'a Path,
}

/// Plays the turn on `subject` to its end, reads it, kills the server,
/// restarts it on the same data and reads back what a runner would.
fn fail_turn(subject: &Subject, at: &Paths<'_>) -> Result<AfterFailure, String> {
    let message_id = client_id("m-1", false);
    let server = subject.start(at.ws, None, at.log)?;
    let events = Events::open(&server)?;
    let (status, session) = server.call("/session", Some(json!({})))?;
    let session = match session["id"].as_str() {
        Some(id) if status == 200 => id.to_owned(),
        _ => return Err(format!("POST /session: {status} {session}")),
    };
    let prompt = server.prompt(&session, &message_id, "Create hello.txt");
    if prompt != 204 {
        return Err(format!("prompt_async: {prompt}"));
    }
    let seen = watch(&server, &events, &session)?;
    wait_until("every command to end", WAIT, || {
        effect_pids(at.ledger).is_empty()
    })?;
    let messages_path = format!("/session/{session}/message");
    let messages = server.call(&messages_path, None)?.1;
    let live = read_turn(&messages, &message_id, seen.errors.first());
    let effects = wire::ledger::read(at.ledger).map_or(0, |l| l.len());
    let journal = wire::journal::read(at.journal).unwrap_or_default();
    let model_requests = (at.count)(&journal);
    let failed_at = journal
        .iter()
        .find(|e| e.fact.as_deref() == Some("fault.answer"))
        .and_then(|e| i64::try_from(e.ts_ms).ok());
    let waits = seen
        .retries
        .iter()
        .map(|(_, next)| failed_at.map_or("?".to_owned(), |at| wait_class(next - at)))
        .collect();
    drop(events);
    drop(server);
    let again = subject.start(at.ws, None, at.log)?;
    let session_after = again.status(&format!("/session/{session}"), None);
    let messages = again.call(&messages_path, None)?.1;
    let after = read_turn(&messages, &message_id, seen.errors.first());
    Ok(AfterFailure {
        seen,
        waits,
        live,
        effects,
        model_requests,
        session_after,
        after,
    })
}

/// Reads `session`'s events on `server` until its turn ended: a
/// `session.idle` once every answer the events announced is completed.
/// The `bash` permission is granted once.
fn watch(server: &Server, events: &Events, session: &str) -> Result<Seen, String> {
    let mut seen = Seen::default();
    // Each assistant message the events announced: completed yet?
    let mut answers: Vec<(Value, bool)> = Vec::new();
    loop {
        let event = events.until("an event of the session", |e| {
            e["properties"]["sessionID"] == session
        })?;
        let props = &event["properties"];
        match event["type"].as_str().unwrap_or_default() {
            "permission.asked" => {
                let id = text(&props["id"]);
                let reply = json!({ "reply": "once" });
                let status = server.status(&format!("/permission/{id}/reply"), Some(reply));
                if status != 200 {
                    return Err(format!("the permission reply: {status}"));
                }
            }
            "session.status" => {
                let status = &props["status"];
                if status["type"] == "retry" {
                    let next = status["next"].as_i64().unwrap_or(0);
                    let said = format!("{}: {}", status["attempt"], text(&status["message"]));
                    seen.retries.push((said, next));
                }
                seen.note(format!("status {}", text(&status["type"])));
            }
            "session.error" => {
                seen.note(format!("error {}", text(&props["error"]["name"])));
                seen.errors.push(without_urls(&props["error"]));
            }
            "message.updated" if props["info"]["role"] == "assistant" => {
                let (id, done) = (
                    &props["info"]["id"],
                    !props["info"]["time"]["completed"].is_null(),
                );
                match answers.iter_mut().find(|(a, _)| a == id) {
                    Some(answer) => answer.1 = done,
                    None => answers.push((id.clone(), done)),
                }
            }
            "session.idle" => {
                seen.note("idle".to_owned());
                if answers.iter().all(|(_, done)| *done) {
                    return Ok(seen);
                }
            }
            _ => {}
        }
    }
}

/// The fake OpenCode's reading of `fault`, in `dir`.
pub fn fake_upstream(
    turncut: &Path,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let (ws, script) = case(dir)?;
    let state = dir.join("fake");
    let point = wire::upstream::PROVIDER_MODEL_POINTS[2];
    let subject = Subject::Fake {
        turncut,
        state: state.clone(),
        script,
        answer: Some(format!("{point}#1={}", fault.as_str())),
    };
    let at = Paths {
        ws: &ws,
        ledger: &state.join("ledger.jsonl"),
        journal: &state.join("journal.jsonl"),
        count: fake_requests,
        log: &dir.join("fake.stderr"),
    };
    fail_turn(&subject, &at)
}

/// The real OpenCode's (the program `opencode`) reading of `fault`, in
/// `dir` (its model API, ledger and home there).
pub fn real_upstream(
    turncut: &Path,
    opencode: &Path,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let (ws, script) = case(dir)?;
    let model = start_failing_model_api(turncut, dir, &script, ModelRoute::Responses, fault)?;
    let product = Product {
        real: wire::profiles::real(PROFILE).ok_or("no runner-opencode-real profile")?,
        bin: opencode.to_owned(),
        home: dir.join("opencode-home"),
    };
    let argv = product
        .command(&model.url, "fidelity")
        .map_err(|e| format!("{e:#}"))?;
    let at = Paths {
        ws: &ws,
        ledger: &dir.join("model/ledger.jsonl"),
        journal: &dir.join("model/journal.jsonl"),
        count: model_api_requests,
        log: &dir.join("opencode.stderr"),
    };
    let seen = fail_turn(&Subject::Real(argv), &at);
    model.stop();
    seen
}

/// Why the real server's answers differ from the fake's by its steps.
const STEP_ANSWERS: &str = "real writes one answer per model step (a step that called a tool \
    ends `tool-calls`, a truncated one `unknown`), the fake one per turn; the runner reads the \
    last answer, the same on both";

/// Why the fake's retry waits are shorter.
const SHORT_WAIT: &str = "the fake waits 250 ms before a retry with no Retry-After, OpenCode \
    about 2 s (its backoff); both announce the wait in `next`, which is what a runner reads";

/// Whether `real`'s answers are the fake's one answer after steps that
/// each ended to go on (`tool-calls`, `unknown`).
fn one_answer_per_step(real: &str, fake: &str) -> bool {
    let answers: Vec<&str> = real.split("; ").collect();
    let Some((last, steps)) = answers.split_last() else {
        return false;
    };
    *last == fake
        && steps.iter().all(|a| {
            matches!(
                *a,
                "completed finish=tool-calls error=-" | "completed finish=unknown error=-"
            )
        })
}

/// Whether `fake`'s waits are the fake's own (250 ms) where `real`'s, as
/// many, are OpenCode's backoff (about 2 s, at least 1 s).
fn fake_waits_less(real: &str, fake: &str) -> bool {
    let own = wait_class(OPENCODE_RETRY_WAIT_MS as i64);
    let (real, fake): (Vec<&str>, Vec<&str>) =
        (real.split(", ").collect(), fake.split(", ").collect());
    real.len() == fake.len()
        && fake.iter().all(|f| *f == own)
        && real.iter().all(|r| *r == wait_class(1000))
}

/// Why `field` reads `real` on the real server and `fake` on the fake,
/// where that is a listed variant (`docs/real-providers.md`).
fn known(field: &str, real: &str, fake: &str) -> Option<&'static str> {
    match field {
        "answers" if one_answer_per_step(real, fake) => Some(STEP_ANSWERS),
        "retry waits" if fake_waits_less(real, fake) => Some(SHORT_WAIT),
        _ => None,
    }
}

/// The rows of each of `faults`, the real OpenCode (the program
/// `opencode`) played `runs` times at each (each distinct reading its own
/// rows, with how often it came up).
pub fn upstream_rows(
    turncut: &Path,
    opencode: &Path,
    dir: &Path,
    runs: u32,
    faults: &[UpstreamFault],
) -> Result<Vec<Row>, String> {
    crate::fidelity::upstream_fault_rows(
        PROFILE,
        dir,
        runs,
        faults,
        |fault, case| Ok(fake_upstream(turncut, fault, case)?.fields()),
        |fault, case| Ok(real_upstream(turncut, opencode, fault, case)?.fields()),
        known,
    )
}
