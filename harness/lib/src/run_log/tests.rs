//! The run log's kinds and payloads held to the events schema, and the
//! places a malformed event is named at.

use serde_json::{Value, json};

use super::*;

fn event(seq: i64, kind: &str, data: Value) -> Value {
    json!({ "v": 1, "task_id": "t", "seq": seq, "run_id": null, "ts_ms": 1, "kind": kind, "data": data })
}

#[test]
fn every_kind_round_trips_and_others_are_other() {
    for k in Kind::KNOWN {
        assert_eq!(Kind::parse(k.as_str()), *k);
    }
    assert_eq!(Kind::parse("my.own.kind"), Kind::Other);
    let own = RunLogEvent::read(1, event(1, "my.own.kind", json!({ "x": 1 })));
    assert_eq!(own.data, Data::Other("my.own.kind".into()));
    let bad = RunLogEvent::read(1, json!({ "kind": 7 }));
    assert_eq!(bad.kind(), Kind::Other);
    assert!(bad.error().is_some());
}

#[test]
fn the_kinds_are_the_events_schemas_that_oracles_read() {
    use crate::runner_spec::{KindStatus, kinds};
    let spec = kinds();
    for k in Kind::KNOWN {
        assert!(
            spec.iter().any(|s| s.kind == k.as_str()),
            "docs/runner-contract.events.schema.json has no kind {k}"
        );
    }
    for s in spec.iter().filter(|s| {
        matches!(s.status, KindStatus::Required | KindStatus::When) && !s.read_by.is_empty()
    }) {
        assert_ne!(
            Kind::parse(&s.kind),
            Kind::Other,
            "the oracles read {} (the events schema says so): run_log::Kind must name it",
            s.kind
        );
    }
}

/// The events schema's definitions.
fn defs() -> Value {
    let schema: Value = serde_json::from_str(crate::runner_spec::EVENTS).unwrap();
    schema["$defs"].clone()
}

/// `schema` with its `$ref` and nullable `oneOf` resolved.
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(r) = schema["$ref"].as_str() {
        return resolve(&defs[r.trim_start_matches("#/$defs/")], defs);
    }
    if let Some(alts) = schema["oneOf"].as_array() {
        let some = alts.iter().find(|a| a["type"] != "null").unwrap();
        return resolve(some, defs);
    }
    schema
}

/// A value `schema` allows, with every property it describes.
fn sample(schema: &Value, defs: &Value) -> Value {
    let schema = resolve(schema, defs);
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    if let Some(e) = schema["enum"].as_array() {
        return e[0].clone();
    }
    let ty = match &schema["type"] {
        Value::String(t) => t.as_str(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap(),
        _ => "object",
    };
    match ty {
        "string" => json!("x"),
        "integer" => json!(1),
        "boolean" => json!(true),
        "array" => json!([sample(&schema["items"], defs)]),
        "object" => {
            let mut o = serde_json::Map::new();
            for (name, p) in schema["properties"].as_object().into_iter().flatten() {
                o.insert(name.clone(), sample(p, defs));
            }
            Value::Object(o)
        }
        other => panic!("no sample of type {other}"),
    }
}

/// Every object path in `v` (`["item", "id"]`), parents before children.
fn paths(v: &Value, at: &[String], out: &mut Vec<Vec<String>>) {
    for (k, child) in v.as_object().into_iter().flatten() {
        let mut p = at.to_vec();
        p.push(k.clone());
        out.push(p.clone());
        paths(child, &p, out);
    }
}

/// The schema of the property at `path` under `schema`, and whether its
/// parent requires it.
fn property<'a>(schema: &'a Value, defs: &'a Value, path: &[String]) -> Option<(&'a Value, bool)> {
    let (last, parents) = path.split_last()?;
    let mut s = resolve(schema, defs);
    for p in parents {
        s = resolve(s["properties"].get(p)?, defs);
    }
    let required = s["required"]
        .as_array()
        .is_some_and(|r| r.iter().any(|x| x == last.as_str()));
    Some((s["properties"].get(last)?, required))
}

