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
//! hold the shell command line of the `effect` tool (a `write-file` tool is
//! a call of the request's `Write {path, content}` where it offers one, as
//! the native runner does); once every call has its
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
//!
//! The same model also speaks the Anthropic Messages API (`POST
//! /v1/messages`, `anthropic.rs`), for agents built on the Claude Agent SDK:
//! the same script, store, turn identity, cut points (`model.messages.*`
//! where the Responses route passes `model.responses.*`) and upstream faults.
//!
//! Upstream faults (`wire::upstream::UpstreamFault`, injected by the harness
//! through `cutpoint::hit_answer`): at `model.responses.received` (or
//! `model.messages.received`) a status fault answers the request with the
//! API's status, `Retry-After` and error body (OpenAI's, or Anthropic's)
//! before the model sees it (an `auth-expired` one answers every later
//! request of that conversation 401 too: its session's credential is dead,
//! and only a fresh conversation, a Retry's, has a new one); after an event
//! of a stream (`model.<type>.sent`) a stream fault resets the connection,
//! ends the stream without its last event (`response.completed`,
//! `message_stop`), or sends a malformed event and ends it.
//!
//! Files: this one holds the server (a request recorded, answered whole or
//! streamed); `model.rs` the model's decision; `wire.rs` requests, responses
//! and events; `anthropic.rs` the Messages format; `store.rs` the durable
//! turns.

mod anthropic;
mod model;
pub mod store;
pub mod wire;

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

pub use model::CALLS_PER_KEY_MAX;
pub use wire::FAKE_MODEL;

use crate::journal::Journal;
use crate::script::ScriptTurn;
use crate::serving::Options;
use ::wire::upstream::UpstreamFault;
use model::Plan;
use store::{CallRecord, Store, TurnRecord, TurnStatus};
use wire::{Built, Request, error_body, random_hex};

/// Binds `127.0.0.1:port`; the error is a sentence for the user (exit code 2).
pub fn bind(port: u16) -> Result<std::net::TcpListener, String> {
    crate::http::bind("127.0.0.1", port)
}

/// Serves on `listener` (loopback) until stdin closes or SIGTERM arrives,
/// then exits the process with 0.
pub fn serve(opts: Options, listener: std::net::TcpListener) -> anyhow::Result<()> {
    let (journal, store) = crate::serving::start(&opts, "model-api", Some(&listener), |dir, j| {
        Store::open(dir, j.generation())
    })?;
    let shared = Arc::new(Shared {
        journal,
        store: Mutex::new(store),
        opts,
        auth_expired: Mutex::new(HashSet::new()),
    });
    let app = axum::Router::new()
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .fallback(fallback)
        .with_state(Arc::clone(&shared));
    crate::http::run(&shared, |s| &s.journal, listener, 2, "model api", app)
}

struct Shared {
    opts: Options,
    journal: Journal,
    store: Mutex<Store>,
    /// The conversations an `auth-expired` fault was injected into: every
    /// later request of theirs is answered 401 (their session's credential
    /// is dead); a fresh conversation (a Retry's) has a fresh one.
    auth_expired: Mutex<HashSet<String>>,
}

impl Shared {
    fn point(&self, name: &str) {
        self.opts.faults.point(name, &self.journal);
    }

    /// Passes a point where the harness may inject an upstream fault; an
    /// injected name that is no upstream fault is journaled and ignored.
    fn upstream_point(&self, name: &str, conversation: Option<&str>) -> Option<UpstreamFault> {
        let answer = self
            .opts
            .faults
            .answer_point(name, conversation, &self.journal)?;
        let fault = UpstreamFault::parse(&answer);
        if fault.is_none() {
            self.journal.fact(
                "fault.ignored",
                json!({ "point": name, "answer": answer, "why": "not an upstream fault" }),
            );
        }
        fault
    }

    /// The status fault a request of `conversation` is answered with: the
    /// one injected at the API's request point, else `auth-expired` for a
    /// conversation one was injected into before (and recorded here).
    fn request_fault(&self, api: Api, conversation: Option<String>) -> Option<UpstreamFault> {
        let injected = self
            .upstream_point(api.request_point(), conversation.as_deref())
            .filter(|f| !f.is_stream());
        let mut expired = self
            .auth_expired
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = conversation
            .as_ref()
            .filter(|_| injected.is_some_and(UpstreamFault::sticky))
        {
            expired.insert(c.clone());
        }
        let dead = conversation.is_some_and(|c| expired.contains(&c));
        injected.or_else(|| dead.then_some(UpstreamFault::AuthExpired))
    }

