//! `fake-provider opencode`: a fake `opencode serve` (HTTP + SSE) on loopback.
//!
//! What it simulates, per the vendored OpenAPI document (OpenCode 1.18.33):
//! `GET /global/health`; `POST /session` and `GET /session/{id}`;
//! `POST /session/{id}/prompt_async` with a client-chosen `messageID`, answered
//! 204 once the user message is durable; `GET /session/{id}/message` and
//! `GET /session/{id}/message/{messageID}` (the "was this turn recorded?"
//! lookup); `POST /session/{id}/abort`; `POST /permission/{id}/reply`; and the
//! `GET /event` SSE stream (`server.connected` first, then `{id, type,
//! properties}` events: `session.created`, `message.updated`,
//! `message.part.updated`, `permission.asked`, `permission.replied`,
//! `session.status`, `session.error`, `session.idle`). A turn is an assistant
//! message whose `parentID` is the user message, with text parts and `bash`
//! tool parts going `pending` → `running` → `completed` (or `error`), tools run
//! by the server itself, as OpenCode does. An assistant message cut by a
//! SIGKILL stays without `time.completed`, as the real server leaves it.
//!
//! The model is the script (`crate::script`), played as in `fake-provider
//! codex`: a user message plays its script turn from the top; a message id of
//! the form `msg_<16 hex>_<id>` (the runner's encoding) counts as message
//! `<id>` for the turn numbering, so a message re-sent under a fresh OpenCode id
//! plays the same script turn again, naively. A prompt whose text starts with
//! [`CONTINUE_MARKER`] continues the session's latest non-continuation user
//! message: same authority, effects already in the ledger skipped.
//!
//! Deliberate differences and omissions: a client `messageID` must sort after
//! every message id of the session (real ids are time-ordered, and the real
//! server does not check), else 400; without one the fake picks one, as the
//! real server does; a prompt while a turn is active answers 400
//! `InvalidRequestError` (the spec lists no 409 there) instead of queueing;
//! no models, agents, step/reasoning/snapshot parts, deltas, file or patch
//! parts, MCP, PTYs, questions, `/api/` routes, several projects, or
//! heartbeats. Unknown routes answer 404 with a `NotFoundError` body.

pub mod store;

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::faults::Faults;
use crate::journal::{Journal, now_ms};
use crate::ledger::{self, CREDENTIAL_VARS};
use crate::script::{Script, ScriptTool};
use store::{Store, UserMeta};

pub use crate::codex::CONTINUE_MARKER;

/// The OpenCode version this fake reports.
pub const FAKE_OPENCODE_VERSION: &str = "1.18.33";

/// How many SSE events a slow subscriber may fall behind before its stream is
/// closed (it sees EOF, as after a server restart).
pub const EVENTS_BUFFERED_MAX: usize = 4096;

/// Everything `fake-provider opencode` needs to run.
#[derive(Debug)]
pub struct OpencodeOptions {
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

/// Binds `hostname:port`, refusing anything that is not loopback. The error is
/// a sentence for the user (exit code 2).
pub fn bind(hostname: &str, port: u16) -> Result<std::net::TcpListener, String> {
    let ip: std::net::IpAddr = match hostname {
        "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        h => h
            .parse()
            .map_err(|_| format!("--hostname {h:?} is not an IP address or localhost"))?,
    };
    if !ip.is_loopback() {
        return Err(format!(
            "--hostname {hostname} is not a loopback address; the fake serves loopback only"
        ));
    }
    std::net::TcpListener::bind((ip, port)).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => format!("port {port} on {ip} is already in use"),
        _ => format!("failed to listen on {ip}:{port}: {e}"),
    })
}

/// Serves until stdin closes or SIGTERM arrives, then exits the process with 0.
pub fn serve(opts: OpencodeOptions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&opts.state_dir)?;
    let journal = Journal::open(opts.journal.as_deref())?;
    let store = Store::open(&opts.state_dir, journal.generation())?;
    let addr = opts.listener.local_addr()?;
    opts.listener.set_nonblocking(true)?;
    journal.fact(
        "process.started",
        json!({ "pid": std::process::id(), "protocol": "opencode", "port": addr.port() }),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    let (events, _) = broadcast::channel(EVENTS_BUFFERED_MAX);
    let listener = opts.listener.try_clone()?;
    let shared = Arc::new(Shared {
        journal,
        state: Mutex::new(ServerState {
            store,
            active: HashMap::new(),
            permissions: HashMap::new(),
        }),
        events,
        emit_lock: Mutex::new(()),
        ids: Ids::default(),
        opts,
    });
    let stdin_shared = Arc::clone(&shared);
    crate::stdio::exit_when_stdin_closes(move || {
        stdin_shared.journal.fact("process.stdin_closed", json!({}));
    });
    runtime.block_on(async move {
        let app = router(Arc::clone(&shared));
        crate::http::serve(listener, app, "opencode server", &shared.journal).await
    })?;
    std::process::exit(0);
}

fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .route("/global/health", get(health))
        .route("/session", post(session_create))
        .route("/session/{session}", get(session_get))
        .route("/session/{session}/prompt_async", post(prompt_async))
        .route("/session/{session}/message", get(messages))
        .route("/session/{session}/message/{message}", get(message))
        .route("/session/{session}/abort", post(abort))
        .route("/permission/{request}/reply", post(permission_reply))
        .route("/event", get(event_stream))
        .fallback(fallback)
        .with_state(shared)
}

struct Shared {
    opts: OpencodeOptions,
    journal: Journal,
    state: Mutex<ServerState>,
    events: broadcast::Sender<Value>,
    /// Serializes journaling and broadcasting of events, so the journal's order
    /// is the stream's order.
    emit_lock: Mutex<()>,
    ids: Ids,
}

struct ServerState {
    store: Store,
    /// Active turns by session.
    active: HashMap<String, Active>,
    /// Pending permission requests: permission id → session id.
    permissions: HashMap<String, String>,
}

struct Active {
    control: mpsc::Sender<Control>,
}

/// What a turn's thread hears from the HTTP side.
enum Control {
    Reply(String),
    Abort,
}

enum Step {
    Say(String),
    Tool(ScriptTool),
}

/// Time-ordered ids: `<prefix>_<16 hex of (unix ms << 12 | counter)><10 random>`,
/// strictly increasing within the process.
#[derive(Default)]
struct Ids {
    last: AtomicU64,
}

impl Ids {
    fn next(&self, prefix: &str) -> String {
        self.after(prefix, None)
    }

    /// A new id that also sorts after `floor`.
    fn after(&self, prefix: &str, floor: Option<&str>) -> String {
        let floor_value = floor
            .and_then(|f| f.get(prefix.len() + 1..prefix.len() + 17))
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        let now = now_ms() << 12;
        let mut value = 0;
        let _ = self
            .last
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                value = now.max(last + 1).max(floor_value + 1);
                Some(value)
            });
        let random = uuid::Uuid::now_v7().simple().to_string();
        let id = format!("{prefix}_{value:016x}{}", &random[random.len() - 10..]);
        match floor {
            // A client id in another format: extend it so the new id still sorts after it.
            Some(f) if id.as_str() <= f => format!("{f}{}", &random[random.len() - 10..]),
            _ => id,
        }
    }
}

