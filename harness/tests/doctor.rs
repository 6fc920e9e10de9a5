//! `turncut doctor` as a user runs it: against runnerd it exits 0 and prints
//! the oracles table; against a runner missing a call or a run-log kind (runnerd
//! behind `fixtures/incomplete_runner.py`, a proxy that hides one of them) it
//! exits 2 naming the missing piece and where the spec says it.

mod common;

use std::path::Path;
use std::process::Command;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn doctor(runner_cmd: &str, profiles: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(exe());
    cmd.args(["doctor", "--runner-cmd", runner_cmd]);
    for p in profiles {
        cmd.args(["--profile", p]);
    }
    let out = cmd.output().expect("run turncut doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn runnerd_passes_the_doctor_on_every_profile_with_the_table() {
    let (code, out, err) = doctor(&format!("{} runnerd", exe().display()), &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("profiles claimed: runner-codex, runner-acpx-claude, runner-opencode, runner-native-openai"),
        "{out}"
    );
    for oracle in harness::oracles::ORACLES {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(oracle) && l.contains("pass")),
            "no passing row for {oracle}:\n{out}"
        );
    }
    assert!(out.contains("a depth-1 wave of single-task plans"), "{out}");
    assert!(out.ends_with("a wave can run: exit 0\n"), "{out}");
}

/// runnerd behind the proxy that makes it incomplete.
fn incomplete(option: &str, value: &str) -> String {
    let proxy = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/incomplete_runner.py");
    format!(
        "python3 {} {option} {value} -- {} runnerd",
        proxy.display(),
        exe().display()
    )
}

#[test]
fn a_runner_without_retry_or_turn_accepted_fails_the_doctor_naming_it() {
    if Command::new("python3").arg("--version").output().is_err() {
        common::skip(
            "python3",
            "python3 is not on PATH (the incomplete runner is a Python proxy)",
        );
        return;
    }
    let (code, out, err) = doctor(&incomplete("--omit-call", "/retry"), &["runner-codex"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        out.contains("MISSING: POST /v1/tasks/{id}/retry: the runner has no such call"),
        "{out}"
    );
    assert!(
        out.contains("the spec: docs/runner-contract.openapi.json paths./v1/tasks/{id}/retry.post"),
        "{out}"
    );

    let (code, out, err) = doctor(
        &incomplete("--drop-kind", "turn.accepted"),
        &["runner-codex"],
    );
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        out.contains(
            "MISSING: runner-codex: the run log of a clean task has no turn.accepted event"
        ),
        "{out}"
    );
    assert!(out.contains("$defs/turn.accepted"), "{out}");
}
