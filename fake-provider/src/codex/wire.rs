//! The wire forms of the fake Codex app-server: request parameters as they
//! parse, and the objects it sends (threads, turns, items, token usage,
//! the approval request) in the shapes of Codex 0.171.0. Pure functions of
//! their inputs: no state, no I/O.

use serde::Deserialize;
use serde_json::{Value, json};

use super::store::{ThreadRecord, TurnRecord};

/// The version string this fake reports as its CLI version.
pub const FAKE_CLI_VERSION: &str = "0.171.0";

/// `modelContextWindow` of the token usage: what Codex 0.171.0 reports for a
/// model it has no metadata for (95% of its 272,000-token fallback).
pub const MODEL_CONTEXT_WINDOW: i64 = 258_400;

/// Checked for shape only: the fake treats every client alike, but a client
/// that sends a malformed `initialize` must hear about it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct InitializeParams {
    #[allow(dead_code)]
    client_info: ClientInfo,
}

#[derive(Deserialize)]
struct ClientInfo {
    #[allow(dead_code)]
    name: String,
    #[allow(dead_code)]
    version: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct ThreadStartParams {
    pub cwd: Option<String>,
    pub model: Option<String>,
    pub approval_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ThreadIdParams {
    pub thread_id: String,
    #[serde(default)]
    pub include_turns: bool,
    #[serde(default)]
    pub exclude_turns: bool,
    /// `thread/resume` only: the policy from now on.
    pub approval_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TurnStartParams {
    pub thread_id: String,
    pub input: Vec<Value>,
    pub client_user_message_id: Option<String>,
    /// The thread's policy for this turn and the ones after it.
    pub approval_policy: Option<String>,
}

impl TurnStartParams {
    /// The text inputs, joined by newlines.
    pub fn text(&self) -> String {
        input_text(&self.input)
    }
}

/// The text inputs of a `turn/start`'s `input`, joined by newlines.
pub(super) fn input_text(input: &[Value]) -> String {
    input
        .iter()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|i| i.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TurnInterruptParams {
    pub thread_id: String,
    pub turn_id: String,
}

/// Token counts of one model response, or of the thread so far.
#[derive(Clone, Copy, Default)]
pub(super) struct Tokens {
    pub input: i64,
    pub output: i64,
}

impl Tokens {
    fn json(self) -> Value {
        json!({
            "totalTokens": self.input + self.output,
            "inputTokens": self.input,
            "cachedInputTokens": 0,
            "cacheWriteInputTokens": 0,
            "outputTokens": self.output,
            "reasoningOutputTokens": 0,
        })
    }
}

/// The `tokenUsage` of `thread/tokenUsage/updated`.
pub(super) fn token_usage(total: Tokens, last: Tokens) -> Value {
    json!({
        "total": total.json(),
        "last": last.json(),
        "modelContextWindow": MODEL_CONTEXT_WINDOW,
    })
}

/// How much of a turn's items a turn in wire form carries (`TurnItemsView`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemsView {
    /// None (`turn/start`, `turn/started`, and `turn/completed` of a turn that
    /// did not complete).
    NotLoaded,
    /// The last agent message (`turn/completed` of a completed turn).
    Summary,
    /// Every stored item (`thread/read`, `thread/resume`).
    Full,
}

/// A turn in wire form, with the items `view` asks for, as the real server
/// sends it.
pub fn turn_json(turn: &TurnRecord, view: ItemsView) -> Value {
    let (items, view) = match view {
        ItemsView::Full => (turn.items.clone(), "full"),
        ItemsView::Summary => {
            let last = turn
                .items
                .iter()
                .rev()
                .find(|i| i["type"] == "agentMessage");
            (last.into_iter().cloned().collect(), "summary")
        }
        ItemsView::NotLoaded => (Vec::new(), "notLoaded"),
    };
    json!({
        "id": turn.id,
        "items": items,
        "itemsView": view,
        "status": turn.status,
        "error": turn.error.as_ref().map(|m| match &turn.error_info {
            // The real 0.171's `TurnError` of a turn failed upstream
            // (`wire::upstream::codex_turn_error`), read back.
            Some(info) => json!({
                "message": m, "codexErrorInfo": info, "additionalDetails": null, "misalignment": null,
            }),
            None => json!({ "message": m }),
        }),
        "startedAt": turn.started_at,
        "completedAt": turn.completed_at,
        "durationMs": turn.completed_at.map(|c| (c - turn.started_at) * 1000),
    })
}

/// A thread in wire form with its `status`, and every turn when
/// `include_turns`.
pub(super) fn thread_json(t: &ThreadRecord, status: Value, include_turns: bool) -> Value {
    let turns: Vec<Value> = if include_turns {
        t.turns
            .iter()
            .map(|turn| turn_json(turn, ItemsView::Full))
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "id": t.id,
        "sessionId": t.session_id,
        "createdAt": t.created_at,
        "updatedAt": t.updated_at,
        "cwd": t.cwd,
        "ephemeral": false,
        "model": t.model,
        "modelProvider": "openai",
        "cliVersion": FAKE_CLI_VERSION,
        "preview": t.preview,
        "projectId": null,
        "name": null,
        "path": null,
        "source": "appServer",
        "status": status,
        "turns": turns,
    })
}

/// The response of `thread/start` and `thread/resume` around `thread` (the
/// thread in wire form).
pub(super) fn session_response(t: &ThreadRecord, policy: &str, thread: Value) -> Value {
    json!({
        "approvalPolicy": policy,
        "approvalsReviewer": "user",
        "cwd": t.cwd,
        "model": t.model,
        "modelProvider": "openai",
        "reasoningEffort": null,
        "sandbox": { "type": "workspaceWrite", "writableRoots": [], "networkAccess": false },
        "serviceTier": null,
        "thread": thread,
    })
}

/// A `commandExecution` item in progress, for the command line `line`.
pub(super) fn command_item(item_id: &str, line: &str, cwd: &str) -> Value {
    json!({
        "type": "commandExecution",
        "id": item_id,
        "command": shell_command(line),
        "commandActions": [{ "type": "unknown", "command": line }],
        "cwd": cwd,
        "status": "inProgress",
        "aggregatedOutput": null,
        "exitCode": null,
        "durationMs": null,
        "processId": null,
        "source": "agent",
    })
}

/// A `fileChange` item in progress: the patch adds the file `path` (absolute)
/// with `content`.
pub(super) fn file_change_item(item_id: &str, path: &str, content: &str) -> Value {
    json!({
        "type": "fileChange",
        "id": item_id,
        "changes": [{ "path": path, "kind": { "type": "add" }, "diff": content }],
        "status": "inProgress",
    })
}

/// The params of `item/fileChange/requestApproval` for `item`.
pub(super) fn file_change_approval_params(thread_id: &str, turn_id: &str, item: &Value) -> Value {
    json!({
        "threadId": thread_id,
        "turnId": turn_id,
        "itemId": item["id"],
        "startedAtMs": crate::journal::now_ms(),
        "reason": null,
        "grantRoot": null,
    })
}

/// The `turn/diff/updated` diff of a patch that added `rel` with `content`,
/// as git shows a new file.
pub(super) fn added_file_diff(rel: &str, content: &str) -> String {
    let lines: String = content.lines().map(|l| format!("+{l}\n")).collect();
    format!(
        "diff --git a/{rel} b/{rel}\nnew file mode 100644\n--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1,{} @@\n{lines}",
        content.lines().count()
    )
}

/// The params of `item/commandExecution/requestApproval` for `item`.
pub(super) fn approval_params(thread_id: &str, turn_id: &str, item: &Value, reason: &str) -> Value {
    json!({
        "threadId": thread_id,
        "turnId": turn_id,
        "itemId": item["id"],
        "startedAtMs": crate::journal::now_ms(),
        "command": item["command"],
        "cwd": item["cwd"],
        "commandActions": item["commandActions"],
        "kind": "command",
        "environmentId": "local",
        "reason": reason,
    })
}

/// The decision in a client's answer to an approval request. An error answer
/// counts as a refusal, as in the real server.
pub(super) fn decision(msg: &Value) -> String {
    match msg.pointer("/result/decision") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) if o.keys().any(|k| k.starts_with("accept")) => "accept".into(),
        Some(Value::Object(_)) => "accept".into(),
        _ => "decline".into(),
    }
}

