//! The no-replay oracles: a message starts at most one turn (and a lost
//! turn at most one continuation, which never re-sends it), and an effect
//! runs at most once per authorizing message.

use std::collections::{BTreeMap, HashSet};

use super::Judgement;
use super::Oracle;
use crate::evidence::{Evidence, RequestKind, Source};
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
        Judgement::new(Oracle::NoReplayTurn).needs(e, &[Source::Journal, Source::ProviderStore]);
    check_turn_starts(&mut j, e);
    check_recorded_turns(&mut j, e);
    check_content_replay(&mut j, e);
    j.done()
}

/// What a turn or effect under client id `id` stands for: for a Retry,
/// which re-sends a stored text, that content; any other message stands for
/// itself (two messages the harness sent with one text are two messages).
fn stands_for(e: &Evidence, id: &str) -> String {
    match e.content_of(id).filter(|_| is_retry(e, id)) {
        Some(text) => format!("text {text:?}"),
        None => match e
            .exchanges
            .iter()
            .find(|x| x.message_id == id && !x.text.is_empty())
        {
            Some(x) => format!("text {:?}", x.text),
            None => format!("message {id}"),
        },
    }
}

/// Whether `id` is a Retry the harness sent.
fn is_retry(e: &Evidence, id: &str) -> bool {
    e.exchanges
        .iter()
        .any(|x| x.kind == RequestKind::Retry && x.message_id == id)
}

/// A Retry's content reaches the provider at most once per conversation:
/// a Retry re-sends a message's text under its own id in a fresh
/// conversation, and that message must not also run there under its own id
/// (a Retry that re-sent a prompt still queued ran it twice, once as `r1`
/// and once as `m1`, and every per-id check passed). Two messages the
/// harness sent with the same text are two messages.
fn check_content_replay(j: &mut Judgement, e: &Evidence) {
    let mut by_content: BTreeMap<(&str, String), Vec<&str>> = BTreeMap::new();
    for t in e.provider_turns.iter().filter(|t| !t.continuation) {
        if let Some(c) = &t.client_id {
            by_content
                .entry((t.thread.as_str(), stands_for(e, c)))
                .or_default()
                .push(c);
        }
    }
    for ((thread, content), ids) in by_content {
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // The same id twice is `check_recorded_turns`' finding.
        if distinct.len() > 1 && distinct.iter().any(|i| is_retry(e, i)) {
            j.fail(
                format!(
                    "the same message ran {} times in conversation {thread}, as {ids:?}: {content} (provider store)",
                    ids.len()
                ),
                ids.iter().map(|i| format!("provider-turn:{i}")),
            );
        }
    }
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

/// An effect key runs at most once per authorizing message, counted whole:
/// per the message's content and conversation, so an effect of a message
/// replayed under another id (a Retry's) in the same conversation counts
/// as a second run; and at most once per authorizing id in any
/// conversations, so a runner that opens a fresh conversation on its own
/// and sends the message there again ran it twice (only a Retry, under its
/// own id, may run a message's effects again).
pub fn no_replay_effect(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::NoReplayEffect).needs(e, &[Source::Ledger]);
    check_effects_per_conversation(&mut j, e);
    check_effects_across_conversations(&mut j, e);
    j.done()
}

/// An effect key of one authorizing id in two conversations: the message
/// was sent again in a fresh conversation without a Retry. The contract
/// re-sends an accepted turn its provider has no record of ("no record"
/// means "no model saw it"), which a power cut can make false before the
/// runner holds any output of the turn; that re-send is not judged here
/// (`docs/oracles.md`, "Not judged yet"). A re-send after the runner held
/// output of the run (an item, a request), or without a
/// `turn.absent_at_provider` at all, is.
fn check_effects_across_conversations(j: &mut Judgement, e: &Evidence) {
    if !resent_knowingly(e) {
        return;
    }
    let mut seen: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, entry) in e.ledger.iter().enumerate() {
        seen.entry((&entry.key, &entry.by)).or_default().push(i + 1);
    }
    for ((key, by), lines) in seen {
        let mut conversations: Vec<&str> = lines
            .iter()
            .filter_map(|l| e.ledger[l - 1].conversation.as_deref())
            .collect();
        conversations.sort_unstable();
        conversations.dedup();
        if conversations.len() > 1 {
            j.fail(
                format!(
                    "effect {key} ran {} times for message {by} in {} conversations {conversations:?} (no Retry: the runner sent the message again in a fresh conversation; ledger lines {lines:?})",
                    lines.len(),
                    conversations.len()
                ),
                lines.iter().map(|l| format!("ledger:{l}")),
            );
        }
    }
}

