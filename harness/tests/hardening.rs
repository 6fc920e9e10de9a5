//! runnerd at its edges, as a new user and an attacker would meet it (issue
//! 10): client-side tools of a hostile ACP agent confined to the workspace and
//! kept away from the credential, bounded and validated API input, errors that
//! are JSON with a reason code, and the token and key files checked like
//! secrets. Every test drives a real `turncut runnerd` (and, where a provider
//! is involved, a real `turncut fake-provider`); no fixed sleeps.
//!
//! Round two (issue 23), one module per concern under `hardening/`: one
//! runnerd per state directory, its name and state path (`state`); hostile
//! provider output (`flood`); the credential seen from a sibling
//! (`credential`); races on the workspace (`workspace_race`); processes that
//! escape (`containment`); the HTTP server under idle and slow clients
//! (`http`). `TURNCUT_HARDENING_EXE` runs them all against another `turncut`
//! build (how each was seen to fail before its fix).

mod hardening {
    pub mod containment;
    pub mod credential;
    pub mod flood;
    pub mod http;
    pub mod state;
    pub mod workspace_race;
}

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use harness::runner_client::{RunnerClient, RunnerCommand, RunnerProcess};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const ACP: &str = "runner-acpx-claude";

/// The `turncut` under test: this build, or `TURNCUT_HARDENING_EXE`.
fn exe() -> &'static Path {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        std::env::var_os("TURNCUT_HARDENING_EXE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_turncut")))
    })
}

/// A runner with one profile's fake provider playing `script`, in a
/// temporary directory with a workspace `ws`.
struct Rig {
    dir: tempfile::TempDir,
    profile: &'static str,
    env: Vec<(String, String)>,
    extra: Vec<String>,
    runner: Option<RunnerProcess>,
}

