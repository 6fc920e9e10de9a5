//! The `contract` oracle: the outcome is one the recovery contract allows
//! for what the runner and the provider had recorded (a failed-closed run
//! had a reason to, a completed or adopted turn was completed at the
//! provider, every turn start and tool call was written ahead).

use std::collections::{BTreeMap, HashSet};

use super::Judgement;
use super::Oracle;
use crate::contract;
use crate::evidence::{Evidence, RequestKind, Source};
use crate::model::OracleResult;
use crate::run_log::{
    Data, ItemCompleted, Kind, ModelOutput, ProviderRequest, RequestStatus, TurnAbsentAtProvider,
    TurnAccepted, TurnIntent,
};
use crate::runner_client::{RunView, TurnView};

/// The provider's durable turns by id: (final status, authorizing message,
/// continuation).
type ProviderTurns = BTreeMap<String, (Option<String>, String, bool)>;

/// The provider's durable turns of the evidence, and the turns a power cut
/// took from its store (`Evidence::turns_lost_to_power_cut`): the provider
/// recorded and answered them, as its own journal says.
fn provider_turns(e: &Evidence) -> ProviderTurns {
    e.provider_turns_and_lost()
        .into_iter()
        .map(|t| (t.turn, (Some(t.status), t.authorized_by, t.continuation)))
        .collect()
}

/// Whether an approval was answered `accept` for a command item (`item_id`)
/// that never completed in the run log: the command may have run.
fn approved_command_unfinished(e: &Evidence) -> bool {
    let completed: HashSet<(i64, &str)> = e
        .payloads::<ItemCompleted>()
        .filter_map(|(_, c)| Some((c.turn_row, c.item.id.as_deref()?)))
        .collect();
    e.payloads::<ProviderRequest>().any(|(_, r)| {
        let accepted = r.status == RequestStatus::Answered
            && r.decision
                .as_deref()
                .is_some_and(|d| d.starts_with("accept"));
        let item = r.item_id.as_deref();
        accepted && item.is_some_and(|i| !completed.contains(&(r.turn_row, i)))
    })
}

/// The outcome is allowed by the contract for what both sides had recorded.
pub fn contract_oracle(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::Contract).needs(
        e,
        &[
            Source::Task,
            Source::RunLog,
            Source::Journal,
            Source::ProviderStore,
        ],
    );
    let recorded = provider_turns(e);
    check_clean_run(&mut j, e);
    super::by_model::check(&mut j, e);
    let whole = e.gap(Source::RunLog).is_none() && e.gap(Source::Journal).is_none();
    for (id, starts, records) in unrecorded_turn_starts(e).into_iter().filter(|_| whole) {
        j.fail(
            format!("the provider received {starts} turn start(s) for {id} but the run log holds {records} durable intent(s) for it: a turn was sent without its write-ahead record"),
            ["journal".to_owned(), "events".to_owned()],
        );
    }
    for run in e.runs() {
        if check_run_cause(&mut j, e, run) {
            check_completed_run(&mut j, run, &recorded);
        }
    }
    check_adopted_and_continued(&mut j, e, &recorded);
    check_tool_write_ahead(&mut j, e);
    if whole {
        super::acceptance::check_acceptance(&mut j, e);
    }
    check_native_final_answers(&mut j, e);
    j.done()
}

/// A native turn's final answer (a model output without calls) is recorded
/// once: a runner that resumed an answered turn by asking the model again
/// recorded a second one, and a real model may call tools after its final
/// answer. The model API's own count of requests for the turn shows it too.
fn check_native_final_answers(j: &mut Judgement, e: &Evidence) {
    let mut finals: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (ev, out) in e.payloads::<ModelOutput>() {
        if out.calls == Some(0)
            && let Some(row) = out.turn_row
        {
            finals.entry(row).or_default().push(ev.seq);
        }
    }
    check_model_requests(j, e);
    for (row, seqs) in finals.into_iter().filter(|(_, s)| s.len() > 1) {
        j.fail(
            format!(
                "native turn {row} recorded its final answer {} times (events {seqs:?}): the model was asked again after a durable final answer",
                seqs.len()
            ),
            seqs.iter().map(|s| format!("events#{s}")),
        );
    }
}

