//! Turns on a provider that runs the agent loop: carrying out the recovery
//! of a cut turn ([`recovery::classify`] decides, this file acts), and the
//! write-ahead turn loop (`run_turn`): the intent is durable before the
//! turn is sent, the acceptance before its events are read, each output
//! before the next event, each approval before it is answered.
//!
//! A native turn goes to `native_loop` instead: the runner is its agent.

use serde_json::{Value, json};

use super::provider::{Link, Live};
use super::recovery::{self, LostConversation, Pending, ProviderSays, Recovery, TurnState};
use super::{CONTINUE_TEXT, Engine, StepError, driver_err};
use crate::causes::{Cause, CauseCode};
use crate::driver::{Driver, DriverError, FoundTurn, ProviderEvent, Sent, TurnEnd};
use crate::profiles::Profile;
use crate::store::{RequestStatus, Run, Snapshot, TurnKind, TurnRow, TurnStatus};

impl Engine {
    /// The provider has no record of the run's conversation
    /// ([`recovery::lost_conversation`]): the run forgets it (the next step
    /// opens a fresh one, and a turn it had sent is looked up there, found
    /// absent, and started once), or fails closed.
    pub(super) async fn conversation_gone(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
    ) -> Result<(), StepError> {
        let completed_turn = snap
            .turns
            .iter()
            .any(|t| t.run_id == run.run_id && t.status == TurnStatus::Completed);
        let (tid, rid) = (snap.task.task_id.clone(), run.run_id.clone());
        let output = self
            .read("turn_output", move |db| db.output_held(&tid, &rid, None))
            .await?;
        let held = recovery::Held {
            completed_turn,
            output,
        };
        if let LostConversation::Fail(cause) = recovery::lost_conversation(conversation, held) {
            return Err(StepError::Fail(cause));
        }
        let (tid, rid, old) = (
            snap.task.task_id.clone(),
            run.run_id.clone(),
            conversation.to_owned(),
        );
        self.write("conversation_lost", move |db| {
            db.conversation_lost(&tid, &rid, &old)
        })
        .await
    }

