//! The real `codex app-server` (npm `@openai/codex`, pinned to the version the
//! vendored spec came from) driven by `turncut runnerd`, its model being
//! `turncut fake-provider model-api` on loopback: a whole task, offline, with a
//! command approval answered by the runner and the effect in the ledger once.
//! Then the fake Codex against the real one: the same client plays the same
//! scripted turn (accepted, declined, cancelled, interrupted) on both, and the
//! protocol shapes must be equal; every real message is also checked against
//! the vendored schema (reported, not failed).
//!
//! Codex is looked up on `PATH`, then in `<workspace>/target/npm`; with
//! `TURNCUT_INSTALL_REAL=1` and `npm` present it is installed there first.
//! Without it the test prints `skipped: …` and passes. Every wait has a
//! deadline; nothing sleeps to synchronize.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harness::codex_client::{CodexClient, Dir};
use harness::demo::FakeCodex;
use harness::fidelity::codex::{Moment, turn_form};
use harness::fidelity::{effect_pids, wait_until};
use harness::runner_client::{RunnerCommand, RunnerProcess};
use harness::supervisor::GroupChild;
use serde_json::{Value, json};
use wire::journal::EntryKind;

/// How long the whole task may take (Codex starts in about a second here).
const TASK_WAIT: Duration = Duration::from_secs(120);

const WAIT: Duration = Duration::from_secs(30);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// The codex executable (`harness::real`: on PATH, in target/npm, or
/// installed there with TURNCUT_INSTALL_REAL=1), or why there is none.
fn find_codex() -> Result<PathBuf, String> {
    let real = wire::profiles::real("runner-codex-real").expect("the codex real profile");
    harness::real::locate_or_install(real, &harness::report::console(Default::default()))
}

/// The fake model API, killed (as a process group) on drop.
fn start_model_api(dir: &Path) -> (GroupChild, String) {
    start_model_api_args(dir, &[])
}

/// The fake model API playing `script`; its journal and ledger in `dir`.
fn start_model_api_with(dir: &Path, script: &Path) -> (GroupChild, String) {
    std::fs::create_dir_all(dir).unwrap();
    start_model_api_args(dir, &["--script".to_owned(), script.display().to_string()])
}

fn start_model_api_args(dir: &Path, extra: &[String]) -> (GroupChild, String) {
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--port", "0"])
        .args(extra)
        .arg("--state-dir")
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
    // A private HOME too: codex runs commands with `bash -lc`, and a login
    // shell under the machine's HOME runs its profile (here pyenv's rehash,
    // which waits on a lock that a killed shell leaves behind).
    let home = codex_home.join("home");
    std::fs::create_dir_all(&home).expect("a private HOME");
    let mut cmd: Vec<String> = vec![
        "env".into(),
        format!("CODEX_HOME={}", codex_home.display()),
        format!("HOME={}", home.display()),
        // A canary value: the effect reports it if it reaches a shell under
        // any name.
        format!("OPENAI_API_KEY={}real-codex", wire::secret::CANARY_PREFIX),
        codex.display().to_string(),
        "app-server".into(),
    ];
    for config in [
        "model_provider=\"fake\"",
        &provider,
        "model=\"turncut-fake-model\"",
        "approval_policy=\"on-request\"",
        "sandbox_mode=\"read-only\"",
        // Codex hands its whole environment, provider key included, to the
        // commands it runs unless told otherwise (`ignore_default_excludes`
        // defaults to true): a core environment without `*KEY*`, `*SECRET*`
        // and `*TOKEN*` variables keeps the credential out of tool shells.
        "shell_environment_policy.inherit=\"core\"",
        "shell_environment_policy.ignore_default_excludes=false",
    ] {
        cmd.extend(["-c".to_owned(), config.to_owned()]);
    }
    cmd
}

/// The codex binary, or `None` after printing why the test skips.
fn codex_or_skip() -> Option<PathBuf> {
    find_codex()
        .map_err(|reason| common::skip("real", &reason))
        .ok()
}

#[test]
fn the_real_codex_app_server_completes_a_task_through_the_runner() {
    let Some(codex) = codex_or_skip() else {
        return;
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
    let ledger = wire::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].key, "write-hello");
    assert!(
        !ledger[0].saw_secret,
        "the approved command saw the provider credential in its environment"
    );

    // Every model request and every event Codex was sent is in the journal: a
    // request that played the tool and one that answered after its output.
    let journal = wire::journal::read(&dir.path().join("journal.jsonl")).unwrap();
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
    let turns = wire::stores::model_api::recorded_turns(&dir.path().join("model"));
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "completed");
    // The runner's own view: the provider turn id Codex gave it.
    let (_, task) = client.task("t1").unwrap();
    assert_eq!(task["state"], json!("completed"));
}

