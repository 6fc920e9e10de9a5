//! Starting a runner process and talking to its control API over HTTP.
//!
//! This is how the harness sees a runner: a process it starts (and kills with
//! signals through `supervisor`) and the HTTP API of DESIGN §3.1. Nothing here
//! links runner code, so any runner with the same API can be driven. Waits are
//! on the run log's server-sent events, each with a deadline; nothing sleeps.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::model::TaskState;
use crate::supervisor::GroupChild;

/// The task as `GET /v1/tasks/{id}` shows it. Typed views refuse unknown
/// fields: a runner that renames a field fails loudly (the oracles that read
/// the view say `unknown`) instead of being judged on nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskView {
    /// The task id.
    pub task_id: String,
    /// The profile.
    pub profile: String,
    /// The workspace.
    pub workspace: String,
    /// Its state.
    pub state: TaskState,
    /// Why it failed.
    pub cause: Option<CauseView>,
    /// The run executing or last executed.
    pub current_run: Option<String>,
    /// Every run, oldest first.
    pub runs: Vec<RunView>,
    /// Accepted messages no primary turn has consumed yet (message ids).
    pub queued_messages: Vec<String>,
    /// What a Retry would deliver now (a failed task only; optional: a
    /// runner without it is judged without it).
    #[serde(default)]
    pub retry_would_deliver: Option<RetryDeliveryView>,
}

/// What a Retry of a failed task would deliver.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDeliveryView {
    /// The message whose text it re-sends under its own id, if any.
    pub resends: Option<String>,
    /// The queued messages its run answers after it.
    pub then: Vec<String>,
}

/// A run of a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunView {
    /// The run id.
    pub run_id: String,
    /// The task id.
    pub task_id: String,
    /// `initial`, `follow_up` or `retry`.
    pub kind: String,
    /// The message that started the run.
    pub trigger_message_id: String,
    /// `running`, `completed` or `failed`.
    pub status: String,
    /// Why it failed.
    pub cause: Option<CauseView>,
    /// The provider conversation.
    pub conversation_id: Option<String>,
    /// The runner epoch that owned it.
    pub owner_epoch: i64,
    /// When it was created.
    pub created_ms: i64,
    /// Its turns, in order.
    pub turns: Vec<TurnView>,
}

/// A turn of a run: one provider turn (or its intent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnView {
    /// The row id (run-log events refer to it).
    pub turn_row: i64,
    /// The run.
    pub run_id: String,
    /// The controller message it answers.
    pub message_id: String,
    /// `primary` or `continuation`.
    pub kind: String,
    /// The id sent to the provider.
    pub client_id: String,
    /// The provider's turn id, once accepted.
    pub provider_turn_id: Option<String>,
    /// `intent`, `accepted`, `completed`, `interrupted` or `failed`.
    pub status: String,
}

/// A structured cause.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CauseView {
    /// The closed-set code.
    pub code: String,
    /// Whether the runner recovers by itself.
    pub recoverable: bool,
    /// A sentence for a person.
    pub message: String,
}

/// Reads a task view, naming what does not fit.
pub fn task_view(v: &Value) -> Result<TaskView, String> {
    TaskView::deserialize(v).map_err(|e| format!("the task view does not parse: {e}"))
}

/// A running runner process.
pub struct RunnerProcess {
    child: GroupChild,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The bearer token.
    pub token: String,
    /// The one client every [`RunnerProcess::client`] clones: one pool of
    /// connections, one record of the run-log events seen.
    client: RunnerClient,
}

