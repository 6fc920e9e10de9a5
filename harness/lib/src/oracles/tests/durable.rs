//! `durable.effect`: a file write the run log holds as completed must be on
//! disk with what the provider asked to write. Made to fail by the states a
//! power cut leaves under a runner that skips a sync: the file empty (its
//! bytes never synced) or gone (its rename never made durable).

use super::*;

/// `good()` whose turn wrote `notes.txt` through the runner (ACP
/// `fs/write_text_file`), the workspace holding `file` at the end.
fn wrote_notes(file: Option<&str>) -> Evidence {
    let mut e = good();
    let settled = e.events.split_off(3);
    e.events.extend([
        event(
            4,
            "tool.executing",
            json!({ "turn_row": 1, "key": "call_1", "kind": "write_text_file",
                    "detail": { "path": "notes.txt", "bytes": 23 } }),
        ),
        event(
            5,
            "tool.outcome",
            json!({ "key": "call_1", "status": "completed", "outcome": { "bytes": 23 } }),
        ),
    ]);
    for (i, mut ev) in settled.into_iter().enumerate() {
        json_of(&mut ev)["seq"] = json!(6 + i);
        e.events.push(ev);
    }
    e.journal.push(entry(
        EntryKind::Out,
        None,
        json!({ "jsonrpc": "2.0", "id": 7, "method": "fs/write_text_file",
                "params": { "sessionId": "s", "path": "notes.txt", "content": "written by write-notes\n" } }),
    ));
    e.workspace_root = "/ws".into();
    e.workspace = Some(
        file.map(|c| ("notes.txt".to_owned(), c.to_owned()))
            .into_iter()
            .collect(),
    );
    e
}

#[test]
fn durable_effect_passes_a_write_that_is_on_disk() {
    let results = judge(&wrote_notes(Some("written by write-notes\n")));
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
}

#[test]
fn durable_effect_catches_a_file_whose_bytes_were_never_synced() {
    assert_only_fails(
        &wrote_notes(Some("")),
        "durable.effect",
        "the file holds 0 bytes no write asked for",
    );
}

#[test]
fn durable_effect_catches_a_file_whose_rename_was_never_synced() {
    assert_only_fails(
        &wrote_notes(None),
        "durable.effect",
        "the file is not in the workspace",
    );
}

/// `wrote_notes` as the native profile writes it: the model's `Write`
/// call streamed by the model API, the runner's `Write` tool in the run log
/// (`ok: true` for its outcome).
fn native_wrote_notes(file: Option<&str>) -> Evidence {
    let mut e = wrote_notes(file);
    for ev in &mut e.events {
        if ev.kind() == Kind::ToolExecuting {
            json_of(ev)["data"] = json!({ "turn_row": 1, "key": "call_1", "kind": "Write",
                                 "detail": { "path": "notes.txt" } });
        } else if ev.kind() == Kind::ToolOutcome {
            json_of(ev)["data"] = json!({ "turn_row": 1, "key": "call_1", "ok": true });
        }
    }
    e.journal.pop();
    let arguments = json!({ "path": "notes.txt", "content": "written by write-notes\n" });
    e.journal.push(entry(
        EntryKind::Out,
        None,
        json!({ "event": { "type": "response.output_item.done", "output_index": 1,
                "item": { "type": "function_call", "name": "Write", "call_id": "call_1",
                          "arguments": arguments.to_string(), "status": "completed" } } }),
    ));
    e
}

#[test]
fn durable_effect_judges_the_native_write_tool_as_it_judges_acp() {
    let results = judge(&native_wrote_notes(Some("written by write-notes\n")));
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
    assert_only_fails(
        &native_wrote_notes(Some("")),
        "durable.effect",
        "the file holds 0 bytes no write asked for",
    );
    assert_only_fails(
        &native_wrote_notes(None),
        "durable.effect",
        "the file is not in the workspace",
    );
}

#[test]
fn durable_effect_judges_only_what_the_run_log_holds_as_done() {
    // The outcome never became durable (the call is uncertain after the
    // cut): the runner claims nothing, whatever the file holds.
    let mut e = wrote_notes(None);
    json_of(&mut e.events[4])["data"]["status"] = json!("uncertain");
    assert_eq!(verdict(&judge(&e), "durable.effect").0, Verdict::Pass);
    // An absolute path inside the workspace is the same file.
    let mut e = wrote_notes(Some(""));
    json_of(&mut e.events[3])["data"]["detail"]["path"] = json!("/ws/notes.txt");
    e.journal.last_mut().unwrap().data["params"]["path"] = json!("/ws/notes.txt");
    assert_only_fails(&e, "durable.effect", "/ws/notes.txt");
}