// ---------------------------------------------------------------------------
// The fake Codex against the real one: the same client plays the same scripted
// turn on both, and the protocol shapes must be equal. Any difference is a bug
// in the fake (`fake-provider codex`), which must drive the runner the way the
// real server does.
// ---------------------------------------------------------------------------

/// Notifications the real server sends that the fake deliberately does not,
/// because they depend on the account, the installation or the configuration,
/// not on the turn:
/// - `account/rateLimits/updated`: the account's rate limits, after each model
///   response (all null against a local provider);
/// - `warning`: "Model metadata for `turncut-fake-model` not found", because
///   the model name is not one Codex knows;
/// - `configWarning`: the sandbox's bubblewrap is not on `PATH`;
/// - `remoteControl/status/changed`: the remote-control feature of this
///   installation, once at start-up.
///
/// Outside the turn, `thread/read {includeTurns: true}` also makes the real
/// server send a `deprecationNotice` (full-history hydration of a paginated
/// thread); the shape stops at that request and compares only its result.
const IGNORED: [&str; 4] = [
    "account/rateLimits/updated",
    "warning",
    "configWarning",
    "remoteControl/status/changed",
];

/// How the scripted turn (the built-in script of both the fake Codex and the
/// fake model API: one message, one command that needs approval, a final
/// message) ends.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// The approval is `accept`ed; the command runs.
    Accept,
    /// `decline`: the command is declined and the turn goes on.
    Decline,
    /// `cancel`: the turn ends interrupted.
    Cancel,
    /// The client sends `turn/interrupt` instead of answering.
    Interrupt,
}

/// What must be equal between the real and the fake server.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    /// Server notifications and requests in order, [`IGNORED`] left out and
    /// consecutive repeats of a delta notification collapsed into one (the
    /// model API streams a message word by word, the fake Codex sends it whole).
    methods: Vec<String>,
    /// Every `thread/status/changed` status, in order.
    statuses: Vec<Value>,
    /// `item/started` and `item/completed` as `<event> <type> <id form>`, plus
    /// the status of command items.
    items: Vec<String>,
    /// The turn in the `turn/start` result, `turn/started` and
    /// `turn/completed`: status, `itemsView` and item types.
    turns: Vec<String>,
    /// The turn as `thread/read {includeTurns}` reads it back, the same way.
    read_back: Vec<String>,
}

/// The form of an item id: a UUID, or a model id (`msg_<hex>`, `call_<hex>`).
fn id_form(id: &str) -> String {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let uuid = id.len() == 36
        && id.split('-').map(str::len).eq([8, 4, 4, 4, 12])
        && id.split('-').all(hex);
    if uuid {
        return "uuid".to_owned();
    }
    match id.split_once('_') {
        Some((prefix, rest)) if hex(rest) => format!("{prefix}_<hex>"),
        _ => format!("other:{id}"),
    }
}

fn is_delta(method: &str) -> bool {
    method.ends_with("/delta") || method.ends_with("Delta")
}

