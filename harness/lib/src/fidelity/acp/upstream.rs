//! The upstream-failure moments of the ACP differential: for each
//! `wire::upstream::UpstreamFault`, a real ACP agent whose fake model API
//! fails the turn's first model request with that fault (a status fault
//! answers the agent's route's request point, `model.messages.received#1`
//! for claude-agent-acp, `model.responses.received#1` for codex-acp; a
//! stream fault breaks the stream after its first event,
//! `model.message_start.sent#1` or `model.response_created.sent#1`),
//! against `fake-provider acp` failing at its own model point
//! `acp.model.requested#1` with the same fault. Both are armed from the
//! command line (`--answer POINT#N=NAME`), with no harness listening.
//!
//! The same client drives both: `initialize`, `session/new`, then
//! `session/prompt` played to its answer (a permission granted, the fake's
//! terminals run), then the end of the process as a done client ends it
//! (stdin closed, a grace, then its group killed), and a fresh process on
//! the same home asked what a recovering runner asks: `session/load`.
//! Compared: the prompt's answer (its `stopReason`, or the JSON-RPC error's
//! code, message with the model API's URL left out, and `data`), what the
//! agent sent before it (the user message echoed, its text, its tool
//! calls), the effects in the ledger, how many model requests the agent
//! made (the real one's: its model API's journal; the fake's: its
//! `model.requested` facts), and what `session/load` replays of the turn.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wire::journal::Entry;
use wire::profiles::{Program, Real};
use wire::upstream::UpstreamFault;

use super::{Client, PROMPT, Subject, WAIT, case, load, tool_statuses};
use crate::codex_client::{CodexClient, Dir};
use crate::fidelity::{
    Fields, ModelRoute, Row, effect_pids, fake_requests, model_api_requests, sorted, text,
    wait_until, without_urls,
};
use crate::real::Product;

/// How long the prompt may take to be answered: Claude Code retries an
/// expired credential ten times over about three minutes first.
const PROMPT_WAIT: Duration = Duration::from_secs(300);

/// How long a done client lets the agent end by itself once its stdin is
/// closed, before its group is killed: runnerd's default exit grace
/// (`--provider-exit-grace-ms`), in which Claude Code writes the end of its
/// turn (it writes its transcript on a timer after answering).
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Whether the real agent `real` has upstream moments: the two agents the
/// seed platform drives (`opencode acp` has none yet).
pub fn compared(real: &Real) -> bool {
    matches!(real.program, Program::CodexAcp | Program::ClaudeAgentAcp)
}

/// What a client saw of a prompt whose model failed, and what a fresh
/// process on the same home replayed.
#[derive(Clone, Debug)]
pub struct AfterFailure {
    /// The `session/prompt` answer: its result, or its error (URLs
    /// replaced).
    answer: Result<Value, Value>,
    /// The session updates received before the answer, in order.
    live: Vec<Value>,
    /// Effects in the ledger once every command ended.
    effects: usize,
    /// The model requests the agent made for the prompt.
    model_requests: usize,
    /// `session/load` succeeded, or its error code.
    load: Result<(), String>,
    /// The updates `session/load` replayed.
    replay: Vec<Value>,
}

impl AfterFailure {
    /// The compared fields, as text.
    fn fields(&self) -> Fields {
        let error = self.answer.as_ref().err().map_or(Value::Null, sorted);
        let data_keys = match error["data"].as_object() {
            Some(o) => o.keys().cloned().collect::<Vec<_>>().join(", "),
            None => error["data"].to_string(),
        };
        vec![
            (
                "session/prompt",
                match &self.answer {
                    Ok(result) => text(&result["stopReason"]),
                    Err(e) => format!("error {}", e["code"]),
                },
            ),
            ("error.message", text(&error["message"])),
            ("error.data keys", data_keys),
            ("error.data", error["data"].to_string()),
            ("user message echoed", echoed(&self.live).to_string()),
            ("agent text", agent_text(&self.live)),
            ("tool calls", tool_statuses(&self.live).join(", ")),
            ("effects in ledger", self.effects.to_string()),
            ("model requests", self.model_requests.to_string()),
            (
                "session/load",
                match &self.load {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => format!("error: {e}"),
                },
            ),
            ("user message replayed", echoed(&self.replay).to_string()),
            ("text replayed", agent_text(&self.replay)),
            (
                "tool calls replayed",
                tool_statuses(&self.replay).join(", "),
            ),
        ]
    }
}

