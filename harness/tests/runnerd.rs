//! The recovery contract of runnerd, row by row, with real processes:
//! `turncut runnerd` driving `turncut fake-provider codex`, cut with the
//! fake's `--exit`/`--hang` points, or held at a cut point over the cut
//! socket and SIGKILLed there. Each test checks the outcome, the cause, the
//! provider journal (turn starts per message id, continuations) and the
//! effect ledger (each key once per authorizing message). No fixed sleeps:
//! every wait is on an event with a deadline.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};
use serde_json::{Value, json};
use wire::journal::{Entry, EntryKind};
use wire::ledger::LedgerEntry;

const WAIT: Duration = Duration::from_secs(20);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// One runner with its fake provider in a temporary directory.
struct Rig {
    dir: tempfile::TempDir,
    runner: Option<RunnerProcess>,
    listener: cutpoint::Listener,
    runner_extra: Vec<String>,
    env: Vec<(String, String)>,
}

impl Rig {
    fn new(provider_extra: &[&str]) -> Rig {
        Rig::with_script(provider_extra, None)
    }

    fn with_script(provider_extra: &[&str], script: Option<&str>) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let mut command: Vec<String> = vec![
            exe().display().to_string(),
            "fake-provider".into(),
            "codex".into(),
            "--state-dir".into(),
            "{provider_dir}".into(),
            "--journal".into(),
            dir.path().join("journal.jsonl").display().to_string(),
            "--ledger".into(),
            dir.path().join("ledger.jsonl").display().to_string(),
        ];
        if let Some(script) = script {
            let path = dir.path().join("script.toml");
            std::fs::write(&path, script).unwrap();
            command.extend(["--script".into(), path.display().to_string()]);
        }
        command.extend(provider_extra.iter().map(|s| s.to_string()));
        let profiles = format!(
            "[profile.runner-codex]\ndriver = \"codex\"\ncommand = {}\ncredential_fifo = true\n",
            serde_json::to_string(&command).unwrap()
        );
        std::fs::write(dir.path().join("profiles.toml"), profiles).unwrap();
        let listener = cutpoint::Listener::bind(dir.path().join("cut.sock")).unwrap();
        Rig {
            dir,
            runner: None,
            listener,
            runner_extra: vec!["--provider-idle-timeout-ms".into(), "5000".into()],
            env: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ws(&self) -> PathBuf {
        self.path("ws")
    }

    /// Starts runnerd, armed at `arm` (cut points of the runner or, through
    /// the inherited environment, of its provider).
    fn start(&mut self, arm: Option<&str>) -> RunnerClient {
        let mut extra = vec![
            "--profiles".to_owned(),
            self.path("profiles.toml").display().to_string(),
        ];
        extra.extend(self.runner_extra.iter().cloned());
        // `TURNCUT_TEST_SEEDED_BUG=NAME cargo test -p harness --features
        // runner/seeded-bugs --test runnerd` runs every row against a runner
        // with that bug on (docs/seeded-bugs.md): a test that still passes
        // does not catch it.
        if let Some(bug) = std::env::var_os("TURNCUT_TEST_SEEDED_BUG").filter(|b| !b.is_empty()) {
            extra.extend([
                "--seeded-bug".to_owned(),
                bug.to_string_lossy().into_owned(),
            ]);
        }
        let mut cmd = RunnerCommand::via(exe()).command(&self.path("state"), &extra);
        cmd.env(cutpoint::ENV_SOCKET, self.listener.path())
            .env_remove(cutpoint::ENV_ARM)
            .env_remove("TURNCUT_PROVIDER_API_KEY");
        if let Some(arm) = arm {
            cmd.env(cutpoint::ENV_ARM, arm);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let runner = RunnerProcess::start(
            &mut cmd,
            &self.path("state"),
            &self.path("runnerd.stderr"),
            WAIT,
        )
        .unwrap();
        let client = runner.client();
        self.runner = Some(runner);
        client
    }

    fn hold(&self) -> cutpoint::HeldHit {
        self.listener
            .accept_hit(WAIT)
            .expect("the armed cut point is reached")
    }

    fn kill_runner(&mut self) {
        self.runner
            .take()
            .expect("a runner is running")
            .kill()
            .unwrap();
    }

    fn journal(&self) -> Vec<Entry> {
        wire::journal::read(&self.path("journal.jsonl")).unwrap()
    }

    fn ledger(&self) -> Vec<LedgerEntry> {
        wire::ledger::read(&self.path("ledger.jsonl")).unwrap()
    }

    /// `turn/start` requests the provider received, by client message id.
    fn turn_starts(&self, client_id: &str) -> usize {
        self.journal()
            .iter()
            .filter(|e| e.kind == EntryKind::In && e.data["method"] == "turn/start")
            .filter(|e| e.data.pointer("/params/clientUserMessageId") == Some(&json!(client_id)))
            .count()
    }

    fn count_in(&self, method: &str) -> usize {
        self.journal()
            .iter()
            .filter(|e| e.kind == EntryKind::In && e.data["method"] == method)
            .count()
    }

    /// Waits until the provider journal holds the fact `fact`.
    fn wait_fact(&self, fact: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self
            .journal()
            .iter()
            .any(|e| e.fact.as_deref() == Some(fact))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no {fact} in the provider journal"
            );
            std::thread::yield_now();
        }
    }

