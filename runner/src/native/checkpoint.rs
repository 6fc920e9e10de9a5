//! The checkpoint of a native (OpenAI-Responses) turn: everything the runner
//! needs to resume its own agent loop after a restart, and nothing else.
//!
//! The runner persists a [`Checkpoint`] as JSON in SQLite after every model
//! response and every tool status change. Its serialization is an explicit
//! allowlist written field by field: [`Checkpoint::to_json`] destructures the
//! struct without `..`, so adding a field does not compile until someone
//! decides how (and whether) it is persisted, and a test pins the serialized
//! key set. The credential, the base URL and request headers are not fields
//! and must never become fields: they live in the runner's memory only
//! (DESIGN §3.4 rule 6). [`Checkpoint::from_json`] is just as strict: an
//! unknown key is an error, not something carried along.
//!
//! Recovery follows DESIGN §3.4 rule 4: a call that was `executing` when the
//! runner stopped becomes `uncertain` ([`Checkpoint::recover`]) and is never
//! run again; the model is told so in the call's output
//! ([`Checkpoint::model_input`]). Completed outcomes persisted before the stop
//! survive. Model requests have no effect and may be re-issued (rule 5), so
//! the checkpoint keeps no state of an in-flight model request. This file
//! performs no I/O.

use serde_json::{Map, Value, json};

/// The version of the serialized checkpoint.
pub const CHECKPOINT_VERSION: u64 = 1;

/// The output the model gets for a call that was cut while it ran.
pub const UNCERTAIN_OUTPUT: &str = "uncertain: the runner stopped while this call ran; it was not run again; inspect the workspace before repeating it";

/// The resumable state of one native turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The model the turn is bound to; a resumed turn never switches model.
    pub model: String,
    /// The runner's conversation id.
    pub conversation: String,
    /// The controller's `message_id` that started the turn.
    pub message_id: String,
    /// How many model responses this turn has recorded, so that the loop's
    /// bound on model calls holds across restarts.
    pub model_calls: u32,
    /// The Responses input items so far: the user message, the model's output
    /// items (messages, reasoning, `function_call`s) and the outputs of calls
    /// already folded in. Never request metadata.
    pub history: Vec<Value>,
    /// The function calls of the latest model response, in its order, with
    /// their execution status.
    pub pending_calls: Vec<PendingCall>,
}

/// One `function_call` of the latest model response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    /// The JSON-encoded arguments, as the model sent them.
    pub arguments: String,
    pub status: CallStatus,
}

/// Where a call is in its write-ahead life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallStatus {
    /// Recorded from the model's response; not started.
    Pending,
    /// Durably marked before its effect; it may or may not have run.
    Executing,
    /// Ran to an outcome, which is durable.
    Completed { output: String, ok: bool },
    /// Was `Executing` when the runner stopped; never run again.
    Uncertain,
}

/// Why a stored checkpoint cannot be read back, or a response cannot be
/// recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint version {found} is not supported (expected {CHECKPOINT_VERSION})")]
    Version { found: String },
    #[error("checkpoint field {field} is invalid: {reason}")]
    Field { field: String, reason: String },
    #[error("checkpoint has an unknown field {field}; persisted fields are an explicit allowlist")]
    UnknownField { field: String },
    #[error("call {call_id} is not settled; the model cannot be asked again yet")]
    Unsettled { call_id: String },
}

impl Checkpoint {
    /// A fresh turn whose history is the user's message.
    pub fn new(model: &str, conversation: &str, message_id: &str, text: &str) -> Checkpoint {
        Checkpoint {
            model: model.to_owned(),
            conversation: conversation.to_owned(),
            message_id: message_id.to_owned(),
            model_calls: 0,
            history: vec![json!({
                "type": "message",
                "role": "user",
                "content": [{ "type": "input_text", "text": text }],
            })],
            pending_calls: Vec::new(),
        }
    }