    /// Answers with a status fault's status, `Retry-After` and the API's
    /// error body.
    fn upstream_error(
        &self,
        api: Api,
        method: &Method,
        uri: &Uri,
        fault: UpstreamFault,
    ) -> Response {
        let status = fault
            .status()
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = match api {
            Api::Responses => fault.openai_body(),
            Api::Messages => fault.anthropic_body(),
        };
        crate::http::journal_out(&self.journal, method, uri, status, &body);
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(s) = fault.retry_after_s() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        response
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        crate::serving::fail_storage(
            &self.journal,
            e,
            "fake-provider model-api: failed to write the store",
        )
    }

    fn journal_in(&self, method: &Method, uri: &Uri, body: &Bytes) {
        crate::http::journal_in(&self.journal, method, uri, body);
    }

    fn respond_json(
        &self,
        method: &Method,
        uri: &Uri,
        status: StatusCode,
        body: Value,
    ) -> Response {
        crate::http::journal_out(&self.journal, method, uri, status, &body);
        (status, axum::Json(body)).into_response()
    }
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
    receive(&s, Api::Responses, &method, &uri, &body)
}

async fn messages(State(s): State<Arc<Shared>>, method: Method, uri: Uri, body: Bytes) -> Response {
    receive(&s, Api::Messages, &method, &uri, &body)
}

/// A request of either API: journaled, its request point passed (where a
/// status fault may answer it), then answered by the model.
fn receive(s: &Arc<Shared>, api: Api, method: &Method, uri: &Uri, body: &Bytes) -> Response {
    s.journal_in(method, uri, body);
    // Cut points may block for the harness; the rest is blocking file I/O.
    tokio::task::block_in_place(|| {
        let conversation = api.parse(body).map(|r| r.conversation).ok();
        if let Some(fault) = s.request_fault(api, conversation) {
            return s.upstream_error(api, method, uri, fault);
        }
        answer(s, api, method, uri, body)
    })
}

/// The two wire formats this model speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Api {
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
}

impl Api {
    /// The cut-point segment of its requests and answers.
    fn point(self) -> &'static str {
        match self {
            Api::Responses => "responses",
            Api::Messages => "messages",
        }
    }

    /// Its request point, where a status fault answers
    /// (`wire::upstream::MODEL_REQUEST_POINTS`).
    fn request_point(self) -> &'static str {
        let [responses, messages] = ::wire::upstream::MODEL_REQUEST_POINTS;
        match self {
            Api::Responses => responses,
            Api::Messages => messages,
        }
    }

    /// A request body as the request the model reads.
    fn parse(self, body: &Bytes) -> Result<Request, (String, Option<&'static str>)> {
        match self {
            Api::Responses => Request::from_body(body),
            Api::Messages => anthropic::translate(body).and_then(Request::parse),
        }
    }

    /// Its error body for `message` (a 400 names `param` where it can).
    fn error(self, status: StatusCode, message: &str, param: Option<&str>) -> Value {
        match self {
            Api::Responses => {
                let kind = if status.is_server_error() {
                    "server_error"
                } else {
                    "invalid_request_error"
                };
                error_body(message, kind, param)
            }
            Api::Messages => anthropic::error_body(anthropic::error_type(status.as_u16()), message),
        }
    }

    /// The event before which a finishing turn is recorded completed.
    fn finishing_event(self) -> &'static str {
        match self {
            Api::Responses => "response.completed",
            Api::Messages => "message_stop",
        }
    }

    /// The frame a `malformed-event` fault sends in its stream.
    fn malformed_frame(self) -> &'static str {
        match self {
            Api::Responses => UpstreamFault::OPENAI_MALFORMED_FRAME,
            Api::Messages => UpstreamFault::ANTHROPIC_MALFORMED_FRAME,
        }
    }
}

/// What one request made of its turn: the model's plan, the calls it issues
/// (`(call_id, key)`), and the script turn played.
struct Taken {
    plan: Plan,
    calls: Vec<(String, String)>,
    script_turn: ScriptTurn,
}

