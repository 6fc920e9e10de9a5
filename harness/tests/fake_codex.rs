//! End-to-end tests of `fake-provider codex` as a real child process, driven
//! through `turncut fake-provider` (the multi-call path the harness uses).
//!
//! Every wait has a deadline; the only timed window is the hang test, which
//! waits for a message that must not come.

use std::path::Path;
use std::time::Duration;

use harness::codex_client::{ClientError, CodexClient, Dir};
use harness::demo::FakeCodex;
use serde_json::{Value, json};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn fake(dir: &Path) -> FakeCodex {
    FakeCodex::via(exe(), &dir.join("state"))
}

fn cwd(dir: &Path) -> String {
    dir.display().to_string()
}

fn facts<'a>(journal: &'a [wire::journal::Entry], name: &str) -> Vec<&'a Value> {
    journal
        .iter()
        .filter(|e| e.fact.as_deref() == Some(name))
        .map(|e| &e.data)
        .collect()
}

/// Validates every message of a transcript against the published Codex schema.
fn assert_conformant(client: &CodexClient) {
    assert!(
        client.unparsable.is_empty(),
        "non-JSON lines: {:?}",
        client.unparsable
    );
    let mut session = conformance::CodexSession::new();
    for (dir, msg) in &client.transcript {
        let direction = match dir {
            Dir::Sent => conformance::Direction::ClientToServer,
            Dir::Received => conformance::Direction::ServerToClient,
        };
        if let Err(v) = session.check(direction, msg) {
            panic!("message does not conform to the Codex app-server schema:\n{v}\nmessage: {msg}");
        }
    }
}

#[test]
fn full_turn_with_approval_conforms_to_the_schema_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake.start(&[]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let outcome = client
        .run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept")
        .unwrap();
    assert_eq!(outcome.status, "completed");
    assert_eq!(outcome.approvals, 1);
    assert_eq!(
        outcome.agent_messages,
        vec!["Looking at the workspace.", "Created hello.txt."]
    );
    let read = client
        .request(
            "thread/read",
            json!({ "threadId": thread, "includeTurns": true }),
        )
        .unwrap();
    let items = read
        .pointer("/thread/turns/0/items")
        .unwrap()
        .as_array()
        .unwrap();
    let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "userMessage",
            "agentMessage",
            "commandExecution",
            "agentMessage"
        ]
    );
    assert_eq!(items[0]["clientId"], "m-1");
    assert_eq!(items[2]["status"], "completed");

    // Model items carry model-style ids; the command is reported as Codex
    // reports it, around the line the model wrote.
    assert!(items[1]["id"].as_str().unwrap().starts_with("msg_"));
    let call = items[2]["id"].as_str().unwrap();
    assert!(call.starts_with("call_"), "{call}");
    let line = items[2].pointer("/commandActions/0/command").unwrap();
    assert_eq!(
        items[2]["command"],
        fake_provider::codex::shell_command(line.as_str().unwrap())
    );
    assert!(
        items[2]["command"]
            .as_str()
            .unwrap()
            .starts_with("/bin/bash -lc '")
    );

    // The notifications come in the real order (harness/tests/real_codex.rs
    // compares them with the real server's).
    let methods: Vec<&str> = client
        .transcript
        .iter()
        .filter(|(d, _)| *d == Dir::Received)
        .filter_map(|(_, m)| m.get("method").and_then(Value::as_str))
        .collect();
    let expected = [
        "thread/started",
        "thread/status/changed",
        "turn/started",
        "item/started",
        "item/completed",
        "item/started",
        "item/agentMessage/delta",
        "item/completed",
        "thread/status/changed",
        "item/started",
        "item/commandExecution/requestApproval",
        "serverRequest/resolved",
        "thread/status/changed",
        "item/commandExecution/outputDelta",
        "item/completed",
        "thread/tokenUsage/updated",
        "item/started",
        "item/agentMessage/delta",
        "item/completed",
        "thread/tokenUsage/updated",
        "thread/status/changed",
        "turn/completed",
    ];
    assert_eq!(methods, expected);
    let statuses: Vec<&Value> = client
        .transcript
        .iter()
        .filter(|(_, m)| m["method"] == "thread/status/changed")
        .map(|(_, m)| &m["params"]["status"])
        .collect();
    assert_eq!(
        statuses,
        [
            &json!({ "type": "active", "activeFlags": [] }),
            &json!({ "type": "active", "activeFlags": ["waitingOnApproval"] }),
            &json!({ "type": "active", "activeFlags": [] }),
            &json!({ "type": "idle" }),
        ]
    );
    assert_conformant(&client);
    client.close().unwrap();

    let ledger = wire::ledger::read(&fake.ledger()).unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].key, "write-hello");
    assert_eq!(ledger[0].by, "m-1");
    assert_eq!(ledger[0].conversation.as_deref(), Some(thread.as_str()));
}