/// The script's notion of "which message": the embedded id of a runner-encoded
/// `msg_<16 hex>_<id>`, otherwise the whole id.
fn logical_message_id(id: &str) -> &str {
    let rest = id.strip_prefix("msg_").unwrap_or(id);
    match rest.split_at_checked(16) {
        Some((hex, tail))
            if hex.chars().all(|c| c.is_ascii_hexdigit()) && tail.starts_with('_') =>
        {
            &tail[1..]
        }
        _ => id,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs a cut point (which may block for the harness) without stalling the runtime.
fn point_async(shared: &Shared, name: &str) {
    tokio::task::block_in_place(|| shared.opts.faults.point(name, &shared.journal));
}

impl Shared {
    fn point(&self, name: &str) {
        self.opts.faults.point(name, &self.journal);
    }

    fn state(&self) -> MutexGuard<'_, ServerState> {
        lock(&self.state)
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

    /// Journals and builds a response; `done` is dropped once the HTTP layer
    /// has taken the response over (it closes the channel its receiver waits on).
    fn respond(
        &self,
        method: &Method,
        uri: &Uri,
        status: StatusCode,
        body: Option<Value>,
        done: Option<mpsc::Sender<()>>,
    ) -> Response {
        self.journal.message_out(&json!({
            "method": method.as_str(),
            "path": uri.path(),
            "status": status.as_u16(),
            "body": body,
        }));
        let mut response = match body {
            Some(b) => (status, axum::Json(b)).into_response(),
            None => status.into_response(),
        };
        if let Some(done) = done {
            let headers = std::mem::take(response.headers_mut());
            let mut guarded = Response::new(Body::new(GuardBody {
                inner: std::mem::replace(response.body_mut(), Body::empty()),
                _done: done,
            }));
            *guarded.status_mut() = status;
            *guarded.headers_mut() = headers;
            response = guarded;
        }
        response
    }

    /// Journals, broadcasts and passes `opencode.<type>.notified`.
    fn emit(&self, kind: &str, properties: Value) {
        {
            let _order = lock(&self.emit_lock);
            let event =
                json!({ "id": self.ids.next("evt"), "type": kind, "properties": properties });
            self.journal.message_out(&json!({ "event": event }));
            let _ = self.events.send(event);
        }
        self.point(&format!("opencode.{}.notified", cutpoint::slug(kind)));
    }

    fn fail_storage(&self, e: &std::io::Error) -> ! {
        // The store is the fake's durable truth; carrying on after a failed
        // write would make it lie about what is recorded.
        self.journal
            .fact("storage.failed", json!({ "error": e.to_string() }));
        eprintln!("fake-provider opencode: failed to write the store: {e}");
        std::process::exit(3);
    }
}

/// A response body that holds a channel sender until hyper drops the body,
/// which it does once the response is written (or abandoned).
struct GuardBody {
    inner: Body,
    _done: mpsc::Sender<()>,
}

impl HttpBody for GuardBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Waits (off the runtime) until a guarded response is taken over, then passes `point`.
fn after_response(shared: Arc<Shared>, done: mpsc::Receiver<()>, point: String) {
    after_response_then(shared, done, point, || {});
}

/// As [`after_response`], then runs `then`: what the request set in motion
/// starts only once its response is out, so the order of the fake's
/// boundaries does not depend on thread timing.
fn after_response_then(
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
    point: String,
    then: impl FnOnce() + Send + 'static,
) {
    std::thread::spawn(move || {
        let _ = done.recv();
        shared.point(&point);
        then();
    });
}

fn not_found(message: String) -> Value {
    json!({ "name": "NotFoundError", "data": { "message": message } })
}

fn invalid(message: String, field: Option<&str>) -> Value {
    let mut v = json!({ "_tag": "InvalidRequestError", "message": message, "kind": "Body" });
    if let Some(f) = field {
        v["field"] = json!(f);
    }
    v
}

/// Parses a JSON object body; an empty body reads as `{}` when `empty_ok`.
fn object_body(body: &Bytes, empty_ok: bool) -> Result<serde_json::Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) && empty_ok {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err("the request body must be a JSON object".to_owned()),
        Err(e) => Err(format!("the request body is not valid JSON: {e}")),
    }
}

type Shr = State<Arc<Shared>>;

async fn health(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.health.received");
    let body = json!({ "healthy": true, "version": FAKE_OPENCODE_VERSION });
    s.respond(&method, &uri, StatusCode::OK, Some(body), None)
}

async fn session_create(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.session_create.received");
    let req = match object_body(&body, true) {
        Ok(o) => o,
        Err(e) => {
            return s.respond(
                &method,
                &uri,
                StatusCode::BAD_REQUEST,
                Some(invalid(e, None)),
                None,
            );
        }
    };
    let id = s.ids.next("ses");
    let now = now_ms();
    let directory = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| "/".to_owned());
    let title = match req.get("title") {
        Some(Value::String(t)) => t.clone(),
        _ => format!("New session - {now}"),
    };
    let info = json!({
        "id": id,
        "slug": format!("fake-{}", &id[id.len() - 6..]),
        "projectID": "global",
        "directory": directory,
        "title": title,
        "version": FAKE_OPENCODE_VERSION,
        "time": { "created": now, "updated": now },
    });
    if let Err(e) = s.state().store.put_session(info.clone()) {
        s.fail_storage(&e);
    }
    s.journal.fact("session.recorded", json!({ "session": id }));
    point_async(&s, "opencode.session.recorded");
    s.emit("session.created", json!({ "sessionID": id, "info": info }));
    let (done, responded) = mpsc::channel();
    after_response(
        Arc::clone(&s),
        responded,
        "opencode.session_create.responded".to_owned(),
    );
    s.respond(&method, &uri, StatusCode::OK, Some(info), Some(done))
}

