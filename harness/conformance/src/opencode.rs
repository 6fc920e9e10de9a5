//! The OpenCode server API: its routes, read from the vendored OpenAPI 3.1 document, and
//! validators for request bodies, response bodies and `/event` SSE events.
//!
//! `opencode serve` speaks HTTP with JSON bodies and streams events on `GET /event` as SSE
//! `data:` lines. Which routes exist, which body each accepts and which status codes and
//! bodies each answers with is read from the spec's `paths`; the component schemas are
//! JSON Schema 2020-12 and are validated in place, by `$ref` into the whole document, so
//! re-vendoring a newer spec is the whole upgrade. This module deliberately checks shapes
//! only: it does not track a session, order events, or send HTTP.
//!
//! ```no_run
//! use conformance::opencode;
//! use serde_json::json;
//!
//! let spec = opencode();
//! spec.check_request("POST", "/permission/per_1/reply", Some(&json!({"reply": "once"})))
//!     .unwrap();
//! ```

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jsonschema::Draft;
use serde_json::{Value, json};

use crate::document::SchemaDocument;
use crate::{Direction, Error, Violation, specs_dir};

/// The OpenCode spec file, relative to [`specs_dir`].
pub const OPENCODE_SPEC_FILE: &str = "opencode/openapi.json";

/// The private base URI the document is registered under; nothing is fetched from it.
const BASE_URI: &str = "urn:turncut:opencode";

/// The schema of one `/event` SSE event.
pub const EVENT_SCHEMA: &str = "#/components/schemas/Event";

const HTTP_METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

/// One route of the spec.
#[derive(Debug, Clone)]
struct Route {
    method: String,
    template: String,
    segments: Vec<String>,
}

/// The OpenCode OpenAPI document, loaded and indexed.
#[derive(Debug)]
pub struct OpenCodeSpec {
    path: PathBuf,
    document: SchemaDocument,
    routes: Vec<Route>,
}

/// The process-wide OpenCode spec, loaded from [`specs_dir`] on first use.
///
/// # Panics
///
/// Panics when the vendored spec is missing or malformed: that is a broken checkout, not a
/// protocol violation.
pub fn opencode() -> &'static OpenCodeSpec {
    static SPEC: OnceLock<OpenCodeSpec> = OnceLock::new();
    SPEC.get_or_init(|| match OpenCodeSpec::load() {
        Ok(spec) => spec,
        Err(error) => panic!(
            "the vendored OpenCode spec could not be loaded from {} (set {} to use another \
             specs directory): failed to {}",
            specs_dir().join(OPENCODE_SPEC_FILE).display(),
            crate::PROTOCOLS_DIR_ENV,
            crate::error_chain(&error),
        ),
    })
}

impl OpenCodeSpec {
    /// Loads the spec from [`specs_dir`].
    pub fn load() -> Result<Self, Error> {
        Self::load_from(&specs_dir().join(OPENCODE_SPEC_FILE))
    }

