//! The text that marks a turn as the continuation of an interrupted one.
//!
//! The runner sends [`CONTINUE_TEXT`] as the first text input of a
//! continuation turn (never the original message); the fakes' scripted model
//! and the harness's oracles recognise a continuation by [`CONTINUE_MARKER`]
//! at its start.
//!
//! A client that can send only a prompt's text (acpx passes a prompt's content
//! blocks and nothing of the runner's `_meta`) names the runner's message id
//! with [`MESSAGE_MARKER`] at the start of that text instead; the fakes and
//! the oracles read it where they would read `_meta.messageId`.

/// Marks a turn start as a continuation of the conversation's last user turn.
pub const CONTINUE_MARKER: &str = "[turncut:continue]";

/// Warns the model that a command reported `aborted` may have run before the
/// restart (the fakes' script re-checks the effect before running it again).
pub const CHECK_ABORTED_MARKER: &str = "[turncut:check-aborted]";

/// What the runner sends as a continuation's text.
pub const CONTINUE_TEXT: &str = "[turncut:continue] The previous turn was interrupted by a restart. Continue it; do not redo finished steps. [turncut:check-aborted] A command reported as aborted may have run before the restart: check whether its effect is already there before running it again.";

/// Whether a turn's text is a continuation.
pub fn is_continuation(text: &str) -> bool {
    text.starts_with(CONTINUE_MARKER)
}

/// Opens the message-id prefix of a prompt's text: `[turncut:message ID] `.
pub const MESSAGE_MARKER: &str = "[turncut:message ";

/// The text a client that cannot send `_meta.messageId` sends for message
/// `id`: the marker, then the runner's text unchanged.
pub fn with_message_id(id: &str, text: &str) -> String {
    format!("{MESSAGE_MARKER}{id}] {text}")
}

/// A prompt's text split into the message id its marker names (if it starts
/// with one) and the runner's own text after it; an id with `]` or a line
/// break in it is no marker.
pub fn split_message_id(text: &str) -> (Option<&str>, &str) {
    let Some(rest) = text.strip_prefix(MESSAGE_MARKER) else {
        return (None, text);
    };
    match rest.split_once("] ") {
        Some((id, body)) if !id.is_empty() && !id.contains([']', '\n', '\r']) => (Some(id), body),
        _ => (None, text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runners_text_is_a_continuation_that_asks_to_check_aborted_commands() {
        assert!(is_continuation(CONTINUE_TEXT));
        assert!(CONTINUE_TEXT.contains(CHECK_ABORTED_MARKER));
        assert!(!is_continuation("go on [turncut:continue]"));
    }

    #[test]
    fn a_message_marker_names_the_id_and_leaves_the_text() {
        let sent = with_message_id("m1#continuation", CONTINUE_TEXT);
        assert_eq!(
            split_message_id(&sent),
            (Some("m1#continuation"), CONTINUE_TEXT)
        );
        assert_eq!(
            split_message_id("Create hello.txt"),
            (None, "Create hello.txt")
        );
        assert_eq!(
            split_message_id("[turncut:message ] x"),
            (None, "[turncut:message ] x")
        );
        assert_eq!(split_message_id("[turncut:message a\nb] x").0, None);
    }
}
