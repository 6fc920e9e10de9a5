//! The real `codex app-server`: its command line against the fake model
//! API, and its durable turns read back through `thread/list` and
//! `thread/read {includeTurns}` after the cell. `codex-acp` (Codex's core
//! behind an ACP agent) takes the same configuration.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wire::recorded::RecordedTurn;

use super::Product;
use crate::codex_client::CodexClient;

/// The argv of `codex app-server` with a private `CODEX_HOME` and `HOME`,
/// a local Responses provider at `model_url`, a model name without built-in
/// metadata (so Codex offers plain function tools such as `exec_command`),
/// approvals on request and a workspace-write sandbox that may also write
/// the cell's directory (the fake model asks for `require_escalated` on a
/// tool that needs approval, so Codex asks the runner), or, for a script
/// with `patches`, a read-only sandbox (a patch in the workspace asks for
/// approval only there; such a script has no command that needs none), and
/// tool shells that get a core environment without the
/// credential, tagged with `tag`.
pub(super) fn command(p: &Product, model_url: &str, tag: &str, patches: bool) -> Vec<String> {
    argv(p, &["app-server"], model_url, tag, patches)
}

/// The argv of `codex-acp` (Zed's ACP agent around Codex's core): the same
/// configuration as `codex app-server`'s ([`command`]), as `-c` overrides
/// it takes too.
pub(super) fn acp_command(p: &Product, model_url: &str, tag: &str, patches: bool) -> Vec<String> {
    let mut cmd = argv(p, &[], model_url, tag, patches);
    // Its sandbox runs every command that needs no approval under
    // bubblewrap, found on `PATH` or next to the Codex executable; the npm
    // package ships none (`@openai/codex` does), and without one each such
    // command exits 101 ("bubblewrap is unavailable").
    if let Ok(Some(dir)) = bwrap_dir() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let paths = std::iter::once(dir).chain(std::env::split_paths(&path));
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.insert(1, format!("PATH={}", joined.to_string_lossy()));
        }
    }
    // codex-acp 0.16.0's core snapshots the login shell's environment to
    // `CODEX_HOME/shell_snapshots/*.sh` and sources it in every command:
    // the provider key was in the snapshot on disk and in the tools'
    // environment (the secrecy oracle failed every cell), whatever
    // `shell_environment_policy` says.
    cmd.extend(["-c".to_owned(), "features.shell_snapshot=false".to_owned()]);
    cmd
}

