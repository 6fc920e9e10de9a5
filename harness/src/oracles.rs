//! The oracles: each reads a cell's evidence and gives a named verdict.
//!
//! A verdict is pass, fail or unknown (fail > unknown > pass); a failure says
//! what was violated and points into the evidence (`journal:12`, `events#7`,
//! `ledger:3`). Oracles judge the runner against the provider's own record
//! (journal), what really ran (ledger) and the contract tables in `contract`,
//! never against the runner's claims alone. Every oracle has a test that shows
//! it failing on deliberately broken evidence.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use crate::contract;
use crate::evidence::{Evidence, Source};
use crate::model::{OracleResult, Verdict};
use crate::runner_client::CauseView;

/// The oracles, in report order.
pub const ORACLES: &[&str] = &[
    "no-replay.turn",
    "no-replay.effect",
    "cause.structured",
    "contract",
    "retry.works",
    "no-loss",
    "liveness",
    "secrecy",
    "hygiene",
    "vacuity",
];

/// Judges a cell: every oracle, in [`ORACLES`] order.
pub fn judge(e: &Evidence) -> Vec<OracleResult> {
    vec![
        no_replay_turn(e),
        no_replay_effect(e),
        cause_structured(e),
        contract_oracle(e),
        retry_works(e),
        no_loss(e),
        liveness(e),
        secrecy(e),
        hygiene(e),
        vacuity(e),
    ]
}

/// The worst verdict of a list (`pass` when empty).
pub fn worst(results: &[OracleResult]) -> Verdict {
    results
        .iter()
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Pass)
}

/// Collects violations; no violation is a pass.
struct Judgement {
    oracle: &'static str,
    problems: Vec<String>,
    evidence: Vec<String>,
    unknown: Option<String>,
}

impl Judgement {
    fn new(oracle: &'static str) -> Judgement {
        Judgement {
            oracle,
            problems: Vec::new(),
            evidence: Vec::new(),
            unknown: None,
        }
    }

    /// The oracle needs `sources`: one that cannot be judged from makes it
    /// `unknown` (unless it finds a violation in what it could read).
    fn needs(mut self, e: &Evidence, sources: &[Source]) -> Judgement {
        let gaps: Vec<String> = sources.iter().filter_map(|s| e.gap(*s)).collect();
        if !gaps.is_empty() {
            self.unknown = Some(gaps.join("; "));
        }
        self
    }

    fn fail(&mut self, problem: String, evidence: impl IntoIterator<Item = String>) {
        self.problems.push(problem);
        self.evidence.extend(evidence);
    }

    fn done(self) -> OracleResult {
        let (verdict, message) = if !self.problems.is_empty() {
            (Verdict::Fail, self.problems.join("; "))
        } else if let Some(u) = self.unknown {
            (Verdict::Unknown, u)
        } else {
            (Verdict::Pass, String::new())
        };
        OracleResult {
            oracle: self.oracle.to_owned(),
            verdict,
            message,
            evidence: self.evidence,
        }
    }
}

const CONTINUATION_SUFFIX: &str = "#continuation";
const CONTINUE_MARKER: &str = "[turncut:continue]";

/// A message id starts at most one primary turn; a lost turn gets at most one
/// continuation; a continuation never re-sends the message; every turn carries
/// a harness-issued message id.
pub fn no_replay_turn(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("no-replay.turn").needs(e, &[Source::Journal, Source::ProviderStore]);
    let issued: HashSet<String> = e.issued_ids().into_iter().collect();
    let texts: BTreeMap<&str, &str> = e
        .exchanges
        .iter()
        .filter(|x| !x.text.is_empty())
        .map(|x| (x.message_id.as_str(), x.text.as_str()))
        .collect();
    for start in e.turn_starts() {
        let line = start.line;
        let Some(id) = start.client_id.as_deref() else {
            j.fail(
                format!("a turn start carries no client message id (journal:{line})"),
                [format!("journal:{line}")],
            );
            continue;
        };
        if let Some(base) = id.strip_suffix(CONTINUATION_SUFFIX) {
            if !issued.contains(base) {
                j.fail(
                    format!(
                        "continuation {id:?} continues no harness-issued message (journal:{line})"
                    ),
                    [format!("journal:{line}")],
                );
            }
            let text = &start.text;
            let resends = texts.get(base).is_some_and(|t| text.contains(t));
            if resends || !text.starts_with(CONTINUE_MARKER) {
                j.fail(
                    format!("the continuation of {base} re-sends the message instead of continuing (journal:{line})"),
                    [format!("journal:{line}")],
                );
            }
        } else {
            if !issued.contains(id) {
                j.fail(
                    format!("a turn start with message id {id:?}, which the harness never issued (journal:{line})"),
                    [format!("journal:{line}")],
                );
            }
        }
    }
    // The fence: a message the runner refused (409, so definitely not
    // applied) never reaches a provider, not even as a delivery.
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.status == 409 && x.kind != "retry")
    {
        let delivered = e
            .turn_starts()
            .into_iter()
            .find(|t| t.client_id.as_deref() == Some(x.message_id.as_str()));
        if let Some(t) = delivered {
            j.fail(
                format!(
                    "{} {} was refused ({}) but reached the provider (journal:{})",
                    x.kind, x.message_id, x.body, t.line
                ),
                [
                    format!("exchange:{}", x.message_id),
                    format!("journal:{}", t.line),
                ],
            );
        }
    }
    // A turn starts when the provider records it: a delivery it never
    // recorded (it died first) was not a turn, and re-sending it is the
    // contract's "start the turn once".
    let mut started: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut continued: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for t in &e.provider_turns {
        if t.continuation {
            continued
                .entry(t.authorized_by.as_str())
                .or_default()
                .push(&t.turn);
        } else if let Some(c) = &t.client_id {
            started.entry(c.as_str()).or_default().push(&t.turn);
        }
    }
    for (id, turns) in &started {
        if turns.len() > 1 {
            j.fail(
                format!(
                    "message {id} started {} primary turns (provider turns {turns:?})",
                    turns.len()
                ),
                turns.iter().map(|t| format!("provider-turn:{t}")),
            );
        }
    }
    for (id, turns) in &continued {
        if turns.len() > 1 {
            j.fail(
                format!(
                    "the lost turn of {id} got {} continuations (provider turns {turns:?})",
                    turns.len()
                ),
                turns.iter().map(|t| format!("provider-turn:{t}")),
            );
        }
    }
    j.done()
}

/// An effect key runs at most once per authorizing message.
pub fn no_replay_effect(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("no-replay.effect").needs(e, &[Source::Ledger]);
    let mut seen: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, entry) in e.ledger.iter().enumerate() {
        seen.entry((entry.key.clone(), entry.by.clone()))
            .or_default()
            .push(i + 1);
    }
    for ((key, by), lines) in seen {
        if lines.len() > 1 {
            j.fail(
                format!(
                    "effect {key} ran {} times for message {by} (ledger lines {lines:?})",
                    lines.len()
                ),
                lines.iter().map(|l| format!("ledger:{l}")),
            );
        }
    }
    j.done()
}

/// A typed cause as the JSON `check_cause` reads (the run log's causes are
/// kind-specific data, so both go through one check).
fn cause_value(c: &Option<CauseView>) -> Option<Value> {
    c.as_ref()
        .map(|c| serde_json::to_value(c).expect("a cause serializes"))
}

