//! `fake-provider model-api`: a fake OpenAI-Responses-compatible model API
//! (`POST /v1/responses`) on loopback, whose model is the script.
//!
//! What it simulates: `stream: true` answers Server-Sent Events in the real
//! order and shapes (`response.created`, `response.in_progress`, per output
//! item `response.output_item.added` … `response.output_item.done` with the
//! content-part, text-delta and function-call-argument events in between, and
//! `response.completed` carrying the whole response with `output` and
//! `usage`); `stream: false` answers the final response object. A request
//! plays the script turn of its latest user message: the turn's `say` chunks
//! as one assistant message and a `function_call` per tool, whose arguments
//! hold the shell command line of the `effect` tool; once every call has its
//! `function_call_output`, the `final` message. The function's name and
//! argument shape follow the request's `tools` (`Bash {command: string}`,
//! Codex's `shell {command: [argv]}`, `shell_command`, `exec_command {cmd}`),
//! so the real `codex app-server` runs full turns against it offline.
//!
//! Turn identity is `metadata.turncut_message_id`, else a stable hash of the
//! latest user message's text and the number of user messages (the real Codex
//! sends no metadata); the conversation is `metadata.turncut_conversation`,
//! else `prompt_cache_key`, else `default`. The first distinct message id of a
//! conversation plays script turn 1, the next turn 2, the same id again the
//! same turn (the naive model of the other fakes). A tool whose output starts
//! with `uncertain:` or reports a failure is called again once, unless the
//! ledger already holds its effect for that message id.
//!
//! Deliberately not simulated: tokenization (usage is a byte estimate),
//! reasoning items, `previous_response_id` and stored responses, background
//! responses, tool choice, structured outputs, other endpoints (they answer
//! 404 with an OpenAI error body), and the echo of `instructions` and `tools`
//! in the response object (kept `null`/`[]` so the journal stays small).

pub mod store;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::faults::Faults;
use crate::journal::{Journal, now_ms};
use crate::script::{Script, ScriptTurn};
use store::{CallRecord, Store, TurnRecord, TurnStatus};

/// How many times one effect key may be called within a turn (the first call
/// and one retry after an uncertain or failed outcome).
pub const CALLS_PER_KEY_MAX: usize = 2;

/// The model name reported when a request names none.
pub const FAKE_MODEL: &str = "turncut-fake-model";

/// Everything `fake-provider model-api` needs to run.
#[derive(Debug)]
pub struct ModelApiOptions {
    /// Durable store directory.
    pub state_dir: PathBuf,
    /// Journal file.
    pub journal: Option<PathBuf>,
    /// Effect ledger file.
    pub ledger: PathBuf,
    /// The scripted model.
    pub script: Script,
    /// Armed `--exit`/`--hang` points.
    pub faults: Faults,
    /// The command line that reaches `fake-provider`; tools run `<this> effect …`.
    pub self_cmd: Vec<OsString>,
    /// The bound listener (loopback).
    pub listener: std::net::TcpListener,
}

/// Binds `127.0.0.1:port`; the error is a sentence for the user (exit code 2).
pub fn bind(port: u16) -> Result<std::net::TcpListener, String> {
    crate::opencode::bind("127.0.0.1", port)
}

/// Serves until stdin closes or SIGTERM arrives, then exits the process with 0.
pub fn serve(opts: ModelApiOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.state_dir)?;
    let journal = Journal::open(opts.journal.as_deref())?;
    let store = Store::open(&opts.state_dir, journal.generation())?;
    let addr = opts.listener.local_addr()?;
    opts.listener.set_nonblocking(true)?;
    journal.fact(
        "process.started",
        json!({ "pid": std::process::id(), "protocol": "model-api", "port": addr.port() }),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = opts.listener.try_clone()?;
    let shared = Arc::new(Shared {
        journal,
        store: Mutex::new(store),
        opts,
    });
    let stdin_shared = Arc::clone(&shared);
    crate::stdio::exit_when_stdin_closes(move || {
        stdin_shared.journal.fact("process.stdin_closed", json!({}));
    });
    runtime.block_on(async move {
        let app = axum::Router::new()
            .route("/v1/responses", post(responses))
            .fallback(fallback)
            .with_state(Arc::clone(&shared));
        crate::http::serve(listener, app, "model api", &shared.journal).await
    })?;
    std::process::exit(0);
}