fn remove(v: &mut Value, path: &[String]) {
    let (last, parents) = path.split_last().unwrap();
    let mut o = v;
    for p in parents {
        o = &mut o[p];
    }
    o.as_object_mut().unwrap().remove(last);
}

/// The payloads and the events schema agree: an event with every field
/// the schema describes parses; every field a payload names (nested ones
/// too) is one the schema describes; and a field without which a payload
/// does not parse, the schema requires (a runner the schema allows is
/// never read as malformed).
#[test]
fn every_payload_reads_what_the_events_schema_describes() {
    let defs = defs();
    for k in Kind::KNOWN {
        let def = &defs[k.as_str()];
        let full = sample(def, &defs);
        let ev = RunLogEvent::read(1, event(1, k.as_str(), full.clone()));
        assert_eq!(ev.error(), None, "{k}: the schema's sample {full}");
        let typed = ev.data.payload_json().unwrap();
        let mut named = Vec::new();
        paths(&typed, &[], &mut named);
        for p in named {
            assert!(
                property(def, &defs, &p).is_some(),
                "{k}: the payload reads data.{}, which the events schema does not describe",
                p.join(".")
            );
        }
        let mut all = Vec::new();
        paths(&full, &[], &mut all);
        for p in all {
            let mut less = full.clone();
            remove(&mut less, &p);
            let read = RunLogEvent::read(1, event(1, k.as_str(), less));
            let (_, required) = property(def, &defs, &p).unwrap();
            assert!(
                read.error().is_none() || required,
                "{k}: the payload needs data.{}, which the events schema does not require: {:?}",
                p.join("."),
                read.error()
            );
        }
    }
}

#[test]
fn a_malformed_event_is_kept_in_place_with_where_it_does_not_fit() {
    let log = RunLogEvent::read_all(vec![
        event(
            1,
            "turn.intent",
            json!({ "message_id": "m1", "kind": "primary", "client_id": "m1" }),
        ),
        event(
            2,
            "turn.accepted",
            json!({ "turn_row": "one", "provider_turn_id": "p" }),
        ),
        event(3, "turn.finished", json!({})),
        json!({ "v": 1, "seq": 4 }),
        json!({ "v": 2, "task_id": "t", "seq": 5, "run_id": null, "ts_ms": 1, "kind": "turn.finished", "data": { "turn_row": 1 } }),
    ]);
    assert_eq!(log.len(), 5);
    assert_eq!(log[0].error(), None);
    let errors: Vec<String> = log
        .iter()
        .filter_map(|e| e.error())
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        [
            "run-log event 2 (turn.accepted) does not parse: data.turn_row: invalid type: string \"one\", expected i64",
            "run-log event 3 (turn.finished) does not parse: data: missing field `turn_row`",
            "run-log event 4 does not parse: missing field `task_id`",
            "run-log event 5 has version 2, this harness reads 1",
        ]
    );
    assert_eq!(log[1].kind(), Kind::TurnAccepted, "the kind is still known");
    assert_eq!(log[3].seq, 4);
    // Strict reading names the first.
    let raw: Vec<Value> = log.iter().map(|e| e.as_written().clone()).collect();
    assert_eq!(
        RunLogEvent::parse_all(&raw).unwrap_err(),
        log[1].error().unwrap().clone()
    );
    // Written as read.
    assert_eq!(serde_json::to_value(&log[2]).unwrap(), raw[2]);
}

#[test]
fn a_turn_failed_cause_tells_null_from_absent() {
    let read = |data: Value| RunLogEvent::read(1, event(1, "turn.failed", data));
    let cause = |ev: &RunLogEvent| ev.payload::<TurnFailed>().unwrap().cause.clone();
    assert_eq!(cause(&read(json!({ "turn_row": 1 }))), None);
    assert_eq!(
        cause(&read(json!({ "turn_row": 1, "cause": null }))),
        Some(None)
    );
    let given = read(json!({ "turn_row": 1, "cause": { "code": "c" } }));
    assert_eq!(cause(&given).unwrap().unwrap().recoverable, None);
}