/// The shape of a transcript, and every command-form problem found in it.
fn shape_of(transcript: &[(Dir, Value)], read_back: &Value) -> (Shape, Vec<String>) {
    let mut shape = Shape {
        methods: Vec::new(),
        statuses: Vec::new(),
        items: Vec::new(),
        turns: Vec::new(),
        read_back: Vec::new(),
    };
    let mut problems = Vec::new();
    let mut command_items: Vec<String> = Vec::new();
    for (dir, m) in transcript {
        if *dir == Dir::Received
            && let Some(turn) = m.pointer("/result/turn")
        {
            shape
                .turns
                .push(format!("turn/start result {}", turn_form(turn)));
        }
        let Some(method) = m.get("method").and_then(Value::as_str) else {
            continue;
        };
        if *dir != Dir::Received || IGNORED.contains(&method) {
            continue;
        }
        let repeat = shape.methods.last().is_some_and(|l| l == method);
        if !(repeat && is_delta(method)) {
            shape.methods.push(method.to_owned());
        }
        let params = &m["params"];
        match method {
            "thread/status/changed" => shape.statuses.push(params["status"].clone()),
            "turn/started" | "turn/completed" => shape
                .turns
                .push(format!("{method} {}", turn_form(&params["turn"]))),
            "item/started" | "item/completed" => {
                let item = &params["item"];
                let kind = item["type"].as_str().unwrap_or("?");
                let id = item["id"].as_str().unwrap_or_default();
                let mut line = format!("{method} {kind} {}", id_form(id));
                if kind == "commandExecution" {
                    line.push_str(&format!(" {}", item["status"].as_str().unwrap_or("?")));
                    command_items.push(id.to_owned());
                    check_command(&format!("{method} {id}"), item, &mut problems);
                }
                shape.items.push(line);
            }
            "item/commandExecution/requestApproval" | "item/commandExecution/outputDelta" => {
                let id = params["itemId"].as_str().unwrap_or_default();
                if !command_items.iter().any(|c| c == id) {
                    problems.push(format!("{method} names item {id}, not a started command"));
                }
                if method.ends_with("requestApproval") {
                    check_command(method, params, &mut problems);
                }
            }
            _ => {}
        }
    }
    if let Some(turns) = read_back.pointer("/thread/turns").and_then(Value::as_array) {
        shape.read_back.extend(turns.iter().map(turn_form));
    }
    // A race in the real server: once a refused command's approval is
    // resolved, its thread-state watcher (`thread/status/changed`, active
    // again) and the turn (`item/completed`, declined) send concurrently, in
    // either order (the item first about two runs in three). The fake sends
    // the item first; the comparison takes the status change right after
    // `serverRequest/resolved` and before an `item/completed` as the same.
    // The same race follows an accepted command, and there the command's
    // output is streamed as `outputDelta` only when it arrives before the
    // command exits (a fast command's output comes whole in `item/completed`):
    // right after `serverRequest/resolved`, the deltas are left out and the
    // status change and the command's completion are put in one order.
    let m = &mut shape.methods;
    if let Some(at) = m.iter().position(|x| x == "serverRequest/resolved") {
        let window: Vec<String> = m[at + 1..]
            .iter()
            .take_while(|x| {
                matches!(
                    x.as_str(),
                    "thread/status/changed"
                        | "item/commandExecution/outputDelta"
                        | "item/completed"
                )
            })
            .cloned()
            .collect();
        let completed = window.iter().position(|x| x == "item/completed");
        if let Some(end) = completed {
            let mut run: Vec<String> = window[..=end]
                .iter()
                .filter(|x| x.as_str() != "item/commandExecution/outputDelta")
                .cloned()
                .collect();
            run.sort_by_key(|x| x != "item/completed");
            m.splice(at + 1..at + 2 + end, run);
        }
    }
    (shape, problems)
}

/// A command item or approval request must show `/bin/bash -lc '<line>'`,
/// quoted as the fake quotes it, where `<line>` is the model's command
/// (`commandActions[0].command`). On the real server this checks the fake's
/// quoting against Codex's own.
fn check_command(what: &str, v: &Value, problems: &mut Vec<String>) {
    let command = v["command"].as_str().unwrap_or_default();
    let Some(line) = v
        .pointer("/commandActions/0/command")
        .and_then(Value::as_str)
    else {
        problems.push(format!("{what}: no commandActions[0].command"));
        return;
    };
    let expected = fake_provider::codex::shell_command(line);
    if command != expected {
        problems.push(format!(
            "{what}: command\n  {command}\nis not\n  {expected}"
        ));
    }
}

/// Plays the scripted turn on a handshaken server; returns what
/// `thread/read {includeTurns}` says after it, and the transcript's length
/// before that request (the turn's part).
fn play(
    client: &mut CodexClient,
    cwd: &str,
    ending: Ending,
) -> Result<(Value, usize), harness::codex_client::ClientError> {
    let thread = client.thread_start(cwd)?;
    let decision = match ending {
        Ending::Accept => "accept",
        Ending::Decline => "decline",
        Ending::Cancel | Ending::Interrupt => "cancel",
    };
    match ending {
        Ending::Interrupt => {
            let started = client.request(
                "turn/start",
                json!({
                    "threadId": thread,
                    "input": [{ "type": "text", "text": "Create hello.txt", "text_elements": [] }],
                    "clientUserMessageId": "m-1",
                }),
            )?;
            let turn_id = started.pointer("/turn/id").cloned().unwrap_or_default();
            client.wait_for("the approval request", |m| {
                m["method"] == "item/commandExecution/requestApproval"
            })?;
            client.request(
                "turn/interrupt",
                json!({ "threadId": thread, "turnId": turn_id }),
            )?;
            client.wait_for("turn/completed", |m| m["method"] == "turn/completed")?;
        }
        _ => {
            client.run_turn(&thread, "Create hello.txt", Some("m-1"), |_| decision)?;
        }
    }
    // Whatever the server still sends about the turn belongs to its shape.
    while client.expect_silence(Duration::from_millis(500))?.is_some() {}
    let turn_part = client.transcript.len();
    let read = client.request(
        "thread/read",
        json!({ "threadId": thread, "includeTurns": true }),
    )?;
    Ok((read, turn_part))
}