struct Shared {
    opts: ModelApiOptions,
    journal: Journal,
    store: Mutex<Store>,
}

impl Shared {
    fn point(&self, name: &str) {
        self.opts.faults.point(name, &self.journal);
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        // The store is the fake's durable truth; carrying on after a failed
        // write would make it lie about what is recorded.
        self.journal
            .fact("storage.failed", json!({ "error": e.to_string() }));
        eprintln!("fake-provider model-api: failed to write the store: {e}");
        std::process::exit(3);
    }

    fn journal_in(&self, method: &Method, uri: &Uri, body: &Bytes) {
        let body = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
        };
        self.journal
            .message_in(&json!({ "method": method.as_str(), "path": uri.path(), "body": body }));
    }

    fn respond_json(
        &self,
        method: &Method,
        uri: &Uri,
        status: StatusCode,
        body: Value,
    ) -> Response {
        self.journal.message_out(&json!({
            "method": method.as_str(), "path": uri.path(), "status": status.as_u16(), "body": body,
        }));
        (status, axum::Json(body)).into_response()
    }
}

/// An OpenAI-style error body.
fn error_body(message: &str, kind: &str, param: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": param, "code": null } })
}

async fn fallback(State(s): State<Arc<Shared>>, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    let message = format!("Invalid URL ({} {})", method, uri.path());
    s.respond_json(
        &method,
        &uri,
        StatusCode::NOT_FOUND,
        error_body(&message, "invalid_request_error", None),
    )
}

async fn responses(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    // Cut points may block for the harness; the rest is blocking file I/O.
    tokio::task::block_in_place(|| {
        s.point("model.responses.received");
        answer(&s, &method, &uri, &body)
    })
}

/// An input item, reduced to what the model looks at.
enum Item {
    Message { role: String, text: String },
    Call { call_id: String, arguments: String },
    Output { call_id: String, text: String },
    Other,
}

/// A validated `POST /v1/responses` body.
struct Request {
    raw: Value,
    stream: bool,
    items: Vec<Item>,
    message_id: String,
    conversation: String,
    parallel: bool,
    tool: ToolShape,
}

/// How the request's tools want a shell command.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ToolShape {
    /// The function's name.
    name: String,
    /// How the command line travels.
    param: CommandParam,
    /// Whether the function takes `sandbox_permissions` (Codex's
    /// `exec_command`): a tool that needs approval then asks for
    /// `require_escalated`, which makes Codex ask its client.
    escalation: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CommandParam {
    /// `{"command": "<command line>"}`, like `Bash`.
    CommandString,
    /// `{"command": ["sh", "-c", "<command line>"]}`, like Codex's `shell`.
    CommandArgv,
    /// `{"cmd": "<command line>"}`, like Codex's `exec_command`.
    Cmd,
}