/// Whether a message sent again in a fresh conversation was sent against
/// the runner's own record: no `turn.absent_at_provider` precedes it, or
/// the run log held output (an item completed, a request made) of the turn
/// found absent before it said so.
fn resent_knowingly(e: &Evidence) -> bool {
    use crate::run_log::TurnAbsentAtProvider;
    let Some((_, absent)) = e.payloads::<TurnAbsentAtProvider>().next() else {
        return true;
    };
    output_held_before_absent(e, &absent.message_id)
}

/// Whether the run log held output (an item completed, a request made) of
/// `message`'s turn before it first found that turn absent at the provider.
/// The message's turns are read from the task view; where it names none,
/// or an output event's turn row cannot be read, any output before counts
/// (the stricter reading).
fn output_held_before_absent(e: &Evidence, message: &str) -> bool {
    use crate::run_log::{Data, Kind};
    let Some(absent) = e.events.iter().position(
        |ev| matches!(&ev.data, Data::TurnAbsentAtProvider(a) if a.message_id == message),
    ) else {
        return true;
    };
    let rows: Vec<i64> = e
        .runs()
        .iter()
        .flat_map(|r| &r.turns)
        .filter(|t| t.message_id == message)
        .map(|t| t.turn_row)
        .collect();
    e.events[..absent].iter().any(|ev| match &ev.data {
        Data::ItemCompleted(i) => rows.is_empty() || rows.contains(&i.turn_row),
        Data::ProviderRequest(r) => rows.is_empty() || rows.contains(&r.turn_row),
        // An output event whose turn row cannot be read counts too.
        _ => matches!(ev.kind(), Kind::ItemCompleted | Kind::ProviderRequest),
    })
}

/// Whether the second run of one message's effect is the contract's
/// re-send of an accepted turn a power cut took from the provider's store
/// before the runner held any output of it (`turn.absent_at_provider` for
/// that message; see [`check_effects_across_conversations`] and
/// `docs/oracles.md`, "Not judged yet"): the same re-send as in a fresh
/// conversation, where the conversation survived the cut and the turn did
/// not.
fn resent_after_power_loss(e: &Evidence, by: &[&str]) -> bool {
    let [message] = by else { return false };
    e.last_power_cut_ms().is_some()
        && e.payloads::<crate::run_log::TurnAbsentAtProvider>()
            .any(|(_, a)| a.message_id == *message)
        && !output_held_before_absent(e, message)
}

/// An effect key of one message's content twice in one conversation.
fn check_effects_per_conversation(j: &mut Judgement, e: &Evidence) {
    let mut seen: BTreeMap<(String, String, Option<String>), Vec<usize>> = BTreeMap::new();
    for (i, entry) in e.ledger.iter().enumerate() {
        let who = match &entry.conversation {
            Some(_) => stands_for(e, &entry.by),
            None => format!("message {}", entry.by),
        };
        seen.entry((entry.key.clone(), who, entry.conversation.clone()))
            .or_default()
            .push(i + 1);
    }
    for ((key, who, _), lines) in seen {
        let by: Vec<&str> = lines.iter().map(|l| e.ledger[l - 1].by.as_str()).collect();
        let mut distinct = by.clone();
        distinct.sort_unstable();
        distinct.dedup();
        // Two messages with one text may each run the effect once.
        let replayed = distinct.len() == 1 || distinct.iter().any(|b| is_retry(e, b));
        if lines.len() > 1 && replayed && !resent_after_power_loss(e, &distinct) {
            j.fail(
                format!(
                    "effect {key} ran {} times for {who:?} (by {by:?}; ledger lines {lines:?})",
                    lines.len()
                ),
                lines.iter().map(|l| format!("ledger:{l}")),
            );
        }
    }
}
