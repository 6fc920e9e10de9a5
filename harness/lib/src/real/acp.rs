//! The real ACP agent (`opencode acp`): its turns name the runner's
//! messages. `opencode acp` 1.18.33 keeps its own message ids: it answers a
//! prompt's `messageId` back as `userMessageId` but stores and replays the
//! user message under an id of its own, and the runner's `_meta.messageId`
//! is dropped. So a recorded turn is named by the prompt that carried it:
//! the prompts the tap journaled to its session with the same text. A text
//! that more than one message sent is left unnamed (no guess). The effects
//! a real ACP agent's tools ran are named the same way ([`name_effects`]).

use wire::journal::Entry;
use wire::ledger::LedgerEntry;
use wire::recorded::RecordedTurn;

/// Gives each of `turns` (read from the product's own store) the runner's
/// client id of the `session/prompt` that carried it, as the tap's
/// `journal` shows them.
pub fn name_turns(turns: &mut [RecordedTurn], journal: &[Entry], texts: &[(String, String)]) {
    let prompts = prompts(journal);
    for turn in turns.iter_mut() {
        let Some((_, text)) = texts
            .iter()
            .find(|(id, _)| Some(id) == turn.client_id.as_ref())
        else {
            continue;
        };
        if let Some(id) = sent_by(&prompts, &turn.thread, |t| t == text) {
            turn.client_id = Some(id.to_owned());
            let authorized = id.strip_suffix(wire::client_id::CONTINUATION).unwrap_or(id);
            turn.authorized_by = authorized.to_owned();
        }
    }
}

/// Gives each effect of the `ledger` that ran under a message id the fake
/// model API derived (a real agent's model request names no message of the
/// runner's: `m_<hash>` of its conversation and text) the runner's message
/// id of the `session/prompt` that sent the text it answered: the model
/// API's `turn.recorded` facts (`model_journal`) say which text and
/// session each derived id answers, the tap's `journal` which prompt sent
/// it. An effect whose text more than one message sent keeps its id.
pub fn name_effects(ledger: &mut [LedgerEntry], model_journal: &[Entry], journal: &[Entry]) {
    let prompts = prompts(journal);
    for line in ledger.iter_mut() {
        let answered = model_journal.iter().find_map(|e| {
            let d = &e.data;
            (e.fact.as_deref() == Some("turn.recorded") && d["turn"] == line.by.as_str())
                .then(|| Some((d["thread"].as_str()?, d["answers"].as_str()?)))?
        });
        let Some((thread, text)) = answered else {
            continue;
        };
        if let Some(id) = sent_by(&prompts, thread, |t| carries(text, t)) {
            let authorized = id.strip_suffix(wire::client_id::CONTINUATION).unwrap_or(id);
            line.by = authorized.to_owned();
        }
    }
}

/// Whether a model request's user message `answers` is the prompt `text`:
/// the same, or ending with it on a line of its own. Claude Code puts its
/// context before the user's text (`<system-reminder>` blocks, and in a
/// session's first message the log of the `/model` command the SDK runs),
/// and the Messages fake joins the blocks with newlines.
fn carries(answers: &str, text: &str) -> bool {
    answers == text
        || answers
            .strip_suffix(text)
            .is_some_and(|before| before.ends_with('\n'))
}

/// The one message id that sent `session` a text that `matches`, if exactly
/// one did.
fn sent_by<'p>(
    prompts: &'p [(String, String, String)],
    session: &str,
    matches: impl Fn(&str) -> bool,
) -> Option<&'p str> {
    let mut ids: Vec<&str> = prompts
        .iter()
        .filter(|(s, t, _)| s == session && matches(t))
        .map(|(_, _, id)| id.as_str())
        .collect();
    ids.dedup();
    match ids[..] {
        [id] => Some(id),
        _ => None,
    }
}

