//! Seeded bugs: deliberate contract violations for mutation-testing the
//! turncut harness (feature `seeded-bugs`, off by default).
//!
//! `runnerd --seeded-bug NAME` switches one of them on for the whole process.
//! Each is a realistic mistake a runner author could make, and each fires only
//! in the flows the harness drives (a runner or provider cut, a restart, a
//! follow-up, a Retry). A bug site in the engine is one call of a hook below
//! (`if seeded::stuck_after_restart() { … }`): with the feature, the hook says
//! whether its bug is the active one; without it, every hook is a constant
//! `false` and a build has neither the flag nor a live bug site. The
//! `SeededBug` list itself is always built: it is the one list of the bugs,
//! which `turncut mutants` runs and `docs/seeded-bugs.md` documents.
//! `docs/seeded-bugs.md` lists what each bug breaks and which oracle should
//! catch it.

#[cfg(feature = "seeded-bugs")]
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
    /// A Retry after a failure before the first turn re-sends the prompt while it is still queued.
    RetryResendsQueued,
    /// Answer a follow-up to a task that failed closed with 202 and reopen it.
    FenceReopensFailed,
    /// Write a turn's acceptance only when the turn ends.
    AcceptAtTurnEnd,
    /// Native: a resumed turn whose durable last output had no calls asks the model again.
    NativeReasksFinal,
    /// Settle a run failed without naming the messages it leaves queued.
    StrandSilently,
    /// Read a failed recovery lookup as "turn absent", and trust that mark after the restart.
    LookupErrorAsAbsent,
    /// Re-send an accepted turn the provider never recorded while the row still holds the lost acceptance.
    AbsentKeepsAcceptance,
    /// Send again a turn the provider has no record of though the runner holds its output.
    ResendLostOutput,
    /// Admit a Retry in one write and make it the task's current run in a second.
    RetryCurrentInSecondWrite,
    /// A Retry decides whether the latest message was answered from its primary turn only.
    RetryDecidesByPrimaryTurn,
    /// Open the store with `synchronous=NORMAL`: a commit is durable only at the next checkpoint.
    WalSynchronousNormal,
    /// Write a workspace file by temporary file and rename without syncing the file first.
    AtomicWriteWithoutFsync,
    /// Write a workspace file by temporary file and rename without syncing the directory after.
    RenameWithoutDirSync,
    /// Read the provider idle timeout in microseconds instead of milliseconds.
    IdleTimeoutInMicros,
    /// Native: read a 429 as a refusal like any 4xx, closing the run `provider_protocol_error` (not recoverable).
    RateLimitUnrecoverable,
    /// Native: after a broken response stream, start the turn over, running its completed tool calls again.
    RetryTurnAfterStreamCut,
    /// Native: retry a model request answered 401 like a transient failure, without bound.
    RetryUnauthorized,
    /// Native: retry a rate-limited model request at once, ignoring `Retry-After`.
    IgnoreRetryAfter,
    /// Read a recovery lookup the provider answered with an error as "turn absent", and send the turn again.
    LookupErrorAnswerAsAbsent,
    /// Take a failed read of a run's turns for a run with no turn.
    FailedReadAsNoTurn,
    /// End the task's actor on a failed read of its snapshot.
    ActorReturnsOnFailedRead,
    /// Deliver an earlier Retry that never ran after a later Retry.
    DeliverStaleRetry,
    /// After a restart, resume only the first unsettled task.
    ResumeFirstTaskOnly,
    /// After a restart, continue a turn the provider failed because its model API did.
    ContinueUpstreamFailure,
    /// Answer a Retry sent again as a new one: refused while its own run is active.
    ResentRetryRefused,
    /// Read an OpenCode answer closed with neither finish nor error (a context overflow stored on no message) as completed.
    OverflowReadCompleted,
}