#[test]
fn every_exit_point_on_the_turn_path_leaves_exactly_what_it_implies() {
    let dir = tempfile::tempdir().unwrap();
    let points = harness::demo::discover(exe(), dir.path()).unwrap();
    assert!(points.len() > 20, "too few boundaries: {points:?}");
    for name in [
        "codex.turn_start.received",
        "codex.turn.recorded",
        "codex.turn_start.responded",
        "codex.effect.exited",
        "codex.turn_completed.recorded",
    ] {
        assert!(
            points.iter().any(|a| a.point == name),
            "no {name} in {points:?}"
        );
    }
    let rows = harness::demo::sweep(exe(), dir.path(), &points).unwrap();
    assert_eq!(rows.len(), points.len());
    for row in &rows {
        assert_eq!(row.observed, row.expected, "at {}", row.point);
        assert!(row.journal_agrees, "journal disagrees at {}", row.point);
    }
    // The boundaries around the record are where the contract is decided.
    let status = |p: &str| rows.iter().find(|r| r.point == p).unwrap().status.clone();
    assert_eq!(status("codex.turn_start.received#1"), "absent");
    assert_eq!(status("codex.turn.recorded#1"), "interrupted");
    assert_eq!(status("codex.turn_completed.recorded#1"), "completed");
}

#[test]
fn a_replayed_client_message_id_is_visible_in_the_journal_and_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake.start(&[]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    for _ in 0..2 {
        let o = client
            .run_turn(&thread, "Create hello.txt", Some("m-dup"), |_| "accept")
            .unwrap();
        assert_eq!(o.status, "completed");
    }
    client.close().unwrap();
    let journal = wire::journal::read(&fake.journal()).unwrap();
    let starts = journal
        .iter()
        .filter(|e| e.kind == wire::journal::EntryKind::In)
        .filter(|e| e.data["method"] == "turn/start")
        .filter(|e| e.data.pointer("/params/clientUserMessageId") == Some(&json!("m-dup")))
        .count();
    assert_eq!(starts, 2);
    let recorded = facts(&journal, "turn.recorded");
    assert_eq!(recorded.len(), 2);
    assert!(recorded.iter().all(|r| r["client_id"] == "m-dup"));
    // The naive model re-ran the effect: the ledger shows the replay.
    let ledger = wire::ledger::read(&fake.ledger()).unwrap();
    assert_eq!(
        ledger
            .iter()
            .filter(|e| e.key == "write-hello" && e.by == "m-dup")
            .count(),
        2
    );
}

/// Cuts the built-in turn after its approved effect ran (the command item
/// never completed), restarts the fake and continues with `text`; returns the
/// continuation's outcome, the ledger and the journal.
fn continue_after_effect(
    dir: &Path,
    text: &str,
) -> (
    harness::codex_client::TurnOutcome,
    Vec<wire::ledger::LedgerEntry>,
    Vec<wire::journal::Entry>,
) {
    let fake = fake(dir);
    let mut client = fake
        .start(&["--exit".to_owned(), "codex.effect.exited".to_owned()])
        .unwrap();
    let thread = client.thread_start(&cwd(dir)).unwrap();
    let err = client
        .run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept")
        .unwrap_err();
    assert!(matches!(err, ClientError::Closed { .. }), "{err}");
    client.wait_exit().unwrap();

    let mut client = fake.start(&[]).unwrap();
    let resumed = client
        .request("thread/resume", json!({ "threadId": thread }))
        .unwrap();
    assert_eq!(
        resumed.pointer("/thread/turns/0/status"),
        Some(&json!("interrupted"))
    );
    // As the real server, the interrupted turn carries no error.
    assert_eq!(resumed.pointer("/thread/turns/0/error"), Some(&Value::Null));
    let o = client
        .run_turn(&thread, text, Some("m-1#cont"), |_| "accept")
        .unwrap();
    assert_eq!(o.status, "completed");
    assert_conformant(&client);
    client.close().unwrap();
    let ledger = wire::ledger::read(&fake.ledger()).unwrap();
    let journal = wire::journal::read(&fake.journal()).unwrap();
    let recorded = facts(&journal, "turn.recorded");
    assert_eq!(recorded.len(), 2);
    assert_eq!(recorded[1]["continuation"], true);
    assert_eq!(recorded[1]["authorized_by"], "m-1");
    // Two process generations wrote the journal.
    let generations: std::collections::HashSet<&str> =
        journal.iter().map(|e| e.generation.as_str()).collect();
    assert_eq!(generations.len(), 2);
    (o, ledger, journal)
}

