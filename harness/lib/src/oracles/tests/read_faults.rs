//! `storage_failed` after read faults: one failed read does not justify it
//! (the contract tries the read again), a read that failed again does; the
//! same for a Retry answered 503 `storage_failed`.

use super::*;
use crate::evidence::{Action, ActionKind};

/// The harness's records of `faults`, applied at `runner.read.turns`.
fn applied(e: &mut Evidence, faults: &[Fault]) {
    for (i, f) in faults.iter().enumerate() {
        e.actions.push(Action {
            at_ms: 10 + i as u64,
            what: ActionKind::Fault(*f),
            detail: json!({ "point": "runner.read.turns" }),
        });
    }
}

/// The healthy cell's run, settled `storage_failed` after `faults` read
/// faults at `runner.read.turns`.
fn failed_after_reads(faults: &[Fault]) -> Evidence {
    let mut e = good();
    e.spec = Some(CellSpec {
        cell_id: "t001".into(),
        scenario_id: "s".into(),
        seed: 1,
        events: faults
            .iter()
            .enumerate()
            .map(|(i, f)| Event {
                cut: Cut {
                    point: "runner.read.turns".into(),
                    n: 1 + u64::from(i == 0),
                },
                fault: *f,
            })
            .collect(),
    });
    e.fault = faults.first().copied();
    let cause =
        json!({ "code": "storage_failed", "recoverable": false, "message": "a read failed" });
    {
        let mut t = task(&mut e);
        t["state"] = json!("failed");
        t["cause"] = cause.clone();
        t["runs"][0]["status"] = json!("failed");
        t["runs"][0]["cause"] = cause.clone();
    }
    e.events.pop();
    e.events.push(event(
        5,
        "run.settled",
        json!({ "state": "failed", "cause": cause }),
    ));
    applied(&mut e, faults);
    e
}

#[test]
fn one_failed_read_does_not_justify_storage_failed() {
    for fault in [Fault::FailRead, Fault::CorruptRead] {
        let e = failed_after_reads(&[fault]);
        assert_only_fails(&e, "contract", "which no cut-and-restart justifies");
    }
}

#[test]
fn a_read_that_failed_again_when_tried_again_does() {
    let e = failed_after_reads(&[Fault::FailRead, Fault::CorruptRead]);
    let (v, m) = verdict(&judge(&e), "contract");
    assert_eq!(v, Verdict::Pass, "{m}");
}

/// The healthy cell with a Retry answered 503 `storage_failed` and the
/// harness's own records of `faults`.
fn retry_refused_by_the_store(faults: &[Fault]) -> Evidence {
    let mut e = good();
    e.exchanges.push(Exchange {
        task: crate::scenario::FIRST_TASK.to_owned(),
        kind: RequestKind::Retry,
        message_id: "r1".into(),
        text: String::new(),
        status: 503,
        body: json!({ "error": "storage failed", "reason": "storage_failed" }),
        state_before: None,
        expect: None,
        sent_at_ms: 100,
        answered_at_ms: 101,
        injected: false,
    });
    applied(&mut e, faults);
    e
}

#[test]
fn a_retry_answered_503_by_the_store_needs_the_faults_to_justify_it() {
    for faults in [&[][..], &[Fault::FailRead], &[Fault::CorruptRead]] {
        let e = retry_refused_by_the_store(faults);
        let (v, m) = verdict(&judge(&e), "retry.works");
        assert_eq!(v, Verdict::Fail, "{faults:?}: {m}");
        assert!(m.contains("503"), "{faults:?}: {m}");
    }
    for faults in [
        &[Fault::FailWrite][..],
        &[Fault::DiskFull],
        &[Fault::FailRead, Fault::FailRead],
    ] {
        let e = retry_refused_by_the_store(faults);
        let (v, m) = verdict(&judge(&e), "retry.works");
        assert_eq!(v, Verdict::Pass, "{faults:?}: {m}");
    }
}
