//! The OpenCode moments of the differential: the real `opencode serve`
//! (pinned, its model the fake model API) against `fake-provider opencode`,
//! each SIGKILLed (its process group) right after `POST /session`, right
//! after the `prompt_async` 204, while the `bash` permission waits, while the
//! approved command runs, and while the model writes its final answer, then
//! restarted on the same data
//! and asked what a recovering runner asks (`GET /session/{id}`,
//! `GET /session/{id}/message/{messageID}` for the client's message id,
//! `GET /session/{id}/message` for the answers), then sent a continuation.
//! The fake is cut by its own `--exit` where the client cannot see the
//! moment; the real server, and the fake while its permission waits or its
//! command runs, are killed by the client as soon as it sees the moment.
//!
//! The upstream-failure moments (the model API fails the turn's first model
//! request) are `opencode/upstream.rs`'s; `opencode acp` has none.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{MOMENT_SCRIPT, Moments, Row, effect_pids, wait_until};
use crate::real::{Product, spawn_listening};
use crate::supervisor::GroupChild;

mod upstream;

pub use upstream::{AfterFailure, upstream_rows};

/// How long one step may take (OpenCode answers its first prompt in about
/// 2 s here, more on a loaded machine).
const WAIT: Duration = Duration::from_secs(120);

/// Where a turn is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Moment {
    /// Right after the `POST /session` response, before any prompt.
    SessionCreated,
    /// Right after the `prompt_async` response (204).
    PromptAccepted,
    /// While the `bash` permission waits for its reply.
    PermissionPending,
    /// While the approved `bash` command runs.
    CommandRunning,
    /// Once the command has completed, while the model writes its final
    /// answer (the real server's model API is held at its second response).
    AnswerStreaming,
}

impl Moment {
    /// Every moment, in the order of a turn.
    pub const ALL: [Moment; 5] = [
        Moment::SessionCreated,
        Moment::PromptAccepted,
        Moment::PermissionPending,
        Moment::CommandRunning,
        Moment::AnswerStreaming,
    ];

    /// The fake's `--exit` point for the moment, where it dies by itself; none
    /// while its command runs (the client kills it then, as the real one).
    fn fake_exit(self) -> Option<&'static str> {
        match self {
            Moment::SessionCreated => Some("opencode.session_create.responded"),
            Moment::PromptAccepted => Some("opencode.prompt_async.responded"),
            Moment::PermissionPending | Moment::CommandRunning => None,
            // The fifth part state made durable: the script's text, the
            // tool pending, running (asking), running (granted), completed.
            Moment::AnswerStreaming => Some("opencode.part.recorded#5"),
        }
    }

    /// The fake model API's `--hang` point behind the real server, if any.
    fn model_hang(self) -> Option<&'static str> {
        (self == Moment::AnswerStreaming).then_some("model.response_created.sent#2")
    }
}

/// What a recovering runner reads after a crash at a moment, and what
/// happened.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AfterCrash {
    /// `GET /session/{id}` after the restart: 200, or 404 when the session
    /// was never written.
    pub session: u16,
    /// `GET /session/{id}/message/{messageID}` of the client's message id:
    /// 200 when the user message was recorded (the runner's "was this turn
    /// recorded?").
    pub user_message: u16,
    /// Each assistant message answering it, in order, as
    /// `<completed|open> finish=<finish> error=<error name>`.
    pub answers: Vec<String>,
    /// The text and tool parts of those answers: `text`, `tool <name>
    /// <state>` (OpenCode's `step-start`/`step-finish` parts, which the fake
    /// deliberately does not simulate, are left out).
    pub parts: Vec<String>,
    /// The turn's status as the runner's OpenCode driver reads these
    /// messages (`wire::stores::opencode::turn_status`).
    pub status: &'static str,
    /// Effects in the ledger once every command has ended.
    pub effects: usize,
    /// A command process was alive right after the server's group died.
    pub outlived: bool,
    /// `prompt_async` of a continuation on the session after the restart.
    pub new_prompt: u16,
}

