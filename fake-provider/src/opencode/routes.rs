//! The HTTP handlers of the fake OpenCode server, one per route of the
//! vendored OpenAPI document it simulates, and the acceptance of a prompt
//! (`prompt_async`): checked and planned, answered 204, then its turn started
//! on a thread of its own, which writes the user message first (the real
//! server answers before it writes the message; a crash of the process keeps
//! it, but, like the real server's, it is not synced, so a power cut does
//! not).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, mpsc};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::store::UserMeta;
use super::turn::Turn;
use super::wire::{
    self, FAKE_OPENCODE_VERSION, invalid, logical_message_id, not_found, object_body,
};
use super::{
    Active, Control, ServerState, Shared, after_response, after_response_then, lock, point_async,
};
use crate::journal::now_ms;
use crate::turns::{self, LedgerSkip, Step};

type Shr = State<Arc<Shared>>;

/// Passes a request's `.received` point; when the harness injects an
/// `error-answer` there, the answer is OpenCode's 500 with its `NamedError`
/// body, before anything of the request is done.
fn answered(s: &Shared, point: &str, method: &Method, uri: &Uri) -> Option<Response> {
    let session = uri
        .path()
        .strip_prefix("/session/")
        .map(|rest| rest.split('/').next().unwrap_or(rest));
    // One server serves one task, in its workspace.
    let cwd = super::wire::cwd();
    tokio::task::block_in_place(|| {
        s.opts
            .faults
            .answer_point_in(point, session, Some(&cwd), &s.journal)
    })?;
    let (status, body) = ::wire::upstream::opencode_error_answer(uri.path());
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Some(s.respond(method, uri, status, Some(body), None))
}

pub(super) async fn health(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.health.received", &method, &uri) {
        return r;
    }
    let body = json!({ "healthy": true, "version": FAKE_OPENCODE_VERSION });
    s.respond(&method, &uri, StatusCode::OK, Some(body), None)
}

pub(super) async fn session_create(
    State(s): Shr,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.session_create.received", &method, &uri) {
        return r;
    }
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
    let info = wire::session_info(&id, &req);
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

pub(super) async fn session_get(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.session_get.received", &method, &uri) {
        return r;
    }
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

pub(super) async fn messages(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.messages.received", &method, &uri) {
        return r;
    }
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

