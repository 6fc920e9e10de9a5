//! The real `opencode serve` (npm `opencode-ai`, pinned to the version the
//! fake OpenCode mimics) driven by `turncut runnerd`, its model being
//! `turncut fake-provider model-api` on loopback: a whole task, offline, with
//! a `bash` permission answered by the runner and the effect in the ledger
//! once, the provider key kept out of the tool's environment. Then the crash
//! moments: the same turn on the real server and on `fake-provider opencode`,
//! the server's process group SIGKILLed at a named moment, restarted on the
//! same data, and read back the way a recovering runner reads it; every
//! difference is either fixed in the fake or listed as known, with its reason.
//!
//! OpenCode is looked up on `PATH` (only at the pinned version), then in
//! `<workspace>/target/npm`; with `TURNCUT_INSTALL_OPENCODE=1` and `npm`
//! present it is installed there first. Without it the tests print
//! `skipped: …` and pass. `TURNCUT_OPENCODE_PROBE_RUNS=N` plays each crash
//! moment N times on the real server and prints how often each reading came
//! up. Every wait has a deadline; nothing sleeps to synchronize.
//!
//! The functions up to the first test are the reusable part (lookup,
//! install, configuration, command line): plain functions meant to move into
//! library code as they are.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harness::runner_client::{RunnerCommand, RunnerProcess};
use harness::supervisor::GroupChild;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use wire::journal::EntryKind;

/// The OpenCode version `fake-provider opencode` mimics (and the vendored
/// `protocols/opencode/openapi.json` describes).
pub const OPENCODE_VERSION: &str = "1.18.33";

/// The npm package that ships the `opencode` executable.
pub const OPENCODE_PACKAGE: &str = "opencode-ai";

/// The model name the configuration declares for the fake model API.
pub const FAKE_MODEL: &str = "turncut-fake-model";

/// The environment OpenCode runs with, besides its private directories: no
/// models.dev fetch (the provider and its model are declared in the
/// configuration), no self-update, no LSP downloads, no configuration or
/// skills from the workspace or from `~/.claude`, and npm offline: OpenCode
/// installs `@opencode-ai/plugin` into its configuration directory in the
/// background with its built-in npm (Arborist, which reads `npm_config_*`), so
/// offline it fails fast (a logged warning) instead of reaching the registry.
pub const OFFLINE_ENV: [(&str, &str); 7] = [
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
    ("OPENCODE_DISABLE_EXTERNAL_SKILLS", "1"),
    ("npm_config_offline", "true"),
];

/// The `opencode` executable at [`OPENCODE_VERSION`], or why there is none:
/// `opencode` on `PATH` when it reports that version, else
/// `<workspace>/target/npm/node_modules/.bin/opencode`, installed there by
/// [`install_opencode`] when `TURNCUT_INSTALL_OPENCODE=1`.
pub fn find_opencode(workspace: &Path) -> Result<PathBuf, String> {
    if let Some(p) = on_path("opencode").filter(|p| version_of(p).as_deref() == Some(OPENCODE_VERSION))
    {
        return Ok(p);
    }
    let prefix = workspace.join("target/npm");
    let cached = prefix.join("node_modules/.bin/opencode");
    if cached.is_file() {
        return Ok(cached);
    }
    if std::env::var("TURNCUT_INSTALL_OPENCODE").as_deref() != Ok("1") {
        return Err(format!(
            "opencode {OPENCODE_VERSION} is not on PATH nor in {}; set TURNCUT_INSTALL_OPENCODE=1 to install {OPENCODE_PACKAGE}@{OPENCODE_VERSION} there",
            prefix.display()
        ));
    }
    install_opencode(&prefix)?;
    if cached.is_file() {
        Ok(cached)
    } else {
        Err(format!("npm installed nothing at {}", cached.display()))
    }
}