    /// The persisted form, field by field.
    pub fn to_json(&self) -> Value {
        // No `..`: a new field must be added here, deliberately, to compile.
        let Checkpoint {
            model,
            conversation,
            message_id,
            model_calls,
            history,
            pending_calls,
        } = self;
        json!({
            "version": CHECKPOINT_VERSION,
            "model": model,
            "conversation": conversation,
            "message_id": message_id,
            "model_calls": model_calls,
            "history": history,
            "pending_calls": pending_calls.iter().map(PendingCall::to_json).collect::<Vec<_>>(),
        })
    }

    /// Reads back what [`Checkpoint::to_json`] wrote; any other key is an error.
    pub fn from_json(v: &Value) -> Result<Checkpoint, CheckpointError> {
        let o = object(v, "checkpoint", CHECKPOINT_KEYS)?;
        let version = o.get("version").cloned().unwrap_or(Value::Null);
        if version.as_u64() != Some(CHECKPOINT_VERSION) {
            return Err(CheckpointError::Version {
                found: version.to_string(),
            });
        }
        let model_calls = o
            .get("model_calls")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| invalid("model_calls", "not a 32-bit unsigned integer"))?;
        let history = array(o, "history")?.to_vec();
        let pending_calls = array(o, "pending_calls")?
            .iter()
            .enumerate()
            .map(|(i, c)| PendingCall::from_json(c, &format!("pending_calls[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Checkpoint {
            model: string(o, "checkpoint", "model")?,
            conversation: string(o, "checkpoint", "conversation")?,
            message_id: string(o, "checkpoint", "message_id")?,
            model_calls,
            history,
            pending_calls,
        })
    }

    /// After a restart: every call that was `Executing` may have had its
    /// effect, so it becomes `Uncertain` and is never run again. Returns how
    /// many calls that was (each one is a `tool_outcome_uncertain` event).
    pub fn recover(&mut self) -> usize {
        let mut n = 0;
        for call in &mut self.pending_calls {
            if call.status == CallStatus::Executing {
                call.status = CallStatus::Uncertain;
                n += 1;
            }
        }
        n
    }

    /// Whether the model's latest recorded answer made no calls: the turn's
    /// final answer is in the history, and the turn is finished.
    pub fn answered(&self) -> bool {
        self.model_calls > 0 && self.pending_calls.is_empty()
    }

    /// Whether every pending call has an outcome the model can be given.
    pub fn is_settled(&self) -> bool {
        self.first_unsettled().is_none()
    }

    /// The call with the given id, to change its status.
    pub fn call_mut(&mut self, call_id: &str) -> Option<&mut PendingCall> {
        self.pending_calls.iter_mut().find(|c| c.call_id == call_id)
    }

    /// The Responses `input` of the next model request: the history, then a
    /// `function_call_output` for each completed call (its output) and each
    /// uncertain call ([`UNCERTAIN_OUTPUT`]). A call still `Pending` or
    /// `Executing` has no output yet; ask the model only when
    /// [`Checkpoint::is_settled`].
    pub fn model_input(&self) -> Vec<Value> {
        let mut input = self.history.clone();
        for call in &self.pending_calls {
            let output = match &call.status {
                CallStatus::Completed { output, .. } => output.clone(),
                CallStatus::Uncertain => format!("{UNCERTAIN_OUTPUT} (tool {})", call.name),
                CallStatus::Pending | CallStatus::Executing => continue,
            };
            input.push(json!({
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": output,
            }));
        }
        input
    }

    /// Records a model response's `output` items: the settled call outputs
    /// are folded into the history, the items are appended, and the response's
    /// `function_call`s become the new pending calls. Returns how many calls
    /// the model made (zero: the turn's answer is complete).
    pub fn record_response(&mut self, output: Vec<Value>) -> Result<usize, CheckpointError> {
        if let Some(call) = self.first_unsettled() {
            return Err(CheckpointError::Unsettled {
                call_id: call.call_id.clone(),
            });
        }
        let mut calls = Vec::new();
        for (i, item) in output.iter().enumerate() {
            if item.get("type").and_then(Value::as_str) != Some("function_call") {
                continue;
            }
            let Some(o) = item.as_object() else { continue };
            let at = format!("output[{i}]");
            calls.push(PendingCall {
                call_id: string(o, &at, "call_id")?,
                name: string(o, &at, "name")?,
                arguments: string(o, &at, "arguments")?,
                status: CallStatus::Pending,
            });
        }
        self.history = self.model_input();
        self.history.extend(output);
        self.model_calls = self.model_calls.saturating_add(1);
        self.pending_calls = calls;
        Ok(self.pending_calls.len())
    }

