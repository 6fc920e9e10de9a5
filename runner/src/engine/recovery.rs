//! The recovery contract's decision for a turn whose execution was cut: a
//! pure function of what the runner's store holds of the turn, what the
//! provider says of it and the work left pending in it
//! ([`classify`]), and of a lost conversation ([`lost_conversation`]).
//!
//! Nothing here does I/O: no store, no driver, no process. `turn.rs` asks
//! the provider, calls [`classify`] and carries out the [`Recovery`] it
//! returns. The table test at the end follows `docs/recovery-contract.md`
//! row for row. The seeded bugs that change a decision are read here through
//! their hooks (constant `false` without the `seeded-bugs` feature).

use crate::causes::{Cause, CauseCode};
use crate::driver::{FoundTurn, ProviderTurnStatus, Sent, TurnLookup};
use crate::store::{TurnKind, TurnRow};

/// What the runner's store holds of a cut (unsettled) turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TurnState<'a> {
    /// A primary turn whose intent only is durable: the runner never saw
    /// the provider accept it.
    Intent { message_id: &'a str },
    /// A primary turn the provider accepted.
    Accepted { provider_turn_id: &'a str },
    /// The one continuation of a lost turn (intent or accepted).
    Continuation,
}

impl<'a> TurnState<'a> {
    /// The state of an unsettled turn row.
    pub(super) fn of(turn: &'a TurnRow) -> TurnState<'a> {
        // SEEDED BUG second-continuation: only a continuation that was never
        // accepted is treated as one; an accepted continuation is classified
        // like an accepted primary turn, and continued again.
        let continuation = turn.kind == TurnKind::Continuation
            && !(crate::seeded::second_continuation() && turn.provider_turn_id.is_some());
        match (&turn.provider_turn_id, continuation) {
            (_, true) => TurnState::Continuation,
            (None, false) => TurnState::Intent {
                message_id: &turn.message_id,
            },
            (Some(id), false) => TurnState::Accepted {
                provider_turn_id: id,
            },
        }
    }

    /// How to ask the provider for the turn: by its turn id once accepted,
    /// else by the client id it was sent with and what it carried (`sent`).
    pub(super) fn lookup(turn: &TurnRow, sent: Sent) -> TurnLookup {
        match &turn.provider_turn_id {
            Some(id) => TurnLookup::TurnId(id.clone()),
            None => TurnLookup::ClientId {
                id: turn.client_id.clone(),
                sent,
            },
        }
    }
}

/// What the provider says of the turn.
#[derive(Clone, Debug)]
pub(super) struct ProviderSays {
    /// The turn as the provider recorded it: its id and status; `None` when
    /// it has no such turn.
    pub turn: Option<FoundTurn>,
    /// Whether a turn this provider did not record provably reached no
    /// model (Codex: [`crate::driver::Driver::unrecorded_reached_no_model`]).
    pub unrecorded_reached_no_model: bool,
}

/// The work left pending in the turn when it was cut.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending<'a> {
    /// Provider requests (approvals, permissions) not answered.
    pub requests: usize,
    /// Items whose command was approved and never completed.
    pub unfinished_approved: &'a [String],
    /// Whether the runner holds output of the turn (an item completed, a
    /// request made): a model saw its message (`Db::output_held`).
    pub output_held: bool,
}

/// What to do with a cut turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Recovery {
    /// The provider completed it: adopt its result, start no new turn.
    Adopt,
    /// Fail the run with this cause.
    Fail(Cause),
    /// The provider never recorded a turn only intended: record
    /// `turn.absent_at_provider` and send it, its first delivery.
    StartAbsent,
    /// The provider never recorded an accepted turn's user message, so no
    /// model saw it: record `turn.absent_at_provider` and send the message
    /// once more.
    ResendUnrecorded,
    /// Mark the turn lost with this cause (`turn.failed`) and start its one
    /// continuation in the same conversation.
    Continue(Cause),
    /// SEEDED BUG resend-ambiguous-turn: send an ambiguous turn's message
    /// again.
    ResendAmbiguous,
}

