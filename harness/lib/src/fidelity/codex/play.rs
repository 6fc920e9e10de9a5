//! Playing one codex moment on one side: the client drives the turn to the
//! moment, the provider's process group dies there, and a fresh process on
//! the same home is asked what a recovering runner asks. The same client
//! code plays the real codex and the fake; only how each is stopped at the
//! moment differs (`FakeCut`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{FakeCut, Moment};
use crate::codex_client::{CodexClient, Dir};
use crate::demo::FakeCodex;
use crate::fidelity::{effect_pids, wait_until};

/// How long one request may take (codex starts in about a second here).
pub(super) const WAIT: Duration = Duration::from_secs(60);

/// How long after its provider's death a command still running has
/// outlived it (one killed with it is gone within milliseconds; the
/// moments' commands run 1.5 s).
const OUTLIVED_AFTER: Duration = Duration::from_millis(300);

/// The client message ids the moments send.
const MESSAGES: [&str; 2] = ["m-1", "m-2"];

/// What a recovering runner learns at a moment, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterCrash {
    /// A second `turn/start` during the turn: answered with turn 1's turn,
    /// a turn of its own, or an error (`SecondMessageQueued` only).
    pub second_answer: Option<String>,
    /// `thread/resume` succeeded, or its error (ids and paths left out).
    pub resume: Result<(), String>,
    /// The approval policy `thread/resume` reports.
    pub policy: String,
    /// The turns as read back after the resume: `<status> <itemsView>
    /// [item types]` each, or `absent`.
    pub turn: String,
    /// The first turn's error field is null.
    pub error_null: bool,
    /// The client message ids `thread/read` finds (`userMessage.clientId`).
    pub found: Vec<&'static str>,
    /// The patch's file is in the workspace after the restart (patch
    /// moments only).
    pub file: Option<bool>,
    /// `turn/start` on the thread after the restart succeeded, or its error.
    pub new_turn: Result<(), String>,
    /// The approvals the message sent again after the restart asked for,
    /// its turn played to its end (`PolicyLost` only).
    pub resent_approvals: Option<usize>,
    /// Effects in the ledger once every command has ended.
    pub effects: usize,
    /// A command process was alive right after the provider's group died.
    pub outlived: bool,
    /// A `thread/status/changed {idle}` followed the resume.
    pub idle_after_resume: bool,
    /// `thread/read {includeTurns}` on the new thread before its first turn
    /// (not asked when the server dies right after `thread/start`).
    pub read_before_first_turn: Option<Result<(), String>>,
}

impl AfterCrash {
    /// The compared fields, as text.
    pub(super) fn fields(&self) -> Vec<(&'static str, String)> {
        let r = |r: &Result<(), String>| match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        let opt = |o: Option<String>| o.unwrap_or_else(|| "not asked".to_owned());
        vec![
            ("second turn/start", opt(self.second_answer.clone())),
            ("thread/resume", r(&self.resume)),
            ("approval policy", self.policy.clone()),
            ("turns after restart", self.turn.clone()),
            ("turn error null", self.error_null.to_string()),
            ("user messages by clientId", format!("{:?}", self.found)),
            ("patched file", opt(self.file.map(|f| f.to_string()))),
            ("turn/start after restart", r(&self.new_turn)),
            (
                "re-sent turn's approvals",
                opt(self.resent_approvals.map(|n| n.to_string())),
            ),
            ("effects in ledger", self.effects.to_string()),
            ("command outlived the kill", self.outlived.to_string()),
            ("idle after resume", self.idle_after_resume.to_string()),
            (
                "thread/read before turn 1",
                opt(self.read_before_first_turn.as_ref().map(r)),
            ),
        ]
    }
}

/// One side's directory at a moment: the workspace and the script.
pub struct Case {
    /// The case's directory.
    pub dir: PathBuf,
    /// The thread's workspace (`dir/ws`).
    pub ws: PathBuf,
    /// The moment's script (`dir/script.toml`).
    pub script: PathBuf,
}

impl Case {
    /// Creates `dir/ws` and writes `moment`'s script.
    pub fn new(dir: &Path, moment: Moment) -> Result<Case, String> {
        Case::with_script(dir, moment.script())
    }

