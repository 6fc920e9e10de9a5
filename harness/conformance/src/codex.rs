//! The Codex app-server protocol: its method tables, derived from the vendored JSON Schema,
//! and validators for its messages.
//!
//! `codex app-server` speaks JSON-RPC without the `"jsonrpc"` field, one object per line.
//! Which methods exist in which direction, and which type each one's params and result
//! have, is read from the spec's `ClientRequest`, `ServerRequest`, `ServerNotification` and
//! `ClientNotification` unions rather than written down here, so re-vendoring a newer spec is
//! the whole upgrade. This module deliberately does not track a connection's state (see
//! [`CodexSession`]) and does not check behaviour the schema cannot express, such as event
//! ordering or whether a turn id refers to a real turn.

mod session;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jsonschema::Draft;
use serde_json::{Value, json};

pub use session::{CodexSession, PendingRequest};

use crate::document::SchemaDocument;
use crate::{Direction, Error, Violation, specs_dir};

/// The Codex spec file, relative to [`specs_dir`].
pub const CODEX_SCHEMA_FILE: &str = "codex-app-server/codex_app_server_protocol.schemas.json";

/// The private base URI the document is registered under; nothing is fetched from it.
const BASE_URI: &str = "urn:turncut:codex-app-server";

const REQUEST_ENVELOPE: &str = "#/definitions/JSONRPCRequest";
const NOTIFICATION_ENVELOPE: &str = "#/definitions/JSONRPCNotification";
const RESPONSE_ENVELOPE: &str = "#/definitions/JSONRPCResponse";
const ERROR_ENVELOPE: &str = "#/definitions/JSONRPCError";
const ERROR_OBJECT: &str = "#/definitions/JSONRPCErrorError";

/// Whether a method expects an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    Request,
    Notification,
}

/// What the spec says about one method in one direction.
#[derive(Debug, Clone)]
pub struct MethodSpec {
    method: String,
    direction: Direction,
    kind: CallKind,
    message_schema: String,
    params_schema: Option<String>,
    response_schema: Option<String>,
}

impl MethodSpec {
    /// The method name, for example `turn/start`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The way messages calling this method travel.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// The pointer to the union alternative that describes the whole message, for example
    /// `#/definitions/ClientRequest/oneOf/12`. Messages are validated against this rather
    /// than against the params type alone, so a missing `params` is caught too.
    pub fn message_schema(&self) -> &str {
        &self.message_schema
    }

    /// The pointer to the named params type, for example `#/definitions/v2/TurnStartParams`,
    /// when the spec names one (possibly as "this type or null").
    pub fn params_schema(&self) -> Option<&str> {
        self.params_schema.as_deref()
    }

    /// The pointer to the result type of a request, for example
    /// `#/definitions/v2/TurnStartResponse`: the `XResponse` next to its `XParams`. `None`
    /// for notifications and for requests whose spec names no such type; their results are
    /// only checked against the envelope.
    pub fn response_schema(&self) -> Option<&str> {
        self.response_schema.as_deref()
    }
}

/// The Codex app-server spec, loaded and indexed.
#[derive(Debug)]
pub struct CodexSchema {
    path: PathBuf,
    document: SchemaDocument,
    methods: HashMap<(Direction, CallKind), BTreeMap<String, MethodSpec>>,
    /// The keywords each union carries next to its `oneOf` (`ServerNotification` declares
    /// an optional `emittedAtMs`), with references made absolute, so every message of that
    /// union is held to them as well.
    union_extras: HashMap<(Direction, CallKind), Value>,
}

/// The process-wide Codex schema, loaded from [`specs_dir`] on first use.
///
/// # Panics
///
/// Panics when the vendored spec is missing or malformed: that is a broken checkout, not a
/// protocol violation, and no test that needs the schema can mean anything without it.
pub fn codex() -> &'static CodexSchema {
    static CODEX: OnceLock<CodexSchema> = OnceLock::new();
    CODEX.get_or_init(|| match CodexSchema::load() {
        Ok(schema) => schema,
        Err(error) => panic!(
            "the vendored Codex app-server schema could not be loaded from {} \
             (set {} to use another specs directory): failed to {}",
            specs_dir().join(CODEX_SCHEMA_FILE).display(),
            crate::PROTOCOLS_DIR_ENV,
            crate::error_chain(&error),
        ),
    })
}

