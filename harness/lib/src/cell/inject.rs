//! A controller-action event (`follow-up`, `retry`) sent while a hit is
//! held, and the message id it sends under (`injected_message_id`).

use std::time::Duration;

use serde_json::json;

use super::Ctx;
use crate::evidence::{ActionKind, Exchange, Op, OpKind, RequestKind};
use crate::model::Fault;
use crate::runner_client::RunnerClient;

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
pub(super) fn inject_action(
    ctx: &Ctx,
    client: Option<RunnerClient>,
    held: cutpoint::HeldHit,
    fault: Fault,
    stage: usize,
) {
    let message_id = injected_message_id(fault, stage);
    // Each injected follow-up says something of its own: two messages of
    // one text would read, by text, as one message run twice
    // (`no-replay.turn` judges content under any id).
    let (kind, text) = match fault {
        Fault::Retry => (RequestKind::Retry, String::new()),
        _ => (
            RequestKind::FollowUp,
            format!("Also add a CHANGELOG (follow-up {message_id})"),
        ),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    match client {
        Some(client) => {
            let (id, text) = (message_id.clone(), text.clone());
            let task = ctx.first_task().to_owned();
            std::thread::spawn(move || {
                let answer = match fault {
                    Fault::Retry => client.retry(&task, &id),
                    _ => client.follow_up(&task, &id, &text),
                };
                let _ = tx.send(answer);
            });
        }
        // Nothing to wait for: no request was sent.
        None => {
            let _ = tx.send(Err(anyhow::anyhow!("not sent: no runner was running")));
        }
    }
    let at_ms = ctx.rec.now_ms();
    let bound = Duration::from_millis(ctx.env.wait_ms.min(2_000));
    let first = rx.recv_timeout(bound);
    let _ = held.resume();
    let answer = match first {
        Ok(a) => a,
        Err(_) => rx
            .recv_timeout(Duration::from_millis(ctx.env.wait_ms))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer before the deadline"))),
    };
    // No answer: the request may or may not have been applied (an `info` op).
    let op = Op::of(OpKind::Request(kind), &message_id, at_ms, &answer);
    let (status, body) = answer.unwrap_or_else(|e| (0, json!({ "error": format!("{e:#}") })));
    ctx.rec.act(
        ActionKind::Fault(fault),
        json!({ "message_id": message_id, "status": status }),
    );
    let exchange = Exchange {
        task: ctx.first_task().to_owned(),
        kind,
        message_id,
        text: text.to_owned(),
        status,
        body,
        state_before: None,
        expect: None,
        sent_at_ms: at_ms,

        answered_at_ms: ctx.rec.now_ms(),
        injected: true,
    };
    ctx.rec.injected(exchange, op);
}
