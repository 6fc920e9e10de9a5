//! The recovery contract for the ACP (`runner-acpx-claude`) and OpenCode
//! (`runner-opencode`) profiles, with real processes: `turncut runnerd`
//! driving `turncut fake-provider acp|opencode`, held at a cut point over the
//! cut socket and SIGKILLed there. Among them, the flow of the ACPX/OpenCode
//! restart-continuation fix (../shared/background): a runner restarted during
//! an active turn with a follow-up queued continues once in the same
//! conversation, consumes the follow-up and completes with no failure code.
//! No fixed sleeps: every wait is on an event with a deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::evidence::Evidence;
use harness::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};
use serde_json::{Value, json};
use wire::ledger::LedgerEntry;

const WAIT: Duration = Duration::from_secs(20);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

const TWO_TURNS: &str = r#"
[[turn]]
say = ["Working."]
tools = [{ key = "first", approval = true }]
final = "First done."

[[turn]]
say = ["Follow-up."]
tools = [{ key = "second" }]
final = "Second done."
"#;

/// One runner with one profile's fake provider in a temporary directory.
struct Rig {
    dir: tempfile::TempDir,
    profile: &'static str,
    runner: Option<RunnerProcess>,
    listener: cutpoint::Listener,
    env: Vec<(String, String)>,
}