    /// Continuation turns the provider recorded.
    fn continuations(&self) -> usize {
        self.journal()
            .iter()
            .filter(|e| {
                e.fact.as_deref() == Some("turn.recorded") && e.data["continuation"] == true
            })
            .count()
    }

    /// Effects per (key, authorizing message): each must be 1.
    fn assert_effects_once(&self) {
        let ledger = self.ledger();
        for e in &ledger {
            let n = ledger
                .iter()
                .filter(|o| o.key == e.key && o.by == e.by)
                .count();
            assert_eq!(
                n, 1,
                "effect {} ran {n} times for {}: {ledger:?}",
                e.key, e.by
            );
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("runnerd.stderr")).unwrap_or_default()
    }
}

/// Whether `pid` is gone or a zombie (dead, waiting for its new parent to reap it).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn submit(client: &RunnerClient, rig: &Rig, task: &str, message: &str) -> String {
    let (status, body) = client
        .create_task(task, message, "Create hello.txt", "runner-codex", &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().unwrap().to_owned()
}

fn state(task: &Value) -> &str {
    task["state"].as_str().unwrap_or_default()
}

fn cause(task: &Value) -> &str {
    task.pointer("/cause/code")
        .and_then(Value::as_str)
        .unwrap_or("none")
}

fn event_kinds(client: &RunnerClient, task: &str) -> Vec<String> {
    client
        .events(task, 0)
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_clean_task_completes_with_one_turn_and_one_effect() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.ledger().len(), 1);
    assert_eq!(rig.ledger()[0].by, "m1");
    let events = client.events("t1", 0).unwrap();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "a gapless run log"
    );

    // Every message between the runner's driver and the provider, both ways,
    // conforms to the published Codex app-server schema.
    let mut session = conformance::CodexSession::new();
    let mut checked = 0;
    for entry in rig.journal() {
        let dir = match entry.kind {
            EntryKind::In => conformance::Direction::ClientToServer,
            EntryKind::Out => conformance::Direction::ServerToClient,
            EntryKind::Fact => continue,
        };
        session
            .check(dir, &entry.data)
            .unwrap_or_else(|v| panic!("{v}\nmessage: {}", entry.data));
        checked += 1;
    }
    assert!(checked > 20, "only {checked} messages");
}

#[test]
fn intent_only_and_turn_absent_starts_the_turn_once_after_a_restart() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_intent.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.turn_intent.persisted");
    rig.kill_runner();
    drop(held);
    assert_eq!(rig.turn_starts("m1"), 0);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    rig.assert_effects_once();
    assert!(event_kinds(&client, "t1").contains(&"turn.absent_at_provider".to_owned()));
}

/// The seed scenario (background: codex-cut-turn-start-retry): the provider
/// recorded `turn/start` with its user message, but the runner died before
/// persisting the acceptance (held as the `turn/start` response, its third,
/// arrived, while the provider records the user message).
#[test]
fn a_recorded_turn_never_seen_accepted_fails_closed_and_retry_works() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some(
        "runner.codex.response.received#3,codex.user_message.recorded",
    ));
    submit(&client, &rig, "t1", "m1");
    let holds = [rig.hold(), rig.hold()];
    let held = holds
        .iter()
        .find(|h| h.hit.role == "provider")
        .expect("the provider is held");
    let orphan = held.hit.pid;
    rig.kill_runner();
    // The provider is alive, blocked at its cut: an orphan of the dead runner.
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(orphan as i32), None).is_ok());

    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(holds);
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "ambiguous_turn_start");
    assert_eq!(task.pointer("/cause/recoverable"), Some(&json!(false)));
    assert_eq!(rig.turn_starts("m1"), 1, "never replayed");
    assert!(rig.ledger().is_empty(), "never adopted");

    // Old provider first: the orphan was stopped and proven gone before the
    // new provider touched the conversation.
    let events = client.events("t1", 0).unwrap();
    let first = |kind: &str, pred: &dyn Fn(&Value) -> bool| {
        events
            .iter()
            .position(|e| e["kind"] == kind && pred(e))
            .unwrap_or_else(|| panic!("no {kind} event"))
    };
    let stopped = first("provider.stopped", &|e| {
        e.pointer("/data/identity/pid") == Some(&json!(orphan))
    });
    let respawned = first("provider.spawned", &|e| {
        e.pointer("/data/pid") != Some(&json!(orphan))
    });
    assert!(
        stopped < respawned,
        "the orphan is stopped before a new provider starts"
    );
    assert!(
        dead(orphan),
        "the orphan is gone (or a zombie awaiting its reaper)"
    );

    // The fence: a follow-up is refused and launches nothing.
    let threads_before = rig.count_in("thread/start");
    let (status, body) = client.follow_up("t1", "f1", "also add a README").unwrap();
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["reason"], "prior_owner_fence_refused");
    assert!(event_kinds(&client, "t1").contains(&"prior_owner_fence_refused".to_owned()));

    // Retry: admitted after the stop proof, a fresh thread, one new turn.
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let retry_run = body["run_id"].as_str().unwrap().to_owned();
    let (again, body2) = client.retry("t1", "r1").unwrap();
    assert_eq!(
        (again, body2["run_id"].as_str()),
        (201, Some(retry_run.as_str())),
        "idempotent"
    );
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(event_kinds(&client, "t1").contains(&"stopped_conversation_verified".to_owned()));
    assert_eq!(rig.count_in("thread/start"), threads_before + 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        0,
        "the refused follow-up launched nothing"
    );
    assert_eq!(rig.turn_starts("m1"), 1);
    let runs = task["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_ne!(
        runs[0]["conversation_id"], runs[1]["conversation_id"],
        "a fresh conversation"
    );
    rig.assert_effects_once();
}

