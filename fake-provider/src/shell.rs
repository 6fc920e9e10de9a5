//! Shell command lines, as the fakes show and hand out commands.
//!
//! Quoting is the `shlex` crate's (`try_join`), which is also what Codex uses
//! to display commands, so the fake Codex's `command` strings read like the
//! real server's.

/// Joins words into one POSIX shell line, each quoted only as needed.
///
/// The words are process arguments, so they hold no NUL (the one input
/// `shlex` refuses); one that did would be shown with U+FFFD instead.
pub fn join<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let words: Vec<String> = words
        .into_iter()
        .map(|w| w.replace('\0', "\u{fffd}"))
        .collect();
    shlex::try_join(words.iter().map(String::as_str)).expect("no NUL in the words")
}

/// `line` as Codex reports a shell tool call: `/bin/bash -lc '<line>'`.
pub fn bash_lc(line: &str) -> String {
    join(["/bin/bash", "-lc", line])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_as_needed_and_round_trip() {
        for words in [
            vec!["fake-provider", "effect", "--key", "k"],
            vec!["a b", "it's", "$HOME", "`x`", "a\"b", "", "ünï"],
        ] {
            let line = join(words.iter().copied());
            assert_eq!(shlex::split(&line).unwrap(), words, "{line}");
        }
        assert_eq!(join(["fake-provider", "effect"]), "fake-provider effect");
        assert_eq!(bash_lc("echo hi"), "/bin/bash -lc 'echo hi'");
    }

    #[test]
    fn a_nul_is_shown_not_refused() {
        assert_eq!(join(["a\0b"]), "'a\u{fffd}b'");
    }
}