impl AfterCrash {
    /// The compared fields, as text.
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("GET session", self.session.to_string()),
            ("GET user message", self.user_message.to_string()),
            ("answers", self.answers.join("; ")),
            ("parts", self.parts.join(", ")),
            ("turn status (driver)", self.status.to_owned()),
            ("effects in ledger", self.effects.to_string()),
            ("command outlived the kill", self.outlived.to_string()),
            ("prompt_async after restart", self.new_prompt.to_string()),
        ]
    }
}

/// A difference the fake keeps on purpose: at `moment`, `field` differs,
/// for `reason` (each is explained at length in
/// `docs/real-opencode-findings.md`).
struct KnownDifference {
    moment: Moment,
    field: &'static str,
    reason: &'static str,
}

/// Every known difference.
const KNOWN_DIFFERENCES: [KnownDifference; 1] = [KnownDifference {
    moment: Moment::AnswerStreaming,
    field: "answers",
    reason: "real writes one answer per model step, the fake one per turn; \
                 the runner reads the last answer, the same status on both",
}];

/// The known difference of `field` at `moment`, if one is listed.
fn known(moment: Moment, field: &str) -> Option<&'static str> {
    KNOWN_DIFFERENCES
        .iter()
        .find(|k| k.moment == moment && k.field == field)
        .map(|k| k.reason)
}

/// The rows of one moment, labelled `label`: a reading of the real server
/// against the fake's.
pub fn compare(moment: Moment, label: &str, real: &AfterCrash, fake: &AfterCrash) -> Vec<Row> {
    real.fields()
        .into_iter()
        .zip(fake.fields())
        .map(|((field, r), (_, f))| {
            let verdict = match known(moment, field) {
                _ if r == f => "same".to_owned(),
                Some(why) => format!("known: {why}"),
                None => super::DIFFERS.to_owned(),
            };
            Row {
                product: "runner-opencode-real",
                moment: label.to_owned(),
                field,
                real: r,
                fake: f,
                verdict,
            }
        })
        .collect()
}

/// The server under test: the real OpenCode (its command line) or the fake.
enum Subject<'a> {
    Real(Vec<String>),
    Fake {
        turncut: &'a Path,
        state: PathBuf,
        script: PathBuf,
        /// An `--answer POINT#N=NAME` it is armed with.
        answer: Option<String>,
    },
}

/// A running server, killed (as a process group) on drop.
struct Server {
    child: GroupChild,
    agent: ureq::Agent,
    url: String,
    /// The fake, started to exit by itself at the moment.
    exits_at_moment: bool,
}

impl Subject<'_> {
    fn command(&self, moment: Option<Moment>) -> Command {
        match self {
            Subject::Real(argv) => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .env(crate::real::CREDENTIAL_FIFO_ENV, "/dev/null")
                    .env_remove(crate::nemesis::TAG_ENV);
                cmd
            }
            Subject::Fake {
                turncut,
                state,
                script,
                answer,
            } => {
                let mut cmd = Command::new(turncut);
                cmd.args(["fake-provider", "opencode", "--port", "0", "--state-dir"])
                    .arg(state)
                    .arg("--script")
                    .arg(script);
                if let Some(point) = moment.and_then(Moment::fake_exit) {
                    cmd.args(["--exit", point]);
                }
                if let Some(answer) = answer {
                    cmd.args(["--answer", answer]);
                }
                cmd
            }
        }
    }

    /// Starts the server in `cwd`, the fake cut at `moment`'s exit point;
    /// its stderr appended to `log`.
    fn start(&self, cwd: &Path, moment: Option<Moment>, log: &Path) -> Result<Server, String> {
        let mut cmd = self.command(moment);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.current_dir(cwd).stderr(log);
        let exits_at_moment =
            matches!(self, Subject::Fake { .. }) && moment.and_then(Moment::fake_exit).is_some();
        // Piped and kept open: the fake serves until its stdin closes.
        cmd.stdin(Stdio::piped());
        let (child, url) =
            spawn_listening(&mut cmd, "listening on ", WAIT).map_err(|e| format!("{e:#}"))?;
        Ok(Server {
            child,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .proxy(None)
                .timeout_global(Some(WAIT))
                .build()
                .into(),
            url,
            exits_at_moment,
        })
    }
}

