//! The fake model API's model: what the script turn says to one request,
//! given the calls and outputs since the latest user message. A call whose
//! output is uncertain or a failure is made once more ([`CALLS_PER_KEY_MAX`]),
//! unless the ledger already holds its effect for the message id. Unlike the
//! conversational fakes (`crate::turns`), this model is stateless between
//! requests but for the calls it issued: the request carries the history.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::json;

use super::store::TurnRecord;
use super::wire::{Item, Request};
use crate::journal::Journal;
use crate::script::ScriptTurn;

/// How many times one effect key may be called within a turn (the first call
/// and one retry after an uncertain or failed outcome).
pub const CALLS_PER_KEY_MAX: usize = 2;

/// What the model answers to one request.
pub(super) enum Plan {
    /// The `say` chunks (as one message, when any) and a call per effect key.
    Tools { say: Vec<String>, keys: Vec<String> },
    /// The turn's final message.
    Final(String),
}

/// The model: the script turn, played against the calls and outputs after the
/// latest user message. Journals `effect.retried` and `effect.skipped`.
pub(super) fn decide(
    ledger_file: &Path,
    journal: &Journal,
    req: &Request,
    record: &TurnRecord,
    turn: &ScriptTurn,
    outputs: &HashMap<&str, &str>,
) -> std::io::Result<Plan> {
    let attempts = attempts(req, record, outputs);
    let mut keys: Vec<String> = Vec::new();
    if attempts.is_empty() {
        return first_request(ledger_file, journal, req, turn);
    }
    let mut ledger: Option<HashSet<String>> = None;
    // A continuation's later requests skip what its authority ran, too: a
    // call left out of its first request has no attempt here.
    let skip = crate::turns::LedgerSkip::read(ledger_file, &req.message_id, req.continuation)?;
    for tool in &turn.tools {
        let tries: Vec<&str> = attempts
            .iter()
            .filter(|(k, _)| *k == tool.key)
            .map(|(_, o)| *o)
            .collect();
        let Some(last) = tries.last() else {
            if skip.keeps(tool, journal) {
                keys.push(tool.key.clone());
            }
            continue;
        };
        if !needs_retry(last) {
            continue;
        }
        if ledger.is_none() {
            ledger = Some(crate::turns::done_keys(ledger_file, &req.message_id)?);
        }
        let fact = json!({ "key": tool.key, "by": req.message_id, "thread": req.conversation });
        if ledger.as_ref().is_some_and(|l| l.contains(&tool.key)) {
            let mut fact = fact;
            fact["reason"] = json!("already in ledger");
            journal.fact("effect.skipped", fact);
        } else if tries.len() < CALLS_PER_KEY_MAX {
            journal.fact("effect.retried", fact);
            keys.push(tool.key.clone());
        } else {
            journal.fact("effect.abandoned", fact);
        }
    }
    if !req.parallel {
        keys.truncate(1);
    }
    Ok(if keys.is_empty() {
        Plan::Final(turn.final_message.clone())
    } else {
        Plan::Tools {
            say: Vec::new(),
            keys,
        }
    })
}

/// The answer to a turn's first request: its calls, or its final message
/// when it has none. A continuation's model checks the ledger first, as the
/// conversational fakes' does: its authority may have run a call.
fn first_request(
    ledger_file: &Path,
    journal: &Journal,
    req: &Request,
    turn: &ScriptTurn,
) -> std::io::Result<Plan> {
    let skip = crate::turns::LedgerSkip::read(ledger_file, &req.message_id, req.continuation)?;
    let mut keys: Vec<String> = turn
        .tools
        .iter()
        .filter(|t| skip.keeps(t, journal))
        .map(|t| t.key.clone())
        .collect();
    if keys.is_empty() {
        return Ok(Plan::Final(turn.final_message.clone()));
    }
    if !req.parallel {
        keys.truncate(1);
    }
    Ok(Plan::Tools {
        say: turn.say.clone(),
        keys,
    })
}

/// `(key, output)` of every call of this turn, oldest first: the key the
/// fake recorded for its call id, else the one in its arguments.
fn attempts<'a>(
    req: &Request,
    record: &TurnRecord,
    outputs: &HashMap<&str, &'a str>,
) -> Vec<(String, &'a str)> {
    let known: HashMap<&str, &str> = record
        .calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.key.as_str()))
        .collect();
    req.tail()
        .iter()
        .filter_map(|i| match i {
            Item::Call { call_id, arguments } => {
                let key = known
                    .get(call_id.as_str())
                    .map(|k| k.to_string())
                    .or_else(|| key_in_arguments(arguments))?;
                Some((key, outputs.get(call_id.as_str()).copied().unwrap_or("")))
            }
            _ => None,
        })
        .collect()
}

/// Whether a tool output says the call is uncertain or failed: `uncertain:`
/// or `failed:`/`error:` first, or a non-zero exit code in one of Codex's
/// output formats (`"exit_code": N`, `Exit code: N`, `Process exited with code N`).
fn needs_retry(output: &str) -> bool {
    let text = output.trim_start();
    if ["uncertain:", "failed:", "error:"]
        .iter()
        .any(|p| text.starts_with(p))
    {
        return true;
    }
    let code_after = |marker: &str| {
        text.find(marker).and_then(|at| {
            let rest = text[at + marker.len()..].trim_start();
            let digits: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            digits.parse::<i64>().ok()
        })
    };
    ["\"exit_code\":", "Exit code:", "Process exited with code"]
        .iter()
        .filter_map(|m| code_after(m))
        .any(|code| code != 0)
}

/// The effect key of a command line issued by this fake (`--key K`).
fn key_in_arguments(arguments: &str) -> Option<String> {
    let at = arguments.find("--key ")? + "--key ".len();
    let key: String = arguments[at..]
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| !c.is_whitespace() && !"'\"\\,]}".contains(*c))
        .collect();
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_that_need_a_retry() {
        assert!(needs_retry("uncertain: the runner restarted"));
        assert!(needs_retry(r#"{"output":"x","metadata":{"exit_code":1}}"#));
        assert!(needs_retry("Exit code: 2\nWall time: 0 seconds\nOutput:\n"));
        assert!(!needs_retry("Exit code: 0\nOutput:\neffect k done"));
        assert!(!needs_retry(
            r#"{"output":"effect k done","metadata":{"exit_code":0}}"#
        ));
        assert!(!needs_retry("exec command rejected by user"));
    }

    #[test]
    fn keys_are_found_in_any_argument_shape() {
        let k = |a: &str| key_in_arguments(a);
        assert_eq!(
            k(r#"{"command":"x effect --key write-hello --by m"}"#).as_deref(),
            Some("write-hello")
        );
        assert_eq!(
            k(r#"{"command":["sh","-c","x --key 'a b' --by m"]}"#).as_deref(),
            Some("a")
        );
        assert_eq!(k(r#"{"command":"ls"}"#), None);
    }
}
