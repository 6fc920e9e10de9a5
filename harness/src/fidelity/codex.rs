//! The codex moments of the differential: the real `codex app-server`
//! (pinned, its model the fake model API) against `fake-provider codex`,
//! each SIGKILLed right after `thread/start`, right after `turn/start`, and
//! while an approved command runs, then restarted on the same home.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{MOMENT_SCRIPT, Row, compare, effect_pids, wait_until};
use crate::codex_client::{CodexClient, Dir};
use crate::demo::FakeCodex;
use crate::real::Product;

/// How long one request may take (codex starts in about a second here).
const WAIT: Duration = Duration::from_secs(60);

/// Where a turn is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Right after the `thread/start` response, before any turn.
    ThreadStarted,
    /// Right after the `turn/start` response.
    TurnStarted,
    /// While the approved command runs.
    CommandRunning,
}

impl Moment {
    /// Every moment, in turn order.
    pub const ALL: [Moment; 3] = [
        Moment::ThreadStarted,
        Moment::TurnStarted,
        Moment::CommandRunning,
    ];

    /// The fake's cut point for the moment.
    fn fake_point(self) -> &'static str {
        match self {
            Moment::ThreadStarted => "codex.thread_start.responded",
            Moment::TurnStarted => "codex.turn_start.responded",
            Moment::CommandRunning => "codex.effect.spawned",
        }
    }

    /// Why the real codex's reading is one of the rarer outcomes measured
    /// at this moment that a runner must treat like the usual one, if it
    /// is: after a kill right after the `turn/start` response (22 runs):
    /// an interrupted turn without items (20), no turn (1) or no thread
    /// (1); the user message is never recorded in any of them.
    fn known_variant(self, real: &AfterCrash) -> Option<&'static str> {
        (self == Moment::TurnStarted
            && !real.found_by_client_id
            && real.effects == 0
            && real.turn == "absent")
            .then_some(
                "codex lost the unwritten turn whole; like the usual reading, no user message",
            )
    }
}

/// What a recovering runner learns at a moment, and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterCrash {
    /// `thread/resume` succeeded, or its error (thread ids left out).
    pub resume: Result<(), String>,
    /// The turn as read back after the resume: `<status> <itemsView>
    /// [item types]`, or `absent`.
    pub turn: String,
    /// The turn's error field is null.
    pub error_null: bool,
    /// `thread/read` finds the user message by its `clientId`.
    pub found_by_client_id: bool,
    /// `turn/start` on the thread after the restart succeeded, or its error.
    pub new_turn: Result<(), String>,
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
    fn fields(&self) -> Vec<(&'static str, String)> {
        let r = |r: &Result<(), String>| match r {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("error: {e}"),
        };
        vec![
            ("thread/resume", r(&self.resume)),
            ("turn after restart", self.turn.clone()),
            ("turn error null", self.error_null.to_string()),
            (
                "user message by clientId",
                self.found_by_client_id.to_string(),
            ),
            ("turn/start after restart", r(&self.new_turn)),
            ("effects in ledger", self.effects.to_string()),
            ("command outlived the kill", self.outlived.to_string()),
            ("idle after resume", self.idle_after_resume.to_string()),
            (
                "thread/read before turn 1",
                self.read_before_first_turn
                    .as_ref()
                    .map_or("not asked".to_owned(), r),
            ),
        ]
    }
}

/// The provider under test: the real codex (its argv) or the fake.
pub enum Provider {
    /// The real codex: its argv.
    Real(Vec<String>),
    /// The fake codex and its script.
    Fake(FakeCodex, PathBuf),
}