/// Classifies a cut turn (DESIGN §3.5, docs/recovery-contract.md).
pub(super) fn classify(turn: TurnState, provider: ProviderSays, pending: Pending) -> Recovery {
    match turn {
        TurnState::Continuation => match provider.turn {
            // One continuation only: adopt it if it completed, else exhausted.
            Some(FoundTurn {
                status: ProviderTurnStatus::Completed,
                ..
            }) => Recovery::Adopt,
            _ => Recovery::Fail(Cause::new(
                CauseCode::ContinuationExhausted,
                "the continuation of a lost turn was itself cut; the runner never continues twice",
            )),
        },
        // A turn the provider failed upstream ends with that cause, whether
        // or not the runner saw it accepted: the failure is known, and
        // `ambiguous_turn_start` would hide it.
        TurnState::Intent { message_id } => {
            failed_upstream(&provider).unwrap_or_else(|| classify_intent(message_id, provider))
        }
        TurnState::Accepted { provider_turn_id } => failed_upstream(&provider)
            .unwrap_or_else(|| classify_accepted(provider_turn_id, provider, pending)),
    }
}

/// Only the intent is durable: what the provider recorded decides.
fn classify_intent(message_id: &str, provider: ProviderSays) -> Recovery {
    match provider.turn {
        // SEEDED BUG resend-ambiguous-turn: the runner never saw the turn
        // accepted, so it "delivers" the message again.
        Some(_) if crate::seeded::resend_ambiguous_turn() => Recovery::ResendAmbiguous,
        Some(FoundTurn { id, status, .. }) => Recovery::Fail(Cause::new(
            CauseCode::AmbiguousTurnStart,
            format!(
                "the provider recorded turn {id} ({status}) for message {message_id} but the runner never saw it accepted; it is neither replayed nor adopted"
            ),
        )),
        // SEEDED BUG fail-closed-when-absent: any turn without a durable
        // acceptance is treated as ambiguous, even one the provider provably
        // never recorded.
        None if crate::seeded::fail_closed_when_absent() => Recovery::Fail(Cause::new(
            CauseCode::AmbiguousTurnStart,
            format!(
                "the runner never saw the turn for message {message_id} accepted; it is neither replayed nor adopted"
            ),
        )),
        None => Recovery::StartAbsent,
    }
}

/// An accepted turn (not failed upstream): adopted if completed, sent again if it provably
/// reached no model, closed if it waited on an approval or an approved
/// command may have run, else continued once.
fn classify_accepted(provider_turn: &str, provider: ProviderSays, pending: Pending) -> Recovery {
    let unrecorded = provider
        .turn
        .as_ref()
        .is_none_or(|t| t.status == ProviderTurnStatus::NotRecorded);
    match provider.turn.map(|t| t.status) {
        Some(ProviderTurnStatus::Completed) => Recovery::Adopt,
        // The provider never recorded the turn's user message (or the
        // turn): no model saw it, so this delivery is its first.
        // SEEDED BUG resend-lost-output: the runner's own record of the
        // turn's output is not consulted.
        _ if provider.unrecorded_reached_no_model
            && unrecorded
            && (!pending.output_held || crate::seeded::resend_lost_output()) =>
        {
            Recovery::ResendUnrecorded
        }
        // The runner holds output of a turn the provider has no record of:
        // a model saw the message and the provider lost the turn (a power
        // cut takes the unsynced tail of its log). Sending it again would
        // run it twice; a continuation would refer to a turn it lacks.
        _ if unrecorded && pending.output_held => Recovery::Fail(Cause::new(
            CauseCode::ActiveTurnRecoveryClosed,
            format!(
                "the provider has no record of accepted turn {provider_turn}, though the runner holds its output: the provider lost it; it is neither sent again nor continued"
            ),
        )),
        // SEEDED BUG adopt-without-completion: an interrupted turn is
        // treated as finished and adopted instead of continued.
        Some(ProviderTurnStatus::Interrupted) if crate::seeded::adopt_without_completion() => {
            Recovery::Adopt
        }
        _ if pending.requests > 0 => Recovery::Fail(Cause::new(
            CauseCode::ActiveTurnRecoveryClosed,
            format!(
                "turn {provider_turn} was lost while waiting for an approval; the approval cannot be replayed"
            ),
        )),
        _ if !pending.unfinished_approved.is_empty() => Recovery::Fail(Cause::new(
            CauseCode::ActiveTurnRecoveryClosed,
            format!(
                "turn {provider_turn} was lost after its approved command {} started and before it completed; it may have run, so the turn is not continued",
                pending.unfinished_approved.join(", ")
            ),
        )),
        Some(status) => {
            let cause = Cause::new(
                CauseCode::ProviderTurnLostOnRestore,
                format!(
                    "turn {provider_turn} was {status} when its provider was lost; continuing once"
                ),
            );
            if crate::seeded::wrong_recoverable() {
                // SEEDED BUG wrong-recoverable: the turn failed, so its
                // cause is written as not recoverable.
                return Recovery::Continue(Cause {
                    recoverable: false,
                    ..cause
                });
            }
            Recovery::Continue(cause)
        }
        None => Recovery::Fail(Cause::new(
            CauseCode::ActiveTurnRecoveryClosed,
            format!("the provider has no record of accepted turn {provider_turn}"),
        )),
    }
}

