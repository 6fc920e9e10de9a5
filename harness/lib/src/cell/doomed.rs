//! The processes an event dooms, so that a later event is never counted
//! on the remains of what an earlier one killed.
//!
//! A schedule's later event is the N-th hit of its point *after* the event
//! before it. Hits of a process that event killed or stopped are not part
//! of what came after it: they are the remains of the old run, racing the
//! signal (a provider thread before SIGKILL lands, or a killed runner's
//! provider going on until the restarted runner stops it). Whether such a
//! hit happens is timing, so a later event counted on it would sometimes
//! never come (`unknown`). Which processes an event dooms is decided when
//! the event matches, from the cell's live processes then:
//!
//! | fault | doomed |
//! |---|---|
//! | `kill-runner`, `kill-both`, `power-cut` | every process of the cell (a restarted runner stops its predecessor's providers) |
//! | `kill-provider`, `hang-provider` | every process of the cell but the runner |
//! | storage faults, controller actions | none |
//!
//! A real product's fake model API, started by the harness and living
//! across every restart, is never doomed. The cell skips doomed pids when
//! it counts (`faults::is_next_event`), and the event's trace mark lists
//! them so that discovery (`discover::discover_after`) numbers the recovery's
//! hits exactly as the cell will.

use std::path::Path;

use crate::model::Fault;
use crate::nemesis;

/// The trace line a cell writes when it applies an event (`n` is the
/// event's number, from 1).
pub const EVENT_MARK: &str = "turncut.event.applied";

/// The trace mark's field that lists the pids an event doomed.
const FIELD: &str = "doomed";

/// The pids `fault` dooms among the live processes tagged `tag`: `runner`
/// is spared by a provider fault, `keep` (a real product's model API) by
/// every fault.
pub(super) fn doomed_by(
    fault: Fault,
    tag: &str,
    runner: Option<u32>,
    keep: Option<u32>,
) -> Vec<u32> {
    let spare_runner = match fault {
        Fault::KillRunner | Fault::KillBoth | Fault::PowerCut => false,
        Fault::KillProvider | Fault::HangProvider => true,
        // Controller actions, storage faults and error answers kill nothing.
        _ => return Vec::new(),
    };
    let mut pids: Vec<u32> = nemesis::tagged_processes(tag)
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| Some(*pid) != keep && !(spare_runner && Some(*pid) == runner))
        .collect();
    // The runner may have lost its tag (a `--runner-cmd` that clears the
    // environment): a runner fault dooms it by pid.
    if !spare_runner
        && let Some(r) = runner
        && !pids.contains(&r)
    {
        pids.push(r);
    }
    pids
}

/// Adds the doomed pids to an event's trace mark.
pub(super) fn mark(line: &mut serde_json::Value, doomed: &[u32]) {
    line[FIELD] = serde_json::json!(doomed);
}

/// The pids doomed by event `n` (from 1), read from its mark in the trace
/// at `path` (none when the mark lists none or is missing).
pub fn doomed_in_trace(path: &Path, n: u64) -> std::io::Result<Vec<u32>> {
    let text = std::fs::read_to_string(path)?;
    let mark = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["point"] == EVENT_MARK && v["n"] == n);
    Ok(mark
        .and_then(|m| m[FIELD].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_u64().map(|p| p as u32))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_and_storage_faults_doom_nothing() {
        for f in [
            Fault::FollowUp,
            Fault::Retry,
            Fault::FailWrite,
            Fault::DiskFull,
            Fault::FailRead,
            Fault::CorruptRead,
        ] {
            assert!(doomed_by(f, "no-such-tag", Some(1), None).is_empty(), "{f}");
        }
    }

    #[test]
    fn a_runner_fault_dooms_the_runner_and_a_provider_fault_spares_it() {
        assert_eq!(
            doomed_by(Fault::KillRunner, "no-such-tag", Some(7), None),
            vec![7]
        );
        assert_eq!(
            doomed_by(Fault::PowerCut, "no-such-tag", Some(7), None),
            vec![7]
        );
        assert!(doomed_by(Fault::KillProvider, "no-such-tag", Some(7), None).is_empty());
        assert!(doomed_by(Fault::HangProvider, "no-such-tag", Some(7), None).is_empty());
    }

    #[test]
    fn a_provider_fault_dooms_the_cells_other_processes() {
        let tag = format!("doomed-test-{}", std::process::id());
        // The shell says `up` once it runs (its environment, the tagged one,
        // is in /proc from its exec on), then waits on its stdin with no
        // further exec: a process in the middle of an exec shows an empty
        // environment for a moment (CI saw this test miss a shell that
        // went on to `exec sleep`).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo up; read never"])
            .env(nemesis::TAG_ENV, &tag)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut up = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut up,
        )
        .unwrap();
        let pid = child.id();
        let provider = doomed_by(Fault::KillProvider, &tag, Some(7), None);
        let kept = doomed_by(Fault::KillProvider, &tag, Some(7), Some(pid));
        let runner = doomed_by(Fault::KillRunner, &tag, Some(pid), None);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(provider, vec![pid]);
        assert!(kept.is_empty(), "the model API is never doomed");
        assert_eq!(
            runner,
            vec![pid],
            "a runner tagged like the rest counts once"
        );
    }

    #[test]
    fn the_mark_round_trips_through_a_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let mut line =
            serde_json::json!({ "role": "turncut", "pid": 1, "point": super::EVENT_MARK, "n": 1 });
        mark(&mut line, &[11, 12]);
        std::fs::write(
            &path,
            format!("{{\"role\":\"runner\",\"pid\":2,\"point\":\"x\",\"n\":1}}\n{line}\n"),
        )
        .unwrap();
        assert_eq!(doomed_in_trace(&path, 1).unwrap(), vec![11, 12]);
        assert!(doomed_in_trace(&path, 2).unwrap().is_empty());
    }
}
