//! Read faults at the runner's reads (`fail-read`, `corrupt-read`): a read
//! that fails once is tried again and the task goes on, nothing sent twice;
//! one that keeps failing settles the run `storage_failed` after its tries,
//! its provider stopped, and a Retry completes it. Under the seeded bug
//! `actor-returns-on-failed-read` the first test fails: the task stays
//! running with no actor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::runnerd::processes::{processes_with_arg, wait_gone};
use crate::*;

#[test]
fn a_read_that_fails_once_is_tried_again_and_the_task_completes() {
    for (fault, seen) in [
        (cutpoint::IoFault::Eio, "disk I/O error"),
        (
            cutpoint::IoFault::Corrupt,
            "database disk image is malformed",
        ),
    ] {
        let mut rig = Rig::new(&[]);
        // The third snapshot: the provider is up, the conversation open,
        // the prompt's turn not started yet.
        let client = rig.start(Some("runner.read.task#3"));
        submit(&client, &rig, "t1", "m1");
        let held = rig.hold();
        assert_eq!(held.hit.point, "runner.read.task");
        held.fail(fault).unwrap();
        let task = client.wait_settled("t1", WAIT).unwrap();
        assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
        assert_eq!(rig.turn_starts("m1"), 1, "the prompt is sent once");
        assert_eq!(rig.count_in("turn/start"), 1);
        rig.assert_effects_once();
        assert!(rig.log().contains(seen), "{fault}: {}", rig.log());
    }
}

/// Answers every hit of the rig's listener: the first `pass` go on, the
/// next `fail` fail with `fault`, the rest go on, until `stop`. Returns
/// how many it failed.
fn answer_hits(
    rig: &Rig,
    pass: usize,
    fail: usize,
    fault: cutpoint::IoFault,
    stop: &AtomicBool,
) -> usize {
    let (mut seen, mut failed) = (0, 0);
    while !stop.load(Ordering::SeqCst) {
        let Ok(held) = rig.listener.accept_hit(Duration::from_millis(50)) else {
            continue;
        };
        seen += 1;
        if seen > pass && failed < fail {
            held.fail(fault).unwrap();
            failed += 1;
        } else {
            held.resume().unwrap();
        }
    }
    failed
}

#[test]
fn a_read_that_keeps_failing_settles_storage_failed_and_a_retry_completes() {
    let mut rig = Rig::new(&[]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.read.turns#*"));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The first two reads of the turns (a provider started, a
        // conversation opened) go on; the next five are corrupt.
        let answering = s.spawn(|| answer_hits(&rig, 2, 5, cutpoint::IoFault::Corrupt, &stop));
        submit(&client, &rig, "t1", "m1");
        let task = client.wait_settled("t1", WAIT).unwrap();
        assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
        assert_eq!(cause(&task), "storage_failed", "{task}");
        assert_eq!(task.pointer("/cause/recoverable"), Some(&json!(false)));
        let message = task.pointer("/cause/message").and_then(Value::as_str);
        assert!(
            message.is_some_and(|m| m.contains("5 times") && m.contains("malformed")),
            "the cause names the tries and what SQLite said: {task}"
        );
        assert_eq!(rig.count_in("turn/start"), 0, "nothing was sent");
        assert_eq!(
            wait_gone(&journal),
            Vec::<u32>::new(),
            "the provider is stopped"
        );
        assert!(
            event_kinds(&client, "t1").contains(&"message.stranded".to_owned()),
            "the prompt is named as waiting for a Retry"
        );
        // The disk serves the reads again: a Retry answers the prompt once.
        let (status, body) = client.retry("t1", "r1").unwrap();
        assert_eq!(status, 201, "{body}");
        let task = client.wait_settled("t1", WAIT).unwrap();
        assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
        stop.store(true, Ordering::SeqCst);
        assert_eq!(answering.join().unwrap(), 5);
    });
    assert_eq!(rig.count_in("turn/start"), 1);
    assert_eq!(
        rig.turn_starts("m1"),
        1,
        "the prompt, once, under its own id"
    );
    assert!(processes_with_arg(&journal).is_empty());
    rig.assert_effects_once();
}
