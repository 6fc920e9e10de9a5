//! Acceptance judged from the provider's side (part of `contract`): the
//! provider's journal shows when a turn was started and when the runner
//! acted on its output (answered an approval, a permission or a client
//! tool request). A runner acts on a turn's output only after it saw the
//! turn accepted, and the contract makes that acceptance durable first; so
//! every turn the runner acted on has a `turn.accepted` in the run log no
//! later than the action, and such a turn is never closed as
//! `ambiguous_turn_start` (the runner had seen it accepted).
//!
//! Both clocks are the host's wall clock in milliseconds (`ts_ms` of the
//! run log and of the journal); only an acceptance strictly later than
//! the action fails, so a shared millisecond is never a false alarm.

use std::collections::BTreeMap;

use super::Judgement;
use crate::evidence::Evidence;
use crate::run_log::TurnAccepted;

/// Each turn (client id) the runner acted on, with the journal line and
/// time of its first action: the turn started last before the action in
/// the same provider process.
fn acted_turns(e: &Evidence) -> BTreeMap<String, (usize, u64)> {
    let starts = e.turn_starts();
    let mut acted: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for (i, entry) in e.runner_answers() {
        let turn = starts
            .iter()
            .rfind(|s| s.line <= i && s.entry.generation == entry.generation)
            .and_then(|s| s.client_id.clone());
        if let Some(c) = turn {
            acted.entry(c).or_insert((i + 1, entry.ts_ms));
        }
    }
    acted
}

/// The earliest `turn.accepted` time of each client id (controller form).
fn accepted_at(e: &Evidence) -> BTreeMap<String, i64> {
    let clients: BTreeMap<i64, String> = e
        .runs()
        .iter()
        .flat_map(|r| &r.turns)
        .map(|t| (t.turn_row, crate::evidence::controller_id(&t.client_id)))
        .collect();
    let mut at: BTreeMap<String, i64> = BTreeMap::new();
    for (ev, a) in e.payloads::<TurnAccepted>() {
        let Some(c) = clients.get(&a.turn_row) else {
            continue;
        };
        let ts = ev.ts_ms;
        at.entry(c.clone())
            .and_modify(|t| *t = (*t).min(ts))
            .or_insert(ts);
    }
    at
}

/// The acceptance rule, from the journal's side.
pub(super) fn check_acceptance(j: &mut Judgement, e: &Evidence) {
    let accepted = accepted_at(e);
    let ambiguous: Vec<String> = e
        .runs()
        .iter()
        .filter(|r| {
            r.cause
                .as_ref()
                .is_some_and(|c| c.code == "ambiguous_turn_start")
        })
        .filter_map(|r| r.turns.iter().rev().find(|t| t.kind == "primary"))
        .map(|t| t.message_id.clone())
        .collect();
    for (client, (line, ts)) in acted_turns(e) {
        let at = [format!("journal:{line}"), "events".to_owned()];
        match accepted.get(&client) {
            None => j.fail(
                format!("the runner acted on turn {client}'s output (journal:{line}) but never recorded the turn accepted"),
                at.clone(),
            ),
            Some(a) if *a > ts as i64 => j.fail(
                format!("the runner acted on turn {client}'s output (journal:{line}, {ts} ms) before recording its acceptance ({a} ms)"),
                at.clone(),
            ),
            Some(_) => {}
        }
        if ambiguous.contains(&client) {
            j.fail(
                format!("the run failed ambiguous_turn_start for {client}, but the runner had acted on its output (journal:{line}): it had seen the turn accepted"),
                at,
            );
        }
    }
}
