//! The Agent Client Protocol (v1): its method tables, derived from the vendored JSON Schema,
//! and a stateful checker for one connection.
//!
//! ACP is JSON-RPC 2.0 with `"jsonrpc": "2.0"`, one object per line. The spec marks every
//! params and result type with `x-method` (the method it belongs to) and `x-side` (the side
//! that handles the method: `agent`, `client`, or `protocol` for both), so which methods
//! exist in which direction, and which types their params and results have, is read from
//! those markers rather than written down here: `XRequest` is the params of a request,
//! `XResponse` its result, `XNotification` the params of a notification. Methods whose names
//! start with `_` are extensions, which the spec allows with any params. This module
//! deliberately checks the wire format only: it does not judge ordering (`initialize`
//! first, updates before the prompt's answer) or whether a session id names a real session.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jsonschema::Draft;
use serde_json::{Map, Value, json};

use crate::codex::{CallKind, PendingRequest};
use crate::document::SchemaDocument;
use crate::{Direction, Error, Violation, specs_dir};

/// The ACP spec file, relative to [`specs_dir`].
pub const ACP_SCHEMA_FILE: &str = "acp/schema.json";

/// The private base URI the document is registered under; nothing is fetched from it.
const BASE_URI: &str = "urn:turncut:acp";

/// The root alternatives describing every message the agent sends, every message the
/// client sends, and the protocol-level messages either side sends.
const AGENT_MESSAGES: &str = "#/anyOf/0";
const CLIENT_MESSAGES: &str = "#/anyOf/1";
const PROTOCOL_MESSAGES: &str = "#/anyOf/2";
const REQUEST_ID: &str = "#/$defs/RequestId";
const ERROR_OBJECT: &str = "#/$defs/Error";

/// What the spec says about one ACP method in one direction.
#[derive(Debug, Clone)]
pub struct AcpMethod {
    method: String,
    direction: Direction,
    kind: CallKind,
    params_schema: String,
    response_schema: Option<String>,
}

impl AcpMethod {
    /// The method name, for example `session/prompt`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The way messages calling this method travel. The client is the side that sends
    /// `initialize` (a runner driver); the server is the agent.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// The pointer to the params type, for example `#/$defs/PromptRequest`.
    pub fn params_schema(&self) -> &str {
        &self.params_schema
    }

    /// The pointer to the result type of a request, for example `#/$defs/PromptResponse`.
    pub fn response_schema(&self) -> Option<&str> {
        self.response_schema.as_deref()
    }
}

/// Method tables by direction and kind, each in name order.
type MethodTables = HashMap<(Direction, CallKind), BTreeMap<String, AcpMethod>>;

/// The ACP spec, loaded and indexed.
#[derive(Debug)]
pub struct AcpSchema {
    path: PathBuf,
    document: SchemaDocument,
    methods: MethodTables,
}

/// The process-wide ACP schema, loaded from [`specs_dir`] on first use.
///
/// # Panics
///
/// Panics when the vendored spec is missing or malformed: that is a broken checkout, not a
/// protocol violation.
pub fn acp() -> &'static AcpSchema {
    static ACP: OnceLock<AcpSchema> = OnceLock::new();
    ACP.get_or_init(|| match AcpSchema::load() {
        Ok(schema) => schema,
        Err(error) => panic!(
            "the vendored ACP schema could not be loaded from {} \
             (set {} to use another specs directory): failed to {}",
            specs_dir().join(ACP_SCHEMA_FILE).display(),
            crate::PROTOCOLS_DIR_ENV,
            crate::error_chain(&error),
        ),
    })
}

impl AcpSchema {
    /// Loads [`ACP_SCHEMA_FILE`] from [`specs_dir`].
    pub fn load() -> Result<Self, Error> {
        Self::load_from(&specs_dir().join(ACP_SCHEMA_FILE))
    }