async fn session_get(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.session_get.received");
    let info = s.state().store.session(&session).cloned();
    match info {
        Some(info) => s.respond(&method, &uri, StatusCode::OK, Some(info), None),
        None => s.respond(
            &method,
            &uri,
            StatusCode::NOT_FOUND,
            Some(not_found(format!("Session not found: {session}"))),
            None,
        ),
    }
}

async fn messages(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.messages.received");
    let list: Option<Vec<Value>> = {
        let st = s.state();
        st.store.session(&session).map(|_| {
            st.store
                .messages(&session)
                .map(|m| json!({ "info": m.info, "parts": st.store.parts(m.id()) }))
                .collect()
        })
    };
    match list {
        Some(l) => s.respond(&method, &uri, StatusCode::OK, Some(Value::Array(l)), None),
        None => s.respond(
            &method,
            &uri,
            StatusCode::NOT_FOUND,
            Some(not_found(format!("Session not found: {session}"))),
            None,
        ),
    }
}

async fn message(
    State(s): Shr,
    Path((session, message)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.message.received");
    let found = {
        let st = s.state();
        st.store
            .message(&session, &message)
            .map(|m| json!({ "info": m.info, "parts": st.store.parts(m.id()) }))
    };
    match found {
        Some(m) => s.respond(&method, &uri, StatusCode::OK, Some(m), None),
        None => s.respond(
            &method,
            &uri,
            StatusCode::NOT_FOUND,
            Some(not_found(format!("Message not found: {message}"))),
            None,
        ),
    }
}

async fn abort(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.abort.received");
    let known = {
        let st = s.state();
        if let Some(a) = st.active.get(&session) {
            let _ = a.control.send(Control::Abort);
        }
        st.store.session(&session).is_some()
    };
    if !known {
        let e = invalid(format!("Session not found: {session}"), Some("sessionID"));
        return s.respond(&method, &uri, StatusCode::BAD_REQUEST, Some(e), None);
    }
    let (done, responded) = mpsc::channel();
    after_response(
        Arc::clone(&s),
        responded,
        "opencode.abort.responded".to_owned(),
    );
    s.respond(&method, &uri, StatusCode::OK, Some(json!(true)), Some(done))
}

async fn permission_reply(
    State(s): Shr,
    Path(request): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.permission.received");
    let reply = match object_body(&body, false) {
        Ok(o) => match o.get("reply").and_then(Value::as_str) {
            Some(r @ ("once" | "always" | "reject")) => r.to_owned(),
            _ => {
                let e = invalid(
                    "`reply` must be one of \"once\", \"always\", \"reject\"".to_owned(),
                    Some("reply"),
                );
                return s.respond(&method, &uri, StatusCode::BAD_REQUEST, Some(e), None);
            }
        },
        Err(e) => {
            return s.respond(
                &method,
                &uri,
                StatusCode::BAD_REQUEST,
                Some(invalid(e, None)),
                None,
            );
        }
    };
    // The turn hears the reply once the response is written (below), so the
    // `permission.responded` boundary always precedes what the reply starts.
    let control = {
        let mut st = s.state();
        match st.permissions.remove(&request) {
            Some(session) => st.active.get(&session).map(|a| a.control.clone()),
            None => None,
        }
    };
    let Some(control) = control else {
        let e = json!({
            "_tag": "PermissionNotFoundError",
            "requestID": request,
            "message": format!("Permission request not found: {request}"),
        });
        return s.respond(&method, &uri, StatusCode::NOT_FOUND, Some(e), None);
    };
    let (done, responded) = mpsc::channel();
    after_response_then(
        Arc::clone(&s),
        responded,
        "opencode.permission.responded".to_owned(),
        move || {
            let _ = control.send(Control::Reply(reply));
        },
    );
    s.respond(&method, &uri, StatusCode::OK, Some(json!(true)), Some(done))
}

async fn fallback(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    let e = not_found(format!("No route for {method} {}", uri.path()));
    s.respond(&method, &uri, StatusCode::NOT_FOUND, Some(e), None)
}

async fn event_stream(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    use tokio_stream::StreamExt as _;
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.event.received");
    // Subscribe before announcing the connection, so nothing emitted after
    // `server.connected` can be missed.
    let rx = s.events.subscribe();
    let connected = {
        let _order = lock(&s.emit_lock);
        let event =
            json!({ "id": s.ids.next("evt"), "type": "server.connected", "properties": {} });
        s.journal.message_out(&json!({ "event": event }));
        event
    };
    let stream = tokio_stream::once(Ok(connected))
        .chain(tokio_stream::wrappers::BroadcastStream::new(rx))
        // A subscriber that fell too far behind is cut off: it sees EOF.
        .map_while(|e| e.ok())
        .map(|event| Ok::<_, Infallible>(SseEvent::default().data(event.to_string())));
    Sse::new(stream).into_response()
}

async fn prompt_async(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    point_async(&s, "opencode.prompt_async.received");
    let bad = |status: StatusCode, body: Value| s.respond(&method, &uri, status, Some(body), None);
    let req = match object_body(&body, false) {
        Ok(o) => o,
        Err(e) => return bad(StatusCode::BAD_REQUEST, invalid(e, None)),
    };
    let message_id = match req.get("messageID") {
        Some(Value::String(m)) if m.starts_with("msg") => Some(m.clone()),
        None => None,
        Some(_) => {
            return bad(
                StatusCode::BAD_REQUEST,
                invalid(
                    "`messageID` must be a string starting with \"msg\"".into(),
                    Some("messageID"),
                ),
            );
        }
    };
    let Some(Value::Array(parts)) = req.get("parts") else {
        return bad(
            StatusCode::BAD_REQUEST,
            invalid("`parts` must be an array".into(), Some("parts")),
        );
    };
    let mut texts = Vec::new();
    for p in parts {
        match (p.get("type").and_then(Value::as_str), p.get("text")) {
            (Some("text"), Some(Value::String(t))) => texts.push(t.clone()),
            _ => {
                return bad(
                    StatusCode::BAD_REQUEST,
                    invalid(
                        "this fake accepts only text parts `{type: \"text\", text}`".into(),
                        Some("parts"),
                    ),
                );
            }
        }
    }
    let text = texts.join("\n");
    let continuation = text.starts_with(CONTINUE_MARKER);
    let (control_tx, control_rx) = mpsc::channel();
    let recorded = {
        let mut st = s.state();
        let recorded = record_user_message(&s, &mut st, &session, message_id, &texts, continuation);
        if recorded.is_ok() {
            let active = Active {
                control: control_tx,
            };
            st.active.insert(session.clone(), active);
        }
        recorded
    };
    let (message_id, meta, steps) = match recorded {
        Ok(r) => r,
        Err((status, body)) => return bad(status, body),
    };
    s.journal.fact(
        "turn.recorded",
        json!({
            "thread": session,
            "turn": message_id,
            "client_id": message_id,
            "continuation": continuation,
            "authorized_by": meta.authorized_by,
        }),
    );
    point_async(&s, "opencode.turn.recorded");
    let (done, responded) = mpsc::channel();
    let turn = Turn {
        shared: Arc::clone(&s),
        session,
        user_id: message_id,
        authorized_by: meta.authorized_by,
        control: control_rx,
    };
    std::thread::spawn(move || turn.run(responded, steps));
    s.respond(&method, &uri, StatusCode::NO_CONTENT, None, Some(done))
}

type Refusal = (StatusCode, Value);

/// Validates a prompt, picks its script turn and makes the user message durable.
fn record_user_message(
    s: &Shared,
    st: &mut ServerState,
    session: &str,
    message_id: Option<String>,
    texts: &[String],
    continuation: bool,
) -> Result<(String, UserMeta, VecDeque<Step>), Refusal> {
    if st.store.session(session).is_none() {
        return Err((
            StatusCode::NOT_FOUND,
            not_found(format!("Session not found: {session}")),
        ));
    }
    if st.active.contains_key(session) {
        return Err((
            StatusCode::BAD_REQUEST,
            invalid(format!("Session {session} is busy"), None),
        ));
    }
    // Without a client id the server picks one, as the real server does; the
    // client then has nothing to look the turn up by.
    let message_id = match message_id {
        Some(m) => m,
        None => s.ids.after("msg", st.store.last_message_id(session)),
    };
    let message_id = message_id.as_str();
    if let Some(last) = st.store.last_message_id(session)
        && message_id <= last
    {
        return Err((
            StatusCode::BAD_REQUEST,
            invalid(
                format!(
                    "messageID {message_id} does not sort after the session's latest message {last}; \
                     message ids are time-ordered"
                ),
                Some("messageID"),
            ),
        ));
    }
    let users: Vec<&UserMeta> = st
        .store
        .messages(session)
        .filter_map(|m| m.user.as_ref())
        .collect();
    let meta = if continuation {
        let Some(target) = users.iter().rev().find(|u| !u.continuation) else {
            return Err((
                StatusCode::BAD_REQUEST,
                invalid(
                    format!("session {session} has no user message to continue"),
                    None,
                ),
            ));
        };
        UserMeta {
            continuation,
            authorized_by: target.authorized_by.clone(),
            script_index: target.script_index,
        }
    } else {
        // The naive model: the same message plays the same script turn again; a
        // new message plays the next one.
        let mut seen: Vec<&str> = Vec::new();
        for u in users.iter().filter(|u| !u.continuation) {
            let key = logical_message_id(&u.authorized_by);
            if !seen.contains(&key) {
                seen.push(key);
            }
        }
        let key = logical_message_id(message_id);
        let index = seen.iter().position(|k| *k == key).unwrap_or(seen.len());
        UserMeta {
            continuation,
            authorized_by: message_id.to_owned(),
            script_index: index,
        }
    };
    let script_turn = s.opts.script.turn(meta.script_index).clone();
    let done: HashSet<String> = if continuation {
        ledger::read(&s.opts.ledger)
            .map_err(|e| {
                (
                    StatusCode::BAD_REQUEST,
                    invalid(format!("failed to read the ledger: {e}"), None),
                )
            })?
            .into_iter()
            .filter(|e| e.by == meta.authorized_by)
            .map(|e| e.key)
            .collect()
    } else {
        HashSet::new()
    };
    let mut steps: VecDeque<Step> = script_turn.say.into_iter().map(Step::Say).collect();
    for tool in script_turn.tools {
        if done.contains(&tool.key) {
            s.journal.fact(
                "effect.skipped",
                json!({ "key": tool.key, "by": meta.authorized_by, "reason": "already in ledger" }),
            );
        } else {
            steps.push_back(Step::Tool(tool));
        }
    }
    steps.push_back(Step::Say(script_turn.final_message));

    let now = now_ms();
    // Parts first, the message last: the message file is what makes the turn
    // recorded.
    for t in texts {
        let part = json!({
            "id": s.ids.next("prt"),
            "sessionID": session,
            "messageID": message_id,
            "type": "text",
            "text": t,
        });
        if let Err(e) = st.store.put_part(part) {
            s.fail_storage(&e);
        }
    }
    let info = json!({
        "id": message_id,
        "sessionID": session,
        "role": "user",
        "time": { "created": now },
        "agent": "build",
        "model": { "providerID": "turncut", "modelID": "fake-model" },
    });
    if let Err(e) = st.store.put_message(session, info, Some(meta.clone())) {
        s.fail_storage(&e);
    }
    Ok((message_id.to_owned(), meta, steps))
}

/// One turn, played on its own thread so cut points may block it freely.
struct Turn {
    shared: Arc<Shared>,
    session: String,
    user_id: String,
    authorized_by: String,
    control: mpsc::Receiver<Control>,
}

enum Outcome {
    Completed,
    Aborted,
}

impl Turn {
    fn run(self, responded: mpsc::Receiver<()>, steps: VecDeque<Step>) {
        let s = Arc::clone(&self.shared);
        let _ = responded.recv();
        s.point("opencode.prompt_async.responded");
        let (user_info, user_parts) = {
            let st = s.state();
            let info = st
                .store
                .message(&self.session, &self.user_id)
                .map(|m| m.info.clone())
                .unwrap_or(Value::Null);
            (info, st.store.parts(&self.user_id))
        };
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": user_info }),
        );
        for part in user_parts {
            self.announce_part(part);
        }
        s.emit(
            "session.status",
            json!({ "sessionID": self.session, "status": { "type": "busy" } }),
        );
        let cwd = std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|_| "/".to_owned());
        let mut info = json!({
            "id": s.ids.after("msg", Some(&self.user_id)),
            "sessionID": self.session,
            "role": "assistant",
            "time": { "created": now_ms() },
            "parentID": self.user_id,
            "modelID": "fake-model",
            "providerID": "turncut",
            "mode": "build",
            "agent": "build",
            "path": { "cwd": cwd, "root": cwd },
            "cost": 0,
            "tokens": { "input": 0, "output": 0, "reasoning": 0, "cache": { "read": 0, "write": 0 } },
        });
        self.save_message(&info);
        s.point("opencode.message.recorded");
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": info }),
        );
        let message_id = info["id"].as_str().unwrap_or_default().to_owned();
        let mut outcome = Outcome::Completed;
        for step in steps {
            if matches!(self.control.try_recv(), Ok(Control::Abort)) {
                outcome = Outcome::Aborted;
                break;
            }
            let step_outcome = match step {
                Step::Say(text) => {
                    self.text_part(&message_id, &text);
                    Outcome::Completed
                }
                Step::Tool(tool) => self.tool(&message_id, &tool),
            };
            if let Outcome::Aborted = step_outcome {
                outcome = Outcome::Aborted;
                break;
            }
        }
        info["time"]["completed"] = json!(now_ms());
        let status = match outcome {
            Outcome::Completed => {
                info["finish"] = json!("stop");
                "completed"
            }
            Outcome::Aborted => {
                info["error"] = aborted_error();
                "interrupted"
            }
        };
        self.save_message(&info);
        s.journal.fact(
            "turn.finished",
            json!({ "thread": self.session, "turn": self.user_id, "status": status }),
        );
        s.point("opencode.turn_completed.recorded");
        s.emit(
            "message.updated",
            json!({ "sessionID": self.session, "info": info }),
        );
        if let Outcome::Aborted = outcome {
            s.emit(
                "session.error",
                json!({ "sessionID": self.session, "error": aborted_error() }),
            );
        }
        {
            let mut st = s.state();
            st.active.remove(&self.session);
            let session = self.session.clone();
            st.permissions.retain(|_, sess| *sess != session);
        }
        s.emit(
            "session.status",
            json!({ "sessionID": self.session, "status": { "type": "idle" } }),
        );
        s.emit("session.idle", json!({ "sessionID": self.session }));
    }

    fn save_message(&self, info: &Value) {
        let s = &self.shared;
        let saved = s
            .state()
            .store
            .put_message(&self.session, info.clone(), None);
        if let Err(e) = saved {
            s.fail_storage(&e);
        }
    }

    /// Makes a part durable, passes `opencode.part.recorded` and announces it.
    fn save_part(&self, part: &Value) {
        let s = &self.shared;
        let saved = s.state().store.put_part(part.clone());
        if let Err(e) = saved {
            s.fail_storage(&e);
        }
        s.point("opencode.part.recorded");
        self.announce_part(part.clone());
    }

    fn announce_part(&self, part: Value) {
        self.shared.emit(
            "message.part.updated",
            json!({ "sessionID": self.session, "part": part, "time": now_ms() }),
        );
    }

    fn text_part(&self, message_id: &str, text: &str) {
        let now = now_ms();
        let part = json!({
            "id": self.shared.ids.next("prt"),
            "sessionID": self.session,
            "messageID": message_id,
            "type": "text",
            "text": text,
            "time": { "start": now, "end": now },
        });
        self.save_part(&part);
    }

    fn effect_argv(&self, key: &str) -> Vec<OsString> {
        let s = &self.shared;
        let mut argv = s.opts.self_cmd.clone();
        for a in [
            "effect",
            "--ledger",
            &s.opts.ledger.display().to_string(),
            "--key",
            key,
            "--by",
            &self.authorized_by,
            "--conversation",
            &self.session,
            "--turn",
            &self.user_id,
        ] {
            argv.push(a.into());
        }
        argv
    }

    fn tool(&self, message_id: &str, tool: &ScriptTool) -> Outcome {
        let s = Arc::clone(&self.shared);
        let argv = self.effect_argv(&tool.key);
        let words: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let command = crate::shell::join(words.iter().map(String::as_str));
        let input = json!({ "command": command, "description": format!("effect {}", tool.key) });
        let call_id = format!("call_{}", &s.ids.next("x")[2..]);
        let mut part = json!({
            "id": s.ids.next("prt"),
            "sessionID": self.session,
            "messageID": message_id,
            "type": "tool",
            "callID": call_id,
            "tool": "bash",
            "state": { "status": "pending", "input": input, "raw": "" },
        });
        self.save_part(&part);
        let start = now_ms();
        if tool.approval {
            let permission = s.ids.next("per");
            s.state()
                .permissions
                .insert(permission.clone(), self.session.clone());
            s.emit(
                "permission.asked",
                json!({
                    "id": permission,
                    "sessionID": self.session,
                    "permission": "bash",
                    "patterns": [command],
                    "metadata": {},
                    "always": [command],
                    "tool": { "messageID": message_id, "callID": call_id },
                }),
            );
            s.point("opencode.permission.asked");
            let reply = match self.control.recv() {
                Ok(Control::Reply(r)) => r,
                Ok(Control::Abort) | Err(_) => {
                    s.state().permissions.remove(&permission);
                    part["state"] = json!({
                        "status": "error", "input": input, "error": "Tool execution aborted",
                        "time": { "start": start, "end": now_ms() },
                    });
                    self.save_part(&part);
                    return Outcome::Aborted;
                }
            };
            s.journal.fact(
                "approval.decided",
                json!({ "thread": self.session, "turn": self.user_id, "key": tool.key, "decision": reply }),
            );
            s.emit(
                "permission.replied",
                json!({ "sessionID": self.session, "requestID": permission, "reply": reply }),
            );
            if reply == "reject" {
                part["state"] = json!({
                    "status": "error", "input": input,
                    "error": "The user rejected permission to use this specific tool call.",
                    "time": { "start": start, "end": now_ms() },
                });
                self.save_part(&part);
                return Outcome::Completed;
            }
        }
        part["state"] = json!({
            "status": "running", "input": input, "title": format!("effect {}", tool.key),
            "time": { "start": start },
        });
        self.save_part(&part);
        let (code, output) = self.run_effect(&argv, &tool.key);
        part["state"] = if code == Some(0) {
            json!({
                "status": "completed", "input": input, "output": output,
                "title": format!("effect {}", tool.key),
                "metadata": { "exit": code, "output": output },
                "time": { "start": start, "end": now_ms() },
            })
        } else {
            json!({
                "status": "error", "input": input, "error": output,
                "metadata": { "exit": code },
                "time": { "start": start, "end": now_ms() },
            })
        };
        self.save_part(&part);
        Outcome::Completed
    }

    fn run_effect(&self, argv: &[OsString], key: &str) -> (Option<i32>, String) {
        let s = &self.shared;
        s.point("opencode.effect.starting");
        let mut cmd = std::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        // A careful provider never hands its credentials to a tool shell.
        for var in CREDENTIAL_VARS {
            cmd.env_remove(var);
        }
        for var in ["TURNCUT_CUT_SOCKET", "TURNCUT_CUT_ARM", "TURNCUT_CUT_TRACE"] {
            cmd.env_remove(var);
        }
        let (code, output) = match cmd.output() {
            Ok(out) => {
                let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                (out.status.code(), text)
            }
            Err(e) => (None, format!("failed to spawn tool: {e}")),
        };
        s.journal.fact(
            "effect.exited",
            json!({ "key": key, "by": self.authorized_by, "thread": self.session, "turn": self.user_id, "exit_code": code }),
        );
        s.point("opencode.effect.exited");
        (code, output)
    }
}