#[test]
fn a_continuation_runs_an_aborted_call_again_as_the_real_codex_model_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{} continue the interrupted turn",
        fake_provider::codex::CONTINUE_MARKER
    );
    let (o, ledger, journal) = continue_after_effect(dir.path(), &text);
    assert_eq!(o.approvals, 1, "the aborted command is asked for again");
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    let aborted = facts(&journal, "call.aborted");
    assert_eq!(aborted.len(), 1);
    assert_eq!(aborted[0]["action"], "run again");
}

#[test]
fn a_continuation_told_an_aborted_call_may_have_run_checks_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{} continue {} a command reported aborted may have run",
        fake_provider::codex::CONTINUE_MARKER,
        fake_provider::codex::CHECK_ABORTED_MARKER
    );
    let (o, ledger, journal) = continue_after_effect(dir.path(), &text);
    assert_eq!(
        o.approvals, 0,
        "the done effect must not be asked for again"
    );
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    let aborted = facts(&journal, "call.aborted");
    assert_eq!(aborted.len(), 1);
    assert_eq!(aborted[0]["action"], "already in ledger");
}

#[test]
fn decline_goes_on_and_cancel_interrupts() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake.start(&[]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let o = client
        .run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "decline")
        .unwrap();
    assert_eq!(o.status, "completed");
    assert_eq!(o.agent_messages.len(), 2);
    let o = client
        .run_turn(&thread, "Create hello.txt", Some("m-2"), |_| "cancel")
        .unwrap();
    assert_eq!(o.status, "interrupted");
    let read = client
        .request(
            "thread/read",
            json!({ "threadId": thread, "includeTurns": true }),
        )
        .unwrap();
    let turns = read.pointer("/thread/turns").unwrap().as_array().unwrap();
    // The declined command was announced, but as in the real server it is
    // not part of the turn's history.
    let declined: Vec<&Value> = client
        .transcript
        .iter()
        .filter(|(_, m)| m["method"] == "item/completed")
        .map(|(_, m)| &m["params"]["item"])
        .filter(|i| i["type"] == "commandExecution")
        .collect();
    assert_eq!(declined.len(), 2);
    assert!(declined.iter().all(|i| i["status"] == "declined"));
    let kinds = |turn: &Value| -> Vec<String> {
        turn["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        kinds(&turns[0]),
        ["userMessage", "agentMessage", "agentMessage"]
    );
    assert_eq!(kinds(&turns[1]), ["userMessage", "agentMessage"]);
    assert_eq!(turns[1]["status"], "interrupted");
    assert_conformant(&client);
    client.close().unwrap();
    assert!(wire::ledger::read(&fake.ledger()).unwrap().is_empty());
}

#[test]
fn turn_interrupt_ends_a_turn_waiting_for_approval() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake.start(&[]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let started = client
        .request(
            "turn/start",
            json!({ "threadId": thread, "input": [{ "type": "text", "text": "go", "text_elements": [] }] }),
        )
        .unwrap();
    let turn_id = started.pointer("/turn/id").unwrap().clone();
    client
        .wait_for("the approval request", |m| {
            m["method"] == "item/commandExecution/requestApproval"
        })
        .unwrap();
    client
        .request(
            "turn/interrupt",
            json!({ "threadId": thread, "turnId": turn_id }),
        )
        .unwrap();
    let done = client
        .wait_for("turn/completed", |m| m["method"] == "turn/completed")
        .unwrap();
    assert_eq!(
        done.pointer("/params/turn/status"),
        Some(&json!("interrupted"))
    );
    // As the real server: the waiting request is dropped, not resolved, and
    // the command item never completes.
    let after: Vec<&str> = client
        .transcript
        .iter()
        .skip_while(|(_, m)| m["method"] != "item/commandExecution/requestApproval")
        .filter(|(d, _)| *d == Dir::Received)
        .filter_map(|(_, m)| m["method"].as_str())
        .collect();
    assert_eq!(
        after,
        [
            "item/commandExecution/requestApproval",
            "thread/tokenUsage/updated",
            "thread/status/changed",
            "turn/completed"
        ]
    );
    assert_conformant(&client);
    client.close().unwrap();
}