impl Rig {
    fn new(profile: &'static str, script: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let script_path = dir.path().join("script.toml");
        std::fs::write(&script_path, script).unwrap();
        let profiles =
            harness::runner_client::write_fake_profile(exe(), profile, dir.path(), &script_path)
                .unwrap();
        let extra = vec![
            "--profiles".to_owned(),
            profiles.display().to_string(),
            "--provider-idle-timeout-ms".to_owned(),
            "5000".to_owned(),
        ];
        Rig {
            dir,
            profile,
            env: Vec::new(),
            extra,
            runner: None,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ws(&self) -> PathBuf {
        self.path("ws").canonicalize().unwrap()
    }

    fn command(&self) -> Command {
        let mut cmd = RunnerCommand::via(exe()).command(&self.path("state"), &self.extra);
        cmd.env_remove(cutpoint::ENV_ARM)
            .env_remove(cutpoint::ENV_SOCKET)
            .env_remove("TURNCUT_PROVIDER_API_KEY");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    fn start(&mut self) -> RunnerClient {
        let runner = RunnerProcess::start(
            &mut self.command(),
            &self.path("state"),
            &self.path("runnerd.stderr"),
            WAIT,
        )
        .unwrap();
        let client = runner.client();
        self.runner = Some(runner);
        client
    }

    fn runner_pid(&self) -> u32 {
        self.runner.as_ref().expect("a runner").pid()
    }

    /// Submits a task in the workspace and waits until it settles.
    fn run_task(&self, client: &RunnerClient, task: &str) -> Value {
        let (status, body) = client
            .create_task(task, &format!("{task}-m1"), "Go", self.profile, &self.ws())
            .unwrap();
        assert_eq!(status, 201, "{body}");
        client.wait_settled(task, WAIT).unwrap()
    }

    fn journal_facts(&self, fact: &str) -> Vec<Value> {
        wire::journal::read(&self.path("journal.jsonl"))
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == wire::journal::EntryKind::Fact)
            .map(|e| serde_json::to_value(&e).unwrap())
            .filter(|e| e["fact"] == fact)
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("runnerd.stderr")).unwrap_or_default()
    }
}

fn state(task: &Value) -> &str {
    task["state"].as_str().unwrap_or_default()
}

/// Waits (woken by the run log's stream, within [`WAIT`]) until the task's
/// run log holds an event of `kind`; returns the first.
fn wait_event(client: &RunnerClient, task: &str, kind: &str) -> Value {
    let found = std::cell::RefCell::new(None);
    client
        .wait_task(task, WAIT, |_| {
            let events = client.events(task, 0).unwrap_or_default();
            let hit = events.into_iter().find(|e| e["kind"] == kind);
            let seen = hit.is_some();
            *found.borrow_mut() = hit;
            seen
        })
        .unwrap_or_else(|e| panic!("no {kind} event: {e:#}"));
    found.into_inner().expect("found")
}

// ---- item 1: one confiner for every client tool ----

/// An ACP agent's `fs/write_text_file` to a workspace name that is a dangling
/// symlink to a file outside must be refused, whether the link's target is
/// relative or absolute and whether the agent names it by a relative or an
/// absolute path; nothing is created outside.
#[test]
fn acp_writes_through_dangling_symlinks_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    let outside_dir = outside.path().canonicalize().unwrap();
    let mut rig = Rig::new(ACP, "[[turn]]\n");
    let ws = rig.ws();
    // A link with an absolute target and one with a relative target.
    symlink(outside_dir.join("abs-target"), ws.join("abs-link")).unwrap();
    let up: PathBuf = ws.components().skip(1).map(|_| "..").collect();
    let rel_target = up.join(outside_dir.strip_prefix("/").unwrap().join("rel-target"));
    symlink(&rel_target, ws.join("rel-link")).unwrap();
    let script = format!(
        r#"
[[turn]]
tools = [
  {{ key = "abs-link-rel-path", kind = "write-file", path = "abs-link" }},
  {{ key = "abs-link-abs-path", kind = "write-file", path = "{ws}/abs-link" }},
  {{ key = "rel-link-rel-path", kind = "write-file", path = "rel-link" }},
  {{ key = "rel-link-abs-path", kind = "write-file", path = "{ws}/rel-link" }},
  {{ key = "inside", kind = "write-file", path = "sub/ok.txt" }},
]
final = "Done."
"#,
        ws = ws.display()
    );
    std::fs::write(rig.path("script.toml"), script).unwrap();
    let client = rig.start();
    let task = rig.run_task(&client, "t1");
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    for target in ["abs-target", "rel-target"] {
        assert!(
            !outside_dir.join(target).exists(),
            "{target} was created outside the workspace"
        );
    }
    let failed = rig.journal_facts("file.write_failed");
    let keys: Vec<&str> = failed
        .iter()
        .filter_map(|f| f["data"]["key"].as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "abs-link-rel-path",
            "abs-link-abs-path",
            "rel-link-rel-path",
            "rel-link-abs-path"
        ],
        "{failed:#?}"
    );
    for f in &failed {
        let error = f["data"]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("is a symbolic link, and tools do not follow symbolic links"),
            "{error}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("sub/ok.txt")).unwrap(),
        "written by inside\n"
    );
}

// ---- item 6: the credential is not readable through /proc ----

/// A command an ACP agent runs on the runner's side reads the runner's
/// initial environment (`/proc/$PPID/environ`, which the kernel keeps even
/// after the runner removed the variable) and its own; neither may hold the
/// credential, and its own environment is the tool allowlist.
#[test]
fn acp_terminal_cannot_read_the_credential_from_proc() {
    let canary = "turncut-canary-77f3";
    let script = r#"
[[turn]]
tools = [{ key = "snoop", argv = ["/bin/sh", "-c", "tr '\\0' '\\n' < /proc/$PPID/environ > parent.env; echo $PPID > parent.pid; env > own.env"] }]
final = "Done."
"#;
    let mut rig = Rig::new(ACP, script);
    rig.env
        .push(("TURNCUT_PROVIDER_API_KEY".into(), canary.into()));
    let client = rig.start();
    let task = rig.run_task(&client, "t1");
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let ws = rig.ws();
    let read = |name: &str| std::fs::read_to_string(ws.join(name)).unwrap();
    assert_eq!(read("parent.pid").trim(), rig.runner_pid().to_string());
    let parent = read("parent.env");
    assert!(
        parent.contains("PATH="),
        "the tool read the runner's environment: {parent}"
    );
    assert!(
        !parent.contains(canary),
        "the runner's /proc environ holds the key:\n{parent}"
    );
    let own = read("own.env");
    assert!(!own.contains(canary), "{own}");
    // The allowlist, plus what the shell sets itself.
    let names: Vec<&str> = own
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for name in &names {
        assert!(
            ["HOME", "LANG", "PATH", "TERM", "PWD", "SHLVL", "_"].contains(name),
            "{name} is not in the tool allowlist:\n{own}"
        );
    }
    assert!(own.contains(&format!("HOME={}\n", ws.display())), "{own}");
    // And from outside: the runner's own /proc environ.
    let environ = std::fs::read(format!("/proc/{}/environ", rig.runner_pid())).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains(canary));
}