fn check_cause(j: &mut Judgement, cause: Option<&Value>, what: &str, at: String) {
    let Some(cause) = cause.filter(|c| !c.is_null()) else {
        j.fail(format!("{what} has no cause"), [at]);
        return;
    };
    let code = cause.get("code").and_then(Value::as_str);
    let recoverable = cause.get("recoverable").and_then(Value::as_bool);
    let message = cause
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match code.and_then(|c| contract::recoverable(c).map(|r| (c, r))) {
        None => j.fail(
            format!("{what} has cause {code:?}, outside the closed set"),
            [at],
        ),
        Some((c, expected)) => {
            if recoverable != Some(expected) {
                j.fail(
                    format!(
                        "{what}: cause {c} must have recoverable: {expected}, not {recoverable:?}"
                    ),
                    [at],
                );
            } else if message.trim().is_empty() {
                j.fail(
                    format!("{what}: cause {c} has no message for a person"),
                    [at],
                );
            }
        }
    }
}

/// Every failed or refused run has a cause from the closed set with the right
/// `recoverable` flag; every refusal names a listed reason.
pub fn cause_structured(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("cause.structured").needs(e, &[Source::Task, Source::RunLog]);
    let task = e.task_view().ok();
    if let Some(t) = task
        .as_ref()
        .filter(|t| matches!(t.state.as_str(), "failed" | "needs_human"))
    {
        check_cause(
            &mut j,
            cause_value(&t.cause).as_ref(),
            "the failed task",
            "task".to_owned(),
        );
    }
    for run in e.runs().iter().filter(|r| r.status == "failed") {
        let id = &run.run_id;
        check_cause(
            &mut j,
            cause_value(&run.cause).as_ref(),
            &format!("failed run {id}"),
            format!("task.runs.{id}"),
        );
    }
    for ev in &e.events {
        let seq = ev["seq"].as_i64().unwrap_or(0);
        let kind = ev["kind"].as_str().unwrap_or_default();
        if kind == "turn.failed" && ev.pointer("/data/cause").is_some() {
            check_cause(
                &mut j,
                ev.pointer("/data/cause"),
                "a turn.failed event",
                format!("events#{seq}"),
            );
        }
        if kind == "run.settled" && ev.pointer("/data/state") != Some(&Value::from("completed")) {
            check_cause(
                &mut j,
                ev.pointer("/data/cause"),
                "a failed run.settled event",
                format!("events#{seq}"),
            );
        }
    }
    for x in &e.exchanges {
        if x.status == 409 {
            let reason = x
                .body
                .get("reason")
                .or_else(|| x.body.get("block_reason"))
                .and_then(Value::as_str);
            let listed = match x.kind.as_str() {
                "retry" => reason.is_some_and(|r| contract::RETRY_BLOCKS.contains(&r)),
                _ => reason.is_some_and(|r| contract::REFUSALS.contains(&r)),
            };
            if !listed {
                j.fail(
                    format!(
                        "the {} of {} was refused without a listed reason: {}",
                        x.kind, x.message_id, x.body
                    ),
                    [format!("exchange:{}", x.message_id)],
                );
            }
        }
    }
    j.done()
}

/// The provider's durable turns by id: (final status, authorizing message, continuation).
fn provider_turns(e: &Evidence) -> BTreeMap<String, (Option<String>, String, bool)> {
    e.provider_turns
        .iter()
        .map(|t| {
            (
                t.turn.clone(),
                (
                    Some(t.status.clone()),
                    t.authorized_by.clone(),
                    t.continuation,
                ),
            )
        })
        .collect()
}

/// Whether an approval was answered `accept` for a command item (`item_id`)
/// that never completed in the run log: the command may have run.
fn approved_command_unfinished(e: &Evidence) -> bool {
    let completed: HashSet<(Option<i64>, &str)> = e
        .events_of("item.completed")
        .filter_map(|ev| {
            let row = ev.pointer("/data/turn_row").and_then(Value::as_i64);
            Some((row, ev.pointer("/data/item/id")?.as_str()?))
        })
        .collect();
    e.events_of("provider_request").any(|ev| {
        let accepted = ev.pointer("/data/status") == Some(&Value::from("answered"))
            && ev
                .pointer("/data/decision")
                .and_then(Value::as_str)
                .is_some_and(|d| d.starts_with("accept"));
        let row = ev.pointer("/data/turn_row").and_then(Value::as_i64);
        let item = ev.pointer("/data/item_id").and_then(Value::as_str);
        accepted && item.is_some_and(|i| !completed.contains(&(row, i)))
    })
}