#[test]
fn protocol_errors_match_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = CodexClient::spawn(&mut fake.command(&[])).unwrap();
    let err = client.request("thread/start", json!({})).unwrap_err();
    assert!(
        matches!(&err, ClientError::Rpc { code: -32600, message, .. } if message == "Not initialized"),
        "{err}"
    );
    client.initialize().unwrap();
    let err = client.request("thread/fly", json!({})).unwrap_err();
    assert!(
        matches!(err, ClientError::Rpc { code: -32601, .. }),
        "{err}"
    );
    let err = client
        .request("thread/read", json!({ "threadId": "no-such-thread" }))
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Rpc { code: -32600, .. }),
        "{err}"
    );
    let err = client
        .request(
            "initialize",
            json!({ "clientInfo": { "name": "x", "version": "1" } }),
        )
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Rpc { code: -32600, .. }),
        "{err}"
    );
    // The requests above are deliberately outside the spec, so only the
    // server's side is checked: each answer is a well-formed JSON-RPC error.
    let schema = conformance::codex();
    for (dir, msg) in &client.transcript {
        if *dir == Dir::Received && msg.get("error").is_some() {
            schema
                .validate_as("#/definitions/JSONRPCError", msg)
                .unwrap_or_else(|e| panic!("{msg}: {e:?}"));
        }
    }
    client.close().unwrap();
}

#[test]
fn malformed_input_gets_an_error_and_the_fake_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake.start(&[]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let oversized = vec![b'x'; fake_provider::codex::LINE_BYTES_MAX + 10];
    let bad_lines: Vec<(&[u8], i64)> = vec![
        (b"this is not json", -32700),
        (b"{\"id\": 1, \"method\": ", -32700),
        (b"[1, 2, 3]", -32600),
        (
            b"{\"id\": {\"nested\": true}, \"method\": \"thread/read\"}",
            -32600,
        ),
        (b"{\"jsonrpc\": \"2.0\"}", -32600),
        (&oversized, -32600),
    ];
    for (line, code) in bad_lines {
        client.send_raw(line).unwrap();
        let err = client
            .wait_for("an error for a malformed line", |m| {
                m.get("error").is_some()
            })
            .unwrap();
        assert_eq!(
            err["id"],
            Value::Null,
            "for {:?}",
            String::from_utf8_lossy(&line[..line.len().min(40)])
        );
        assert_eq!(err["error"]["code"], code);
    }
    // Well-formed JSON-RPC with the wrong types gets an error for its id.
    for params in [
        json!({ "threadId": 5, "input": [] }),
        json!({ "threadId": thread, "input": "not a list" }),
        json!({ "threadId": thread }),
    ] {
        let err = client.request("turn/start", params).unwrap_err();
        assert!(
            matches!(err, ClientError::Rpc { code: -32602, .. }),
            "{err}"
        );
    }
    let o = client
        .run_turn(&thread, "still serving", Some("m-ok"), |_| "accept")
        .unwrap();
    assert_eq!(o.status, "completed");
    client.close().unwrap();
}

#[test]
fn an_armed_answer_at_the_model_point_fails_the_turn_as_codex_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let answer = "codex.model.requested#1=rate-limit".to_owned();
    let mut client = fake.start(&["--answer".to_owned(), answer]).unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let outcome = client
        .run_turn(&thread, "Create hello.txt", Some("m-1"), |_| "accept")
        .unwrap();
    assert_eq!(outcome.status, "failed");
    assert_eq!(outcome.approvals, 0);
    let expected = wire::upstream::codex_turn_error(wire::upstream::UpstreamFault::RateLimit);
    let errors: Vec<&Value> = client
        .transcript
        .iter()
        .filter(|(d, m)| *d == Dir::Received && m["method"] == "error")
        .map(|(_, m)| &m["params"])
        .collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["error"], expected);
    assert_eq!(errors[0]["willRetry"], false);
    assert_conformant(&client);
    // The next turn asks the model again: the answer fired once.
    let outcome = client
        .run_turn(&thread, "Create hello.txt", Some("m-2"), |_| "accept")
        .unwrap();
    assert_eq!(outcome.status, "completed");
    client.close().unwrap();
    let journal = wire::journal::read(&fake.journal()).unwrap();
    let answered = facts(&journal, "fault.answer");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["point"], "codex.model.requested");
    assert_eq!(answered[0]["answer"], "rate-limit");
    assert_eq!(answered[0]["thread"], json!(thread));
    // And the directory it runs in (a runner starts a task's provider in
    // that task's workspace).
    assert!(answered[0]["cwd"].is_string(), "{:?}", answered[0]);
    assert_eq!(wire::ledger::read(&fake.ledger()).unwrap().len(), 1);
}