    /// Creates `dir/ws` and writes `script`.
    pub fn with_script(dir: &Path, text: &str) -> Result<Case, String> {
        let io = |e: std::io::Error| format!("{}: {e}", dir.display());
        let ws = dir.join("ws");
        std::fs::create_dir_all(&ws).map_err(io)?;
        let script = dir.join("script.toml");
        std::fs::write(&script, text).map_err(io)?;
        Ok(Case {
            dir: dir.to_owned(),
            ws,
            script,
        })
    }
}

/// The provider under test: the real codex (its argv) or the fake, its
/// script and how it is cut.
pub enum Provider {
    /// The real codex: its argv.
    Real(Vec<String>),
    /// The fake codex, its script, and its cut.
    Fake(FakeCodex, PathBuf, FakeCut),
}

impl Provider {
    /// Starts it, handshaken; `at_moment` arms the fake's cut.
    pub(super) fn start(&self, at_moment: bool) -> Result<CodexClient, String> {
        let mut client = match self {
            Provider::Real(argv) => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .env(
                        "OPENAI_API_KEY",
                        format!("{}fidelity", wire::secret::CANARY_PREFIX),
                    )
                    .stderr(Stdio::null());
                CodexClient::spawn(&mut cmd)
            }
            Provider::Fake(fake, script, cut) => {
                let mut extra = vec!["--script".to_owned(), script.display().to_string()];
                match cut {
                    FakeCut::Exit(p) if at_moment => extra.extend(["--exit".into(), (*p).into()]),
                    FakeCut::Hang(p) if at_moment => extra.extend(["--hang".into(), (*p).into()]),
                    FakeCut::Answer(fault) if at_moment => extra.extend([
                        "--answer".into(),
                        format!("{}#1={}", super::FAKE_MODEL_POINT, fault.as_str()),
                    ]),
                    _ => {}
                }
                CodexClient::spawn(&mut fake.command(&extra))
            }
        }
        .map_err(|e| format!("spawn: {e}"))?;
        client.timeout = WAIT;
        client
            .initialize()
            .map_err(|e| format!("initialize: {e}"))?;
        Ok(client)
    }

    /// The client kills the provider at the moment (else it exits there).
    fn killed_by_client(&self) -> bool {
        !matches!(self, Provider::Fake(_, _, FakeCut::Exit(_)))
    }

    fn is_real(&self) -> bool {
        matches!(self, Provider::Real(_))
    }
}

/// The `turn/start` of message `id` with `text`.
pub(super) fn turn_start(thread: &str, text: &str, id: &str) -> Value {
    json!({
        "threadId": thread,
        "input": [{ "type": "text", "text": text, "text_elements": [] }],
        "clientUserMessageId": id,
    })
}

