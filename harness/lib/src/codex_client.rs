//! A small synchronous Codex app-server client over a child's stdio.
//!
//! It drives `fake-provider codex` (or a real `codex app-server`) through
//! handshakes and turns for the demo and the conformance tests (and, with
//! `jsonrpc`, an ACP agent for `turncut fidelity`), and keeps a
//! transcript of every message both ways so a test can validate each one
//! against the published schema. Every wait has a deadline; nothing sleeps.
//! It is not the runner's Codex driver and has no recovery logic.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::supervisor::GroupChild;

/// Which way a transcript message travelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Sent by this client.
    Sent,
    /// Received from the server.
    Received,
}

/// Errors from the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing matching arrived before the deadline.
    #[error("timed out after {ms} ms waiting for {waiting_for}")]
    Timeout { waiting_for: String, ms: u128 },
    /// The server's stdout closed (it exited or was killed).
    #[error("the server closed its stdout while we waited for {waiting_for}")]
    Closed { waiting_for: String },
    /// The server answered with a JSON-RPC error.
    #[error("{method} failed with {code}: {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
    /// Spawning or writing failed.
    #[error("failed to talk to the server: {0}")]
    Io(#[from] std::io::Error),
}

enum FromServer {
    Msg(Value),
    Unparsable(String),
    Eof,
}

/// A running server and the client end of its stdio.
pub struct CodexClient {
    child: GroupChild,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<FromServer>,
    inbox: VecDeque<Value>,
    next_id: i64,
    closed: bool,
    /// Every message both ways, in order.
    pub transcript: Vec<(Dir, Value)>,
    /// Lines from the server that were not JSON (a conformance failure).
    pub unparsable: Vec<String>,
    /// Deadline for each wait.
    pub timeout: Duration,
    /// Requests carry `"jsonrpc": "2.0"` (ACP; Codex sends no such field).
    pub jsonrpc: bool,
}

/// How a turn driven by [`CodexClient::run_turn`] ended.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// The provider's turn id.
    pub turn_id: String,
    /// `completed`, `interrupted` or `failed`.
    pub status: String,
    /// Texts of the completed agent messages.
    pub agent_messages: Vec<String>,
    /// How many approvals were requested.
    pub approvals: usize,
}