    /// Loads the spec from a file.
    pub fn load_from(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        let root: Value = serde_json::from_str(&text).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })?;
        let shape = |detail: &str| Error::Shape {
            path: path.to_owned(),
            detail: detail.to_owned(),
        };
        let paths = root
            .get("paths")
            .and_then(Value::as_object)
            .ok_or_else(|| shape("no `paths` object"))?;
        let mut routes = Vec::new();
        for (template, item) in paths {
            let Some(item) = item.as_object() else {
                continue;
            };
            for method in HTTP_METHODS {
                if item.contains_key(method) {
                    routes.push(Route {
                        method: method.to_owned(),
                        template: template.clone(),
                        segments: template.split('/').map(str::to_owned).collect(),
                    });
                }
            }
        }
        if root.pointer("/components/schemas/Event").is_none() {
            return Err(shape("no `Event` component schema"));
        }
        let document = SchemaDocument::new(BASE_URI, root, Draft::Draft202012)?;
        Ok(OpenCodeSpec {
            path: path.to_owned(),
            document,
            routes,
        })
    }

    /// The file the spec was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path template a concrete request path matches, for example
    /// `/session/{sessionID}/message` for `GET /session/ses_1/message`. Literal segments win
    /// over parameters, so `/session/status` is not taken for `/session/{sessionID}`.
    pub fn route(&self, method: &str, path: &str) -> Option<&str> {
        let method = method.to_ascii_lowercase();
        let path = path.split('?').next().unwrap_or(path);
        let segments: Vec<&str> = path.split('/').collect();
        self.routes
            .iter()
            .filter(|r| r.method == method && r.segments.len() == segments.len())
            .filter_map(|r| {
                let mut literal = 0;
                for (t, s) in r.segments.iter().zip(&segments) {
                    if is_param(t) {
                        if s.is_empty() {
                            return None;
                        }
                    } else if t == s {
                        literal += 1;
                    } else {
                        return None;
                    }
                }
                Some((literal, r.template.as_str()))
            })
            .max_by_key(|(literal, _)| *literal)
            .map(|(_, t)| t)
    }

    /// Validates a request: the route exists, its path parameters match their schemas, and
    /// the body (`None` for none) matches the route's JSON request body.
    pub fn check_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(), Violation> {
        let summary = format!("request {} {path}", method.to_ascii_uppercase());
        let violation = |errors: Vec<String>| {
            Violation::new(Direction::ClientToServer, summary.clone(), errors)
        };
        let template = self
            .route(method, path)
            .ok_or_else(|| violation(vec!["no such route in the spec".to_owned()]))?;
        let operation = operation_pointer(template, method);
        let mut errors = self.check_path_params(&operation, template, path);
        let body_pointer = format!("{operation}/requestBody/content/application~1json/schema");
        match (self.document.get(&body_pointer), body) {
            (Some(_), Some(body)) => {
                if let Err(e) = self.validate(&body_pointer, body, "") {
                    errors.extend(e);
                }
            }
            (Some(_), None) => {
                let required = self
                    .document
                    .get(&format!("{operation}/requestBody/required"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if required {
                    errors.push("the route requires a JSON body".to_owned());
                }
            }
            (None, Some(_)) => errors.push("the route takes no JSON body".to_owned()),
            (None, None) => {}
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(violation(errors))
        }
    }

    /// Validates a response: `status` is documented for the route, and the body (`None`
    /// for none) matches the documented JSON body of that status.
    pub fn check_response(
        &self,
        method: &str,
        path: &str,
        status: u16,
        body: Option<&Value>,
    ) -> Result<(), Violation> {
        let summary = format!(
            "response {status} to {} {path}",
            method.to_ascii_uppercase()
        );
        let violation = |errors: Vec<String>| {
            Violation::new(Direction::ServerToClient, summary.clone(), errors)
        };
        let template = self
            .route(method, path)
            .ok_or_else(|| violation(vec!["no such route in the spec".to_owned()]))?;
        let response = format!("{}/responses/{status}", operation_pointer(template, method));
        if self.document.get(&response).is_none() {
            return Err(violation(vec![format!(
                "status {status} is not a documented response of {} {template}",
                method.to_ascii_uppercase()
            )]));
        }
        let schema = format!("{response}/content/application~1json/schema");
        match (self.document.get(&schema), body) {
            (Some(_), Some(body)) => self.validate(&schema, body, "").map_err(violation),
            (Some(_), None) => Err(violation(vec![
                "a JSON body is documented, none came".into(),
            ])),
            (None, Some(_)) => Err(violation(vec![format!(
                "status {status} documents no JSON body, one came"
            )])),
            (None, None) => Ok(()),
        }
    }

    /// Validates one `/event` SSE event (the JSON of its `data:` lines).
    pub fn check_event(&self, event: &Value) -> Result<(), Violation> {
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("?");
        self.validate(EVENT_SCHEMA, event, "").map_err(|errors| {
            Violation::new(Direction::ServerToClient, format!("event `{kind}`"), errors)
        })
    }

    fn check_path_params(&self, operation: &str, template: &str, path: &str) -> Vec<String> {
        let mut errors = Vec::new();
        let Some(params) = self
            .document
            .get(&format!("{operation}/parameters"))
            .and_then(Value::as_array)
        else {
            return errors;
        };
        let path = path.split('?').next().unwrap_or(path);
        for (t, s) in template.split('/').zip(path.split('/')) {
            if !is_param(t) {
                continue;
            }
            let name = &t[1..t.len() - 1];
            let Some(index) = params
                .iter()
                .position(|p| p["in"] == "path" && p["name"] == name)
            else {
                continue;
            };
            let pointer = format!("{operation}/parameters/{index}/schema");
            if let Err(e) = self.validate(&pointer, &json!(s), &format!("/path/{name}")) {
                errors.extend(e);
            }
        }
        errors
    }

    fn validate(&self, pointer: &str, value: &Value, prefix: &str) -> Result<(), Vec<String>> {
        let validator = self
            .document
            .validator_with(
                pointer,
                || json!({ "$ref": self.document.absolute(&uri_fragment(pointer)) }),
            )
            .map_err(|e| vec![format!("the spec cannot check this: {e}")])?;
        self.document
            .check(&validator, value, prefix, Violation::ERRORS_MAX)
    }
}

fn is_param(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}')
}