/// Waits for a message `what` names, tolerating a fake that exits first
/// (it dies at its own point, which may come before the message).
fn wait_method(
    client: &mut CodexClient,
    provider: &Provider,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Result<(), String> {
    match client.wait_for(what, pred) {
        Ok(_) => Ok(()),
        Err(_) if !provider.killed_by_client() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Plays the turn up to `moment` on a started client; the answer to a
/// second `turn/start`, if the moment sends one.
fn play_to(
    client: &mut CodexClient,
    provider: &Provider,
    moment: Moment,
    thread: &str,
    ledger: &Path,
) -> Result<Option<String>, String> {
    if moment == Moment::ThreadStarted {
        return Ok(None);
    }
    // The real server answers; a fake cut before its answer dies instead.
    let first = client.request("turn/start", turn_start(thread, "Create hello.txt", "m-1"));
    let first = match (first, provider.killed_by_client()) {
        (Ok(v), _) => v,
        (Err(_), false) => return Ok(None),
        (Err(e), true) => return Err(format!("turn/start: {e}")),
    };
    match moment {
        Moment::CommandRunning | Moment::ChildRunning => {
            let approval = client
                .wait_for("the approval request", |m| {
                    m["method"] == "item/commandExecution/requestApproval"
                })
                .map_err(|e| e.to_string())?;
            client
                .send(json!({ "id": approval["id"], "result": { "decision": "accept" } }))
                .map_err(|e| e.to_string())?;
            wait_until("the command to run", WAIT, || {
                !effect_pids(ledger).is_empty()
            })?;
        }
        Moment::SecondMessageQueued => {
            client
                .wait_for("the approval request", |m| {
                    m["method"] == "item/commandExecution/requestApproval"
                })
                .map_err(|e| e.to_string())?;
            let second = client.request("turn/start", turn_start(thread, "Also a README", "m-2"));
            let answer = match second {
                Ok(v) if v.pointer("/turn/id") == first.pointer("/turn/id") => "turn 1's turn",
                Ok(_) => "a turn of its own",
                Err(e) => return Ok(Some(format!("error: {e}"))),
            };
            return Ok(Some(answer.to_owned()));
        }
        Moment::PatchStarted => wait_method(client, provider, "the fileChange item", |m| {
            m["method"] == "item/started"
                && m.pointer("/params/item/type") == Some(&json!("fileChange"))
        })?,
        Moment::PatchPending => wait_method(client, provider, "the fileChange approval", |m| {
            m["method"] == "item/fileChange/requestApproval"
        })?,
        Moment::ThreadStarted | Moment::TurnStarted | Moment::PolicyLost => {}
    }
    Ok(None)
}

/// Plays `moment` on `provider` in `case`, kills it there, restarts it and
/// reads back what a runner would.
pub fn crash_at(
    provider: &Provider,
    moment: Moment,
    case: &Case,
    ledger: &Path,
) -> Result<AfterCrash, String> {
    let mut client = provider.start(true)?;
    let mut start = json!({ "cwd": case.ws.display().to_string() });
    if let Some(policy) = moment.policy() {
        start["approvalPolicy"] = json!(policy);
    }
    let thread = client
        .request("thread/start", start)
        .map_err(|e| format!("thread/start: {e}"))?
        .pointer("/thread/id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let read_before_first_turn = (moment != Moment::ThreadStarted).then(|| {
        client
            .request(
                "thread/read",
                json!({ "threadId": thread, "includeTurns": true }),
            )
            .map(drop)
            .map_err(|e| e.to_string())
    });
    let second_answer = play_to(&mut client, provider, moment, &thread, ledger)?;
    if provider.is_real() || provider.killed_by_client() {
        let _ = client.kill();
    } else {
        let _ = client.wait_exit();
    }
    // A command that dies with its provider (of its parent-death signal)
    // is gone within milliseconds; one that outlives it runs on.
    let outlived = wait_until("the commands to die with it", OUTLIVED_AFTER, || {
        effect_pids(ledger).is_empty()
    })
    .is_err();
    wait_until("every command to end", WAIT, || {
        effect_pids(ledger).is_empty()
    })?;
    let mut after = read_after(provider, moment, &thread, case, ledger)?;
    after.second_answer = second_answer;
    after.outlived = outlived;
    after.read_before_first_turn = read_before_first_turn.map(without_ids);
    Ok(after)
}

/// After the kill at `moment`: the provider restarted on the same state,
/// asked what a recovering runner asks about `thread`.
fn read_after(
    provider: &Provider,
    moment: Moment,
    thread: &str,
    case: &Case,
    ledger: &Path,
) -> Result<AfterCrash, String> {
    let mut again = provider.start(false)?;
    let resumed = again.request(
        "thread/resume",
        json!({ "threadId": thread, "excludeTurns": true }),
    );
    let policy = resumed
        .as_ref()
        .ok()
        .and_then(|r| r["approvalPolicy"].as_str());
    let policy = policy.unwrap_or("-").to_owned();
    let resume = resumed.map(drop).map_err(|e| e.to_string());
    while let Ok(Some(_)) = again.expect_silence(Duration::from_millis(500)) {}
    let idle_after_resume = again.transcript.iter().any(|(dir, m)| {
        *dir == Dir::Received
            && m["method"] == "thread/status/changed"
            && m["params"]["status"]["type"] == "idle"
    });
    let read = again
        .request(
            "thread/read",
            json!({ "threadId": thread, "includeTurns": true }),
        )
        .unwrap_or(Value::Null);
    let file = matches!(moment, Moment::PatchStarted | Moment::PatchPending)
        .then(|| case.ws.join("hello.txt").exists());
    let (new_turn, resent_approvals) = match moment {
        Moment::PolicyLost => resend(&mut again, thread),
        _ => (continuation(&mut again, thread), None),
    };
    let _ = again.kill();
    wait_until("every command to end", WAIT, || {
        effect_pids(ledger).is_empty()
    })?;
    let first = read.pointer("/thread/turns/0");
    Ok(AfterCrash {
        second_answer: None,
        resume: without_ids(resume),
        policy,
        turn: turns_form(&read),
        error_null: first.is_none_or(|t| t["error"].is_null()),
        found: MESSAGES
            .into_iter()
            .filter(|m| found_by_client_id(&read, m))
            .collect(),
        file,
        new_turn: without_ids(new_turn),
        resent_approvals,
        effects: wire::ledger::read(ledger).map_err(|e| e.to_string())?.len(),
        outlived: false,
        idle_after_resume,
        read_before_first_turn: None,
    })
}

/// A continuation `turn/start` on `thread`: whether it was accepted.
fn continuation(client: &mut CodexClient, thread: &str) -> Result<(), String> {
    client
        .request(
            "turn/start",
            turn_start(thread, wire::marker::CONTINUE_MARKER, "m-1#continuation"),
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The first message sent again on `thread` and played to its end,
/// accepting every approval: whether it started, and how many approvals it
/// asked for.
fn resend(client: &mut CodexClient, thread: &str) -> (Result<(), String>, Option<usize>) {
    let started = client.request("turn/start", turn_start(thread, "Create hello.txt", "m-1"));
    if let Err(e) = started {
        return (Err(e.to_string()), None);
    }
    let mut approvals = 0;
    loop {
        let Ok(m) = client.next_message("the end of the re-sent turn") else {
            return (
                Err("no end of the re-sent turn".to_owned()),
                Some(approvals),
            );
        };
        let method = m["method"].as_str().unwrap_or_default();
        if method.ends_with("/requestApproval") {
            approvals += 1;
            let _ = client.send(json!({ "id": m["id"], "result": { "decision": "accept" } }));
        }
        if method == "turn/completed" {
            return (Ok(()), Some(approvals));
        }
    }
}

/// Whether any item of any turn of `read` has the `clientId` `id`.
fn found_by_client_id(read: &Value, id: &str) -> bool {
    read.pointer("/thread/turns")
        .and_then(Value::as_array)
        .is_some_and(|ts| {
            ts.iter()
                .flat_map(|t| t["items"].as_array().into_iter().flatten())
                .any(|i| i["clientId"] == id)
        })
}

/// The turns of a `thread/read` in wire form, or `absent`.
fn turns_form(read: &Value) -> String {
    let turns: Vec<String> = read
        .pointer("/thread/turns")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(turn_form)
        .collect();
    if turns.is_empty() {
        "absent".to_owned()
    } else {
        turns.join("; ")
    }
}

/// A turn in wire form: `<status> <itemsView> [<item type>, …]`.
pub fn turn_form(turn: &Value) -> String {
    let kinds: Vec<&str> = turn["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["type"].as_str().unwrap_or("?"))
        .collect();
    format!(
        "{} {} [{}]",
        turn["status"].as_str().unwrap_or("?"),
        turn["itemsView"].as_str().unwrap_or("-"),
        kinds.join(", ")
    )
}

/// Error texts differ in thread ids and file paths only; compare them
/// without those.
pub(super) fn without_ids(r: Result<(), String>) -> Result<(), String> {
    r.map_err(|e| {
        e.split(char::is_whitespace)
            .map(|w| if w.starts_with('/') { "<path>" } else { w })
            .filter(|w| !is_uuid(w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn is_uuid(w: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    w.len() == 36 && w.split('-').map(str::len).eq([8, 4, 4, 4, 12]) && w.split('-').all(hex)
}
