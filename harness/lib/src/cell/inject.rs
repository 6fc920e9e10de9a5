//! A controller-action event (`follow-up`, `retry`) sent while a hit is
//! held, and the message id it sends under (`injected_message_id`).

use std::time::{Duration, Instant};

use serde_json::json;

use super::Ctx;
use crate::evidence::{ActionKind, Exchange, Op, OpKind, RequestKind};
use crate::model::Fault;
use crate::runner_client::{Answer, RunnerClient};

/// The message id a controller-action event sends: `fx1` for the
/// follow-up of the first event, `rx2` for the Retry of the second, …
pub fn injected_message_id(fault: Fault, stage: usize) -> String {
    let prefix = if fault == Fault::Retry { "rx" } else { "fx" };
    format!("{prefix}{}", stage + 1)
}

/// A controller-action event (`follow-up`, `retry`): while the hit is held,
/// the controller sends the request; the hit goes on once it is answered (or
/// after a short bound, when the held process itself is what would answer
/// it). The request is recorded like any controller request, so the oracles
/// hold it to the same rules (a follow-up consumed exactly once or refused by
/// the fence; a Retry admitted only for a failed task, and then working).
/// A request a later event cut (its runner died under it) is sent again to
/// the restarted runner, as the contract asks of a controller
/// (`send_again`). `client` is the runner's client and generation.
pub(super) fn inject_action(
    ctx: &Ctx,
    client: Option<(RunnerClient, u64)>,
    held: cutpoint::HeldHit,
    fault: Fault,
    stage: usize,
) {
    let message_id = injected_message_id(fault, stage);
    // Each injected follow-up says something of its own: two messages of
    // one text would read, by text, as one message run twice
    // (`no-replay.turn` judges content under any id).
    let text = match fault {
        Fault::Retry => String::new(),
        _ => format!("Also add a CHANGELOG (follow-up {message_id})"),
    };
    let sent = Sent {
        task: ctx.first_task(),
        fault,
        message_id: &message_id,
        text: &text,
    };
    let at_ms = ctx.rec.now_ms();
    let sent_on = client.as_ref().map(|(_, generation)| *generation);
    let answer = first_answer(ctx, client.map(|(c, _)| c), held, sent);
    // No answer: the request may or may not have been applied (an `info` op).
    let mut ops = vec![Op::of(sent.kind(), &message_id, at_ms, &answer)];
    let answer = match (answer, sent_on) {
        // The connection failed: the runner died under the request.
        (Err(e), Some(generation)) if !e.is::<NoAnswer>() => {
            send_again(ctx, generation, sent, &mut ops)
        }
        (answer, _) => answer,
    };
    let (status, body) = answer.unwrap_or_else(|e| (0, json!({ "error": format!("{e:#}") })));
    ctx.rec.act(
        ActionKind::Fault(fault),
        json!({ "message_id": message_id, "status": status }),
    );
    let exchange = Exchange {
        task: ctx.first_task().to_owned(),
        kind: sent.kind_of(),
        message_id: message_id.clone(),
        text,
        status,
        body,
        state_before: None,
        expect: None,
        sent_at_ms: at_ms,

        answered_at_ms: ctx.rec.now_ms(),
        injected: true,
    };
    ctx.rec.injected(exchange, ops);
}

/// No answer came before the deadline (the runner may be held or hung):
/// unlike a failed connection, nothing says the runner is gone.
#[derive(Debug)]
struct NoAnswer;

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no answer before the deadline")
    }
}

impl std::error::Error for NoAnswer {}

/// Sends the request on a thread of its own (it passes cut points of its
/// own), resumes the held hit once it is answered or after a short bound,
/// and waits for the answer within the cell's wait.
fn first_answer(
    ctx: &Ctx,
    client: Option<RunnerClient>,
    held: cutpoint::HeldHit,
    s: Sent<'_>,
) -> anyhow::Result<Answer> {
    let (tx, rx) = std::sync::mpsc::channel();
    match client {
        Some(client) => {
            let (task, fault) = (s.task.to_owned(), s.fault);
            let (id, text) = (s.message_id.to_owned(), s.text.to_owned());
            std::thread::spawn(move || {
                let sent = Sent {
                    task: &task,
                    fault,
                    message_id: &id,
                    text: &text,
                };
                let _ = tx.send(sent.post(&client));
            });
        }
        // Nothing to wait for: no request was sent.
        None => {
            let _ = tx.send(Err(anyhow::anyhow!("not sent: no runner was running")));
        }
    }
    let bound = Duration::from_millis(ctx.env.wait_ms.min(2_000));
    let first = rx.recv_timeout(bound);
    let _ = held.resume();
    match first {
        Ok(a) => a,
        Err(_) => rx
            .recv_timeout(Duration::from_millis(ctx.env.wait_ms))
            .unwrap_or_else(|_| Err(NoAnswer.into())),
    }
}

/// An injected request: its task, event, message id and text.
#[derive(Clone, Copy)]
struct Sent<'a> {
    task: &'a str,
    fault: Fault,
    message_id: &'a str,
    text: &'a str,
}

impl Sent<'_> {
    /// The request's kind.
    fn kind_of(&self) -> RequestKind {
        match self.fault {
            Fault::Retry => RequestKind::Retry,
            _ => RequestKind::FollowUp,
        }
    }

    /// The request's op kind.
    fn kind(&self) -> OpKind {
        OpKind::Request(self.kind_of())
    }

    /// Sends it to `client`'s runner.
    fn post(&self, client: &RunnerClient) -> anyhow::Result<Answer> {
        match self.fault {
            Fault::Retry => client.retry(self.task, self.message_id),
            _ => client.follow_up(self.task, self.message_id, self.text),
        }
    }
}

/// Sends a request again whose connection failed under it, once a runner of
/// a later generation than `sent_on` (the one it was sent to) is up, across
/// further restarts, within the cell's wait; each attempt is an op. The
/// runner's API is idempotent on message ids, so a request the dead runner
/// had admitted gets the same answer and changes nothing
/// (`docs/runner-contract.md`). No runner back in time: no answer.
fn send_again(ctx: &Ctx, sent_on: u64, s: Sent<'_>, ops: &mut Vec<Op>) -> anyhow::Result<Answer> {
    let until = Instant::now() + Duration::from_millis(ctx.env.wait_ms);
    if !ctx.board.wait_until(until, |b| b.generation != sent_on) {
        anyhow::bail!("the connection failed and no runner came back before the deadline");
    }
    super::steps::with_runner(ctx, until, |client| {
        let at_ms = ctx.rec.now_ms();
        let answer = s.post(client);
        ops.push(Op::of(s.kind(), s.message_id, at_ms, &answer));
        answer
    })
    .map_err(anyhow::Error::from)
}