/// Where codex-acp's sandbox finds `bwrap`: `None` when one is on `PATH`,
/// else the directory of the one `@openai/codex` bundles under
/// [`super::npm_prefix`] (`vendor/<target>/codex-resources/bwrap` of its
/// platform package); or why there is none.
pub(super) fn bwrap_dir() -> Result<Option<PathBuf>, String> {
    if super::on_path("bwrap").is_some() {
        return Ok(None);
    }
    let scope = super::npm_prefix().join("node_modules/@openai");
    let platforms = std::fs::read_dir(&scope).into_iter().flatten().flatten();
    let bundled = platforms
        .filter(|e| e.file_name().to_string_lossy().starts_with("codex-"))
        .flat_map(|e| {
            std::fs::read_dir(e.path().join("vendor"))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|target| target.path().join("codex-resources"))
        .find(|dir| dir.join("bwrap").is_file());
    bundled.map(Some).ok_or_else(|| {
        format!(
            "codex-acp's sandbox needs bubblewrap: no bwrap on PATH nor one bundled by @openai/codex under {}",
            scope.display()
        )
    })
}

/// `p`'s program with `args`, then Codex's configuration as `-c` overrides.
fn argv(p: &Product, args: &[&str], model_url: &str, tag: &str, patches: bool) -> Vec<String> {
    let provider = format!(
        "model_providers.fake={{name=\"fake\",base_url=\"{model_url}/v1\",wire_api=\"responses\",env_key=\"OPENAI_API_KEY\",request_max_retries=0,stream_max_retries=0}}"
    );
    // A private HOME too: codex runs commands with `bash -lc`, and a login
    // shell under the machine's HOME runs its profile.
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("CODEX_HOME={}", p.home.display()),
        format!("HOME={}", p.home.join("home").display()),
        p.bin.display().to_string(),
    ];
    cmd.extend(args.iter().map(|a| (*a).to_owned()));
    let tag = format!(
        "shell_environment_policy.set={{{}={}}}",
        crate::nemesis::TAG_ENV,
        serde_json::to_string(tag).unwrap_or_default()
    );
    // The cell's directory holds the effect ledger the fake tools append
    // to: a command that needs no approval runs in the sandbox and must
    // still land its effect (read-only, every such command failed and the
    // model gave up on it: 1 effect of 3 in a clean multi-tool turn).
    let cell = p.home.parent().unwrap_or(&p.home);
    let writable = format!(
        "sandbox_workspace_write.writable_roots=[{}]",
        serde_json::to_string(&cell.display().to_string()).unwrap_or_default()
    );
    for config in [
        "model_provider=\"fake\"",
        &provider,
        "model=\"turncut-fake-model\"",
        "approval_policy=\"on-request\"",
        if patches {
            "sandbox_mode=\"read-only\""
        } else {
            "sandbox_mode=\"workspace-write\""
        },
        &writable,
        // Codex hands its whole environment, provider key included, to the
        // commands it runs unless told otherwise: without `*KEY*`,
        // `*SECRET*` and `*TOKEN*` variables the credential stays out of
        // tool shells. The rest is inherited, the runner's spawn marker
        // among it: a `core` environment drops the marker, and a command
        // in a session of its own then outlives every stop (measured: 1 of
        // 228 single-task cells left one behind).
        "shell_environment_policy.inherit=\"all\"",
        "shell_environment_policy.ignore_default_excludes=false",
        &tag,
    ] {
        cmd.extend(["-c".to_owned(), config.to_owned()]);
    }
    cmd
}

/// Every turn `codex-acp` recorded in its home, with its user message's
/// text: Codex's rollouts (`CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`,
/// one per thread, whose id is the ACP `sessionId`), read as Codex writes
/// them at the pinned version (codex-acp 0.16.0): a turn starts with
/// `event_msg` `task_started {turn_id}`, its prompt is the next
/// `user_message`, and it completed with a `task_complete` of that
/// `turn_id`. codex-acp embeds Codex's core but no `codex app-server` to
/// read them through, so the files are read; a line that is not JSON (but
/// a last one cut by a kill) is an error, never an empty store.
pub(super) fn rollout_turns(p: &Product) -> Result<Vec<super::opencode::TurnText>, String> {
    let mut files = Vec::new();
    let mut dirs = vec![p.home.join("sessions")];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "jsonl") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        out.extend(rollout(&text).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    Ok(out)
}

