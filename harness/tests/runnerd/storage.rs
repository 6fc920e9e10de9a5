//! Storage faults at the runner's writes (`fail-write`, `disk-full`): nothing
//! is sent after a failed write, and Retry answers each message once.

use crate::runnerd::processes::{processes_with_arg, wait_gone};
use crate::*;

#[test]
fn a_failed_write_is_storage_failed_before_any_side_effect() {
    let mut rig = Rig::new(&[]);
    rig.env
        .push(("TURNCUT_RUNNER_FAIL_WRITE".into(), "turn_intent".into()));
    let client = rig.start(None);
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(cause(&task), "storage_failed", "{task}\n{}", rig.log());
    assert_eq!(
        rig.count_in("turn/start"),
        0,
        "nothing was sent after the failed write"
    );
    assert!(rig.ledger().is_empty());
}

/// Holds the runner at the write `point` and fails it with `fault`.
fn fail_write(rig: &Rig, point: &str, fault: cutpoint::IoFault) {
    let held = rig.hold();
    assert_eq!(held.hit.point, point);
    held.fail(fault).unwrap();
}

/// Every `turn/start` the provider received, whatever its message.
fn all_turn_starts(rig: &Rig) -> usize {
    rig.count_in("turn/start")
}

/// A settled `storage_failed` task whose cause names the injected errno.
fn assert_storage_failed(rig: &Rig, task: &Value, errno_text: &str) {
    assert_eq!(state(task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(task), "storage_failed", "{task}");
    let message = task.pointer("/cause/message").and_then(Value::as_str);
    assert!(
        message.is_some_and(|m| m.contains(errno_text)),
        "the cause names the errno ({errno_text}): {task}"
    );
}

/// Retries `task` as `retry_id` and waits for it to complete.
fn retry_completes(client: &RunnerClient, rig: &Rig, task: &str, retry_id: &str) -> Value {
    let (status, body) = client.retry(task, retry_id).unwrap();
    assert_eq!(status, 201, "{body}");
    let settled = client.wait_settled(task, WAIT).unwrap();
    assert_eq!(state(&settled), "completed", "{settled}\n{}", rig.log());
    assert!(event_kinds(client, task).contains(&"stopped_conversation_verified".to_owned()));
    settled
}

#[test]
fn a_failed_turn_intent_sends_nothing_and_a_retry_answers_the_message_once() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        all_turn_starts(&rig),
        0,
        "nothing is sent after a failed intent"
    );
    assert!(rig.ledger().is_empty());

    // The Retry has nothing to re-send (no turn ever started): its run
    // answers the queued prompt, once, under the prompt's own id.
    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(all_turn_starts(&rig), 1, "the prompt is sent exactly once");
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.ledger().len(), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_turn_accepted_fails_the_run_and_a_retry_resends_the_message_once() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_accepted"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_accepted", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        all_turn_starts(&rig),
        1,
        "only the turn whose intent was durable"
    );
    assert_eq!(
        rig.count_in("turn/interrupt") + rig.count_in("item/commandExecution/requestApproval"),
        0
    );

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(
        rig.turn_starts("m1"),
        1,
        "the failed turn is never replayed"
    );
    assert_eq!(rig.turn_starts("r1"), 1, "the Retry re-sends it once");
    rig.assert_effects_once();
}

#[test]
fn a_failed_provider_identity_stops_the_unrecorded_provider_and_a_retry_completes() {
    let mut rig = Rig::new(&[]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.provider_identity"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.provider_identity");
    assert_eq!(processes_with_arg(&journal).len(), 1, "the provider exists");
    held.fail(cutpoint::IoFault::Eio).unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider whose identity could not be recorded is stopped"
    );
    assert_eq!(rig.count_in("thread/start"), 0);

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(all_turn_starts(&rig), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_completion_settle_fails_closed_and_a_retry_completes() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.run_settled#1"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.run_settled", cutpoint::IoFault::Eio);
    // The second settle (the failure) is written: only one write failed.
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    assert_eq!(rig.turn_starts("m1"), 1);

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(rig.turn_starts("r1"), 1);
    rig.assert_effects_once();
}

