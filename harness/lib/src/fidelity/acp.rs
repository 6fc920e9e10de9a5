//! The ACP moments of the differential: a real ACP agent (pinned, its model
//! the fake model API: `opencode acp`, `codex-acp`, `claude-agent-acp`)
//! against the fake ACP agent it is played by (`fake-provider acp --like
//! opencode` for `opencode acp`, the default `--like claude` of
//! `runner-acpx-claude` for the two the seed platform drives), each SIGKILLed (its process group) right after `session/new`,
//! when the prompt was accepted (the agent's first output, as the runner's
//! ACP driver takes it: the real agent's comes with its tool call, so the
//! fake is killed once that call is `in_progress`), while a `bash`
//! permission waits, and while the approved command runs; then restarted on
//! the same home and asked what a recovering runner asks: `session/load`
//! (its replay), then a continuation prompt.
//!
//! The upstream-failure moments (the model API fails the prompt's first
//! model request) are `acp/upstream.rs`'s, for codex-acp and claude-agent-acp.
//!
//! Both run their tools themselves, detached: what the differential
//! compares is what a runner sees and what happened (effects, a command
//! outliving the kill). Both keep their own message ids, so a replayed user
//! message is found by its text.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wire::profiles::Program;

use super::{MOMENT_SCRIPT, Row, compare, effect_pids, wait_until};
use crate::codex_client::CodexClient;
use crate::real::Product;
use crate::supervisor::GroupChild;

mod upstream;

pub use upstream::{AfterFailure, compared as upstream_compared, upstream_rows};

/// How long one step may take (`opencode acp` takes 2-10 s to start here).
const WAIT: Duration = Duration::from_secs(120);

/// How long after its agent's death a command still running has outlived
/// it (the moments' commands run 1.5 s).
const OUTLIVED_AFTER: Duration = Duration::from_millis(300);

/// The moment's prompt.
const PROMPT: &str = "Create hello.txt";

/// Where a turn is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Right after the `session/new` response.
    SessionCreated,
    /// When the runner's driver takes the prompt as accepted.
    PromptAccepted,
    /// While the `bash` permission waits for its answer.
    PermissionPending,
    /// While the approved command runs.
    ToolRunning,
}

impl Moment {
    /// Every moment, in turn order.
    pub const ALL: [Moment; 4] = [
        Moment::SessionCreated,
        Moment::PromptAccepted,
        Moment::PermissionPending,
        Moment::ToolRunning,
    ];

    /// The fake's `--exit` point, where the client cannot see the moment in
    /// time to kill it there.
    fn fake_exit(self) -> Option<&'static str> {
        match self {
            Moment::SessionCreated => Some("acp.session_new.responded"),
            // The answer, the tool call and its `in_progress`: what the
            // real agent has made durable when its first output is seen.
            Moment::PromptAccepted => Some("acp.session_update.notified#3"),
            Moment::PermissionPending | Moment::ToolRunning => None,
        }
    }
}

/// What a recovering runner reads after a crash at a moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterCrash {
    /// `session/load` succeeded, or its error code.
    pub load: Result<(), String>,
    /// The replay holds the user message (by its text).
    pub user_message: bool,
    /// The replay holds an answer (`agent_message_chunk`).
    pub answer: bool,
    /// The replayed tool calls' last statuses, in order.
    pub tools: Vec<String>,
    /// Effects in the ledger once every command has ended.
    pub effects: usize,
    /// A command process was alive right after the agent's group died.
    pub outlived: bool,
    /// A continuation prompt after the restart: its `stopReason`, or error.
    pub continuation: Result<String, String>,
}