/// The provider failed the turn because its model API did: that is the
/// turn's end, not a loss. It settles with that cause; a continuation would
/// be the runner retrying it by itself, which the contract allows for no
/// such failure after a restart.
fn failed_upstream(provider: &ProviderSays) -> Option<Recovery> {
    // SEEDED BUG continue-upstream-failure: a failed turn is a lost turn,
    // whatever the provider says failed it.
    if crate::seeded::continue_upstream_failure() {
        return None;
    }
    let Some(FoundTurn {
        id,
        status: ProviderTurnStatus::Failed,
        upstream: Some(code),
    }) = &provider.turn
    else {
        return None;
    };
    let code = *code;
    Some(Recovery::Fail(Cause::new(
        code,
        format!(
            "the provider failed turn {id} upstream ({}) before the runner saw it end; it is not continued",
            code.as_str()
        ),
    )))
}

/// What to do when the provider has no record of the run's conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LostConversation {
    /// Nothing the provider recorded is lost: forget the conversation
    /// (`conversation.lost`); the next step opens a fresh one.
    Forget,
    /// The provider lost history: fail the run with this cause.
    Fail(Cause),
}

/// What the runner holds of a conversation the provider lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Held {
    /// A turn of it completed.
    pub completed_turn: bool,
    /// Output of one of its turns (an item completed, a request made):
    /// a model saw the turn's message.
    pub output: bool,
}

