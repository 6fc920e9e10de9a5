//! The real `claude-agent-acp` (Zed's ACP agent around the Claude Agent
//! SDK, which runs the SDK's bundled Claude Code): its command line against
//! the fake model API's Anthropic Messages route, and its durable turns
//! read back from Claude Code's session transcripts after the cell.
//!
//! Claude Code keeps each session as a JSONL transcript,
//! `CLAUDE_CONFIG_DIR/projects/<cwd as a slug>/<session id>.jsonl`, whose
//! session id is the ACP `sessionId`: one entry per user message, assistant
//! message and tool result, appended as they happen. A user prompt is a
//! `user` entry with text (not `isMeta`, not a tool result, not the log of
//! a local command such as the `/model` the SDK sends first); its turn
//! completed when an assistant entry after it, before the next prompt,
//! ended with `stop_reason: end_turn`. That is the format of the pinned
//! version (Claude Code 2.1.83 in `@anthropic-ai/claude-agent-sdk` 0.2.83):
//! a transcript this reader cannot parse is an error (the oracles that need
//! the provider's store say `unknown`), never an empty store.

use std::path::Path;

use serde_json::Value;
use wire::recorded::RecordedTurn;

use super::Product;
use super::opencode::TurnText;

/// The argv of `claude-agent-acp` with a private `HOME` and Claude Code
/// configuration directory, its model the fake model API at `model_url`,
/// and none of Claude Code's traffic but its model requests (no updater, no
/// telemetry, no error reports), and its key kept out of its tools'
/// environment. As root, Claude Code refuses to skip its
/// permission prompts unless told it runs in a sandbox: without
/// `IS_SANDBOX=1`, `session/new` failed `-32603 Query closed before response
/// received` (Claude Code exited 1, "--dangerously-skip-permissions cannot
/// be used with root/sudo privileges"). The agent still asks the client
/// for every permission (`session/request_permission`).
pub(super) fn command(p: &Product, model_url: &str) -> Vec<String> {
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("HOME={}", p.home.join("home").display()),
        format!("CLAUDE_CONFIG_DIR={}", config_dir(&p.home).display()),
        format!("ANTHROPIC_BASE_URL={model_url}"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1".into(),
        "DISABLE_AUTOUPDATER=1".into(),
        "DISABLE_TELEMETRY=1".into(),
        "DISABLE_ERROR_REPORTING=1".into(),
        // Claude Code's own scrub of its subprocesses' environment (its
        // `Bash` tool's shells): without it the tool saw the credential
        // (`saw_secret`, the secrecy oracle failed every cell).
        "CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1".into(),
    ];
    if nix::unistd::geteuid().is_root() {
        cmd.push("IS_SANDBOX=1".into());
    }
    cmd.push(p.bin.display().to_string());
    cmd
}

/// Claude Code's configuration directory in the product's home.
fn config_dir(home: &Path) -> std::path::PathBuf {
    home.join("claude")
}

/// Every user prompt of every transcript in the product's home, as a turn
/// with its text.
pub(super) fn recorded_turns(p: &Product) -> Result<Vec<TurnText>, String> {
    let projects = config_dir(&p.home).join("projects");
    let mut out = Vec::new();
    let dirs = match std::fs::read_dir(&projects) {
        Ok(d) => d,
        // No session was ever created: nothing recorded.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(format!("{}: {e}", projects.display())),
    };
    let mut files = Vec::new();
    for dir in dirs.flatten() {
        for f in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = f.path();
            if path.extension().is_some_and(|x| x == "jsonl") {
                files.push(path);
            }
        }
    }
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        out.extend(transcript_turns(&text).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    Ok(out)
}

/// The turns of one transcript.
fn transcript_turns(transcript: &str) -> Result<Vec<TurnText>, String> {
    let mut out: Vec<TurnText> = Vec::new();
    for (i, line) in transcript.lines().enumerate() {
        // A killed Claude Code may leave its last line unfinished.
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            if i + 1 == transcript.lines().count() {
                break;
            }
            return Err(format!("line {}: not JSON", i + 1));
        };
        match entry["type"].as_str() {
            Some("user") => {
                if let Some(text) = prompt_text(&entry) {
                    out.push(turn(&entry, text)?);
                }
            }
            Some("assistant")
                if entry.pointer("/message/stop_reason") == Some(&"end_turn".into()) =>
            {
                if let Some((t, _)) = out.last_mut() {
                    t.status = "completed".to_owned();
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The text of a user entry that is a prompt: not `isMeta`, no tool
/// result, not a local command's log (`<command-name>`,
/// `<local-command-stdout>`).
fn prompt_text(entry: &Value) -> Option<String> {
    if entry["isMeta"] == true {
        return None;
    }
    let text = match &entry["message"]["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            if blocks.iter().any(|b| b["type"] == "tool_result") {
                return None;
            }
            let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
            texts.join("\n")
        }
        _ => return None,
    };
    let local = text.starts_with("<command-name>") || text.starts_with("<local-command-");
    (!local).then_some(text)
}

/// A prompt entry as a turn, `interrupted` until an answer ends it.
fn turn(entry: &Value, text: String) -> Result<TurnText, String> {
    let field = |k: &str| {
        entry[k]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a user entry without {k}"))
    };
    let id = field("uuid")?;
    Ok((
        RecordedTurn {
            thread: field("sessionId")?,
            turn: id.clone(),
            client_id: Some(id.clone()),
            status: "interrupted".to_owned(),
            continuation: wire::marker::is_continuation(&text),
            authorized_by: id,
            model_requests: None,
        },
        text,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> String {
        format!("{v}\n")
    }

    fn user(uuid: &str, content: Value) -> String {
        line(
            json!({ "type": "user", "uuid": uuid, "sessionId": "s1", "message": { "role": "user", "content": content } }),
        )
    }

    fn assistant(stop: Option<&str>) -> String {
        line(json!({ "type": "assistant", "uuid": "a", "sessionId": "s1",
                     "message": { "role": "assistant", "content": [], "stop_reason": stop } }))
    }

    /// The shape of a measured transcript (claude-agent-acp 0.23.1): the
    /// SDK's `/model` logged as user entries, the prompt, a tool round
    /// trip, the answer; then a prompt cut before its answer.
    #[test]
    fn prompts_are_turns_completed_by_an_end_turn_answer() {
        let mut t = String::from("{\"type\":\"queue-operation\"}\n");
        t += &line(
            json!({ "type": "user", "isMeta": true, "uuid": "x", "sessionId": "s1",
                          "message": { "role": "user", "content": "<local-command-caveat>…" } }),
        );
        t += &user("y", json!("<command-name>/model</command-name>"));
        t += &user(
            "u1",
            json!([{ "type": "text", "text": "Create hello.txt" }]),
        );
        t += &assistant(Some("tool_use"));
        t += &user(
            "r",
            json!([{ "type": "tool_result", "tool_use_id": "t", "content": "ok" }]),
        );
        t += &assistant(Some("end_turn"));
        t += &user("u2", json!("[turncut:continue] go on"));
        t += &assistant(None);
        t += "{\"type\":\"assist";
        let turns = transcript_turns(&t).unwrap();
        let seen: Vec<(&str, &str, &str, bool)> = turns
            .iter()
            .map(|(t, text)| {
                (
                    t.turn.as_str(),
                    text.as_str(),
                    t.status.as_str(),
                    t.continuation,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("u1", "Create hello.txt", "completed", false),
                ("u2", "[turncut:continue] go on", "interrupted", true),
            ]
        );
        assert!(
            transcript_turns("nope\n{}\n").is_err(),
            "a broken line before the last"
        );
    }
}