/// The id of a turn's `n`th model item: `<prefix>_<32 hex>`, the form of the
/// model's own ids that Codex reports (`call_…` is a tool call's `call_id`,
/// `msg_…` a message's id). The fake has no model, so the hex is a hash of the
/// turn id and `n`: deterministic, unique within a thread (turn ids are), and
/// never reused by a restarted fake.
pub fn model_item_id(prefix: &str, turn_id: &str, n: u32) -> String {
    // 128-bit FNV-1a.
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in format!("{turn_id}/{n}").bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("{prefix}_{h:032x}")
}

/// A command line as Codex reports it: its shell's `-lc` around the line
/// the model wrote (`/bin/bash -lc '<line>'`), joined like Codex's `shlex`.
pub fn shell_command(line: &str) -> String {
    crate::shell::bash_lc(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_like_shlex() {
        // Pairs from the shlex crate's own tests, plus the form Codex showed
        // for a path with a quote and a dollar sign.
        for (word, quoted) in [
            ("", "''"),
            ("foobar", "foobar"),
            ("foo bar", "'foo bar'"),
            ("\"foo bar'\"", r#""\"foo bar'\"""#),
            ("'foo bar'", r#""'foo bar'""#),
            ("\"", r#"'"'"#),
            ("\"'", r#""\"'""#),
            ("hello!world", "'hello!world'"),
            ("'hello!world", r#""'hello"'!world'"#),
            ("'hello!", r#""'hello"'!'"#),
            ("hello ^ world", "'hello ''^ world'"),
            ("hello^", "hello'^'"),
            ("!world'", r#"'!world'"'""#),
            ("{a, b}", "'{a, b}'"),
            ("\n", "'\n'"),
            ("^", "'^'"),
            ("foo^bar", "foo'^bar'"),
            ("\nx^", "'\nx''^'"),
            ("\n^x", "'\n''^x'"),
            ("a=b", "'a=b'"),
            ("caf\u{e9}", "'caf\u{e9}'"),
            ("x\\y", r#""x\\y""#),
            (
                "--ledger '/tmp/it'\\''s $x/l'",
                r#""--ledger '/tmp/it'\\''s "'$x/l'"'""#,
            ),
        ] {
            assert_eq!(crate::shell::join([word]), quoted, "{word:?}");
        }
        assert_eq!(
            shell_command("fake-provider effect --key k"),
            "/bin/bash -lc 'fake-provider effect --key k'"
        );
    }

    #[test]
    fn model_item_ids_are_deterministic_and_distinct() {
        let a = model_item_id("call", "turn-a", 1);
        assert_eq!(a, model_item_id("call", "turn-a", 1));
        assert!(a.starts_with("call_") && a.len() == 5 + 32, "{a}");
        assert!(a[5..].bytes().all(|b| b.is_ascii_hexdigit()));
        let mut all = std::collections::HashSet::new();
        for turn in ["turn-a", "turn-b"] {
            for n in 0..100 {
                assert!(all.insert(model_item_id("call", turn, n)));
            }
        }
    }
}
