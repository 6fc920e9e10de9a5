//! The model's table test: one row per contract rule for the answers, as
//! `runner/src/engine/recovery.rs` has one per recovery row, and the
//! effects judged on small ledgers.

use super::*;

/// A request of `kind` with `id` and `text`, the state read before it, and
/// whether a fault came before it; answered `answer` (status, reason).
fn sent(
    kind: RequestKind,
    id: &str,
    text: &str,
    before: Option<TaskState>,
    after_fault: bool,
    answer: Option<(u16, Option<&str>)>,
) -> Sent {
    Sent {
        kind,
        id: id.into(),
        text: text.into(),
        state_before: before,
        after_fault,
        storage_fault: false,
        raced: false,
        answer: answer.map(|(status, reason)| Answer {
            status,
            reason: reason.map(str::to_owned),
        }),
    }
}

use RequestKind::{FollowUp as F, Retry as R, Submit as S};
use TaskState::{Completed, Failed, NeedsHuman, Running};

/// What the model allows for `req` after `history` (each applied with its
/// answer).
fn allowed_after(history: &[Sent], req: &Sent) -> String {
    let mut m = TaskModel::default();
    for s in history {
        m.apply(s);
    }
    m.allowed(req).describe()
}

#[test]
fn the_answers_follow_the_contract_row_by_row() {
    let submit = sent(S, "m1", "Create hello.txt", None, false, Some((201, None)));
    let f1 = sent(F, "f1", "Also add notes", None, false, Some((202, None)));
    let f1_lost = sent(F, "f1", "Also add notes", None, true, None);
    let r1 = sent(R, "r1", "", Some(Failed), true, Some((201, None)));
    let rows: &[(&str, Vec<Sent>, Sent, &str)] = &[
        ("a task is admitted", vec![], submit.clone(), "201"),
        (
            "the same task again: the same answer",
            vec![submit.clone()],
            submit.clone(),
            "201",
        ),
        (
            "the prompt's id with another text",
            vec![submit.clone()],
            sent(S, "m1", "other", None, false, None),
            "409 id_conflict",
        ),
        (
            "a follow-up while nothing was cut",
            vec![submit.clone()],
            sent(F, "f1", "x", None, false, None),
            "202",
        ),
        (
            "a follow-up to a running task",
            vec![submit.clone()],
            sent(F, "f1", "x", Some(Running), true, None),
            "202",
        ),
        (
            "a follow-up to a completed task reopens it",
            vec![submit.clone()],
            sent(F, "f1", "x", Some(Completed), false, None),
            "202",
        ),
        (
            "the fence: a follow-up to a failed task",
            vec![submit.clone()],
            sent(F, "f1", "x", Some(Failed), true, None),
            "409 prior_owner_fence_refused",
        ),
        (
            "the fence: a task that needs a human",
            vec![submit.clone()],
            sent(F, "f1", "x", Some(NeedsHuman), true, None),
            "409 prior_owner_fence_refused",
        ),
        (
            "after a fault, the state unknown: either",
            vec![submit.clone()],
            sent(F, "f1", "x", None, true, None),
            "202, or 409 prior_owner_fence_refused",
        ),
        (
            "the same follow-up again is the same message",
            vec![submit.clone(), f1.clone()],
            sent(F, "f1", "Also add notes", None, false, None),
            "202",
        ),
        (
            "the same follow-up again after the task failed: still the same message",
            vec![submit.clone(), f1.clone()],
            sent(F, "f1", "Also add notes", Some(Failed), true, None),
            "202",
        ),
        (
            "a follow-up's id with another text",
            vec![submit.clone(), f1.clone()],
            sent(F, "f1", "other", None, false, None),
            "409 id_conflict",
        ),
        (
            "the prompt's id as a follow-up",
            vec![submit.clone()],
            sent(F, "m1", "Create hello.txt", None, false, None),
            "409 id_conflict",
        ),
        (
            "a follow-up with no answer may or may not exist",
            vec![submit.clone(), f1_lost.clone()],
            sent(F, "f1", "other", None, true, None),
            "409 id_conflict, or 202, or 409 prior_owner_fence_refused",
        ),
        (
            "a refused follow-up left nothing behind",
            vec![
                submit.clone(),
                sent(F, "f1", "x", Some(Failed), true, Some((409, Some(FENCED)))),
            ],
            sent(F, "f1", "y", Some(Failed), true, None),
            "409 prior_owner_fence_refused",
        ),
        (
            "a Retry of a failed task",
            vec![submit.clone()],
            sent(R, "r1", "", Some(Failed), true, None),
            "201",
        ),
        (
            "a Retry of a task that needs a human",
            vec![submit.clone()],
            sent(R, "r1", "", Some(NeedsHuman), true, None),
            "201, or 409 process_running, or 409 cleanup_quarantined",
        ),
        (
            "a Retry of a completed task",
            vec![submit.clone()],
            sent(R, "r1", "", Some(Completed), false, None),
            "409 nothing_to_retry",
        ),
        (
            "a Retry of a running task",
            vec![submit.clone()],
            sent(R, "r1", "", Some(Running), true, None),
            "409 execution_active",
        ),
        (
            "the same Retry again answers its run",
            vec![submit.clone(), r1.clone()],
            sent(R, "r1", "", Some(Completed), true, None),
            "201",
        ),
        (
            "the same Retry again while its run goes",
            vec![submit.clone(), r1.clone()],
            sent(R, "r1", "", Some(Running), true, None),
            "201",
        ),
        (
            "a Retry under a follow-up's id",
            vec![submit.clone(), f1.clone()],
            sent(R, "f1", "", Some(Failed), true, None),
            "409 nothing_to_retry",
        ),
        (
            "a follow-up under a Retry's id",
            vec![submit.clone(), r1.clone()],
            sent(F, "r1", "x", Some(Completed), true, None),
            "409 id_conflict",
        ),
    ];
    for (rule, history, req, want) in rows {
        assert_eq!(allowed_after(history, req), *want, "{rule}");
    }
}