/// Every schema violation in a transcript, as text.
fn violations(transcript: &[(Dir, Value)]) -> Vec<String> {
    let mut session = conformance::CodexSession::new();
    let mut out = Vec::new();
    for (dir, msg) in transcript {
        let direction = match dir {
            Dir::Sent => conformance::Direction::ClientToServer,
            Dir::Received => conformance::Direction::ServerToClient,
        };
        if let Err(v) = session.check(direction, msg) {
            let text = msg.to_string();
            let cut = text.char_indices().nth(300).map_or(text.len(), |(i, _)| i);
            out.push(format!("{v}\n    message: {}", &text[..cut]));
        }
    }
    out
}

#[test]
fn the_fake_codex_drives_a_client_like_the_real_codex_app_server() {
    let Some(codex) = codex_or_skip() else {
        return;
    };
    // A directory name that needs quoting (a space, a quote, a dollar sign):
    // the effect's command line carries paths under it, so the quoting of
    // `/bin/bash -lc '…'` is exercised on both servers.
    let dir = tempfile::Builder::new()
        .prefix("turncut it's $x ")
        .tempdir()
        .unwrap();
    let (_model, model_url) = start_model_api(dir.path());
    let mut failures = Vec::new();
    for ending in [
        Ending::Accept,
        Ending::Decline,
        Ending::Cancel,
        Ending::Interrupt,
    ] {
        let case = dir.path().join(format!("{ending:?}").to_lowercase());
        let ws = case.join("ws");
        let codex_home = case.join("codex-home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&codex_home).unwrap();
        let cwd = ws.display().to_string();

        let argv = codex_command(&codex, &codex_home, &model_url);
        let stderr_log = case.join("codex.stderr");
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stderr(std::fs::File::create(&stderr_log).unwrap());
        let mut real = CodexClient::spawn(&mut cmd).unwrap();
        real.timeout = TASK_WAIT;
        real.initialize().unwrap();
        let (real_read, real_turn) = play(&mut real, &cwd, ending).unwrap_or_else(|e| {
            panic!(
                "{ending:?}: the real codex: {e}\n{}",
                std::fs::read_to_string(&stderr_log).unwrap_or_default()
            )
        });
        let real_transcript = std::mem::take(&mut real.transcript);
        real.kill().unwrap();

        let fake = FakeCodex::via(exe(), &case.join("fake"));
        let mut client = fake.start(&[]).unwrap();
        client.timeout = WAIT;
        let (fake_read, fake_turn) = play(&mut client, &cwd, ending).unwrap();
        let fake_transcript = std::mem::take(&mut client.transcript);
        client.close().unwrap();

        // The real server's conformance is reported, never failed on: the
        // vendored schema is the spec of this very version.
        let real_violations = violations(&real_transcript);
        if !real_violations.is_empty() {
            println!(
                "{ending:?}: the real codex sent {} message(s) the vendored schema rejects:",
                real_violations.len()
            );
            for v in &real_violations {
                println!("  {v}");
            }
        }
        // The fake's must conform.
        for v in violations(&fake_transcript) {
            failures.push(format!("{ending:?}: the fake broke the schema: {v}"));
        }

        let (real_shape, real_problems) = shape_of(&real_transcript[..real_turn], &real_read);
        let (fake_shape, fake_problems) = shape_of(&fake_transcript[..fake_turn], &fake_read);
        println!(
            "{ending:?}: the real codex sent {}",
            real_shape.methods.join(", ")
        );
        for p in real_problems {
            failures.push(format!("{ending:?}: the real codex's {p}"));
        }
        for p in fake_problems {
            failures.push(format!("{ending:?}: the fake's {p}"));
        }
        if real_shape != fake_shape {
            failures.push(format!(
                "{ending:?}: the fake's shape differs from the real codex's:\n{}",
                shape_diff(&real_shape, &fake_shape)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The fields of two shapes that differ, side by side.
fn shape_diff(real: &Shape, fake: &Shape) -> String {
    let mut out = String::new();
    let mut field = |name: &str, r: Vec<String>, f: Vec<String>| {
        if r != f {
            out.push_str(&format!("  {name}:\n"));
            for i in 0..r.len().max(f.len()) {
                let a = r.get(i).map_or("", String::as_str);
                let b = f.get(i).map_or("", String::as_str);
                let mark = if a == b { " " } else { "≠" };
                out.push_str(&format!("   {mark} {a:<60} | {b}\n"));
            }
        }
    };
    let text = |v: &[Value]| v.iter().map(Value::to_string).collect::<Vec<_>>();
    field(
        "methods (real | fake)",
        real.methods.clone(),
        fake.methods.clone(),
    );
    field("statuses", text(&real.statuses), text(&fake.statuses));
    field("items", real.items.clone(), fake.items.clone());
    field("turns", real.turns.clone(), fake.turns.clone());
    field("read back", real.read_back.clone(), fake.read_back.clone());
    out
}

// ---------------------------------------------------------------------------
// Crash moments: the same turn on the real codex and on the fake, the server's
// process group SIGKILLed at a named moment, restarted on the same state, and
// asked what a recovering runner asks. The fake is cut at its own point for
// the moment (`--exit`); the real codex is killed by the client as soon as it
// sees the moment.
// ---------------------------------------------------------------------------

/// The crash-semantics differential of `turncut fidelity`, on codex: at
/// each moment, and at each upstream fault that fails the turn's first
/// model request (`--moments upstream`), the fake reads back what the real
/// codex does. It runs under
/// `nohup`, as a supervisor may start a provider: with SIGHUP ignored from
/// the start, a fake whose commands kept that disposition (or died only of
/// a hangup) outlived the kill where the real codex's die (2 rows differed).
#[test]
fn at_each_crash_moment_the_fake_codex_recovers_like_the_real_one_under_nohup() {
    if codex_or_skip().is_none() {
        return;
    }
    let out = Command::new("nohup")
        .arg(exe())
        .args(["fidelity", "--only", "runner-codex-real"])
        .env_remove(harness::nemesis::TAG_ENV)
        .stdin(Stdio::null())
        .output()
        .expect("run nohup turncut fidelity");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains(" 0 unexplained differences"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// runnerd driving the real codex, cut at `arm` (a runner point, held), with
/// codex's process group SIGKILLed there; returns the settled task, its run
/// log, the ledger, and the model API's requests.
fn runner_at_a_real_crash(
    codex: &Path,
    moment: Moment,
) -> (
    Value,
    Vec<Value>,
    Vec<wire::ledger::LedgerEntry>,
    Vec<Value>,
) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let script = dir.path().join("script.toml");
    std::fs::write(&script, moment.script()).unwrap();
    let (_model, url) = start_model_api_with(dir.path(), &script);
    let profiles = format!(
        "[profile.runner-codex-real]\ndriver = \"codex\"\ncommand = {}\n",
        serde_json::to_string(&codex_command(codex, &home, &url)).unwrap()
    );
    std::fs::write(dir.path().join("profiles.toml"), profiles).unwrap();
    let listener = cutpoint::Listener::bind(dir.path().join("cut.sock")).unwrap();
    let arm = match moment {
        Moment::ThreadStarted => "runner.conversation.persisted",
        Moment::TurnStarted => "runner.turn_accepted.persisted",
        Moment::CommandRunning | Moment::ChildRunning => "runner.approval_answer.persisted",
        other => panic!("no runner crash at {other:?}"),
    };
    let extra = vec![
        "--profiles".to_owned(),
        dir.path().join("profiles.toml").display().to_string(),
        "--provider-idle-timeout-ms".to_owned(),
        "60000".to_owned(),
    ];
    let state = dir.path().join("state");
    let mut cmd = RunnerCommand::via(exe()).command(&state, &extra);
    cmd.env_remove("TURNCUT_PROVIDER_API_KEY")
        .env(cutpoint::ENV_SOCKET, listener.path())
        .env(cutpoint::ENV_ARM, arm);
    let stderr_log = dir.path().join("runnerd.stderr");
    let runner = RunnerProcess::start(&mut cmd, &state, &stderr_log, WAIT).unwrap();
    let client = runner.client();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", "runner-codex-real", &ws)
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let held = listener.accept_hit(TASK_WAIT).expect("the armed cut");
    let ledger = dir.path().join("ledger.jsonl");
    if matches!(moment, Moment::CommandRunning | Moment::ChildRunning) {
        wait_until("the command to run", TASK_WAIT, || {
            !effect_pids(&ledger).is_empty()
        })
        .unwrap();
    }
    let codex_pid = client
        .events("t1", 0)
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "provider.spawned")
        .and_then(|e| e.pointer("/data/pid").and_then(Value::as_i64))
        .expect("the provider's pid in the run log");
    // The provider leads its own group (runner::supervisor::spawn_provider).
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(codex_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    drop(held);
    let task = client.wait_settled("t1", TASK_WAIT).unwrap();
    let events = client.events("t1", 0).unwrap();
    wait_until("every command to end", WAIT, || {
        effect_pids(&ledger).is_empty()
    })
    .unwrap();
    let journal = wire::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    let requests = journal
        .into_iter()
        .filter(|e| e.kind == EntryKind::In)
        .map(|e| e.data)
        .collect();
    let log = std::fs::read_to_string(&stderr_log).unwrap_or_default();
    println!("{moment:?}: runner-codex-real settled {}", task["state"]);
    if task["state"] == "running" {
        println!("{log}");
    }
    (task, events, wire::ledger::read(&ledger).unwrap(), requests)
}

/// Whether a model request carried the user message `text`.
fn model_saw(requests: &[Value], text: &str) -> bool {
    requests.iter().any(|r| {
        r.pointer("/body/input")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|i| i["role"] == "user" && i.to_string().contains(text))
    })
}

/// The runner's decision at each crash moment, on the real codex: a thread
/// lost before its first turn is opened afresh; a turn whose user message
/// was never written is sent again (or, if codex wrote it after all,
/// continued); a turn whose approved command never completed is closed.
#[test]
fn the_runner_decides_right_at_each_crash_moment_of_the_real_codex() {
    let Some(codex) = codex_or_skip() else {
        return;
    };
    let mut failures = Vec::new();
    for moment in [
        Moment::ThreadStarted,
        Moment::TurnStarted,
        Moment::CommandRunning,
        Moment::ChildRunning,
    ] {
        let (task, events, ledger, requests) = runner_at_a_real_crash(&codex, moment);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        let cause = task.pointer("/cause/code").and_then(Value::as_str);
        let mut wrong = Vec::new();
        match moment {
            Moment::ThreadStarted => {
                if task["state"] != "completed" || !kinds.contains(&"conversation.lost") {
                    wrong.push(format!("not completed in a fresh thread: {cause:?}"));
                }
            }
            Moment::TurnStarted => {
                // Re-sent (codex had not written the user message) or
                // continued (it had): never continued into an empty turn.
                let resent = kinds
                    .iter()
                    .any(|k| *k == "turn.absent_at_provider" || *k == "conversation.lost");
                let continued = events.iter().any(|e| {
                    e.pointer("/data/cause/code") == Some(&json!("provider_turn_lost_on_restore"))
                });
                println!("TurnStarted: re-sent {resent}, continued {continued}");
                if task["state"] != "completed" || resent == continued {
                    wrong.push(format!(
                        "state {} cause {cause:?}, re-sent {resent}, continued {continued}",
                        task["state"]
                    ));
                }
            }
            Moment::CommandRunning | Moment::ChildRunning => {
                if cause != Some("active_turn_recovery_closed") {
                    wrong.push(format!(
                        "state {} cause {cause:?}: the approved command may have run",
                        task["state"]
                    ));
                }
            }
            other => panic!("no runner crash at {other:?}"),
        }
        if !matches!(moment, Moment::CommandRunning | Moment::ChildRunning)
            && (ledger.is_empty() || !model_saw(&requests, "Create hello.txt"))
        {
            wrong.push(format!(
                "the task was not done: {} effects, model saw the message: {}",
                ledger.len(),
                model_saw(&requests, "Create hello.txt")
            ));
        }
        for w in wrong {
            failures.push(format!("{moment:?}: {w}; events {kinds:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