#[test]
fn durable_effect_is_unknown_without_the_workspace_or_the_request() {
    let mut e = wrote_notes(None);
    e.workspace = None;
    let (v, m) = verdict(&judge(&e), "durable.effect");
    assert_eq!(v, Verdict::Unknown, "{m}");
    assert!(m.contains("the workspace was never read"), "{m}");
    let mut e = wrote_notes(Some("x"));
    e.journal.pop();
    let (v, m) = verdict(&judge(&e), "durable.effect");
    assert_eq!(v, Verdict::Unknown, "{m}");
    assert!(m.contains("the journal never asked for"), "{m}");
}

#[test]
fn a_power_cut_excuses_a_provider_turn_journaled_before_it_not_after() {
    use crate::evidence::Action;
    // `good()`'s turn pt1, journaled (ts 0) but gone from the store.
    let mut e = good();
    e.provider_turns.clear();
    assert!(e.gap(Source::ProviderStore).is_some(), "no cut: truncated");
    e.actions.push(Action {
        at_ms: 5,
        what: crate::evidence::ActionKind::Fault(Fault::PowerCut),
        detail: json!({ "dead_at_epoch_ms": 10 }),
    });
    assert_eq!(e.gap(Source::ProviderStore), None, "lost by the cut");
    for j in &mut e.journal {
        j.ts_ms = 11;
    }
    assert!(
        e.gap(Source::ProviderStore).is_some(),
        "journaled after the cut: truncated"
    );
}

/// `good()` whose provider store lost turn pt1 (journaled at ts 0), with a
/// power cut at `cut_ms` when `cut` (else none).
fn store_lost_pt1(cut: bool) -> Evidence {
    let mut e = good();
    e.provider_turns.clear();
    if cut {
        e.actions.push(crate::evidence::Action {
            at_ms: 5,
            what: crate::evidence::ActionKind::Fault(Fault::PowerCut),
            detail: json!({ "dead_at_epoch_ms": 10 }),
        });
    }
    e
}

#[test]
fn a_turn_a_power_cut_took_from_the_store_still_counts_as_the_providers() {
    // Without a cut a completed run whose turn the store lacks is caught.
    assert_only_fails(
        &store_lost_pt1(false),
        "contract",
        "never completed a turn for m1",
    );
    // With the cut, the journal's turn (completed before it) stands.
    let e = store_lost_pt1(true);
    assert_eq!(e.turns_lost_to_power_cut().len(), 1);
    let results = judge(&e);
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
}

#[test]
fn failing_closed_on_a_conversation_a_power_cut_took_is_the_contracts_outcome() {
    let fail = |e: &mut Evidence| {
        let cause = json!({ "code": "provider_protocol_error", "recoverable": false,
                            "message": "the provider lost conversation th, which has completed turns" });
        task(e)["state"] = json!("failed");
        task(e)["cause"] = cause.clone();
        task(e)["runs"][0]["status"] = json!("failed");
        task(e)["runs"][0]["cause"] = cause.clone();
        e.events[4] = event(
            5,
            "run.settled",
            json!({ "state": "failed", "cause": cause }),
        );
    };
    let mut e = store_lost_pt1(true);
    fail(&mut e);
    assert_eq!(
        verdict(&judge(&e), "contract").0,
        Verdict::Pass,
        "{:#?}",
        judge(&e)
    );
    // The same cause with the provider's record intact: no cut justifies it.
    let mut e = good();
    fail(&mut e);
    assert_only_fails(&e, "contract", "which no cut-and-restart justifies");
}

/// `good()` on a real ACP agent that stored nothing before it was killed:
/// the turn accepted, then the provider killed, and the restarted agent
/// answered the runner's `session/load` of `th` with `load_answer`; the run
/// failed closed `provider_lookup_failed`.
fn lookup_of_a_session_never_stored(load_answer: Value) -> Evidence {
    let mut e = good();
    e.fault = Some(Fault::KillProvider);
    e.actions.push(crate::evidence::Action {
        at_ms: 3,
        what: crate::evidence::ActionKind::Fault(Fault::KillProvider),
        detail: json!({}),
    });
    let cause = json!({ "code": "provider_lookup_failed", "recoverable": false,
                        "message": "loading the conversation failed" });
    task(&mut e)["state"] = json!("failed");
    task(&mut e)["cause"] = cause.clone();
    task(&mut e)["runs"][0]["status"] = json!("failed");
    task(&mut e)["runs"][0]["cause"] = cause.clone();
    task(&mut e)["runs"][0]["turns"][0]["status"] = json!("accepted");
    e.events.truncate(3);
    e.events.push(event(
        4,
        "run.settled",
        json!({ "state": "failed", "cause": cause }),
    ));
    e.ledger.clear();
    e.provider_turns.clear();
    let mut answer = json!({ "jsonrpc": "2.0", "id": 2 });
    answer
        .as_object_mut()
        .unwrap()
        .extend(load_answer.as_object().unwrap().clone());
    e.journal = vec![
        entry(
            EntryKind::In,
            None,
            json!({ "jsonrpc": "2.0", "id": 2, "method": "session/load",
                    "params": { "sessionId": "th", "cwd": "/ws", "mcpServers": [] } }),
        ),
        entry(EntryKind::Out, None, answer),
    ];
    e
}