fn aborted_error() -> Value {
    json!({ "name": "MessageAbortedError", "data": { "message": "The operation was aborted." } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_time_ordered_and_sort_after_a_floor() {
        let ids = Ids::default();
        let a = ids.next("msg");
        let b = ids.next("msg");
        assert!(a < b, "{a} < {b}");
        assert!(a.starts_with("msg_") && a.len() == 4 + 16 + 10, "{a}");
        let floor = "msg_ffffffffffffff00_m-1";
        let c = ids.after("msg", Some(floor));
        assert!(c.as_str() > floor, "{c} > {floor}");
        let odd = "msg_zzzz";
        let d = ids.after("msg", Some(odd));
        assert!(d.as_str() > odd, "{d} > {odd}");
    }

    #[test]
    fn logical_ids_decode_the_runner_encoding() {
        assert_eq!(logical_message_id("msg_0019f2a3b4c5d6e7_m-1"), "m-1");
        assert_eq!(
            logical_message_id("msg_0019f2a3b4c5d6e7_m-1__continuation"),
            "m-1__continuation"
        );
        assert_eq!(logical_message_id("msg_abc"), "msg_abc");
        assert_eq!(
            logical_message_id("msg_0019f2a3b4c5d6eZ_x"),
            "msg_0019f2a3b4c5d6eZ_x"
        );
    }

    #[test]
    fn only_loopback_binds() {
        assert!(bind("0.0.0.0", 0).unwrap_err().contains("loopback"));
        assert!(bind("example.com", 0).unwrap_err().contains("not an IP"));
        let l = bind("127.0.0.1", 0).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(
            bind("127.0.0.1", port)
                .unwrap_err()
                .contains("already in use")
        );
    }
}