/// The outcome is allowed by the contract for what both sides had recorded.
pub fn contract_oracle(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("contract").needs(
        e,
        &[
            Source::Task,
            Source::RunLog,
            Source::Journal,
            Source::ProviderStore,
        ],
    );
    let recorded = provider_turns(e);
    let recorded_client: HashSet<String> = e
        .provider_turns
        .iter()
        .filter_map(|t| t.client_id.clone())
        .collect();
    let accepted_rows: HashSet<i64> = e
        .events_of("turn.accepted")
        .filter_map(|ev| ev.pointer("/data/turn_row").and_then(Value::as_i64))
        .collect();
    if let (Some(expected), None) = (&e.expected_state, &e.fault)
        && e.state() != *expected
    {
        j.fail(
            format!(
                "a clean run ended {} (cause {:?}), the scenario expects {expected}",
                e.state(),
                e.cause_code()
            ),
            ["task".to_owned()],
        );
    }
    let whole = e.gap(Source::RunLog).is_none() && e.gap(Source::Journal).is_none();
    for (id, starts, records) in unrecorded_turn_starts(e).into_iter().filter(|_| whole) {
        j.fail(
            format!("the provider received {starts} turn start(s) for {id} but the run log holds {records} durable intent(s) for it: a turn was sent without its write-ahead record"),
            ["journal".to_owned(), "events".to_owned()],
        );
    }
    for run in &e.runs() {
        let run_id = &run.run_id;
        let turns = &run.turns;
        let last_primary = turns.iter().rev().find(|t| t.kind == "primary");
        let has_continuation = turns.iter().any(|t| t.kind == "continuation");
        if let Some(code) = run.cause.as_ref().map(|c| c.code.as_str()) {
            let at = format!("task.runs.{run_id}");
            match code {
                "ambiguous_turn_start" => {
                    let Some(t) = last_primary else {
                        j.fail(
                            format!("run {run_id} failed ambiguous_turn_start without a turn"),
                            [at],
                        );
                        continue;
                    };
                    let mid = t.message_id.as_str();
                    let row = t.turn_row;
                    if !recorded_client.contains(mid) {
                        j.fail(
                            format!("run {run_id} failed closed ambiguous_turn_start but the provider never recorded a turn for {mid}: starting it was provably safe"),
                            [at.clone()],
                        );
                    }
                    if accepted_rows.contains(&row) {
                        j.fail(
                            format!("run {run_id} failed ambiguous_turn_start for {mid} although the runner had persisted the acceptance: it should continue"),
                            [at],
                        );
                    }
                }
                "active_turn_recovery_closed" => {
                    let pending = e.events_of("provider_request").any(|ev| {
                        ev.pointer("/data/status") != Some(&Value::from("answered"))
                            && !e.events_of("provider_request").any(|o| {
                                o.pointer("/data/request_id") == ev.pointer("/data/request_id")
                                    && o.pointer("/data/turn_row") == ev.pointer("/data/turn_row")
                                    && o.pointer("/data/status") == Some(&Value::from("answered"))
                            })
                    });
                    if !pending && !approved_command_unfinished(e) {
                        j.fail(
                            format!("run {run_id} closed with active_turn_recovery_closed but no approval was pending and no approved command was left unfinished"),
                            [at],
                        );
                    }
                }
                "continuation_exhausted" if !has_continuation => {
                    j.fail(
                        format!(
                            "run {run_id} failed continuation_exhausted without a continuation"
                        ),
                        [at],
                    );
                }
                "storage_failed" if storage_fault_applied(e) => {}
                other if e.fault.is_some() && !contract::FAIL_CLOSED.contains(&other) => {
                    j.fail(
                        format!(
                            "run {run_id} failed with {other}, which no cut-and-restart justifies"
                        ),
                        [at],
                    );
                }
                _ => {}
            }
        }
        // A completed run answered every consumed message with a completed
        // provider turn (its own or its continuation's).
        if run.status == "completed" {
            for t in turns.iter().filter(|t| t.kind == "primary") {
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
    }
    for ev in &e.events {
        let seq = ev["seq"].as_i64().unwrap_or(0);
        if ev["kind"] == "turn.finished" && ev.pointer("/data/adopted") == Some(&Value::Bool(true))
        {
            // Adoption is only right for a turn the provider completed: the
            // row's latest acceptance before it (a message the provider never
            // recorded is sent again and accepted anew).
            let row = ev.pointer("/data/turn_row").and_then(Value::as_i64);
            let turn = e
                .events_of("turn.accepted")
                .filter(|a| a["seq"].as_i64().unwrap_or(0) < seq)
                .filter(|a| a.pointer("/data/turn_row").and_then(Value::as_i64) == row)
                .last()
                .and_then(|a| a.pointer("/data/provider_turn_id").and_then(Value::as_str));
            let completed = turn.is_some_and(|t| {
                recorded
                    .get(t)
                    .is_some_and(|(s, _, _)| s.as_deref() == Some("completed"))
            });
            if !completed {
                j.fail(
                    format!("the runner adopted turn {turn:?} as completed, but the provider did not complete it (events#{seq})"),
                    [format!("events#{seq}")],
                );
            }
        }
        if ev["kind"] == "turn.failed"
            && ev.pointer("/data/cause/code") == Some(&Value::from("provider_turn_lost_on_restore"))
            && let Some(t) = ev.pointer("/data/provider_turn_id").and_then(Value::as_str)
            && recorded
                .get(t)
                .is_some_and(|(s, _, _)| s.as_deref() == Some("completed"))
            && e.profile().is_none_or(contract::proves_completion)
        {
            j.fail(
                format!("turn {t} was continued although the provider had completed it: it should be adopted (events#{seq})"),
                [format!("events#{seq}")],
            );
        }
    }
    // Write-ahead for tools the runner executes (ACP client tools, native
    // tools): a call's outcome, or its uncertainty, is durable before the
    // runner moves on to another call or asks the model again.
    let mut open: Option<(String, i64)> = None;
    for ev in &e.events {
        let seq = ev["seq"].as_i64().unwrap_or(0);
        let key = ev
            .pointer("/data/key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match ev["kind"].as_str().unwrap_or_default() {
            "tool.executing" | "model.output" => {
                if let Some((k, at)) = open.take() {
                    j.fail(
                        format!("the runner went on (events#{seq}) before persisting the outcome of tool call {k} (executing since events#{at})"),
                        [format!("events#{at}"), format!("events#{seq}")],
                    );
                }
                if ev["kind"] == "tool.executing" {
                    open = Some((key.to_owned(), seq));
                }
            }
            "tool.outcome" if open.as_ref().is_some_and(|(k, _)| k == key) => open = None,
            // A settled run goes on no further: a Retry's run starts afresh.
            "tool_outcome_uncertain" | "run.settled" => open = None,
            _ => {}
        }
    }
    j.done()
}

/// A failed-closed task's Retry is admitted with a run (or refused with a
/// listed reason), and that run completes in a fresh conversation.
pub fn retry_works(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("retry.works").needs(e, &[Source::Task, Source::RunLog, Source::Processes]);
    let runs = e.runs();
    for x in e.exchanges.iter().filter(|x| x.kind == "retry") {
        match x.status {
            201 => {
                let Some(run_id) = x.body["run_id"].as_str() else {
                    j.fail(
                        format!("Retry {} answered 201 without a run", x.message_id),
                        [format!("exchange:{}", x.message_id)],
                    );
                    continue;
                };
                let Some(pos) = runs.iter().position(|r| r.run_id == run_id) else {
                    j.fail(
                        format!("Retry run {run_id} is not among the task's runs"),
                        ["task".to_owned()],
                    );
                    continue;
                };
                let run = &runs[pos];
                let faulted = faulted_after_retry(e, &x.message_id);
                let closed_with_cause = run.cause.as_ref().is_some_and(|c| {
                    c.recoverable
                        || contract::FAIL_CLOSED.contains(&c.code.as_str())
                        || (c.code == "storage_failed" && storage_fault_applied(e))
                });
                // A Retry run that a later event cut may itself fail, but
                // only the way the contract lets any run fail after a cut.
                if run.status != "completed" && !(faulted && closed_with_cause) {
                    j.fail(
                        format!(
                            "Retry run {run_id} ended {} ({:?})",
                            run.status,
                            run.cause.as_ref().map(|c| &c.code)
                        ),
                        [format!("task.runs.{run_id}")],
                    );
                }
                let conv = &run.conversation_id;
                // A Retry run that a later event cut before it opened a
                // conversation has none; a reused one is wrong either way.
                let missing = conv.is_none() && !(faulted && run.status != "completed");
                let reused =
                    conv.is_some() && runs[..pos].iter().any(|r| &r.conversation_id == conv);
                if missing || reused {
                    j.fail(
                        format!("Retry run {run_id} did not open a fresh conversation ({conv:?})"),
                        [format!("task.runs.{run_id}")],
                    );
                }
                if !e.events_of("stopped_conversation_verified").any(|_| true) {
                    j.fail("Retry was admitted without a recorded stop proof (stopped_conversation_verified)".to_owned(), ["events".to_owned()]);
                }
                if let Some(problem) = retry_conversation_reused(e, &x.message_id) {
                    j.fail(problem, [format!("exchange:{}", x.message_id)]);
                }
                for p in &e.alive_at_retry {
                    j.fail(
                        format!("Retry was admitted while the earlier provider {p} was still running (process table)"),
                        ["processes".to_owned()],
                    );
                }
            }
            409 => {
                let reason = x.body["block_reason"].as_str();
                if !reason.is_some_and(|r| contract::RETRY_BLOCKS.contains(&r)) {
                    j.fail(
                        format!("Retry refused without a listed block reason: {}", x.body),
                        [format!("exchange:{}", x.message_id)],
                    );
                }
            }
            // No answer before the deadline (the runner was cut mid-request,
            // or the harness gave up): the harness cannot tell.
            0 => {
                j.unknown = Some(format!("Retry {} got no answer: {}", x.message_id, x.body));
            }
            other => j.fail(
                format!("Retry answered {other}: {}", x.body),
                [format!("exchange:{}", x.message_id)],
            ),
        }
    }
    j.done()
}

/// The provider's side of "a Retry opens a fresh conversation": the Retry's
/// first recorded turn is the first turn of its conversation (a fake's store
/// keeps a conversation's turns in the order it recorded them).
fn retry_conversation_reused(e: &Evidence, retry: &str) -> Option<String> {
    let turns = &e.provider_turns;
    let first = turns
        .iter()
        .position(|t| t.client_id.as_deref() == Some(retry))?;
    let thread = &turns[first].thread;
    // The Retry's own earlier turns (one lost and sent again, or continued,
    // after a later event cut the Retry run) are no reuse.
    let own = |t: &crate::evidence::ProviderTurn| {
        t.authorized_by == retry || t.authorized_by == format!("{retry}{CONTINUATION_SUFFIX}")
    };
    let old = turns[..first]
        .iter()
        .find(|t| &t.thread == thread && !own(t))?;
    Some(format!(
        "Retry {retry} ran in conversation {thread}, which already held turn {} of {} (provider store)",
        old.turn, old.authorized_by
    ))
}

/// Nothing durable vanishes: the run log is gapless and keeps everything read
/// before the fault; every accepted follow-up is consumed exactly once or is
/// still queued.
pub fn no_loss(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("no-loss").needs(e, &[Source::Task, Source::RunLog, Source::ProviderStore]);
    for (i, ev) in e.events.iter().enumerate() {
        let seq = ev["seq"].as_i64().unwrap_or(-1);
        if seq != i as i64 + 1 {
            j.fail(
                format!("the run log has a gap: position {} holds seq {seq}", i + 1),
                [format!("events#{seq}")],
            );
            break;
        }
    }
    // A task the runner admitted and now answers 404 for is gone: that is an
    // answer, not missing evidence.
    let admitted = e
        .exchanges
        .iter()
        .any(|x| x.kind == "submit" && x.status == 201);
    if admitted
        && let Some(op) = e
            .ops
            .iter()
            .find(|o| o.kind == "read.task" && o.status == Some(404))
    {
        j.fail(
            format!(
                "the runner admitted the task and then answered 404 for it ({} ms): the task is lost",
                op.at_ms
            ),
            ["ops:read.task".to_owned()],
        );
    }
    // An unreadable run log proves nothing gone: the check is `unknown`.
    let run_log = e.gap(Source::RunLog).is_none();
    if let Some(before) = e.events_before_fault.as_ref().filter(|_| run_log) {
        for old in before {
            let seq = old["seq"].as_i64().unwrap_or(-1);
            let now = e.events.iter().find(|ev| ev["seq"] == seq);
            // The whole event: a runner that lost its state and wrote the
            // same kind again has a new time (and run) on it.
            if now != Some(old) {
                j.fail(
                    format!(
                        "run-log event {seq} ({}) read before the fault is gone or changed",
                        old["kind"]
                    ),
                    [format!("events#{seq}")],
                );
            }
        }
    }
    // The queue and the provider's turns decide a follow-up's fate; without
    // either the follow-up checks are `unknown` (from `needs`).
    if e.gap(Source::Task).is_some() || e.gap(Source::ProviderStore).is_some() {
        return j.done();
    }
    let queued: Vec<String> = e.task_view().map(|t| t.queued_messages).unwrap_or_default();
    // A follow-up with no answer (`info`) may or may not exist; if it
    // exists, it is held to the same rule as an accepted one.
    for x in e
        .exchanges
        .iter()
        .filter(|x| x.kind == "follow_up" && matches!(x.status, 202 | 0))
    {
        let maybe = x.status == 0;
        // Consumed means a turn the provider recorded for it.
        let starts = e
            .provider_turns
            .iter()
            .filter(|t| !t.continuation && t.client_id.as_deref() == Some(x.message_id.as_str()))
            .count();
        let still_queued = queued.contains(&x.message_id);
        // A follow-up may wait in the queue of a task that failed closed (a
        // Retry consumes it); in a completed task it is stranded for good.
        let accepted = if maybe {
            "sent (no answer came)"
        } else {
            "accepted"
        };
        if starts == 0 && still_queued && e.state() == "completed" {
            j.fail(
                format!(
                    "follow-up {} was {accepted} and queued but the task completed without consuming it",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
        if starts == 0 && !still_queued && !maybe {
            j.fail(
                format!(
                    "follow-up {} was accepted but never consumed and is no longer queued",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
        if starts > 1 {
            j.fail(
                format!(
                    "follow-up {} was {accepted} and consumed {starts} times",
                    x.message_id
                ),
                [format!("exchange:{}", x.message_id)],
            );
        }
    }
    j.done()
}

/// No task is still running after the cell's deadline.
pub fn liveness(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("liveness").needs(e, &[Source::Task]);
    // The final state decides: a task that settled just after the harness
    // stopped waiting is slow, not stuck.
    if matches!(e.state().as_str(), "running" | "queued") {
        j.fail(
            format!("the task is still {} after the cell's deadline", e.state()),
            ["task".to_owned()],
        );
    }
    j.done()
}

/// The canary credential appears nowhere: no state file, log, event, report or
/// tool environment.
pub fn secrecy(e: &Evidence) -> OracleResult {
    let mut j =
        Judgement::new("secrecy").needs(e, &[Source::RunLog, Source::Ledger, Source::Files]);
    for f in &e.canary_found_in {
        j.fail(format!("the canary credential is in {f}"), [f.clone()]);
    }
    let events = serde_json::to_string(&e.events).unwrap_or_default();
    if !e.canary.is_empty() && events.contains(&e.canary) {
        j.fail(
            "the canary credential is in the run log".to_owned(),
            ["events".to_owned()],
        );
    }
    for (i, l) in e.ledger.iter().enumerate() {
        if l.saw_secret {
            j.fail(
                format!("tool {} saw a credential in its environment", l.key),
                [format!("ledger:{}", i + 1)],
            );
        }
    }
    j.done()
}

/// Whether a storage fault (`fail-write`, `disk-full`) was applied.
fn storage_fault_applied(e: &Evidence) -> bool {
    e.actions
        .iter()
        .any(|a| matches!(a.what.as_str(), "fault.fail-write" | "fault.disk-full"))
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
    for ev in e.events_of("turn.intent") {
        if let Some(id) = ev.pointer("/data/client_id").and_then(Value::as_str) {
            *records
                .entry(crate::evidence::controller_id(id))
                .or_default() += 1;
        }
    }
    for ev in e.events_of("turn.absent_at_provider") {
        if let Some(id) = ev.pointer("/data/message_id").and_then(Value::as_str) {
            *records.entry(id.to_owned()).or_default() += 1;
        }
    }
    starts
        .into_iter()
        .filter_map(|(id, n)| {
            let r = records.get(&id).copied().unwrap_or(0);
            (n > r).then_some((id, n, r))
        })
        .collect()
}

/// Whether a cut or event of the schedule was reached after the Retry
/// `message_id` was sent: its run may then have been cut itself.
fn faulted_after_retry(e: &Evidence, message_id: &str) -> bool {
    let Some(sent) = e
        .ops
        .iter()
        .filter(|o| o.kind == "retry" && o.message_id == message_id)
        .map(|o| o.at_ms)
        .min()
    else {
        return false;
    };
    e.actions
        .iter()
        .any(|a| matches!(a.what.as_str(), "cut.reached" | "event.reached") && a.at_ms >= sent)
}

/// No process of the cell is alive after the cell.
pub fn hygiene(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("hygiene").needs(e, &[Source::Processes]);
    for s in &e.survivors {
        j.fail(format!("{s} is still alive after the cell"), [s.clone()]);
    }
    j.done()
}

/// The cell reached its armed cut: a pass that tested nothing is a failure.
pub fn vacuity(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new("vacuity");
    let armed = e.spec.as_ref().is_some_and(|s| s.cut.is_some());
    if armed && !e.reached_cut && e.harness_error.is_some() {
        j.unknown = Some("the harness failed before the armed cut was reached".to_owned());
    } else if armed && !e.reached_cut {
        j.fail(
            "the armed cut point was never reached: the cell tested nothing".to_owned(),
            ["actions".to_owned()],
        );
    }
    j.done()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::{Exchange, ProviderTurn};
    use crate::model::{CellSpec, Cut, Fault};
    use fake_provider::journal::{Entry, EntryKind};
    use fake_provider::ledger::LedgerEntry;
    use serde_json::json;

    fn entry(kind: EntryKind, fact: Option<&str>, data: Value) -> Entry {
        Entry {
            v: 1,
            generation: "g".into(),
            seq: 0,
            ts_ms: 0,
            kind,
            fact: fact.map(str::to_owned),
            data,
        }
    }

    fn turn_start(client: &str, text: &str) -> Entry {
        entry(
            EntryKind::In,
            None,
            json!({ "id": 3, "method": "turn/start", "params": { "threadId": "th", "clientUserMessageId": client, "input": [{ "type": "text", "text": text }] } }),
        )
    }

    fn recorded(turn: &str, client: &str, by: &str, cont: bool) -> Entry {
        entry(
            EntryKind::Fact,
            Some("turn.recorded"),
            json!({ "thread": "th", "turn": turn, "client_id": client, "authorized_by": by, "continuation": cont }),
        )
    }

    fn finished(turn: &str, status: &str) -> Entry {
        entry(
            EntryKind::Fact,
            Some("turn.finished"),
            json!({ "thread": "th", "turn": turn, "status": status }),
        )
    }

    fn ledger(key: &str, by: &str) -> LedgerEntry {
        LedgerEntry {
            v: 1,
            key: key.into(),
            by: by.into(),
            conversation: None,
            turn: None,
            pid: 1,
            saw_secret: false,
        }
    }

    fn pturn(turn: &str, client: &str, by: &str, status: &str, cont: bool) -> ProviderTurn {
        ProviderTurn {
            thread: "th".into(),
            turn: turn.into(),
            client_id: Some(client.into()),
            status: status.into(),
            continuation: cont,
            authorized_by: by.into(),
        }
    }

    fn event(seq: i64, kind: &str, data: Value) -> Value {
        json!({ "v": 1, "task_id": "task-1", "seq": seq, "run_id": "run-1", "ts_ms": seq, "kind": kind, "data": data })
    }

    fn turn_view(row: i64, message: &str, kind: &str, status: &str) -> Value {
        json!({ "turn_row": row, "run_id": "run-1", "message_id": message, "kind": kind,
                "client_id": message, "provider_turn_id": null, "status": status })
    }

    fn run_view(
        run: &str,
        kind: &str,
        status: &str,
        conversation: &str,
        turns: Vec<Value>,
    ) -> Value {
        json!({ "run_id": run, "task_id": "task-1", "kind": kind, "trigger_message_id": "m1",
                "status": status, "cause": null, "conversation_id": conversation,
                "owner_epoch": 1, "created_ms": 1, "turns": turns })
    }

    /// A healthy clean cell: one message, one turn, one effect, completed.
    fn good() -> Evidence {
        Evidence {
            spec: Some(CellSpec {
                cell_id: "t001".into(),
                scenario_id: "s".into(),
                cut: Some(Cut {
                    point: "runner.turn_intent.persisted".into(),
                    n: 1,
                }),
                fault: Some(Fault::KillRunner),
                seed: 1,
                then: Vec::new(),
            }),
            fault: Some(Fault::KillRunner),
            reached_cut: true,
            exchanges: vec![Exchange {
                kind: "submit".into(),
                message_id: "m1".into(),
                text: "Create hello.txt".into(),
                status: 201,
                body: json!({ "run_id": "run-1" }),
            }],
            task: json!({
                "task_id": "task-1", "profile": "runner-codex", "workspace": "/ws",
                "state": "completed", "cause": null, "current_run": "run-1", "queued_messages": [],
                "runs": [run_view("run-1", "initial", "completed", "th",
                                  vec![turn_view(1, "m1", "primary", "completed")])]
            }),
            events: vec![
                event(1, "task.admitted", json!({})),
                event(
                    2,
                    "turn.intent",
                    json!({ "turn_row": 1, "client_id": "m1", "message_id": "m1", "kind": "primary" }),
                ),
                event(
                    3,
                    "turn.accepted",
                    json!({ "turn_row": 1, "provider_turn_id": "pt1" }),
                ),
                event(
                    4,
                    "turn.finished",
                    json!({ "turn_row": 1, "status": "completed" }),
                ),
                event(
                    5,
                    "run.settled",
                    json!({ "state": "completed", "cause": null }),
                ),
            ],
            journal: vec![
                turn_start("m1", "Create hello.txt"),
                recorded("pt1", "m1", "m1", false),
                entry(
                    EntryKind::Fact,
                    Some("effect.exited"),
                    json!({ "key": "write-hello", "by": "m1", "exit_code": 0 }),
                ),
                finished("pt1", "completed"),
            ],
            ledger: vec![ledger("write-hello", "m1")],
            provider_turns: vec![pturn("pt1", "m1", "m1", "completed", false)],
            canary: "turncut-canary-1".into(),
            ..Evidence::default()
        }
    }

    fn verdict(results: &[OracleResult], name: &str) -> (Verdict, String) {
        let r = results.iter().find(|r| r.oracle == name).unwrap();
        (r.verdict, r.message.clone())
    }

    fn assert_only_fails(e: &Evidence, name: &str, needle: &str) {
        let results = judge(e);
        let (v, m) = verdict(&results, name);
        assert_eq!(v, Verdict::Fail, "{name} must fail: {results:#?}");
        assert!(m.contains(needle), "{name}: {m}");
    }

    #[test]
    fn contract_catches_a_turn_started_without_its_durable_intent() {
        // The provider got a turn start for m2, which has no intent in the run
        // log (its intent write failed, and the runner sent it anyway).
        let mut e = good();
        e.journal.push(turn_start("m2", "more"));
        let results = judge(&e);
        let (v, m) = verdict(&results, "contract");
        assert_eq!(v, Verdict::Fail, "{results:#?}");
        assert!(m.contains("write-ahead record"), "{m}");
        // A re-send that the run log explains (the provider never recorded
        // the accepted turn) is covered.
        let mut e = good();
        e.journal.push(turn_start("m1", "Create hello.txt"));
        assert_only_fails(&e, "contract", "2 turn start(s) for m1");
        e.events.push(event(
            9,
            "turn.absent_at_provider",
            json!({ "message_id": "m1" }),
        ));
        assert_ne!(verdict(&judge(&e), "contract").0, Verdict::Fail);
    }

    #[test]
    fn a_healthy_cell_passes_every_oracle() {
        let results = judge(&good());
        assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
        assert_eq!(results.len(), ORACLES.len());
    }

    #[test]
    fn no_replay_turn_catches_a_replayed_message() {
        let mut e = good();
        e.journal.push(turn_start("m1", "Create hello.txt"));
        e.provider_turns
            .push(pturn("pt2", "m1", "m1", "completed", false));
        assert_only_fails(&e, "no-replay.turn", "started 2 primary turns");
        // A delivery the provider never recorded is not a turn: re-sending
        // it after the provider died is the contract's "start it once".
        let mut e = good();
        e.journal.push(turn_start("m1", "Create hello.txt"));
        assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
    }

    #[test]
    fn no_replay_turn_catches_a_second_continuation_and_a_resent_message() {
        let mut e = good();
        e.journal
            .push(turn_start("m1#continuation", "[turncut:continue] go on"));
        e.journal
            .push(turn_start("m1#continuation", "[turncut:continue] go on"));
        e.provider_turns
            .push(pturn("pc1", "m1#continuation", "m1", "interrupted", true));
        e.provider_turns
            .push(pturn("pc2", "m1#continuation", "m1", "completed", true));
        assert_only_fails(&e, "no-replay.turn", "2 continuations");
        let mut e = good();
        e.journal
            .push(turn_start("m1#continuation", "Create hello.txt"));
        assert_only_fails(&e, "no-replay.turn", "re-sends the message");
        let mut e = good();
        e.journal.push(turn_start("who-knows", "x"));
        assert_only_fails(&e, "no-replay.turn", "never issued");
    }

    #[test]
    fn no_replay_effect_catches_a_double_effect() {
        let mut e = good();
        e.ledger.push(ledger("write-hello", "m1"));
        assert_only_fails(&e, "no-replay.effect", "ran 2 times");
        // A Retry is a new authorization: the same key under r1 is fine.
        let mut e = good();
        e.ledger.push(ledger("write-hello", "r1"));
        assert_eq!(verdict(&judge(&e), "no-replay.effect").0, Verdict::Pass);
    }

    #[test]
    fn cause_structured_catches_null_unknown_and_mislabelled_causes() {
        let mut e = good();
        e.task["state"] = json!("failed");
        assert_only_fails(&e, "cause.structured", "has no cause");
        e.task["cause"] =
            json!({ "code": "something_went_wrong", "recoverable": false, "message": "x" });
        assert_only_fails(&e, "cause.structured", "outside the closed set");
        e.task["cause"] =
            json!({ "code": "ambiguous_turn_start", "recoverable": true, "message": "x" });
        assert_only_fails(&e, "cause.structured", "recoverable: false");
        let mut e = good();
        e.events.push(event(6, "turn.failed", json!({ "cause": { "code": "provider_turn_lost_on_restore", "recoverable": false, "message": "x" } })));
        assert_only_fails(&e, "cause.structured", "recoverable: true");
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "follow_up".into(),
            message_id: "f1".into(),
            text: "x".into(),
            status: 409,
            body: json!({ "reason": "nope" }),
        });
        assert_only_fails(&e, "cause.structured", "without a listed reason");
    }

    #[test]
    fn contract_catches_an_unjustified_fail_closed_and_a_false_adoption() {
        let mut e = good();
        e.journal.truncate(0);
        e.provider_turns.clear();
        e.task["state"] = json!("failed");
        e.task["cause"] =
            json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
        e.task["runs"][0]["status"] = json!("failed");
        e.task["runs"][0]["cause"] = e.task["cause"].clone();
        e.events.retain(|ev| ev["kind"] != "turn.accepted");
        e.ledger.clear();
        assert_only_fails(&e, "contract", "provably safe");

        let mut e = good();
        e.provider_turns = vec![pturn("pt1", "m1", "m1", "interrupted", false)];
        e.events.insert(
            3,
            event(
                4,
                "turn.finished",
                json!({ "turn_row": 1, "status": "completed", "adopted": true }),
            ),
        );
        assert_only_fails(&e, "contract", "did not complete it");

        let mut e = good();
        e.task["runs"][0]["status"] = json!("failed");
        e.task["runs"][0]["cause"] =
            json!({ "code": "continuation_exhausted", "recoverable": false, "message": "x" });
        assert_only_fails(&e, "contract", "without a continuation");
    }

    /// Found by `turncut explore`: a turn whose message the provider never
    /// recorded is sent again and accepted under a new provider turn id; a
    /// later adoption is of that turn, not of the first.
    #[test]
    fn an_adoption_is_judged_against_the_rows_latest_acceptance() {
        // good(): m1 accepted as pt1, which the provider completed.
        let mut e = good();
        e.provider_turns
            .insert(0, pturn("pt0", "m1", "m1", "interrupted", false));
        let first = event(
            0,
            "turn.accepted",
            json!({ "turn_row": 1, "provider_turn_id": "pt0" }),
        );
        let absent = event(
            0,
            "turn.absent_at_provider",
            json!({ "message_id": "m1", "provider_turn_id": "pt0" }),
        );
        e.events.splice(2..2, [first, absent]);
        for (i, ev) in e.events.iter_mut().enumerate() {
            ev["seq"] = json!(i + 1);
        }
        e.events[5]["data"]["adopted"] = json!(true);
        let (_, message) = verdict(&judge(&e), "contract");
        assert!(!message.contains("did not complete it"), "{message}");
        e.provider_turns[1].status = "interrupted".into();
        assert!(verdict(&judge(&e), "contract").1.contains("pt1"));
    }

    #[test]
    fn closing_an_active_turn_needs_a_pending_approval_or_an_approved_command_left_unfinished() {
        // The run closed after answering `accept` for command call_x.
        let closed = |item_completed: bool| {
            let mut e = good();
            e.task["state"] = json!("failed");
            e.task["runs"][0]["status"] = json!("failed");
            e.task["runs"][0]["cause"] = json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
            e.events.insert(
                3,
                event(
                    0,
                    "provider_request",
                    json!({ "turn_row": 1, "request_id": "0", "status": "answered", "decision": "accept", "item_id": "call_x" }),
                ),
            );
            if item_completed {
                e.events.insert(
                    4,
                    event(
                        0,
                        "item.completed",
                        json!({ "turn_row": 1, "item": { "type": "commandExecution", "id": "call_x" } }),
                    ),
                );
            }
            for (i, ev) in e.events.iter_mut().enumerate() {
                ev["seq"] = json!(i + 1);
            }
            e
        };
        assert_eq!(verdict(&judge(&closed(false)), "contract").0, Verdict::Pass);
        assert_only_fails(
            &closed(true),
            "contract",
            "no approved command was left unfinished",
        );
    }

    #[test]
    fn continuing_a_completed_turn_is_wrong_except_where_the_protocol_cannot_tell() {
        // The runner continued turn pt1 although the provider completed it.
        let continued = |profile: &str| {
            let mut e = good();
            e.spec.as_mut().unwrap().scenario_id = format!("everyday.{profile}.local.single");
            e.events.insert(
                3,
                event(
                    4,
                    "turn.failed",
                    json!({ "turn_row": 1, "provider_turn_id": "pt1", "cause": { "code": "provider_turn_lost_on_restore", "recoverable": true, "message": "x" } }),
                ),
            );
            for (i, ev) in e.events.iter_mut().enumerate() {
                ev["seq"] = json!(i + 1);
            }
            e
        };
        assert_only_fails(&continued("runner-codex"), "contract", "should be adopted");
        assert_only_fails(
            &continued("runner-opencode"),
            "contract",
            "should be adopted",
        );
        // ACP's session/load replay cannot show completion: continuing is the
        // documented safe side there.
        let results = judge(&continued("runner-acpx-claude"));
        assert_eq!(
            verdict(&results, "contract").0,
            Verdict::Pass,
            "{results:#?}"
        );
    }

    #[test]
    fn contract_catches_a_tool_outcome_not_persisted_before_moving_on() {
        let tool = |seq: i64, kind: &str, key: &str| {
            event(seq, kind, json!({ "turn_row": 1, "key": key }))
        };
        let mut e = good();
        e.events.truncate(3);
        e.events.extend([
            tool(4, "tool.executing", "call_a"),
            tool(5, "tool.outcome", "call_a"),
            tool(6, "tool.executing", "call_b"),
            tool(7, "tool_outcome_uncertain", "call_b"),
            tool(8, "model.output", ""),
            event(
                9,
                "turn.finished",
                json!({ "turn_row": 1, "status": "completed" }),
            ),
            event(
                10,
                "run.settled",
                json!({ "state": "completed", "cause": null }),
            ),
        ]);
        let results = judge(&e);
        assert_eq!(
            verdict(&results, "contract").0,
            Verdict::Pass,
            "{results:#?}"
        );
        // B starts before A's outcome is durable.
        e.events.remove(4);
        for (i, ev) in e.events.iter_mut().enumerate() {
            ev["seq"] = json!(i + 1);
        }
        assert_only_fails(
            &e,
            "contract",
            "before persisting the outcome of tool call call_a",
        );
    }

    #[test]
    fn evidence_reads_turn_starts_of_every_protocol() {
        let mut e = good();
        e.journal = vec![
            turn_start("m1", "Create hello.txt"),
            entry(
                EntryKind::In,
                None,
                json!({ "jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": { "sessionId": "s", "prompt": [{ "type": "text", "text": "hi" }], "_meta": { "messageId": "m2" } } }),
            ),
            entry(
                EntryKind::In,
                None,
                json!({ "method": "POST", "path": "/session/ses_1/prompt_async", "body": { "messageID": "msg_0190a1b2c3d4e5f6_m3__continuation", "parts": [{ "type": "text", "text": "[turncut:continue] go" }] } }),
            ),
        ];
        let starts: Vec<(Option<String>, String)> = e
            .turn_starts()
            .into_iter()
            .map(|s| (s.client_id, s.text))
            .collect();
        assert_eq!(
            starts,
            vec![
                (Some("m1".into()), "Create hello.txt".into()),
                (Some("m2".into()), "hi".into()),
                (
                    Some("m3#continuation".into()),
                    "[turncut:continue] go".into()
                ),
            ]
        );
        assert_eq!(crate::evidence::controller_id("msg_zz_m1"), "msg_zz_m1");
    }

    #[test]
    fn retry_works_catches_a_reused_conversation_and_a_reasonless_refusal() {
        let mut e = retried();
        e.task["runs"][1]["conversation_id"] = json!("th");
        assert_only_fails(&e, "retry.works", "fresh conversation");
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "retry".into(),
            message_id: "r1".into(),
            text: String::new(),
            status: 201,
            body: json!({}),
        });
        assert_only_fails(&e, "retry.works", "without a run");
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "retry".into(),
            message_id: "r1".into(),
            text: String::new(),
            status: 500,
            body: json!({}),
        });
        assert_only_fails(&e, "retry.works", "answered 500");
    }

    /// Follow-up `f1`, accepted (202).
    fn follow_up_f1() -> Exchange {
        Exchange {
            kind: "follow_up".into(),
            message_id: "f1".into(),
            text: "more".into(),
            status: 202,
            body: json!({}),
        }
    }

    #[test]
    fn no_loss_catches_a_gap_a_vanished_event_and_a_lost_follow_up() {
        let mut e = good();
        e.events.remove(2);
        assert_only_fails(&e, "no-loss", "gap");
        let mut e = good();
        e.events_before_fault = Some(vec![event(6, "item.completed", json!({ "text": "gone" }))]);
        assert_only_fails(&e, "no-loss", "gone or changed");
        let mut e = good();
        e.exchanges.push(follow_up_f1());
        assert_only_fails(&e, "no-loss", "never consumed");
        e.task["queued_messages"] = json!(["f1"]);
        assert_only_fails(&e, "no-loss", "completed without consuming it");
        e.task["state"] = json!("failed");
        assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
        e.task["state"] = json!("completed");
        e.task["queued_messages"] = json!([]);
        e.provider_turns
            .push(pturn("pf1", "f1", "f1", "completed", false));
        e.provider_turns
            .push(pturn("pf2", "f1", "f1", "completed", false));
        assert_only_fails(&e, "no-loss", "consumed 2 times");
    }

    #[test]
    fn no_loss_is_unknown_when_the_run_log_or_the_queue_cannot_be_read() {
        let mut e = good();
        e.events_before_fault = Some(e.events.clone());
        e.events.clear();
        e.unreadable(Source::RunLog, "GET /events: connection refused");
        assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Unknown);
        let mut e = good();
        e.exchanges.push(follow_up_f1());
        e.unreadable(Source::Task, "GET /tasks: connection refused");
        assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Unknown);
        // A runner that answers 404 for a task it admitted has lost it.
        let mut e = good();
        e.unreadable(Source::Task, "GET task answered 404");
        e.ops.push(crate::evidence::Op {
            kind: "read.task".into(),
            message_id: String::new(),
            at_ms: 90,
            result: crate::evidence::OpResult::Fail,
            status: Some(404),
            error: None,
        });
        assert_only_fails(&e, "no-loss", "answered 404");
    }

    #[test]
    fn liveness_secrecy_hygiene_and_vacuity_each_bite() {
        let mut e = good();
        e.task["state"] = json!("running");
        assert_only_fails(&e, "liveness", "still running");
        let mut e = good();
        e.canary_found_in.push("state/runner.sqlite3".into());
        assert_only_fails(&e, "secrecy", "runner.sqlite3");
        let mut e = good();
        e.ledger[0].saw_secret = true;
        assert_only_fails(&e, "secrecy", "saw a credential");
        let mut e = good();
        e.events.push(event(
            6,
            "provider.spawned",
            json!({ "env_key": "turncut-canary-1" }),
        ));
        assert_only_fails(&e, "secrecy", "run log");
        let mut e = good();
        e.survivors.push("provider pid 4242".into());
        assert_only_fails(&e, "hygiene", "4242");
        let mut e = good();
        e.reached_cut = false;
        assert_only_fails(&e, "vacuity", "never reached");
    }

    /// Breaks one source of a healthy cell; the oracles that read it must
    /// not pass, and at least one must say unknown naming the source.
    fn assert_unknown_without(source: Source, oracles: &[&str], break_it: impl Fn(&mut Evidence)) {
        let mut e = good();
        break_it(&mut e);
        let results = judge(&e);
        assert_ne!(worst(&results), Verdict::Pass, "{source:?}: {results:#?}");
        for name in oracles {
            assert_ne!(
                verdict(&results, name).0,
                Verdict::Pass,
                "{name} without {source:?}"
            );
        }
        assert!(
            results
                .iter()
                .any(|r| r.verdict == Verdict::Unknown && r.message.contains(source.as_str())),
            "{source:?}: no unknown names it: {results:#?}"
        );
    }

    #[test]
    fn an_unreadable_empty_or_truncated_source_is_never_a_pass() {
        use Source::*;
        let task_oracles = [
            "cause.structured",
            "contract",
            "retry.works",
            "no-loss",
            "liveness",
        ];
        assert_unknown_without(Task, &task_oracles, |e| {
            e.unreadable(Task, "GET task answered 404")
        });
        assert_unknown_without(Task, &task_oracles, |e| e.task = Value::Null);
        assert_unknown_without(Task, &task_oracles, |e| e.task = json!({ "error": "x" }));
        let log_oracles = [
            "cause.structured",
            "contract",
            "retry.works",
            "no-loss",
            "secrecy",
        ];
        assert_unknown_without(RunLog, &log_oracles, |e| {
            e.unreadable(RunLog, "GET events: reset")
        });
        assert_unknown_without(RunLog, &log_oracles, |e| e.events.clear());
        // Cut off the tail: the task is settled, its run.settled is gone.
        assert_unknown_without(RunLog, &log_oracles, |e| {
            e.events.pop();
        });
        let journal_oracles = ["no-replay.turn", "contract"];
        assert_unknown_without(Journal, &journal_oracles, |e| {
            e.unreadable(Journal, "bad line")
        });
        assert_unknown_without(Journal, &journal_oracles, |e| e.journal.clear());
        let ledger_oracles = ["no-replay.effect", "secrecy"];
        assert_unknown_without(Ledger, &ledger_oracles, |e| e.unreadable(Ledger, "EISDIR"));
        assert_unknown_without(Ledger, &ledger_oracles, |e| e.ledger.clear());
        let store_oracles = ["no-replay.turn", "contract", "no-loss"];
        assert_unknown_without(ProviderStore, &store_oracles, |e| {
            e.unreadable(ProviderStore, "th.json: not a whole JSON document")
        });
        assert_unknown_without(ProviderStore, &store_oracles, |e| e.provider_turns.clear());
        assert_unknown_without(Processes, &["hygiene"], |e| {
            e.unreadable(Processes, "/proc/self/stat: EACCES")
        });
        assert_unknown_without(Files, &["secrecy"], |e| {
            e.unreadable(Files, "state: EACCES")
        });
    }

    #[test]
    fn a_renamed_or_unknown_field_is_unknown_not_a_pass() {
        // The runner renames `runs`: the oracles must not judge zero runs.
        assert_unknown_without(Source::Task, &["contract", "retry.works", "no-loss"], |e| {
            let runs = e.task.as_object_mut().unwrap().remove("runs").unwrap();
            e.task["run_list"] = runs;
        });
        // A turn's `kind` becomes `type`.
        assert_unknown_without(Source::Task, &["contract"], |e| {
            let t = e.task["runs"][0]["turns"][0].as_object_mut().unwrap();
            let kind = t.remove("kind").unwrap();
            t.insert("type".into(), kind);
        });
        // A run-log event of another version, or with a renamed envelope field.
        assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
            e.events[0]["v"] = json!(2)
        });
        assert_unknown_without(Source::RunLog, &["cause.structured", "no-loss"], |e| {
            let ev = e.events[1].as_object_mut().unwrap();
            let kind = ev.remove("kind").unwrap();
            ev.insert("type".into(), kind);
        });
    }

    #[test]
    fn an_indeterminate_follow_up_may_be_absent_but_is_consumed_once_if_present() {
        let info = |e: &mut Evidence| {
            e.exchanges.push(Exchange {
                kind: "follow_up".into(),
                message_id: "f1".into(),
                text: "more".into(),
                status: 0,
                body: json!({ "error": "connection reset" }),
            });
        };
        // Absent: the cut POST never reached the runner.
        let mut e = good();
        info(&mut e);
        assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
        // Present once: it was applied, and consumed once.
        e.provider_turns
            .push(pturn("pf1", "f1", "f1", "completed", false));
        assert_eq!(verdict(&judge(&e), "no-loss").0, Verdict::Pass);
        // Present twice.
        e.provider_turns
            .push(pturn("pf2", "f1", "f1", "completed", false));
        assert_only_fails(&e, "no-loss", "consumed 2 times");
        // Present, queued, and stranded in a completed task.
        let mut e = good();
        info(&mut e);
        e.task["queued_messages"] = json!(["f1"]);
        assert_only_fails(&e, "no-loss", "completed without consuming it");
    }

    #[test]
    fn ops_record_ok_fail_and_info() {
        use crate::evidence::{Op, OpResult};
        let of = |a: anyhow::Result<(u16, ())>| Op::of("follow_up", "f1", 5, &a).result;
        assert_eq!(of(Ok((202, ()))), OpResult::Ok);
        assert_eq!(of(Ok((409, ()))), OpResult::Fail);
        assert_eq!(of(Ok((503, ()))), OpResult::Info);
        assert_eq!(of(Err(anyhow::anyhow!("connection reset"))), OpResult::Info);
    }

    #[test]
    fn a_refused_follow_up_that_reaches_the_provider_is_caught() {
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "follow_up".into(),
            message_id: "f1".into(),
            text: "more".into(),
            status: 409,
            body: json!({ "reason": "prior_owner_fence_refused" }),
        });
        assert_eq!(verdict(&judge(&e), "no-replay.turn").0, Verdict::Pass);
        e.journal.push(turn_start("f1", "more"));
        assert_only_fails(&e, "no-replay.turn", "was refused");
    }

    /// A healthy cell plus an admitted Retry whose run completed in a fresh
    /// conversation `th2` after a recorded stop proof.
    fn retried() -> Evidence {
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "retry".into(),
            message_id: "r1".into(),
            text: String::new(),
            status: 201,
            body: json!({ "run_id": "run-2" }),
        });
        e.task["runs"].as_array_mut().unwrap().push(run_view(
            "run-2",
            "retry",
            "completed",
            "th2",
            vec![],
        ));
        e.events
            .push(event(6, "stopped_conversation_verified", json!({})));
        e
    }

    /// The Retry `r1` was sent at 100 ms and a later event of the schedule
    /// was reached at 150 ms: its run may have been cut.
    fn cut_after_retry(e: &mut Evidence) {
        e.ops.push(crate::evidence::Op::of(
            "retry",
            "r1",
            100,
            &Ok::<_, anyhow::Error>((201, ())),
        ));
        e.actions.push(crate::evidence::Action {
            at_ms: 150,
            what: "event.reached".into(),
            detail: json!({ "event": 2 }),
        });
    }

    #[test]
    fn a_retry_run_cut_by_a_later_event_may_fail_only_with_a_contract_cause() {
        let mut e = retried();
        e.task["runs"][1]["status"] = json!("failed");
        e.task["runs"][1]["cause"] =
            json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
        // No event after the Retry: its run had no excuse to fail.
        assert_only_fails(&e, "retry.works", "ended failed");
        cut_after_retry(&mut e);
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
        // Cut, it still needs a cause the contract lists.
        e.task["runs"][1]["cause"] =
            json!({ "code": "made_up", "recoverable": false, "message": "x" });
        assert!(verdict(&judge(&e), "retry.works").0 == Verdict::Fail);
    }

    #[test]
    fn a_retry_run_cut_before_its_conversation_has_none_and_an_unanswered_retry_is_unknown() {
        let mut e = retried();
        e.task["runs"][1]["status"] = json!("failed");
        e.task["runs"][1]["conversation_id"] = Value::Null;
        e.task["runs"][1]["cause"] =
            json!({ "code": "storage_failed", "recoverable": false, "message": "x" });
        // Not cut: a Retry run without a conversation is wrong.
        assert_only_fails(&e, "retry.works", "fresh conversation");
        cut_after_retry(&mut e);
        e.actions.push(crate::evidence::Action {
            at_ms: 150,
            what: "fault.fail-write".into(),
            detail: json!({}),
        });
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
        let mut e = good();
        e.exchanges.push(Exchange {
            kind: "retry".into(),
            message_id: "r1".into(),
            text: String::new(),
            status: 0,
            body: json!({ "error": "io: Peer disconnected" }),
        });
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Unknown);
    }

    #[test]
    fn a_retry_turn_sent_again_in_its_own_conversation_is_no_reuse() {
        let mut e = retried();
        // The Retry's first turn was lost before its message was recorded
        // (no client id), and sent again in the Retry's own conversation.
        let mut lost = pturn("pr0", "", "r1", "interrupted", false);
        lost.client_id = None;
        lost.thread = "th2".into();
        let mut again = pturn("pr1", "r1", "r1", "completed", false);
        again.thread = "th2".into();
        e.provider_turns.push(lost);
        e.provider_turns.push(again);
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
        // A turn of another message in that conversation is reuse.
        e.provider_turns[1].authorized_by = "m1".into();
        assert_only_fails(&e, "retry.works", "already held turn pr0 of m1");
    }

    #[test]
    fn retry_works_catches_an_old_provider_alive_at_the_retry() {
        let mut e = retried();
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
        // The runner's event says stopped; the process table says otherwise.
        e.alive_at_retry
            .push("pid 4242 (fake-provider codex)".into());
        assert_only_fails(&e, "retry.works", "still running (process table)");
    }

    #[test]
    fn retry_works_catches_a_reused_conversation_in_the_provider_store() {
        // The runner claims a fresh conversation.
        let mut e = retried();
        let mut fresh = pturn("pr1", "r1", "r1", "completed", false);
        fresh.thread = "th2".into();
        e.provider_turns.push(fresh);
        assert_eq!(verdict(&judge(&e), "retry.works").0, Verdict::Pass);
        // The provider recorded the Retry's turn in the old thread.
        e.provider_turns[1].thread = "th".into();
        assert_only_fails(&e, "retry.works", "already held turn pt1");
    }

    #[test]
    fn the_path_names_each_run_and_its_recovery_in_run_log_order() {
        let mut e = good();
        assert_eq!(e.path(), "completed");
        // A continuation, then adoption of the continuation.
        e.task["runs"][0]["turns"]
            .as_array_mut()
            .unwrap()
            .push(turn_view(2, "m1", "continuation", "completed"));
        e.events.insert(
            4,
            event(
                5,
                "turn.intent",
                json!({ "message_id": "m1", "kind": "continuation" }),
            ),
        );
        e.events.insert(
            5,
            event(
                6,
                "turn.finished",
                json!({ "turn_row": 2, "adopted": true }),
            ),
        );
        assert_eq!(e.path(), "continued → adopted → completed");
        // Failed closed, then a Retry run.
        let mut e = good();
        e.task["runs"][0]["status"] = json!("failed");
        e.task["runs"][0]["cause"] =
            json!({ "code": "ambiguous_turn_start", "recoverable": false, "message": "x" });
        e.task["runs"].as_array_mut().unwrap().push(run_view(
            "run-2",
            "retry",
            "completed",
            "th2",
            vec![],
        ));
        assert_eq!(e.path(), "failed ambiguous_turn_start → retry → completed");
        e.task = json!({ "renamed": true });
        assert_eq!(e.path(), "unknown");
    }
}