// ---- item 8: token and key files are checked like secrets ----

/// How a runnerd start ended: listening (then killed), or its exit code and
/// standard error.
#[derive(Debug)]
enum Start {
    Listening,
    Exited(Option<i32>, String),
}

/// Starts runnerd on `state` with `extra` arguments and no credential in the
/// environment; waits for its listening line or its exit.
fn start_runnerd(state: &Path, extra: &[String]) -> Start {
    let mut cmd = RunnerCommand::via(exe()).command(state, extra);
    cmd.env_remove("TURNCUT_PROVIDER_API_KEY")
        .env_remove(cutpoint::ENV_SOCKET)
        .env_remove(cutpoint::ENV_ARM)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        let first = std::io::BufReader::new(stdout).lines().next();
        let _ = tx.send(first.and_then(Result::ok));
    });
    match rx
        .recv_timeout(WAIT)
        .expect("runnerd listens or exits in time")
    {
        Some(line) if line.starts_with("listening on ") => {
            child.kill().unwrap();
            child.wait().unwrap();
            Start::Listening
        }
        _ => {
            let out = child.wait_with_output().unwrap();
            Start::Exited(
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    }
}

fn secret_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Whether `start` is an exit 2 whose message has `fragment`; else what it was.
fn refused(start: Start, fragment: &str) -> Result<(), String> {
    match start {
        Start::Exited(Some(2), stderr) if stderr.contains(fragment) => Ok(()),
        other => Err(format!("expected exit 2 with {fragment:?}, got {other:?}")),
    }
}

/// Each bad file is its own case; every case is checked and all failures
/// are reported together.
#[test]
fn token_and_key_files_must_be_private_and_long_enough() {
    let dir = tempfile::tempdir().unwrap();
    let good = "0123456789abcdef0123456789abcdef";
    let flag = |name: &str, path: &Path| vec![name.to_owned(), path.display().to_string()];
    // A world-readable token file the runner finds in its state directory.
    let world = dir.path().join("state-world");
    std::fs::create_dir_all(&world).unwrap();
    secret_file(&world, "token", good, 0o644);
    let state = dir.path().join("state");
    let token_644 = secret_file(dir.path(), "token-644", good, 0o644);
    let token_short = secret_file(dir.path(), "token-short", "x", 0o600);
    let key_empty = secret_file(dir.path(), "key-empty", "\n", 0o600);
    let cases = [
        (
            "world-readable DIR/token",
            &world,
            vec![],
            "readable or writable by others (mode 644)",
        ),
        (
            "--token-file at 0644",
            &state,
            flag("--token-file", &token_644),
            "readable or writable by others (mode 644)",
        ),
        (
            "1-character token",
            &state,
            flag("--token-file", &token_short),
            "holds 1 bytes; at least 16 are needed",
        ),
        (
            "empty key file",
            &state,
            flag("--provider-key-file", &key_empty),
            "is empty",
        ),
    ];
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|(what, state, args, fragment)| {
            refused(start_runnerd(state, &args), fragment)
                .err()
                .map(|e| format!("{what}: {e}"))
        })
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    // The good forms still start.
    let token = secret_file(dir.path(), "token-good", good, 0o600);
    let key = secret_file(dir.path(), "key-good", "sk-1", 0o600);
    let mut args = flag("--token-file", &token);
    args.extend(flag("--provider-key-file", &key));
    assert!(matches!(start_runnerd(&state, &args), Start::Listening));
    assert!(matches!(
        start_runnerd(&dir.path().join("state-fresh"), &[]),
        Start::Listening
    ));
}

// ---- item 3: oversized input, and error answers of a provider ----

/// A rig whose `profile` runs `script` under `/bin/sh -c` as its provider.
fn scripted_provider(profile: &'static str, driver: &str, script: &str) -> Rig {
    let rig = Rig::new(profile, "[[turn]]\n");
    let command = ["/bin/sh", "-c", script];
    let profiles = format!(
        "[profile.{profile}]\ndriver = \"{driver}\"\ncommand = {}\n",
        serde_json::to_string(&command).unwrap()
    );
    std::fs::write(rig.path("profiles.toml"), profiles).unwrap();
    rig
}

