//! `turncut crash-round` end to end, small: tasks on one runner state, the
//! runner SIGKILLed at seeded moments (the spawn window among them), with
//! providers that leave long-lived children; nothing lost, duplicated or
//! left behind.

use std::path::Path;
use std::process::Command;

#[test]
fn a_small_crash_round_loses_duplicates_and_leaves_nothing() {
    let exe = Path::new(env!("CARGO_BIN_EXE_turncut"));
    let out = Command::new(exe)
        .args([
            "crash-round",
            "--tasks",
            "12",
            "--kills",
            "3",
            "--seed",
            "5",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "lost:               0",
        "duplicated turns:   0",
        "duplicated effects: 0",
        "orphan processes:   0",
    ] {
        assert!(stdout.contains(line), "{line:?} missing:\n{stdout}");
    }
    assert!(
        stdout.contains("(reached)"),
        "some kill hit its moment:\n{stdout}"
    );
}

#[test]
fn a_crash_round_with_no_tasks_is_bad_input() {
    let exe = Path::new(env!("CARGO_BIN_EXE_turncut"));
    let out = Command::new(exe)
        .args(["crash-round", "--tasks", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