/// `npm install --no-audit --no-fund --prefix PREFIX opencode-ai@VERSION`.
/// The package's own binary comes as an optional dependency per platform
/// (`opencode-linux-x64`); npm 11 skips its postinstall script, which only
/// links what is already there.
pub fn install_opencode(prefix: &Path) -> Result<(), String> {
    let Some(npm) = on_path("npm") else {
        return Err("opencode is absent and npm is not on PATH to install it".to_owned());
    };
    let package = format!("{OPENCODE_PACKAGE}@{OPENCODE_VERSION}");
    let started = Instant::now();
    let out = Command::new(npm)
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(prefix)
        .arg(&package)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("failed to run npm: {e}"))?;
    eprintln!(
        "npm install {package}: {} in {} ms",
        out.status,
        started.elapsed().as_millis()
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "npm install {package} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The configuration for a server whose model is the fake model API at
/// `model_url`, with `api_key` as the provider key: the built-in `openai`
/// provider (OpenCode talks to it with the Responses API, `POST
/// /v1/responses`, which the fake serves) pointed at the fake, one declared
/// model (models.dev is not fetched, so none is known otherwise), `bash`
/// asking for permission so the runner answers it, no session titles (the
/// hidden `title` agent would send the fake model an extra request per
/// session), and no autoupdate or sharing.
pub fn opencode_config(model_url: &str, api_key: &str) -> Value {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": false,
        "share": "disabled",
        "model": format!("openai/{FAKE_MODEL}"),
        "small_model": format!("openai/{FAKE_MODEL}"),
        "agent": { "title": { "disable": true } },
        "provider": {
            "openai": {
                "options": { "baseURL": format!("{model_url}/v1"), "apiKey": api_key },
                "models": { FAKE_MODEL: { "name": "turncut fake model", "tool_call": true } },
            },
        },
        "permission": { "bash": "ask" },
    })
}

/// The command line of a real `opencode serve` on loopback whose model is the
/// fake model API at `model_url`, with all its state under `home`: `env`
/// sets a private `HOME` and XDG directories (so a restart on the same `home`
/// finds its sessions in `home/.local/share/opencode/opencode.db`), points
/// `OPENCODE_CONFIG` at `home/opencode.json` (written here, mode 0600, from
/// [`opencode_config`] with a canary key) and sets [`OFFLINE_ENV`]; the
/// credential variables the effect command looks for are unset.
///
/// The key travels in the file, never in the environment: OpenCode runs its
/// `bash` tool with its own whole environment, so a key in
/// `OPENCODE_CONFIG_CONTENT` or `OPENAI_API_KEY` reaches every tool shell
/// (measured: the effect reported the canary).
pub fn opencode_command(opencode: &Path, home: &Path, model_url: &str) -> Vec<String> {
    let key = format!("{}real-opencode", wire::secret::CANARY_PREFIX);
    let config = home.join("opencode.json");
    std::fs::create_dir_all(home).expect("a private HOME");
    write_private(&config, &opencode_config(model_url, &key).to_string());
    let dir = |rel: &str| home.join(rel).display().to_string();
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
        format!("OPENCODE_CONFIG={}", config.display()),
    ]);
    cmd.extend(OFFLINE_ENV.iter().map(|(k, v)| format!("{k}={v}")));
    cmd.extend([
        opencode.display().to_string(),
        "serve".into(),
        "--hostname".into(),
        "127.0.0.1".into(),
        // 0: OpenCode tries 4096 first and takes any free port when it is
        // busy; the driver reads the port from the listening line.
        "--port".into(),
        "0".into(),
    ]);
    cmd
}

/// Writes `text` to `path`, readable by its owner only.
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("write the opencode configuration");
    f.write_all(text.as_bytes()).expect("write the opencode configuration");
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// What `opencode --version` prints, trimmed.
fn version_of(opencode: &Path) -> Option<String> {
    let out = Command::new(opencode)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

/// How long a whole task may take (OpenCode answers its first prompt in
/// about 2 s here).
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

/// The opencode binary, or `None` after printing why the test skips.
fn opencode_or_skip() -> Option<PathBuf> {
    find_opencode(&workspace_root())
        .map_err(|reason| println!("skipped: {reason}"))
        .ok()
}

/// The fake model API playing `script` (the built-in one when `None`); its
/// state, journal and ledger in `dir`. Killed (as a process group) on drop.
fn start_model_api(dir: &Path, script: Option<&Path>) -> (GroupChild, String) {
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(exe());
    cmd.args(["fake-provider", "model-api", "--port", "0"])
        .arg("--state-dir")
        .arg(dir.join("model"))
        .arg("--journal")
        .arg(dir.join("journal.jsonl"))
        .arg("--ledger")
        .arg(dir.join("ledger.jsonl"));
    if let Some(s) = script {
        cmd.arg("--script").arg(s);
    }
    let (child, line) = spawn_listening(&mut cmd, "model api listening on ");
    (child, line)
}

/// Spawns `cmd` in its own process group with stdin and stdout piped, and
/// returns it with the URL of its first stdout line that contains `marker`
/// (OpenCode prints a warning line first). Stdout is drained afterwards.
fn spawn_listening(cmd: &mut Command, marker: &str) -> (GroupChild, String) {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = GroupChild::spawn(cmd).expect("spawn");
    let stdout = child.inner().stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let wanted = marker.to_owned();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(at) = line.find(&wanted) {
                let _ = tx.send(line[at + wanted.len()..].trim().to_owned());
                break;
            }
        }
        for _ in lines {}
    });
    let url = rx
        .recv_timeout(TASK_WAIT)
        .unwrap_or_else(|_| panic!("no line with {marker:?}"));
    (child, url)
}