fn answer(s: &Arc<Shared>, api: Api, method: &Method, uri: &Uri, body: &Bytes) -> Response {
    let bad = |message: String, param: Option<&str>| {
        s.journal
            .fact("request.rejected", json!({ "reason": message }));
        let body = api.error(StatusCode::BAD_REQUEST, &message, param);
        s.respond_json(method, uri, StatusCode::BAD_REQUEST, body)
    };
    let req = match api.parse(body) {
        Ok(r) => r,
        Err((message, param)) => return bad(message, param),
    };
    let outputs = req.outputs();
    if let Some(call_id) = req.unanswered_call(&outputs) {
        return bad(
            format!("No tool output found for function call {call_id}."),
            Some("input"),
        );
    }
    let taken = match take_turn(s, &req, &outputs) {
        Ok(t) => t,
        Err(e) => {
            let status = StatusCode::INTERNAL_SERVER_ERROR;
            let body = api.error(status, &format!("failed to read the ledger: {e}"), None);
            return s.respond_json(method, uri, status, body);
        }
    };
    let finishing = matches!(taken.plan, Plan::Final(_));
    let approvals: HashSet<String> = taken
        .script_turn
        .tools
        .iter()
        .filter(|t| t.approval)
        .map(|t| t.key.clone())
        .collect();
    let call = |key: &str| call_body(&s.opts, &req, key);
    let (plan, calls) = (&taken.plan, &taken.calls);
    let built = match api {
        Api::Responses => wire::build_response(&req, plan, calls, &approvals, body.len(), call),
        Api::Messages => anthropic::build(&req, plan, calls, &approvals, body.len(), call),
    };
    send(s, api, method, uri, &req, built, finishing)
}

/// Plays the request's turn: the model decides, the calls it issues are
/// recorded with the turn (durably), `turn.recorded` is journaled and
/// `model.turn.recorded` passed. The error is a ledger that cannot be read.
fn take_turn(
    s: &Shared,
    req: &Request,
    outputs: &std::collections::HashMap<&str, &str>,
) -> std::io::Result<Taken> {
    let mut st = s.store();
    let mut record = st
        .turn(&req.conversation, &req.message_id)
        .cloned()
        .unwrap_or_else(|| TurnRecord {
            conversation: req.conversation.clone(),
            message_id: req.message_id.clone(),
            script_index: s
                .opts
                .script
                .index_for(&req.user_text, st.turn_count(&req.conversation)),
            status: TurnStatus::InProgress,
            requests: 0,
            generation: String::new(),
            calls: Vec::new(),
        });
    let script_turn = s.opts.script.turn(record.script_index).clone();
    let plan = model::decide(
        &s.opts.ledger,
        &s.journal,
        req,
        &record,
        &script_turn,
        outputs,
    )?;
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
            // The user text it answers: a harness names a derived message
            // id (a real product's request carries none) by the prompt
            // that sent this text.
            "answers": req.user_text,
        }),
    );
    s.point("model.turn.recorded");
    Ok(Taken {
        plan,
        calls,
        script_turn,
    })
}