/// Whether a power cut took from the provider's store a turn of `run`'s
/// messages that the provider had recorded (its journal says so): the
/// contract's rows "turn accepted, and the runner holds output of it |
/// turn absent" close such a run `active_turn_recovery_closed`, since a
/// model saw the message and "no record" no longer means "reached no model"
/// (`docs/recovery-contract.md`, Codex and OpenCode). Any run can meet it,
/// a follow-up's run after the task completed as well as the first.
fn turn_lost_to_power_cut(e: &Evidence, run: &RunView) -> bool {
    e.turns_lost_to_power_cut()
        .iter()
        .any(|lost| run.turns.iter().any(|t| t.message_id == lost.authorized_by))
}

/// Whether the provider's replay of the run's conversation lacked the end
/// of a tool call the runner saw end in the run: the agent lost part of the
/// turn, and a continuation would have the model run it again
/// (`runner/src/driver/acp.rs`, `recorded_unnamed`).
fn command_end_lost(e: &Evidence, run: &RunView) -> bool {
    use crate::run_log::Data;
    let Some(conversation) = run.conversation_id.as_deref() else {
        return false;
    };
    let rows: Vec<i64> = run.turns.iter().map(|t| t.turn_row).collect();
    let tools: Vec<String> = e
        .events
        .iter()
        .filter_map(|ev| match &ev.data {
            Data::ItemCompleted(i) if rows.contains(&i.turn_row) => i.item.tool_call_id.clone(),
            _ => None,
        })
        .collect();
    !tools.is_empty() && e.replay_lacks_a_tool_end(conversation, &tools)
}

/// ACP's row "turn accepted | user message absent" (`docs/recovery-contract.md`):
/// the agent's store (read whole) holds no turn of the run's conversation
/// for a turn the runner saw accepted. A real agent writes the user
/// message lazily (codex-acp, Claude Code: killed right after the prompt
/// was accepted, the session holds nothing of it), and an ACP replay cannot
/// tell whether a model saw the message, so the run closes. A fake records
/// the turn as it accepts it: there only a power cut takes it
/// ([`turn_lost_to_power_cut`]).
fn acp_accepted_turn_unrecorded(e: &Evidence, run: &RunView) -> bool {
    let acp = e
        .profile()
        .and_then(wire::profiles::facts)
        .is_some_and(|f| f.protocol == wire::profiles::Protocol::Acp);
    let Some(conversation) = run.conversation_id.as_deref() else {
        return false;
    };
    if !acp || e.gap(Source::ProviderStore).is_some() {
        return false;
    }
    let recorded = e.provider_turns_and_lost();
    run.turns
        .iter()
        .filter(|t| t.provider_turn_id.is_some())
        .any(|t| {
            !recorded
                .iter()
                .any(|p| p.thread == conversation && p.authorized_by == t.message_id)
        })
}

/// Whether the provider's own record says the run's conversation was never
/// there to look up: its store (read whole) holds no turn of it, not even
/// one a power cut took, and it answered the runner's `session/load` of it
/// "Resource not found" (`Evidence::session_not_found`). Real ACP agents
/// store a session only with its first turn (`docs/real-providers.md`), so
/// a kill before that leaves nothing to find, and failing closed
/// `provider_lookup_failed` is the contract's answer: a lost session does
/// not prove that no model saw the prompt. A fake stores its sessions at
/// `session/new` and never says so.
fn provider_has_no_such_session(e: &Evidence, run: &RunView) -> bool {
    let Some(conversation) = run.conversation_id.as_deref() else {
        return false;
    };
    if e.gap(Source::ProviderStore).is_some()
        || e.provider_turns_and_lost()
            .iter()
            .any(|t| t.thread == conversation)
    {
        return false;
    }
    e.session_not_found(conversation)
}