impl RunnerProcess {
    /// Starts `cmd` (a runnerd command line, whose `--state-dir` is `state_dir`),
    /// waits for its `listening on http://ADDR` line, and reads its token.
    /// Standard error goes to `stderr_log` (appended).
    pub fn start(
        cmd: &mut Command,
        state_dir: &Path,
        stderr_log: &Path,
        deadline: Duration,
    ) -> anyhow::Result<RunnerProcess> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stderr_log)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = GroupChild::spawn(cmd)?;
        let stdout = child.inner().stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first);
            // Keep draining so the runner never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(deadline) {
            Ok(Some(Ok(line))) => line,
            Ok(_) => {
                let status = child.wait()?;
                let log = std::fs::read_to_string(stderr_log).unwrap_or_default();
                anyhow::bail!(
                    "the runner exited ({status}) before listening: {}",
                    tail(&log, 800)
                );
            }
            Err(_) => anyhow::bail!(
                "the runner did not print its listening line within {} ms",
                deadline.as_millis()
            ),
        };
        let base = line
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow::anyhow!("unexpected first line from the runner: {line:?}"))?
            .trim()
            .to_owned();
        let token = std::fs::read_to_string(state_dir.join("token"))?
            .trim()
            .to_owned();
        let client = RunnerClient::new(&base, &token);
        Ok(RunnerProcess {
            child,
            base,
            token,
            client,
        })
    }

    /// The runner's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// SIGKILLs the runner (its own process group only: providers live in
    /// groups of their own and survive, as they would a real crash).
    pub fn kill(mut self) -> std::io::Result<()> {
        self.child.kill().map(|_| ())
    }

    /// A client for the API (a clone of this runner's one: its connections
    /// are reused).
    pub fn client(&self) -> RunnerClient {
        self.client.clone()
    }
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    &s[start..]
}

/// A client for the control API.
#[derive(Clone)]
pub struct RunnerClient {
    base: String,
    token: String,
    agent: ureq::Agent,
    /// The highest run-log seq each task's event stream has shown this
    /// client and its clones: a later wait's stream starts after it
    /// instead of sending the task's whole run log again.
    seen: Arc<Mutex<HashMap<String, i64>>>,
}

/// An HTTP answer: status and JSON body (`Null` when the body is not JSON).
pub type Answer = (u16, Value);

impl RunnerClient {
    /// A client for `base` with `token`.
    pub fn new(base: &str, token: &str) -> RunnerClient {
        // Each phase of a request has 30 s, not the request as a whole: with
        // a whole-request timeout ureq resolves the address on a thread of
        // its own, one thread per request (a runner's address is an IP and
        // port, resolved without a lookup). Buffers of 16 KiB, not 128: a
        // runner's answers are small, and each connection's buffers were
        // zeroed anew.
        let phase = Some(Duration::from_secs(30));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_connect(phase)
            .timeout_send_request(phase)
            .timeout_send_body(phase)
            .timeout_recv_response(phase)
            .timeout_recv_body(phase)
            .input_buffer_size(16 * 1024)
            .output_buffer_size(16 * 1024)
            .build()
            .into();
        RunnerClient {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            agent,
            seen: Arc::default(),
        }
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> anyhow::Result<Answer> {
        let mut r = r?;
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string()?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// POST a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        Self::answer(
            self.agent
                .post(format!("{}{path}", self.base))
                .header("Authorization", &self.auth())
                .send_json(body),
        )
    }

    /// POST raw bytes (for bad-input tests).
    pub fn post_raw(&self, path: &str, body: &str) -> anyhow::Result<Answer> {
        Self::answer(
            self.agent
                .post(format!("{}{path}", self.base))
                .header("Authorization", &self.auth())
                .header("Content-Type", "application/json")
                .send(body),
        )
    }

    /// GET a JSON document.
    pub fn get(&self, path: &str) -> anyhow::Result<Answer> {
        Self::answer(
            self.agent
                .get(format!("{}{path}", self.base))
                .header("Authorization", &self.auth())
                .call(),
        )
    }

    /// `POST /v1/tasks`.
    pub fn create_task(
        &self,
        task_id: &str,
        message_id: &str,
        prompt: &str,
        profile: &str,
        workspace: &Path,
    ) -> anyhow::Result<Answer> {
        self.post(
            "/v1/tasks",
            &json!({
                "task_id": task_id, "message_id": message_id, "prompt": prompt,
                "profile": profile, "workspace": workspace.display().to_string(),
            }),
        )
    }

