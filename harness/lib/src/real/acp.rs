//! The real ACP agent (`opencode acp`): its turns name the runner's
//! messages. `opencode acp` 1.18.33 keeps its own message ids: it answers a
//! prompt's `messageId` back as `userMessageId` but stores and replays the
//! user message under an id of its own, and the runner's `_meta.messageId`
//! is dropped. So a recorded turn is named by the prompt that carried it:
//! the prompts the tap journaled to its session with the same text. A text
//! that more than one message sent is left unnamed (no guess).

use serde_json::Value;
use wire::journal::{Entry, EntryKind};
use wire::recorded::RecordedTurn;

/// Gives each of `turns` (read from the product's own store) the runner's
/// client id of the `session/prompt` that carried it, as the tap's
/// `journal` shows them.
pub fn name_turns(turns: &mut [RecordedTurn], journal: &[Entry], texts: &[(String, String)]) {
    let prompts: Vec<(String, String, String)> = journal
        .iter()
        .filter(|e| e.kind == EntryKind::In && e.data["method"] == "session/prompt")
        .filter_map(|e| {
            let p = &e.data["params"];
            let session = p["sessionId"].as_str()?.to_owned();
            let id = p
                .pointer("/_meta/messageId")
                .or_else(|| p.get("messageId"))
                .and_then(Value::as_str)?
                .to_owned();
            Some((session, prompt_text(p), id))
        })
        .collect();
    for turn in turns.iter_mut() {
        let Some((_, text)) = texts
            .iter()
            .find(|(id, _)| Some(id) == turn.client_id.as_ref())
        else {
            continue;
        };
        let mut ids: Vec<&str> = prompts
            .iter()
            .filter(|(s, t, _)| *s == turn.thread && t == text)
            .map(|(_, _, id)| id.as_str())
            .collect();
        ids.dedup();
        if let [id] = ids[..] {
            turn.client_id = Some(id.to_owned());
            let authorized = id.strip_suffix(wire::client_id::CONTINUATION).unwrap_or(id);
            turn.authorized_by = authorized.to_owned();
        }
    }
}

/// The text blocks of a prompt, joined by newlines.
fn prompt_text(params: &Value) -> String {
    params["prompt"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
