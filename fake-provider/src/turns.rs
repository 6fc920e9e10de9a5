//! The scripted model's turn planner, shared by the conversational fakes
//! (Codex, ACP, OpenCode): which script turn a user message plays, under
//! whose authority its effects run, and the [`Step`]s it takes, with the
//! calls a continuation skips left out.
//!
//! The rules are the naive model's: a user message plays the script turn of
//! its message id from the top (the same id again replays the same turn, a
//! new id the next one); a continuation (its text starts with
//! [`CONTINUE_MARKER`]) continues the latest user turn under that turn's
//! authority, skipping calls as its protocol decides ([`LedgerSkip`] for a
//! model that checks the ledger). This module knows no wire format and
//! stores nothing; the model API's retry model is its own (`model_api::model`).

use std::collections::{HashSet, VecDeque};
use std::path::Path;

use serde_json::json;

use crate::journal::Journal;
use crate::script::{Script, ScriptTool, ScriptTurn};
use ::wire::marker::CONTINUE_MARKER;

/// Status of a stored turn (Codex and ACP): its format lives with the stores'.
pub use wire::stores::TurnStatus;

/// One thing the scripted model does in a turn, in order.
#[derive(Debug)]
pub(crate) enum Step {
    /// An agent message.
    Say(String),
    /// A tool call.
    Tool(ScriptTool),
    /// The end of one model response (Codex reports its token usage here;
    /// the other protocols report none and pass on).
    Usage,
    /// The end of the turn.
    Complete,
}

/// Whether a user message's text makes it a continuation.
pub(crate) fn is_continuation(text: &str) -> bool {
    text.starts_with(CONTINUE_MARKER)
}

/// A recorded user turn, as the planner reads it back.
pub(crate) trait PlayedTurn {
    /// Whether it was a continuation.
    fn continuation(&self) -> bool;
    /// The message id its effects ran under.
    fn authorized_by(&self) -> &str;
}

/// The turn a continuation continues: the latest one that is not itself a
/// continuation.
pub(crate) fn continued<'a, T: PlayedTurn + 'a>(
    turns: impl DoubleEndedIterator<Item = &'a T>,
) -> Option<&'a T> {
    turns.rev().find(|t| !t.continuation())
}

/// The script turn a new user message `message` of `text` plays, after
/// `turns`: the turn that answers its text ([`Script::index_for`]), else the
/// position of its message among the distinct messages of the earlier user
/// turns, or the next one. `same` names the message a message id stands for
/// ([`as_sent`], or a protocol's decoding of its ids).
pub(crate) fn script_index<'a, T: PlayedTurn + 'a>(
    script: &Script,
    turns: impl Iterator<Item = &'a T>,
    message: &str,
    text: &str,
    same: fn(&str) -> &str,
) -> usize {
    script.index_for(text, position_of(turns, message, same))
}