    /// `POST /v1/tasks/{id}/messages`.
    pub fn follow_up(&self, task_id: &str, message_id: &str, text: &str) -> anyhow::Result<Answer> {
        self.post(
            &format!("/v1/tasks/{task_id}/messages"),
            &json!({ "message_id": message_id, "text": text }),
        )
    }

    /// `POST /v1/tasks/{id}/retry`.
    pub fn retry(&self, task_id: &str, message_id: &str) -> anyhow::Result<Answer> {
        self.post(
            &format!("/v1/tasks/{task_id}/retry"),
            &json!({ "message_id": message_id }),
        )
    }

    /// `GET /v1/tasks/{id}`.
    pub fn task(&self, task_id: &str) -> anyhow::Result<Answer> {
        self.get(&format!("/v1/tasks/{task_id}"))
    }

    /// The whole run log after `after`.
    pub fn events(&self, task_id: &str, after: i64) -> anyhow::Result<Vec<Value>> {
        self.events_within(task_id, after, Duration::from_secs(30))
    }

    /// The whole run log after `after`, or an error after `timeout` (a
    /// runner whose store is blocked on a held write cannot answer).
    pub fn events_within(
        &self,
        task_id: &str,
        after: i64,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Value>> {
        let mut r = self
            .agent
            .get(format!(
                "{}/v1/tasks/{task_id}/events?after={after}",
                self.base
            ))
            .header("Authorization", &self.auth())
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()?;
        let status = r.status();
        let text = r.body_mut().read_to_string()?;
        anyhow::ensure!(status == 200, "events answered {status}: {text}");
        text.lines()
            .filter(|l| !l.is_empty())
            .map(|l| Ok(serde_json::from_str(l)?))
            .collect()
    }

    /// Waits until the task's state satisfies `pred`, woken by the run log's
    /// event stream; fails at the deadline with the last state seen.
    pub fn wait_task(
        &self,
        task_id: &str,
        deadline: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let until = Instant::now() + deadline;
        let wake = self.subscribe(task_id)?;
        loop {
            let (status, task) = self.task(task_id)?;
            if status == 200 && pred(&task) {
                return Ok(task);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                anyhow::bail!(
                    "task {task_id} did not reach the expected state within {} ms; last: {task}",
                    deadline.as_millis()
                );
            }
            match wake.wake.recv_timeout(left) {
                // Every wake already queued is answered by the one read that
                // follows: a burst of events is one GET, not one per event.
                Ok(first) => {
                    let mut woke = first;
                    while let Ok(next) = wake.wake.try_recv() {
                        woke = woke.and(next);
                    }
                    woke.map_err(anyhow::Error::msg)?;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    anyhow::bail!("the runner's event stream for {task_id} closed; last: {task}")
                }
            }
        }
    }

    /// Waits until the task is settled (completed, failed or needs_human).
    pub fn wait_settled(&self, task_id: &str, deadline: Duration) -> anyhow::Result<Value> {
        self.wait_task(task_id, deadline, |t| {
            matches!(
                t["state"].as_str(),
                Some("completed" | "failed" | "needs_human")
            )
        })
    }

    /// The first `n` `data:` lines of the task's event stream (the backlog
    /// first), or an error after `deadline`.
    pub fn sse_lines(
        &self,
        task_id: &str,
        n: usize,
        deadline: Duration,
    ) -> anyhow::Result<Vec<String>> {
        let r = self
            .agent
            .get(format!("{}/v1/tasks/{task_id}/events", self.base))
            .header("Authorization", &self.auth())
            .header("Accept", "text/event-stream")
            .config()
            .timeout_global(Some(deadline))
            .build()
            .call()?;
        anyhow::ensure!(r.status() == 200, "event stream answered {}", r.status());
        let mut out = Vec::new();
        for line in BufReader::new(r.into_body().into_reader()).lines() {
            if let Some(data) = line?.strip_prefix("data:") {
                out.push(data.trim_start().to_owned());
                if out.len() == n {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// A wake-up per change of the task's run log: the task's SSE stream
    /// after the last event a stream of this client showed (the waiter reads
    /// the task once subscribed, so what came before is in that read), read
    /// on a thread. Any bytes from the stream wake the waiter (an event,
    /// or the 15 s keep-alive: a spare wake only re-reads the task). The
    /// stream is a connection of its own, shut down when the subscription is
    /// dropped: a waiter that is done must not leave it open (a runner holds
    /// a bounded number of connections; 256 settled waits of a crash round
    /// once took them all and the next request was answered 503).
    fn subscribe(&self, task_id: &str) -> anyhow::Result<Subscription> {
        use std::io::Write as _;
        let addr = self
            .base
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("the runner's address {} is not http://", self.base))?;
        let after = self.seen_lock().get(task_id).copied().unwrap_or(0);
        let stream = std::net::TcpStream::connect(addr)?;
        let mut request = stream.try_clone()?;
        write!(
            request,
            "GET /v1/tasks/{task_id}/events?after={after} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n",
            self.auth()
        )?;
        let reader = BufReader::new(stream.try_clone()?);
        let (tx, rx) = mpsc::channel();
        let (seen, task) = (self.seen.clone(), task_id.to_owned());
        std::thread::spawn(move || read_stream(reader, &tx, &seen, &task));
        Ok(Subscription { wake: rx, stream })
    }

    fn seen_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Reads a subscription's stream on its own thread: its status line, then
/// a wake-up per read, noting each event's seq. The status is read here,
/// not before the waiter's first read of the task: a server may hold an SSE
/// answer's head until it has a first event to send (Node's `http` does,
/// the TypeScript example runner's stream after a seq with nothing newer),
/// and the waiter then waited for the next event or keep-alive (15 s).
fn read_stream(
    mut reader: BufReader<std::net::TcpStream>,
    tx: &mpsc::Sender<Result<(), String>>,
    seen: &Mutex<HashMap<String, i64>>,
    task: &str,
) {
    use std::io::Read as _;
    let mut status = String::new();
    let _ = reader.read_line(&mut status);
    if status.split_whitespace().nth(1) != Some("200") {
        let _ = tx.send(Err(format!("event stream answered {}", status.trim_end())));
        return;
    }
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    while let Ok(n @ 1..) = reader.read(&mut buf) {
        for b in &buf[..n] {
            if *b == b'\n' {
                note_seq(seen, task, &line);
                line.clear();
            } else {
                line.push(*b);
            }
        }
        if tx.send(Ok(())).is_err() {
            return;
        }
    }
}

/// Records the seq of an event's `id:` line of task `task`'s stream (any
/// other line is left alone).
fn note_seq(seen: &Mutex<HashMap<String, i64>>, task: &str, line: &[u8]) {
    let Some(seq) = line
        .strip_prefix(b"id:")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
    else {
        return;
    };
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let at = seen.entry(task.to_owned()).or_insert(seq);
    *at = (*at).max(seq);
}

/// A task's run-log stream as wake-ups ([`RunnerClient::subscribe`]); its
/// connection is shut down on drop.
struct Subscription {
    /// A wake-up, or the stream's refusal (its status line).
    wake: mpsc::Receiver<Result<(), String>>,
    stream: std::net::TcpStream,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// How to start runnerd from the `turncut` build.
#[derive(Clone, Debug)]
pub struct RunnerCommand {
    /// Program and leading arguments that reach runnerd (`turncut runnerd`).
    pub program: Vec<String>,
}

impl RunnerCommand {
    /// runnerd reached through this very binary (`<exe> runnerd`).
    pub fn via(exe: &Path) -> RunnerCommand {
        RunnerCommand {
            program: vec![exe.display().to_string(), "runnerd".to_owned()],
        }
    }

    /// A command for `--state-dir state_dir` plus `extra`.
    pub fn command(&self, state_dir: &Path, extra: &[String]) -> Command {
        let mut cmd = Command::new(&self.program[0]);
        cmd.args(&self.program[1..])
            .arg("--state-dir")
            .arg(state_dir)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(extra)
            .env(cutpoint::ENV_ROLE, crate::model::Role::Runner.as_str());
        cmd
    }
}

/// Writes `dir/profiles.toml`, a profiles file in which `profile` runs its
/// fake provider from the `turncut` build `exe` with `script`, the journal
/// `dir/journal.jsonl` and the ledger `dir/ledger.jsonl`; returns its path.
pub fn write_fake_profile(
    exe: &Path,
    profile: &str,
    dir: &Path,
    script: &Path,
) -> anyhow::Result<PathBuf> {
    let Some(b) = wire::profiles::builtin(profile) else {
        anyhow::bail!("profile {profile} has no fake provider");
    };
    let (driver, fake, extra) = (b.protocol.as_str(), b.fake, b.fake_args);
    let p = |name: &str| dir.join(name).display().to_string();
    let mut command: Vec<String> = vec![
        exe.display().to_string(),
        "fake-provider".into(),
        fake.into(),
        "--state-dir".into(),
        "{provider_dir}".into(),
        "--journal".into(),
        p("journal.jsonl"),
        "--ledger".into(),
        p("ledger.jsonl"),
        "--script".into(),
        script.display().to_string(),
    ];
    command.extend(extra.iter().map(|s| s.to_string()));
    let profiles = format!(
        "[profile.{profile}]\ndriver = \"{driver}\"\ncommand = {}\ncredential_fifo = true\n",
        serde_json::to_string(&command)?
    );
    let path = dir.join("profiles.toml");
    std::fs::write(&path, profiles)?;
    Ok(path)
}

/// Every regular file under `dir`, sorted (sockets and the like are skipped;
/// a directory that cannot be listed is skipped too: see [`walk_files`]).
pub fn state_files(dir: &Path) -> Vec<PathBuf> {
    walk_files(dir).0
}

/// Every regular file under `dir`, sorted, and the directories or entries
/// that could not be read (with the error). A missing `dir` is no error.
pub fn walk_files(dir: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    if !dir.exists() {
        return (out, problems);
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        for e in entries {
            let p = match e {
                Ok(e) => e.path(),
                Err(e) => {
                    problems.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    (out, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner that holds its event stream's head until it has an event
    /// (the way Node's `http` answers an SSE request with an empty backlog)
    /// and has none: the stream is closed after `hold` (a bound, so that a
    /// waiter stuck on the head fails instead of hanging), while every other
    /// request reads a completed task.
    fn runner_holding_its_stream_head(hold: Duration) -> String {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                        head.push(byte[0]);
                    }
                    if String::from_utf8_lossy(&head).contains("/events") {
                        let mut rest = [0u8; 1];
                        let _ = conn.set_read_timeout(Some(hold));
                        let _ = conn.read(&mut rest);
                        return;
                    }
                    let body = r#"{"task_id":"t","state":"completed"}"#;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        base
    }

    #[test]
    fn a_wait_reads_the_task_before_the_stream_has_sent_its_head() {
        let base = runner_holding_its_stream_head(Duration::from_secs(30));
        let client = RunnerClient::new(&base, "token");
        let task = client
            .wait_settled("t", Duration::from_secs(60))
            .expect("the task is read at once, whatever the stream does");
        assert_eq!(task["state"], "completed");
    }

    #[test]
    fn a_streams_id_lines_raise_the_tasks_seq_and_nothing_else_does() {
        let seen = Mutex::new(HashMap::new());
        for line in [
            &b"data: {\"seq\":9}"[..],
            b"id: 4",
            b"id:7",
            b"id: 5",
            b": keep-alive",
            b"id: x",
        ] {
            note_seq(&seen, "t1", line);
        }
        note_seq(&seen, "t2", b"data: id: 99");
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.get("t1"), Some(&7));
        assert_eq!(seen.get("t2"), None);
    }
}