impl AfterCrash {
    fn fields(&self) -> Vec<(&'static str, String)> {
        let r = |r: &Result<String, String>| match r {
            Ok(v) => v.clone(),
            Err(e) => format!("error: {e}"),
        };
        vec![
            (
                "session/load",
                r(&self.load.clone().map(|()| "ok".to_owned())),
            ),
            ("user message replayed", self.user_message.to_string()),
            ("answer replayed", self.answer.to_string()),
            ("tool calls replayed", self.tools.join(", ")),
            ("effects in ledger", self.effects.to_string()),
            ("command outlived the kill", self.outlived.to_string()),
            ("continuation prompt", r(&self.continuation)),
        ]
    }
}

/// Why a real agent's session is missing early: measured, both store a
/// session only with its first turn (`docs/real-providers.md`, "What each
/// keeps after a SIGKILL").
const LAZY_SESSION: &str = "the agent stores a session only with its first turn: loaded after an early kill it answers -32002; the fake stores it at session/new";
const CODEX_LAZY_TURN: &str = "codex-acp writes nothing of a turn before its first rollout write: at the first output the session is still not stored";
const CODEX_COMPLETED: &str = "codex-acp replays a cut tool call `completed` though it never ran (0 effects): never proof that it ran";
const CLAUDE_LAG: &str = "Claude Code's transcript, written on a 100 ms timer, holds the user message only, not yet the answer nor the tool call";
const CLAUDE_BASH: &str = "Claude Code's Bash command outlives the agent's kill and lands its effect (in a cell runnerd's spawn-marker sweep stops it); the fake's terminal dies with its client, whose tool call it replays in_progress where the transcript keeps it pending";

/// Readings of the real ACP agents at a crash moment that the fake
/// (`--like claude`, the generic agent of `runner-acpx-claude`) does not
/// play, each measured and explained; the real agents' waves meet them.
const KNOWN_CRASH: [(Program, Moment, &str, &str); 18] = [
    (
        Program::CodexAcp,
        Moment::SessionCreated,
        "session/load",
        LAZY_SESSION,
    ),
    (
        Program::CodexAcp,
        Moment::SessionCreated,
        "continuation prompt",
        LAZY_SESSION,
    ),
    (
        Program::CodexAcp,
        Moment::PromptAccepted,
        "session/load",
        CODEX_LAZY_TURN,
    ),
    (
        Program::CodexAcp,
        Moment::PromptAccepted,
        "user message replayed",
        CODEX_LAZY_TURN,
    ),
    (
        Program::CodexAcp,
        Moment::PromptAccepted,
        "answer replayed",
        CODEX_LAZY_TURN,
    ),
    (
        Program::CodexAcp,
        Moment::PromptAccepted,
        "tool calls replayed",
        CODEX_LAZY_TURN,
    ),
    (
        Program::CodexAcp,
        Moment::PromptAccepted,
        "continuation prompt",
        CODEX_LAZY_TURN,
    ),
    (
        Program::CodexAcp,
        Moment::PermissionPending,
        "tool calls replayed",
        CODEX_COMPLETED,
    ),
    (
        Program::CodexAcp,
        Moment::ToolRunning,
        "tool calls replayed",
        CODEX_COMPLETED,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::SessionCreated,
        "session/load",
        LAZY_SESSION,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::SessionCreated,
        "continuation prompt",
        LAZY_SESSION,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::PromptAccepted,
        "answer replayed",
        CLAUDE_LAG,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::PromptAccepted,
        "tool calls replayed",
        CLAUDE_LAG,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::PermissionPending,
        "answer replayed",
        CLAUDE_LAG,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::PermissionPending,
        "tool calls replayed",
        CLAUDE_LAG,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::ToolRunning,
        "tool calls replayed",
        CLAUDE_BASH,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::ToolRunning,
        "effects in ledger",
        CLAUDE_BASH,
    ),
    (
        Program::ClaudeAgentAcp,
        Moment::ToolRunning,
        "command outlived the kill",
        CLAUDE_BASH,
    ),
];

