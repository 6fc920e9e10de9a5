//! A cell of two tasks: each task's view holds its own messages, journal,
//! ledger and turns, the oracles judge each view, and a failure names its
//! task.

use super::*;
use crate::evidence::TaskLane;

/// `good()`'s task as a second task: every id its own (`task-2`,
/// `task-2-m1`, conversation `th2`, turn `pt2`, effect `write-notes`).
fn second() -> Evidence {
    let mut text = serde_json::to_string(&good()).expect("evidence serializes");
    for (from, to) in [
        ("\"m1\"", "\"task-2-m1\""),
        ("\"th\"", "\"th2\""),
        ("\"pt1\"", "\"pt2\""),
        ("\"task-1\"", "\"task-2\""),
        ("\"run-1\"", "\"run-2\""),
        ("write-hello", "write-notes"),
        ("Create hello.txt", "Create notes.txt"),
    ] {
        text = text.replace(from, to);
    }
    serde_json::from_str(&text).expect("evidence parses")
}

/// `good()` with `second()` as its second task.
fn two_tasks() -> Evidence {
    let mut e = good();
    let t2 = second();
    e.exchanges.extend(t2.exchanges);
    e.journal.extend(t2.journal);
    e.ledger.extend(t2.ledger);
    e.provider_turns.extend(t2.provider_turns);
    e.other_tasks.push(TaskLane {
        id: "task-2".into(),
        task: t2.task,
        events: t2.events,
        ..TaskLane::default()
    });
    e
}

#[test]
fn each_task_is_judged_on_its_own_view() {
    let e = two_tasks();
    let results = judge(&e);
    assert_eq!(worst(&results), Verdict::Pass, "{results:#?}");
    let views = e.task_views();
    assert_eq!(views.len(), 2);
    let (id, v) = &views[1];
    assert_eq!(id, "task-2");
    assert_eq!(v.issued_ids(), ["task-2-m1"]);
    assert!(
        v.ledger.iter().all(|l| l.by == "task-2-m1"),
        "{:?}",
        v.ledger
    );
    assert!(v.provider_turns.iter().all(|t| t.thread == "th2"));
    assert!(
        v.turn_starts()
            .iter()
            .all(|s| s.client_id.as_deref() == Some("task-2-m1"))
    );
    assert_eq!(v.state(), Some(TaskState::Completed));
    assert!(v.other_tasks.is_empty());
    // The first task's view is the evidence without the second's pieces.
    let (_, v1) = &views[0];
    assert_eq!(v1.issued_ids(), ["m1"]);
    assert_eq!(v1.ledger.len(), 1);
}

#[test]
fn a_replay_in_the_second_task_fails_and_names_it() {
    let mut e = two_tasks();
    e.journal.push(second().journal[0].clone());
    let mut replayed = second().provider_turns[0].clone();
    replayed.turn = "pt3".into();
    e.provider_turns.push(replayed);
    e.ledger.push(ledger("write-notes", "task-2-m1"));
    let results = judge(&e);
    for oracle in ["no-replay.turn", "no-replay.effect"] {
        let (v, m) = verdict(&results, oracle);
        assert_eq!(v, Verdict::Fail, "{oracle}: {results:#?}");
        assert!(m.starts_with("task-2: "), "{oracle}: {m}");
        assert!(!m.contains("task-1"), "{oracle}: {m}");
    }
    // The same replay in one task's cell fails without a task's name.
    let mut one = good();
    one.ledger.push(ledger("write-hello", "m1"));
    let (_, m) = verdict(&judge(&one), "no-replay.effect");
    assert!(!m.starts_with("task-"), "{m}");
}

/// A provider turn no task's message authorized, in a conversation no
/// task's, is judged in every task's view: cutting the evidence by task
/// hides nothing that is no task's.
#[test]
fn a_turn_of_no_task_stays_in_every_view() {
    let mut e = two_tasks();
    let mut stray = second().provider_turns[0].clone();
    stray.thread = "th-x".into();
    stray.turn = "px".into();
    stray.client_id = Some("who-knows".into());
    stray.authorized_by = "who-knows".into();
    e.provider_turns.push(stray);
    for (task, v) in e.task_views() {
        assert!(v.provider_turns.iter().any(|t| t.turn == "px"), "{task}");
    }
}

#[test]
fn a_second_task_left_running_fails_liveness_for_it_alone() {
    let mut e = two_tasks();
    let lane = &mut e.other_tasks[0];
    let mut t = lane.task.as_ref().expect("task").as_written().clone();
    t["state"] = json!("running");
    lane.task = Some(TaskRead::read(t));
    let (v, m) = verdict(&judge(&e), "liveness");
    assert_eq!(v, Verdict::Fail);
    assert_eq!(
        m,
        "task-2: the task is still running after the cell's deadline"
    );
}

/// An error injected into a request that starts a conversation names none
/// yet; the fake names the workspace the request was made for (`cwd`), so
/// it is the view of the task of that workspace alone (it was in both: the
/// other task's upstream oracle said "no run of the task was created
/// before" it, or judged its own run by another's fault). An answer made
/// for no task's workspace stays in every view.
#[test]
fn an_injected_answer_for_a_new_conversation_is_the_view_of_its_workspaces_task() {
    let mut e = two_tasks();
    e.workspace_root = "/cell/ws/task-1".into();
    e.other_tasks[0].workspace_root = "/cell/ws/task-2/".into();
    let answer = |cwd: &str| {
        entry(
            EntryKind::Fact,
            Some("fault.answer"),
            json!({ "point": "codex.thread_start.received", "answer": "error-answer", "cwd": cwd }),
        )
    };
    e.journal.push(answer("/cell/ws/task-2"));
    e.journal.push(answer("/elsewhere"));
    let cwds = |v: &Evidence| -> Vec<String> {
        v.journal
            .iter()
            .filter(|x| x.fact.as_deref() == Some("fault.answer"))
            .map(|x| x.data["cwd"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let views = e.task_views();
    assert_eq!(cwds(&views[0].1), ["/elsewhere"]);
    assert_eq!(cwds(&views[1].1), ["/cell/ws/task-2", "/elsewhere"]);
}

/// The harness's own record of an injected answer (the fake, frozen before
/// it answered, journaled none) is the view of the task whose provider
/// made the request; one whose process no task spawned stays in every view.
#[test]
fn an_injected_answer_the_fake_never_journaled_is_its_providers_tasks() {
    let mut e = two_tasks();
    let spawned = |pid: u64| event(9, "provider.spawned", json!({ "pid": pid, "pgid": pid }));
    e.events.push(spawned(100));
    e.other_tasks[0].events.push(spawned(200));
    for pid in [100, 200, 300] {
        e.actions.push(crate::evidence::Action {
            at_ms: 3,
            what: crate::evidence::ActionKind::Fault(Fault::StreamCut),
            detail: json!({ "pid": pid, "point": "codex.model.requested" }),
        });
    }
    let pids = |v: &Evidence| -> Vec<u64> {
        v.actions
            .iter()
            .filter(|a| a.what == crate::evidence::ActionKind::Fault(Fault::StreamCut))
            .filter_map(|a| a.pid())
            .collect()
    };
    let views = e.task_views();
    assert_eq!(pids(&views[0].1), [100, 300]);
    assert_eq!(pids(&views[1].1), [200, 300]);
}