impl Server {
    /// One JSON request: `(status, body or Null)`, or why it got no answer
    /// (a server that died mid-request). The body is sent whole with its
    /// length (a fake that exits right after answering must have read it
    /// all, or its close resets the connection before the answer is read).
    fn call(&self, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.url);
        let response = match body {
            None => self.agent.get(&url).call(),
            Some(b) => self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(b.to_string()),
        };
        let mut response = response.map_err(|e| format!("{path}: {e}"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// The status of a request, 0 when it got no answer.
    fn status(&self, path: &str, body: Option<Value>) -> u16 {
        self.call(path, body).map_or(0, |(s, _)| s)
    }

    fn prompt(&self, session: &str, message_id: &str, text: &str) -> u16 {
        let body = json!({ "messageID": message_id, "parts": [{ "type": "text", "text": text }] });
        self.status(&format!("/session/{session}/prompt_async"), Some(body))
    }
}

/// The `/event` stream of a server, read on a thread.
struct Events {
    rx: mpsc::Receiver<Value>,
}

impl Events {
    fn open(server: &Server) -> Result<Events, String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .build()
            .into();
        let response = agent
            .get(&format!("{}/event", server.url))
            .call()
            .map_err(|e| format!("subscribe to /event: {e}"))?;
        let reader = response.into_body().into_reader();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_events(reader, &tx));
        Ok(Events { rx })
    }

    /// Waits for the next event that `wanted` accepts.
    fn until(&self, what: &str, wanted: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(event) if wanted(&event) => return Ok(event),
                Ok(_) => {}
                Err(_) => return Err(format!("no {what} within {WAIT:?}")),
            }
        }
    }
}

/// Sends each `data:` JSON of an SSE stream until it ends or nobody listens.
fn read_events(mut reader: impl std::io::Read, tx: &mpsc::Sender<Value>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n @ 1..) = reader.read(&mut chunk) {
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            let Ok(event) = serde_json::from_str::<Value>(&data.join("\n")) else {
                continue;
            };
            if tx.send(event).is_err() {
                return;
            }
        }
    }
}

/// A driver-style client message id (`msg_<hex>_<id>`, see
/// `wire::client_id`), later than every one made before.
fn client_id(message_id: &str, continuation: bool) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut issued = 0;
    let _ = LAST.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
        issued = (now << 12).max(last + 1);
        Some(issued)
    });
    wire::client_id::encode_opencode(issued, message_id, continuation)
}

/// Plays the turn on `server` up to `moment`: the session, then the prompt,
/// then the approved command running. Returns the session id.
fn play_until(
    server: &mut Server,
    moment: Moment,
    message_id: &str,
    ledger: &Path,
) -> Result<String, String> {
    let needs_events = matches!(
        moment,
        Moment::PermissionPending | Moment::CommandRunning | Moment::AnswerStreaming
    );
    let events = needs_events.then(|| Events::open(server)).transpose()?;
    let (status, session) = server.call("/session", Some(json!({})))?;
    let session = match session["id"].as_str() {
        Some(id) if status == 200 => id.to_owned(),
        _ => return Err(format!("POST /session: {status} {session}")),
    };
    if moment == Moment::SessionCreated {
        return Ok(session);
    }
    // The fake dies as it answers at this moment; the answer may be lost.
    let _ = server.prompt(&session, message_id, "Create hello.txt");
    if let Some(events) = events {
        approve_and_wait(server, &events, moment, ledger)?;
    }
    Ok(session)
}

