//! The text that marks a turn as the continuation of an interrupted one.
//!
//! The runner sends [`CONTINUE_TEXT`] as the first text input of a
//! continuation turn (never the original message); the fakes' scripted model
//! and the harness's oracles recognise a continuation by [`CONTINUE_MARKER`]
//! at its start.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runners_text_is_a_continuation_that_asks_to_check_aborted_commands() {
        assert!(is_continuation(CONTINUE_TEXT));
        assert!(CONTINUE_TEXT.contains(CHECK_ABORTED_MARKER));
        assert!(!is_continuation("go on [turncut:continue]"));
    }
}