    /// Loads the spec from an explicit file.
    pub fn load_from(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let root: Value = serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let document = SchemaDocument::new(BASE_URI, root, Draft::Draft202012)?;
        let shape = |detail: String| Error::Shape {
            path: path.to_path_buf(),
            detail,
        };
        for pointer in [
            AGENT_MESSAGES,
            CLIENT_MESSAGES,
            PROTOCOL_MESSAGES,
            REQUEST_ID,
            ERROR_OBJECT,
        ] {
            if document.get(pointer).is_none() {
                return Err(shape(format!("`{pointer}` is missing")));
            }
        }
        let methods = method_tables(&document).map_err(shape)?;
        Ok(AcpSchema {
            path: path.to_path_buf(),
            document,
            methods,
        })
    }

    /// The file this schema was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh connection checker that validates against this schema.
    pub fn session(&self) -> AcpSession<'_> {
        AcpSession::with_schema(self)
    }

    /// What the spec says about `method` sent as a `kind` in `direction`, if it exists.
    pub fn method(&self, direction: Direction, kind: CallKind, method: &str) -> Option<&AcpMethod> {
        self.methods.get(&(direction, kind))?.get(method)
    }

    /// Every method of one kind in one direction, in name order.
    pub fn methods(
        &self,
        direction: Direction,
        kind: CallKind,
    ) -> impl Iterator<Item = &AcpMethod> {
        self.methods
            .get(&(direction, kind))
            .into_iter()
            .flat_map(BTreeMap::values)
    }

    /// Validates `value` against one type of the spec: `#/$defs/ContentChunk` or just
    /// `ContentChunk`. An unknown type is an error, not a panic.
    pub fn validate_as(&self, type_pointer: &str, value: &Value) -> Result<(), Vec<String>> {
        let pointer = if type_pointer.starts_with('#') {
            type_pointer.to_owned()
        } else {
            format!("#/$defs/{type_pointer}")
        };
        self.check_at(&pointer, value, "")
    }

    fn check_at(&self, pointer: &str, value: &Value, prefix: &str) -> Result<(), Vec<String>> {
        let validator = self
            .document
            .validator_at(pointer)
            .map_err(|error| vec![crate::error_chain(&error)])?;
        self.document
            .check(&validator, value, prefix, Violation::ERRORS_MAX)
    }

    /// Validates a whole message against the root alternative of the side that sent it,
    /// or the protocol-level one.
    fn check_envelope(&self, direction: Direction, message: &Value) -> Result<(), Vec<String>> {
        let side = match direction {
            Direction::ServerToClient => AGENT_MESSAGES,
            Direction::ClientToServer => CLIENT_MESSAGES,
        };
        let key = format!("envelope {direction}");
        let validator = self
            .document
            .validator_with(&key, || {
                json!({ "anyOf": [
                    { "$ref": self.document.absolute(side) },
                    { "$ref": self.document.absolute(PROTOCOL_MESSAGES) },
                ] })
            })
            .map_err(|error| vec![crate::error_chain(&error)])?;
        self.document
            .check(&validator, message, "", Violation::ERRORS_MAX)
    }
}