#[test]
fn a_hang_point_stops_answering_but_keeps_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut client = fake
        .start(&[
            "--hang".to_owned(),
            "codex.turn_started.notified".to_owned(),
        ])
        .unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    client
        .request(
            "turn/start",
            json!({ "threadId": thread, "input": [{ "type": "text", "text": "go", "text_elements": [] }] }),
        )
        .unwrap();
    client
        .wait_for("turn/started", |m| m["method"] == "turn/started")
        .unwrap();
    client.take_queued();
    // Nothing more may come, not even an answer to a new request.
    client
        .send_request("thread/read", json!({ "threadId": thread }))
        .unwrap();
    let extra = client.expect_silence(Duration::from_millis(300)).unwrap();
    assert!(extra.is_none(), "a hung fake sent {extra:?}");
    let pid = nix::unistd::Pid::from_raw(client.pid() as i32);
    assert!(
        nix::sys::signal::kill(pid, None).is_ok(),
        "the hung fake must stay alive"
    );
    let status = client.kill().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9));
    let journal = wire::journal::read(&fake.journal()).unwrap();
    assert_eq!(facts(&journal, "fault.hang").len(), 1);
}

#[test]
fn concurrent_effect_writers_never_tear_or_lose_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let writers: Vec<_> = (0..8)
        .map(|i| {
            std::process::Command::new(exe())
                .args(["fake-provider", "effect", "--ledger"])
                .arg(&ledger)
                .args(["--key", &format!("k{i}"), "--by", "m", "--repeat", "1000"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut w in writers {
        assert!(w.wait().unwrap().success());
    }
    let entries = wire::ledger::read(&ledger).expect("every line parses");
    assert_eq!(entries.len(), 8000);
    for i in 0..8 {
        let key = format!("k{i}");
        assert_eq!(
            entries.iter().filter(|e| e.key == key).count(),
            1000,
            "{key}"
        );
    }
}

#[test]
fn the_effect_reports_a_credential_in_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(exe());
        cmd.args(["fake-provider", "effect", "--ledger"])
            .arg(&ledger)
            .args(["--key", "k", "--by", "m"])
            .env_remove("TURNCUT_PROVIDER_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .stdout(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        assert!(cmd.status().unwrap().success());
    };
    run(&[]);
    run(&[("SOME_VAR", "turncut-canary-1234")]);
    run(&[("OPENAI_API_KEY", "sk-anything")]);
    let saw: Vec<bool> = wire::ledger::read(&ledger)
        .unwrap()
        .iter()
        .map(|e| e.saw_secret)
        .collect();
    assert_eq!(saw, [false, true, true]);
}

#[test]
fn the_fake_never_hands_its_credential_to_a_tool() {
    let dir = tempfile::tempdir().unwrap();
    let fake = fake(dir.path());
    let mut cmd = fake.command(&[]);
    cmd.env("TURNCUT_PROVIDER_API_KEY", "turncut-canary-fake-codex");
    let mut client = CodexClient::spawn(&mut cmd).unwrap();
    client.initialize().unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    client
        .run_turn(&thread, "go", Some("m-1"), |_| "accept")
        .unwrap();
    client.close().unwrap();
    let ledger = wire::ledger::read(&fake.ledger()).unwrap();
    assert_eq!(ledger.len(), 1);
    assert!(!ledger[0].saw_secret);
}

#[test]
fn a_script_file_drives_the_model_and_bad_scripts_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.toml");
    std::fs::write(
        &script,
        r#"
[[turn]]
say = ["one", "two"]
tools = [{ key = "a" }, { key = "b", approval = true }, { key = "c" }]
final = "three tools"

[[turn]]
say = ["follow-up"]
final = "ok"
"#,
    )
    .unwrap();
    let fake = fake(dir.path());
    let mut client = fake
        .start(&["--script".to_owned(), script.display().to_string()])
        .unwrap();
    let thread = client.thread_start(&cwd(dir.path())).unwrap();
    let o = client
        .run_turn(&thread, "go", Some("m-1"), |_| "accept")
        .unwrap();
    assert_eq!(o.approvals, 1);
    assert_eq!(o.agent_messages, ["one", "two", "three tools"]);
    let o = client
        .run_turn(&thread, "more", Some("m-2"), |_| "accept")
        .unwrap();
    assert_eq!(o.agent_messages, ["follow-up", "ok"]);
    assert_conformant(&client);
    client.close().unwrap();
    let keys: Vec<String> = wire::ledger::read(&fake.ledger())
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["a", "b", "c"]);

    std::fs::write(&script, "[[turn]]\nsay = \"not a list\"\n").unwrap();
    let out = fake
        .command(&["--script".to_owned(), script.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("script.toml: 2:7:"), "{stderr}");
}