    /// Recovers a turn whose execution was cut (DESIGN §3.5): asks the
    /// provider for it, classifies it, and carries out the decision.
    pub(super) async fn recover_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let driver = match &mut l.link {
            Link::Agent(d) => d,
            // The runner is the agent: its own checkpoint is the provider's
            // record, so a cut native turn resumes from it (DESIGN §3.4 rules
            // 4 and 5) instead of being classified against a provider.
            Link::Native(model) => {
                return self
                    .native_turn(snap, run, conversation, turn, None, model)
                    .await;
            }
        };
        let state = TurnState::of(turn);
        // SEEDED BUG lookup-error-as-absent: a lookup that failed reads as
        // "no such turn", and that reading is trusted after the provider is
        // replaced (`Store::seeded_absent_trusted`): the turn is sent again.
        let trusted_absent = self.store.seeded_absent_trusted(turn.turn_row).await;
        let sent = match turn.provider_turn_id {
            Some(_) => Sent::default(),
            None => self.sent(task_id, turn).await?,
        };
        let found = match driver
            .lookup_turn(conversation, &TurnState::lookup(turn, sent))
            .await
        {
            _ if trusted_absent => None,
            Err(e) if crate::seeded::lookup_error_as_absent() => {
                return self.seeded_absent(snap, run, turn, e).await;
            }
            // SEEDED BUG lookup-error-answer-as-absent: the provider's error
            // answer is read as "no such turn".
            Err(DriverError::Rpc { .. }) if crate::seeded::lookup_error_answer_as_absent() => None,
            // The provider is there and answered with an error: whether it
            // recorded the turn is unknown, so the turn is neither sent
            // again nor continued.
            Err(e @ DriverError::Rpc { .. }) => {
                return Err(StepError::Fail(Cause::new(
                    CauseCode::ProviderLookupFailed,
                    format!("the recovery lookup failed: {e}"),
                )));
            }
            other => other.map_err(driver_err)?,
        };
        let found = self.or_unnamed(task_id, turn, driver, found).await?;
        let (unfinished, output_held) = self.held_of(task_id, run, turn, state).await?;
        let provider = ProviderSays {
            turn: found,
            unrecorded_reached_no_model: driver.unrecorded_reached_no_model(),
        };
        let pending = Pending {
            requests: snap.pending_requests,
            unfinished_approved: &unfinished,
            output_held,
        };
        let decision = recovery::classify(state, provider, pending);
        self.carry_out(snap, run, conversation, turn, decision, l)
            .await
    }

    /// What the store holds of a cut turn's work: the approved commands of
    /// an accepted turn that never completed, and whether any output of
    /// the turn is held ([`Pending`]).
    async fn held_of(
        &self,
        task_id: &str,
        run: &Run,
        turn: &TurnRow,
        state: TurnState<'_>,
    ) -> Result<(Vec<String>, bool), StepError> {
        let (tid, rid, row) = (task_id.to_owned(), run.run_id.clone(), turn.turn_row);
        let accepted = matches!(state, TurnState::Accepted { .. });
        let held = self
            .read("turn_output", move |db| {
                let unfinished = match accepted {
                    true => db.approved_items_unfinished(&tid, row)?,
                    false => Vec::new(),
                };
                Ok((unfinished, db.output_held(&tid, &rid, Some(row))?))
            })
            .await?;
        Ok(held)
    }

    /// What a turn never seen accepted carried, and the turns accepted
    /// before it: how an agent that keeps its own message ids is searched.
    async fn sent(&self, task_id: &str, turn: &TurnRow) -> Result<Sent, StepError> {
        let text = match turn.kind {
            TurnKind::Continuation if !crate::seeded::continuation_resends_message() => {
                CONTINUE_TEXT.to_owned()
            }
            _ => self.message_text(task_id, &turn.message_id).await?,
        };
        let (tid, row) = (task_id.to_owned(), turn.turn_row);
        let earlier = self
            .read("turns_before", move |db| db.accepted_before(&tid, row))
            .await?;
        Ok(Sent {
            text,
            earlier,
            completed_tools: Vec::new(),
        })
    }

    /// `found`, or for an accepted turn not found by its id when the
    /// agent's replay names nothing, the turn looked up by what it carried
    /// ([`Driver::recorded_unnamed`]).
    async fn or_unnamed(
        &self,
        task_id: &str,
        turn: &TurnRow,
        driver: &Driver,
        found: Option<FoundTurn>,
    ) -> Result<Option<FoundTurn>, StepError> {
        match (found, turn.provider_turn_id.as_deref()) {
            (None, Some(id)) if driver.replay_names_nothing() => {
                let sent = self.sent_accepted(task_id, turn).await?;
                Ok(driver.recorded_unnamed(id, &sent))
            }
            (found, _) => Ok(found),
        }
    }

    /// [`Self::sent`] for an accepted turn, with the tool calls of it the
    /// runner saw completed: how an agent that names nothing is searched.
    async fn sent_accepted(&self, task_id: &str, turn: &TurnRow) -> Result<Sent, StepError> {
        let mut sent = self.sent(task_id, turn).await?;
        let (tid, row) = (task_id.to_owned(), turn.turn_row);
        sent.completed_tools = self
            .read("turn_tools", move |db| db.completed_tools(&tid, row))
            .await?;
        Ok(sent)
    }

    /// The seeded bug `lookup-error-as-absent`: a lookup that failed is
    /// recorded as the provider having no such turn, and the provider is
    /// replaced; the next recovery trusts the mark and sends the turn.
    async fn seeded_absent(
        &self,
        snap: &Snapshot,
        run: &Run,
        turn: &TurnRow,
        err: crate::driver::DriverError,
    ) -> Result<(), StepError> {
        let (tid, rid) = (snap.task.task_id.clone(), run.run_id.clone());
        let data = json!({
            "message_id": turn.message_id,
            "turn_row": turn.turn_row,
            "lookup_failed": err.to_string(),
            "action": "start the turn for the first time",
        });
        self.write("turn_absent", move |db| {
            db.append(
                "turn_absent",
                &tid,
                Some(&rid),
                "turn.absent_at_provider",
                data,
            )
        })
        .await?;
        Err(StepError::Lost(err))
    }

    /// Carries out a [`Recovery`] of `turn`.
    async fn carry_out(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        decision: Recovery,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        match decision {
            Recovery::Adopt => self.adopt(task_id, run, turn).await,
            Recovery::Fail(cause) => Err(StepError::Fail(cause)),
            Recovery::StartAbsent => {
                let data = json!({ "message_id": turn.message_id, "action": "start the turn for the first time" });
                self.absent_then_send(snap, run, conversation, turn, data, l)
                    .await
            }
            Recovery::ResendUnrecorded => {
                let data = json!({
                    "message_id": turn.message_id,
                    "provider_turn_id": turn.provider_turn_id,
                    "action": "the provider never recorded the accepted turn's message; send it for the first time",
                });
                self.absent_then_send(snap, run, conversation, turn, data, l)
                    .await
            }
            Recovery::Continue(cause) => {
                self.continue_once(snap, run, conversation, turn, cause, l)
                    .await
            }
            Recovery::ResendAmbiguous => {
                let message = self.message_text(task_id, &turn.message_id).await?;
                self.run_turn(snap, run, conversation, turn, &message, l)
                    .await
            }
        }
    }

    /// Records `turn.absent_at_provider` with `data` and sets the turn back
    /// to an intent (`Db::turn_absent`, one write), then sends the turn's
    /// message: the provider never recorded it, so this is its first
    /// delivery to a model.
    async fn absent_then_send(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        data: Value,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let (tid, rid, row) = (task_id.clone(), run.run_id.clone(), turn.turn_row);
        // SEEDED BUG absent-keeps-acceptance: the row keeps the lost
        // acceptance while the message is sent again.
        let keep = crate::seeded::absent_keeps_acceptance();
        self.write("turn_absent", move |db| match keep {
            true => db
                .append(
                    "turn_absent",
                    &tid,
                    Some(&rid),
                    "turn.absent_at_provider",
                    data,
                )
                .map(drop),
            false => db.turn_absent(&tid, &rid, row, data),
        })
        .await?;
        let intent = match keep {
            true => turn.clone(),
            false => TurnRow {
                provider_turn_id: None,
                status: TurnStatus::Intent,
                ..turn.clone()
            },
        };
        let message = self.message_text(task_id, &turn.message_id).await?;
        self.run_turn(snap, run, conversation, &intent, &message, l)
            .await
    }

    /// Marks an accepted turn lost with `cause` and plays its one
    /// continuation (the continuation text, never the message).
    async fn continue_once(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        cause: Cause,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let client_id = l.link.client_id(&turn.message_id, true);
        let data = json!({ "cause": cause, "provider_turn_id": turn.provider_turn_id });
        let row = self
            .mark_lost_and_continue(task_id, run, turn, data, &client_id)
            .await?;
        let cont = TurnRow {
            turn_row: row,
            run_id: run.run_id.clone(),
            message_id: turn.message_id.clone(),
            kind: TurnKind::Continuation,
            client_id,
            provider_turn_id: None,
            status: TurnStatus::Intent,
        };
        if crate::seeded::continuation_resends_message() {
            // SEEDED BUG continuation-resends-message: the continuation
            // "resumes" by sending the user's message again.
            let message = self.message_text(task_id, &turn.message_id).await?;
            return self
                .run_turn(snap, run, conversation, &cont, &message, l)
                .await;
        }
        self.run_turn(snap, run, conversation, &cont, CONTINUE_TEXT, l)
            .await
    }

    /// Marks an accepted turn lost and records its continuation's intent,
    /// in one write (`Db::turn_lost_continued`); returns the continuation's row.
    async fn mark_lost_and_continue(
        &self,
        task_id: &str,
        run: &Run,
        turn: &TurnRow,
        data: Value,
        client_id: &str,
    ) -> Result<i64, StepError> {
        let (tid, rid, row, cid) = (
            task_id.to_owned(),
            run.run_id.clone(),
            turn.turn_row,
            client_id.to_owned(),
        );
        if crate::seeded::split_lost_mark() {
            let mid = turn.message_id.clone();
            // SEEDED BUG split-lost-mark: the lost mark is a write of its
            // own; a runner stopped right after it finds the turn settled
            // with nothing to continue, and completes the run without it.
            let (t, r) = (tid.clone(), rid.clone());
            self.write("turn_ended", move |db| {
                db.turn_finished(&t, &r, row, TurnStatus::Interrupted, data)
            })
            .await?;
            return self
                .write("turn_intent", move |db| {
                    db.turn_intent(&tid, &rid, &mid, TurnKind::Continuation, &cid)
                })
                .await;
        }
        self.write("turn_intent", move |db| {
            db.turn_lost_continued(&tid, &rid, row, data, &cid)
        })
        .await
    }

    async fn adopt(&self, task_id: &str, run: &Run, turn: &TurnRow) -> Result<(), StepError> {
        let (tid, rid, row) = (task_id.to_owned(), run.run_id.clone(), turn.turn_row);
        self.write("turn_ended", move |db| {
            db.turn_finished(
                &tid,
                &rid,
                row,
                TurnStatus::Completed,
                json!({ "adopted": true }),
            )
        })
        .await
    }

    /// Sends a turn and plays it to its end, persisting each output first.
    pub(super) async fn run_turn(
        &self,
        snap: &Snapshot,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        text: &str,
        l: &mut Live,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        let Live {
            link, terminals, ..
        } = l;
        let driver = match link {
            Link::Agent(d) => d,
            Link::Native(model) => {
                return self
                    .native_turn(snap, run, conversation, turn, Some(text), model)
                    .await;
            }
        };
        let profile = self.profile(&snap.task.profile);
        let row = turn.turn_row;
        let provider_turn = self
            .send_turn(task_id, run, conversation, turn, text, driver)
            .await?;
        loop {
            match driver.next_event().await.map_err(driver_err)? {
                ProviderEvent::ItemCompleted { turn_id, item } if turn_id == provider_turn => {
                    let (tid, rid) = (task_id.clone(), run.run_id.clone());
                    let data = json!({ "turn_row": row, "item": item });
                    self.write("item", move |db| {
                        db.append("item", &tid, Some(&rid), "item.completed", data)
                    })
                    .await?;
                }
                ProviderEvent::Request {
                    request_id,
                    method,
                    item_id,
                    ..
                } => {
                    let request = Approval {
                        turn_row: row,
                        key: request_id.to_string(),
                        method,
                        item_id,
                    };
                    self.approve(snap, run, profile, driver, &request_id, request)
                        .await?;
                }
                ProviderEvent::ClientTool {
                    request_id,
                    key,
                    call,
                } => {
                    let result = self
                        .client_tool(snap, run, row, &key, call, terminals)
                        .await?;
                    driver
                        .respond_tool(&request_id, result)
                        .await
                        .map_err(driver_err)?;
                }
                ProviderEvent::UnsupportedRequest { request_id, method } => {
                    driver
                        .reject(&request_id, &method)
                        .await
                        .map_err(driver_err)?;
                }
                ProviderEvent::TurnCompleted { turn_id, end } if turn_id == provider_turn => {
                    return self.turn_ended(snap, run, row, turn_id, end).await;
                }
                _ => {}
            }
        }
    }

    /// Sends the turn and records the provider's acceptance
    /// (`turn_accepted`) before any of its events is read; returns the
    /// provider's turn id.
    async fn send_turn(
        &self,
        task_id: &str,
        run: &Run,
        conversation: &str,
        turn: &TurnRow,
        text: &str,
        driver: &mut Driver,
    ) -> Result<String, StepError> {
        let provider_turn = driver
            .start_turn(conversation, text, &turn.client_id)
            .await
            .map_err(driver_err)?;
        if crate::seeded::accept_at_turn_end() {
            // SEEDED BUG accept-at-turn-end: the acceptance waits for the
            // turn's end (`turn_ended`); its output is acted on meanwhile.
            return Ok(provider_turn);
        }
        self.accept(task_id, run, turn.turn_row, &provider_turn)
            .await?;
        Ok(provider_turn)
    }

    /// Records the provider's acceptance of turn `row` as `provider_turn`.
    async fn accept(
        &self,
        task_id: &str,
        run: &Run,
        row: i64,
        provider_turn: &str,
    ) -> Result<(), StepError> {
        let (tid, rid, row, pt) = (
            task_id.to_owned(),
            run.run_id.clone(),
            row,
            provider_turn.to_owned(),
        );
        self.write("turn_accepted", move |db| {
            db.turn_accepted(&tid, &rid, row, &pt)
        })
        .await
    }

    /// Answers a provider request with the profile's decision: the request
    /// and the decision are durable before the answer, the answer after it.
    async fn approve(
        &self,
        snap: &Snapshot,
        run: &Run,
        profile: &Profile,
        driver: &mut Driver,
        request_id: &Value,
        request: Approval,
    ) -> Result<(), StepError> {
        let task_id = &snap.task.task_id;
        for (write, status, decision) in [
            ("approval_request", RequestStatus::Requested, None),
            (
                "approval_intent",
                RequestStatus::Answering,
                Some(profile.approval.clone()),
            ),
        ] {
            let (tid, rid, r) = (task_id.clone(), run.run_id.clone(), request.clone());
            self.write(write, move |db| {
                db.provider_request(
                    write,
                    &tid,
                    &rid,
                    r.turn_row,
                    &r.key,
                    &r.method,
                    status,
                    decision.as_deref(),
                    r.item_id.as_deref(),
                )
            })
            .await?;
        }
        driver
            .answer(request_id, &profile.approval)
            .await
            .map_err(driver_err)?;
        let (tid, rid, d) = (
            task_id.clone(),
            run.run_id.clone(),
            profile.approval.clone(),
        );
        self.write("approval_answer", move |db| {
            db.provider_request(
                "approval_answer",
                &tid,
                &rid,
                request.turn_row,
                &request.key,
                &request.method,
                RequestStatus::Answered,
                Some(&d),
                request.item_id.as_deref(),
            )
        })
        .await
    }

    /// Records the turn's end; a turn the provider ended other than
    /// `completed` fails the run. A status outside the turn's set (a
    /// provider breaking its protocol) is stored `failed`; its event and the
    /// cause keep the provider's text.
    async fn turn_ended(
        &self,
        snap: &Snapshot,
        run: &Run,
        row: i64,
        turn_id: String,
        end: TurnEnd,
    ) -> Result<(), StepError> {
        let TurnEnd { status, upstream } = end;
        let ended = status.parse().unwrap_or(TurnStatus::Failed);
        if crate::seeded::accept_at_turn_end() {
            self.accept(&snap.task.task_id, run, row, &turn_id).await?;
        }
        // The provider ran the loop and retried its model API itself: a turn
        // it failed upstream settles with that cause, never started again
        // by the runner (its history holds the message). The cause is
        // written with the turn's end, so a runner stopped before settling
        // the run settles it with the same cause (`Actor::step`).
        let cause = (ended != TurnStatus::Completed).then(|| {
            Cause::new(
                upstream.unwrap_or(CauseCode::ProviderProtocolError),
                format!("the provider ended turn {turn_id} with status {status}"),
            )
        });
        let (tid, rid) = (snap.task.task_id.clone(), run.run_id.clone());
        let data = json!({ "provider_turn_id": turn_id, "status": status, "cause": cause });
        self.write("turn_ended", move |db| {
            db.turn_finished(&tid, &rid, row, ended, data)
        })
        .await?;
        cause.map_or(Ok(()), |c| Err(StepError::Fail(c)))
    }
}

/// A provider request for a decision, as the store records it.
#[derive(Clone)]
struct Approval {
    turn_row: i64,
    key: String,
    method: String,
    item_id: Option<String>,
}