/// Reads the `x-method`/`x-side` markers of every definition into method tables.
fn method_tables(document: &SchemaDocument) -> Result<MethodTables, String> {
    let defs = document
        .get("#/$defs")
        .and_then(Value::as_object)
        .ok_or("`#/$defs` is missing")?;
    // The handling side of each method, and its response type, keyed by method name.
    let mut responses: HashMap<(String, String), String> = HashMap::new();
    for (name, def) in defs {
        if let (Some(method), Some(side)) = (marker(def, "x-method"), marker(def, "x-side"))
            && name.ends_with("Response")
        {
            responses.insert(
                (method.to_owned(), side.to_owned()),
                format!("#/$defs/{name}"),
            );
        }
    }
    let mut methods = MethodTables::new();
    for (name, def) in defs {
        let (Some(method), Some(side)) = (marker(def, "x-method"), marker(def, "x-side")) else {
            continue;
        };
        let kind = if name.ends_with("Request") {
            CallKind::Request
        } else if name.ends_with("Notification") {
            CallKind::Notification
        } else if name.ends_with("Response") {
            continue;
        } else {
            return Err(format!(
                "`{name}` carries `x-method` but is not named as a request, response or notification"
            ));
        };
        // The side that handles a method is the side it is sent to.
        let directions: &[Direction] = match side {
            "agent" => &[Direction::ClientToServer],
            "client" => &[Direction::ServerToClient],
            "protocol" => &[Direction::ClientToServer, Direction::ServerToClient],
            other => return Err(format!("`{name}` has an unknown `x-side` {other:?}")),
        };
        let response_schema = match kind {
            CallKind::Request => Some(
                responses
                    .get(&(method.to_owned(), side.to_owned()))
                    .cloned()
                    .ok_or_else(|| format!("request `{method}` ({name}) has no response type"))?,
            ),
            CallKind::Notification => None,
        };
        for &direction in directions {
            let spec = AcpMethod {
                method: method.to_owned(),
                direction,
                kind,
                params_schema: format!("#/$defs/{name}"),
                response_schema: response_schema.clone(),
            };
            let table = methods.entry((direction, kind)).or_default();
            if table.insert(method.to_owned(), spec).is_some() {
                return Err(format!("`{method}` is defined twice as a {direction} call"));
            }
        }
    }
    Ok(methods)
}

fn marker<'v>(def: &'v Value, key: &str) -> Option<&'v str> {
    def.get(key).and_then(Value::as_str)
}

/// The stateful checker for one ACP connection.
///
/// Feed it every message in the order it was seen on the wire, each with the way it
/// travelled; a response's result is checked against the type of the request its id
/// answers, so the session remembers outstanding requests in both directions.
#[derive(Debug)]
pub struct AcpSession<'s> {
    schema: &'s AcpSchema,
    /// Outstanding requests keyed by the asker's direction and the id's JSON text, so the
    /// string `"1"` and the number `1` stay distinct ids.
    pending: HashMap<(Direction, String), PendingRequest>,
}

impl AcpSession<'static> {
    /// A session checked against the process-wide schema from [`acp`].
    ///
    /// # Panics
    ///
    /// Panics when the vendored spec cannot be loaded, as [`acp`] does.
    pub fn new() -> Self {
        Self::with_schema(acp())
    }
}

