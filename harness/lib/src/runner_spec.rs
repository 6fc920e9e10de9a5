//! The runner contract's machine-readable spec, built into turncut: the
//! OpenAPI 3.1 document of the control API (`docs/runner-contract.openapi.json`)
//! and the JSON Schema of a run-log event (`docs/runner-contract.events.schema.json`).
//!
//! Both are written by hand and checked, not generated: runnerd builds its
//! answers with `json!` and its events' `data` are open JSON, so there are no
//! types to derive a schema from, and the spec must also say what a derive
//! cannot (which oracle reads a field, what is optional, what is coming).
//! `tests/runner_contract.rs` keeps them equal to what runnerd serves (real
//! requests validated here) and to what the harness parses (the typed views
//! of `runner_client`). `turncut doctor` validates another runner's answers
//! with the same validators. This module judges nothing itself.

use std::sync::OnceLock;

use serde_json::Value;

/// The OpenAPI document of the control API.
pub const OPENAPI: &str = include_str!("../../../docs/runner-contract.openapi.json");
/// The JSON Schema of one run-log event.
pub const EVENTS: &str = include_str!("../../../docs/runner-contract.events.schema.json");
/// Where a person reads the contract.
pub const DOC: &str = "docs/runner-contract.md";

/// How much a wave needs a run-log kind (`x-status` in the events schema).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindStatus {
    /// A correct runner is judged `unknown` or fails without it.
    Required,
    /// Required once the runner does what the kind reports (`x-when`).
    When,
    /// No oracle reads it.
    Informational,
    /// Announced; no runner writes it and no oracle reads it yet.
    Coming,
}

/// One run-log kind as the events schema describes it.
#[derive(Clone, Debug)]
pub struct KindSpec {
    /// The kind (`turn.intent`).
    pub kind: String,
    /// How much a wave needs it.
    pub status: KindStatus,
    /// Who reads it (oracles, and the parts of the harness that do).
    pub read_by: Vec<String>,
    /// For [`KindStatus::When`]: when it is required.
    pub when: Option<String>,
}

fn openapi() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(OPENAPI).expect("the built-in OpenAPI document parses"))
}

fn events_schema() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::from_str(EVENTS).expect("the built-in events schema parses"))
}

/// The kinds the events schema describes, in its order.
pub fn kinds() -> Vec<KindSpec> {
    let defs = events_schema()["$defs"]
        .as_object()
        .expect("the events schema has $defs");
    defs.iter()
        .filter(|(_, d)| d.get("x-status").is_some())
        .map(|(kind, d)| KindSpec {
            kind: kind.clone(),
            status: match d["x-status"].as_str() {
                Some("required") => KindStatus::Required,
                Some("when") => KindStatus::When,
                Some("informational") => KindStatus::Informational,
                Some("coming") => KindStatus::Coming,
                other => panic!("kind {kind} has an unknown x-status {other:?}"),
            },
            read_by: d["x-read-by"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            when: d["x-when"].as_str().map(str::to_owned),
        })
        .collect()
}

/// A compiled validator for `schema` (whose `$ref`s point into itself).
fn compile(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .expect("the built-in spec compiles")
}

/// The errors of `instance` against `validator`, at most 5, each with its
/// place in the instance.
fn errors(validator: &jsonschema::Validator, instance: &Value) -> Result<(), Vec<String>> {
    if validator.is_valid(instance) {
        return Ok(());
    }
    Err(validator
        .iter_errors(instance)
        .take(5)
        .map(|e| format!("{} (at {})", e, e.instance_path()))
        .collect())
}

/// Checks one run-log event against the events schema.
pub fn check_event(event: &Value) -> Result<(), Vec<String>> {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    errors(V.get_or_init(|| compile(events_schema())), event)
}

/// Checks `body` against the schema of component `name`
/// (`#/components/schemas/TaskView`).
pub fn check_component(name: &str, body: &Value) -> Result<(), Vec<String>> {
    let wrapper = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": openapi()["components"],
    });
    errors(&compile(&wrapper), body)
}