/// The known difference of `program`'s `field` at `moment`, if one is listed.
fn known_crash(program: Program, moment: Moment, field: &str) -> Option<&'static str> {
    KNOWN_CRASH
        .iter()
        .find(|(p, m, f, _)| *p == program && *m == moment && *f == field)
        .map(|(.., why)| *why)
}

/// The agent under test: a real agent (its argv) or the fake, played like
/// `like` (`fake-provider acp --like`).
enum Subject {
    Real(Vec<String>),
    Fake {
        turncut: PathBuf,
        state: PathBuf,
        script: PathBuf,
        like: &'static str,
        /// An `--answer POINT=NAME` it is armed with.
        answer: Option<String>,
    },
}

/// The `--like` of the fake a real ACP agent is compared with.
fn fake_like(real: &wire::profiles::Real) -> &'static str {
    match real.program {
        wire::profiles::Program::Opencode => "opencode",
        _ => "claude",
    }
}

impl Subject {
    fn start(&self, cwd: &Path, moment: Option<Moment>) -> Result<CodexClient, String> {
        let mut cmd = match self {
            Subject::Real(argv) => {
                let mut cmd = Command::new(&argv[0]);
                // The key as each agent takes it: a FIFO path (OpenCode),
                // else its provider's variable (a canary, never a real key).
                let key = format!("{}fidelity", wire::secret::CANARY_PREFIX);
                cmd.args(&argv[1..])
                    .env(crate::real::CREDENTIAL_FIFO_ENV, "/dev/null")
                    .env("OPENAI_API_KEY", &key)
                    .env("ANTHROPIC_API_KEY", &key)
                    .env_remove(crate::nemesis::TAG_ENV);
                cmd
            }
            Subject::Fake {
                turncut,
                state,
                script,
                like,
                answer,
            } => {
                let mut cmd = Command::new(turncut);
                cmd.args(["fake-provider", "acp", "--like", like, "--state-dir"])
                    .arg(state)
                    .arg("--script")
                    .arg(script)
                    .env_remove(cutpoint::ENV_ARM)
                    .env_remove(cutpoint::ENV_SOCKET);
                if let Some(point) = moment.and_then(Moment::fake_exit) {
                    cmd.args(["--exit", point]);
                }
                if let Some(answer) = answer {
                    cmd.args(["--answer", answer]);
                }
                cmd
            }
        };
        cmd.current_dir(cwd).stderr(Stdio::null());
        let mut client = CodexClient::spawn(&mut cmd).map_err(|e| format!("spawn: {e}"))?;
        client.timeout = WAIT;
        client.jsonrpc = true;
        client
            .request(
                "initialize",
                json!({
                    "protocolVersion": 1,
                    "clientCapabilities": {
                        "fs": { "readTextFile": false, "writeTextFile": false },
                        "terminal": true,
                    },
                }),
            )
            .map_err(|e| format!("initialize: {e}"))?;
        Ok(client)
    }

    fn exits_at(&self, moment: Moment) -> bool {
        matches!(self, Subject::Fake { .. }) && moment.fake_exit().is_some()
    }
}

/// This client's side of the agent's requests: terminals it runs (the
/// fake's tools), and whether it grants permissions.
struct Client {
    terminals: Vec<(String, GroupChild)>,
    grant: bool,
}

