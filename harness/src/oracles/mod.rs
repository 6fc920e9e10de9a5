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
mod tests;