const PARSE_ERROR: &str = r#"Parse error: line over 1048576 bytes"#;

/// A provider that answers the turn's request with a JSON-RPC error of id
/// null (what a provider says to a line it cannot read) fails the run with
/// `provider_protocol_error` quoting the provider, at once: the idle timeout
/// (20 s here) is longer than the deadline of this test.
#[test]
fn an_error_answer_with_a_null_id_is_a_protocol_error_at_once() {
    let acp = format!(
        r#"read l; echo '{{"jsonrpc":"2.0","id":1,"result":{{"protocolVersion":1,"agentCapabilities":{{"loadSession":true}}}}}}'
read l; echo '{{"jsonrpc":"2.0","id":2,"result":{{"sessionId":"s1"}}}}'
read l; echo '{{"jsonrpc":"2.0","id":null,"error":{{"code":-32700,"message":"{PARSE_ERROR}"}}}}'
cat > /dev/null"#
    );
    let codex = format!(
        r#"read l; echo '{{"id":1,"result":{{}}}}'
read l; read l; echo '{{"id":2,"result":{{"thread":{{"id":"th1"}}}}}}'
read l; echo '{{"id":null,"error":{{"code":-32700,"message":"{PARSE_ERROR}"}}}}'
cat > /dev/null"#
    );
    for (profile, driver, script) in [
        (ACP, "acp", acp.as_str()),
        ("runner-codex", "codex", codex.as_str()),
    ] {
        let mut rig = scripted_provider(profile, driver, script);
        rig.extra[3] = "20000".to_owned();
        let client = rig.start();
        let (status, body) = client
            .create_task("t1", "m1", "Go", profile, &rig.ws())
            .unwrap();
        assert_eq!(status, 201, "{body}");
        let task = client
            .wait_settled("t1", Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{profile}: {e}\n{}", rig.log()));
        assert_eq!(state(&task), "failed", "{profile}: {task}");
        assert_eq!(task["cause"]["code"], "provider_protocol_error", "{task}");
        let message = task["cause"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(PARSE_ERROR), "{profile}: {message}");
    }
}

/// A prompt or follow-up text over the limit is refused at admission with a
/// JSON 413 naming the limit, and nothing is admitted; a text at the limit
/// is admitted.
#[test]
fn oversized_texts_are_refused_at_admission() {
    let mut rig = Rig::new(ACP, "[[turn]]\nfinal = \"Ok.\"\n");
    let client = rig.start();
    let limit = 128 * 1024;
    let big = "x".repeat(limit + 1);
    let (status, body) = client
        .create_task("t1", "m1", &big, ACP, &rig.ws())
        .unwrap();
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["reason"], "text_too_large", "{body}");
    assert_eq!(body["limit_bytes"], limit, "{body}");
    assert_eq!(client.task("t1").unwrap().0, 404, "nothing was admitted");
    let (status, body) = client
        .create_task("t1", "m1", &big[1..], ACP, &rig.ws())
        .unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let (status, body) = client.follow_up("t1", "f1", &big).unwrap();
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["reason"], "text_too_large", "{body}");
    // The 1 MB prompt of the report: refused, not a false provider_start_failed.
    let (status, body) = client
        .create_task("t2", "m2", &"y".repeat(1_000_000), ACP, &rig.ws())
        .unwrap();
    assert_eq!((status, &body["reason"]), (413, &json!("text_too_large")));
    // A body over the body limit is refused before it is read.
    let runner = rig.runner.as_ref().unwrap();
    let (status, body) = raw_post(&runner.base, &runner.token, "/v1/tasks", 2 << 20);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["reason"], "body_too_large", "{body}");
    assert_eq!(body["limit_bytes"], 1 << 20, "{body}");
}