/// A clean cell (nothing cut) shows what its scenario's `[expect]` says:
/// the final state, the follow-ups consumed (distinct follow-up ids a
/// provider turn answered: a follow-up sent twice is one message) and the
/// effects in the ledger.
fn check_clean_run(j: &mut Judgement, e: &Evidence) {
    if e.spec.as_ref().is_none_or(|s| s.cut().is_some()) {
        return;
    }
    let x = &e.expect;
    let state = crate::model::TaskState::name(e.state());
    if let Some(expected) = &x.final_state
        && state != expected
    {
        j.fail(
            format!(
                "a clean run ended {state} (cause {:?}), the scenario expects {expected}",
                e.cause_code()
            ),
            ["task".to_owned()],
        );
    }
    if let Some(n) = x.effects
        && e.ledger.len() != n
    {
        j.fail(
            format!(
                "a clean run left {} effect(s) in the ledger, the scenario expects {n}",
                e.ledger.len()
            ),
            ["ledger".to_owned()],
        );
    }
    if let Some(n) = x.follow_ups_consumed {
        let consumed = e
            .exchanges
            .iter()
            .filter(|x| x.kind == RequestKind::FollowUp && x.status == 202)
            .filter(|x| {
                e.provider_turns.iter().any(|t| {
                    !t.continuation && t.client_id.as_deref() == Some(x.message_id.as_str())
                })
            })
            .map(|x| x.message_id.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        if consumed != n {
            j.fail(
                format!("a clean run consumed {consumed} follow-up(s), the scenario expects {n}"),
                ["provider-store".to_owned()],
            );
        }
    }
}

/// A failed run's cause is one the evidence justifies: a closed ambiguous
/// turn start that was really ambiguous, a pending approval or unfinished
/// approved command, a continuation that was made, a storage fault, a
/// lookup of a session the provider never stored, or a
/// fail-closed cause after a fault. False when the run has no turn to judge
/// further.
fn check_run_cause(j: &mut Judgement, e: &Evidence, run: &RunView) -> bool {
    let run_id = &run.run_id;
    let turns = &run.turns;
    let Some(code) = run.cause.as_ref().map(|c| c.code.as_str()) else {
        return true;
    };
    let at = format!("task.runs.{run_id}");
    match code {
        "ambiguous_turn_start" => {
            let Some(t) = turns.iter().rev().find(|t| t.kind == "primary") else {
                j.fail(
                    format!("run {run_id} failed ambiguous_turn_start without a turn"),
                    [at],
                );
                return false;
            };
            check_ambiguous_start(j, e, run_id, t, at);
        }
        "active_turn_recovery_closed"
            if !approval_pending(e)
                && !approved_command_unfinished(e)
                && !turn_lost_to_power_cut(e, run)
                && !command_end_lost(e, run)
                && !acp_accepted_turn_unrecorded(e, run) =>
        {
            j.fail(
                format!("run {run_id} closed with active_turn_recovery_closed but no approval was pending, no approved command was left unfinished and the provider lost no turn of the run"),
                [at],
            );
        }
        // Closed with a reason: nothing else to check for this cause.
        "active_turn_recovery_closed" => {}
        "continuation_exhausted" if !turns.iter().any(|t| t.kind == "continuation") => {
            j.fail(
                format!("run {run_id} failed continuation_exhausted without a continuation"),
                [at],
            );
        }
        // The agent never stored the session the runner looked up.
        "provider_lookup_failed" if provider_has_no_such_session(e, run) => {}
        // A storage fault, a power cut that took the provider's turns, an
        // injected upstream error (`cut_justifies`).
        other if super::cut_justifies(e, other) => {}
        other if e.fault.is_some() => {
            j.fail(
                format!("run {run_id} failed with {other}, which no cut-and-restart justifies"),
                [at],
            );
        }
        _ => {}
    }
    true
}

/// A run that failed closed `ambiguous_turn_start` on its last primary turn
/// `t`: the provider recorded a turn for the message (else starting it was
/// provably safe) and the runner had not persisted its acceptance (else it
/// should continue).
fn check_ambiguous_start(j: &mut Judgement, e: &Evidence, run_id: &str, t: &TurnView, at: String) {
    let recorded_client: HashSet<&str> = e
        .provider_turns
        .iter()
        .filter_map(|t| t.client_id.as_deref())
        .collect();
    let mid = t.message_id.as_str();
    if !recorded_client.contains(mid) {
        j.fail(
            format!("run {run_id} failed closed ambiguous_turn_start but the provider never recorded a turn for {mid}: starting it was provably safe"),
            [at.clone()],
        );
    }
    if still_accepted(e, t.turn_row, mid) {
        j.fail(
            format!("run {run_id} failed ambiguous_turn_start for {mid} although the runner had persisted the acceptance: it should continue"),
            [at],
        );
    }
}

/// Whether turn row `row` (of message `mid`) is accepted in the run log:
/// it has a `turn.accepted`, and no `turn.absent_at_provider` for its
/// message after the latest. An accepted turn the provider turned out never
/// to have recorded is sent again as a new start, so it is an intent again
/// until that start's acceptance (`docs/recovery-contract.md`).
fn still_accepted(e: &Evidence, row: i64, mid: &str) -> bool {
    let Some(accepted) = e
        .payloads::<TurnAccepted>()
        .filter(|(_, a)| a.turn_row == row)
        .map(|(ev, _)| ev.seq)
        .max()
    else {
        return false;
    };
    !e.payloads::<TurnAbsentAtProvider>()
        .filter(|(_, a)| a.message_id == mid)
        .any(|(ev, _)| ev.seq > accepted)
}

/// Whether an approval request in the run log was never answered.
fn approval_pending(e: &Evidence) -> bool {
    e.payloads::<ProviderRequest>().any(|(_, r)| {
        r.status != RequestStatus::Answered
            && !e.payloads::<ProviderRequest>().any(|(_, o)| {
                o.request_id == r.request_id
                    && o.turn_row == r.turn_row
                    && o.status == RequestStatus::Answered
            })
    })
}

/// A completed run answered every consumed message with a completed
/// provider turn (its own or its continuation's).
fn check_completed_run(j: &mut Judgement, run: &RunView, recorded: &ProviderTurns) {
    if run.status != "completed" {
        return;
    }
    let run_id = &run.run_id;
    for t in run.turns.iter().filter(|t| t.kind == "primary") {
        let mid = t.message_id.as_str();
        let done = recorded
            .values()
            .any(|(status, by, _)| by == mid && status.as_deref() == Some("completed"));
        if !done {
            j.fail(
                format!("run {run_id} completed but the provider never completed a turn for {mid}"),
                [format!("task.runs.{run_id}")],
            );
        }
    }
}

/// Whether the provider recorded turn `id` as completed.
fn completed_at_provider(recorded: &ProviderTurns, id: &str) -> bool {
    recorded
        .get(id)
        .is_some_and(|(s, _, _)| s.as_deref() == Some("completed"))
}

/// The provider turn an adoption at run-log `seq` of turn `row` stands for:
/// the row's latest acceptance before it (a message the provider never
/// recorded is sent again and accepted anew); for a row never accepted (the
/// runner was cut between sending the turn and recording its acceptance, and
/// found it by its client id), the provider's turn with the row's client id.
fn adopted_turn(e: &Evidence, seq: i64, row: i64) -> Option<String> {
    let accepted = e
        .payloads::<TurnAccepted>()
        .filter(|(ev, a)| ev.seq < seq && a.turn_row == row)
        .last()
        .map(|(_, a)| a.provider_turn_id.as_str());
    if let Some(t) = accepted {
        return Some(t.to_owned());
    }
    let view = e
        .runs()
        .iter()
        .flat_map(|r| &r.turns)
        .find(|t| t.turn_row == row)?;
    let client = crate::evidence::controller_id(&view.client_id);
    e.provider_turns
        .iter()
        .rev()
        .find(|t| t.client_id.as_deref() == Some(client.as_str()))
        .map(|t| t.turn.clone())
}

/// The runner adopts only a turn the provider completed, and continues only
/// one it did not complete (where the profile's provider proves completion).
fn check_adopted_and_continued(j: &mut Judgement, e: &Evidence, recorded: &ProviderTurns) {
    for ev in &e.events {
        let seq = ev.seq;
        if let Data::TurnFinished(f) = &ev.data
            && f.adopted == Some(true)
        {
            let turn = adopted_turn(e, seq, f.turn_row);
            if !turn
                .as_deref()
                .is_some_and(|t| completed_at_provider(recorded, t))
            {
                j.fail(
                    format!("the runner adopted turn {turn:?} as completed, but the provider did not complete it (events#{seq})"),
                    [format!("events#{seq}")],
                );
            }
        }
        if let Data::TurnFailed(f) = &ev.data
            && f.cause.as_ref().and_then(|c| c.as_ref()?.code.as_deref())
                == Some("provider_turn_lost_on_restore")
            && let Some(t) = f.provider_turn_id.as_deref()
            && completed_at_provider(recorded, t)
            && e.profile().is_none_or(contract::proves_completion)
        {
            j.fail(
                format!("turn {t} was continued although the provider had completed it: it should be adopted (events#{seq})"),
                [format!("events#{seq}")],
            );
        }
    }
}

/// Write-ahead for tools the runner executes (ACP client tools, native
/// tools): a call's outcome, or its uncertainty, is durable before the
/// runner moves on to another call or asks the model again.
fn check_tool_write_ahead(j: &mut Judgement, e: &Evidence) {
    let mut open: Option<(String, i64)> = None;
    for ev in &e.events {
        let seq = ev.seq;
        match (&ev.data, ev.kind()) {
            (Data::ToolExecuting(_) | Data::ModelOutput(_), _) => {
                if let Some((k, at)) = open.take() {
                    j.fail(
                        format!("the runner went on (events#{seq}) before persisting the outcome of tool call {k} (executing since events#{at})"),
                        [format!("events#{at}"), format!("events#{seq}")],
                    );
                }
                if let Data::ToolExecuting(x) = &ev.data {
                    open = Some((x.key.clone(), seq));
                }
            }
            (Data::ToolOutcome(o), _) if open.as_ref().is_some_and(|(k, _)| *k == o.key) => {
                open = None
            }
            // A settled run goes on no further: a Retry's run starts afresh.
            (_, Kind::ToolOutcomeUncertain | Kind::RunSettled) => open = None,
            _ => {}
        }
    }
}

/// The write-ahead rule, from both sides: every turn start the provider
/// received (its journal) was preceded by a durable record in the runner's
/// run log that allows it — a `turn.intent`, or a `turn.absent_at_provider`
/// when an accepted turn the provider never recorded is sent again. More
/// starts than records for a message means a turn was sent without a
/// durable intent (e.g. after the intent's write failed).
fn unrecorded_turn_starts(e: &Evidence) -> Vec<(String, usize, usize)> {
    let mut starts: BTreeMap<String, usize> = BTreeMap::new();
    for s in e.turn_starts() {
        if let Some(id) = s.client_id {
            *starts.entry(id).or_default() += 1;
        }
    }
    let mut records: BTreeMap<String, usize> = BTreeMap::new();
    for (_, t) in e.payloads::<TurnIntent>() {
        *records
            .entry(crate::evidence::controller_id(&t.client_id))
            .or_default() += 1;
    }
    for (_, a) in e.payloads::<TurnAbsentAtProvider>() {
        *records.entry(a.message_id.clone()).or_default() += 1;
    }
    starts
        .into_iter()
        .filter_map(|(id, n)| {
            let r = records.get(&id).copied().unwrap_or(0);
            (n > r).then_some((id, n, r))
        })
        .collect()
}

/// The model API's own count of requests for a native turn against the run
/// log's durable model outputs for it: every durable output answered a
/// request (outputs ≤ requests), and a request is asked again only where
/// an answer was lost, which takes a fault or a provider the runner
/// recorded lost (requests ≤ outputs + events applied + losses).
fn check_model_requests(j: &mut Judgement, e: &Evidence) {
    let runs = e.runs();
    for t in &e.provider_turns {
        let Some(requests) = t.model_requests else {
            continue;
        };
        let rows: HashSet<i64> = runs
            .iter()
            .filter(|r| r.conversation_id.as_deref() == Some(t.thread.as_str()))
            .flat_map(|r| &r.turns)
            .filter(|v| t.client_id.as_deref() == Some(v.message_id.as_str()))
            .map(|v| v.turn_row)
            .collect();
        let outputs = e
            .payloads::<ModelOutput>()
            .filter(|(_, out)| out.turn_row.is_some_and(|r| rows.contains(&r)))
            .count() as u64;
        // An answer is lost to a fault the harness applied, or to a
        // provider the runner lost by itself (an idle timeout it recorded).
        let lost_max = e.events_applied as u64
            + e.events_of(Kind::ProviderUnresponsive).count() as u64
            + e.events_of(Kind::ProviderExited).count() as u64;
        if outputs > requests || requests > outputs + lost_max {
            j.fail(
                format!(
                    "the model API answered {requests} request(s) for turn {} of {}, the run log holds {outputs} durable output(s), and {lost_max} fault(s) or recorded provider loss(es) could have lost an answer",
                    t.turn, t.thread
                ),
                [format!("provider-turn:{}", t.turn), "events".to_owned()],
            );
        }
    }
}