impl CodexClient {
    /// Spawns `cmd` with piped stdio in its own process group.
    pub fn spawn(cmd: &mut Command) -> Result<CodexClient, ClientError> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = GroupChild::spawn(cmd)?;
        let stdin = child.inner().stdin.take();
        let stdout = child.inner().stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let msg = match serde_json::from_str(&line) {
                    Ok(v) => FromServer::Msg(v),
                    Err(_) => FromServer::Unparsable(line),
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
            let _ = tx.send(FromServer::Eof);
        });
        Ok(CodexClient {
            child,
            stdin,
            rx,
            inbox: VecDeque::new(),
            next_id: 0,
            closed: false,
            transcript: Vec::new(),
            unparsable: Vec::new(),
            timeout: Duration::from_secs(10),
            jsonrpc: false,
        })
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Sends one message as a line.
    pub fn send(&mut self, msg: Value) -> Result<(), ClientError> {
        self.send_raw(&serde_json::to_vec(&msg).expect("messages serialize"))?;
        self.transcript.push((Dir::Sent, msg));
        Ok(())
    }

    /// Sends raw bytes followed by a newline (for malformed-input tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin already closed")
        })?;
        stdin.write_all(bytes)?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Sends a request and returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<i64, ClientError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if self.jsonrpc {
            msg["jsonrpc"] = json!("2.0");
        }
        self.send(msg)?;
        Ok(id)
    }

    /// Sends a request and waits for its result; other messages are queued.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.send_request(method, params)?;
        let response = self.wait_response(id, method)?;
        match response.get("error") {
            Some(err) => Err(ClientError::Rpc {
                method: method.to_owned(),
                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            }),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// Waits for the response (result or error) to request `id`.
    pub fn wait_response(&mut self, id: i64, what: &str) -> Result<Value, ClientError> {
        let is_response = |m: &Value| {
            m.get("id").and_then(Value::as_i64) == Some(id) && m.get("method").is_none()
        };
        self.wait_for(&format!("the response to {what}"), is_response)
    }

    /// The handshake: `initialize`, then `initialized`.
    pub fn initialize(&mut self) -> Result<Value, ClientError> {
        let result = self.request(
            "initialize",
            json!({ "clientInfo": { "name": "turncut", "title": null, "version": env!("CARGO_PKG_VERSION") } }),
        )?;
        self.send(json!({ "method": "initialized" }))?;
        Ok(result)
    }

    /// Starts a thread in `cwd` and returns its id.
    pub fn thread_start(&mut self, cwd: &str) -> Result<String, ClientError> {
        let result = self.request("thread/start", json!({ "cwd": cwd }))?;
        Ok(result
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }

    /// Next message from the server, in arrival order.
    pub fn next_message(&mut self, waiting_for: &str) -> Result<Value, ClientError> {
        if let Some(m) = self.inbox.pop_front() {
            return Ok(m);
        }
        self.receive(waiting_for, Instant::now() + self.timeout)
    }

    /// Waits until a message matching `pred` arrives and returns it; earlier
    /// non-matching messages stay queued for [`CodexClient::next_message`].
    pub fn wait_for(
        &mut self,
        waiting_for: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, ClientError> {
        if let Some(i) = self.inbox.iter().position(&pred) {
            return Ok(self.inbox.remove(i).expect("index is in range"));
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            let m = self.receive(waiting_for, deadline)?;
            if pred(&m) {
                return Ok(m);
            }
            self.inbox.push_back(m);
        }
    }

    /// Removes and returns the messages received but not yet consumed.
    pub fn take_queued(&mut self) -> Vec<Value> {
        self.inbox.drain(..).collect()
    }

    /// Waits up to `window` for any message; `Ok(None)` when none came.
    pub fn expect_silence(&mut self, window: Duration) -> Result<Option<Value>, ClientError> {
        if let Some(m) = self.inbox.pop_front() {
            return Ok(Some(m));
        }
        match self.receive("silence", Instant::now() + window) {
            Ok(m) => Ok(Some(m)),
            Err(ClientError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn receive(&mut self, waiting_for: &str, deadline: Instant) -> Result<Value, ClientError> {
        loop {
            if self.closed {
                return Err(ClientError::Closed {
                    waiting_for: waiting_for.to_owned(),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(FromServer::Msg(m)) => {
                    self.transcript.push((Dir::Received, m.clone()));
                    return Ok(m);
                }
                Ok(FromServer::Unparsable(line)) => self.unparsable.push(line),
                Ok(FromServer::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    self.closed = true;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(ClientError::Timeout {
                        waiting_for: waiting_for.to_owned(),
                        ms: self.timeout.as_millis().min(left.as_millis().max(1)),
                    });
                }
            }
        }
    }

    /// Starts a turn and plays it to its end, answering each approval with
    /// `decide(approval_request)`.
    pub fn run_turn(
        &mut self,
        thread_id: &str,
        text: &str,
        client_id: Option<&str>,
        mut decide: impl FnMut(&Value) -> &'static str,
    ) -> Result<TurnOutcome, ClientError> {
        let result = self.request(
            "turn/start",
            json!({
                "threadId": thread_id,
                "input": [{ "type": "text", "text": text, "text_elements": [] }],
                "clientUserMessageId": client_id,
            }),
        )?;
        let turn_id = result
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut outcome = TurnOutcome {
            turn_id: turn_id.clone(),
            status: String::new(),
            agent_messages: Vec::new(),
            approvals: 0,
        };
        loop {
            let m = self.next_message("the end of the turn")?;
            let method = m.get("method").and_then(Value::as_str).unwrap_or_default();
            match method {
                "item/commandExecution/requestApproval" => {
                    outcome.approvals += 1;
                    let decision = decide(&m);
                    self.send(json!({ "id": m["id"], "result": { "decision": decision } }))?;
                }
                "item/completed"
                    if m.pointer("/params/item/type") == Some(&json!("agentMessage")) =>
                {
                    let text = m.pointer("/params/item/text").and_then(Value::as_str);
                    outcome
                        .agent_messages
                        .push(text.unwrap_or_default().to_owned());
                }
                "turn/completed" if m.pointer("/params/turn/id") == Some(&json!(turn_id)) => {
                    outcome.status = m
                        .pointer("/params/turn/status")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    return Ok(outcome);
                }
                _ => {}
            }
        }
    }

    /// Closes stdin (the server should exit) and waits for it.
    pub fn close(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.stdin.take();
        self.child.wait()
    }

    /// Closes stdin, as a client that is done does, and waits at most
    /// `within` for the server to close its stdout (it exits); its group is
    /// SIGKILLed after that either way, so nothing of it outlives the call.
    /// Whether it ended by itself in time.
    pub fn close_within(mut self, within: Duration) -> bool {
        self.stdin.take();
        let deadline = Instant::now() + within;
        let ended = loop {
            match self.receive("the server's exit", deadline) {
                Ok(_) => {}
                Err(ClientError::Closed { .. }) => break true,
                Err(_) => break false,
            }
        };
        let _ = self.child.kill();
        ended
    }

    /// SIGKILLs the server's process group.
    pub fn kill(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.kill()
    }

    /// Waits for the server to exit by itself (e.g. after an `--exit` point).
    pub fn wait_exit(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}