/// The schema the spec gives the JSON answer `status` of `method path`
/// (`path` as the spec writes it: `/v1/tasks/{id}`), or why there is none.
pub fn response_schema(path: &str, method: &str, status: u16) -> Result<Value, String> {
    let op = &openapi()["paths"][path][method.to_ascii_lowercase()];
    if op.is_null() {
        return Err(format!("the spec has no {method} {path}"));
    }
    let mut resp = &op["responses"][status.to_string()];
    if resp.is_null() {
        return Err(format!(
            "the spec lists no {status} answer for {method} {path}"
        ));
    }
    if let Some(r) = resp["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        resp = &openapi()["components"]["responses"][name];
    }
    let schema = &resp["content"]["application/json"]["schema"];
    if schema.is_null() {
        return Err(format!(
            "the {status} answer of {method} {path} is not JSON in the spec"
        ));
    }
    Ok(schema.clone())
}

/// Checks the JSON answer `status` of `method path` against the spec: the
/// status must be one the spec lists and the body must fit its schema.
pub fn check_response(
    path: &str,
    method: &str,
    status: u16,
    body: &Value,
) -> Result<(), Vec<String>> {
    let schema = response_schema(path, method, status).map_err(|e| vec![e])?;
    let wrapper = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [schema],
        "components": openapi()["components"],
    });
    errors(&compile(&wrapper), body)
}

/// Every `(method, path)` of the spec, sorted.
pub fn operations() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = openapi()["paths"]
        .as_object()
        .expect("the spec has paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .into_iter()
                .flatten()
                .map(move |(method, _)| (method.to_ascii_uppercase(), path.clone()))
        })
        .collect();
    out.sort();
    out
}

/// The property names of component `name`, and which are required.
pub fn component_fields(name: &str) -> (Vec<String>, Vec<String>) {
    let schema = &openapi()["components"]["schemas"][name];
    let names = |v: &Value| -> Vec<String> {
        let mut out: Vec<String> = match v {
            Value::Object(m) => m.keys().cloned().collect(),
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        out.sort();
        out
    };
    (names(&schema["properties"]), names(&schema["required"]))
}

/// The envelope fields of a run-log event, and which are required.
pub fn event_fields() -> (Vec<String>, Vec<String>) {
    let s = events_schema();
    let mut props: Vec<String> = s["properties"]
        .as_object()
        .expect("the events schema has properties")
        .keys()
        .cloned()
        .collect();
    props.sort();
    let mut required: Vec<String> = s["required"]
        .as_array()
        .expect("the events schema has required")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    required.sort();
    (props, required)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_spec_parses_compiles_and_lists_its_kinds() {
        let kinds = kinds();
        assert!(
            kinds
                .iter()
                .any(|k| k.kind == "turn.intent" && k.status == KindStatus::Required)
        );
        assert!(
            kinds
                .iter()
                .any(|k| k.kind == "message.stranded" && k.status == KindStatus::When)
        );
        // Every kind with a data schema has its `if kind = …` branch, and back.
        let branches: Vec<&str> = events_schema()["allOf"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b.pointer("/if/properties/kind/const")?.as_str())
            .collect();
        let mut listed: Vec<&str> = kinds.iter().map(|k| k.kind.as_str()).collect();
        let mut b = branches.clone();
        listed.sort();
        b.sort();
        assert_eq!(listed, b);
        assert!(check_event(&serde_json::json!({"v": 1})).is_err());
        assert!(check_component("TaskView", &serde_json::json!({})).is_err());
        assert_eq!(operations().len(), 6);
    }

    #[test]
    fn a_kind_data_that_does_not_fit_is_an_error_naming_the_place() {
        let ev = serde_json::json!({
            "v": 1, "task_id": "t", "seq": 1, "run_id": null, "ts_ms": 0,
            "kind": "turn.intent", "data": { "message_id": "m", "kind": "primary" },
        });
        let errs = check_event(&ev).unwrap_err();
        assert!(errs.iter().any(|e| e.contains("client_id")), "{errs:?}");
        let ok = serde_json::json!({
            "v": 1, "task_id": "t", "seq": 1, "run_id": null, "ts_ms": 0,
            "kind": "something.else", "data": {},
        });
        assert_eq!(check_event(&ok), Ok(()));
    }
}
