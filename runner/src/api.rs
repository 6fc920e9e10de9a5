//! The control API (axum, loopback only, bearer token).
//!
//! | call | effect |
//! |---|---|
//! | `POST /v1/tasks` | admit a task; 201 `{task_id, run_id}`; the same ids again give the same answer |
//! | `POST /v1/tasks/{id}/messages` | queue a follow-up; 202; 409 `{reason}` when refused |
//! | `POST /v1/tasks/{id}/retry` | Retry; 201 `{run_id}` or 409 `{block_reason}` |
//! | `GET /v1/tasks/{id}` | state, runs, cause |
//! | `GET /v1/tasks/{id}/events?after=SEQ` | the run log as JSON lines, or SSE with `Accept: text/event-stream` |
//! | `GET /v1/health` | liveness and owner epoch |
//!
//! Handlers only validate, write through the store (which checks bindings
//! inside the write) and wake the task's actor; they never talk to providers.
//! Every error is JSON: 409 `{reason}` ([`Refusal`]) or `{block_reason}`
//! (Retry), and every other error `{error, reason}` with a
//! [`RequestError`] reason and its status (400, 401, 404, 405, 413, 503),
//! including the errors of axum's extractors, unknown paths and wrong
//! methods. Admission validates before anything is written: ids, the
//! workspace (absolute, canonical, an existing directory, not `/`), and the
//! size of a prompt or follow-up ([`TEXT_BYTES_MAX`], which every driver can
//! carry in one provider message) and of a body ([`BODY_BYTES_MAX`]).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::causes::{Refusal, RequestError};
use crate::engine::{Engine, RetryOutcome};
use crate::ids::new_id;
use crate::store::{Admission, FollowUpOutcome, StoreError, TaskState};

/// Shared state of the handlers.
pub struct ApiState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The bearer token.
    pub token: String,
}

/// The largest prompt or follow-up text, in UTF-8 bytes. JSON escaping can
/// make a text up to six times longer on the wire (`\u0000`), and the stdio
/// providers read lines of at most 1 MiB (`fake_provider::stdio`), so a text
/// of this size always fits in one provider message.
pub const TEXT_BYTES_MAX: usize = 128 * 1024;

/// The largest request body, in bytes.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

/// How much of a body over [`BODY_BYTES_MAX`] is read (and dropped) after
/// its 413 is sent, so that a client that sends its whole body before it
/// reads the answer finds the answer instead of a reset connection.
pub const BODY_DRAIN_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How long such a body is read after its 413.
pub const BODY_DRAIN_MS: u64 = 10_000;

/// The router.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/tasks", post(create_task))
        .route("/v1/tasks/{id}", get(get_task))
        .route("/v1/tasks/{id}/messages", post(follow_up))
        .route("/v1/tasks/{id}/retry", post(retry))
        .route("/v1/tasks/{id}/events", get(events))
        .fallback(|| async { reject(RequestError::NoRoute, "no such call") })
        .method_not_allowed_fallback(|| async {
            reject(
                RequestError::MethodNotAllowed,
                "this call does not take this method",
            )
        })
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(middleware::from_fn(announced_size))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

async fn auth(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let ok = presented.is_some_and(|p| constant_time_eq(p.as_bytes(), state.token.as_bytes()));
    if !ok {
        return reject(RequestError::Unauthorized, "missing or wrong bearer token");
    }
    next.run(request).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An error answer not yet rendered: `{error, reason}` with the reason's
/// status, and the limit for a 413.
struct Rejection {
    reason: RequestError,
    message: String,
    limit_bytes: Option<usize>,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.reason.status()).expect("request error statuses are valid");
        let mut body = json!({ "error": self.message, "reason": self.reason.as_str() });
        if let Some(limit) = self.limit_bytes {
            body["limit_bytes"] = json!(limit);
        }
        (status, Json(body)).into_response()
    }
}

fn rejection(reason: RequestError, message: &str) -> Rejection {
    Rejection {
        reason,
        message: message.to_owned(),
        limit_bytes: None,
    }
}

/// An error answer `{error, reason}` with the reason's status.
fn reject(reason: RequestError, message: &str) -> Response {
    rejection(reason, message).into_response()
}

fn storage(e: StoreError) -> Response {
    tracing::error!("storage failed: {e}");
    reject(RequestError::StorageFailed, &format!("storage failed: {e}"))
}