/// User messages the provider recorded for `client_id` (a turn without
/// one delivered nothing).
fn recorded_messages(rig: &Rig, client_id: &str) -> usize {
    wire::stores::codex::recorded_turns(&rig.path("state/providers/t1"))
        .iter()
        .filter(|t| t.client_id.as_deref() == Some(client_id))
        .count()
}

/// Codex writes a turn's user message after the `turn/start` response: a
/// provider that died before it (the turn `interrupted`, no items) reached no
/// model, whether or not the runner saw the acceptance, so the message is
/// sent again, once, and never continued into an empty turn.
#[test]
fn a_turn_whose_user_message_was_never_recorded_is_sent_again() {
    for point in ["codex.turn.recorded", "codex.turn_start.responded"] {
        let mut rig = Rig::new(&["--exit", point]);
        let client = rig.start(None);
        submit(&client, &rig, "t1", "m1");
        let task = client.wait_settled("t1", WAIT).unwrap();
        assert_eq!(state(&task), "completed", "{point}: {task}\n{}", rig.log());
        assert!(event_kinds(&client, "t1").contains(&"provider_exited".to_owned()));
        assert_eq!(rig.turn_starts("m1"), 2, "{point}");
        assert_eq!(recorded_messages(&rig, "m1"), 1, "{point}: delivered once");
        assert_eq!(rig.continuations(), 0, "{point}: nothing to continue");
        assert_eq!(rig.ledger().len(), 1, "{point}: the task was done");
        rig.assert_effects_once();
    }
}

/// Codex writes a thread only with its first turn: a provider lost right
/// after `thread/start` leaves none, and the run opens a fresh one.
#[test]
fn a_thread_lost_before_its_first_turn_is_opened_afresh() {
    let mut rig = Rig::new(&["--exit", "codex.thread_start.responded"]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.count_in("thread/start"), 2);
    assert!(event_kinds(&client, "t1").contains(&"conversation.lost".to_owned()));
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// One command that needs no approval.
const UNAPPROVED: &str = r#"
[[turn]]
say = ["Looking at the workspace."]
tools = [{ key = "write-hello", kind = "command", approval = false }]
final = "Created hello.txt."
"#;

/// The continuation warns the model that a command reported `aborted` may
/// have run, so the fake's model checks before running it again.
#[test]
fn an_accepted_turn_lost_with_the_runner_gets_exactly_one_continuation() {
    let mut rig = Rig::with_script(&[], Some(UNAPPROVED));
    // Hold the provider right after its effect ran, then kill the runner.
    let client = rig.start(Some("codex.effect.exited"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1, "the message is never re-sent");
    assert_eq!(rig.continuations(), 1);
    assert_eq!(
        rig.ledger().len(),
        1,
        "the continuation skipped the done effect"
    );
    rig.assert_effects_once();
    let events = client.events("t1", 0).unwrap();
    let lost = events
        .iter()
        .find(|e| e.pointer("/data/cause/code") == Some(&json!("provider_turn_lost_on_restore")))
        .expect("a turn.failed event with the recoverable cause");
    assert_eq!(lost["kind"], "turn.failed");
    assert_eq!(lost.pointer("/data/cause/recoverable"), Some(&json!(true)));
}

#[test]
fn a_turn_completed_at_the_provider_is_adopted_without_a_new_turn() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("codex.turn_completed.recorded"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    let events = client.events("t1", 0).unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "turn.finished"
                && e.pointer("/data/adopted") == Some(&json!(true)))
    );
    rig.assert_effects_once();
}

/// An approved command whose item never completed may have run: the turn
/// is closed, never continued (the real Codex would tell the model the call
/// was `aborted`), and Retry works.
#[test]
fn a_lost_turn_whose_approved_command_never_completed_is_closed() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("codex.effect.exited"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(
        cause(&task),
        "active_turn_recovery_closed",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(rig.continuations(), 0);
    assert_eq!(rig.ledger().len(), 1);
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    rig.assert_effects_once();
}

#[test]
fn a_lost_turn_with_a_pending_approval_is_closed_and_retry_works() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.approval_request.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "active_turn_recovery_closed",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(task.pointer("/cause/recoverable"), Some(&json!(false)));
    assert!(rig.ledger().is_empty());
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    rig.assert_effects_once();
}