impl Rig {
    fn new(profile: &'static str, script: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let script_path = dir.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        harness::runner_client::write_fake_profile(exe(), profile, dir.path(), &script_path)
            .unwrap();
        let listener = cutpoint::Listener::bind(dir.path().join("cut.sock")).unwrap();
        Rig {
            dir,
            profile,
            runner: None,
            listener,
            env: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn start(&mut self, arm: Option<&str>) -> RunnerClient {
        let extra = vec![
            "--profiles".to_owned(),
            self.path("profiles.toml").display().to_string(),
            "--provider-idle-timeout-ms".to_owned(),
            "5000".to_owned(),
        ];
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

    fn submit(&self, client: &RunnerClient, task: &str, message: &str) {
        let ws = self.path("ws");
        let (status, body) = client
            .create_task(task, message, "Create hello.txt", self.profile, &ws)
            .unwrap();
        assert_eq!(status, 201, "{body}");
    }

    fn hold(&self) -> cutpoint::HeldHit {
        self.listener
            .accept_hit(WAIT)
            .expect("the armed cut point is reached")
    }

    fn kill_runner(&mut self) {
        self.runner.take().expect("a runner").kill().unwrap();
    }

    /// The journal and store as evidence, for protocol-neutral reading.
    fn evidence(&self) -> Evidence {
        Evidence {
            journal: wire::journal::read(&self.path("journal.jsonl")).unwrap(),
            provider_turns: {
                let (turns, problems) =
                    harness::evidence::read_provider_turns(&self.path("state/providers"));
                assert!(problems.is_empty(), "unreadable store: {problems:?}");
                turns
            },
            ..Evidence::default()
        }
    }

    /// Turn starts the provider received for a controller message id.
    fn turn_starts(&self, id: &str) -> usize {
        let ev = self.evidence();
        ev.turn_starts()
            .iter()
            .filter(|s| s.client_id.as_deref() == Some(id))
            .count()
    }

    fn continuations(&self) -> usize {
        self.evidence()
            .provider_turns
            .iter()
            .filter(|t| t.continuation)
            .count()
    }

    fn ledger(&self) -> Vec<LedgerEntry> {
        wire::ledger::read(&self.path("ledger.jsonl")).unwrap_or_default()
    }

    fn assert_effects_once(&self) {
        let ledger = self.ledger();
        for e in &ledger {
            let n = ledger
                .iter()
                .filter(|o| o.key == e.key && o.by == e.by)
                .count();
            assert_eq!(n, 1, "effect {} ran {n} times: {ledger:?}", e.key);
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("runnerd.stderr")).unwrap_or_default()
    }
}

fn state(task: &Value) -> &str {
    task["state"].as_str().unwrap_or_default()
}

/// The background document's flow up to its end: a turn accepted, a
/// follow-up queued while it runs, the runner SIGKILLed there and restarted;
/// the task must settle `completed`. Returns the rig, the restarted runner's
/// client and the settled task.
fn restart_with_a_follow_up_queued(profile: &'static str) -> (Rig, RunnerClient, Value) {
    let mut rig = Rig::new(profile, TWO_TURNS);
    let client = rig.start(Some("runner.turn_accepted.persisted#1"));
    rig.submit(&client, "t1", "m1");
    let held = rig.hold();
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    (rig, client, task)
}

/// The background document's flow: restart during an active turn with a
/// follow-up queued.
fn restart_during_an_active_turn_with_a_follow_up(profile: &'static str) {
    let (rig, client, task) = restart_with_a_follow_up_queued(profile);
    assert!(task["cause"].is_null(), "no failure code: {task}");
    for run in task["runs"].as_array().unwrap() {
        assert_eq!(run["status"], "completed", "no failed run: {task}");
    }
    assert_eq!(task["runs"].as_array().unwrap().len(), 1, "{task}");
    assert_eq!(rig.turn_starts("m1"), 1, "the message is never re-sent");
    assert_eq!(rig.turn_starts("f1"), 1, "the follow-up is consumed once");
    assert_eq!(rig.continuations(), 1, "exactly one continuation");
    // The continuation ran in the same conversation.
    let threads: std::collections::BTreeSet<String> = rig
        .evidence()
        .provider_turns
        .iter()
        .map(|t| t.thread.clone())
        .collect();
    assert_eq!(threads.len(), 1, "one conversation: {threads:?}");
    let events = client.events("t1", 0).unwrap();
    let lost = events
        .iter()
        .find(|e| e.pointer("/data/cause/code") == Some(&json!("provider_turn_lost_on_restore")))
        .expect("the lost turn is recorded with the recoverable cause");
    assert_eq!(lost.pointer("/data/cause/recoverable"), Some(&json!(true)));
    let keys: Vec<(String, String)> = rig
        .ledger()
        .into_iter()
        .map(|e| (e.key, harness::evidence::controller_id(&e.by)))
        .collect();
    assert!(keys.contains(&("first".into(), "m1".into())), "{keys:?}");
    assert!(keys.contains(&("second".into(), "f1".into())), "{keys:?}");
    rig.assert_effects_once();
}

#[test]
fn acpx_restart_during_an_active_turn_continues_once_and_consumes_the_follow_up() {
    restart_during_an_active_turn_with_a_follow_up("runner-acpx-claude");
}

#[test]
fn opencode_restart_during_an_active_turn_continues_once_and_consumes_the_follow_up() {
    restart_during_an_active_turn_with_a_follow_up("runner-opencode");
}

/// ACP client-side tools: a runner killed after starting a tool command but
/// before persisting its outcome leaves the call `uncertain`; it is never
/// executed again, and calls of the restored provider are namespaced.
#[test]
fn an_acp_tool_cut_before_its_outcome_is_uncertain_and_never_rerun() {
    let script = r#"
[[turn]]
say = ["Two steps."]
tools = [{ key = "one" }, { key = "two" }]
final = "Both done."
"#;
    let mut rig = Rig::new("runner-acpx-claude", script);
    // The second tool's command was started; its outcome is not durable.
    let client = rig.start(Some("runner.tool.spawned#2"));
    rig.submit(&client, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let events = client.events("t1", 0).unwrap();
    let uncertain: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_outcome_uncertain")
        .collect();
    assert_eq!(uncertain.len(), 1, "{events:#?}");
    let executing: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "tool.executing")
        .map(|e| e.pointer("/data/key").unwrap().as_str().unwrap().to_owned())
        .collect();
    let unique: std::collections::BTreeSet<&String> = executing.iter().collect();
    assert_eq!(
        unique.len(),
        executing.len(),
        "no key executed twice: {executing:?}"
    );
    // The one persisted outcome (tool one) survives; its key is not reused.
    let outcomes = events
        .iter()
        .filter(|e| e["kind"] == "tool.outcome")
        .count();
    assert!(outcomes >= 1, "{events:#?}");
    // Calls after the restore carry the provider process's namespace.
    let restored: Vec<&String> = executing.iter().skip(2).collect();
    assert!(
        restored
            .iter()
            .all(|k| k.starts_with('r') && k.contains(':')),
        "{executing:?}"
    );
    rig.assert_effects_once();
    assert_eq!(rig.turn_starts("m1"), 1);
}

/// The credential reaches the ACP provider (through its one-shot FIFO), never a tool the
/// runner runs for it, never a state file.
#[test]
fn acp_tools_run_by_the_runner_never_see_the_credential() {
    let canary = "turncut-canary-4b1d";
    let mut rig = Rig::new("runner-acpx-claude", TWO_TURNS);
    rig.env
        .push(("TURNCUT_PROVIDER_API_KEY".into(), canary.into()));
    let client = rig.start(None);
    rig.submit(&client, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let ledger = rig.ledger();
    assert!(!ledger.is_empty());
    assert!(ledger.iter().all(|e| !e.saw_secret), "{ledger:?}");
    for file in harness::runner_client::state_files(rig.dir.path()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "the canary leaked into {}",
            file.display()
        );
    }
}

/// Requests the fake model API received (`POST /v1/responses` bodies).
fn model_requests(rig: &Rig) -> Vec<Value> {
    wire::journal::read(&rig.path("journal.jsonl"))
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == wire::journal::EntryKind::In && e.data["path"] == "/v1/responses")
        .map(|e| e.data["body"].clone())
        .collect()
}

fn events_of<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["kind"] == kind).collect()
}

