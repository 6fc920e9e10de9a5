//! The TypeScript example runner (`docs/examples/ts-runner`) under turncut, as
//! `docs/your-runner.md` tells a team to run it: `turncut doctor` passes it and
//! its clean cell passes every oracle; a wave of one scenario id whose cut
//! list names points of other protocols and of runnerd (which this runner
//! never shows, and whose other profiles it refuses) plans and passes. The
//! whole sampled wave runs in `.ci/run`. Needs the example's npm dependencies
//! (`npm ci` there; `.ci/run` installs them): without them the test says why
//! it skips, except under CI.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// The runner's command, or `None` (said) when its dependencies are missing.
fn ts_runner() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/ts-runner");
    if dir.join("node_modules/.bin/node").exists() {
        return Some(dir.join("bin/ts-runner"));
    }
    common::skip(
        "ts-runner",
        "run `npm ci` in docs/examples/ts-runner (Node 22 and smol-toml, pinned)",
    );
    None
}

fn turncut(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(exe())
        .args(args)
        .output()
        .expect("run turncut");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_ts_runner_passes_the_doctor_with_a_clean_cell_that_passes_every_oracle() {
    let Some(runner) = ts_runner() else { return };
    let (code, out, err) = turncut(&["doctor", "--runner-cmd", &runner.display().to_string()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("profiles claimed: runner-codex\n"), "{out}");
    assert!(
        out.contains("runner-acpx-claude: refused with 409 unknown_profile"),
        "{out}"
    );
    assert!(!out.contains("already fails"), "{out}");
    for oracle in harness::oracles::ORACLES {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(oracle) && l.contains(" pass ")),
            "no passing row for {oracle}:\n{out}"
        );
    }
}

#[test]
fn a_wave_of_a_scenario_naming_points_this_runner_never_shows_plans_and_passes() {
    let Some(runner) = ts_runner() else { return };
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, err) = turncut(&[
        "wave",
        "--runner-cmd",
        &runner.display().to_string(),
        "--only",
        "runner-codex.local.cut-turn-start-retry",
        "--budget",
        "8",
        "--seed",
        "3",
        "--depth",
        "1",
        "--out",
        &out.path().display().to_string(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{err}");
    assert!(
        err.contains("named cut points no clean run of this runner shows (no cell there)"),
        "{err}"
    );
}

/// A scenario's `[chaos] schedules` entry that names runnerd's own driver
/// points (`runner.codex.response.sent`) is that runner's path, not a
/// mistake in the file, against a runner of `--runner-cmd`: it plans no
/// cell and is said, and the rest of the scenario is planned (it was exit 2).
#[test]
fn a_schedule_this_runner_never_reaches_plans_no_cell_and_is_said() {
    let Some(runner) = ts_runner() else { return };
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let (code, stdout, err) = turncut(&[
        "plan",
        "--runner-cmd",
        &runner.display().to_string(),
        "--only",
        "runner-codex.local.reopened-while-waiting",
        "--seed",
        "3",
        "--no-recuts",
        "--out",
        &plan.display().to_string(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{err}");
    assert!(
        err.contains("reopened-while-waiting.toml:34:14: schedule runner.codex.response.sent#6/kill-runner+runner.item.persisted#2/follow-up runs on no clean run of this runner (no cell)"),
        "{err}"
    );
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(!text.contains("runner.codex.response.sent"), "{text}");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cells = plan["cells"].as_array().map_or(0, Vec::len);
    assert!(cells > 0, "the rest of the scenario is planned: {text}");
}