fn answer(s: &Arc<Shared>, method: &Method, uri: &Uri, body: &Bytes) -> Response {
    let bad = |message: String, param: Option<&str>| {
        s.journal
            .fact("request.rejected", json!({ "reason": message }));
        s.respond_json(
            method,
            uri,
            StatusCode::BAD_REQUEST,
            error_body(&message, "invalid_request_error", param),
        )
    };
    let raw: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return bad("The request body must be a JSON object.".to_owned(), None),
        Err(e) => {
            return bad(
                format!("We could not parse the JSON body of your request: {e}"),
                None,
            );
        }
    };
    let req = match Request::parse(raw) {
        Ok(r) => r,
        Err((message, param)) => return bad(message, param),
    };
    let tail = req.tail();
    let outputs: HashMap<&str, &str> = tail
        .iter()
        .filter_map(|i| match i {
            Item::Output { call_id, text } => Some((call_id.as_str(), text.as_str())),
            _ => None,
        })
        .collect();
    for item in tail {
        if let Item::Call { call_id, .. } = item
            && !outputs.contains_key(call_id.as_str())
        {
            return bad(
                format!("No tool output found for function call {call_id}."),
                Some("input"),
            );
        }
    }

    let mut st = s.store();
    let mut record = st
        .turn(&req.conversation, &req.message_id)
        .cloned()
        .unwrap_or_else(|| TurnRecord {
            conversation: req.conversation.clone(),
            message_id: req.message_id.clone(),
            script_index: st.turn_count(&req.conversation),
            status: TurnStatus::InProgress,
            requests: 0,
            generation: String::new(),
            calls: Vec::new(),
        });
    let script_turn = s.opts.script.turn(record.script_index).clone();
    let plan = match decide(s, &req, &record, &script_turn, &outputs) {
        Ok(p) => p,
        Err(e) => {
            drop(st);
            return s.respond_json(
                method,
                uri,
                StatusCode::INTERNAL_SERVER_ERROR,
                error_body(
                    &format!("failed to read the ledger: {e}"),
                    "server_error",
                    None,
                ),
            );
        }
    };
    let calls: Vec<(String, String)> = match &plan {
        Plan::Tools { keys, .. } => keys
            .iter()
            .map(|k| (format!("call_{}", random_hex()), k.clone()))
            .collect(),
        Plan::Final(_) => Vec::new(),
    };
    record.requests += 1;
    record.status = TurnStatus::InProgress;
    record
        .calls
        .extend(calls.iter().map(|(call_id, key)| CallRecord {
            call_id: call_id.clone(),
            key: key.clone(),
        }));
    if let Err(e) = st.put(record.clone()) {
        s.fail_storage(&e);
    }
    drop(st);
    s.journal.fact(
        "turn.recorded",
        json!({
            "thread": req.conversation, "turn": req.message_id, "client_id": req.message_id,
            "continuation": false, "script_index": record.script_index, "requests": record.requests,
        }),
    );
    s.point("model.turn.recorded");

    let finishing = matches!(plan, Plan::Final(_));
    let approvals: HashSet<String> = script_turn
        .tools
        .iter()
        .filter(|t| t.approval)
        .map(|t| t.key.clone())
        .collect();
    let built = build_response(s, &req, &plan, &calls, &approvals, body.len());
    if !req.stream {
        if finishing {
            complete_turn(s, &req.conversation, &req.message_id);
        }
        let response = s.respond_json(method, uri, StatusCode::OK, built.response);
        s.point("model.responses.responded");
        return response;
    }
    s.journal.message_out(&json!({
        "method": method.as_str(), "path": uri.path(), "status": 200, "stream": true,
    }));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let producer = Arc::clone(s);
    let (conversation, message_id) = (req.conversation.clone(), req.message_id.clone());
    std::thread::spawn(move || {
        stream_events(
            &producer,
            built.events,
            tx,
            finishing.then_some((conversation, message_id)),
        )
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(EventBody { rx, ack: None }))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

impl Request {
    fn parse(raw: Value) -> Result<Request, (String, Option<&'static str>)> {
        let stream = match raw.get("stream") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(("'stream' must be a boolean.".to_owned(), Some("stream"))),
        };
        let items = match raw.get("input") {
            Some(Value::String(text)) => vec![Item::Message {
                role: "user".to_owned(),
                text: text.clone(),
            }],
            Some(Value::Array(items)) => items.iter().map(parse_item).collect::<Result<_, _>>()?,
            _ => {
                return Err((
                    "'input' must be a string or an array of input items.".to_owned(),
                    Some("input"),
                ));
            }
        };
        let metadata = |key: &str| {
            raw.pointer(&format!("/metadata/{key}"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let users: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Item::Message { role, text } if role == "user" => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let Some(latest) = users.last() else {
            return Err((
                "The input has no user message to answer.".to_owned(),
                Some("input"),
            ));
        };
        let message_id = metadata("turncut_message_id")
            .unwrap_or_else(|| format!("m_{:016x}", fnv1a(&format!("{}\n{latest}", users.len()))));
        let conversation = metadata("turncut_conversation")
            .or_else(|| {
                raw.get("prompt_cache_key")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "default".to_owned());
        let parallel = raw
            .get("parallel_tool_calls")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let tool = tool_shape(raw.get("tools").and_then(Value::as_array));
        Ok(Request {
            raw,
            stream,
            items,
            message_id,
            conversation,
            parallel,
            tool,
        })
    }

    /// The items after the latest user message: this turn's calls and outputs.
    fn tail(&self) -> &[Item] {
        let last_user = self
            .items
            .iter()
            .rposition(|i| matches!(i, Item::Message { role, .. } if role == "user"))
            .map_or(0, |p| p + 1);
        &self.items[last_user..]
    }
}

fn parse_item(item: &Value) -> Result<Item, (String, Option<&'static str>)> {
    let bad = |what: &str| Err((format!("Invalid input item: {what}."), Some("input")));
    let str_field = |key: &str| item.get(key).and_then(Value::as_str);
    let kind = str_field("type").or(item.get("role").map(|_| "message"));
    match kind {
        Some("message") => {
            let Some(role) = str_field("role") else {
                return bad("a message needs a 'role'");
            };
            let text = match item.get("content") {
                Some(Value::String(t)) => t.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
                _ => return bad("a message's 'content' must be a string or an array of parts"),
            };
            Ok(Item::Message {
                role: role.to_owned(),
                text,
            })
        }
        Some("function_call") => match (str_field("call_id"), str_field("arguments")) {
            (Some(call_id), Some(arguments)) => Ok(Item::Call {
                call_id: call_id.to_owned(),
                arguments: arguments.to_owned(),
            }),
            _ => bad("a function_call needs 'call_id' and 'arguments' strings"),
        },
        Some("function_call_output") => {
            let Some(call_id) = str_field("call_id") else {
                return bad("a function_call_output needs a 'call_id' string");
            };
            Ok(Item::Output {
                call_id: call_id.to_owned(),
                text: output_text(item.get("output").unwrap_or(&Value::Null)),
            })
        }
        Some(_) => Ok(Item::Other),
        None => bad("an item needs a 'type'"),
    }
}

/// The text of a `function_call_output.output`: a string, or content parts.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Value::Null => String::new(),
        other => other
            .get("content")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

/// The shell tool the request offers, by preference: `Bash`/`bash` with a
/// `command` string, Codex's `shell` with a `command` array, `shell_command`
/// with a `command` string, `exec_command` with `cmd`; `Bash` when none is offered.
fn tool_shape(tools: Option<&Vec<Value>>) -> ToolShape {
    let functions: Vec<(&str, &Value)> = tools
        .into_iter()
        .flatten()
        .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
        .filter_map(|t| {
            let name = t.get("name").and_then(Value::as_str)?;
            Some((
                name,
                t.pointer("/parameters/properties").unwrap_or(&Value::Null),
            ))
        })
        .collect();
    let kind = |props: &Value, key: &str| {
        props
            .pointer(&format!("/{key}/type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let preferences = [
        ("Bash", "command", "string", CommandParam::CommandString),
        ("bash", "command", "string", CommandParam::CommandString),
        ("shell", "command", "array", CommandParam::CommandArgv),
        (
            "shell_command",
            "command",
            "string",
            CommandParam::CommandString,
        ),
        ("exec_command", "cmd", "string", CommandParam::Cmd),
    ];
    for (wanted, key, key_type, param) in preferences {
        if let Some((_, props)) = functions
            .iter()
            .find(|(name, props)| *name == wanted && kind(props, key) == key_type)
        {
            let escalation = props
                .pointer("/sandbox_permissions/enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.contains(&json!("require_escalated")));
            return ToolShape {
                name: wanted.to_owned(),
                param,
                escalation,
            };
        }
    }
    ToolShape {
        name: "Bash".to_owned(),
        param: CommandParam::CommandString,
        escalation: false,
    }
}

/// What the model answers to one request.
enum Plan {
    /// The `say` chunks (as one message, when any) and a call per effect key.
    Tools { say: Vec<String>, keys: Vec<String> },
    /// The turn's final message.
    Final(String),
}

/// The model: the script turn, played against the calls and outputs after the
/// latest user message. Journals `effect.retried` and `effect.skipped`.
fn decide(
    s: &Shared,
    req: &Request,
    record: &TurnRecord,
    turn: &ScriptTurn,
    outputs: &HashMap<&str, &str>,
) -> std::io::Result<Plan> {
    let known: HashMap<&str, &str> = record
        .calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.key.as_str()))
        .collect();
    // (key, output) of every call of this turn, oldest first.
    let attempts: Vec<(String, &str)> = req
        .tail()
        .iter()
        .filter_map(|i| match i {
            Item::Call { call_id, arguments } => {
                let key = known
                    .get(call_id.as_str())
                    .map(|k| k.to_string())
                    .or_else(|| key_in_arguments(arguments))?;
                Some((key, outputs.get(call_id.as_str()).copied().unwrap_or("")))
            }
            _ => None,
        })
        .collect();
    let mut keys: Vec<String> = Vec::new();
    if attempts.is_empty() {
        if turn.tools.is_empty() {
            return Ok(Plan::Final(turn.final_message.clone()));
        }
        keys.extend(turn.tools.iter().map(|t| t.key.clone()));
        if !req.parallel {
            keys.truncate(1);
        }
        return Ok(Plan::Tools {
            say: turn.say.clone(),
            keys,
        });
    }
    let mut ledger: Option<HashSet<String>> = None;
    for tool in &turn.tools {
        let tries: Vec<&str> = attempts
            .iter()
            .filter(|(k, _)| *k == tool.key)
            .map(|(_, o)| *o)
            .collect();
        let Some(last) = tries.last() else {
            keys.push(tool.key.clone());
            continue;
        };
        if !needs_retry(last) {
            continue;
        }
        if ledger.is_none() {
            ledger = Some(
                crate::ledger::read(&s.opts.ledger)?
                    .into_iter()
                    .filter(|e| e.by == req.message_id)
                    .map(|e| e.key)
                    .collect(),
            );
        }
        let fact = json!({ "key": tool.key, "by": req.message_id, "thread": req.conversation });
        if ledger.as_ref().is_some_and(|l| l.contains(&tool.key)) {
            let mut fact = fact;
            fact["reason"] = json!("already in ledger");
            s.journal.fact("effect.skipped", fact);
        } else if tries.len() < CALLS_PER_KEY_MAX {
            s.journal.fact("effect.retried", fact);
            keys.push(tool.key.clone());
        } else {
            s.journal.fact("effect.abandoned", fact);
        }
    }
    if !req.parallel {
        keys.truncate(1);
    }
    Ok(if keys.is_empty() {
        Plan::Final(turn.final_message.clone())
    } else {
        Plan::Tools {
            say: Vec::new(),
            keys,
        }
    })
}

/// Whether a tool output says the call is uncertain or failed: `uncertain:`
/// or `failed:`/`error:` first, or a non-zero exit code in one of Codex's
/// output formats (`"exit_code": N`, `Exit code: N`, `Process exited with code N`).
fn needs_retry(output: &str) -> bool {
    let text = output.trim_start();
    if ["uncertain:", "failed:", "error:"]
        .iter()
        .any(|p| text.starts_with(p))
    {
        return true;
    }
    let code_after = |marker: &str| {
        text.find(marker).and_then(|at| {
            let rest = text[at + marker.len()..].trim_start();
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            digits.parse::<i64>().ok()
        })
    };
    ["\"exit_code\":", "Exit code:", "Process exited with code"]
        .iter()
        .filter_map(|m| code_after(m))
        .any(|code| code != 0)
}

/// The effect key of a command line issued by this fake (`--key K`).
fn key_in_arguments(arguments: &str) -> Option<String> {
    let at = arguments.find("--key ")? + "--key ".len();
    let key: String = arguments[at..]
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| !c.is_whitespace() && !"'\"\\,]}".contains(*c))
        .collect();
    (!key.is_empty()).then_some(key)
}

struct Built {
    /// The SSE events, each with `type` and `sequence_number`.
    events: Vec<Value>,
    /// The final response object.
    response: Value,
}

fn build_response(
    s: &Shared,
    req: &Request,
    plan: &Plan,
    calls: &[(String, String)],
    approvals: &HashSet<String>,
    input_bytes: usize,
) -> Built {
    let id = format!("resp_{}", random_hex());
    let mut events = Vec::new();
    let mut seq = 0u64;
    let mut push = |mut event: Value| {
        event["sequence_number"] = json!(seq);
        seq += 1;
        events.push(event);
    };
    let mut response = json!({
        "id": id,
        "object": "response",
        "created_at": now_ms() / 1000,
        "status": "in_progress",
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": req.raw.get("model").and_then(Value::as_str).unwrap_or(FAKE_MODEL),
        "output": [],
        "parallel_tool_calls": req.parallel,
        "previous_response_id": null,
        "reasoning": { "effort": null, "summary": null },
        "store": req.raw.get("store").and_then(Value::as_bool).unwrap_or(false),
        "temperature": 1.0,
        "text": { "format": { "type": "text" } },
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": null,
        "user": null,
        "metadata": req.raw.get("metadata").cloned().unwrap_or(json!({})),
    });
    push(json!({ "type": "response.created", "response": response }));
    push(json!({ "type": "response.in_progress", "response": response }));
    let mut output: Vec<Value> = Vec::new();
    let mut output_chars = 0usize;
    let text = match plan {
        Plan::Tools { say, .. } if !say.is_empty() => Some(say.join("\n\n")),
        Plan::Tools { .. } => None,
        Plan::Final(text) => Some(text.clone()),
    };
    if let Some(text) = text {
        let index = output.len();
        let item_id = format!("msg_{}", random_hex());
        output_chars += text.len();
        push(json!({
            "type": "response.output_item.added", "output_index": index,
            "item": { "id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": [] },
        }));
        push(json!({
            "type": "response.content_part.added", "item_id": item_id, "output_index": index,
            "content_index": 0, "part": { "type": "output_text", "text": "", "annotations": [] },
        }));
        for delta in text.split_inclusive(' ') {
            push(json!({
                "type": "response.output_text.delta", "item_id": item_id, "output_index": index,
                "content_index": 0, "delta": delta, "logprobs": [],
            }));
        }
        push(json!({
            "type": "response.output_text.done", "item_id": item_id, "output_index": index,
            "content_index": 0, "text": text, "logprobs": [],
        }));
        let part = json!({ "type": "output_text", "text": text, "annotations": [] });
        push(json!({
            "type": "response.content_part.done", "item_id": item_id, "output_index": index,
            "content_index": 0, "part": part,
        }));
        let item = json!({
            "id": item_id, "type": "message", "status": "completed", "role": "assistant",
            "content": [part],
        });
        push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
        output.push(item);
    }
    for (call_id, key) in calls {
        let index = output.len();
        let item_id = format!("fc_{}", random_hex());
        let command = effect_command(s, req, key);
        let name = &req.tool.name;
        let mut arguments = match req.tool.param {
            CommandParam::CommandString => json!({ "command": command }),
            CommandParam::CommandArgv => json!({ "command": ["sh", "-c", command] }),
            CommandParam::Cmd => json!({ "cmd": command }),
        };
        if req.tool.escalation && approvals.contains(key) {
            arguments["sandbox_permissions"] = json!("require_escalated");
            arguments["justification"] = json!(format!("Run the effect {key}?"));
        }
        let arguments = arguments.to_string();
        output_chars += arguments.len();
        let mut item = json!({
            "id": item_id, "type": "function_call", "status": "in_progress",
            "arguments": "", "call_id": call_id, "name": name,
        });
        push(json!({ "type": "response.output_item.added", "output_index": index, "item": item }));
        push(json!({
            "type": "response.function_call_arguments.delta", "item_id": item_id,
            "output_index": index, "delta": arguments,
        }));
        push(json!({
            "type": "response.function_call_arguments.done", "item_id": item_id,
            "output_index": index, "name": name, "arguments": arguments,
        }));
        item["status"] = json!("completed");
        item["arguments"] = json!(arguments);
        push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
        output.push(item);
    }
    let input_tokens = (input_bytes / 4).max(1) as u64;
    let output_tokens = (output_chars / 4).max(1) as u64;
    response["status"] = json!("completed");
    response["output"] = json!(output);
    response["usage"] = json!({
        "input_tokens": input_tokens,
        "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": output_tokens,
        "output_tokens_details": { "reasoning_tokens": 0 },
        "total_tokens": input_tokens + output_tokens,
    });
    push(json!({ "type": "response.completed", "response": response }));
    Built { events, response }
}

/// The shell command line of a tool: `<self> effect --ledger L --key K --by
/// MESSAGE_ID --conversation C --turn MESSAGE_ID`, quoted for `sh`.
fn effect_command(s: &Shared, req: &Request, key: &str) -> String {
    let mut argv: Vec<String> = s
        .opts
        .self_cmd
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    argv.extend(
        [
            "effect",
            "--ledger",
            &s.opts.ledger.display().to_string(),
            "--key",
            key,
            "--by",
            &req.message_id,
            "--conversation",
            &req.conversation,
            "--turn",
            &req.message_id,
        ]
        .map(str::to_owned),
    );
    argv.extend(crate::script::duration_args(&s.opts.script, key));
    crate::shell::join(argv.iter().map(String::as_str))
}

/// Records the turn `completed`, durably, and passes `model.turn_completed.recorded`.
fn complete_turn(s: &Shared, conversation: &str, message_id: &str) {
    let mut st = s.store();
    if let Some(mut record) = st.turn(conversation, message_id).cloned() {
        record.status = TurnStatus::Completed;
        if let Err(e) = st.put(record) {
            s.fail_storage(&e);
        }
    }
    drop(st);
    s.journal.fact(
        "turn.finished",
        json!({ "thread": conversation, "turn": message_id, "status": "completed" }),
    );
    s.point("model.turn_completed.recorded");
}

/// One SSE frame and the channel its stream acknowledges it on.
type Frame = (Bytes, std::sync::mpsc::SyncSender<()>);

/// Writes `events` one at a time on their own thread, so cut points may block
/// it: each is journaled, handed to the HTTP body, and once the body asks for
/// the next one, `model.<type>.sent` is passed. A finishing turn is recorded
/// `completed` before `response.completed` goes out.
fn stream_events(
    s: &Shared,
    events: Vec<Value>,
    tx: tokio::sync::mpsc::UnboundedSender<Frame>,
    finishing: Option<(String, String)>,
) {
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        if kind == "response.completed"
            && let Some((conversation, message_id)) = &finishing
        {
            complete_turn(s, conversation, message_id);
        }
        s.journal.message_out(&json!({ "event": event }));
        let frame = Bytes::from(format!("event: {kind}\ndata: {event}\n\n"));
        let (ack, acked) = std::sync::mpsc::sync_channel(1);
        if tx.send((frame, ack)).is_err() || acked.recv().is_err() {
            s.journal.fact("stream.abandoned", json!({ "at": kind }));
            return;
        }
        s.point(&format!("model.{}.sent", cutpoint::slug(&kind)));
    }
    drop(tx);
    s.point("model.responses.responded");
}

/// The SSE body: yields frames as they come and acknowledges a frame when the
/// HTTP layer asks for the next one (it has taken the previous one over).
struct EventBody {
    rx: tokio::sync::mpsc::UnboundedReceiver<Frame>,
    ack: Option<std::sync::mpsc::SyncSender<()>>,
}

impl tokio_stream::Stream for EventBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(ack) = self.ack.take() {
            let _ = ack.send(());
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((frame, ack))) => {
                self.ack = Some(ack);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// 64-bit FNV-1a: a hash that stays the same across builds and processes.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn random_hex() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_shapes_follow_the_offered_tools() {
        let tools = |v: Value| {
            let t = tool_shape(v.as_array());
            (t.name, t.param, t.escalation)
        };
        let shell = json!({ "type": "function", "name": "shell",
            "parameters": { "properties": { "command": { "type": "array" } } } });
        let exec = json!({ "type": "function", "name": "exec_command",
            "parameters": { "properties": { "cmd": { "type": "string" },
                "sandbox_permissions": { "type": "string", "enum": ["use_default", "require_escalated"] } } } });
        let bash = json!({ "type": "function", "name": "Bash",
            "parameters": { "properties": { "command": { "type": "string" } } } });
        use CommandParam::*;
        assert_eq!(tools(json!(null)), ("Bash".into(), CommandString, false));
        assert_eq!(
            tools(json!([exec, shell])),
            ("shell".into(), CommandArgv, false)
        );
        assert_eq!(tools(json!([exec])), ("exec_command".into(), Cmd, true));
        assert_eq!(
            tools(json!([shell, bash])),
            ("Bash".into(), CommandString, false)
        );
    }

    #[test]
    fn outputs_that_need_a_retry() {
        assert!(needs_retry("uncertain: the runner restarted"));
        assert!(needs_retry(r#"{"output":"x","metadata":{"exit_code":1}}"#));
        assert!(needs_retry("Exit code: 2\nWall time: 0 seconds\nOutput:\n"));
        assert!(!needs_retry("Exit code: 0\nOutput:\neffect k done"));
        assert!(!needs_retry(
            r#"{"output":"effect k done","metadata":{"exit_code":0}}"#
        ));
        assert!(!needs_retry("exec command rejected by user"));
    }

    #[test]
    fn keys_are_found_in_any_argument_shape() {
        let k = |a: &str| key_in_arguments(a);
        assert_eq!(
            k(r#"{"command":"x effect --key write-hello --by m"}"#).as_deref(),
            Some("write-hello")
        );
        assert_eq!(
            k(r#"{"command":["sh","-c","x --key 'a b' --by m"]}"#).as_deref(),
            Some("a")
        );
        assert_eq!(k(r#"{"command":"ls"}"#), None);
    }

    #[test]
    fn message_ids_hash_text_and_count() {
        let req = |input: Value| Request::parse(json!({ "input": input })).ok().unwrap();
        let one = req(json!("hi"));
        let again = req(json!([{ "role": "user", "content": "hi" }]));
        let second =
            req(json!([{ "role": "user", "content": "hi" }, { "role": "user", "content": "hi" }]));
        assert_eq!(one.message_id, again.message_id);
        assert_ne!(one.message_id, second.message_id);
        assert_eq!(one.conversation, "default");
        let tagged = Request::parse(json!({
            "input": "hi", "prompt_cache_key": "c1",
            "metadata": { "turncut_message_id": "m-1" },
        }))
        .ok()
        .unwrap();
        assert_eq!(
            (tagged.message_id.as_str(), tagged.conversation.as_str()),
            ("m-1", "c1")
        );
        assert!(Request::parse(json!({ "input": [] })).is_err());
        assert!(Request::parse(json!({ "input": 3 })).is_err());
    }
}