/// The provider lost conversation `id`: Codex writes a thread only with its
/// first turn, so a provider lost before that leaves nothing; a
/// conversation with a completed turn, or a turn whose output the runner
/// holds, has lost history (a power cut takes an unsynced thread), and
/// opening a fresh one would run that turn again.
pub(super) fn lost_conversation(id: &str, held: Held) -> LostConversation {
    // SEEDED BUG resend-lost-output: output alone is not history.
    let output = held.output && !crate::seeded::resend_lost_output();
    let what = match (held.completed_turn, output) {
        (true, _) => "which has completed turns",
        (false, true) => "whose turn's output the runner holds",
        (false, false) => return LostConversation::Forget,
    };
    LostConversation::Fail(Cause::new(
        CauseCode::ProviderProtocolError,
        format!("the provider lost conversation {id}, {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causes::CauseCode::*;

    /// What a row expects, by kind (causes by code).
    #[derive(Debug, PartialEq, Eq)]
    enum Want {
        Adopt,
        Fail(CauseCode),
        StartAbsent,
        ResendUnrecorded,
        /// A continuation whose `turn.failed` cause is recoverable.
        ContinueRecoverable,
    }

    fn kind(r: &Recovery) -> Want {
        match r {
            Recovery::Adopt => Want::Adopt,
            Recovery::Fail(c) => Want::Fail(c.code),
            Recovery::StartAbsent => Want::StartAbsent,
            Recovery::ResendUnrecorded => Want::ResendUnrecorded,
            Recovery::Continue(c) => {
                assert_eq!(c.code, ProviderTurnLostOnRestore, "{c:?}");
                assert!(c.recoverable, "{c:?}");
                Want::ContinueRecoverable
            }
            Recovery::ResendAmbiguous => panic!("no seeded bug is active in unit tests"),
        }
    }

    const INTENT: TurnState<'static> = TurnState::Intent { message_id: "m1" };
    const ACCEPTED: TurnState<'static> = TurnState::Accepted {
        provider_turn_id: "t1",
    };
    const CONTINUATION: TurnState<'static> = TurnState::Continuation;

    /// The provider's answer on Codex and OpenCode (a turn it does not have,
    /// or has without its user message, provably reached no model).
    fn codex(turn: Option<(&str, &str)>) -> ProviderSays {
        ProviderSays {
            turn: turn.map(found),
            unrecorded_reached_no_model: true,
        }
    }

    /// The provider's answer on ACP: a turn the agent does not have may
    /// have reached a model. ACP reports a recorded turn `interrupted` (a
    /// replay cannot prove completion).
    fn other(turn: Option<(&str, &str)>) -> ProviderSays {
        ProviderSays {
            turn: turn.map(found),
            unrecorded_reached_no_model: false,
        }
    }

    /// A turn the provider answered with `(id, status)`, in its spelling.
    fn found((id, status): (&str, &str)) -> FoundTurn {
        FoundTurn {
            id: id.to_owned(),
            status: ProviderTurnStatus::from_provider(status),
            upstream: None,
        }
    }

    /// Codex's answer: turn `t1` failed because its model API answered 429.
    fn codex_failed_upstream() -> ProviderSays {
        let mut says = codex(Some(("t1", "failed")));
        if let Some(t) = says.turn.as_mut() {
            t.upstream = Some(CauseCode::UpstreamRateLimited);
        }
        says
    }

    const IDLE: Pending<'static> = Pending {
        requests: 0,
        unfinished_approved: &[],
        output_held: false,
    };
    /// An approval asked and not answered: the runner holds the request.
    const APPROVAL_PENDING: Pending<'static> = Pending {
        requests: 1,
        unfinished_approved: &[],
        output_held: true,
    };
    /// Items completed, nothing pending.
    const OUTPUT_HELD: Pending<'static> = Pending {
        requests: 0,
        unfinished_approved: &[],
        output_held: true,
    };
    fn approved_unfinished(items: &[String]) -> Pending<'_> {
        Pending {
            requests: 0,
            unfinished_approved: items,
            output_held: true,
        }
    }

    #[test]
    #[rustfmt::skip]
    fn the_contract_rows() {
        let unfinished = ["item_1".to_owned()];
        let unfinished = &unfinished[..];
        let rows: Vec<(&str, TurnState, ProviderSays, Pending, Want)> = vec![
            // Codex: "nothing sent / intent only | turn absent, or without its
            // user message | start the turn once" (absent).
            ("codex intent, absent", INTENT, codex(None), IDLE, Want::StartAbsent),
            // Codex: "intent only | turn recorded with its user message (any
            // status) | fail closed ambiguous_turn_start".
            ("codex intent, recorded completed", INTENT, codex(Some(("t1", "completed"))), IDLE, Want::Fail(AmbiguousTurnStart)),
            ("codex intent, recorded interrupted", INTENT, codex(Some(("t1", "interrupted"))), IDLE, Want::Fail(AmbiguousTurnStart)),
            ("codex intent, recorded in progress", INTENT, codex(Some(("t1", "inProgress"))), IDLE, Want::Fail(AmbiguousTurnStart)),
            // Codex: "turn accepted | turn absent, or without its user message
            // | turn.absent_at_provider, then the message is sent once more".
            ("codex accepted, absent", ACCEPTED, codex(None), IDLE, Want::ResendUnrecorded),
            ("codex accepted, not recorded", ACCEPTED, codex(Some(("t1", "notRecorded"))), IDLE, Want::ResendUnrecorded),
            // Unless the runner holds output of the turn (an item, an
            // approval asked): a model saw it and the provider lost its
            // record (a power cut), so it is closed, never sent again.
            ("codex accepted, not recorded, approval pending", ACCEPTED, codex(Some(("t1", "notRecorded"))), APPROVAL_PENDING, Want::Fail(ActiveTurnRecoveryClosed)),
            ("codex accepted, absent, output held", ACCEPTED, codex(None), OUTPUT_HELD, Want::Fail(ActiveTurnRecoveryClosed)),
            ("codex accepted, not recorded, output held", ACCEPTED, codex(Some(("t1", "notRecorded"))), OUTPUT_HELD, Want::Fail(ActiveTurnRecoveryClosed)),
            // Codex: "turn accepted | turn recorded, interrupted or in
            // progress | turn.failed provider_turn_lost_on_restore
            // (recoverable), then one continuation".
            ("codex accepted, interrupted", ACCEPTED, codex(Some(("t1", "interrupted"))), IDLE, Want::ContinueRecoverable),
            ("codex accepted, in progress", ACCEPTED, codex(Some(("t1", "inProgress"))), IDLE, Want::ContinueRecoverable),
            // "turn accepted | turn failed upstream (its model API failed) |
            // the run fails with that upstream cause; never continued".
            ("codex accepted, failed upstream", ACCEPTED, codex_failed_upstream(), IDLE, Want::Fail(UpstreamRateLimited)),
            // "intent only | turn recorded and failed upstream | the run
            // fails with that upstream cause" (found under --stress 8: a
            // kill before the acceptance was durable, the provider failed
            // the turn meanwhile; `ambiguous_turn_start` hid the cause).
            ("codex intent, failed upstream", INTENT, codex_failed_upstream(), IDLE, Want::Fail(UpstreamRateLimited)),
            // Codex: "turn accepted | turn completed | adopt the result".
            ("codex accepted, completed", ACCEPTED, codex(Some(("t1", "completed"))), IDLE, Want::Adopt),
            ("codex accepted, completed, approval pending", ACCEPTED, codex(Some(("t1", "completed"))), APPROVAL_PENDING, Want::Adopt),
            // Codex: "turn accepted, approval requested or being answered |
            // turn not completed | close with active_turn_recovery_closed".
            ("codex accepted, approval pending", ACCEPTED, codex(Some(("t1", "interrupted"))), APPROVAL_PENDING, Want::Fail(ActiveTurnRecoveryClosed)),
            // Codex: "turn accepted, an approval answered accept whose command
            // item never completed | turn not completed | close with
            // active_turn_recovery_closed".
            ("codex accepted, approved command unfinished", ACCEPTED, codex(Some(("t1", "interrupted"))), approved_unfinished(unfinished), Want::Fail(ActiveTurnRecoveryClosed)),
            // Codex: "continuation intent or accepted | continuation not
            // completed | fail with continuation_exhausted".
            ("codex continuation, absent", CONTINUATION, codex(None), IDLE, Want::Fail(ContinuationExhausted)),
            ("codex continuation, interrupted", CONTINUATION, codex(Some(("t2", "interrupted"))), IDLE, Want::Fail(ContinuationExhausted)),
            ("codex continuation, not recorded", CONTINUATION, codex(Some(("t2", "notRecorded"))), IDLE, Want::Fail(ContinuationExhausted)),
            // Codex: "continuation accepted | continuation completed | adopt it".
            ("codex continuation, completed", CONTINUATION, codex(Some(("t2", "completed"))), IDLE, Want::Adopt),
            // ACP: "nothing sent / intent only | user message absent from the
            // replay | start the turn once".
            ("acp intent, absent", INTENT, other(None), IDLE, Want::StartAbsent),
            // ACP: "intent only | user message in the replay | fail closed
            // ambiguous_turn_start".
            ("acp intent, in replay", INTENT, other(Some(("m1", "interrupted"))), IDLE, Want::Fail(AmbiguousTurnStart)),
            // ACP: "turn accepted (echo persisted) | user message in the
            // replay | provider_turn_lost_on_restore (recoverable), then one
            // continuation".
            ("acp accepted, in replay", ACCEPTED, other(Some(("m1", "interrupted"))), IDLE, Want::ContinueRecoverable),
            // ACP: "turn accepted, permission requested or being answered |
            // any | close with active_turn_recovery_closed".
            ("acp accepted, permission pending", ACCEPTED, other(Some(("m1", "interrupted"))), APPROVAL_PENDING, Want::Fail(ActiveTurnRecoveryClosed)),
            ("acp accepted, permission pending, absent", ACCEPTED, other(None), APPROVAL_PENDING, Want::Fail(ActiveTurnRecoveryClosed)),
            // ACP: "turn accepted | user message absent | close with
            // active_turn_recovery_closed".
            ("acp accepted, absent", ACCEPTED, other(None), IDLE, Want::Fail(ActiveTurnRecoveryClosed)),
            // ACP: "continuation intent or accepted | anything |
            // continuation_exhausted" (a replay never says completed).
            ("acp continuation, absent", CONTINUATION, other(None), IDLE, Want::Fail(ContinuationExhausted)),
            ("acp continuation, in replay", CONTINUATION, other(Some(("m1#continuation", "interrupted"))), IDLE, Want::Fail(ContinuationExhausted)),
            // OpenCode: "the Codex rows apply (an accepted turn the provider
            // completed is adopted)".
            ("opencode intent, absent", INTENT, codex(None), IDLE, Want::StartAbsent),
            ("opencode intent, recorded", INTENT, codex(Some(("msg_1", "inProgress"))), IDLE, Want::Fail(AmbiguousTurnStart)),
            ("opencode accepted, completed", ACCEPTED, codex(Some(("msg_1", "completed"))), IDLE, Want::Adopt),
            ("opencode accepted, in progress", ACCEPTED, codex(Some(("msg_1", "inProgress"))), IDLE, Want::ContinueRecoverable),
            ("opencode continuation, completed", CONTINUATION, codex(Some(("msg_1", "completed"))), IDLE, Want::Adopt),
            ("opencode continuation, in progress", CONTINUATION, codex(Some(("msg_1", "inProgress"))), IDLE, Want::Fail(ContinuationExhausted)),
            // OpenCode: "An accepted turn whose user message the provider
            // does not have reached no model: the message is sent once more
            // (turn.absent_at_provider). A permission asked and not answered
            // closes the run with active_turn_recovery_closed".
            ("opencode accepted, absent", ACCEPTED, codex(None), IDLE, Want::ResendUnrecorded),
            ("opencode accepted, absent, output held", ACCEPTED, codex(None), OUTPUT_HELD, Want::Fail(ActiveTurnRecoveryClosed)),
            ("opencode accepted, permission pending", ACCEPTED, codex(Some(("msg_1", "inProgress"))), APPROVAL_PENDING, Want::Fail(ActiveTurnRecoveryClosed)),
        ];
        for (name, turn, provider, pending, want) in rows {
            let got = classify(turn, provider, pending);
            assert_eq!(kind(&got), want, "{name}: {got:?}");
        }
    }

    /// Codex: "a conversation, no completed turn in it | no thread | event
    /// conversation.lost; open a fresh conversation" and "a conversation
    /// with a completed turn, or a turn whose output the runner holds | no
    /// thread | fail provider_protocol_error".
    #[test]
    fn a_lost_conversation() {
        let held = |completed_turn, output| Held {
            completed_turn,
            output,
        };
        assert_eq!(
            lost_conversation("thr_1", held(false, false)),
            LostConversation::Forget
        );
        for (h, why) in [
            (held(true, false), "completed turns"),
            (held(false, true), "output the runner holds"),
        ] {
            match lost_conversation("thr_1", h) {
                LostConversation::Fail(c) => {
                    assert_eq!(c.code, ProviderProtocolError);
                    assert!(c.message.contains("thr_1"), "{}", c.message);
                    assert!(c.message.contains(why), "{}", c.message);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// The classification reads a turn row as the store holds it: a
    /// continuation is one whatever its acceptance, and the lookup uses the
    /// turn id once the turn is accepted, else the client id.
    #[test]
    fn turn_rows_read_as_states() {
        let row = |kind: TurnKind, provider_turn_id: Option<&str>| TurnRow {
            turn_row: 1,
            run_id: "run-1".into(),
            message_id: "m1".into(),
            kind,
            client_id: "c1".into(),
            provider_turn_id: provider_turn_id.map(str::to_owned),
            status: crate::store::TurnStatus::Intent,
        };
        let intent = row(TurnKind::Primary, None);
        assert_eq!(TurnState::of(&intent), INTENT);
        let sent = || Sent {
            text: "hello".into(),
            earlier: vec![],
            completed_tools: vec![],
        };
        assert!(
            matches!(TurnState::lookup(&intent, sent()), TurnLookup::ClientId { id, sent } if id == "c1" && sent.text == "hello")
        );
        let accepted = row(TurnKind::Primary, Some("t1"));
        assert_eq!(TurnState::of(&accepted), ACCEPTED);
        assert!(matches!(TurnState::lookup(&accepted, sent()), TurnLookup::TurnId(t) if t == "t1"));
        for cont in [
            row(TurnKind::Continuation, None),
            row(TurnKind::Continuation, Some("t2")),
        ] {
            assert_eq!(TurnState::of(&cont), CONTINUATION);
        }
    }

    /// The messages of the causes name the turn and what the provider said,
    /// as the run log always showed them.
    #[test]
    fn causes_name_what_was_found() {
        let got = classify(INTENT, codex(Some(("t9", "interrupted"))), IDLE);
        assert_eq!(
            got,
            Recovery::Fail(Cause::new(
                AmbiguousTurnStart,
                "the provider recorded turn t9 (interrupted) for message m1 but the runner never saw it accepted; it is neither replayed nor adopted"
            ))
        );
        let items = ["a".to_owned(), "b".to_owned()];
        match classify(
            ACCEPTED,
            codex(Some(("t1", "inProgress"))),
            approved_unfinished(&items),
        ) {
            Recovery::Fail(c) => assert!(
                c.message.contains("approved command a, b started"),
                "{}",
                c.message
            ),
            other => panic!("{other:?}"),
        }
        match classify(ACCEPTED, codex(Some(("t1", "inProgress"))), IDLE) {
            Recovery::Continue(c) => assert_eq!(
                c.message,
                "turn t1 was inProgress when its provider was lost; continuing once"
            ),
            other => panic!("{other:?}"),
        }
        // A status outside the provider's set is quoted as it said it, and
        // reads as neither completed nor unrecorded.
        match classify(ACCEPTED, codex(Some(("t1", "paused"))), IDLE) {
            Recovery::Continue(c) => assert_eq!(
                c.message,
                "turn t1 was paused when its provider was lost; continuing once"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// Each status reads back from the provider's spelling and prints it.
    #[test]
    fn provider_statuses_keep_their_spelling() {
        for text in [
            "completed",
            "interrupted",
            "inProgress",
            "failed",
            "notRecorded",
            "paused",
        ] {
            assert_eq!(ProviderTurnStatus::from_provider(text).to_string(), text);
        }
        assert_eq!(
            ProviderTurnStatus::from_provider("notRecorded"),
            ProviderTurnStatus::NotRecorded
        );
        assert_eq!(
            ProviderTurnStatus::from_provider("Completed"),
            ProviderTurnStatus::Other("Completed".to_owned())
        );
    }
}