/// `#/paths/<escaped template>/<method>`.
fn operation_pointer(template: &str, method: &str) -> String {
    let escaped = template.replace('~', "~0").replace('/', "~1");
    format!("#/paths/{escaped}/{}", method.to_ascii_lowercase())
}

/// A JSON pointer made safe for a URI fragment (`{` and `}` are not URI characters).
fn uri_fragment(pointer: &str) -> String {
    pointer.replace('{', "%7B").replace('}', "%7D")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> &'static OpenCodeSpec {
        opencode()
    }

    #[test]
    fn routes_prefer_literal_segments() {
        assert_eq!(
            spec().route("GET", "/session/ses_1/message/msg_2"),
            Some("/session/{sessionID}/message/{messageID}")
        );
        assert_eq!(
            spec().route("GET", "/session/status"),
            Some("/session/status")
        );
        assert_eq!(spec().route("POST", "/nope"), None);
    }

    #[test]
    fn requests_are_checked() {
        let s = spec();
        let good = json!({ "messageID": "msg_1", "parts": [{ "type": "text", "text": "hi" }] });
        s.check_request("POST", "/session/ses_1/prompt_async", Some(&good))
            .unwrap();
        let bad = json!({ "messageID": "m1", "parts": [{ "type": "text" }] });
        let v = s
            .check_request("POST", "/session/ses_1/prompt_async", Some(&bad))
            .unwrap_err();
        assert!(v.to_string().contains("messageID"), "{v}");
        let v = s
            .check_request("POST", "/session/nope/abort", None)
            .unwrap_err();
        assert!(v.to_string().contains("/path/sessionID"), "{v}");
        let v = s
            .check_request(
                "POST",
                "/permission/per_1/reply",
                Some(&json!({ "reply": "maybe" })),
            )
            .unwrap_err();
        assert!(v.to_string().contains("maybe"), "{v}");
        assert!(s.check_request("GET", "/not/a/route", None).is_err());
    }

    #[test]
    fn responses_are_checked() {
        let s = spec();
        s.check_response(
            "GET",
            "/global/health",
            200,
            Some(&json!({ "healthy": true, "version": "1" })),
        )
        .unwrap();
        s.check_response("POST", "/session/ses_1/prompt_async", 204, None)
            .unwrap();
        let v = s
            .check_response("POST", "/session/ses_1/prompt_async", 409, None)
            .unwrap_err();
        assert!(v.to_string().contains("not a documented"), "{v}");
        let v = s
            .check_response(
                "GET",
                "/session/ses_1",
                404,
                Some(&json!({ "name": "Oops", "data": {} })),
            )
            .unwrap_err();
        assert!(!v.errors.is_empty(), "{v}");
        assert!(
            s.check_response("GET", "/global/health", 200, None)
                .is_err(),
            "a missing body is a violation"
        );
    }

    #[test]
    fn events_are_checked() {
        let s = spec();
        s.check_event(&json!({ "id": "evt_1", "type": "server.connected", "properties": {} }))
            .unwrap();
        s.check_event(&json!({
            "id": "evt_2", "type": "session.idle", "properties": { "sessionID": "ses_1" }
        }))
        .unwrap();
        let v = s
            .check_event(&json!({ "type": "session.idle", "properties": { "sessionID": "x" } }))
            .unwrap_err();
        assert!(v.message_summary.contains("session.idle"), "{v}");
        assert!(
            s.check_event(&json!({ "id": "evt_3", "type": "no.such", "properties": {} }))
                .is_err()
        );
    }
}