/// Whether `updates` hold the prompt's user message (by its text).
fn echoed(updates: &[Value]) -> bool {
    updates
        .iter()
        .any(|u| u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == PROMPT)
}

/// The agent's text in `updates`, its chunks joined.
fn agent_text(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

/// Where a side keeps what the comparison reads.
struct Paths<'a> {
    /// The workspace the agent runs in.
    ws: &'a Path,
    /// The effect ledger.
    ledger: &'a Path,
    /// The journal its model requests are counted in.
    journal: &'a Path,
    /// Counts them there.
    count: fn(&[Entry]) -> usize,
}

/// Plays the prompt on `subject` to its answer, ends the process as a done
/// client does, restarts it and reads back what a runner would.
fn fail_turn(subject: &Subject, at: &Paths<'_>) -> Result<AfterFailure, String> {
    let mut c = subject.start(at.ws, None)?;
    let cwd = at.ws.display().to_string();
    let session = c
        .request("session/new", json!({ "cwd": cwd, "mcpServers": [] }))
        .map_err(|e| format!("session/new: {e}"))?["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut client = Client {
        terminals: Vec::new(),
        grant: true,
    };
    let prompt = json!({ "sessionId": session, "prompt": [{ "type": "text", "text": PROMPT }],
                         "_meta": { "messageId": "m-1" } });
    c.timeout = PROMPT_WAIT;
    let id = c
        .send_request("session/prompt", prompt)
        .map_err(|e| e.to_string())?;
    let end = client.until(&mut c, "the prompt's answer", |m| {
        m["id"] == id && m.get("method").is_none()
    })?;
    let model_requests = wire::journal::read(at.journal).map_or(0, |j| (at.count)(&j));
    let answer = match end.get("error") {
        Some(e) => Err(without_urls(e)),
        None => Ok(end["result"].clone()),
    };
    let live = updates(&c);
    c.timeout = WAIT;
    wait_until("every command to end", WAIT, || {
        effect_pids(at.ledger).is_empty()
    })?;
    drop(client);
    c.close_within(EXIT_GRACE);
    let effects = wire::ledger::read(at.ledger).map_or(0, |l| l.len());
    let mut again = subject.start(at.ws, None)?;
    let (load, replay) = load(&mut again, &session, &cwd);
    let _ = again.kill();
    Ok(AfterFailure {
        answer,
        live,
        effects,
        model_requests,
        load,
        replay,
    })
}

/// The `session/update`s `c` received, in order.
fn updates(c: &CodexClient) -> Vec<Value> {
    c.transcript
        .iter()
        .filter(|(dir, m)| *dir == Dir::Received && m["method"] == "session/update")
        .map(|(_, m)| m["params"]["update"].clone())
        .collect()
}

/// The fake model API's route `real` asks its model on.
fn route(real: &Real) -> ModelRoute {
    match real.program {
        Program::ClaudeAgentAcp => ModelRoute::Messages,
        _ => ModelRoute::Responses,
    }
}

/// The `--like` of the fake compared with `real` at an upstream failure:
/// `codex` for codex-acp (its error form), else as at a crash.
fn fake_like(real: &Real) -> &'static str {
    match real.program {
        Program::CodexAcp => "codex",
        _ => super::fake_like(real),
    }
}

/// The fake ACP agent's reading of `fault`, played like `real`, in `dir`.
pub fn fake_upstream(
    turncut: &Path,
    real: &Real,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let (ws, script) = case(dir)?;
    let state = dir.join("fake");
    let point = wire::upstream::PROVIDER_MODEL_POINTS[1];
    let subject = Subject::Fake {
        turncut: turncut.to_owned(),
        state: state.clone(),
        script,
        like: fake_like(real),
        answer: Some(format!("{point}#1={}", fault.as_str())),
    };
    let at = Paths {
        ws: &ws,
        ledger: &state.join("ledger.jsonl"),
        journal: &state.join("journal.jsonl"),
        count: fake_requests,
    };
    fail_turn(&subject, &at)
}

