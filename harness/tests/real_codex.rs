//! The real `codex app-server` (npm `@openai/codex`, pinned to the version the
//! vendored spec came from) driven by `turncut runnerd`, its model being
//! `turncut fake-provider model-api` on loopback: a whole task, offline, with a
//! command approval answered by the runner and the effect in the ledger once.
//!
//! Codex is looked up on `PATH`, then in `<workspace>/target/npm`; with
//! `TURNCUT_INSTALL_CODEX=1` and `npm` present it is installed there first.
//! Without it the test prints `skipped: …` and passes. Every wait has a
//! deadline; nothing sleeps to synchronize.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fake_provider::journal::EntryKind;
use harness::runner_client::{RunnerCommand, RunnerProcess};
use harness::supervisor::GroupChild;
use serde_json::{Value, json};

/// The Codex version of `../shared/protocols/codex-app-server`.
const CODEX_VERSION: &str = "0.171.0";

/// How long the whole task may take (Codex starts in about a second here).
const TASK_WAIT: Duration = Duration::from_secs(120);

const WAIT: Duration = Duration::from_secs(30);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness crate lives in the workspace")
        .to_owned()
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The codex executable, or why there is none.
fn find_codex() -> Result<PathBuf, String> {
    if let Some(p) = on_path("codex") {
        return Ok(p);
    }
    let prefix = workspace_root().join("target/npm");
    let cached = prefix.join("node_modules/.bin/codex");
    if cached.is_file() {
        return Ok(cached);
    }
    if std::env::var("TURNCUT_INSTALL_CODEX").as_deref() != Ok("1") {
        return Err(format!(
            "codex is not on PATH nor in {}; set TURNCUT_INSTALL_CODEX=1 to install @openai/codex@{CODEX_VERSION} there",
            prefix.display()
        ));
    }
    let Some(npm) = on_path("npm") else {
        return Err("codex is absent and npm is not on PATH to install it".to_owned());
    };
    let started = Instant::now();
    let out = Command::new(npm)
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .arg(format!("@openai/codex@{CODEX_VERSION}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("failed to run npm: {e}"))?;
    eprintln!(
        "npm install @openai/codex@{CODEX_VERSION}: {} in {} ms",
        out.status,
        started.elapsed().as_millis()
    );
    if cached.is_file() {
        Ok(cached)
    } else {
        Err(format!(
            "npm install @openai/codex@{CODEX_VERSION} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The fake model API, killed (as a process group) on drop.
fn start_model_api(dir: &Path) -> (GroupChild, String) {
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--port", "0", "--state-dir"])
        .arg(dir.join("model"))
        .arg("--journal")
        .arg(dir.join("journal.jsonl"))
        .arg("--ledger")
        .arg(dir.join("ledger.jsonl"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = GroupChild::spawn(&mut cmd).expect("spawn the fake model api");
    let stdout = child.inner().stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut lines = std::io::BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = rx.recv_timeout(WAIT).expect("the model api listening line");
    let url = line
        .strip_prefix("model api listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (child, url)
}

/// The `runner-codex-real` profile command: `env` sets what a profile cannot
/// (a private `CODEX_HOME`, the provider's key variable), then codex with a
/// local Responses provider, a model name without built-in metadata (so Codex
/// offers plain function tools such as `exec_command`, not its JavaScript code
/// mode), approvals on request and a read-only sandbox: the fake asks for
/// `require_escalated` on a tool that needs approval, so Codex asks the runner.
fn codex_command(codex: &Path, codex_home: &Path, model_url: &str) -> Vec<String> {
    let provider = format!(
        "model_providers.fake={{name=\"fake\",base_url=\"{model_url}/v1\",wire_api=\"responses\",env_key=\"OPENAI_API_KEY\",request_max_retries=0,stream_max_retries=0}}"
    );
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("CODEX_HOME={}", codex_home.display()),
        "OPENAI_API_KEY=sk-turncut-fake-model".into(),
        codex.display().to_string(),
        "app-server".into(),
    ];
    for config in [
        "model_provider=\"fake\"",
        &provider,
        "model=\"turncut-fake-model\"",
        "approval_policy=\"on-request\"",
        "sandbox_mode=\"read-only\"",
    ] {
        cmd.extend(["-c".to_owned(), config.to_owned()]);
    }
    cmd
}

#[test]
fn the_real_codex_app_server_completes_a_task_through_the_runner() {
    let codex = match find_codex() {
        Ok(p) => p,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let codex_home = dir.path().join("codex-home");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&codex_home).unwrap();
    let (_model, model_url) = start_model_api(dir.path());
    let profiles = format!(
        "[profile.runner-codex-real]\ndriver = \"codex\"\ncommand = {}\n",
        serde_json::to_string(&codex_command(&codex, &codex_home, &model_url)).unwrap()
    );
    std::fs::write(dir.path().join("profiles.toml"), profiles).unwrap();
    let extra = vec![
        "--profiles".to_owned(),
        dir.path().join("profiles.toml").display().to_string(),
        "--provider-idle-timeout-ms".to_owned(),
        "60000".to_owned(),
    ];
    let state = dir.path().join("state");
    let mut cmd = RunnerCommand::via(exe()).command(&state, &extra);
    cmd.env_remove("TURNCUT_PROVIDER_API_KEY")
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_SOCKET);
    let stderr_log = dir.path().join("runnerd.stderr");
    let runner = RunnerProcess::start(&mut cmd, &state, &stderr_log, WAIT).unwrap();
    let client = runner.client();

    let started = Instant::now();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", "runner-codex-real", &ws)
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", TASK_WAIT).unwrap();
    let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    eprintln!(
        "real codex task settled in {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(task["state"], "completed", "{task}\n{}", log());
    assert!(
        task.get("cause").is_none_or(Value::is_null),
        "no cause: {task}"
    );

    // The runner answered Codex's command approval, and saw the turn through.
    let events = client.events("t1", 0).unwrap();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in [
        "turn.intent",
        "turn.accepted",
        "provider_request",
        "turn.finished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in the run log: {kinds:?}");
    }
    let request = events
        .iter()
        .find(|e| e["kind"] == "provider_request")
        .unwrap();
    let request_text = request.to_string();
    assert!(
        request_text.contains("item/commandExecution/requestApproval"),
        "{request}"
    );

    // The effect ran exactly once, under the fake model's id for the message.
    let ledger = fake_provider::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].key, "write-hello");
    if ledger[0].saw_secret {
        // Codex hands its environment, provider key included, to an escalated
        // command; recorded, not failed: it is Codex's policy, not the runner's.
        eprintln!("note: the effect saw a credential variable in its environment");
    }

    // Every model request and every event Codex was sent is in the journal: a
    // request that played the tool and one that answered after its output.
    let journal = fake_provider::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    let requests: Vec<&Value> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::In)
        .map(|e| &e.data)
        .collect();
    assert!(requests.len() >= 2, "{} model requests", requests.len());
    let last_input = requests
        .last()
        .and_then(|r| r.pointer("/body/input"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        last_input
            .iter()
            .any(|i| i["type"] == "function_call_output"),
        "the last request carries the tool output"
    );
    let finished = journal
        .iter()
        .filter(|e| e.fact.as_deref() == Some("turn.finished"))
        .count();
    assert_eq!(finished, 1);
    let turns = fake_provider::model_api::store::recorded_turns(&dir.path().join("model"));
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "completed");
    // The runner's own view: the provider turn id Codex gave it.
    let (_, task) = client.task("t1").unwrap();
    assert_eq!(task["state"], json!("completed"));
}