/// Answers the `bash` permission once, then waits for `moment`: the command
/// running, the fake gone at its exit point, or the real server's next step.
fn approve_and_wait(
    server: &mut Server,
    events: &Events,
    moment: Moment,
    ledger: &Path,
) -> Result<(), String> {
    let asked = events.until("permission.asked", |e| e["type"] == "permission.asked")?;
    if moment == Moment::PermissionPending {
        return Ok(());
    }
    let id = asked["properties"]["id"]
        .as_str()
        .ok_or("a permission without an id")?;
    let reply = server.status(
        &format!("/permission/{id}/reply"),
        Some(json!({ "reply": "once" })),
    );
    if reply != 200 {
        return Err(format!("the permission reply: {reply}"));
    }
    if moment == Moment::CommandRunning {
        return wait_until("the command to run", WAIT, || {
            !effect_pids(ledger).is_empty()
        });
    }
    if server.exits_at_moment {
        let child = &mut server.child;
        return wait_until("the fake to exit at its point", WAIT, || {
            child.inner().try_wait().ok().flatten().is_some()
        });
    }
    let step = asked["properties"]["tool"]["messageID"].clone();
    events
        .until("the next step's assistant message", |e| {
            e["type"] == "message.updated"
                && e["properties"]["info"]["role"] == "assistant"
                && e["properties"]["info"]["id"] != step
        })
        .map(drop)
}

/// The answers to `message_id` in a message list, and their parts.
fn answers_of(messages: &Value, message_id: &str) -> (Vec<String>, Vec<String>) {
    let answering = messages
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["info"]["role"] == "assistant" && m["info"]["parentID"] == message_id);
    let mut answers = Vec::new();
    let mut parts = Vec::new();
    for m in answering {
        answers.push(answer_form(&m["info"]));
        parts.extend(
            m["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(part_form),
        );
    }
    (answers, parts)
}

/// An answer as `<completed|open> finish=<finish> error=<error name>`.
fn answer_form(info: &Value) -> String {
    let done = if info["time"]["completed"].is_null() {
        "open"
    } else {
        "completed"
    };
    format!(
        "{done} finish={} error={}",
        info["finish"].as_str().unwrap_or("-"),
        info["error"]["name"].as_str().unwrap_or("-")
    )
}

/// A text or tool part as `text` or `tool <name> <state>`; none for the
/// others (OpenCode's `step-start`/`step-finish` parts, which the fake
/// deliberately does not simulate).
fn part_form(p: &Value) -> Option<String> {
    match p["type"].as_str().unwrap_or("?") {
        "text" => Some("text".to_owned()),
        "tool" => Some(format!(
            "tool {} {}",
            p["tool"].as_str().unwrap_or("?"),
            p["state"]["status"].as_str().unwrap_or("?")
        )),
        _ => None,
    }
}

/// Plays `moment` on `subject` in `cwd`, kills the server's process group
/// there, restarts it on the same data and reads back what a recovering
/// runner would. `ledger` is where the subject's effects land.
fn crash_at(
    subject: &Subject,
    moment: Moment,
    cwd: &Path,
    ledger: &Path,
    log: &Path,
) -> Result<AfterCrash, String> {
    let message_id = client_id("m-1", false);
    let mut server = subject.start(cwd, Some(moment), log)?;
    let session = play_until(&mut server, moment, &message_id, ledger)?;
    let _ = server.child.kill();
    let outlived = !effect_pids(ledger).is_empty();
    wait_until("every command to end", WAIT, || {
        effect_pids(ledger).is_empty()
    })?;
    let effects = wire::ledger::read(ledger).map_or(0, |l| l.len());
    let again = subject.start(cwd, None, log)?;
    let session_status = again.status(&format!("/session/{session}"), None);
    let user_message = again.status(&format!("/session/{session}/message/{message_id}"), None);
    let messages = again
        .call(&format!("/session/{session}/message"), None)
        .map_or(Value::Null, |(_, body)| body);
    let (answers, parts) = answers_of(&messages, &message_id);
    let list = messages.as_array().map_or(&[][..], Vec::as_slice);
    let status = wire::stores::opencode::turn_status(list, &message_id);
    let continuation = client_id("m-1", true);
    let new_prompt = again.prompt(&session, &continuation, wire::marker::CONTINUE_MARKER);
    Ok(AfterCrash {
        session: session_status,
        user_message,
        answers,
        parts,
        status,
        effects,
        outlived,
        new_prompt,
    })
}