/// The four unions of the spec and the method tables each one fills.
const UNIONS: [(&str, Direction, CallKind); 4] = [
    (
        "ClientRequest",
        Direction::ClientToServer,
        CallKind::Request,
    ),
    (
        "ServerRequest",
        Direction::ServerToClient,
        CallKind::Request,
    ),
    (
        "ServerNotification",
        Direction::ServerToClient,
        CallKind::Notification,
    ),
    (
        "ClientNotification",
        Direction::ClientToServer,
        CallKind::Notification,
    ),
];

impl CodexSchema {
    /// Loads [`CODEX_SCHEMA_FILE`] from [`specs_dir`].
    pub fn load() -> Result<Self, Error> {
        Self::load_from(&specs_dir().join(CODEX_SCHEMA_FILE))
    }

    /// Loads the spec from an explicit file, for checking a candidate spec before vendoring.
    pub fn load_from(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let root: Value = serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let document = SchemaDocument::new(BASE_URI, root, Draft::Draft7)?;
        let shape = |detail: String| Error::Shape {
            path: path.to_path_buf(),
            detail,
        };
        for envelope in [
            REQUEST_ENVELOPE,
            NOTIFICATION_ENVELOPE,
            RESPONSE_ENVELOPE,
            ERROR_ENVELOPE,
            ERROR_OBJECT,
        ] {
            if document.get(envelope).is_none() {
                return Err(shape(format!("`{envelope}` is missing")));
            }
        }
        let mut methods = HashMap::new();
        let mut union_extras = HashMap::new();
        for (union, direction, kind) in UNIONS {
            let (table, extras) =
                method_table(&document, union, direction, kind).map_err(&shape)?;
            methods.insert((direction, kind), table);
            union_extras.insert((direction, kind), extras);
        }
        Ok(CodexSchema {
            path: path.to_path_buf(),
            document,
            methods,
            union_extras,
        })
    }

    /// The file this schema was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh connection checker that validates against this schema.
    pub fn session(&self) -> CodexSession<'_> {
        CodexSession::with_schema(self)
    }

    /// What the spec says about `method` sent as a `kind` in `direction`, if it exists.
    pub fn method(
        &self,
        direction: Direction,
        kind: CallKind,
        method: &str,
    ) -> Option<&MethodSpec> {
        self.methods.get(&(direction, kind))?.get(method)
    }

    /// Every method of one kind in one direction, in name order.
    pub fn methods(
        &self,
        direction: Direction,
        kind: CallKind,
    ) -> impl Iterator<Item = &MethodSpec> {
        self.methods
            .get(&(direction, kind))
            .into_iter()
            .flat_map(BTreeMap::values)
    }

    /// Validates `value` against one type of the spec.
    ///
    /// `type_pointer` is a fragment pointer such as `#/definitions/v2/Thread`, or a bare
    /// definition path such as `v2/Thread` or `InitializeResponse`. An unknown type is
    /// reported as an error rather than a panic, since the pointer often comes from data.
    pub fn validate_as(&self, type_pointer: &str, value: &Value) -> Result<(), Vec<String>> {
        let pointer = if type_pointer.starts_with('#') {
            type_pointer.to_owned()
        } else {
            format!("#/definitions/{type_pointer}")
        };
        let validator = self
            .document
            .validator_at(&pointer)
            .map_err(|error| vec![crate::error_chain(&error)])?;
        self.document
            .check(&validator, value, "", Violation::ERRORS_MAX)
    }

    /// Validates a whole message against the spec's description of `spec`'s method.
    fn check_call(&self, spec: &MethodSpec, message: &Value) -> Result<(), Vec<String>> {
        let extras = self.union_extras.get(&(spec.direction, spec.kind));
        let key = format!("message {} {}", spec.direction, spec.message_schema);
        let validator = self
            .document
            .validator_with(&key, || {
                let mut all_of =
                    vec![json!({ "$ref": self.document.absolute(&spec.message_schema) })];
                all_of.extend(
                    extras
                        .filter(|extras| extras.as_object().is_some_and(|o| !o.is_empty()))
                        .cloned(),
                );
                json!({ "allOf": all_of })
            })
            .map_err(|error| vec![crate::error_chain(&error)])?;
        self.document
            .check(&validator, message, "", Violation::ERRORS_MAX)
    }

    /// Validates `value` against a type of the spec, prefixing instance paths with
    /// `instance_prefix` so errors point into the enclosing message.
    fn check_at(
        &self,
        pointer: &str,
        value: &Value,
        instance_prefix: &str,
    ) -> Result<(), Vec<String>> {
        let validator = self
            .document
            .validator_at(pointer)
            .map_err(|error| vec![crate::error_chain(&error)])?;
        self.document
            .check(&validator, value, instance_prefix, Violation::ERRORS_MAX)
    }
}

