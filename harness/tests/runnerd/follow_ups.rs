//! Follow-ups queued, admitted and consumed across restarts and settlements.

use crate::*;

#[test]
fn a_follow_up_queued_during_a_turn_survives_a_restart_and_is_consumed_once() {
    let script = r#"
[[turn]]
say = ["Working."]
tools = [{ key = "first", approval = true }]
final = "First done."

[[turn]]
say = ["Follow-up."]
tools = [{ key = "second" }]
final = "Second done."
"#;
    let mut rig = Rig::with_script(&[], Some(script));
    let client = rig.start(Some("codex.turn_started.notified"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    let (status, _) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "the same follow-up again is the same answer");
    rig.kill_runner();
    drop(held);
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        1,
        "the follow-up is consumed exactly once"
    );
    let keys: Vec<(String, String)> = rig.ledger().into_iter().map(|e| (e.key, e.by)).collect();
    assert!(keys.contains(&("first".into(), "m1".into())), "{keys:?}");
    assert!(keys.contains(&("second".into(), "f1".into())), "{keys:?}");
    rig.assert_effects_once();
}

#[test]
fn a_follow_up_to_a_completed_task_runs_in_the_same_conversation() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    client.wait_settled("t1", WAIT).unwrap();
    let (status, body) = client.follow_up("t1", "f1", "one more thing").unwrap();
    assert_eq!(status, 202, "{body}");
    let task = client
        .wait_task("t1", WAIT, |t| {
            t["runs"].as_array().is_some_and(|r| r.len() == 2) && state(t) == "completed"
        })
        .unwrap();
    let runs = task["runs"].as_array().unwrap();
    assert_eq!(runs[0]["conversation_id"], runs[1]["conversation_id"]);
    assert_eq!(rig.turn_starts("f1"), 1);
    assert_eq!(rig.count_in("thread/start"), 1);
}

#[test]
fn a_follow_up_admitted_while_the_run_settles_is_consumed() {
    let mut rig = Rig::new(&[]);
    // The runner has decided the queue is empty and stopped the provider;
    // it is held before it settles the run completed.
    let client = rig.start(Some("runner.provider_stop.persisted#1"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    held.resume().unwrap();
    let task = client
        .wait_task("t1", WAIT, |t| {
            t["state"] != "running" && t["state"] != "queued"
        })
        .unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(
        rig.turn_starts("f1"),
        1,
        "the accepted follow-up is answered, not stranded in a completed task\n{task}"
    );
    rig.assert_effects_once();
}

// Storage faults: the harness answers a runner's `runner.write.<write>` point
// with `fail EIO` (`fail-write`: that one write fails) or `fail ENOSPC`
// (`disk-full`: every later write of that runner process fails too, until a
// restart brings the disk back).