/// Creates `dir/ws` and writes the moments' script into `dir`; returns both.
fn case(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).map_err(io)?;
    let script = dir.join("script.toml");
    std::fs::write(&script, MOMENT_SCRIPT).map_err(io)?;
    Ok((ws, script))
}

/// One moment played on the real OpenCode, in `dir` (its model API, ledger
/// and home there).
pub fn real_at(
    turncut: &Path,
    opencode: &Path,
    moment: Moment,
    dir: &Path,
) -> Result<AfterCrash, String> {
    let (ws, script) = case(dir)?;
    let model_dir = dir.join("model");
    let model = super::start_model_api(turncut, dir, &script, moment.model_hang())?;
    let product = Product {
        real: wire::profiles::real("runner-opencode-real").ok_or("no runner-opencode-real")?,
        bin: opencode.to_owned(),
        home: dir.join("opencode-home"),
    };
    let argv = product
        .command(&model.url, "fidelity")
        .map_err(|e| format!("{e:#}"))?;
    let ledger = model_dir.join("ledger.jsonl");
    let seen = crash_at(
        &Subject::Real(argv),
        moment,
        &ws,
        &ledger,
        &dir.join("opencode.stderr"),
    );
    model.stop();
    seen
}

/// One moment played on the fake OpenCode, in `dir`.
pub fn fake_at(turncut: &Path, moment: Moment, dir: &Path) -> Result<AfterCrash, String> {
    let (ws, script) = case(dir)?;
    let state = dir.join("fake");
    let subject = Subject::Fake {
        turncut,
        state: state.clone(),
        script,
        answer: None,
    };
    crash_at(
        &subject,
        moment,
        &ws,
        &state.join("ledger.jsonl"),
        &dir.join("fake.stderr"),
    )
}

/// The rows of every OpenCode moment `which` names (crash moments, then
/// upstream failures), the real server played `runs` times at each (each
/// distinct reading its own rows, with how often it came up).
pub fn rows(
    turncut: &Path,
    opencode: &Path,
    dir: &Path,
    runs: u32,
    which: Moments,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    if which.crash() {
        rows = crash_rows(turncut, opencode, dir, runs)?;
    }
    if which.upstream() {
        let faults = wire::upstream::UpstreamFault::ALL;
        let dir = dir.join("upstream");
        rows.extend(upstream_rows(turncut, opencode, &dir, runs, &faults)?);
    }
    Ok(rows)
}

/// The rows of every crash moment.
fn crash_rows(turncut: &Path, opencode: &Path, dir: &Path, runs: u32) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for moment in Moment::ALL {
        let fake = fake_at(turncut, moment, &dir.join(format!("{moment:?}-fake")))?;
        let mut seen = std::collections::BTreeMap::<AfterCrash, u32>::new();
        for run in 0..runs.max(1) {
            let case = dir.join(format!("{moment:?}-real-{run}"));
            *seen
                .entry(real_at(turncut, opencode, moment, &case)?)
                .or_default() += 1;
        }
        for (real, n) in &seen {
            let label = super::label(&format!("{moment:?}"), *n, runs);
            rows.extend(compare(moment, &label, real, &fake));
        }
    }
    Ok(rows)
}
