//! The no-replay oracles: a message starts at most one turn (and a lost
//! turn at most one continuation, which never re-sends it), and an effect
//! runs at most once per authorizing message.

use std::collections::{BTreeMap, HashSet};

use super::Judgement;
use crate::evidence::{Evidence, Source};
use crate::model::OracleResult;

/// The suffix of a continuation's client id: `<message id>#continuation`.
pub(super) use wire::client_id::CONTINUATION as CONTINUATION_SUFFIX;
/// How a continuation's text starts (it never re-sends the message).
use wire::marker::CONTINUE_MARKER;

/// A message id starts at most one primary turn; a lost turn gets at most one
/// continuation; a continuation never re-sends the message; every turn carries
/// a harness-issued message id.
pub fn no_replay_turn(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("no-replay.turn").needs(e, &[Source::Journal, Source::ProviderStore]);
    check_turn_starts(&mut j, e);
    check_fence(&mut j, e);
    check_recorded_turns(&mut j, e);
    j.done()
}

/// Every turn start the provider received carries a harness-issued message
/// id, and a continuation continues one without re-sending it.
fn check_turn_starts(j: &mut Judgement, e: &Evidence) {
    let issued: HashSet<String> = e.issued_ids().into_iter().collect();
    let texts: BTreeMap<&str, &str> = e
        .exchanges
        .iter()
        .filter(|x| !x.text.is_empty())
        .map(|x| (x.message_id.as_str(), x.text.as_str()))
        .collect();
    for start in e.turn_starts() {
        let line = start.line;
        let Some(id) = start.client_id.as_deref() else {
            j.fail(
                format!("a turn start carries no client message id (journal:{line})"),
                [format!("journal:{line}")],
            );
            continue;
        };
        if let Some(base) = id.strip_suffix(CONTINUATION_SUFFIX) {
            if !issued.contains(base) {
                j.fail(
                    format!(
                        "continuation {id:?} continues no harness-issued message (journal:{line})"
                    ),
                    [format!("journal:{line}")],
                );
            }
            let text = &start.text;
            let resends = texts.get(base).is_some_and(|t| text.contains(t));
            if resends || !text.starts_with(CONTINUE_MARKER) {
                j.fail(
                    format!("the continuation of {base} re-sends the message instead of continuing (journal:{line})"),
                    [format!("journal:{line}")],
                );
            }
        } else {
            if !issued.contains(id) {
                j.fail(
                    format!("a turn start with message id {id:?}, which the harness never issued (journal:{line})"),
                    [format!("journal:{line}")],
                );
            }
        }
    }
}

/// The fence: a message the runner refused (409, so definitely not
/// applied) never reaches a provider, not even as a delivery.
fn check_fence(j: &mut Judgement, e: &Evidence) {
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.status == 409 && x.kind != "retry")
    {
        let delivered = e
            .turn_starts()
            .into_iter()
            .find(|t| t.client_id.as_deref() == Some(x.message_id.as_str()));
        if let Some(t) = delivered {
            j.fail(
                format!(
                    "{} {} was refused ({}) but reached the provider (journal:{})",
                    x.kind, x.message_id, x.body, t.line
                ),
                [
                    format!("exchange:{}", x.message_id),
                    format!("journal:{}", t.line),
                ],
            );
        }
    }
}

/// A message started at most one primary turn and a lost turn got at most
/// one continuation, in the provider's own record. A turn starts when the
/// provider records it: a delivery it never recorded (it died first) was
/// not a turn, and re-sending it is the contract's "start the turn once".
fn check_recorded_turns(j: &mut Judgement, e: &Evidence) {
    let mut started: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut continued: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in &e.provider_turns {
        if t.continuation {
            continued
                .entry(t.authorized_by.as_str())
                .or_default()
                .push(&t.turn);
        } else if let Some(c) = &t.client_id {
            started.entry(c.as_str()).or_default().push(&t.turn);
        }
    }
    for (id, turns) in &started {
        if turns.len() > 1 {
            j.fail(
                format!(
                    "message {id} started {} primary turns (provider turns {turns:?})",
                    turns.len()
                ),
                turns.iter().map(|t| format!("provider-turn:{t}")),
            );
        }
    }
    for (id, turns) in &continued {
        if turns.len() > 1 {
            j.fail(
                format!(
                    "the lost turn of {id} got {} continuations (provider turns {turns:?})",
                    turns.len()
                ),
                turns.iter().map(|t| format!("provider-turn:{t}")),
            );
        }
    }
}

/// An effect key runs at most once per authorizing message.
pub fn no_replay_effect(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("no-replay.effect").needs(e, &[Source::Ledger]);
    let mut seen: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, entry) in e.ledger.iter().enumerate() {
        seen.entry((entry.key.clone(), entry.by.clone()))
            .or_default()
            .push(i + 1);
    }
    for ((key, by), lines) in seen {
        if lines.len() > 1 {
            j.fail(
                format!(
                    "effect {key} ran {} times for message {by} (ledger lines {lines:?})",
                    lines.len()
                ),
                lines.iter().map(|l| format!("ledger:{l}")),
            );
        }
    }
    j.done()
}
