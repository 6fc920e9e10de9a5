//! A checker for one Codex app-server connection, fed every message in both directions.
//!
//! JSON-RPC responses carry only an id, so which type a `result` must have depends on the
//! request that id answered, sent earlier in the opposite direction. The session remembers
//! outstanding requests for exactly that reason. It deliberately does not judge the
//! conversation beyond the spec: ordering (`initialize` first, `turn/started` before
//! `item/started`) and timing are the harness oracles' business, not the wire format's.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{
    CallKind, CodexSchema, ERROR_ENVELOPE, ERROR_OBJECT, NOTIFICATION_ENVELOPE, REQUEST_ENVELOPE,
    RESPONSE_ENVELOPE, codex,
};
use crate::{Direction, Violation};

/// A request that has been sent and not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRequest {
    /// The way the request travelled; its answer must travel the other way.
    pub direction: Direction,
    pub id: Value,
    pub method: String,
}

/// The stateful checker for one connection.
///
/// Feed it every message in the order it was seen on the wire. Each call checks one message
/// and returns the first way in which it breaks the spec.
#[derive(Debug)]
pub struct CodexSession<'s> {
    schema: &'s CodexSchema,
    /// Outstanding requests keyed by direction and the id's JSON text, so that the string
    /// `"1"` and the number `1` stay distinct ids, as JSON-RPC requires.
    pending: HashMap<(Direction, String), PendingRequest>,
}

impl CodexSession<'static> {
    /// A session checked against the process-wide schema from [`codex`].
    ///
    /// # Panics
    ///
    /// Panics when the vendored spec cannot be loaded, as [`codex`] does.
    pub fn new() -> Self {
        Self::with_schema(codex())
    }
}

impl Default for CodexSession<'static> {
    fn default() -> Self {
        Self::new()
    }
}

/// The shape of a message, read from which keys it has.
enum Shape {
    Request,
    Notification,
    Response,
    Error,
}

impl<'s> CodexSession<'s> {
    /// A session checked against `schema`.
    pub fn with_schema(schema: &'s CodexSchema) -> Self {
        CodexSession {
            schema,
            pending: HashMap::new(),
        }
    }

    /// Checks one line as read from the wire: it must be exactly one JSON object.
    pub fn check_line(&mut self, direction: Direction, line: &str) -> Result<(), Violation> {
        match serde_json::from_str::<Value>(line) {
            Ok(message) => self.check(direction, &message),
            Err(error) => Err(Violation::new(
                direction,
                "line",
                vec![format!("not one JSON value: {error}")],
            )),
        }
    }

    /// Checks one message travelling in `direction`.
    pub fn check(&mut self, direction: Direction, message: &Value) -> Result<(), Violation> {
        let violation =
            |summary: &str, errors: Vec<String>| Violation::new(direction, summary, errors);
        let Some(object) = message.as_object() else {
            return Err(violation(
                "message",
                vec![format!(
                    "at /: a message must be a JSON object, got {}",
                    json_kind(message)
                )],
            ));
        };
        let shape = classify(object);
        let summary = summarize(object, &shape);
        // The real app-server omits the field, and a peer that sends it is speaking generic
        // JSON-RPC 2.0 rather than this protocol.
        if object.contains_key("jsonrpc") {
            return Err(violation(
                &summary,
                vec![
                    "at /jsonrpc: the Codex app-server wire format has no `jsonrpc` field"
                        .to_owned(),
                ],
            ));
        }
        let Some(shape) = shape else {
            return Err(violation(
                &summary,
                vec![
                    "at /: not a request, notification, response or error: it needs `method`, \
                     `result` or `error` (and not both `result` and `error`)"
                        .to_owned(),
                ],
            ));
        };
        match shape {
            Shape::Request => self.check_request(direction, message, object, &summary),
            Shape::Notification => self.check_notification(direction, message, object, &summary),
            Shape::Response => self.check_response(direction, message, object, &summary),
            Shape::Error => self.check_error(direction, message, object, &summary),
        }
    }

    /// Requests sent and not yet answered, in no particular order. A test can assert this is
    /// empty at the end of a conversation that should have answered everything.
    pub fn pending(&self) -> impl Iterator<Item = &PendingRequest> {
        self.pending.values()
    }

    fn check_request(
        &mut self,
        direction: Direction,
        message: &Value,
        object: &Map<String, Value>,
        summary: &str,
    ) -> Result<(), Violation> {
        let violation = |errors| Violation::new(direction, summary, errors);
        self.schema
            .check_at(REQUEST_ENVELOPE, message, "")
            .map_err(violation)?;
        // The envelope guarantees both fields.
        let (Some(id), Some(method)) = (
            object.get("id"),
            object.get("method").and_then(Value::as_str),
        ) else {
            unreachable!("JSONRPCRequest requires a string method and an id");
        };
        let key = (direction, id.to_string());
        if self.pending.contains_key(&key) {
            return Err(violation(vec![format!(
                "at /id: id {id} is already used by a {direction} request that has not been answered"
            )]));
        }
        // The request is remembered even if its params turn out to be wrong, so that its
        // answer is not reported a second time as answering nothing.
        self.pending.insert(
            key,
            PendingRequest {
                direction,
                id: id.clone(),
                method: method.to_owned(),
            },
        );
        let Some(spec) = self.schema.method(direction, CallKind::Request, method) else {
            return Err(violation(vec![self.unknown_method(
                direction,
                CallKind::Request,
                method,
            )]));
        };
        self.schema.check_call(spec, message).map_err(violation)
    }