impl SeededBug {
    /// Every seeded bug, in documentation order.
    pub const ALL: [SeededBug; 44] = [
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
        SeededBug::RetryResendsQueued,
        SeededBug::FenceReopensFailed,
        SeededBug::AcceptAtTurnEnd,
        SeededBug::NativeReasksFinal,
        SeededBug::StrandSilently,
        SeededBug::LookupErrorAsAbsent,
        SeededBug::AbsentKeepsAcceptance,
        SeededBug::ResendLostOutput,
        SeededBug::RetryCurrentInSecondWrite,
        SeededBug::RetryDecidesByPrimaryTurn,
        SeededBug::WalSynchronousNormal,
        SeededBug::AtomicWriteWithoutFsync,
        SeededBug::RenameWithoutDirSync,
        SeededBug::IdleTimeoutInMicros,
        SeededBug::RateLimitUnrecoverable,
        SeededBug::RetryTurnAfterStreamCut,
        SeededBug::RetryUnauthorized,
        SeededBug::IgnoreRetryAfter,
        SeededBug::LookupErrorAnswerAsAbsent,
        SeededBug::FailedReadAsNoTurn,
        SeededBug::ActorReturnsOnFailedRead,
        SeededBug::DeliverStaleRetry,
        SeededBug::ResumeFirstTaskOnly,
        SeededBug::ContinueUpstreamFailure,
        SeededBug::ResentRetryRefused,
        SeededBug::OverflowReadCompleted,
    ];