#[test]
fn a_lookup_of_a_session_the_agent_never_stored_justifies_provider_lookup_failed() {
    let not_found = json!({ "error": { "code": -32002, "message": "Resource not found: th" } });
    let e = lookup_of_a_session_never_stored(not_found.clone());
    assert_eq!(
        verdict(&judge(&e), "contract").0,
        Verdict::Pass,
        "{:#?}",
        judge(&e)
    );
    // The agent holds a turn of the session: the lookup had something to find.
    let mut e = lookup_of_a_session_never_stored(not_found);
    e.provider_turns
        .push(pturn("pt1", "m1", "m1", "interrupted", false));
    assert_only_fails(&e, "contract", "which no cut-and-restart justifies");
    // Another error than "not found": the agent never said it has no such session.
    let e = lookup_of_a_session_never_stored(
        json!({ "error": { "code": -32603, "message": "Internal error" } }),
    );
    assert_only_fails(&e, "contract", "which no cut-and-restart justifies");
}

#[test]
fn durable_effect_holds_a_write_done_before_a_power_cut_to_the_disk_right_after_it() {
    // The file is right at the end (the provider asked again after the
    // restart), but right after the cut it was empty: the runner had said
    // the write was done.
    let mut e = wrote_notes(Some("written by write-notes\n"));
    e.events_before_power_cut = Some(e.events[..5].to_vec());
    e.workspace_after_cut = Some([("notes.txt".to_owned(), String::new())].into());
    assert_only_fails(
        &e,
        "durable.effect",
        "no write asked for after the power cut",
    );
    e.workspace_after_cut = Some(std::collections::BTreeMap::from([(
        "notes.txt".to_owned(),
        "written by write-notes\n".to_owned(),
    )]));
    assert_eq!(verdict(&judge(&e), "durable.effect").0, Verdict::Pass);
}

/// A write the run log holds as done only in a read after the power cut (a
/// later fault's, as when the cut was a schedule's first event and the
/// task's run wrote afterwards) is not held to the disk right after the
/// cut. Found by `explore --workflows --seed 101` (a power cut at
/// `runner.task_admitted.persisted#1`, then `kill-both` after the write).
#[test]
fn durable_effect_holds_only_writes_read_before_the_power_cut_to_it() {
    let mut e = wrote_notes(Some("written by write-notes\n"));
    // Read before a later fault: the write is done; the disk right after
    // the cut, earlier, had nothing.
    e.events_before_fault = Some(e.events[..5].to_vec());
    e.workspace_after_cut = Some(std::collections::BTreeMap::new());
    e.events_before_power_cut = Some(e.events[..1].to_vec());
    assert_eq!(verdict(&judge(&e), "durable.effect").0, Verdict::Pass);
    // Read before the cut, the same claim must be on the disk after it.
    e.events_before_power_cut = Some(e.events[..5].to_vec());
    assert_only_fails(&e, "durable.effect", "after the power cut");
}

/// The contract's re-send of an accepted turn a power cut took from the
/// provider's store, before the runner held any output of it, runs the
/// message's effect a second time in the same conversation when that
/// survived the cut: judged as in a fresh conversation (`docs/oracles.md`,
/// "Not judged yet"). Held output, or no power cut, and it is a replay.
/// Found by `explore --workflows --seed 202` (a follow-up's turn, power cut
/// at `runner.turn_accepted.persisted#2`).
#[test]
fn a_resend_the_providers_power_loss_made_is_judged_alike_in_either_conversation() {
    let resent = |output_held: bool, cut: bool| {
        let mut e = good();
        e.ledger.push(e.ledger[0].clone());
        let absent = event(
            4,
            "turn.absent_at_provider",
            json!({ "message_id": "m1", "provider_turn_id": "pt1" }),
        );
        e.events.insert(3, absent);
        if output_held {
            let item = json!({ "turn_row": 1, "item": { "id": "i1", "type": "agentMessage" } });
            e.events.insert(3, event(4, "item.completed", item));
        }
        if cut {
            e.actions.push(crate::evidence::Action {
                at_ms: 5,
                what: crate::evidence::ActionKind::Fault(Fault::PowerCut),
                detail: json!({ "dead_at_epoch_ms": 10 }),
            });
        }
        verdict(&judge(&e), "no-replay.effect")
    };
    assert_eq!(
        resent(false, true).0,
        Verdict::Pass,
        "{}",
        resent(false, true).1
    );
    assert!(resent(true, true).1.contains("ran 2 times"));
    assert!(resent(false, false).1.contains("ran 2 times"));
}
