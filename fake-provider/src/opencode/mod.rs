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
//!
//! Files: this one holds the server (state, responses, events); `routes.rs`
//! the HTTP handlers and the recording of a prompt; `turn.rs` a turn's
//! thread; `wire.rs` ids and wire forms; `store.rs` the durable store.

mod routes;
pub mod store;
mod turn;
mod upstream;
pub mod wire;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::journal::Journal;
use crate::serving::Options;
pub use ::wire::marker::CONTINUE_MARKER;
use store::Store;
pub use wire::FAKE_OPENCODE_VERSION;
use wire::Ids;

/// How many SSE events a slow subscriber may fall behind before its stream is
/// closed (it sees EOF, as after a server restart).
pub const EVENTS_BUFFERED_MAX: usize = 4096;

/// Binds `hostname:port`, refusing anything that is not loopback. The error is
/// a sentence for the user (exit code 2).
pub fn bind(hostname: &str, port: u16) -> Result<std::net::TcpListener, String> {
    crate::http::bind(hostname, port)
}

/// Serves on `listener` (loopback) until stdin closes or SIGTERM arrives,
/// then exits the process with 0.
pub fn serve(opts: Options, listener: std::net::TcpListener) -> anyhow::Result<()> {
    let (journal, store) = crate::serving::start(&opts, "opencode", Some(&listener), |dir, j| {
        Store::open(dir, j.generation())
    })?;
    let (events, _) = broadcast::channel(EVENTS_BUFFERED_MAX);
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
    let app = router(Arc::clone(&shared));
    crate::http::run(&shared, |s| &s.journal, listener, 4, "opencode server", app)
}

fn router(shared: Arc<Shared>) -> axum::Router {
    use routes::*;
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
    opts: Options,
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
        crate::http::journal_in(&self.journal, method, uri, body);
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
        let journaled = body.clone().unwrap_or(Value::Null);
        crate::http::journal_out(&self.journal, method, uri, status, &journaled);
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
        crate::serving::fail_storage(
            &self.journal,
            e,
            "fake-provider opencode: failed to write the store",
        )
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
