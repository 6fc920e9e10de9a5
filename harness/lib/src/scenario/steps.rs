//! A scenario's `[[steps]]`: each task's submit before its other steps,
//! follow-ups, awaits and Retries, with their default ids and the checks
//! that an id names one task's message; parsed and validated before
//! anything runs, each error at its place.

use serde::Deserialize;
use toml::Spanned;

use super::{
    Ctx, FIRST_TASK, FollowUpWhen, ReplyExpect, RetryWhen, ScenarioError, Step, check_name,
    did_you_mean,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    #[serde(default)]
    task: Option<Spanned<String>>,
    #[serde(default)]
    submit: Option<RawSubmit>,
    #[serde(default)]
    follow_up: Option<RawFollowUp>,
    #[serde(default, rename = "await")]
    await_: Option<Spanned<String>>,
    #[serde(default)]
    retry: Option<RawRetry>,
}

impl RawStep {
    /// How many of submit, follow_up, await and retry the entry sets.
    fn kinds(&self) -> usize {
        [
            self.submit.is_some(),
            self.follow_up.is_some(),
            self.await_.is_some(),
            self.retry.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubmit {
    prompt: String,
    #[serde(default)]
    message_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFollowUp {
    text: String,
    #[serde(default)]
    when: Option<Spanned<String>>,
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    expect: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    #[serde(default)]
    when: Option<Spanned<String>>,
    #[serde(default)]
    message_id: Option<String>,
}

/// The `[[steps]]`: each task's submit before its other steps, then
/// follow-ups, awaits and Retries (message ids `m1`, `f1`, `r1`, … on the
/// first task, `task-2-m1`, `task-2-f1`, … on another, unless given; an id
/// names one task's message only).
pub(super) fn parse_steps(
    ctx: &Ctx<'_>,
    raw: &Spanned<Vec<Spanned<RawStep>>>,
) -> Result<Vec<Step>, ScenarioError> {
    if raw.get_ref().is_empty() {
        return Err(ctx.err(
            raw.span(),
            "steps is empty: start with [[steps]] submit = { prompt = \"…\" }",
        ));
    }
    let mut tasks = TaskSteps::default();
    let mut steps = Vec::new();
    for step in raw.get_ref() {
        let span = step.span();
        let s = step.get_ref();
        if s.kinds() != 1 {
            return Err(ctx.err(
                span,
                "each [[steps]] entry needs exactly one of submit, follow_up, await, retry",
            ));
        }
        let task = step_task(ctx, s)?;
        let parsed = parse_step(ctx, s, span.clone(), &task, &mut tasks)?;
        if let Some(id) = parsed.message_id()
            && let Some(other) = tasks.owner.insert(id.to_owned(), task.clone())
            && other != task
        {
            return Err(ctx.err(
                span,
                format!("message id {id:?} is already {other}'s: give each task's messages ids of their own (the evidence tells tasks' messages apart by id)"),
            ));
        }
        steps.push(parsed);
    }
    Ok(steps)
}

/// What the steps so far did per task: which tasks were submitted, how many
/// follow-ups and Retries each sent (for default ids), and whose each
/// message id is.
#[derive(Default)]
struct TaskSteps {
    submitted: Vec<String>,
    follow_ups: std::collections::BTreeMap<String, usize>,
    retries: std::collections::BTreeMap<String, usize>,
    owner: std::collections::BTreeMap<String, String>,
}

/// A step's `task` (the first task when it names none).
fn step_task(ctx: &Ctx<'_>, s: &RawStep) -> Result<String, ScenarioError> {
    match &s.task {
        None => Ok(FIRST_TASK.to_owned()),
        Some(t) => {
            check_name(ctx, "task", t)?;
            Ok(t.get_ref().clone())
        }
    }
}

/// The default id of a task's message: `m1`, `f2` on the first task,
/// `task-2-f2` on another.
fn default_id(task: &str, kind: &str, n: usize) -> String {
    match task {
        FIRST_TASK => format!("{kind}{n}"),
        _ => format!("{task}-{kind}{n}"),
    }
}

/// One step on `task`, or what is wrong with it.
fn parse_step(
    ctx: &Ctx<'_>,
    s: &RawStep,
    span: std::ops::Range<usize>,
    task: &str,
    tasks: &mut TaskSteps,
) -> Result<Step, ScenarioError> {
    let task_s = task.to_owned();
    if let Some(sub) = &s.submit {
        if tasks.submitted.iter().any(|t| t == task) {
            return Err(ctx.err(span, format!(
                "{task} is submitted once; use follow_up for more messages (or task = \"task-2\" for another task)"
            )));
        }
        tasks.submitted.push(task_s.clone());
        return Ok(Step::Submit {
            task: task_s,
            prompt: sub.prompt.clone(),
            message_id: sub
                .message_id
                .clone()
                .unwrap_or_else(|| default_id(task, "m", 1)),
        });
    }
    if tasks.submitted.is_empty() {
        return Err(ctx.err(span, "the first step must submit the task"));
    }
    if !tasks.submitted.iter().any(|t| t == task) {
        return Err(ctx.err(span, format!(
            "{task} is not submitted yet: its first step must be its submit (task = {task:?} with submit = {{ prompt = \"…\" }})"
        )));
    }
    if let Some(f) = &s.follow_up {
        let n = tasks.follow_ups.entry(task_s.clone()).or_default();
        *n += 1;
        return Ok(Step::FollowUp {
            task: task_s,
            text: f.text.clone(),
            message_id: f
                .message_id
                .clone()
                .unwrap_or_else(|| default_id(task, "f", *n)),
            when: follow_up_when(ctx, f)?,
            expect: reply_expect(ctx, f)?,
        });
    }
    if let Some(a) = &s.await_ {
        return Ok(Step::Await {
            task: task_s,
            state: await_state(ctx, a)?,
        });
    }
    let r = s.retry.as_ref().expect("one kind per step");
    let n = tasks.retries.entry(task_s.clone()).or_default();
    *n += 1;
    Ok(Step::Retry {
        task: task_s,
        when: retry_when(ctx, r)?,
        message_id: r
            .message_id
            .clone()
            .unwrap_or_else(|| default_id(task, "r", *n)),
    })
}

/// An `await`: the state to wait for.
fn await_state(ctx: &Ctx<'_>, a: &Spanned<String>) -> Result<String, ScenarioError> {
    let v = a.get_ref();
    if !matches!(
        v.as_str(),
        "settled" | "completed" | "failed" | "needs_human"
    ) {
        return Err(ctx.err(
            a.span(),
            format!("await = {v:?} is not one of \"settled\", \"completed\", \"failed\", \"needs_human\""),
        ));
    }
    Ok(v.clone())
}

/// A follow-up's `when` (default `now`).
fn follow_up_when(ctx: &Ctx<'_>, f: &RawFollowUp) -> Result<FollowUpWhen, ScenarioError> {
    match f.when.as_ref().map(|w| (w.get_ref().as_str(), w.span())) {
        None | Some(("now", _)) => Ok(FollowUpWhen::Now),
        Some(("turn-active", _)) => Ok(FollowUpWhen::TurnActive),
        Some(("settled", _)) => Ok(FollowUpWhen::Settled),
        Some(("recovering", _)) => Ok(FollowUpWhen::Recovering),
        Some((other, sp)) => Err(ctx.err(
            sp,
            format!(
                "follow_up when = {other:?} is not one of \"now\", \"turn-active\", \"settled\", \"recovering\"{}",
                did_you_mean(other, ["now", "turn-active", "settled", "recovering"])
            ),
        )),
    }
}

/// A follow-up's `expect`: what the runner must answer it.
fn reply_expect(ctx: &Ctx<'_>, f: &RawFollowUp) -> Result<Option<ReplyExpect>, ScenarioError> {
    let Some(e) = &f.expect else { return Ok(None) };
    match e.get_ref().parse() {
        Ok(x) => Ok(Some(x)),
        Err(()) => Err(ctx.err(
            e.span(),
            format!(
                "follow_up expect = {:?} is not one of \"accepted\", \"refused\", \"fenced\"",
                e.get_ref()
            ),
        )),
    }
}

/// A Retry's `when` (default `failed-closed`).
fn retry_when(ctx: &Ctx<'_>, r: &RawRetry) -> Result<RetryWhen, ScenarioError> {
    match r.when.as_ref().map(|w| (w.get_ref().as_str(), w.span())) {
        None | Some(("failed-closed", _)) => Ok(RetryWhen::FailedClosed),
        Some(("always", _)) => Ok(RetryWhen::Always),
        Some((other, sp)) => Err(ctx.err(
            sp,
            format!("retry when = {other:?} is not one of \"failed-closed\", \"always\""),
        )),
    }
}