    fn check_notification(
        &mut self,
        direction: Direction,
        message: &Value,
        object: &Map<String, Value>,
        summary: &str,
    ) -> Result<(), Violation> {
        let violation = |errors| Violation::new(direction, summary, errors);
        self.schema
            .check_at(NOTIFICATION_ENVELOPE, message, "")
            .map_err(violation)?;
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            unreachable!("JSONRPCNotification requires a string method");
        };
        let Some(spec) = self
            .schema
            .method(direction, CallKind::Notification, method)
        else {
            return Err(violation(vec![self.unknown_method(
                direction,
                CallKind::Notification,
                method,
            )]));
        };
        self.schema.check_call(spec, message).map_err(violation)
    }

    fn check_response(
        &mut self,
        direction: Direction,
        message: &Value,
        object: &Map<String, Value>,
        summary: &str,
    ) -> Result<(), Violation> {
        self.schema
            .check_at(RESPONSE_ENVELOPE, message, "")
            .map_err(|errors| Violation::new(direction, summary, errors))?;
        let (Some(id), Some(result)) = (object.get("id"), object.get("result")) else {
            unreachable!("JSONRPCResponse requires an id and a result");
        };
        let request = self.answer(direction, id, summary)?;
        let summary = format!("{summary} to `{}`", request.method);
        let response_schema = self
            .schema
            .method(request.direction, CallKind::Request, &request.method)
            .and_then(|spec| spec.response_schema());
        match response_schema {
            Some(pointer) => self
                .schema
                .check_at(pointer, result, "/result")
                .map_err(|errors| Violation::new(direction, summary, errors)),
            // The spec names no result type for this method, so the envelope is all there is
            // to check.
            None => Ok(()),
        }
    }

    fn check_error(
        &mut self,
        direction: Direction,
        message: &Value,
        object: &Map<String, Value>,
        summary: &str,
    ) -> Result<(), Violation> {
        let violation = |errors| Violation::new(direction, summary, errors);
        // A peer that cannot parse a line cannot know its id, so JSON-RPC answers it with
        // `id: null`; the spec's envelope does not allow that, but the error object itself
        // must still be well formed.
        if object.get("id") == Some(&Value::Null) {
            let error = object.get("error").unwrap_or(&Value::Null);
            return self
                .schema
                .check_at(ERROR_OBJECT, error, "/error")
                .map_err(violation);
        }
        self.schema
            .check_at(ERROR_ENVELOPE, message, "")
            .map_err(violation)?;
        let Some(id) = object.get("id") else {
            unreachable!("JSONRPCError requires an id");
        };
        self.answer(direction, id, summary)?;
        Ok(())
    }

    /// Removes and returns the request that a response travelling in `direction` answers.
    fn answer(
        &mut self,
        direction: Direction,
        id: &Value,
        summary: &str,
    ) -> Result<PendingRequest, Violation> {
        let asker = direction.opposite();
        self.pending
            .remove(&(asker, id.to_string()))
            .ok_or_else(|| {
                Violation::new(
                    direction,
                    summary,
                    vec![format!(
                        "at /id: no {asker} request with id {id} is waiting for an answer \
                         (it was never sent, or was already answered)"
                    )],
                )
            })
    }

    /// Says that `method` is not in the spec as a `kind` in `direction`, and where it is if
    /// it exists elsewhere, since a method sent the wrong way is a common slip.
    fn unknown_method(&self, direction: Direction, kind: CallKind, method: &str) -> String {
        let kind_name = |kind| match kind {
            CallKind::Request => "request",
            CallKind::Notification => "notification",
        };
        let elsewhere: Vec<String> = [Direction::ClientToServer, Direction::ServerToClient]
            .into_iter()
            .flat_map(|d| [(d, CallKind::Request), (d, CallKind::Notification)])
            .filter(|&(d, k)| (d, k) != (direction, kind))
            .filter(|&(d, k)| self.schema.method(d, k, method).is_some())
            .map(|(d, k)| format!("a {d} {}", kind_name(k)))
            .collect();
        let mut message = format!(
            "at /method: `{method}` is not a {direction} {} in the spec",
            kind_name(kind)
        );
        if !elsewhere.is_empty() {
            message.push_str(&format!(
                "; the spec has it as {}",
                elsewhere.join(" and as ")
            ));
        }
        message
    }
}

/// Classifies a message by its keys, the way a JSON-RPC peer does; `None` when it fits no
/// shape.
fn classify(object: &Map<String, Value>) -> Option<Shape> {
    if object.contains_key("method") {
        return Some(if object.contains_key("id") {
            Shape::Request
        } else {
            Shape::Notification
        });
    }
    match (object.contains_key("result"), object.contains_key("error")) {
        (true, false) => Some(Shape::Response),
        (false, true) => Some(Shape::Error),
        _ => None,
    }
}

/// A short name for a message, for the first line of a violation.
fn summarize(object: &Map<String, Value>, shape: &Option<Shape>) -> String {
    let method = object.get("method").map(|method| match method.as_str() {
        Some(name) => format!("`{name}`"),
        None => method.to_string(),
    });
    let id = object.get("id").map(Value::to_string);
    match (shape, method, id) {
        (Some(Shape::Request), Some(method), Some(id)) => format!("request {method} (id {id})"),
        (Some(Shape::Notification), Some(method), _) => format!("notification {method}"),
        (Some(Shape::Response), _, Some(id)) => format!("response (id {id})"),
        (Some(Shape::Response), _, None) => "response without an id".to_owned(),
        (Some(Shape::Error), _, Some(id)) => format!("error response (id {id})"),
        (Some(Shape::Error), _, None) => "error response without an id".to_owned(),
        _ => "message".to_owned(),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