/// POSTs a request that announces `content_length` bytes and sends one; the
/// answer is read without sending the rest (a server that waited for it
/// would time the read out).
fn raw_post(base: &str, token: &str, path: &str, content_length: usize) -> (u16, Value) {
    use std::io::{Read as _, Write as _};
    let addr = base.trim_start_matches("http://");
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        tcp,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {content_length}\r\nConnection: close\r\n\r\n{{"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

// ---- item 4: every task has its own provider directory ----

#[test]
fn tasks_whose_ids_differ_only_in_punctuation_have_their_own_provider_state() {
    let mut rig = Rig::new(ACP, "[[turn]]\nfinal = \"Ok.\"\n");
    let client = rig.start();
    // `col/1` travels percent-encoded in URLs.
    for (id, url_id) in [
        ("col/1", "col%2F1"),
        ("col.1", "col.1"),
        ("col 1", "col%201"),
    ] {
        let (status, body) = client
            .create_task(id, &format!("m-{url_id}"), "Go", ACP, &rig.ws())
            .unwrap();
        assert_eq!(status, 201, "{body}");
        let task = client.wait_settled(url_id, WAIT).unwrap();
        assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
        assert_eq!(task["task_id"], id);
    }
    let dirs: Vec<String> = std::fs::read_dir(rig.path("state/providers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(dirs.len(), 3, "{dirs:?}");
    // Each provider directory holds the one conversation of its task.
    for dir in &dirs {
        let turns = fake_provider::acp::recorded_turns(&rig.path("state/providers").join(dir));
        assert_eq!(turns.len(), 1, "{dir}: {turns:?}");
    }
}

// ---- item 5: the workspace is validated at admission ----

#[test]
fn bad_workspaces_are_refused_at_admission() {
    let mut rig = Rig::new(ACP, "[[turn]]\n");
    let client = rig.start();
    let ws = rig.ws();
    std::fs::write(ws.join("file"), "x").unwrap();
    symlink(&ws, rig.path("ws-link")).unwrap();
    let cases = [
        ws.join("missing").display().to_string(),
        ws.join("file").display().to_string(),
        "/".to_owned(),
        format!("{}/../ws", ws.display()),
        format!("{}/./", ws.display()),
        format!("{}/", ws.display()),
        rig.path("ws-link").display().to_string(),
        format!("{}\u{0}x", ws.display()),
        "relative/ws".to_owned(),
    ];
    let mut failures = Vec::new();
    for (i, workspace) in cases.iter().enumerate() {
        let (status, body) = client
            .post(
                "/v1/tasks",
                &json!({ "task_id": format!("t{i}"), "message_id": "m", "prompt": "Go",
                         "profile": ACP, "workspace": workspace }),
            )
            .unwrap();
        if (status, &body["reason"]) != (400, &json!("invalid_workspace")) {
            failures.push(format!("{workspace:?}: {status} {body}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    for i in 0..cases.len() {
        assert_eq!(
            client.task(&format!("t{i}")).unwrap().0,
            404,
            "nothing admitted"
        );
    }
}

// ---- item 7: every error is JSON with a reason ----

#[test]
fn every_error_answer_is_json_with_a_reason() {
    let mut rig = Rig::new(ACP, "[[turn]]\n");
    let client = rig.start();
    let base = rig.runner.as_ref().unwrap().base.clone();
    let cases: [(&str, u16, &str); 6] = [
        ("/v1/nope", 404, "no_route"),
        ("/v1/tasks", 405, "method_not_allowed"),
        ("/v1/tasks/t1/retry", 405, "method_not_allowed"),
        ("/v1/tasks/t1/events?after=abc", 400, "bad_query"),
        ("/v1/tasks/%FF", 400, "bad_path"),
        ("/v1/tasks/unknown", 404, "unknown_task"),
    ];
    let mut failures = Vec::new();
    for (path, status, reason) in cases {
        let (got, body) = client.get(path).unwrap();
        if (got, &body["reason"]) != (status, &json!(reason)) || !body["error"].is_string() {
            failures.push(format!(
                "GET {path}: {got} {body}, expected {status} {reason}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let (status, body) = RunnerClient::new(&base, "wrong").get("/v1/health").unwrap();
    assert_eq!((status, &body["reason"]), (401, &json!("unauthorized")));
    let (status, body) = client.post_raw("/v1/tasks", "{not json").unwrap();
    assert_eq!((status, &body["reason"]), (400, &json!("bad_json")));
    let (status, body) = client
        .post("/v1/tasks", &json!({ "task_id": "", "message_id": "m", "prompt": "p", "profile": ACP, "workspace": rig.ws() }))
        .unwrap();
    assert_eq!((status, &body["reason"]), (400, &json!("invalid_id")));
}
