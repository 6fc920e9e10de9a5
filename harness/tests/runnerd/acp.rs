//! runnerd's ACP driver against an agent that stores the user message under
//! an id of its own and echoes nothing (`fake-provider acp --like opencode`,
//! as `opencode acp` does): a turn lost before the runner saw any output is
//! found by its text, never sent twice. And an agent that writes the end of
//! a turn after answering it is let finish before it is stopped.

use crate::*;

/// `session/prompt` requests the agent received with `text`.
fn prompts(rig: &Rig, text: &str) -> usize {
    rig.journal()
        .iter()
        .filter(|e| e.kind == EntryKind::In && e.data["method"] == "session/prompt")
        .filter(|e| e.data.pointer("/params/prompt/0/text") == Some(&json!(text)))
        .count()
}

/// Held once the agent stored the prompt, before any output reached the
/// runner; the runner dies there. Its successor finds the turn by its text
/// in the `session/load` replay (the runner's client id is not in it) and
/// fails closed instead of sending the prompt again.
#[test]
fn a_turn_stored_under_the_agents_own_id_is_found_by_its_text_and_not_sent_again() {
    let mut rig = Rig::acp(&["--like", "opencode"]);
    let client = rig.start(Some("acp.turn.recorded"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "acp.turn.recorded");
    rig.kill_runner();

    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "ambiguous_turn_start", "{task}");
    assert_eq!(prompts(&rig, "Create hello.txt"), 1, "sent once");
    assert!(rig.ledger().is_empty(), "nothing ran");

    // Retry: a fresh session, the message answered once there.
    let (status, body) = client.retry("t1", "r1").unwrap();
    assert_eq!(status, 201, "{body}");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(
        prompts(&rig, "Create hello.txt"),
        2,
        "once more, by the Retry"
    );
    rig.assert_effects_once();
}

/// A follow-up of the same text as the answered first message, cut after
/// the agent received it and before it stored it: the first message is not
/// taken for it (the search starts after the last turn the runner saw
/// accepted), so the follow-up, never recorded, is sent once more and the
/// task completes. Read by text alone, the first message would have made
/// it fail closed.
#[test]
fn an_earlier_message_of_the_same_text_is_not_taken_for_a_lost_follow_up() {
    let mut rig = Rig::acp(&["--like", "opencode"]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    // Armed from here on: the follow-up's agent is held at its prompt.
    rig.kill_runner();
    let client = rig.start(Some("acp.session_prompt.received"));
    let (status, body) = client.follow_up("t1", "f1", "Create hello.txt").unwrap();
    assert_eq!(status, 202, "{body}");
    let held = rig.hold();
    rig.kill_runner();

    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    drop(held);
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let events = event_kinds(&client, "t1");
    assert!(
        events.contains(&"turn.absent_at_provider".to_owned()),
        "{events:?}"
    );
    // m1 once; f1 twice, the first of them never stored by the agent.
    assert_eq!(prompts(&rig, "Create hello.txt"), 3);
    rig.assert_effects_once();
}

/// An agent that writes the end of a turn only after answering it
/// (`--finish-lag-ms`, as Claude Code writes its transcript on a timer)
/// keeps it: at the end of the run runnerd closes the agent's input and
/// lets it exit on its own (`--provider-exit-grace-ms`) before any signal.
/// Signalled at once, the agent died with the turn in progress, and its
/// store, read after a restart, held a turn that never ended.
#[test]
fn an_agent_that_writes_a_turns_end_after_answering_it_is_let_finish() {
    let mut rig = Rig::acp(&["--finish-lag-ms", "500"]);
    // A bound, not a wait: the agent exits as soon as it has written.
    rig.runner_extra
        .extend(["--provider-exit-grace-ms".into(), "20000".into()]);
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let journal = rig.journal();
    let finished: Vec<_> = journal
        .iter()
        .filter(|e| e.fact.as_deref() == Some("turn.finished"))
        .collect();
    assert_eq!(
        finished.len(),
        1,
        "the agent wrote the end of its turn before it was stopped\n{}",
        rig.log()
    );
    assert_eq!(finished[0].data["status"], "completed");
    assert!(
        journal
            .iter()
            .any(|e| e.fact.as_deref() == Some("process.stdin_closed")),
        "its input was closed"
    );
}