/// The process groups of the providers a runner spawned for `task` (from its
/// run log), SIGKILLed on drop: runnerd leaves a provider in a group of its
/// own, and `opencode serve`, unlike a stdio provider, does not end when the
/// runner's pipe closes.
struct ProviderGroups(Vec<i32>);

impl ProviderGroups {
    fn of(events: &[Value]) -> ProviderGroups {
        ProviderGroups(
            events
                .iter()
                .filter(|e| e["kind"] == "provider.spawned")
                .filter_map(|e| e.pointer("/data/pid").and_then(Value::as_i64))
                .map(|p| p as i32)
                .collect(),
        )
    }
}

impl Drop for ProviderGroups {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = killpg(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn the_real_opencode_serve_completes_a_task_through_the_runner() {
    let Some(opencode) = opencode_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let home = dir.path().join("opencode-home");
    std::fs::create_dir_all(&ws).unwrap();
    let (_model, model_url) = start_model_api(dir.path(), None);
    let profiles = format!(
        "[profile.runner-opencode-real]\ndriver = \"opencode\"\ncommand = {}\n",
        serde_json::to_string(&opencode_command(&opencode, &home, &model_url)).unwrap()
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
    cmd.env_remove(wire::secret::CREDENTIAL_ENV)
        .env_remove(cutpoint::ENV_ARM)
        .env_remove(cutpoint::ENV_SOCKET);
    let stderr_log = dir.path().join("runnerd.stderr");
    let runner = RunnerProcess::start(&mut cmd, &state, &stderr_log, WAIT).unwrap();
    let client = runner.client();

    let started = Instant::now();
    let (status, body) = client
        .create_task("t1", "m1", "Create hello.txt", "runner-opencode-real", &ws)
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let settled = client.wait_settled("t1", TASK_WAIT);
    let events = client.events("t1", 0).unwrap();
    let _providers = ProviderGroups::of(&events);
    let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    let task = settled.unwrap_or_else(|e| panic!("{e}\n{}", log()));
    eprintln!(
        "real opencode task settled in {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(task["state"], "completed", "{task}\n{}", log());
    assert!(
        task.get("cause").is_none_or(Value::is_null),
        "no cause: {task}"
    );

    // The runner answered OpenCode's bash permission and saw the turn through.
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
    assert!(request.to_string().contains("permission.asked"), "{request}");

    // The effect ran exactly once, and its shell never saw the key.
    let ledger = wire::ledger::read(&dir.path().join("ledger.jsonl")).unwrap();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].key, "write-hello");
    assert!(
        !ledger[0].saw_secret,
        "the approved command saw the provider credential in its environment"
    );

    // The model saw the tool's output, and answered one turn (no title
    // request: the title agent is disabled).
    let journal = wire::journal::read(&dir.path().join("journal.jsonl")).unwrap();
    let requests: Vec<&Value> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::In)
        .map(|e| &e.data)
        .collect();
    assert_eq!(requests.len(), 2, "model requests: {requests:?}");
    let offered: Vec<&str> = requests[0]
        .pointer("/body/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(offered.contains(&"bash"), "offered tools: {offered:?}");
    let last_input = requests[1]
        .pointer("/body/input")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        last_input
            .iter()
            .any(|i| i["type"] == "function_call_output"),
        "the last request carries the tool output"
    );
    let turns = wire::stores::model_api::recorded_turns(&dir.path().join("model"));
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0].status, "completed");
}