pub(super) async fn message(
    State(s): Shr,
    Path((session, message)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.message.received", &method, &uri) {
        return r;
    }
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

pub(super) async fn abort(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.abort.received", &method, &uri) {
        return r;
    }
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

pub(super) async fn permission_reply(
    State(s): Shr,
    Path(request): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.permission.received", &method, &uri) {
        return r;
    }
    let reply = match wire::permission_reply(&body) {
        Ok(r) => r,
        Err(e) => return s.respond(&method, &uri, StatusCode::BAD_REQUEST, Some(e), None),
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

pub(super) async fn fallback(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    s.journal_in(&method, &uri, &body);
    let e = not_found(format!("No route for {method} {}", uri.path()));
    s.respond(&method, &uri, StatusCode::NOT_FOUND, Some(e), None)
}

pub(super) async fn event_stream(State(s): Shr, method: Method, uri: Uri, body: Bytes) -> Response {
    use tokio_stream::StreamExt as _;
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.event.received", &method, &uri) {
        return r;
    }
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

pub(super) async fn prompt_async(
    State(s): Shr,
    Path(session): Path<String>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    s.journal_in(&method, &uri, &body);
    if let Some(r) = answered(&s, "opencode.prompt_async.received", &method, &uri) {
        return r;
    }
    let bad = |status: StatusCode, body: Value| s.respond(&method, &uri, status, Some(body), None);
    let prompt = match wire::prompt(&body) {
        Ok(p) => p,
        Err(e) => return bad(StatusCode::BAD_REQUEST, e),
    };
    let continuation = turns::is_continuation(&prompt.texts.join("\n"));
    let (control_tx, control_rx) = mpsc::channel();
    let texts = prompt.texts.clone();
    let accepted = {
        let mut st = s.state();
        let accepted = accept_prompt(&s, &st, &session, prompt, continuation);
        if accepted.is_ok() {
            let active = Active {
                control: control_tx,
            };
            st.active.insert(session.clone(), active);
        }
        accepted
    };
    let (message_id, meta, steps) = match accepted {
        Ok(r) => r,
        Err((status, body)) => return bad(status, body),
    };
    let (done, responded) = mpsc::channel();
    let turn = Turn {
        shared: Arc::clone(&s),
        session,
        user_id: message_id,
        authorized_by: meta.authorized_by.clone(),
        control: control_rx,
    };
    std::thread::spawn(move || turn.run(responded, steps, &texts, &meta));
    s.respond(&method, &uri, StatusCode::NO_CONTENT, None, Some(done))
}

type Refusal = (StatusCode, Value);

/// Validates a prompt and picks its script turn; the turn stores the user
/// message ([`store_user_message`]) once the 204 is out.
fn accept_prompt(
    s: &Shared,
    st: &ServerState,
    session: &str,
    prompt: wire::Prompt,
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
    let text = prompt.texts.join("\n");
    let message_id = new_message_id(s, st, session, prompt.message_id)?;
    let (meta, steps) = plan_prompt(s, st, session, &message_id, &text, continuation)?;
    Ok((message_id, meta, steps))
}

/// The id of a new user message: the client's, if it sorts after every
/// message of the session, else a refusal. Without a client id the server
/// picks one, as the real server does; the client then has nothing to look
/// the turn up by.
fn new_message_id(
    s: &Shared,
    st: &ServerState,
    session: &str,
    message_id: Option<String>,
) -> Result<String, Refusal> {
    let message_id = match message_id {
        Some(m) => m,
        None => s.ids.after("msg", st.store.last_message_id(session)),
    };
    if let Some(last) = st.store.last_message_id(session)
        && message_id.as_str() <= last
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
    Ok(message_id)
}

/// The prompt's turn bookkeeping and steps: the naive model's script turn
/// for a new message (runner-encoded ids count as the message they embed),
/// or, for a continuation, the turn it continues with the effects already
/// in the ledger skipped.
fn plan_prompt(
    s: &Shared,
    st: &ServerState,
    session: &str,
    message_id: &str,
    text: &str,
    continuation: bool,
) -> Result<(UserMeta, VecDeque<Step>), Refusal> {
    let users: Vec<&UserMeta> = st
        .store
        .messages(session)
        .filter_map(|m| m.user.as_ref())
        .collect();
    let meta = if continuation {
        let Some(target) = turns::continued(users.iter().copied()) else {
            // Nothing to continue: the real server takes every prompt; its
            // model, seeing no earlier message, has nothing to do.
            s.journal.fact(
                "continuation.empty",
                json!({ "thread": session, "reason": "no user message to continue" }),
            );
            let meta = UserMeta {
                continuation,
                authorized_by: message_id.to_owned(),
                script_index: 0,
            };
            let nothing = turns::nothing_to_continue();
            return Ok((meta, turns::plan(nothing, |_| Ok::<_, Refusal>(true))?));
        };
        UserMeta {
            continuation,
            authorized_by: target.authorized_by.clone(),
            script_index: target.script_index,
        }
    } else {
        UserMeta {
            continuation,
            authorized_by: message_id.to_owned(),
            script_index: turns::script_index(
                &s.opts.script,
                users.iter().copied(),
                message_id,
                text,
                logical_message_id,
            ),
        }
    };
    let script_turn = s.opts.script.turn(meta.script_index).clone();
    let skip =
        LedgerSkip::read(&s.opts.ledger, &meta.authorized_by, continuation).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                invalid(format!("failed to read the ledger: {e}"), None),
            )
        })?;
    let steps = turns::plan(script_turn, |tool| {
        Ok::<_, Refusal>(skip.keeps(tool, &s.journal))
    })?;
    Ok((meta, steps))
}

/// Stores the user message: its parts first, the message last (the
/// message file is what makes the turn recorded).
pub(super) fn store_user_message(
    s: &Shared,
    st: &mut ServerState,
    session: &str,
    message_id: &str,
    texts: &[String],
    meta: &UserMeta,
) {
    let now = now_ms();
    for t in texts {
        let part = wire::text_part(&s.ids.next("prt"), session, message_id, t, false);
        if let Err(e) = st.store.put_part(part) {
            s.fail_storage(&e);
        }
    }
    let info = wire::user_info(session, message_id, now);
    if let Err(e) = st.store.put_message(session, info, Some(meta.clone())) {
        s.fail_storage(&e);
    }
}