#[test]
fn a_persisted_completion_settles_after_a_restart_without_a_new_turn() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_completed.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 0);
    assert_eq!(rig.ledger().len(), 1);
}

#[test]
fn a_cut_continuation_ends_with_continuation_exhausted() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.turn_accepted.persisted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    // The first acceptance in the new runner is the continuation's.
    let client = rig.start(Some("runner.turn_accepted.persisted"));
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let _ = client;
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "continuation_exhausted",
        "{task}\n{}",
        rig.log()
    );
    assert_eq!(rig.continuations(), 1, "never a second continuation");
    assert_eq!(rig.turn_starts("m1"), 1);
    let (status, _) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}");
}

#[test]
fn a_hung_provider_is_killed_as_unresponsive_and_the_turn_continues() {
    let mut rig = Rig::new(&["--hang", "codex.turn_started.notified"]);
    rig.runner_extra = vec!["--provider-idle-timeout-ms".into(), "300".into()];
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(event_kinds(&client, "t1").contains(&"provider_unresponsive".to_owned()));
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.continuations(), 1);
    rig.assert_effects_once();
}

#[test]
fn a_follow_up_queued_during_a_turn_survives_a_restart_and_is_consumed_once() {
    let script = r#"
[[turn]]
say = ["Working."]
tools = [{ key = "first", approval = true }]
final = "First done."

[[turn]]
say = ["Follow-up."]
tools = [{ key = "second" }]
final = "Second done."
"#;
    let mut rig = Rig::with_script(&[], Some(script));
    let client = rig.start(Some("codex.turn_started.notified"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    let (status, _) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "the same follow-up again is the same answer");
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        1,
        "the follow-up is consumed exactly once"
    );
    let keys: Vec<(String, String)> = rig.ledger().into_iter().map(|e| (e.key, e.by)).collect();
    assert!(keys.contains(&("first".into(), "m1".into())), "{keys:?}");
    assert!(keys.contains(&("second".into(), "f1".into())), "{keys:?}");
    rig.assert_effects_once();
}

#[test]
fn a_follow_up_to_a_completed_task_runs_in_the_same_conversation() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    client.wait_settled("t1", WAIT).unwrap();
    let (status, body) = client.follow_up("t1", "f1", "one more thing").unwrap();
    assert_eq!(status, 202, "{body}");
    let task = client
        .wait_task("t1", WAIT, |t| {
            t["runs"].as_array().is_some_and(|r| r.len() == 2) && state(t) == "completed"
        })
        .unwrap();
    let runs = task["runs"].as_array().unwrap();
    assert_eq!(runs[0]["conversation_id"], runs[1]["conversation_id"]);
    assert_eq!(rig.turn_starts("f1"), 1);
    assert_eq!(rig.count_in("thread/start"), 1);
}

#[test]
fn the_canary_credential_reaches_only_the_provider_environment() {
    let canary = "turncut-canary-7f3a91";
    let mut rig = Rig::new(&[]);
    rig.env
        .push(("TURNCUT_PROVIDER_API_KEY".into(), canary.into()));
    rig.env.push(("RUST_LOG".into(), "trace".into()));
    let client = rig.start(Some("codex.turn.recorded"));
    submit(&client, &rig, "t1", "m1");
    // The provider got it through its one-shot FIFO, not its environment
    // (which its tools, and theirs, can read): the variable names the FIFO,
    // which is gone once the provider has read it.
    let held = rig.hold();
    let environ = std::fs::read(format!("/proc/{}/environ", held.hit.pid)).unwrap();
    let environ = String::from_utf8_lossy(&environ).into_owned();
    assert!(
        !environ.contains(canary),
        "the key is in the provider's environment"
    );
    let fifo = environ
        .split('\0')
        .find_map(|v| v.strip_prefix("TURNCUT_PROVIDER_API_KEY="))
        .expect("the provider is told where its key is");
    assert!(fifo.contains("/credentials/"), "{fifo}");
    assert!(
        !std::path::Path::new(fifo).exists(),
        "the provider did not take its key from {fifo}"
    );
    held.resume().unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}");
    assert!(!rig.ledger().is_empty());
    assert!(
        rig.ledger().iter().all(|e| !e.saw_secret),
        "no tool saw the credential"
    );
    for file in harness::runner_client::state_files(rig.dir.path()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "the canary leaked into {}",
            file.display()
        );
    }
    let events = serde_json::to_string(&client.events("t1", 0).unwrap()).unwrap();
    assert!(!events.contains(canary));
}

#[test]
fn a_failed_write_is_storage_failed_before_any_side_effect() {
    let mut rig = Rig::new(&[]);
    rig.env
        .push(("TURNCUT_RUNNER_FAIL_WRITE".into(), "turn_intent".into()));
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(cause(&task), "storage_failed", "{task}\n{}", rig.log());
    assert_eq!(
        rig.count_in("turn/start"),
        0,
        "nothing was sent after the failed write"
    );
    assert!(rig.ledger().is_empty());
}