fn unknown_task(task_id: &str) -> Response {
    reject(RequestError::UnknownTask, &format!("no task {task_id}"))
}

fn body_too_large() -> Rejection {
    Rejection {
        reason: RequestError::BodyTooLarge,
        message: format!("the request body is over the limit of {BODY_BYTES_MAX} bytes"),
        limit_bytes: Some(BODY_BYTES_MAX),
    }
}

/// Refuses a body whose announced length is over [`BODY_BYTES_MAX`] at
/// once, before reading any of it, and then reads and drops it (up to
/// [`BODY_DRAIN_BYTES_MAX`] and [`BODY_DRAIN_MS`]) while the answer goes
/// out, and closes the connection: a client that writes its whole body
/// first then reads the 413, where closing a connection with unread data
/// would reset it under the client. A body without a length is cut by
/// `DefaultBodyLimit`.
async fn announced_size(request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > BODY_BYTES_MAX as u64) {
        drain_later(request.into_body());
        let mut answer = body_too_large().into_response();
        answer.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return answer;
    }
    next.run(request).await
}

/// Reads and drops `body` on a task of its own, within the drain bounds.
fn drain_later(body: axum::body::Body) {
    use tokio_stream::StreamExt as _;
    tokio::spawn(async move {
        let mut data = body.into_data_stream();
        let drain = async {
            let mut read = 0;
            while let Some(Ok(chunk)) = data.next().await {
                read += chunk.len();
                if read > BODY_DRAIN_BYTES_MAX {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_millis(BODY_DRAIN_MS), drain).await;
    });
}

/// The body, or the JSON answer to a body axum could not read.
fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, Rejection> {
    b.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            body_too_large()
        } else {
            rejection(RequestError::BadJson, &e.body_text())
        }
    })
}

/// The `{id}` path segment, or the JSON answer to one that does not decode.
fn path_id(p: Result<Path<String>, PathRejection>) -> Result<String, Rejection> {
    p.map(|Path(id)| id)
        .map_err(|e| rejection(RequestError::BadPath, &e.body_text()))
}

/// A prompt or follow-up text within [`TEXT_BYTES_MAX`], or a 413.
fn check_text(what: &str, text: &str) -> Result<(), Rejection> {
    if text.len() <= TEXT_BYTES_MAX {
        return Ok(());
    }
    Err(Rejection {
        reason: RequestError::TextTooLarge,
        message: format!(
            "{what} is {} bytes, over the limit of {TEXT_BYTES_MAX} bytes",
            text.len()
        ),
        limit_bytes: Some(TEXT_BYTES_MAX),
    })
}

/// A workspace must be an absolute, canonical path (no `.` or `..`, no
/// symlink, no `//` or trailing `/`) of an existing directory other than `/`:
/// the provider runs there and the tools are confined to it.
fn check_workspace(workspace: &str) -> Result<(), String> {
    use std::path::Component;
    let path = std::path::Path::new(workspace);
    if workspace.contains('\0') {
        return Err("the workspace contains a NUL byte".to_owned());
    }
    if !path.is_absolute() {
        return Err(format!("the workspace {workspace} is not an absolute path"));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
    {
        return Err(format!("the workspace {workspace} has a . or .. component"));
    }
    let real = path
        .canonicalize()
        .map_err(|e| format!("the workspace {workspace} is not usable: {e}"))?;
    if real.as_os_str() != path.as_os_str() {
        return Err(format!(
            "the workspace {workspace} is not canonical; its canonical path is {}",
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err(format!("the workspace {workspace} is not a directory"));
    }
    if real == std::path::Path::new("/") {
        return Err("the workspace cannot be /".to_owned());
    }
    Ok(())
}

fn refused(reason: Refusal, message: &str) -> Response {
    (
        StatusCode::CONFLICT,
        Json(json!({ "reason": reason.as_str(), "error": message })),
    )
        .into_response()
}

/// Parses a JSON body; the error is a 400 with serde's sentence.
fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Rejection> {
    serde_json::from_slice(body)
        .map_err(|e| rejection(RequestError::BadJson, &format!("bad JSON body: {e}")))
}

fn check_id(what: &str, id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 200 || id.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{what} must be 1 to 200 characters without control characters"
        ));
    }
    Ok(())
}

