//! What the oracles hand the contract model (`crate::contract::model`),
//! read from a cell's evidence: the controller's requests in the order it
//! sent them, each with the runner's answer and what the controller knew
//! when it sent it; and each message with the effects its content asks the
//! scripted model to run. The model reads no evidence; this module is its
//! one reader.

use std::collections::BTreeSet;

use crate::contract::model::{Answer, Effect, MessageEffects, Sent, TaskModel};
use crate::evidence::{ActionKind, Evidence, RequestKind};
use crate::model::FaultClass;
use wire::script::ToolKind;

/// When the first event that can change the task's state (not a
/// controller action) was matched — before it was applied —, in
/// milliseconds since the cell started.
fn first_fault_ms(e: &Evidence) -> Option<u64> {
    e.actions
        .iter()
        .filter(|a| match a.what {
            ActionKind::Fault(f) => f.class() != FaultClass::Action,
            ActionKind::CutReached | ActionKind::EventReached => {
                a.fault().is_some_and(|f| f.class() != FaultClass::Action)
            }
            _ => false,
        })
        .map(|a| a.at_ms)
        .min()
}

/// The controller's requests, in the order it sent them.
pub(super) fn sends(e: &Evidence) -> Vec<Sent> {
    let fault_ms = first_fault_ms(e);
    let storage_fault = e
        .actions
        .iter()
        .any(|a| matches!(a.what, ActionKind::Fault(f) if f.is_storage()));
    let mut exchanges: Vec<_> = e.exchanges.iter().collect();
    exchanges.sort_by_key(|x| x.sent_at_ms);
    exchanges
        .iter()
        .map(|x| Sent {
            kind: x.kind,
            id: x.message_id.clone(),
            text: x.text.clone(),
            state_before: x.state_before,
            // The runner took the request some time before it answered: a
            // fault matched before the answer may have come first.
            after_fault: fault_ms.is_some_and(|at| at <= x.answered_at_ms.max(x.sent_at_ms)),
            storage_fault,
            raced: e
                .exchanges
                .iter()
                .any(|o| o.injected && o.message_id != x.message_id),
            answer: (x.status != 0).then(|| Answer {
                status: x.status,
                reason: x.reason().or_else(|| x.block_reason()).map(str::to_owned),
            }),
        })
        .collect()
}

/// The contract model's findings on the answers to requests of `kind`:
/// (the problem, its place in the evidence).
pub(super) fn answer_problems(e: &Evidence, kind: RequestKind) -> Vec<(String, String)> {
    TaskModel::judge(&sends(e))
        .into_iter()
        .filter(|(k, _, _)| *k == kind)
        .map(|(_, id, problem)| (problem, format!("exchange:{id}")))
        .collect()
}

/// Every message effects may run under: the controller's admitted ids and
/// every authority the ledger names.
fn message_ids(e: &Evidence) -> BTreeSet<String> {
    e.exchanges
        .iter()
        .filter(|x| (200..300).contains(&x.status) || x.status == 0)
        .map(|x| x.message_id.clone())
        .chain(e.ledger.iter().map(|l| l.by.clone()))
        .collect()
}

/// Each message's effects as the model judges them, and the ledger; `None`
/// when the evidence carries no script (a cell saved before it did).
pub(super) fn message_effects(e: &Evidence) -> Option<(Vec<MessageEffects>, Vec<Effect>)> {
    let script = e.script.as_ref()?;
    let gave_up_early = e.facts("message.taken_up").into_iter().next().is_some();
    let messages = message_ids(e)
        .into_iter()
        .map(|id| {
            let turn = e
                .content_of(&id)
                .and_then(|text| script.answering(&text))
                .map(|i| &script.turns[i]);
            MessageEffects {
                asks: turn.map(|t| t.tools.iter().map(|tool| tool.key.clone()).collect()),
                must_run: turn.map_or_else(Vec::new, |t| {
                    t.tools
                        .iter()
                        .filter(|tool| tool.kind == ToolKind::Command && tool.argv.is_none())
                        .map(|tool| tool.key.clone())
                        .collect()
                }),
                answered: !gave_up_early && answered(e, &id),
                excused: excused(e, &id, turn),
                id,
            }
        })
        .collect();
    let ledger = e
        .ledger
        .iter()
        .enumerate()
        .map(|(i, l)| Effect {
            key: l.key.clone(),
            by: l.by.clone(),
            line: i + 1,
        })
        .collect();
    Some((messages, ledger))
}

/// Whether a completed provider turn answered message `id` (its own or
/// its continuation) in a run of the task that completed.
fn answered(e: &Evidence, id: &str) -> bool {
    let run_completed = e.runs().iter().any(|r| {
        r.status == "completed"
            && r.turns
                .iter()
                .any(|t| t.message_id == id && t.kind == "primary")
    });
    let provider_completed = e
        .provider_turns
        .iter()
        .any(|t| t.authorized_by == id && t.status == "completed");
    run_completed && provider_completed
}

/// Keys of message `id`'s turn that may not have run although it was
/// answered: every approval-gated one when the runner declined an approval
/// of its turns, any the model gave up on (`effect.abandoned`: a call
/// made twice with an uncertain outcome each time), and any whose command
/// ran and failed under it (`effect.exited` not 0, a command killed with
/// its provider included): the model saw the call finish, failed, and a
/// continuation does not make a finished call again.
fn excused(e: &Evidence, id: &str, turn: Option<&wire::script::ScriptTurn>) -> Vec<String> {
    let failed = e
        .facts("effect.exited")
        .into_iter()
        .filter(|(_, d)| d["exit_code"] != 0);
    let mut out: Vec<String> = e
        .facts("effect.abandoned")
        .into_iter()
        .chain(failed)
        .filter(|(_, d)| d["by"].as_str() == Some(id))
        .filter_map(|(_, d)| d["key"].as_str().map(str::to_owned))
        .collect();
    if declined_an_approval(e, id)
        && let Some(t) = turn
    {
        out.extend(t.tools.iter().filter(|t| t.approval).map(|t| t.key.clone()));
    }
    out
}

/// Whether the runner answered an approval of a turn of message `id`
/// with anything but an acceptance.
fn declined_an_approval(e: &Evidence, id: &str) -> bool {
    let rows: BTreeSet<i64> = e
        .runs()
        .iter()
        .flat_map(|r| &r.turns)
        .filter(|t| t.message_id == id)
        .map(|t| t.turn_row)
        .collect();
    e.payloads::<crate::run_log::ProviderRequest>()
        .filter(|(_, r)| rows.contains(&r.turn_row))
        .any(|(_, r)| {
            r.decision
                .as_deref()
                .is_some_and(|d| !d.starts_with("accept"))
        })
}