#[test]
fn malformed_provider_output_is_a_protocol_error_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("garbage.sh");
    std::fs::write(
        &script,
        "read l; echo '{\"id\":1,\"result\":{}}'\nread l\nread l; echo '{\"id\":2,\"result\":{\"thread\":{\"id\":\"th-1\"}}}'\nread l; echo 'this is not json'\ncat >/dev/null\n",
    )
    .unwrap();
    let mut rig = Rig::new(&[]);
    let profiles = format!(
        "[profile.runner-codex]\ndriver = \"codex\"\ncommand = [\"sh\", {:?}]\n",
        script.display().to_string()
    );
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(
        cause(&task),
        "provider_protocol_error",
        "{task}\n{}",
        rig.log()
    );
    assert!(!rig.log().contains("panicked"), "{}", rig.log());
    let (status, _) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200, "the runner keeps serving");
}

#[test]
fn the_api_is_idempotent_and_rejects_bad_input_clearly() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    let run = submit(&client, &rig, "t1", "m1");
    assert_eq!(
        submit(&client, &rig, "t1", "m1"),
        run,
        "same ids, same answer"
    );
    let (status, body) = client
        .create_task("t1", "m1", "another prompt", "runner-codex", &rig.ws())
        .unwrap();
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("id_conflict"))
    );
    let (status, body) = client.post_raw("/v1/tasks", "{not json").unwrap();
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("bad JSON"),
        "{body}"
    );
    let (status, body) = client
        .create_task("t2", "m1", "x", "no-such-profile", &rig.ws())
        .unwrap();
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("unknown_profile"))
    );
    let (status, _) = client.task("nope").unwrap();
    assert_eq!(status, 404);
    let (status, _) = client.retry("nope", "r").unwrap();
    assert_eq!(status, 404);
    let (status, _) =
        harness::runner_client::RunnerClient::new(&rig.runner.as_ref().unwrap().base, "wrong")
            .get("/v1/health")
            .unwrap();
    assert_eq!(status, 401);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed");
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(
        (status, body["block_reason"].as_str()),
        (409, Some("nothing_to_retry"))
    );
    let (status, body) = client.get("/v1/health").unwrap();
    assert_eq!(status, 200);
    assert!(body["owner_epoch"].as_i64().unwrap() >= 1);
}

#[test]
fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    client.wait_settled("t1", WAIT).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&rig.path("state")), 0o700);
    assert_eq!(mode(&rig.path("state/token")), 0o600);
    assert_eq!(mode(&rig.path("state/runner.sqlite3")), 0o600);
}

#[test]
fn a_port_in_use_exits_2_with_a_clear_message() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(exe())
        .args(["runnerd", "--state-dir"])
        .arg(dir.path().join("state"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is in use"), "{stderr}");
}

/// Live processes (zombies excluded) whose command line holds `arg`.
fn processes_with_arg(arg: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) && !dead(pid) {
            found.push(pid);
        }
    }
    found
}

/// Rewrites the rig's profile so the provider first leaves two long-lived
/// `sleep` children, one in its own process group and one in a new session
/// (as real providers do with tool shells), each tagged with `tag`.
fn provider_with_children(rig: &Rig, tag: &str) {
    let profiles = std::fs::read_to_string(rig.path("profiles.toml")).unwrap();
    let start = profiles.find("command = ").unwrap() + "command = ".len();
    let end = start + profiles[start..].find('\n').unwrap();
    let mut command: Vec<String> = serde_json::from_str(&profiles[start..end]).unwrap();
    let wrapper = format!("sleep {tag} & setsid sleep {tag} & exec \"$@\"");
    let mut wrapped = vec!["sh".into(), "-c".into(), wrapper, "sh".into()];
    wrapped.append(&mut command);
    let profiles = format!(
        "{}{}{}",
        &profiles[..start],
        serde_json::to_string(&wrapped).unwrap(),
        &profiles[end..]
    );
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
}

/// Kills what is left of the tagged children when a test ends, passed or
/// failed, so a failing run leaves no orphans on the machine.
struct Reaper(String);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in processes_with_arg(&self.0) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Waits until exactly `n` live processes have `arg` on their command line.
fn wait_count(arg: &str, n: usize) -> Vec<u32> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let found = processes_with_arg(arg);
        if found.len() == n || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::yield_now();
    }
}

fn wait_gone(arg: &str) -> Vec<u32> {
    wait_count(arg, 0)
}

