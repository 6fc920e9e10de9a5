//! The oracles' judgements from the contract model, each made to fail: an
//! answer the contract does not allow, an effect a message did not ask
//! for, an effect an answered message never ran, a task nothing cut that
//! failed, and the recovery row a follow-up's run meets after a power cut.

use super::*;

/// The two-turn script of the issue's reproduction, each turn answering
/// one text.
fn script() -> wire::script::Script {
    wire::script::Script::parse(
        r#"
[[turn]]
tools = [{ key = "write-hello", kind = "command", approval = true }]
answers = ["Create hello.txt"]
[[turn]]
tools = [{ key = "write-notes", kind = "command", approval = true }]
answers = ["Also add notes"]
"#,
        "s.toml",
    )
    .unwrap()
}

#[test]
fn an_effect_its_message_never_asked_for_fails_and_so_does_one_never_run() {
    let mut e = good();
    e.script = Some(script());
    assert_eq!(worst(&judge(&e)), Verdict::Pass, "{:#?}", judge(&e));
    // m1 asks for write-hello; the ledger holds write-notes under m1.
    e.ledger = vec![ledger("write-notes", "m1")];
    e.journal
        .retain(|j| j.fact.as_deref() != Some("effect.exited"));
    let results = judge(&e);
    let (v, m) = verdict(&results, "contract");
    assert_eq!(v, Verdict::Fail, "{results:#?}");
    assert!(
        m.contains("effect write-notes ran under message m1, whose content asks for write-hello"),
        "{m}"
    );
    assert!(
        m.contains(
            "message m1 was answered by a completed turn but its effect write-hello never ran"
        ),
        "{m}"
    );
    // A run that did not complete answered nothing: no effect is owed.
    let mut e = good();
    e.script = Some(script());
    e.ledger.clear();
    e.journal
        .retain(|j| j.fact.as_deref() != Some("effect.exited"));
    task(&mut e)["runs"][0]["status"] = json!("failed");
    assert!(
        !verdict(&judge(&e), "contract").1.contains("never ran"),
        "{:#?}",
        judge(&e)
    );
}

/// A command that ran and failed under its message (killed with its
/// provider: exit code null) is a finished call the model saw fail: a
/// continuation does not make it again, and it is not owed; without that
/// record the same ledger fails.
#[test]
fn a_command_that_ran_and_failed_is_not_owed_again() {
    let mut e = good();
    e.script = Some(script());
    e.ledger.clear();
    e.journal
        .retain(|j| j.fact.as_deref() != Some("effect.exited"));
    assert!(verdict(&judge(&e), "contract").1.contains("never ran"));
    e.journal.push(entry(
        EntryKind::Fact,
        Some("effect.exited"),
        json!({ "by": "m1", "key": "write-hello", "exit_code": null }),
    ));
    let (v, m) = verdict(&judge(&e), "contract");
    assert!(!m.contains("never ran"), "{v:?} {m}");
}

#[test]
fn a_task_nothing_cut_that_fails_breaks_the_contract_whatever_expect_says() {
    let mut e = good();
    e.actions.clear();
    e.events_applied = 0;
    let cause = json!({ "code": "provider_protocol_error", "recoverable": false, "message": "x" });
    task(&mut e)["state"] = json!("failed");
    task(&mut e)["cause"] = cause.clone();
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] = cause.clone();
    e.events[4] = event(
        5,
        "run.settled",
        json!({ "state": "failed", "cause": cause }),
    );
    assert_only_fails(&e, "contract", "nothing was cut, yet the task ended failed");
    // Cut, the same failure is the recovery rows' to judge.
    e.events_applied = 1;
    assert!(
        !verdict(&judge(&e), "contract")
            .1
            .contains("nothing was cut")
    );
}

#[test]
fn a_retry_the_contract_refuses_but_the_runner_admits_fails_retry_works() {
    let mut e = good();
    let mut r = exchange_retry("r1", 201);
    r.state_before = Some(TaskState::Completed);
    e.exchanges.push(r);
    let (v, m) = verdict(&judge(&e), "retry.works");
    assert_eq!(v, Verdict::Fail);
    assert!(m.contains("retry r1 was answered 201 (the task was completed when read just before), the contract allows 409 nothing_to_retry"), "{m}");
}

#[test]
fn a_follow_up_fenced_with_nothing_cut_fails_the_fence() {
    let mut e = good();
    e.actions.clear();
    let mut x = exchange_retry("f1", 409);
    x.kind = RequestKind::FollowUp;
    x.text = "more".into();
    x.body = json!({ "reason": "prior_owner_fence_refused" });
    e.exchanges.push(x);
    e.events.push(event(
        6,
        "prior_owner_fence_refused",
        json!({ "message_id": "f1", "reason": "prior_owner_fence_refused" }),
    ));
    assert_only_fails(
        &e,
        "fence",
        "sent while nothing had been cut), the contract allows 202",
    );
}

#[test]
fn closing_a_follow_up_run_whose_turn_a_power_cut_took_is_the_contracts_row() {
    // The follow-up's run (run-2) closed active_turn_recovery_closed: no
    // approval pending, but the provider recorded f1's turn (pf1, journal)
    // and the power cut took it from its store.
    let mut e = good();
    e.events_applied = 1;
    let cause =
        json!({ "code": "active_turn_recovery_closed", "recoverable": false, "message": "x" });
    task(&mut e)["state"] = json!("failed");
    task(&mut e)["cause"] = cause.clone();
    task(&mut e)["runs"].as_array_mut().unwrap().push(run_view(
        "run-2",
        "follow_up",
        "failed",
        "th",
        vec![turn_view(2, "f1", "primary", "accepted")],
    ));
    task(&mut e)["runs"][1]["cause"] = cause.clone();
    e.journal.push(recorded("pf1", "f1", "f1", false));
    let without_cut = e.clone();
    e.actions.push(crate::evidence::Action {
        at_ms: 5,
        what: crate::evidence::ActionKind::Fault(Fault::PowerCut),
        detail: json!({ "dead_at_epoch_ms": 10 }),
    });
    assert!(
        !verdict(&judge(&e), "contract")
            .1
            .contains("active_turn_recovery_closed"),
        "{:#?}",
        judge(&e)
    );
    let (v, m) = verdict(&judge(&without_cut), "contract");
    assert_eq!(v, Verdict::Fail);
    assert!(
        m.contains("closed with active_turn_recovery_closed but no approval was pending"),
        "{m}"
    );
}

/// A Retry (or any request) `id` answered `status`.
fn exchange_retry(id: &str, status: u16) -> Exchange {
    Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::Retry,
        message_id: id.into(),
        text: String::new(),
        status,
        body: json!({}),
        state_before: None,
        expect: None,
        sent_at_ms: 1,

        answered_at_ms: 1,
        injected: false,
    }
}

/// A message's content is the text the runner accepted under its id: a
/// refused request's text, then another under the same id that the runner
/// accepts, judges the message by the second. Found by `explore --workflows
/// --seed 505` on the reference runner (the model held the message to the
/// refused text's command).
#[test]
fn a_message_is_judged_by_the_text_accepted_under_its_id() {
    let mut e = good();
    e.exchanges.push(super::detection::exchange(
        "follow_up",
        "f1",
        "Also add notes",
        409,
        json!({}),
    ));
    assert_eq!(e.content_of("f1").as_deref(), Some("Also add notes"));
    e.exchanges.push(super::detection::exchange(
        "follow_up",
        "f1",
        "Something else",
        202,
        json!({}),
    ));
    assert_eq!(e.content_of("f1").as_deref(), Some("Something else"));
}