#[test]
fn a_storage_fault_allows_a_503_and_a_race_allows_an_active_run() {
    let mut s = sent(F, "f1", "x", None, false, None);
    s.storage_fault = true;
    assert_eq!(
        TaskModel::default().allowed(&s).describe(),
        "202, or 503 storage_failed"
    );
    let mut r = sent(R, "r2", "", Some(Failed), true, None);
    r.raced = true;
    assert_eq!(
        TaskModel::default().allowed(&r).describe(),
        "201, or 409 execution_active"
    );
}

#[test]
fn judging_names_the_request_and_what_was_allowed() {
    // The reproduction: the same follow-up twice (202, 202), then
    // its id with another text refused id_conflict: every answer allowed.
    let history = vec![
        sent(S, "m1", "Create hello.txt", None, false, Some((201, None))),
        sent(F, "f1", "Also add notes", None, false, Some((202, None))),
        sent(F, "f1", "Also add notes", None, false, Some((202, None))),
        sent(
            F,
            "f1",
            "Something else",
            None,
            false,
            Some((409, Some(ID_CONFLICT))),
        ),
    ];
    assert!(TaskModel::judge(&history).is_empty());
    // A runner that fences a follow-up to a task nothing cut.
    let wrong = vec![
        sent(S, "m1", "Create hello.txt", None, false, Some((201, None))),
        sent(
            F,
            "f1",
            "Also add notes",
            None,
            false,
            Some((409, Some(FENCED))),
        ),
    ];
    let problems: Vec<String> = TaskModel::judge(&wrong).into_iter().map(|p| p.2).collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("follow_up f1 was answered 409 prior_owner_fence_refused"),
        "{problems:?}"
    );
    assert!(problems[0].contains("allows 202"), "{problems:?}");
    // No answer (status 0) is indeterminate, never judged here.
    let lost = vec![sent(F, "f1", "x", None, false, Some((0, None)))];
    assert!(TaskModel::judge(&lost).is_empty());
}

fn m(id: &str, asks: &[&str], answered: bool, excused: &[&str]) -> MessageEffects {
    MessageEffects {
        id: id.into(),
        asks: Some(asks.iter().map(|s| s.to_string()).collect()),
        must_run: asks.iter().map(|s| s.to_string()).collect(),
        answered,
        excused: excused.iter().map(|s| s.to_string()).collect(),
    }
}

fn e(key: &str, by: &str, line: usize) -> Effect {
    Effect {
        key: key.into(),
        by: by.into(),
        line,
    }
}

#[test]
fn effects_are_judged_per_message_not_counted() {
    // The second finding: a Retry re-sent "Also add notes" and the
    // model ran write-hello again; the count (2) was right, the effects not.
    let msgs = [
        m("m1", &["write-hello"], true, &[]),
        m("f1", &["write-notes"], false, &[]),
        m("r1", &["write-notes"], true, &[]),
    ];
    let wrong = [e("write-hello", "m1", 1), e("write-hello", "r1", 2)];
    let problems: Vec<String> = judge_effects(&msgs, &wrong)
        .into_iter()
        .map(|p| p.0)
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains(
            "effect write-hello ran under message r1, whose content asks for write-notes"
        ),
        "{problems:?}"
    );
    assert!(
        problems[1].contains(
            "message r1 was answered by a completed turn but its effect write-notes never ran"
        ),
        "{problems:?}"
    );
    let right = [e("write-hello", "m1", 1), e("write-notes", "r1", 2)];
    assert!(judge_effects(&msgs, &right).is_empty());
    // A message not answered (its run failed) may have run nothing.
    assert!(
        judge_effects(
            &msgs,
            &[e("write-hello", "m1", 1), e("write-notes", "r1", 2)]
        )
        .is_empty()
    );
    // An excused key (a declined approval, a call the model gave up on).
    let excused = [m("m1", &["a", "b"], true, &["b"])];
    assert!(judge_effects(&excused, &[e("a", "m1", 1)]).is_empty());
    // A message whose content is unknown asks nothing of the judgement.
    let unknown = [MessageEffects {
        id: "fx1".into(),
        asks: None,
        must_run: vec![],
        answered: true,
        excused: vec![],
    }];
    assert!(judge_effects(&unknown, &[e("anything", "fx1", 1)]).is_empty());
}

#[test]
fn a_task_nothing_cut_must_complete() {
    assert!(must_complete(0));
    assert!(!must_complete(1));
}
