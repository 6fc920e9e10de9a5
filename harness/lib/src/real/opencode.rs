//! The real `opencode serve`: its command line against the fake model API,
//! and its durable turns read back through its session API after the cell.
//! What each setting is for, as measured on 1.18.33, is in
//! `docs/real-providers.md`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wire::recorded::RecordedTurn;

use super::Product;
use crate::runner_client::RunnerClient;

/// The model name the configuration declares for the fake model API.
const FAKE_MODEL: &str = "turncut-fake-model";

/// The variable the runner names its one-shot credential FIFO in
/// (`credential_fifo = true`): OpenCode gives its tools its whole
/// environment, so the key itself must not be in it.
pub(crate) const CREDENTIAL_FIFO_ENV: &str = "TURNCUT_CREDENTIAL_FIFO";

/// Offline and private: no models.dev fetch (the model is declared), no
/// self-update, no LSP downloads, no project or `~/.claude` configuration,
/// npm offline (OpenCode installs its plugin package in the background).
const OFFLINE_ENV: [(&str, &str); 7] = [
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ("npm_config_offline", "true"),
];

/// The configuration: the built-in `openai` provider (Responses API) at the
/// fake model API, its key read from the runner's FIFO, one declared model,
/// `bash` asking for permission (the runner answers), no session titles
/// (an extra model request per session), no autoupdate or sharing.
fn config(model_url: &str) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": format!("openai/{FAKE_MODEL}"),
        "small_model": format!("openai/{FAKE_MODEL}"),
        "agent": { "title": { "disable": true } },
        "provider": { "openai": {
            "options": {
                "baseURL": format!("{model_url}/v1"),
                "apiKey": format!("{{file:{{env:{CREDENTIAL_FIFO_ENV}}}}}"),
            },
            "models": { FAKE_MODEL: { "name": "turncut fake model", "tool_call": true } },
        } },
        "permission": { "bash": "ask" },
    })
}

/// The argv of `opencode <subcommand>` (`serve`, on loopback, or `acp`)
/// with everything under the product's home (`HOME`, the XDG directories,
/// `opencode.json`).
pub(super) fn command(
    p: &Product,
    model_url: &str,
    subcommand: &[&str],
) -> anyhow::Result<Vec<String>> {
    let home = &p.home;
    let config_file = home.join("opencode.json");
    std::fs::write(&config_file, config(model_url).to_string())?;
    let dir = |rel: &str| home.join(rel).display().to_string();
    // OpenCode (a Bun executable) unpacks a native library of 5 MB into
    // its temporary directory at every start and never removes it: in the
    // product's home it goes with the home, not into the machine's /tmp.
    std::fs::create_dir_all(home.join("tmp"))?;
    let mut cmd: Vec<String> = vec!["env".into()];
    for var in wire::secret::CREDENTIAL_VARS {
        cmd.extend(["-u".to_owned(), (*var).to_owned()]);
    }
    cmd.extend([
        format!("HOME={}", home.display()),
        format!("XDG_CONFIG_HOME={}", dir(".config")),
        format!("XDG_DATA_HOME={}", dir(".local/share")),
        format!("XDG_CACHE_HOME={}", dir(".cache")),
        format!("XDG_STATE_HOME={}", dir(".local/state")),
        format!("OPENCODE_CONFIG={}", config_file.display()),
        format!("TMPDIR={}", dir("tmp")),
    ]);
    cmd.extend(OFFLINE_ENV.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.push(p.bin.display().to_string());
    cmd.extend(subcommand.iter().map(|a| (*a).to_owned()));
    if subcommand == ["serve"] {
        cmd.extend(["--hostname", "127.0.0.1", "--port", "0"].map(str::to_owned));
    }
    Ok(cmd)
}

/// A recorded turn and its user message's text.
pub(super) type TurnText = (RecordedTurn, String);

/// Every user message of every session in the product's home, as a turn
/// with its text, from a fresh `opencode serve` on it.
pub(super) fn recorded_turns(
    p: &Product,
    model_url: &str,
    cwd: &Path,
    within: Duration,
) -> Result<Vec<TurnText>, String> {
    let argv = command(p, model_url, &["serve"]).map_err(|e| format!("{e:#}"))?;
    let mut cmd = Command::new(&argv[0]);
    // In the cell's workspace: `GET /session` lists the sessions of the
    // project of the server's directory only (a server started inside a
    // git checkout lists none of the workspace's).
    cmd.args(&argv[1..])
        .current_dir(cwd)
        .env(CREDENTIAL_FIFO_ENV, "/dev/null")
        .env_remove(crate::nemesis::TAG_ENV)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let (mut server, url) = super::spawn_listening(&mut cmd, "listening on ", within)
        .map_err(|e| format!("opencode serve: {e:#}"))?;
    let read = read_all(&RunnerClient::new(&url, ""));
    let _ = server.kill();
    read
}

fn get(client: &RunnerClient, path: &str) -> Result<Value, String> {
    match client.get(path) {
        Ok((200, v)) => Ok(v),
        Ok((status, v)) => Err(format!("GET {path}: {status} {v}")),
        Err(e) => Err(format!("GET {path}: {e:#}")),
    }
}

fn read_all(client: &RunnerClient) -> Result<Vec<TurnText>, String> {
    let sessions = get(client, "/session")?;
    let mut out = Vec::new();
    for s in sessions.as_array().into_iter().flatten() {
        let id = s["id"].as_str().ok_or("a session without an id")?;
        let messages = get(client, &format!("/session/{id}/message"))?;
        let messages = messages.as_array().cloned().unwrap_or_default();
        for m in messages.iter().filter(|m| m["info"]["role"] == "user") {
            out.push(turn_of(id, m, &messages));
        }
    }
    Ok(out)
}

/// A user message as a turn, its status its last answer's
/// (`wire::stores::opencode::turn_status`, as the runner's driver reads it),
/// and its text.
fn turn_of(session: &str, user: &Value, messages: &[Value]) -> TurnText {
    let id = user["info"]["id"].as_str().unwrap_or_default().to_owned();
    let status = wire::stores::opencode::turn_status(messages, &id);
    let text = user["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|p| p["text"].as_str())
        .unwrap_or_default();
    let controller = wire::client_id::controller_id(&id);
    let authorized_by = controller
        .strip_suffix(wire::client_id::CONTINUATION)
        .unwrap_or(&controller)
        .to_owned();
    let turn = RecordedTurn {
        thread: session.to_owned(),
        turn: id.clone(),
        client_id: Some(id),
        status: status.to_owned(),
        continuation: wire::marker::is_continuation(text),
        authorized_by,
        model_requests: None,
    };
    (turn, text.to_owned())
}