    fn first_unsettled(&self) -> Option<&PendingCall> {
        self.pending_calls
            .iter()
            .find(|c| matches!(c.status, CallStatus::Pending | CallStatus::Executing))
    }
}

impl PendingCall {
    fn to_json(&self) -> Value {
        let PendingCall {
            call_id,
            name,
            arguments,
            status,
        } = self;
        json!({
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": status.to_json(),
        })
    }

    fn from_json(v: &Value, at: &str) -> Result<PendingCall, CheckpointError> {
        let o = object(v, at, CALL_KEYS)?;
        let status = o
            .get("status")
            .ok_or_else(|| invalid(&format!("{at}.status"), "missing"))?;
        Ok(PendingCall {
            call_id: string(o, at, "call_id")?,
            name: string(o, at, "name")?,
            arguments: string(o, at, "arguments")?,
            status: CallStatus::from_json(status, &format!("{at}.status"))?,
        })
    }
}

impl CallStatus {
    fn to_json(&self) -> Value {
        match self {
            CallStatus::Pending => json!({ "state": "pending" }),
            CallStatus::Executing => json!({ "state": "executing" }),
            CallStatus::Completed { output, ok } => {
                json!({ "state": "completed", "output": output, "ok": ok })
            }
            CallStatus::Uncertain => json!({ "state": "uncertain" }),
        }
    }

    fn from_json(v: &Value, at: &str) -> Result<CallStatus, CheckpointError> {
        let state = v
            .get("state")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(&format!("{at}.state"), "missing or not a string"))?;
        let simple = |status: CallStatus| object(v, at, &["state"]).map(|_| status);
        match state {
            "pending" => simple(CallStatus::Pending),
            "executing" => simple(CallStatus::Executing),
            "uncertain" => simple(CallStatus::Uncertain),
            "completed" => {
                let o = object(v, at, &["state", "output", "ok"])?;
                let ok = o
                    .get("ok")
                    .and_then(Value::as_bool)
                    .ok_or_else(|| invalid(&format!("{at}.ok"), "missing or not a boolean"))?;
                Ok(CallStatus::Completed {
                    output: string(o, at, "output")?,
                    ok,
                })
            }
            other => Err(invalid(
                &format!("{at}.state"),
                &format!("unknown state {other:?}"),
            )),
        }
    }
}

/// The top-level keys of a serialized checkpoint.
const CHECKPOINT_KEYS: &[&str] = &[
    "version",
    "model",
    "conversation",
    "message_id",
    "model_calls",
    "history",
    "pending_calls",
];

/// The keys of a serialized pending call.
const CALL_KEYS: &[&str] = &["call_id", "name", "arguments", "status"];

fn invalid(field: &str, reason: &str) -> CheckpointError {
    CheckpointError::Field {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

/// `v` as an object whose keys are all in `allowed`.
fn object<'a>(
    v: &'a Value,
    at: &str,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>, CheckpointError> {
    let o = v
        .as_object()
        .ok_or_else(|| invalid(at, "not a JSON object"))?;
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(CheckpointError::UnknownField {
            field: format!("{at}.{k}"),
        });
    }
    Ok(o)
}

fn string(o: &Map<String, Value>, at: &str, key: &str) -> Result<String, CheckpointError> {
    o.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| invalid(&format!("{at}.{key}"), "missing or not a string"))
}