impl Client {
    /// Answers an agent request `m`; false when it is a permission this
    /// client leaves waiting.
    fn answer(&mut self, c: &mut CodexClient, m: &Value) -> Result<bool, String> {
        let id = m["id"].clone();
        let p = &m["params"];
        let result = match m["method"].as_str().unwrap_or_default() {
            "session/request_permission" if !self.grant => return Ok(false),
            "session/request_permission" => {
                let option = p["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| o["kind"] == "allow_once")
                    .map_or(Value::Null, |o| o["optionId"].clone());
                json!({ "outcome": { "outcome": "selected", "optionId": option } })
            }
            "terminal/create" => {
                let mut cmd = Command::new(p["command"].as_str().unwrap_or_default());
                for a in p["args"].as_array().into_iter().flatten() {
                    cmd.arg(a.as_str().unwrap_or_default());
                }
                if let Some(cwd) = p["cwd"].as_str() {
                    cmd.current_dir(cwd);
                }
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                let child = GroupChild::spawn(&mut cmd).map_err(|e| format!("terminal: {e}"))?;
                let tid = format!("term-{}", self.terminals.len() + 1);
                self.terminals.push((tid.clone(), child));
                json!({ "terminalId": tid })
            }
            "terminal/wait_for_exit" => {
                let tid = p["terminalId"].as_str().unwrap_or_default();
                let code = match self.terminals.iter_mut().find(|(t, _)| t == tid) {
                    Some((_, child)) => child.wait().ok().and_then(|s| s.code()),
                    None => None,
                };
                json!({ "exitCode": code, "signal": null })
            }
            "terminal/output" => json!({ "output": "", "truncated": false }),
            _ => json!({}),
        };
        c.send(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
            .map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Reads the agent's messages, answering its requests, until `done`
    /// accepts one (returned).
    fn until(
        &mut self,
        c: &mut CodexClient,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        loop {
            let m = c.next_message(what).map_err(|e| e.to_string())?;
            if done(&m) {
                return Ok(m);
            }
            if m.get("id").is_some() && m.get("method").is_some() {
                self.answer(c, &m)?;
            }
        }
    }
}

impl Client {
    /// Answers the agent's requests until `done` holds (the real agent runs
    /// its tool without a word to the client; the fake asks for a terminal).
    fn serve_until(
        &mut self,
        c: &mut CodexClient,
        what: &str,
        done: impl Fn() -> bool,
    ) -> Result<Value, String> {
        let until = std::time::Instant::now() + WAIT;
        while !done() {
            if std::time::Instant::now() >= until {
                return Err(format!("timed out waiting for {what}"));
            }
            match c.expect_silence(Duration::from_millis(20)) {
                Ok(Some(m)) if m.get("id").is_some() && m.get("method").is_some() => {
                    self.answer(c, &m)?;
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(Value::Null)
    }
}

/// Whether `m` is the agent's first output of a turn (what the runner's
/// ACP driver takes as accepted; a `claude`-like fake's echo of the user
/// message counts too).
fn accepted(m: &Value) -> bool {
    let kind = m
        .pointer("/params/update/sessionUpdate")
        .and_then(Value::as_str);
    matches!(
        kind,
        Some("user_message_chunk" | "agent_message_chunk" | "tool_call")
    ) || m["method"] == "session/request_permission"
}

/// Plays `moment` on `subject`, kills it there, restarts it on the same
/// home and reads back what a runner would.
fn crash_at(
    subject: &Subject,
    moment: Moment,
    ws: &Path,
    ledger: &Path,
) -> Result<AfterCrash, String> {
    let mut c = subject.start(ws, Some(moment))?;
    let cwd = ws.display().to_string();
    let session = c
        .request("session/new", json!({ "cwd": cwd, "mcpServers": [] }))
        .map_err(|e| format!("session/new: {e}"))?["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let reached = play_until(&mut c, moment, &session, ledger);
    reached.or_else(|e| {
        if subject.exits_at(moment) {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    if subject.exits_at(moment) {
        let _ = c.wait_exit();
    }
    let _ = c.kill();
    let outlived = wait_until("the commands to die with it", OUTLIVED_AFTER, || {
        effect_pids(ledger).is_empty()
    })
    .is_err();
    wait_until("every command to end", WAIT, || {
        effect_pids(ledger).is_empty()
    })?;
    let effects = wire::ledger::read(ledger).map_or(0, |l| l.len());
    let mut again = subject.start(ws, None)?;
    let mut client = Client {
        terminals: Vec::new(),
        grant: true,
    };
    let (load, replay) = load(&mut again, &session, &cwd);
    let continuation = continue_turn(&mut again, &mut client, &session);
    let _ = again.kill();
    wait_until("every command to end", WAIT, || {
        effect_pids(ledger).is_empty()
    })?;
    Ok(AfterCrash {
        load,
        user_message: replay
            .iter()
            .any(|u| u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == PROMPT),
        answer: replay
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk"),
        tools: tool_statuses(&replay),
        effects,
        outlived,
        continuation,
    })
}

/// Sends the moment's prompt on `session` (unless the moment is before it)
/// and plays the turn up to `moment`.
fn play_until(
    c: &mut CodexClient,
    moment: Moment,
    session: &str,
    ledger: &Path,
) -> Result<(), String> {
    if moment == Moment::SessionCreated {
        return Ok(());
    }
    let mut client = Client {
        terminals: Vec::new(),
        grant: false,
    };
    let prompt = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": PROMPT }],
                         "_meta": { "messageId": "m-1" } });
    c.send_request("session/prompt", prompt)
        .map_err(|e| e.to_string())?;
    let permission = |m: &Value| m["method"] == "session/request_permission";
    match moment {
        Moment::PromptAccepted => client.until(c, "the prompt accepted", accepted).map(drop),
        Moment::PermissionPending => client
            .until(c, "the permission request", permission)
            .map(drop),
        _ => {
            let asked = client.until(c, "the permission request", permission)?;
            client.grant = true;
            client.answer(c, &asked)?;
            let running = || !effect_pids(ledger).is_empty();
            client
                .serve_until(c, "the command running", running)
                .map(drop)
        }
    }
}

/// `session/load` of `session`: its outcome and the updates it replayed.
fn load(c: &mut CodexClient, session: &str, cwd: &str) -> (Result<(), String>, Vec<Value>) {
    let id = match c.send_request(
        "session/load",
        json!({ "sessionId": session, "cwd": cwd, "mcpServers": [] }),
    ) {
        Ok(id) => id,
        Err(e) => return (Err(e.to_string()), Vec::new()),
    };
    let mut replay = Vec::new();
    loop {
        let Ok(m) = c.next_message("the session/load response") else {
            return (Err("no answer".to_owned()), replay);
        };
        if m["id"] == id && m.get("method").is_none() {
            let outcome = match m.get("error") {
                Some(e) => Err(format!("{}", e["code"])),
                None => Ok(()),
            };
            return (outcome, replay);
        }
        if m["method"] == "session/update" {
            replay.push(m["params"]["update"].clone());
        }
    }
}

/// A continuation prompt, played to its end: its `stopReason`, or error.
fn continue_turn(
    c: &mut CodexClient,
    client: &mut Client,
    session: &str,
) -> Result<String, String> {
    let text = format!("{} go on", wire::marker::CONTINUE_MARKER);
    let prompt = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }],
                         "_meta": { "messageId": "m-1#continuation" } });
    let id = c
        .send_request("session/prompt", prompt)
        .map_err(|e| e.to_string())?;
    let end = client.until(c, "the continuation's end", |m| {
        m["id"] == id && m.get("method").is_none()
    })?;
    match end.get("error") {
        Some(e) => Err(format!("{}", e["code"])),
        None => Ok(end["result"]["stopReason"]
            .as_str()
            .unwrap_or("?")
            .to_owned()),
    }
}

/// Each replayed tool call's last status, in order of first appearance.
fn tool_statuses(replay: &[Value]) -> Vec<String> {
    let mut calls: Vec<(String, String)> = Vec::new();
    for u in replay {
        let kind = u["sessionUpdate"].as_str().unwrap_or_default();
        if !matches!(kind, "tool_call" | "tool_call_update") {
            continue;
        }
        let id = u["toolCallId"].as_str().unwrap_or_default().to_owned();
        let status = u["status"].as_str().unwrap_or("-").to_owned();
        match calls.iter_mut().find(|(i, _)| *i == id) {
            Some((_, s)) if status != "-" => *s = status,
            Some(_) => {}
            None => calls.push((id, status)),
        }
    }
    calls.into_iter().map(|(_, s)| s).collect()
}

/// One moment played on the real agent `real` (the program `bin`), in `dir`.
pub fn real_at(
    turncut: &Path,
    real: &'static wire::profiles::Real,
    bin: &Path,
    moment: Moment,
    dir: &Path,
) -> Result<AfterCrash, String> {
    let (ws, script) = case(dir)?;
    let model = super::start_model_api(turncut, dir, &script, None)?;
    let product = Product {
        real,
        bin: bin.to_owned(),
        home: dir.join("agent-home"),
    };
    let argv = product
        .command(&model.url, "fidelity")
        .map_err(|e| format!("{e:#}"))?;
    let seen = crash_at(
        &Subject::Real(argv),
        moment,
        &ws,
        &dir.join("model/ledger.jsonl"),
    );
    model.stop();
    seen
}

/// One moment played on the fake ACP agent, played like `like`, in `dir`.
pub fn fake_at(
    turncut: &Path,
    like: &'static str,
    moment: Moment,
    dir: &Path,
) -> Result<AfterCrash, String> {
    let (ws, script) = case(dir)?;
    let state = dir.join("fake");
    let subject = Subject::Fake {
        turncut: turncut.to_owned(),
        state: state.clone(),
        script,
        like,
        answer: None,
    };
    crash_at(&subject, moment, &ws, &state.join("ledger.jsonl"))
}

/// Creates `dir/ws` and writes the moments' script into `dir`.
fn case(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).map_err(io)?;
    let script = dir.join("script.toml");
    std::fs::write(&script, MOMENT_SCRIPT).map_err(io)?;
    Ok((ws, script))
}

/// The rows of every moment `which` names of the real agent `real` (the
/// program `bin`): the crash moments, then the upstream failures (for
/// codex-acp and claude-agent-acp; `opencode acp` has none yet), each
/// played `runs` times (each distinct reading its own rows, with how often
/// it came up).
pub fn rows(
    turncut: &Path,
    real: &'static wire::profiles::Real,
    bin: &Path,
    dir: &Path,
    runs: u32,
    which: super::Moments,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    if which.crash() {
        rows = crash_rows(turncut, real, bin, dir, runs)?;
    }
    if which.upstream() && upstream::compared(real) {
        let faults = wire::upstream::UpstreamFault::ALL;
        let dir = dir.join("upstream");
        rows.extend(upstream_rows(turncut, real, bin, &dir, runs, &faults)?);
    }
    Ok(rows)
}

/// The rows of the crash moments.
fn crash_rows(
    turncut: &Path,
    real: &'static wire::profiles::Real,
    bin: &Path,
    dir: &Path,
    runs: u32,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for moment in Moment::ALL {
        let fake_dir = dir.join(format!("{moment:?}-fake"));
        let fake = fake_at(turncut, fake_like(real), moment, &fake_dir)?;
        let mut seen: Vec<(AfterCrash, u32)> = Vec::new();
        for run in 0..runs.max(1) {
            let real_seen = real_at(
                turncut,
                real,
                bin,
                moment,
                &dir.join(format!("{moment:?}-real-{run}")),
            )?;
            match seen.iter_mut().find(|(r, _)| *r == real_seen) {
                Some((_, n)) => *n += 1,
                None => seen.push((real_seen, 1)),
            }
        }
        for (seen_real, n) in seen {
            let label = match runs {
                0 | 1 => format!("{moment:?}"),
                _ => format!("{moment:?} {n}/{runs}"),
            };
            for ((name, r), (_, f)) in seen_real.fields().into_iter().zip(fake.fields()) {
                let known = known_crash(real.program, moment, name);
                rows.extend(compare(real.name, &label, vec![(name, r, f)], known));
            }
        }
    }
    Ok(rows)
}