#[test]
fn a_failed_follow_up_write_answers_503_and_changes_nothing() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.follow_up"));
    submit(&client, &rig, "t1", "m1");
    std::thread::scope(|s| {
        let request = s.spawn(|| client.follow_up("t1", "f1", "Also add a README").unwrap());
        fail_write(&rig, "runner.write.follow_up", cutpoint::IoFault::Eio);
        let (status, body) = request.join().unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["reason"], "storage_failed");
    });
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert!(
        status == 202,
        "the same follow-up again is accepted: {status} {body}"
    );
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("f1"), 1);
}

/// A failed write whose `storage_failed` cannot be recorded either (found
/// by `turncut explore`: `runner.write.provider_spawn_intent#1/fail-write`
/// then `runner.write.run_settled#1/fail-write`): the actor used to end,
/// leaving the task running with no one to run it until a restart. It now
/// starts over from the durable state, where nothing of the failed step is,
/// and the task completes with its message answered once.
#[test]
fn an_outcome_that_cannot_be_recorded_is_not_left_running() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some(
        "runner.write.provider_spawn_intent,runner.write.run_settled",
    ));
    submit(&client, &rig, "t1", "m1");
    fail_write(
        &rig,
        "runner.write.provider_spawn_intent",
        cutpoint::IoFault::Eio,
    );
    fail_write(&rig, "runner.write.run_settled", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// A full disk fails every write of the runner process from the failed
/// intent on: the failure itself cannot be recorded. The runner stops the
/// provider, sends nothing, keeps answering (503 for writes), and after a
/// restart with the disk back resumes the task from what is durable: a
/// turn that never had an intent is started for the first time.
#[test]
fn a_full_disk_at_turn_intent_sends_nothing_and_a_restart_resumes_the_task() {
    let mut rig = Rig::new(&[]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.turn_intent,runner.write.provider_stop"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Enospc);
    // The runner stops the provider and tries to record the stop: the disk
    // is still full, whatever the harness answers.
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.provider_stop");
    held.resume().unwrap();
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider is stopped"
    );
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(
        (status, &body["reason"]),
        (503, &json!("storage_failed")),
        "{body}"
    );
    let (status, task) = client.task("t1").unwrap();
    assert_eq!(status, 200, "reads still work: {task}");
    assert_eq!(state(&task), "running", "nothing could be recorded: {task}");
    assert_eq!(all_turn_starts(&rig), 0, "nothing is sent on a full disk");
    assert!(
        rig.log().contains("No space left on device"),
        "{}",
        rig.log()
    );

    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    assert_eq!(rig.turn_starts("m1"), 1);
    assert_eq!(
        rig.turn_starts("f1"),
        0,
        "the refused follow-up was never admitted"
    );
    rig.assert_effects_once();
}

/// A full disk after the provider accepted the turn: the acceptance cannot
/// be recorded, the provider is stopped, and the restarted runner finds a
/// turn the provider recorded but it never saw accepted: it fails closed,
/// and a Retry with the disk back completes the task.
#[test]
fn a_full_disk_at_turn_accepted_fails_closed_after_a_restart_and_a_retry_completes() {
    // The provider stops once the user message is durable: a turn it could
    // finish before the runner stops it would be adopted as completed, and
    // one without its user message would be sent again.
    let mut rig = Rig::new(&["--hang", "codex.user_message.recorded"]);
    let journal = rig.path("journal.jsonl").display().to_string();
    let client = rig.start(Some("runner.write.turn_accepted"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.turn_accepted");
    // The hang is recorded as fired before it holds the provider, so the
    // Retry's provider does not hang again.
    rig.wait_fact("fault.hang");
    held.fail(cutpoint::IoFault::Enospc).unwrap();
    assert_eq!(
        wait_gone(&journal),
        Vec::<u32>::new(),
        "the provider is stopped"
    );
    let (status, body) = client.retry("t1", "r0").unwrap();
    assert_eq!(status, 409, "the store still says running: {body}");

    rig.kill_runner();
    let client = rig.start(None);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "failed", "{task}\n{}", rig.log());
    assert_eq!(cause(&task), "ambiguous_turn_start", "{task}");
    assert_eq!(rig.turn_starts("m1"), 1, "never replayed");

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(rig.turn_starts("r1"), 1);
    assert_eq!(rig.turn_starts("m1"), 1);
    rig.assert_effects_once();
}

/// A follow-up whose turn intent failed after the first message was
/// answered: the Retry answers the follow-up once and redoes nothing that
/// completed.
#[test]
fn a_retry_after_a_failed_follow_up_intent_answers_only_the_follow_up() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent#2"));
    submit(&client, &rig, "t1", "m1");
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_eq!(state(&task), "completed", "{task}\n{}", rig.log());
    let (status, body) = client.follow_up("t1", "f1", "Also add a README").unwrap();
    assert_eq!(status, 202, "{body}");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client
        .wait_task("t1", WAIT, |t| t["state"] == "failed")
        .unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");

    retry_completes(&client, &rig, "t1", "r1");
    assert_eq!(
        rig.turn_starts("m1"),
        1,
        "the answered prompt is not redone"
    );
    assert_eq!(rig.turn_starts("f1"), 1, "the follow-up is answered once");
    assert_eq!(all_turn_starts(&rig), 2);
    rig.assert_effects_once();
}

/// A Retry refused by a failed write changed nothing: the same Retry again
/// is admitted with one stop proof.
#[test]
fn a_retry_refused_by_a_failed_write_changed_nothing_and_can_be_repeated() {
    let mut rig = Rig::new(&[]);
    let client = rig.start(Some("runner.write.turn_intent,runner.write.retry_admitted"));
    submit(&client, &rig, "t1", "m1");
    fail_write(&rig, "runner.write.turn_intent", cutpoint::IoFault::Eio);
    let task = client.wait_settled("t1", WAIT).unwrap();
    assert_storage_failed(&rig, &task, "Input/output error");
    std::thread::scope(|s| {
        let request = s.spawn(|| client.retry("t1", "r1").unwrap());
        fail_write(&rig, "runner.write.retry_admitted", cutpoint::IoFault::Eio);
        let (status, body) = request.join().unwrap();
        assert_eq!(
            (status, &body["reason"]),
            (503, &json!("storage_failed")),
            "{body}"
        );
    });
    let (status, task) = client.task("t1").unwrap();
    assert_eq!((status, state(&task)), (200, "failed"), "{task}");
    retry_completes(&client, &rig, "t1", "r1");
    let proofs = event_kinds(&client, "t1")
        .iter()
        .filter(|k| *k == "stopped_conversation_verified")
        .count();
    assert_eq!(proofs, 1, "one proof for one admitted Retry");
    assert_eq!(all_turn_starts(&rig), 1);
}

/// A provider whose identity cannot be recorded is stopped whole, container
/// included: a daemon it started in a session of its own with an empty
/// environment (no spawn marker to sweep for) dies with it. The stop of
/// this path used to be the provider's group and its marker alone, and the
/// daemon outlived the task (the default wave found a fake's `--child
/// sleep` alive after `fail-write` at `runner.write.provider_identity`,
/// started while its exec hid its environment from the sweep).
#[test]
fn a_provider_whose_identity_cannot_be_recorded_is_stopped_with_its_container() {
    let mut rig = Rig::new(&[]);
    let pidfile = rig.path("daemon.pid");
    let profiles = std::fs::read_to_string(rig.path("profiles.toml")).unwrap();
    let wrapper = format!(
        "( env -i setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo $! > {} ); exec \\\"$@\\\"",
        pidfile.display()
    );
    let wrapped = profiles.replacen(
        "command = [",
        &format!("command = [\"sh\", \"-c\", \"{wrapper}\", \"sh\", "),
        1,
    );
    std::fs::write(rig.path("profiles.toml"), wrapped).unwrap();
    let client = rig.start(Some("runner.write.provider_identity"));
    submit(&client, &rig, "t1", "m1");
    let held = rig.hold();
    assert_eq!(held.hit.point, "runner.write.provider_identity");
    // The daemon, once it runs `sleep` in its session of its own.
    let until = std::time::Instant::now() + WAIT;
    let daemon = loop {
        let text = std::fs::read_to_string(&pidfile).unwrap_or_default();
        let pid = text.trim().parse::<u32>().ok();
        let cmdline = pid.and_then(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok());
        if let Some(pid) = pid.filter(|_| cmdline.is_some_and(|c| c.starts_with(b"sleep\0"))) {
            break pid;
        }
        assert!(std::time::Instant::now() < until, "no daemon running sleep");
        std::thread::yield_now();
    };
    held.fail(cutpoint::IoFault::Eio).unwrap();
    let task = client.wait_settled("t1", WAIT).unwrap();
    let alive = wire::procstat::live_start_time(daemon).is_some();
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", &daemon.to_string()])
            .status();
    }
    assert_storage_failed(&rig, &task, "Input/output error");
    assert!(!alive, "the provider's daemon {daemon} outlived its stop");
}
