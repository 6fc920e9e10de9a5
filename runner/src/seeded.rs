//! Seeded bugs: deliberate contract violations for mutation-testing the
//! turncut harness (feature `seeded-bugs`, off by default).
//!
//! `runnerd --seeded-bug NAME` switches one of them on for the whole process.
//! Each is a realistic mistake a runner author could make, and each fires only
//! in the flows the harness drives (a runner or provider cut, a restart, a
//! follow-up, a Retry). A build without the feature has neither this module
//! nor the flag nor any bug site: every site is
//! `#[cfg(feature = "seeded-bugs")] if seeded::active(SeededBug::X) { … }`.
//! `docs/seeded-bugs.md` lists what each bug breaks and which oracle should
//! catch it.

use std::sync::OnceLock;

/// A seeded bug; the clap value names are the kebab-case variant names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum SeededBug {
    /// Re-send `turn/start` when only the intent is durable and the provider recorded the turn.
    ResendAmbiguousTurn,
    /// Start another continuation when an accepted continuation was itself cut.
    SecondContinuation,
    /// A continuation turn sends the original message instead of the continuation text.
    ContinuationResendsMessage,
    /// Settle failed runs without a cause.
    NullCause,
    /// Mark the `provider_turn_lost_on_restore` cause of `turn.failed` not recoverable.
    WrongRecoverable,
    /// After a restart, drop queued follow-ups: a run only finishes its trigger message.
    LoseFollowUpOnRestart,
    /// A Retry run reuses the previous run's conversation.
    RetryReusesConversation,
    /// Write the provider credential into the `provider.spawned` event.
    CredentialInStore,
    /// After a restart, mark old providers stopped without stopping them.
    SkipStopProof,
    /// After a restart, resume no unsettled task.
    StuckAfterRestart,
    /// Fail closed with `ambiguous_turn_start` when the provider never recorded the turn.
    FailClosedWhenAbsent,
    /// Adopt an accepted turn the provider has `interrupted` as completed.
    AdoptWithoutCompletion,
    /// Native: after a restart, run a tool call that was `executing` again.
    RerunExecutingTool,
    /// Native: go on to the next tool call before persisting the last one's outcome.
    ContinueBeforeOutcome,
    /// Prove a provider stopped by its pid and group only, not by its spawn marker.
    SkipMarkerSweep,
    /// Mark a lost turn interrupted in one write and record its continuation in another.
    SplitLostMark,
    /// Settle a run completed without checking for a follow-up admitted meanwhile.
    SettleIgnoresQueue,
    /// Log a failed `turn_intent` write and send the turn anyway.
    SendAfterFailedIntent,
}

impl SeededBug {
    /// Every seeded bug, in documentation order.
    pub const ALL: [SeededBug; 18] = [
        SeededBug::ResendAmbiguousTurn,
        SeededBug::SecondContinuation,
        SeededBug::ContinuationResendsMessage,
        SeededBug::NullCause,
        SeededBug::WrongRecoverable,
        SeededBug::LoseFollowUpOnRestart,
        SeededBug::RetryReusesConversation,
        SeededBug::CredentialInStore,
        SeededBug::SkipStopProof,
        SeededBug::StuckAfterRestart,
        SeededBug::FailClosedWhenAbsent,
        SeededBug::AdoptWithoutCompletion,
        SeededBug::RerunExecutingTool,
        SeededBug::ContinueBeforeOutcome,
        SeededBug::SkipMarkerSweep,
        SeededBug::SplitLostMark,
        SeededBug::SettleIgnoresQueue,
        SeededBug::SendAfterFailedIntent,
    ];

    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SeededBug::ResendAmbiguousTurn => "resend-ambiguous-turn",
            SeededBug::SecondContinuation => "second-continuation",
            SeededBug::ContinuationResendsMessage => "continuation-resends-message",
            SeededBug::NullCause => "null-cause",
            SeededBug::WrongRecoverable => "wrong-recoverable",
            SeededBug::LoseFollowUpOnRestart => "lose-follow-up-on-restart",
            SeededBug::RetryReusesConversation => "retry-reuses-conversation",
            SeededBug::CredentialInStore => "credential-in-store",
            SeededBug::SkipStopProof => "skip-stop-proof",
            SeededBug::StuckAfterRestart => "stuck-after-restart",
            SeededBug::FailClosedWhenAbsent => "fail-closed-when-absent",
            SeededBug::AdoptWithoutCompletion => "adopt-without-completion",
            SeededBug::RerunExecutingTool => "rerun-executing-tool",
            SeededBug::ContinueBeforeOutcome => "continue-before-outcome",
            SeededBug::SkipMarkerSweep => "skip-marker-sweep",
            SeededBug::SplitLostMark => "split-lost-mark",
            SeededBug::SettleIgnoresQueue => "settle-ignores-queue",
            SeededBug::SendAfterFailedIntent => "send-after-failed-intent",
        }
    }
}

impl std::str::FromStr for SeededBug {
    type Err = String;

    /// Parses a name as clap does; the error lists the valid names.
    fn from_str(s: &str) -> Result<SeededBug, String> {
        <SeededBug as clap::ValueEnum>::from_str(s, false).map_err(|_| {
            let names: Vec<&str> = SeededBug::ALL.iter().map(|b| b.as_str()).collect();
            format!(
                "unknown seeded bug {s:?}; valid names: {}",
                names.join(", ")
            )
        })
    }
}

static ACTIVE: OnceLock<SeededBug> = OnceLock::new();

/// Switches `bug` on for this process. Only the first call counts; returns
/// whether `bug` is the active one afterwards.
pub fn activate(bug: SeededBug) -> bool {
    *ACTIVE.get_or_init(|| bug) == bug
}

/// Whether `bug` is switched on: never in a build without the feature, so
/// the optimizer removes every bug site there.
pub fn active(bug: SeededBug) -> bool {
    cfg!(feature = "seeded-bugs") && ACTIVE.get() == Some(&bug)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser as _, ValueEnum as _};

    #[test]
    fn every_name_round_trips_through_the_parsers() {
        assert_eq!(SeededBug::ALL.len(), SeededBug::value_variants().len());
        for bug in SeededBug::ALL {
            assert_eq!(bug.as_str().parse::<SeededBug>(), Ok(bug));
            let clap_name = bug.to_possible_value().expect("no variant is skipped");
            assert_eq!(clap_name.get_name(), bug.as_str(), "clap and as_str agree");
            let args = crate::cli::Args::try_parse_from([
                "runnerd",
                "--state-dir",
                "/nonexistent",
                "--seeded-bug",
                bug.as_str(),
            ])
            .expect("a valid name parses");
            assert_eq!(args.seeded_bug, Some(bug));
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_valid_names() {
        let err = "no-such-bug".parse::<SeededBug>().unwrap_err();
        for bug in SeededBug::ALL {
            assert!(err.contains(bug.as_str()), "{err}");
        }
        let err = crate::cli::Args::try_parse_from([
            "runnerd",
            "--state-dir",
            "/nonexistent",
            "--seeded-bug",
            "no-such-bug",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        assert_eq!(err.exit_code(), 2);
        let text = err.render().to_string();
        for bug in SeededBug::ALL {
            assert!(text.contains(bug.as_str()), "{text}");
        }
    }

    #[test]
    fn the_help_lists_every_name() {
        use clap::CommandFactory as _;
        let help = crate::cli::Args::command().render_long_help().to_string();
        for bug in SeededBug::ALL {
            assert!(help.contains(bug.as_str()), "{help}");
        }
    }
}