/// Sends the response: whole (`stream: false`), or as SSE events written by
/// [`stream_events`]. A finishing turn is recorded `completed` first.
fn send(
    s: &Arc<Shared>,
    api: Api,
    method: &Method,
    uri: &Uri,
    req: &Request,
    built: Built,
    finishing: bool,
) -> Response {
    if !req.stream {
        if finishing {
            complete_turn(s, &req.conversation, &req.message_id);
        }
        let response = s.respond_json(method, uri, StatusCode::OK, built.response);
        s.point(&format!("model.{}.responded", api.point()));
        return response;
    }
    s.journal.message_out(&json!({
        "method": method.as_str(), "path": uri.path(), "status": 200, "stream": true,
    }));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let producer = Arc::clone(s);
    let (conversation, message_id) = (req.conversation.clone(), req.message_id.clone());
    std::thread::spawn(move || {
        let turn = (conversation, message_id);
        stream_events(&producer, api, built.events, tx, &turn, finishing)
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(EventBody {
            rx,
            ack: None,
            cut: false,
        }))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// What the call of tool `key` does: a `write-file` tool is a call of the
/// request's `Write` function where it offers one (the native runner's,
/// which writes the file itself: `written_content`); every other tool is
/// its `effect_command`.
fn call_body(opts: &Options, req: &Request, key: &str) -> wire::CallBody {
    let tool = opts
        .script
        .turns
        .iter()
        .flat_map(|t| &t.tools)
        .find(|t| t.key == key);
    let write = tool.filter(|t| t.kind == crate::script::ToolKind::WriteFile && req.tool.write);
    if let Some(path) = write.and_then(|t| t.path.clone()) {
        return wire::CallBody::Write {
            path,
            content: crate::script::written_content(key),
        };
    }
    wire::CallBody::Command(effect_command(opts, req, key, tool))
}

/// The shell command line of a tool: `<self> effect --ledger L --key K --by
/// MESSAGE_ID --conversation C --turn MESSAGE_ID`, quoted for `sh` (inside a
/// shell of its own for a `nested_shell` tool). A `patch` tool's line is
/// `apply_patch` with the patch as a here-document, which Codex runs as its
/// own `apply_patch` (a `fileChange` item) rather than as a command.
fn effect_command(
    opts: &Options,
    req: &Request,
    key: &str,
    tool: Option<&crate::script::ScriptTool>,
) -> String {
    if let Some(tool) = tool.filter(|t| t.kind == crate::script::ToolKind::Patch) {
        return format!(
            "apply_patch <<'EOF'\n{}\nEOF\n",
            crate::script::patch_text(tool)
        );
    }
    let mut argv = crate::serving::lossy(&opts.effect_argv(
        key,
        &req.message_id,
        &req.conversation,
        &req.message_id,
    ));
    argv.extend(crate::script::duration_args(&opts.script, key));
    let line = crate::shell::join(argv.iter().map(String::as_str));
    match tool {
        Some(t) => crate::script::command_line(t, &line),
        None => line,
    }
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

/// One SSE frame (or, `None`, the connection reset) and the channel its
/// stream acknowledges it on.
type Frame = (Option<Bytes>, std::sync::mpsc::SyncSender<()>);

/// Writes `events` one at a time on their own thread, so cut points may block
/// it: each is journaled, handed to the HTTP body, and once the body asks for
/// the next one, `model.<type>.sent` is passed. A finishing turn is recorded
/// `completed` before `response.completed` goes out.
fn stream_events(
    s: &Shared,
    api: Api,
    events: Vec<Value>,
    tx: tokio::sync::mpsc::UnboundedSender<Frame>,
    (conversation, message_id): &(String, String),
    finishing: bool,
) {
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        if finishing && kind == api.finishing_event() {
            complete_turn(s, conversation, message_id);
        }
        s.journal.message_out(&json!({ "event": event }));
        let frame = Bytes::from(format!("event: {kind}\ndata: {event}\n\n"));
        if !send_frame(&tx, Some(frame)) {
            s.journal.fact("stream.abandoned", json!({ "at": kind }));
            return;
        }
        let point = format!("model.{}.sent", cutpoint::slug(&kind));
        let fault = if ::wire::upstream::stream_fault_point(&point) {
            // The conversation is named whether or not the response ends
            // the turn: a stream cut in a response that called tools is
            // that conversation's too (a cell of several tasks tells whose
            // by it).
            let conversation = Some(conversation.as_str()).filter(|c| !c.is_empty());
            s.upstream_point(&point, conversation)
                .filter(|f| f.is_stream())
        } else {
            s.point(&point);
            None
        };
        if let Some(fault) = fault {
            return break_stream(s, api, fault, &tx, &kind);
        }
    }
    drop(tx);
    s.point(&format!("model.{}.responded", api.point()));
}

/// Hands one frame (`None`: reset the connection) to the body; false when
/// the client is gone.
fn send_frame(tx: &tokio::sync::mpsc::UnboundedSender<Frame>, frame: Option<Bytes>) -> bool {
    let (ack, acked) = std::sync::mpsc::sync_channel(1);
    tx.send((frame, ack)).is_ok() && acked.recv().is_ok()
}

/// Breaks a stream after the event `after`: reset, ended without its last
/// event, or a malformed event then the end. Journaled as `stream.broken`.
fn break_stream(
    s: &Shared,
    api: Api,
    fault: UpstreamFault,
    tx: &tokio::sync::mpsc::UnboundedSender<Frame>,
    after: &str,
) {
    s.journal.fact(
        "stream.broken",
        json!({ "after": after, "fault": fault.as_str() }),
    );
    match fault {
        UpstreamFault::StreamCut => {
            send_frame(tx, None);
        }
        UpstreamFault::MalformedEvent => {
            send_frame(
                tx,
                Some(Bytes::from_static(api.malformed_frame().as_bytes())),
            );
        }
        _ => {}
    }
}

/// The SSE body: yields frames as they come and acknowledges a frame when the
/// HTTP layer asks for the next one (it has taken the previous one over).
/// A reset is yielded as `Pending` once before its error, so that hyper
/// flushes the frames it has taken over (it flushes when the body waits, not
/// when it fails) and the client receives every event sent before the cut.
struct EventBody {
    rx: tokio::sync::mpsc::UnboundedReceiver<Frame>,
    ack: Option<std::sync::mpsc::SyncSender<()>>,
    cut: bool,
}

impl tokio_stream::Stream for EventBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(ack) = self.ack.take() {
            let _ = ack.send(());
        }
        if self.cut {
            // An error ends the body mid-stream: hyper drops the
            // connection without the chunked terminator, as a reset does.
            return Poll::Ready(Some(Err(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            ))));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((Some(frame), ack))) => {
                self.ack = Some(ack);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some((None, ack))) => {
                self.ack = Some(ack);
                self.cut = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}