    /// Whether the bug can fire on a profile speaking `protocol`. The native
    /// profile has no provider turn to look up, continue or adopt and never
    /// fails closed (so no Retry and no failure cause); the native bugs live
    /// only in its loop. runnerd writes workspace files itself only for ACP's
    /// client tool `fs/write_text_file` and the native `Write`/`Edit` tools
    /// (a Codex or OpenCode provider writes its own), so the atomic-write
    /// bugs fire only there.
    pub fn fires(self, protocol: wire::profiles::Protocol) -> bool {
        use SeededBug::*;
        use wire::profiles::Protocol;
        let native = protocol == Protocol::Native;
        match self {
            RerunExecutingTool
            | ContinueBeforeOutcome
            | NativeReasksFinal
            | RateLimitUnrecoverable
            | RetryTurnAfterStreamCut
            | RetryUnauthorized
            | IgnoreRetryAfter => native,
            SplitLostMark
            | ResendAmbiguousTurn
            | SecondContinuation
            | ContinuationResendsMessage
            | NullCause
            | WrongRecoverable
            | RetryReusesConversation
            | FailClosedWhenAbsent
            | AdoptWithoutCompletion
            | FenceReopensFailed
            | AcceptAtTurnEnd
            | LookupErrorAsAbsent
            | LookupErrorAnswerAsAbsent
            | RetryCurrentInSecondWrite
            | RetryDecidesByPrimaryTurn
            | RetryResendsQueued
            | DeliverStaleRetry => !native,
            // Only the Codex driver reads why a recorded turn failed.
            ContinueUpstreamFailure => protocol == Protocol::Codex,
            // Only OpenCode stores an error on no message.
            OverflowReadCompleted => protocol == Protocol::Opencode,
            // Only Codex sends an accepted turn found absent again under a
            // new provider turn id: OpenCode re-sends under the client's
            // message id, found by the next lookup (adopted); ACP closes the
            // turn, native resumes from its checkpoint.
            AbsentKeepsAcceptance => protocol == Protocol::Codex,
            // Only Codex and OpenCode read "no record" as "no model saw it"
            // (ACP closes such a turn, native keeps its own record).
            ResendLostOutput => matches!(protocol, Protocol::Codex | Protocol::Opencode),
            AtomicWriteWithoutFsync | RenameWithoutDirSync => {
                matches!(protocol, Protocol::Acp | Protocol::Native)
            }
            _ => true,
        }
    }

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
            SeededBug::RetryResendsQueued => "retry-resends-queued",
            SeededBug::FenceReopensFailed => "fence-reopens-failed",
            SeededBug::AcceptAtTurnEnd => "accept-at-turn-end",
            SeededBug::NativeReasksFinal => "native-reasks-final",
            SeededBug::StrandSilently => "strand-silently",
            SeededBug::LookupErrorAsAbsent => "lookup-error-as-absent",
            SeededBug::AbsentKeepsAcceptance => "absent-keeps-acceptance",
            SeededBug::ResendLostOutput => "resend-lost-output",
            SeededBug::RetryCurrentInSecondWrite => "retry-current-in-second-write",
            SeededBug::RetryDecidesByPrimaryTurn => "retry-decides-by-primary-turn",
            SeededBug::WalSynchronousNormal => "wal-synchronous-normal",
            SeededBug::AtomicWriteWithoutFsync => "atomic-write-without-fsync",
            SeededBug::RenameWithoutDirSync => "rename-without-dir-sync",
            SeededBug::IdleTimeoutInMicros => "idle-timeout-in-micros",
            SeededBug::RateLimitUnrecoverable => "rate-limit-unrecoverable",
            SeededBug::RetryTurnAfterStreamCut => "retry-turn-after-stream-cut",
            SeededBug::RetryUnauthorized => "retry-unauthorized",
            SeededBug::IgnoreRetryAfter => "ignore-retry-after",
            SeededBug::LookupErrorAnswerAsAbsent => "lookup-error-answer-as-absent",
            SeededBug::FailedReadAsNoTurn => "failed-read-as-no-turn",
            SeededBug::ActorReturnsOnFailedRead => "actor-returns-on-failed-read",
            SeededBug::DeliverStaleRetry => "deliver-stale-retry",
            SeededBug::ResumeFirstTaskOnly => "resume-first-task-only",
            SeededBug::ContinueUpstreamFailure => "continue-upstream-failure",
            SeededBug::ResentRetryRefused => "resent-retry-refused",
            SeededBug::OverflowReadCompleted => "overflow-read-completed",
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

/// Whether this build has the bugs (the `seeded-bugs` feature): a test that
/// needs a bug says so and skips without it.
pub const COMPILED: bool = cfg!(feature = "seeded-bugs");

#[cfg(feature = "seeded-bugs")]
static ACTIVE: OnceLock<SeededBug> = OnceLock::new();

#[cfg(feature = "seeded-bugs")]
/// Switches `bug` on for this process. Only the first call counts; returns
/// whether `bug` is the active one afterwards.
pub fn activate(bug: SeededBug) -> bool {
    *ACTIVE.get_or_init(|| bug) == bug
}

#[cfg(feature = "seeded-bugs")]
/// Whether `bug` is switched on.
pub fn active(bug: SeededBug) -> bool {
    ACTIVE.get() == Some(&bug)
}

/// Defines one hook per bug: whether that bug is the active one, or a
/// constant `false` in a build without the feature.
macro_rules! hooks {
    ($($(#[$doc:meta])* $hook:ident => $bug:ident;)*) => {$(
        $(#[$doc])*
        #[cfg(feature = "seeded-bugs")]
        pub fn $hook() -> bool {
            active(SeededBug::$bug)
        }
        $(#[$doc])*
        #[cfg(not(feature = "seeded-bugs"))]
        pub const fn $hook() -> bool {
            false
        }
    )*};
}

hooks! {
    /// `resend-ambiguous-turn`.
    resend_ambiguous_turn => ResendAmbiguousTurn;
    /// `second-continuation`.
    second_continuation => SecondContinuation;
    /// `continuation-resends-message`.
    continuation_resends_message => ContinuationResendsMessage;
    /// `null-cause`.
    null_cause => NullCause;
    /// `wrong-recoverable`.
    wrong_recoverable => WrongRecoverable;
    /// `lose-follow-up-on-restart`.
    lose_follow_up_on_restart => LoseFollowUpOnRestart;
    /// `retry-reuses-conversation`.
    retry_reuses_conversation => RetryReusesConversation;
    /// `credential-in-store`.
    credential_in_store => CredentialInStore;
    /// `skip-stop-proof`.
    skip_stop_proof => SkipStopProof;
    /// `stuck-after-restart`.
    stuck_after_restart => StuckAfterRestart;
    /// `resume-first-task-only`.
    resume_first_task_only => ResumeFirstTaskOnly;
    /// `continue-upstream-failure`.
    continue_upstream_failure => ContinueUpstreamFailure;
    /// `resent-retry-refused`.
    resent_retry_refused => ResentRetryRefused;
    /// `overflow-read-completed`.
    overflow_read_completed => OverflowReadCompleted;
    /// `fail-closed-when-absent`.
    fail_closed_when_absent => FailClosedWhenAbsent;
    /// `adopt-without-completion`.
    adopt_without_completion => AdoptWithoutCompletion;
    /// `rerun-executing-tool`.
    rerun_executing_tool => RerunExecutingTool;
    /// `continue-before-outcome`.
    continue_before_outcome => ContinueBeforeOutcome;
    /// `skip-marker-sweep`.
    skip_marker_sweep => SkipMarkerSweep;
    /// `split-lost-mark`.
    split_lost_mark => SplitLostMark;
    /// `settle-ignores-queue`.
    settle_ignores_queue => SettleIgnoresQueue;
    /// `send-after-failed-intent`.
    send_after_failed_intent => SendAfterFailedIntent;
    /// `retry-resends-queued`.
    retry_resends_queued => RetryResendsQueued;
    /// `fence-reopens-failed`.
    fence_reopens_failed => FenceReopensFailed;
    /// `accept-at-turn-end`.
    accept_at_turn_end => AcceptAtTurnEnd;
    /// `native-reasks-final`.
    native_reasks_final => NativeReasksFinal;
    /// `strand-silently`.
    strand_silently => StrandSilently;
    /// `lookup-error-as-absent`.
    lookup_error_as_absent => LookupErrorAsAbsent;
    /// `absent-keeps-acceptance`.
    absent_keeps_acceptance => AbsentKeepsAcceptance;
    /// `resend-lost-output`.
    resend_lost_output => ResendLostOutput;
    /// `retry-current-in-second-write`.
    retry_current_in_second_write => RetryCurrentInSecondWrite;
    /// `retry-decides-by-primary-turn`.
    retry_decides_by_primary_turn => RetryDecidesByPrimaryTurn;
    /// `wal-synchronous-normal`.
    wal_synchronous_normal => WalSynchronousNormal;
    /// `atomic-write-without-fsync`.
    atomic_write_without_fsync => AtomicWriteWithoutFsync;
    /// `rename-without-dir-sync`.
    rename_without_dir_sync => RenameWithoutDirSync;
    /// `idle-timeout-in-micros`.
    idle_timeout_in_micros => IdleTimeoutInMicros;
    /// `rate-limit-unrecoverable`.
    rate_limit_unrecoverable => RateLimitUnrecoverable;
    /// `retry-turn-after-stream-cut`.
    retry_turn_after_stream_cut => RetryTurnAfterStreamCut;
    /// `retry-unauthorized`.
    retry_unauthorized => RetryUnauthorized;
    /// `ignore-retry-after`.
    ignore_retry_after => IgnoreRetryAfter;
    /// `lookup-error-answer-as-absent`.
    lookup_error_answer_as_absent => LookupErrorAnswerAsAbsent;
    /// `failed-read-as-no-turn`.
    failed_read_as_no_turn => FailedReadAsNoTurn;
    /// `actor-returns-on-failed-read`.
    actor_returns_on_failed_read => ActorReturnsOnFailedRead;
    /// `deliver-stale-retry`.
    deliver_stale_retry => DeliverStaleRetry;
}

#[cfg(all(test, feature = "seeded-bugs"))]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips_through_its_parser() {
        for bug in SeededBug::ALL {
            assert_eq!(bug.as_str().parse::<SeededBug>(), Ok(bug));
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_valid_names() {
        let err = "no-such-bug".parse::<SeededBug>().unwrap_err();
        for bug in SeededBug::ALL {
            assert!(err.contains(bug.as_str()), "{err}");
        }
    }
}