#[test]
fn native_turn_runs_tools_in_the_runner_with_a_scrubbed_environment() {
    let canary = "turncut-canary-9e2c";
    let mut rig = Rig::new("runner-native-openai", TWO_TURNS);
    rig.env
        .push(("TURNCUT_PROVIDER_API_KEY".into(), canary.into()));
    let client = rig.start(None);
    rig.submit(&client, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let ledger = rig.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert!(ledger.iter().all(|e| !e.saw_secret), "{ledger:?}");
    let events = client.events("t1", 0).unwrap();
    // Model output persisted before the tool ran, the outcome before the
    // model was asked again.
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .filter(|k| k.starts_with("model.") || k.starts_with("tool."))
        .collect();
    assert_eq!(
        kinds,
        [
            "model.output",
            "tool.executing",
            "tool.outcome",
            "model.output"
        ],
        "{events:#?}"
    );
    for file in harness::runner_client::state_files(rig.dir.path()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "the canary leaked into {}",
            file.display()
        );
    }
}

/// A turn with two tool calls cut after the second ran and before its outcome
/// was persisted: the first call's persisted outcome survives, the second is
/// `uncertain`, neither runs again, and the model is told.
#[test]
fn native_multi_tool_turn_recovers_partially_without_rerunning_anything() {
    let script = r#"
[[turn]]
say = ["Two steps."]
tools = [{ key = "one" }, { key = "two" }]
final = "Both done."
"#;
    let mut rig = Rig::new("runner-native-openai", script);
    let client = rig.start(Some("runner.tool.executed#2"));
    rig.submit(&client, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(task["cause"].is_null(), "{task}");
    let events = client.events("t1", 0).unwrap();
    let executing = events_of(&events, "tool.executing");
    let outcomes = events_of(&events, "tool.outcome");
    let uncertain = events_of(&events, "tool_outcome_uncertain");
    assert_eq!(executing.len(), 2, "neither call runs again: {events:#?}");
    assert_eq!(outcomes.len(), 1, "only the first outcome was persisted");
    assert_eq!(uncertain.len(), 1);
    let b = executing[1]["data"]["key"].clone();
    assert_eq!(uncertain[0]["data"]["keys"], json!([b]));
    assert_eq!(outcomes[0]["data"]["key"], executing[0]["data"]["key"]);
    // The effects ran once each (the second one did run before the cut).
    rig.assert_effects_once();
    assert_eq!(rig.ledger().len(), 2);
    // The model was asked again with A's output and B's uncertainty.
    let requests = model_requests(&rig);
    let last = requests.last().expect("requests");
    let outputs: Vec<&Value> = last["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs.len(), 2, "{last:#}");
    assert!(
        outputs[1]["output"]
            .as_str()
            .unwrap()
            .starts_with("uncertain:"),
        "{last:#}"
    );
    assert!(
        !outputs[0]["output"]
            .as_str()
            .unwrap()
            .starts_with("uncertain:"),
        "{last:#}"
    );
}

/// A runner killed while waiting for the model: the model request has no
/// side effects and is simply issued again; nothing runs twice.
#[test]
fn native_model_request_cut_by_a_restart_is_issued_again() {
    let mut rig = Rig::new("runner-native-openai", TWO_TURNS);
    let client = rig.start(Some("model.turn.recorded#1"));
    rig.submit(&client, "t1", "m1");
    let held = rig.hold();
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert!(
        model_requests(&rig).len() >= 3,
        "the first request was re-issued"
    );
    rig.assert_effects_once();
    assert_eq!(rig.ledger().len(), 1);
}

#[test]
fn native_restart_during_an_active_turn_consumes_the_follow_up_once() {
    let (rig, _client, task) = restart_with_a_follow_up_queued("runner-native-openai");
    assert!(task["cause"].is_null(), "{task}");
    let keys: Vec<(String, String)> = rig.ledger().into_iter().map(|e| (e.key, e.by)).collect();
    assert!(keys.contains(&("first".into(), "m1".into())), "{keys:?}");
    assert!(keys.contains(&("second".into(), "f1".into())), "{keys:?}");
    rig.assert_effects_once();
}

/// Every message between runnerd's ACP driver and the fake agent — a full
/// turn with a permission and client-side terminal calls, then a restart
/// with `session/load` and a continuation — validates against the ACP schema
/// both ways (from the fake's journal, in order).
#[test]
fn every_acp_message_between_runnerd_and_the_agent_conforms_both_ways() {
    let (rig, _client, _task) = restart_with_a_follow_up_queued("runner-acpx-claude");
    let journal = wire::journal::read(&rig.path("journal.jsonl")).unwrap();
    // One checker per provider process: request ids restart with each.
    let mut sessions: std::collections::BTreeMap<String, conformance::AcpSession> =
        std::collections::BTreeMap::new();
    let mut checked = 0;
    for e in &journal {
        let direction = match e.kind {
            wire::journal::EntryKind::In => conformance::Direction::ClientToServer,
            wire::journal::EntryKind::Out => conformance::Direction::ServerToClient,
            wire::journal::EntryKind::Fact => continue,
        };
        let session = sessions.entry(e.generation.clone()).or_default();
        if let Err(v) = session.check(direction, &e.data) {
            panic!("not ACP: {v}\nmessage: {}", e.data);
        }
        checked += 1;
    }
    assert!(checked > 20, "only {checked} messages");
    assert!(sessions.len() >= 2, "a restored provider process too");
}

/// Every request runnerd's OpenCode driver sent and every response and
/// event the fake server gave it validates against the OpenAPI document.
#[test]
fn every_opencode_exchange_between_runnerd_and_the_server_conforms() {
    let (rig, _client, _task) = restart_with_a_follow_up_queued("runner-opencode");
    let spec = conformance::opencode();
    let journal = wire::journal::read(&rig.path("journal.jsonl")).unwrap();
    let mut checked = 0;
    for e in &journal {
        let d = &e.data;
        let result = match e.kind {
            wire::journal::EntryKind::In => {
                let body = (!d["body"].is_null()).then_some(&d["body"]);
                spec.check_request(
                    d["method"].as_str().unwrap_or_default(),
                    d["path"].as_str().unwrap_or_default(),
                    body,
                )
            }
            wire::journal::EntryKind::Out if d.get("event").is_some() => {
                spec.check_event(&d["event"])
            }
            wire::journal::EntryKind::Out => {
                let (method, path) = (
                    d["method"].as_str().unwrap_or_default(),
                    d["path"].as_str().unwrap_or_default(),
                );
                if spec.route(method, path).is_none() {
                    continue;
                }
                let body = (!d["body"].is_null()).then_some(&d["body"]);
                let status = d["status"].as_u64().unwrap_or_default() as u16;
                spec.check_response(method, path, status, body)
            }
            wire::journal::EntryKind::Fact => continue,
        };
        if let Err(v) = result {
            panic!("not OpenCode: {v}\nentry: {d}");
        }
        checked += 1;
    }
    assert!(checked > 20, "only {checked} exchanges");
}
