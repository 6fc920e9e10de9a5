//! The recovery contract of runnerd, row by row, with real processes:
//! `turncut runnerd` driving `turncut fake-provider codex`, cut with the
//! fake's `--exit`/`--hang` points, or held at a cut point over the cut
//! socket and SIGKILLed there. Each test checks the outcome, the cause, the
//! provider journal (turn starts per message id, continuations) and the
//! effect ledger (each key once per authorizing message). No fixed sleeps:
//! every wait is on an event with a deadline.
//!
//! Here the rig and a clean task; one module per concern under `runnerd/`:
//! the recovery rows (`recovery`), the ACP driver against an agent that
//! keeps ids of its own (`acp`), follow-ups (`follow_ups`), storage faults
//! and Retry (`storage`), read faults (`reads`), provider processes to find and stop
//! (`processes`), and runnerd's edges (`edges`).

mod common;

mod runnerd {
    pub mod acp;
    pub mod edges;
    pub mod follow_ups;
    pub mod processes;
    pub mod reads;
    pub mod recovery;
    pub mod storage;
}

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
    /// The profile its tasks run on.
    profile: &'static str,
}

impl Rig {
    fn new(provider_extra: &[&str]) -> Rig {
        Rig::with_script(provider_extra, None)
    }

    fn with_script(provider_extra: &[&str], script: Option<&str>) -> Rig {
        Rig::with_fake(("runner-codex", "codex"), provider_extra, script)
    }

    /// A rig whose tasks run on `runner-acpx-claude`, the fake ACP agent
    /// started with `provider_extra`.
    fn acp(provider_extra: &[&str]) -> Rig {
        Rig::with_fake(("runner-acpx-claude", "acp"), provider_extra, None)
    }

    /// A rig whose tasks run on `runner-opencode`, the fake OpenCode server
    /// behind `sh`, its stdin a pipe nothing closes: like the real `opencode
    /// serve` (measured on 1.18.33), it does not exit when the runner closes
    /// its input, only on a signal.
    fn opencode_deaf_to_stdin() -> Rig {
        let mut rig = Rig::with_fake(("runner-opencode", "opencode"), &[], None);
        let profiles = std::fs::read_to_string(rig.path("profiles.toml")).unwrap();
        let wrapped = profiles.replacen(
            "command = [",
            "command = [\"sh\", \"-c\", \"sleep 600 | exec \\\"$@\\\"\", \"sh\", ",
            1,
        );
        std::fs::write(rig.path("profiles.toml"), wrapped).unwrap();
        rig.profile = "runner-opencode";
        rig
    }

    /// A rig with `profile` served by `fake-provider <protocol>`.
    fn with_fake(
        (profile, protocol): (&'static str, &str),
        provider_extra: &[&str],
        script: Option<&str>,
    ) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let mut command: Vec<String> = vec![
            exe().display().to_string(),
            "fake-provider".into(),
            protocol.into(),
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
            "[profile.{profile}]\ndriver = \"{protocol}\"\ncommand = {}\ncredential_fifo = true\n",
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
            profile,
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
        // `TURNCUT_TEST_SEEDED_BUG=NAME cargo test -p turncut --features
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
        .create_task(task, message, "Create hello.txt", rig.profile, &rig.ws())
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