async fn health(State(state): State<Arc<ApiState>>) -> Response {
    Json(json!({ "ok": true, "owner_epoch": state.engine.epoch(), "pid": std::process::id() }))
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTask {
    task_id: String,
    message_id: String,
    prompt: String,
    profile: String,
    workspace: String,
}

async fn create_task(
    State(state): State<Arc<ApiState>>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let req: CreateTask = match body(raw).and_then(|b| parse(&b)) {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    for (what, id) in [("task_id", &req.task_id), ("message_id", &req.message_id)] {
        if let Err(m) = check_id(what, id) {
            return reject(RequestError::InvalidId, &m);
        }
    }
    if let Err(m) = check_workspace(&req.workspace) {
        return reject(RequestError::InvalidWorkspace, &m);
    }
    if let Err(r) = check_text("the prompt", &req.prompt) {
        return r.into_response();
    }
    if !state.engine.has_profile(&req.profile) {
        return refused(
            Refusal::UnknownProfile,
            &format!("profile {} is not configured", req.profile),
        );
    }
    let run_id = new_id("run");
    let epoch = state.engine.epoch();
    let task_id = req.task_id.clone();
    let admitted = state
        .engine
        .store()
        .call(move |db| {
            db.admit(
                &req.task_id,
                &req.message_id,
                &req.prompt,
                &req.profile,
                &req.workspace,
                &run_id,
                epoch,
            )
        })
        .await;
    match admitted {
        Ok(Admission::Admitted { run_id }) => {
            crate::cut::hit("runner.task_admitted.persisted");
            state.engine.wake(&task_id);
            (
                StatusCode::CREATED,
                Json(json!({ "task_id": task_id, "run_id": run_id })),
            )
                .into_response()
        }
        Ok(Admission::Conflict(m)) => refused(Refusal::IdConflict, &m),
        Err(e) => storage(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FollowUp {
    message_id: String,
    text: String,
}

async fn follow_up(
    State(state): State<Arc<ApiState>>,
    task_id: Result<Path<String>, PathRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let (task_id, req) =
        match path_id(task_id).and_then(|t| Ok((t, parse::<FollowUp>(&body(raw)?)?))) {
            Ok(r) => r,
            Err(r) => return r.into_response(),
        };
    if let Err(m) = check_id("message_id", &req.message_id) {
        return reject(RequestError::InvalidId, &m);
    }
    if let Err(r) = check_text("the follow-up text", &req.text) {
        return r.into_response();
    }
    let new_run = new_id("run");
    let epoch = state.engine.epoch();
    let tid = task_id.clone();
    let outcome = state
        .engine
        .store()
        .call(move |db| db.follow_up(&tid, &req.message_id, &req.text, &new_run, epoch))
        .await;
    match outcome {
        Ok(FollowUpOutcome::Queued { new_run }) => {
            crate::cut::hit("runner.follow_up.persisted");
            state.engine.wake(&task_id);
            (
                StatusCode::ACCEPTED,
                Json(json!({ "task_id": task_id, "queued": true, "new_run_id": new_run })),
            )
                .into_response()
        }
        Ok(FollowUpOutcome::Fenced) => refused(
            Refusal::PriorOwnerFenceRefused,
            "the task failed closed; a follow-up cannot reopen it, use Retry",
        ),
        Ok(FollowUpOutcome::Conflict(m)) => refused(Refusal::IdConflict, &m),
        Ok(FollowUpOutcome::UnknownTask) => unknown_task(&task_id),
        Err(e) => storage(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Retry {
    message_id: String,
}

async fn retry(
    State(state): State<Arc<ApiState>>,
    task_id: Result<Path<String>, PathRejection>,
    raw: Result<Bytes, BytesRejection>,
) -> Response {
    let (task_id, req) = match path_id(task_id).and_then(|t| Ok((t, parse::<Retry>(&body(raw)?)?)))
    {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    if let Err(m) = check_id("message_id", &req.message_id) {
        return reject(RequestError::InvalidId, &m);
    }
    match state.engine.retry(&task_id, &req.message_id).await {
        Ok(RetryOutcome::Admitted { run_id }) => (
            StatusCode::CREATED,
            Json(json!({ "task_id": task_id, "run_id": run_id })),
        )
            .into_response(),
        Ok(RetryOutcome::Blocked(reason)) => (
            StatusCode::CONFLICT,
            Json(json!({ "block_reason": reason.as_str() })),
        )
            .into_response(),
        Ok(RetryOutcome::UnknownTask) => unknown_task(&task_id),
        Err(e) => storage(e),
    }
}

async fn get_task(
    State(state): State<Arc<ApiState>>,
    task_id: Result<Path<String>, PathRejection>,
) -> Response {
    let task_id = match path_id(task_id) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let tid = task_id.clone();
    let result = state
        .engine
        .store()
        .call(move |db| {
            let Some(task) = db.task(&tid)? else {
                return Ok(None);
            };
            let runs = db.runs(&tid)?;
            let mut runs_json = Vec::new();
            for r in runs {
                let turns = db.turns(&r.run_id)?;
                let mut v = serde_json::to_value(&r).expect("runs serialize");
                v["turns"] = serde_json::to_value(&turns).expect("turns serialize");
                runs_json.push(v);
            }
            let queue = db.queue(&tid)?;
            // What a Retry would deliver now, for a task a Retry can take.
            let retry = match task.state {
                TaskState::Failed | TaskState::NeedsHuman => {
                    let d = db.retry_delivery(&tid)?;
                    json!({ "resends": d.resends, "then": d.queued })
                }
                _ => Value::Null,
            };
            Ok(Some(json!({
                "task_id": task.task_id,
                "profile": task.profile,
                "workspace": task.workspace,
                "state": task.state,
                "cause": task.cause,
                "current_run": task.current_run,
                "runs": runs_json,
                "queued_messages": queue.iter().map(|m| &m.message_id).collect::<Vec<_>>(),
                "retry_would_deliver": retry,
            })))
        })
        .await;
    match result {
        Ok(Some(v)) => Json(v).into_response(),
        Ok(None) => unknown_task(&task_id),
        Err(e) => storage(e),
    }
}

#[derive(Deserialize)]
struct After {
    #[serde(default)]
    after: i64,
}

async fn events(
    State(state): State<Arc<ApiState>>,
    task_id: Result<Path<String>, PathRejection>,
    query: Result<Query<After>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let task_id = match path_id(task_id) {
        Ok(t) => t,
        Err(r) => return r.into_response(),
    };
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => return reject(RequestError::BadQuery, &e.body_text()),
    };
    let tid = task_id.clone();
    let exists = state.engine.store().call(move |db| db.task(&tid)).await;
    match exists {
        Ok(Some(_)) => {}
        Ok(None) => return unknown_task(&task_id),
        Err(e) => return storage(e),
    }
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !sse {
        let tid = task_id.clone();
        let after = q.after;
        return match state
            .engine
            .store()
            .call(move |db| db.events(&tid, after, i64::MAX))
            .await
        {
            Ok(evs) => {
                let mut body = String::new();
                for e in evs {
                    body.push_str(&serde_json::to_string(&e).expect("events serialize"));
                    body.push('\n');
                }
                ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
            }
            Err(e) => storage(e),
        };
    }
    let store = state.engine.store().clone();
    // Subscribe before reading the backlog so nothing committed in between is missed.
    let notes = store.subscribe();
    Sse::new(event_stream(store, task_id, q.after, notes))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The SSE stream: the backlog after `after`, then every new event as it is
/// committed. A lagging subscriber re-reads from the store, so no event is
/// skipped.
fn event_stream(
    store: crate::store::Store,
    task_id: String,
    after: i64,
    mut notes: tokio::sync::broadcast::Receiver<(String, i64)>,
) -> impl tokio_stream::Stream<Item = Result<SseEvent, std::convert::Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(64);
    tokio::spawn(async move {
        let mut last = after;
        loop {
            let tid = task_id.clone();
            let batch = match store.call(move |db| db.events(&tid, last, 500)).await {
                Ok(b) => b,
                Err(_) => return,
            };
            for e in &batch {
                last = e.seq;
                if tx
                    .send(serde_json::to_value(e).expect("events serialize"))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if batch.len() == 500 {
                continue;
            }
            loop {
                match notes.recv().await {
                    Ok((t, seq)) if t == task_id && seq > last => break,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    use tokio_stream::StreamExt as _;
    tokio_stream::wrappers::ReceiverStream::new(rx).map(|v| {
        let seq = v.get("seq").and_then(Value::as_i64).unwrap_or(0);
        Ok(SseEvent::default().id(seq.to_string()).data(v.to_string()))
    })
}