impl Default for AcpSession<'static> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'s> AcpSession<'s> {
    /// A session checked against `schema`.
    pub fn with_schema(schema: &'s AcpSchema) -> Self {
        AcpSession {
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
        let Some(object) = message.as_object() else {
            return Err(Violation::new(
                direction,
                "message",
                vec!["at /: a message must be a JSON object".to_owned()],
            ));
        };
        let summary = summarize(object);
        let violation = |errors: Vec<String>| Violation::new(direction, summary.clone(), errors);
        if object.get("jsonrpc") != Some(&json!("2.0")) {
            return Err(violation(vec![
                "at /jsonrpc: ACP messages carry `\"jsonrpc\": \"2.0\"`".to_owned(),
            ]));
        }
        let method = object.get("method");
        let id = object.get("id");
        match (method, id) {
            (Some(Value::String(method)), Some(id)) => {
                self.check_request(direction, id, method, object)
                    .map_err(violation)?;
            }
            (Some(Value::String(method)), None) => {
                self.check_notification(direction, method, object)
                    .map_err(violation)?;
            }
            (Some(_), _) => {
                return Err(violation(vec!["at /method: must be a string".to_owned()]));
            }
            (None, id) => match (object.get("result"), object.get("error")) {
                (Some(result), None) => {
                    let id = id.unwrap_or(&Value::Null);
                    let request = self.answer(direction, id).map_err(|e| violation(vec![e]))?;
                    let summary = format!("{summary} to `{}`", request.method);
                    self.check_result(&request, result)
                        .map_err(|errors| Violation::new(direction, summary, errors))?;
                }
                (None, Some(error)) => {
                    self.schema
                        .check_at(ERROR_OBJECT, error, "/error")
                        .map_err(violation)?;
                    // A peer that cannot parse a line cannot know its id, so JSON-RPC
                    // answers it with `id: null`, which answers no request.
                    match id {
                        None | Some(Value::Null) => {}
                        Some(id) => {
                            self.answer(direction, id).map_err(|e| violation(vec![e]))?;
                        }
                    }
                }
                _ => {
                    return Err(violation(vec![
                        "at /: not a request, notification, response or error: it needs \
                         `method`, `result` or `error` (and not both `result` and `error`)"
                            .to_owned(),
                    ]));
                }
            },
        }
        self.schema
            .check_envelope(direction, message)
            .map_err(violation)
    }

    /// Requests sent and not yet answered, in no particular order.
    pub fn pending(&self) -> impl Iterator<Item = &PendingRequest> {
        self.pending.values()
    }

    fn check_request(
        &mut self,
        direction: Direction,
        id: &Value,
        method: &str,
        object: &Map<String, Value>,
    ) -> Result<(), Vec<String>> {
        self.schema.check_at(REQUEST_ID, id, "/id")?;
        let key = (direction, id.to_string());
        if self.pending.contains_key(&key) {
            return Err(vec![format!(
                "at /id: id {id} is already used by a {direction} request that has not been answered"
            )]);
        }
        // Remembered even when the params are wrong, so that its answer is not reported a
        // second time as answering nothing.
        self.pending.insert(
            key,
            PendingRequest {
                direction,
                id: id.clone(),
                method: method.to_owned(),
            },
        );
        self.check_params(direction, CallKind::Request, method, object)
    }

    fn check_notification(
        &mut self,
        direction: Direction,
        method: &str,
        object: &Map<String, Value>,
    ) -> Result<(), Vec<String>> {
        self.check_params(direction, CallKind::Notification, method, object)
    }

    fn check_params(
        &self,
        direction: Direction,
        kind: CallKind,
        method: &str,
        object: &Map<String, Value>,
    ) -> Result<(), Vec<String>> {
        if method.starts_with('_') {
            // Extension methods carry whatever their authors define.
            return Ok(());
        }
        let Some(spec) = self.schema.method(direction, kind, method) else {
            return Err(vec![self.unknown_method(direction, kind, method)]);
        };
        let params = object.get("params").unwrap_or(&Value::Null);
        self.schema.check_at(&spec.params_schema, params, "/params")
    }

    fn check_result(&self, request: &PendingRequest, result: &Value) -> Result<(), Vec<String>> {
        if request.method.starts_with('_') {
            return Ok(());
        }
        let response_schema = self
            .schema
            .method(request.direction, CallKind::Request, &request.method)
            .and_then(AcpMethod::response_schema);
        match response_schema {
            Some(pointer) => self.schema.check_at(pointer, result, "/result"),
            // The request itself was already reported as unknown.
            None => Ok(()),
        }
    }

    /// Removes and returns the request that a response travelling in `direction` answers.
    fn answer(&mut self, direction: Direction, id: &Value) -> Result<PendingRequest, String> {
        let asker = direction.opposite();
        self.pending
            .remove(&(asker, id.to_string()))
            .ok_or_else(|| {
                format!(
                    "at /id: no {asker} request with id {id} is waiting for an answer \
                 (it was never sent, or was already answered)"
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

/// A short name for a message, for the first line of a violation.
fn summarize(object: &Map<String, Value>) -> String {
    let method = object.get("method").map(|method| match method.as_str() {
        Some(name) => format!("`{name}`"),
        None => method.to_string(),
    });
    let id = object.get("id").map(Value::to_string);
    match (method, id) {
        (Some(method), Some(id)) => format!("request {method} (id {id})"),
        (Some(method), None) => format!("notification {method}"),
        (None, Some(id)) if object.contains_key("error") => format!("error response (id {id})"),
        (None, Some(id)) => format!("response (id {id})"),
        (None, None) => "message".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Direction::{ClientToServer as C2S, ServerToClient as S2C};

    /// A handshake, a session, a prompt with one permission and one terminal round trip.
    fn valid_exchange() -> Vec<(Direction, Value)> {
        let update = |update: Value| {
            json!({"jsonrpc": "2.0", "method": "session/update",
                   "params": {"sessionId": "s1", "update": update}})
        };
        vec![
            (
                C2S,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                         "params": {"protocolVersion": 1,
                                    "clientCapabilities": {"terminal": true}}}),
            ),
            (
                S2C,
                json!({"jsonrpc": "2.0", "id": 0,
                         "result": {"protocolVersion": 1,
                                    "agentCapabilities": {"loadSession": true},
                                    "authMethods": []}}),
            ),
            (
                C2S,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                         "params": {"cwd": "/tmp", "mcpServers": []}}),
            ),
            (
                S2C,
                json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s1"}}),
            ),
            (
                C2S,
                json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                         "params": {"sessionId": "s1",
                                    "prompt": [{"type": "text", "text": "hi"}],
                                    "_meta": {"messageId": "m-1"}}}),
            ),
            (
                S2C,
                update(json!({"sessionUpdate": "user_message_chunk",
                                "content": {"type": "text", "text": "hi"},
                                "messageId": "m-1", "_meta": {"messageId": "m-1"}})),
            ),
            (
                S2C,
                update(json!({"sessionUpdate": "tool_call", "toolCallId": "call_1",
                                "title": "Run", "kind": "execute", "status": "pending"})),
            ),
            (
                S2C,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/request_permission",
                         "params": {"sessionId": "s1",
                                    "toolCall": {"toolCallId": "call_1"},
                                    "options": [{"optionId": "allow", "name": "Allow",
                                                 "kind": "allow_once"}]}}),
            ),
            (
                C2S,
                json!({"jsonrpc": "2.0", "id": 1,
                         "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}),
            ),
            (
                S2C,
                json!({"jsonrpc": "2.0", "id": 2, "method": "terminal/create",
                         "params": {"sessionId": "s1", "command": "true", "args": []}}),
            ),
            (
                C2S,
                json!({"jsonrpc": "2.0", "id": 2, "result": {"terminalId": "t1"}}),
            ),
            (
                S2C,
                update(
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_1",
                                "status": "completed",
                                "content": [{"type": "terminal", "terminalId": "t1"}]}),
                ),
            ),
            (
                C2S,
                json!({"jsonrpc": "2.0", "method": "session/cancel",
                         "params": {"sessionId": "s1"}}),
            ),
            (
                S2C,
                json!({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}),
            ),
        ]
    }

    fn run(messages: &[(Direction, Value)]) -> Result<(), Violation> {
        let mut session = AcpSession::new();
        for (direction, message) in messages {
            session.check(*direction, message)?;
        }
        Ok(())
    }

    /// The valid exchange with message `index` replaced; the violation must mention
    /// `expected`.
    fn check_rejected(index: usize, replacement: Value, expected: &str) {
        let mut messages = valid_exchange();
        messages[index].1 = replacement;
        let violation = run(&messages).expect_err("the broken message must be rejected");
        let text = violation.to_string();
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }

    #[test]
    fn tables_come_from_the_spec() {
        let schema = acp();
        let prompt = schema
            .method(C2S, CallKind::Request, "session/prompt")
            .unwrap();
        assert_eq!(prompt.params_schema(), "#/$defs/PromptRequest");
        assert_eq!(prompt.response_schema(), Some("#/$defs/PromptResponse"));
        assert!(
            schema
                .method(S2C, CallKind::Request, "terminal/create")
                .is_some()
        );
        assert!(
            schema
                .method(S2C, CallKind::Notification, "session/update")
                .is_some()
        );
        assert!(
            schema
                .method(C2S, CallKind::Notification, "session/cancel")
                .is_some()
        );
        for direction in [C2S, S2C] {
            assert!(
                schema
                    .method(direction, CallKind::Notification, "$/cancel_request")
                    .is_some()
            );
        }
    }

    #[test]
    fn a_valid_exchange_passes() {
        let mut session = AcpSession::new();
        for (direction, message) in valid_exchange() {
            if let Err(v) = session.check(direction, &message) {
                panic!("{v}\nmessage: {message}");
            }
        }
        assert_eq!(session.pending().count(), 0);
    }

    #[test]
    fn missing_jsonrpc_is_rejected() {
        check_rejected(
            0,
            json!({"id": 0, "method": "initialize",
                                 "params": {"protocolVersion": 1}}),
            "/jsonrpc",
        );
    }

    #[test]
    fn unknown_and_misdirected_methods_are_rejected() {
        check_rejected(
            4,
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/prmpt",
                                 "params": {}}),
            "`session/prmpt` is not a client→server request",
        );
        check_rejected(
            4,
            json!({"jsonrpc": "2.0", "id": 2, "method": "terminal/create",
                                 "params": {"sessionId": "s1", "command": "x"}}),
            "the spec has it as a server→client request",
        );
    }

    #[test]
    fn bad_params_are_rejected_with_their_place() {
        check_rejected(
            4,
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                 "params": {"prompt": []}}),
            "sessionId",
        );
        check_rejected(
            4,
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                                 "params": {"sessionId": "s1", "prompt": [{"type": "txt"}]}}),
            "/params/prompt/0",
        );
        check_rejected(
            6,
            json!({"jsonrpc": "2.0", "method": "session/update",
                                 "params": {"sessionId": "s1",
                                            "update": {"sessionUpdate": "tool_call",
                                                       "toolCallId": "call_1",
                                                       "title": "Run", "status": "running"}}}),
            "/params/update/status",
        );
        check_rejected(
            2,
            json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
                                 "params": {"cwd": "/tmp"}}),
            "mcpServers",
        );
    }

    #[test]
    fn results_are_checked_against_the_request_they_answer() {
        check_rejected(
            1,
            json!({"jsonrpc": "2.0", "id": 0, "result": {}}),
            "protocolVersion",
        );
        check_rejected(
            13,
            json!({"jsonrpc": "2.0", "id": 2,
                                  "result": {"stopReason": "done"}}),
            "to `session/prompt`",
        );
        check_rejected(
            8,
            json!({"jsonrpc": "2.0", "id": 1,
                                 "result": {"outcome": {"outcome": "approved"}}}),
            "/result/outcome",
        );
        check_rejected(
            3,
            json!({"jsonrpc": "2.0", "id": 7, "result": {"sessionId": "s1"}}),
            "no client→server request with id 7",
        );
    }

    #[test]
    fn errors_must_be_well_formed_and_answer_something() {
        check_rejected(
            3,
            json!({"jsonrpc": "2.0", "id": 1,
                                 "error": {"code": "bad", "message": "x"}}),
            "/error/code",
        );
        let mut session = AcpSession::new();
        let parse_error = json!({"jsonrpc": "2.0", "id": null,
                                 "error": {"code": -32700, "message": "Parse error"}});
        session.check(S2C, &parse_error).unwrap();
    }

    #[test]
    fn a_reused_request_id_is_rejected() {
        let mut session = AcpSession::new();
        let request = json!({"jsonrpc": "2.0", "id": 5, "method": "session/load",
                             "params": {"sessionId": "s", "cwd": "/", "mcpServers": []}});
        session.check(C2S, &request).unwrap();
        let err = session.check(C2S, &request).unwrap_err();
        assert!(err.to_string().contains("already used"), "{err}");
    }
}