/// Every turn start the tap journaled, in any protocol (Codex `turn/start`,
/// ACP `session/prompt`, OpenCode `prompt_async`): (conversation, text,
/// message id).
fn prompts(journal: &[Entry]) -> Vec<(String, String, String)> {
    crate::evidence::turn_starts_in(journal)
        .into_iter()
        .filter_map(|t| Some((t.conversation?, t.text, t.client_id?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wire::journal::EntryKind;

    fn prompt(session: &str, text: &str, id: &str) -> Entry {
        Entry {
            v: 1,
            generation: "g".into(),
            seq: 1,
            ts_ms: 0,
            kind: EntryKind::In,
            fact: None,
            data: json!({ "jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
                "sessionId": session, "prompt": [{ "type": "text", "text": text }],
                "_meta": { "messageId": id } } }),
        }
    }

    fn turn(session: &str, id: &str) -> RecordedTurn {
        RecordedTurn {
            thread: session.into(),
            turn: id.into(),
            client_id: Some(id.into()),
            status: "completed".into(),
            continuation: false,
            authorized_by: id.into(),
            model_requests: None,
        }
    }

    fn recorded(thread: &str, derived: &str, answers: &str) -> Entry {
        Entry {
            v: 1,
            generation: "g".into(),
            seq: 1,
            ts_ms: 0,
            kind: EntryKind::Fact,
            fact: Some("turn.recorded".into()),
            data: json!({ "thread": thread, "turn": derived, "client_id": derived, "answers": answers }),
        }
    }

    fn effect(by: &str) -> LedgerEntry {
        serde_json::from_value(
            json!({ "v": 1, "key": "write-hello", "by": by, "pid": 1, "saw_secret": false }),
        )
        .unwrap()
    }

    #[test]
    fn an_effect_under_a_derived_id_is_named_by_the_prompt_that_sent_its_text() {
        let journal = [
            prompt("s1", "Create hello.txt", "m1"),
            prompt("s2", "Create hello.txt", "r1"),
            prompt("s3", "Same", "a"),
            prompt("s3", "Same", "b"),
        ];
        let model = [
            recorded("s1", "m_1", "Create hello.txt"),
            recorded("s2", "m_2", "Create hello.txt"),
            recorded("s3", "m_3", "Same"),
            recorded(
                "s2",
                "m_4",
                "<system-reminder>\nskills\n</system-reminder>\n<local-command-stdout>Set model</local-command-stdout>\n\nCreate hello.txt",
            ),
            recorded("s2", "m_5", "Please Create hello.txt"),
        ];
        let mut ledger = [
            effect("m_1"),
            effect("m_2"),
            effect("m_3"),
            effect("m_9"),
            effect("m_4"),
            effect("m_5"),
        ];
        name_effects(&mut ledger, &model, &journal);
        let by: Vec<&str> = ledger.iter().map(|l| l.by.as_str()).collect();
        // Two messages sent "Same" to s3: no guess; m_9 the model API never
        // recorded; m_4's text is r1's behind Claude Code's context; m_5's
        // only ends with it, not on a line of its own.
        assert_eq!(by, ["m1", "r1", "m_3", "m_9", "r1", "m_5"]);
    }

    #[test]
    fn a_turn_is_named_by_the_one_message_that_sent_its_text() {
        let journal = [
            prompt("s1", "Create hello.txt", "m1"),
            prompt("s1", "Create hello.txt", "m1"),
            prompt("s1", "[turncut:continue] go on", "m1#continuation"),
            prompt("s2", "Same", "a"),
            prompt("s2", "Same", "b"),
        ];
        let mut turns = [
            turn("s1", "msg_x"),
            turn("s1", "msg_y"),
            turn("s2", "msg_z"),
        ];
        let texts = [
            ("msg_x".to_owned(), "Create hello.txt".to_owned()),
            ("msg_y".to_owned(), "[turncut:continue] go on".to_owned()),
            ("msg_z".to_owned(), "Same".to_owned()),
        ];
        name_turns(&mut turns, &journal, &texts);
        assert_eq!(turns[0].client_id.as_deref(), Some("m1"));
        assert_eq!(turns[1].client_id.as_deref(), Some("m1#continuation"));
        assert_eq!(turns[1].authorized_by, "m1");
        // Two messages sent this text: no guess.
        assert_eq!(turns[2].client_id.as_deref(), Some("msg_z"));
    }
}