/// Reads one union of the spec into a method table, and returns the keywords the union
/// carries next to its alternatives.
fn method_table(
    document: &SchemaDocument,
    union: &str,
    direction: Direction,
    kind: CallKind,
) -> Result<(BTreeMap<String, MethodSpec>, Value), String> {
    let union_pointer = format!("#/definitions/{union}");
    let union_schema = document
        .get(&union_pointer)
        .and_then(Value::as_object)
        .ok_or_else(|| format!("`{union_pointer}` is missing"))?;
    let alternatives = union_schema
        .get("oneOf")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("`{union_pointer}` has no `oneOf` list"))?;
    let mut table = BTreeMap::new();
    for (index, alternative) in alternatives.iter().enumerate() {
        let message_schema = format!("{union_pointer}/oneOf/{index}");
        let properties = alternative.get("properties");
        let method = properties
            .and_then(|p| p.get("method"))
            .and_then(single_string_value)
            .ok_or_else(|| format!("`{message_schema}` does not fix `method` to one name"))?;
        let params_schema = properties
            .and_then(|p| p.get("params"))
            .and_then(named_type);
        let response_schema = match kind {
            CallKind::Request => params_schema
                .as_deref()
                .and_then(|params| params.strip_suffix("Params"))
                .map(|stem| format!("{stem}Response"))
                .filter(|response| document.get(response).is_some()),
            CallKind::Notification => None,
        };
        let spec = MethodSpec {
            method: method.to_owned(),
            direction,
            kind,
            message_schema,
            params_schema,
            response_schema,
        };
        if table.insert(method.to_owned(), spec).is_some() {
            return Err(format!("`{union_pointer}` lists `{method}` twice"));
        }
    }
    let mut extras = union_schema.clone();
    // `oneOf` is applied per method; the rest are annotations or, for this draft, the
    // `$schema` marker, none of which constrain a message.
    for annotation in ["oneOf", "$schema", "title", "description"] {
        extras.remove(annotation);
    }
    let mut extras = Value::Object(extras);
    absolutize_refs(&mut extras, document);
    Ok((table, extras))
}

/// The one name a `method` property allows, whether written as a one-item `enum` or `const`.
fn single_string_value(schema: &Value) -> Option<&str> {
    if let Some(name) = schema.get("const").and_then(Value::as_str) {
        return Some(name);
    }
    match schema.get("enum")?.as_array()?.as_slice() {
        [name] => name.as_str(),
        _ => None,
    }
}

/// The named type a params schema refers to: `{"$ref": X}`, or `X` or null written as an
/// `anyOf` of that reference and `{"type": "null"}`.
fn named_type(params: &Value) -> Option<String> {
    if let Some(reference) = params.get("$ref").and_then(Value::as_str) {
        return Some(reference.to_owned());
    }
    let mut references = params
        .get("anyOf")?
        .as_array()?
        .iter()
        .filter(|alternative| alternative.get("type") != Some(&json!("null")));
    match (references.next(), references.next()) {
        (Some(only), None) => only.get("$ref")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// Rewrites document-relative `$ref`s (`#/...`) in a copied piece of the document into
/// absolute ones, so the copy still resolves from inside a wrapper schema.
fn absolutize_refs(value: &mut Value, document: &SchemaDocument) {
    match value {
        Value::Object(object) => {
            for (key, child) in object.iter_mut() {
                match child {
                    Value::String(reference) if key == "$ref" && reference.starts_with('#') => {
                        *reference = document.absolute(reference);
                    }
                    _ => absolutize_refs(child, document),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| absolutize_refs(item, document)),
        _ => {}
    }
}