impl Provider {
    fn start(&self, cut: Option<Moment>) -> Result<CodexClient, String> {
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
            Provider::Fake(fake, script) => {
                let mut extra = vec!["--script".to_owned(), script.display().to_string()];
                // Killed by its own `--exit` where the client cannot see the
                // moment; held (`--hang`) while its command runs, then
                // killed by the client like the real one.
                match cut {
                    Some(Moment::CommandRunning) => {
                        extra.extend(["--hang".to_owned(), "codex.effect.spawned".to_owned()]);
                    }
                    Some(m) => extra.extend(["--exit".to_owned(), m.fake_point().to_owned()]),
                    None => {}
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

    fn is_real(&self) -> bool {
        matches!(self, Provider::Real(_))
    }
}

/// The `turn/start` of the moments' message.
fn turn_start(thread: &str) -> Value {
    json!({
        "threadId": thread,
        "input": [{ "type": "text", "text": "Create hello.txt", "text_elements": [] }],
        "clientUserMessageId": "m-1",
    })
}

/// Plays the turn up to `moment` on a started client; whether a command
/// is running there.
fn play_to(
    client: &mut CodexClient,
    moment: Moment,
    thread: &str,
    ledger: &Path,
) -> Result<(), String> {
    match moment {
        Moment::ThreadStarted => Ok(()),
        Moment::TurnStarted => {
            // The real server answered; the fake died right after answering.
            let _ = client.request("turn/start", turn_start(thread));
            Ok(())
        }
        Moment::CommandRunning => {
            client
                .request("turn/start", turn_start(thread))
                .map_err(|e| format!("turn/start: {e}"))?;
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
            })
        }
    }
}

/// Plays `moment` on `provider` in `cwd`, kills it there, restarts it and
/// reads back what a runner would.
pub fn crash_at(
    provider: &Provider,
    moment: Moment,
    cwd: &str,
    ledger: &Path,
) -> Result<AfterCrash, String> {
    let mut client = provider.start(Some(moment))?;
    let thread = client
        .thread_start(cwd)
        .map_err(|e| format!("thread/start: {e}"))?;
    let read_before_first_turn = (moment != Moment::ThreadStarted).then(|| {
        client
            .request(
                "thread/read",
                json!({ "threadId": thread, "includeTurns": true }),
            )
            .map(drop)
            .map_err(|e| e.to_string())
    });
    play_to(&mut client, moment, &thread, ledger)?;
    if provider.is_real() || moment == Moment::CommandRunning {
        let _ = client.kill();
    } else {
        let _ = client.wait_exit();
    }
    let mut after = read_after(provider, moment, &thread, ledger)?;
    after.read_before_first_turn = read_before_first_turn.map(without_ids);
    Ok(after)
}

/// After the kill at `moment`: the provider restarted on the same state,
/// asked what a recovering runner asks about `thread`.
fn read_after(
    provider: &Provider,
    moment: Moment,
    thread: &str,
    ledger: &Path,
) -> Result<AfterCrash, String> {
    let mut again = provider.start(None)?;
    let resume = again
        .request(
            "thread/resume",
            json!({ "threadId": thread, "excludeTurns": true }),
        )
        .map(drop)
        .map_err(|e| e.to_string());
    // When a restarted runner would stop what is left and decide.
    let mut outlived = false;
    if moment == Moment::CommandRunning {
        outlived = !effect_pids(ledger).is_empty();
        wait_until("the command to end", WAIT, || {
            effect_pids(ledger).is_empty()
        })?;
    }
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
    let new_turn = again
        .request("turn/start", json!({
            "threadId": thread,
            "input": [{ "type": "text", "text": wire::marker::CONTINUE_MARKER, "text_elements": [] }],
            "clientUserMessageId": "m-1#continuation",
        }))
        .map(drop)
        .map_err(|e| e.to_string());
    let _ = again.kill();
    let turn = read.pointer("/thread/turns/0");
    Ok(AfterCrash {
        resume: without_ids(resume),
        turn: turn.map_or("absent".to_owned(), turn_form),
        error_null: turn.is_none_or(|t| t["error"].is_null()),
        found_by_client_id: found_by_client_id(&read, "m-1"),
        new_turn: without_ids(new_turn),
        effects: wire::ledger::read(ledger).map_err(|e| e.to_string())?.len(),
        outlived,
        idle_after_resume,
        read_before_first_turn: None,
    })
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

/// Error texts differ in the thread id only; compare them without it.
fn without_ids(r: Result<(), String>) -> Result<(), String> {
    r.map_err(|e| {
        e.split(char::is_whitespace)
            .filter(|w| !is_uuid(w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

fn is_uuid(w: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    w.len() == 36 && w.split('-').map(str::len).eq([8, 4, 4, 4, 12]) && w.split('-').all(hex)
}

/// The fake's and the real codex's readings at `moment`, each in its own
/// directory under `dir`.
pub fn both_at(
    turncut: &Path,
    codex: &Path,
    moment: Moment,
    dir: &Path,
) -> Result<(AfterCrash, AfterCrash), String> {
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(io)?;
    let script = dir.join("script.toml");
    std::fs::write(&script, MOMENT_SCRIPT).map_err(io)?;
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).map_err(io)?;
    let cwd = ws.display().to_string();
    let fake = FakeCodex::via(turncut, &dir.join("fake"));
    let fake_ledger = fake.ledger();
    let fake_seen = crash_at(
        &Provider::Fake(fake, script.clone()),
        moment,
        &cwd,
        &fake_ledger,
    )?;
    let model_dir = dir.join("model");
    let model = super::start_model_api(turncut, dir, &script, None)?;
    let product = Product {
        real: wire::profiles::real("runner-codex-real").ok_or("no runner-codex-real profile")?,
        bin: codex.to_owned(),
        home: dir.join("codex-home"),
    };
    let argv = product
        .command(&model.url, &dir.display().to_string())
        .map_err(|e| format!("{e:#}"))?;
    let real_seen = crash_at(
        &Provider::Real(argv),
        moment,
        &cwd,
        &model_dir.join("ledger.jsonl"),
    );
    model.stop();
    Ok((real_seen?, fake_seen))
}

/// The rows of every codex moment, the real codex played `runs` times at
/// each (each distinct reading its own rows, with how often it came up).
pub fn rows(turncut: &Path, codex: &Path, dir: &Path, runs: u32) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for moment in Moment::ALL {
        let mut seen: Vec<(AfterCrash, AfterCrash, u32)> = Vec::new();
        for run in 0..runs.max(1) {
            let case = dir.join(format!("{moment:?}-{run}"));
            let (real, fake) = both_at(turncut, codex, moment, &case)?;
            match seen.iter_mut().find(|(r, f, _)| *r == real && *f == fake) {
                Some((_, _, n)) => *n += 1,
                None => seen.push((real, fake, 1)),
            }
        }
        for (real, fake, n) in seen {
            let label = match runs {
                0 | 1 => format!("{moment:?}"),
                _ => format!("{moment:?} {n}/{runs}"),
            };
            rows.extend(moment_rows(moment, &label, &real, &fake));
        }
    }
    Ok(rows)
}

/// The rows of one reading of each at `moment`.
fn moment_rows(moment: Moment, label: &str, real: &AfterCrash, fake: &AfterCrash) -> Vec<Row> {
    let fields = real
        .fields()
        .into_iter()
        .zip(fake.fields())
        .map(|((name, r), (_, f))| (name, r, f))
        .collect();
    let known = (real != fake).then(|| moment.known_variant(real)).flatten();
    compare("runner-codex-real", label, fields, known)
}