fn array<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, CheckpointError> {
    o.get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| invalid(key, "missing or not an array"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, status: CallStatus) -> PendingCall {
        PendingCall {
            call_id: id.to_owned(),
            name: "Bash".to_owned(),
            arguments: r#"{"command":"ls"}"#.to_owned(),
            status,
        }
    }

    fn function_call(id: &str) -> Value {
        json!({
            "type": "function_call",
            "id": format!("fc_{id}"),
            "call_id": id,
            "name": "Bash",
            "arguments": r#"{"command":"ls"}"#,
            "status": "completed",
        })
    }

    /// A checkpoint with one call in every status.
    fn sample() -> Checkpoint {
        let mut cp = Checkpoint::new("gpt-test", "conv-1", "msg-1", "list the files");
        cp.model_calls = 2;
        cp.history.push(function_call("c1"));
        cp.pending_calls = vec![
            call(
                "c1",
                CallStatus::Completed {
                    output: "a\nb\nexit status: 0".to_owned(),
                    ok: true,
                },
            ),
            call("c2", CallStatus::Executing),
            call("c3", CallStatus::Pending),
            call("c4", CallStatus::Uncertain),
        ];
        cp
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
        k.sort();
        k
    }

    #[test]
    fn round_trips() {
        let cp = sample();
        let json = cp.to_json();
        assert_eq!(Checkpoint::from_json(&json), Ok(cp.clone()));
        // Through text too, as the store keeps it.
        let text = json.to_string();
        let back: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(Checkpoint::from_json(&back), Ok(cp));
    }

    /// Fails when the persisted key set changes: a new field is a reviewed
    /// decision about what reaches SQLite, never an accident.
    #[test]
    fn serialized_keys_are_the_allowlist() {
        let json = sample().to_json();
        assert_eq!(
            keys(&json),
            [
                "conversation",
                "history",
                "message_id",
                "model",
                "model_calls",
                "pending_calls",
                "version"
            ]
        );
        let calls = json["pending_calls"].as_array().expect("calls");
        assert_eq!(keys(&calls[0]), ["arguments", "call_id", "name", "status"]);
        let status_keys: Vec<Vec<String>> = calls.iter().map(|c| keys(&c["status"])).collect();
        assert_eq!(
            status_keys,
            [
                vec!["ok", "output", "state"],
                vec!["state"],
                vec!["state"],
                vec!["state"]
            ]
        );
        let states: Vec<&str> = calls
            .iter()
            .map(|c| c["status"]["state"].as_str().expect("state"))
            .collect();
        assert_eq!(states, ["completed", "executing", "pending", "uncertain"]);
        assert_eq!(json["version"], 1);
    }

    #[test]
    fn from_json_rejects_what_it_did_not_write() {
        // (object to change, as a JSON pointer; key; value; the error)
        let cases = [
            (
                "",
                "api_key",
                json!("sk-x"),
                "checkpoint has an unknown field checkpoint.api_key; persisted fields are an explicit allowlist",
            ),
            (
                "/pending_calls/0",
                "base_url",
                json!("https://u:p@h"),
                "checkpoint has an unknown field pending_calls[0].base_url; persisted fields are an explicit allowlist",
            ),
            (
                "",
                "version",
                json!(2),
                "checkpoint version 2 is not supported (expected 1)",
            ),
            (
                "",
                "model",
                json!(3),
                "checkpoint field checkpoint.model is invalid: missing or not a string",
            ),
            (
                "",
                "model_calls",
                json!(-1),
                "checkpoint field model_calls is invalid: not a 32-bit unsigned integer",
            ),
            (
                "/pending_calls/1",
                "status",
                json!({ "state": "running" }),
                "checkpoint field pending_calls[1].status.state is invalid: unknown state \"running\"",
            ),
            (
                "/pending_calls/1/status",
                "output",
                json!("x"),
                "checkpoint has an unknown field pending_calls[1].status.output; persisted fields are an explicit allowlist",
            ),
            (
                "/pending_calls/0/status",
                "ok",
                json!("yes"),
                "checkpoint field pending_calls[0].status.ok is invalid: missing or not a boolean",
            ),
        ];
        for (at, key, value, want) in cases {
            let mut v = sample().to_json();
            let target = v
                .pointer_mut(at)
                .and_then(Value::as_object_mut)
                .expect("object");
            target.insert(key.to_owned(), value);
            let got = Checkpoint::from_json(&v)
                .expect_err("must fail")
                .to_string();
            assert_eq!(got, want, "{at} {key}");
        }
    }

    #[test]
    fn recover_makes_executing_calls_uncertain_once() {
        let mut cp = sample();
        assert_eq!(cp.recover(), 1);
        let statuses: Vec<&CallStatus> = cp.pending_calls.iter().map(|c| &c.status).collect();
        assert_eq!(
            statuses,
            [
                &CallStatus::Completed {
                    output: "a\nb\nexit status: 0".to_owned(),
                    ok: true
                },
                &CallStatus::Uncertain,
                &CallStatus::Pending,
                &CallStatus::Uncertain,
            ]
        );
        assert_eq!(cp.recover(), 0, "recovery is idempotent");
    }

    #[test]
    fn model_input_gives_completed_and_uncertain_outputs() {
        let mut cp = sample();
        cp.recover();
        let input = cp.model_input();
        assert_eq!(input[..cp.history.len()], cp.history[..]);
        let outputs = &input[cp.history.len()..];
        assert_eq!(
            outputs,
            [
                json!({ "type": "function_call_output", "call_id": "c1", "output": "a\nb\nexit status: 0" }),
                json!({ "type": "function_call_output", "call_id": "c2", "output": format!("{UNCERTAIN_OUTPUT} (tool Bash)") }),
                json!({ "type": "function_call_output", "call_id": "c4", "output": format!("{UNCERTAIN_OUTPUT} (tool Bash)") }),
            ]
        );
        assert!(outputs[1]["output"].as_str().expect("str").starts_with(
            "uncertain: the runner stopped while this call ran; it was not run again; inspect the workspace before repeating it"
        ));
        assert!(!cp.is_settled(), "c3 is still pending");
    }

    #[test]
    fn record_response_folds_outputs_and_takes_new_calls() {
        let mut cp = Checkpoint::new("gpt-test", "conv-1", "msg-1", "hi");
        let reasoning = json!({ "type": "reasoning", "id": "rs_1", "encrypted_content": "opaque" });
        assert_eq!(
            cp.record_response(vec![
                reasoning.clone(),
                function_call("c1"),
                function_call("c2")
            ]),
            Ok(2)
        );
        assert_eq!(cp.model_calls, 1);
        assert_eq!(cp.history.len(), 4);
        // Asking again before the calls are settled is refused.
        assert_eq!(
            cp.record_response(vec![]),
            Err(CheckpointError::Unsettled {
                call_id: "c1".to_owned()
            })
        );
        cp.call_mut("c1").expect("c1").status = CallStatus::Completed {
            output: "done".to_owned(),
            ok: true,
        };
        cp.call_mut("c2").expect("c2").status = CallStatus::Executing;
        assert_eq!(cp.recover(), 1);
        assert!(cp.is_settled());
        let expected_history = cp.model_input();
        let answer = json!({ "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "ok" }] });
        assert_eq!(cp.record_response(vec![answer.clone()]), Ok(0));
        assert_eq!(cp.model_calls, 2);
        assert!(cp.pending_calls.is_empty());
        assert_eq!(cp.history[..expected_history.len()], expected_history[..]);
        assert_eq!(cp.history.last(), Some(&answer));
        assert_eq!(cp.model_input(), cp.history);
    }

    #[test]
    fn record_response_rejects_a_malformed_call() {
        let mut cp = Checkpoint::new("m", "c", "msg", "hi");
        let before = cp.clone();
        let bad = json!({ "type": "function_call", "call_id": "c1", "name": "Bash" });
        assert_eq!(
            cp.record_response(vec![bad])
                .expect_err("no arguments")
                .to_string(),
            "checkpoint field output[0].arguments is invalid: missing or not a string"
        );
        assert_eq!(cp, before);
    }
}