/// The position of `message` among the distinct messages of the user turns
/// `turns`, or the next position.
fn position_of<'a, T: PlayedTurn + 'a>(
    turns: impl Iterator<Item = &'a T>,
    message: &str,
    same: fn(&str) -> &str,
) -> usize {
    let mut seen: Vec<&str> = Vec::new();
    for t in turns.filter(|t| !t.continuation()) {
        let key = same(t.authorized_by());
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    let key = same(message);
    seen.iter().position(|k| *k == key).unwrap_or(seen.len())
}

/// What a continuation's model does when no user message was ever
/// recorded to continue (the model never saw one): nothing, and it says so.
/// A real server takes any prompt.
pub(crate) fn nothing_to_continue() -> ScriptTurn {
    ScriptTurn {
        say: Vec::new(),
        tools: Vec::new(),
        final_message: "There is nothing to continue.".to_owned(),
        answers: Vec::new(),
    }
}

/// A message id as sent: for protocols whose ids name their message directly.
pub(crate) fn as_sent(id: &str) -> &str {
    id
}

/// The steps of `turn`: its `say` messages, the tools `keep` keeps (asked in
/// script order), the end of that model response when a tool was kept, the
/// final message, the end of that response, and the end of the turn. The
/// model calls every tool of a turn in one response (`parallel_tool_calls`).
pub(crate) fn plan<E>(
    turn: ScriptTurn,
    mut keep: impl FnMut(&ScriptTool) -> Result<bool, E>,
) -> Result<VecDeque<Step>, E> {
    let mut steps: VecDeque<Step> = turn.say.into_iter().map(Step::Say).collect();
    let mut tools = false;
    for tool in turn.tools {
        if keep(&tool)? {
            steps.push_back(Step::Tool(tool));
            tools = true;
        }
    }
    if tools {
        steps.push_back(Step::Usage);
    }
    steps.push_back(Step::Say(turn.final_message));
    steps.push_back(Step::Usage);
    steps.push_back(Step::Complete);
    Ok(steps)
}

/// The effect keys the ledger at `ledger` holds under message id `by`.
pub(crate) fn done_keys(ledger: &Path, by: &str) -> std::io::Result<HashSet<String>> {
    Ok(crate::ledger::read(ledger)?
        .into_iter()
        .filter(|e| e.by == by)
        .map(|e| e.key)
        .collect())
}

/// A continuation's model that checks the ledger: it skips the effects its
/// authority already caused (journaled `effect.skipped`). A user turn skips
/// nothing and reads no ledger.
pub(crate) struct LedgerSkip {
    by: String,
    done: HashSet<String>,
}

impl LedgerSkip {
    /// Reads what `by` already ran, when `continuation`.
    pub(crate) fn read(ledger: &Path, by: &str, continuation: bool) -> std::io::Result<LedgerSkip> {
        let done = if continuation {
            done_keys(ledger, by)?
        } else {
            HashSet::new()
        };
        Ok(LedgerSkip {
            by: by.to_owned(),
            done,
        })
    }

    /// Whether the model calls `tool`.
    pub(crate) fn keeps(&self, tool: &ScriptTool, journal: &Journal) -> bool {
        if !self.done.contains(&tool.key) {
            return true;
        }
        journal.fact(
            "effect.skipped",
            json!({ "key": tool.key, "by": self.by, "reason": "already in ledger" }),
        );
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct T(bool, &'static str);

    impl PlayedTurn for T {
        fn continuation(&self) -> bool {
            self.0
        }
        fn authorized_by(&self) -> &str {
            self.1
        }
    }

    #[test]
    fn messages_play_script_turns_in_order_of_first_sight() {
        let turns = [T(false, "a"), T(true, "a"), T(false, "b"), T(false, "a")];
        let mut script = crate::script::Script::builtin();
        script.turns = vec![script.turns[0].clone(); 4];
        let index = |m| script_index(&script, turns.iter(), m, "text", as_sent);
        assert_eq!((index("a"), index("b"), index("c")), (0, 1, 2));
        // A turn that answers the text wins over the position.
        script.turns[3].answers = vec!["text".to_owned()];
        let index = |m| script_index(&script, turns.iter(), m, "text", as_sent);
        assert_eq!((index("a"), index("c")), (3, 3));
        assert_eq!(continued(turns.iter()).map(|t| t.1), Some("a"));
        assert!(continued([T(true, "a")].iter()).is_none());
    }

    #[test]
    fn a_plan_ends_each_response_and_the_turn() {
        let tool = |key: &str| ScriptTool {
            key: key.to_owned(),
            kind: crate::script::ToolKind::Command,
            approval: false,
            argv: None,
            path: None,
            duration_ms: 0,
            nested_shell: false,
        };
        let turn = ScriptTurn {
            say: vec!["hi".to_owned()],
            tools: vec![tool("a"), tool("b")],
            final_message: "done".to_owned(),
            answers: Vec::new(),
        };
        let shape = |steps: VecDeque<Step>| -> Vec<String> {
            steps
                .into_iter()
                .map(|s| match s {
                    Step::Say(t) => format!("say {t}"),
                    Step::Tool(t) => format!("tool {}", t.key),
                    Step::Usage => "usage".to_owned(),
                    Step::Complete => "complete".to_owned(),
                })
                .collect()
        };
        let all = plan(turn.clone(), |_| Ok::<_, ()>(true)).unwrap();
        assert_eq!(
            shape(all),
            [
                "say hi", "tool a", "tool b", "usage", "say done", "usage", "complete"
            ]
        );
        let none = plan(turn, |_| Ok::<_, ()>(false)).unwrap();
        assert_eq!(shape(none), ["say hi", "say done", "usage", "complete"]);
    }
}