#[test]
fn a_provider_spawned_before_its_identity_was_recorded_is_found_and_stopped() {
    let mut rig = Rig::new(&[]);
    let tag = format!("86400.{}", std::process::id());
    let _reaper = Reaper(tag.clone());
    provider_with_children(&rig, &tag);
    // Held after the spawn, before the identity is durable; the runner dies
    // there, so only the spawn intent's marker names the provider.
    let client = rig.start(Some("runner.provider.spawned#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let orphans = wait_count(&tag, 2);
    assert_eq!(
        orphans.len(),
        2,
        "the provider's children outlive the runner"
    );
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let left = wait_gone(&tag);
    assert!(left.is_empty(), "orphans left: {left:?}\n{}", rig.log());
    let events = client.events("t1", 0).unwrap();
    let swept = events
        .iter()
        .find(|e| e["kind"] == "provider.spawn_swept")
        .expect("the restarted runner sweeps the intent's marker");
    let killed: Vec<i64> = swept
        .pointer("/data/killed")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["pid"].as_i64().unwrap())
        .collect();
    for pid in &orphans {
        assert!(killed.contains(&i64::from(*pid)), "{pid} not in {swept}");
    }
    rig.assert_effects_once();
}

/// A cgroup-v1 freezer group: a frozen process keeps SIGKILL pending until
/// it is thawed, as a process stuck in the kernel would. Thawed and removed
/// on drop.
struct Freezer(PathBuf);

impl Freezer {
    fn new() -> Result<Freezer, String> {
        let root = Path::new("/sys/fs/cgroup/freezer");
        if !root.join("cgroup.procs").exists() {
            return Err("no cgroup-v1 freezer at /sys/fs/cgroup/freezer".into());
        }
        let dir = root.join(format!("turncut-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        Ok(Freezer(dir))
    }

    fn freeze(&self, pid: i64) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        let deadline = std::time::Instant::now() + WAIT;
        while std::fs::remove_dir(&self.0).is_err() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_lost_provider_that_cannot_be_proven_stopped_settles_needs_human() {
    let freezer = match Freezer::new() {
        Ok(f) => f,
        Err(why) => {
            common::skip(
                "freezer",
                &format!("a process that survives SIGKILL needs root and {why}"),
            );
            return;
        }
    };
    let mut rig = Rig::new(&[]);
    rig.runner_extra = vec!["--provider-idle-timeout-ms".into(), "300".into()];
    let client = rig.start(Some("runner.turn_accepted.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let events = client.events("t1", 0).unwrap();
    let spawned = events
        .iter()
        .find(|e| e["kind"] == "provider.spawned")
        .expect("the provider is recorded before the turn");
    let pid = spawned.pointer("/data/pid").unwrap().as_i64().unwrap();
    // The provider goes silent mid-turn and cannot be killed.
    freezer.freeze(pid);
    held.resume().unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "needs_human", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "cleanup_quarantined", "{task}");
    drop(freezer);
    assert!(
        wait_gone_pid(pid as u32),
        "the thawed provider dies of its pending SIGKILL"
    );
}

fn wait_gone_pid(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + WAIT;
    while !dead(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

#[test]
fn a_runner_killed_between_marking_a_turn_lost_and_continuing_it_still_continues() {
    let mut rig = Rig::new(&[]);
    // First cut: the turn is accepted, its tool has not run yet.
    let client = rig.start(Some("runner.item.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    // Second cut, during recovery: where the lost turn is marked and its
    // continuation recorded (once two writes, now one).
    rig.start(Some(
        "runner.turn_completed.persisted#1,runner.turn_intent.persisted#1",
    ));
    let held = rig.hold();
    let point = held.hit.point.clone();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    match state(&task) {
        "completed" => {
            assert_eq!(
                rig.continuations(),
                1,
                "completed without continuing its lost turn (recovery cut at {point})\n{task}"
            );
            assert_eq!(rig.ledger().len(), 1, "the lost turn's tool ran");
        }
        "failed" => assert_eq!(cause(&task), "continuation_exhausted", "{task}"),
        other => panic!("unexpected {other}: {task}"),
    }
    assert_eq!(rig.turn_starts("m1"), 1, "the message is never re-sent");
    rig.assert_effects_once();
}

#[test]
fn a_follow_up_admitted_while_the_run_settles_is_consumed() {
    let mut rig = Rig::new(&[]);
    // The runner has decided the queue is empty and stopped the provider;
    // it is held before it settles the run completed.
    let client = rig.start(Some("runner.provider_stop.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    held.resume().unwrap();
    let task = client
        .wait_task("t1", WAIT, |t| {
            t["state"] != "running" && t["state"] != "queued"
        })
        .unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(
        rig.turn_starts("f1"),
        1,
        "the accepted follow-up is answered, not stranded in a completed task\n{task}"
    );
    rig.assert_effects_once();
}

// Storage faults: the harness answers a runner's `runner.write.<write>` point
// with `fail EIO` (`fail-write`: that one write fails) or `fail ENOSPC`
// (`disk-full`: every later write of that runner process fails too, until a
// restart brings the disk back).

/// Holds the runner at the write `point` and fails it with `fault`.
fn fail_write(rig: &Rig, point: &str, fault: cutpoint::IoFault) {
    let held = rig.hold();
    assert_eq!(held.hit.point, point);
    held.fail(fault).unwrap();
}

/// Every `turn/start` the provider received, whatever its message.
fn all_turn_starts(rig: &Rig) -> usize {
    rig.count_in("turn/start")
}

/// A settled `storage_failed` task whose cause names the injected errno.
fn assert_storage_failed(rig: &Rig, task: &Value, errno_text: &str) {
    assert_eq!(state(task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(task), "storage_failed", "{task}");
    let message = task.pointer("/cause/message").and_then(Value::as_str);
    assert!(
        message.is_some_and(|m| m.contains(errno_text)),
        "the cause names the errno ({errno_text}): {task}"
    );
}

/// Retries `task` as `retry_id` and waits for it to complete.
fn retry_completes(client: &RunnerClient, rig: &Rig, task: &str, retry_id: &str) -> Value {
    let (status, body) = client.retry(task, retry_id).unwrap();
    assert_eq!(status, 201, "{body}");
    let settled = client.wait_settled(task, WAIT).unwrap();
    assert_eq!(state(&settled), "completed", "{settled}\n{}", rig.log());
    assert!(event_kinds(client, task).contains(&"stopped_conversation_verified".to_owned()));
    settled
}

#[test]
fn a_failed_turn_intent_sends_nothing_and_a_retry_answers_the_message_once() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        all_turn_starts(&rig),
        0,
        "nothing is sent after a failed intent"
    );
    assert!(rig.ledger().is_empty());

    // The Retry has nothing to re-send (no turn ever started): its run
    // answers the queued prompt, once, under the prompt's own id.
    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(all_turn_starts(&rig), 1, "the prompt is sent exactly once");
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.ledger().len(), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_turn_accepted_fails_the_run_and_a_retry_resends_the_message_once() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_accepted"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_accepted", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        all_turn_starts(&rig),
        1,
        "only the turn whose intent was durable"
    );
    assert_eq!(
        rig.count_in("turn/interrupt") + rig.count_in("item/commandExecution/requestApproval"),
        0
    );

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(
        rig.turn_starts("m1"),
        1,
        "the failed turn is never replayed"
    );
    assert_eq!(rig.turn_starts("r1"), 1, "the Retry re-sends it once");
    rig.assert_effects_once();
}

#[test]
fn a_failed_provider_identity_stops_the_unrecorded_provider_and_a_retry_completes() {
    let mut rig = Rig::new(&[]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.provider_identity"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.provider_identity");
    assert_eq!(processes_with_arg(&journal).len(), 1, "the provider exists");
    held.fail(cutpoint::IoFault::Eio).unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider whose identity could not be recorded is stopped"
    );
    assert_eq!(rig.count_in("thread/start"), 0);

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(all_turn_starts(&rig), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_completion_settle_fails_closed_and_a_retry_completes() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.run_settled#1"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.run_settled", cutpoint::IoFault::Eio);
    // The second settle (the failure) is written: only one write failed.
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(rig.turn_starts("m1"), 1);

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_follow_up_write_answers_503_and_changes_nothing() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.follow_up"));
    submit(&client, &rig, "t1", "m1");
    std::thread::scope(|s| {
        let request = s.spawn(|| client.follow_up("t1", "f1", "Also add a README").unwrap());
        fail_write(&rig, "runner.write.follow_up", cutpoint::IoFault::Eio);
        let (status, body) = request.join().unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["reason"], "storage_failed");
    });
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert!(
        status == 202,
        "the same follow-up again is accepted: {status} {body}"
    );
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("f1"), 1);
}

/// A failed write whose `storage_failed` cannot be recorded either (found
/// by `turncut explore`: `runner.write.provider_spawn_intent#1/fail-write`
/// then `runner.write.run_settled#1/fail-write`): the actor used to end,
/// leaving the task running with no one to run it until a restart. It now
/// starts over from the durable state, where nothing of the failed step is,
/// and the task completes with its message answered once.
#[test]
fn an_outcome_that_cannot_be_recorded_is_not_left_running() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some(
        "runner.write.provider_spawn_intent,runner.write.run_settled",
    ));
    submit(&client, &rig, "t1", "m1");
    fail_write(
        &rig,
        "runner.write.provider_spawn_intent",
        cutpoint::IoFault::Eio,
    );
    fail_write(&rig, "runner.write.run_settled", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// A full disk fails every write of the runner process from the failed
/// intent on: the failure itself cannot be recorded. The runner stops the
/// provider, sends nothing, keeps answering (503 for writes), and after a
/// restart with the disk back resumes the task from what is durable: a
/// turn that never had an intent is started for the first time.
#[test]
fn a_full_disk_at_turn_intent_sends_nothing_and_a_restart_resumes_the_task() {
    let mut rig = Rig::new(&[]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.turn_intent,runner.write.provider_stop"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Enospc);
    // The runner stops the provider and tries to record the stop: the disk
    // is still full, whatever the harness answers.
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.provider_stop");
    held.resume().unwrap();
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider is stopped"
    );
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(
        (status, &body["reason"]),
        (503, &json!("storage_failed")),
        "{body}"
    );
    let (status, task) = client.task("t1").unwrap();
    assert_eq!(status, 200, "reads still work: {task}");
    assert_eq!(state(&task), "running", "nothing could be recorded: {task}");
    assert_eq!(all_turn_starts(&rig), 0, "nothing is sent on a full disk");
    assert!(
        rig.log().contains("No space left on device"),
        "{}",
        rig.log()
    );

    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        0,
        "the refused follow-up was never admitted"
    );
    rig.assert_effects_once();
}

/// A full disk after the provider accepted the turn: the acceptance cannot
/// be recorded, the provider is stopped, and the restarted runner finds a
/// turn the provider recorded but it never saw accepted: it fails closed,
/// and a Retry with the disk back completes the task.
#[test]
fn a_full_disk_at_turn_accepted_fails_closed_after_a_restart_and_a_retry_completes() {
    // The provider stops once the user message is durable: a turn it could
    // finish before the runner stops it would be adopted as completed, and
    // one without its user message would be sent again.
    let mut rig = Rig::new(&["--hang", "codex.user_message.recorded"]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.turn_accepted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.turn_accepted");
    // The hang is recorded as fired before it holds the provider, so the
    // Retry's provider does not hang again.
    rig.wait_fact("fault.hang");
    held.fail(cutpoint::IoFault::Enospc).unwrap();
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider is stopped"
    );
    let (status, body) = client.retry("t1", "r0").unwrap();
    assert_eq!(status, 409, "the store still says running: {body}");

    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "ambiguous_turn_start", "{task}");
    assert_eq!(rig.turn_starts("m1"), 1, "never replayed");

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(rig.turn_starts("r1"), 1);
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// A follow-up whose turn intent failed after the first message was
/// answered: the Retry answers the follow-up once and redoes nothing that
/// completed.
#[test]
fn a_retry_after_a_failed_follow_up_intent_answers_only_the_follow_up() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent#2"));
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client
        .wait_task("t1", WAIT, |t| t["state"] == "failed")
        .unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(
        rig.turn_starts("m1"),
        1,
        "the answered prompt is not redone"
    );
    assert_eq!(rig.turn_starts("f1"), 1, "the follow-up is answered once");
    assert_eq!(all_turn_starts(&rig), 2);
    rig.assert_effects_once();
}

/// A Retry refused by a failed write changed nothing: the same Retry again
/// is admitted with one stop proof.
#[test]
fn a_retry_refused_by_a_failed_write_changed_nothing_and_can_be_repeated() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent,runner.write.retry_admitted"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    std::thread::scope(|s| {
        let request = s.spawn(|| client.retry("t1", "r1").unwrap());
        fail_write(&rig, "runner.write.retry_admitted", cutpoint::IoFault::Eio);
        let (status, body) = request.join().unwrap();
        assert_eq!(
            (status, &body["reason"]),
            (503, &json!("storage_failed")),
            "{body}"
        );
    });
    let (status, task) = client.task("t1").unwrap();
    assert_eq!((status, state(&task)), (200, "failed"), "{task}");
    retry_completes(&client, &rig, "t1", "r1");
    let proofs = event_kinds(&client, "t1")
        .iter()
        .filter(|k| *k == "stopped_conversation_verified")
        .count();
    assert_eq!(proofs, 1, "one proof for one admitted Retry");
    assert_eq!(all_turn_starts(&rig), 1);
}

#[test]
fn a_finished_wait_gives_its_connection_back() {
    // Each wait watches the task's event stream on a connection of its own;
    // one left open after the wait (a settled task's stream never speaks
    // again but for a keep-alive) costs the runner one of its bounded
    // connections: with 4 allowed, the fifth wait was answered 503.
    let mut rig = Rig::new(&[]);
    rig.runner_extra
        .extend(["--connections-max".to_owned(), "4".to_owned()]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    for i in 0..12 {
        let task = client
            .wait_settled("t1", WAIT)
            .unwrap_or_else(|e| panic!("wait {i}: {e:#}"));
        assert_eq!(state(&task), "completed", "{task}");
    }
    let (status, _) = client.task("t1").unwrap();
    assert_eq!(status, 200);
}

/// A patch (`apply_patch`, a `fileChange` item) asks for approval like a
/// command; the runner answers it with the profile's decision, and the file
/// lands. The driver used to reject every server request but the command
/// approval, so the provider heard a refusal and the patch never applied.
#[test]
fn a_patch_the_provider_asks_to_apply_is_answered_and_applied() {
    let script = r#"
[[turn]]
say = ["Adding the file."]
tools = [{ key = "add-hello", kind = "patch", path = "hello.txt" }]
final = "Added hello.txt."
"#;
    let mut rig = Rig::with_script(&[], Some(script));
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let asked = client
        .events("t1", 0)
        .unwrap()
        .into_iter()
        .filter(|e| e["kind"] == "provider_request")
        .any(|e| e.to_string().contains("item/fileChange/requestApproval"));
    assert!(asked, "no fileChange approval in the run log");
    let content = std::fs::read_to_string(rig.ws().join("hello.txt")).unwrap_or_default();
    assert_eq!(content, "written by add-hello\n", "the patch did not land");
    assert!(rig.ledger().is_empty());
}