/// The real agent `real`'s (the program `bin`) reading of `fault`, in `dir`.
pub fn real_upstream(
    turncut: &Path,
    real: &'static Real,
    bin: &Path,
    fault: UpstreamFault,
    dir: &Path,
) -> Result<AfterFailure, String> {
    let (ws, script) = case(dir)?;
    let model =
        crate::fidelity::start_failing_model_api(turncut, dir, &script, route(real), fault)?;
    let product = Product {
        real,
        bin: bin.to_owned(),
        home: dir.join("agent-home"),
    };
    let argv = product
        .command(&model.url, "fidelity")
        .map_err(|e| format!("{e:#}"))?;
    let at = Paths {
        ws: &ws,
        ledger: &dir.join("model/ledger.jsonl"),
        journal: &dir.join("model/journal.jsonl"),
        count: model_api_requests,
    };
    let seen = fail_turn(&Subject::Real(argv), &at);
    model.stop();
    seen
}

/// Why claude-agent-acp and the fake differ on the live echo.
const UNECHOED: &str = "claude-agent-acp 0.23.1 echoes no prompt live (it replays it on \
    session/load); the fake `--like claude`, the `runner-acpx-claude` profile's agent, echoes it \
    with the client's message id, its acceptance signal (runnerd accepts an unechoed turn at its \
    first output)";

/// Why codex-acp's text differs from the fake's by a warning.
const NO_METADATA: &str = "codex-acp first sends Codex's warning that the fake model API's \
    model has no metadata (an artefact of the offline model's name); the fake has no model name";

/// Codex's warning about a model it has no metadata for, as codex-acp
/// sends it (text).
const METADATA_WARNING: &str = "Model metadata for `";

/// Whether `real` and `fake` are codex-acp's `error.data` of a reset
/// stream read its two ways ([`crate::fidelity::reset_read_early`]), the
/// same but for that.
fn reset_data_read_early(real: &str, fake: &str) -> bool {
    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
    let (real, fake) = (parse(real), parse(fake));
    let message = |v: &Value| v["message"].as_str().unwrap_or_default().to_owned();
    real["codex_error_info"] == fake["codex_error_info"]
        && crate::fidelity::reset_read_early(&message(&real), &message(&fake))
}

/// Why `field` reads `real` on the real agent and `fake` on the fake, where
/// that is a listed variant (`docs/real-providers.md`).
fn known(product: &Real, field: &str, real: &str, fake: &str) -> Option<&'static str> {
    match (product.program, field) {
        (Program::ClaudeAgentAcp, "user message echoed") if real == "false" && fake == "true" => {
            Some(UNECHOED)
        }
        (Program::CodexAcp, "error.data") if reset_data_read_early(real, fake) => {
            Some(crate::fidelity::RESET_EARLY)
        }
        (Program::CodexAcp, "agent text") => real
            .strip_suffix(fake)
            .filter(|w| w.starts_with(METADATA_WARNING) && w.contains(" not found. "))
            .map(|_| NO_METADATA),
        _ => None,
    }
}

/// The rows of each of `faults` for the real agent `real` (the program
/// `bin`), played `runs` times at each (each distinct reading its own rows,
/// with how often it came up).
pub fn upstream_rows(
    turncut: &Path,
    real: &'static Real,
    bin: &Path,
    dir: &Path,
    runs: u32,
    faults: &[UpstreamFault],
) -> Result<Vec<Row>, String> {
    crate::fidelity::upstream_fault_rows(
        real.name,
        dir,
        runs,
        faults,
        |fault, case| Ok(fake_upstream(turncut, real, fault, case)?.fields()),
        |fault, case| Ok(real_upstream(turncut, real, bin, fault, case)?.fields()),
        |field, r, f| known(real, field, r, f),
    )
}