/// The turns of one rollout.
fn rollout(text: &str) -> Result<Vec<super::opencode::TurnText>, String> {
    let lines = text.lines().count();
    let mut thread = String::new();
    let mut out: Vec<super::opencode::TurnText> = Vec::new();
    let mut open: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            if i + 1 == lines {
                break;
            }
            return Err(format!("line {}: not JSON", i + 1));
        };
        let p = &entry["payload"];
        match (entry["type"].as_str(), p["type"].as_str()) {
            (Some("session_meta"), _) => thread = p["id"].as_str().unwrap_or_default().to_owned(),
            (Some("event_msg"), Some("task_started")) => {
                open = p["turn_id"].as_str().map(str::to_owned);
            }
            (Some("event_msg"), Some("user_message")) => {
                let Some(turn) = open.take() else { continue };
                let text = p["message"].as_str().unwrap_or_default().to_owned();
                out.push((
                    RecordedTurn {
                        thread: thread.clone(),
                        turn: turn.clone(),
                        client_id: Some(turn.clone()),
                        status: "interrupted".to_owned(),
                        continuation: wire::marker::is_continuation(&text),
                        authorized_by: turn,
                        model_requests: None,
                    },
                    text,
                ));
            }
            (Some("event_msg"), Some("task_complete")) => {
                let done = p["turn_id"].as_str();
                if let Some((t, _)) = out.iter_mut().find(|(t, _)| Some(t.turn.as_str()) == done) {
                    t.status = "completed".to_owned();
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Every turn of every thread in the product's home, from a fresh
/// `codex app-server` on it.
pub(super) fn recorded_turns(
    p: &Product,
    model_url: &str,
    cwd: &Path,
    within: Duration,
) -> Result<Vec<RecordedTurn>, String> {
    let argv = command(p, model_url, "reader", false);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(cwd)
        .env_remove(crate::nemesis::TAG_ENV)
        .stderr(Stdio::null());
    let mut client = CodexClient::spawn(&mut cmd).map_err(|e| format!("codex app-server: {e}"))?;
    client.timeout = within;
    let read = read_all(&mut client);
    let _ = client.kill();
    read
}

fn read_all(client: &mut CodexClient) -> Result<Vec<RecordedTurn>, String> {
    client
        .initialize()
        .map_err(|e| format!("initialize: {e}"))?;
    let list = client
        .request("thread/list", json!({ "limit": 100 }))
        .map_err(|e| format!("thread/list: {e}"))?;
    let mut out = Vec::new();
    for thread in list["data"].as_array().into_iter().flatten() {
        let Some(id) = thread["id"].as_str() else {
            return Err(format!("thread/list: a thread without an id: {thread}"));
        };
        let read = client
            .request(
                "thread/read",
                json!({ "threadId": id, "includeTurns": true }),
            )
            .map_err(|e| format!("thread/read {id}: {e}"))?;
        for turn in read
            .pointer("/thread/turns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.push(recorded(id, turn));
        }
    }
    Ok(out)
}

/// A wire turn as the oracles see a recorded turn: its user message's
/// `clientId` (the runner's message id, `<id>#continuation` for a
/// continuation), whether its text is a continuation, and its status.
fn recorded(thread: &str, turn: &Value) -> RecordedTurn {
    let user = turn["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["type"] == "userMessage");
    let client_id = user.and_then(|u| u["clientId"].as_str()).map(str::to_owned);
    let text = user
        .and_then(|u| u["content"].as_array())
        .and_then(|c| c.iter().find_map(|part| part["text"].as_str()))
        .unwrap_or_default();
    let continuation = wire::marker::is_continuation(text);
    let authorized_by = client_id
        .as_deref()
        .map(|c| c.strip_suffix(wire::client_id::CONTINUATION).unwrap_or(c))
        .unwrap_or_default()
        .to_owned();
    RecordedTurn {
        thread: thread.to_owned(),
        turn: turn["id"].as_str().unwrap_or_default().to_owned(),
        client_id,
        status: turn["status"].as_str().unwrap_or("unknown").to_owned(),
        continuation,
        authorized_by,
        model_requests: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of a measured rollout (codex-acp 0.16.0): a completed
    /// turn, then one cut before its end; a last line cut by the kill.
    #[test]
    fn a_rollout_reads_as_its_turns() {
        let lines = [
            r#"{"type":"session_meta","payload":{"id":"th1","cwd":"/ws"}}"#,
            r#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}"#,
            r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[]}}"#,
            r#"{"type":"event_msg","payload":{"type":"user_message","message":"Create hello.txt"}}"#,
            r#"{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t1"}}"#,
            r#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"t2"}}"#,
            r#"{"type":"event_msg","payload":{"type":"user_message","message":"[turncut:continue] go"}}"#,
            r#"{"type":"event_msg","payl"#,
        ];
        let turns = rollout(&lines.join("\n")).unwrap();
        let seen: Vec<(&str, &str, &str, &str, bool)> = turns
            .iter()
            .map(|(t, text)| {
                let c = t.continuation;
                (
                    t.thread.as_str(),
                    t.turn.as_str(),
                    text.as_str(),
                    t.status.as_str(),
                    c,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("th1", "t1", "Create hello.txt", "completed", false),
                ("th1", "t2", "[turncut:continue] go", "interrupted", true),
            ]
        );
        assert!(rollout("{\n{}").is_err());
    }
}
