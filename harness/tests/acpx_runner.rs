//! acpx (npm `acpx`, pinned in `docs/examples/acpx-runner/package.json`) under
//! turncut through the example adapter `docs/examples/acpx-runner`, which
//! speaks the runner contract and drives acpx's shared runtime and queue owner
//! with the fake ACP agent behind it: `turncut doctor` passes it with a clean
//! cell that passes every oracle. The sampled waves run in `.ci/run` and in
//! the workflow's acpx job;
//! `docs/findings/acpx.md` is what they found. Needs the example's npm
//! dependencies (`npm ci` there; `.ci/run` installs them): without them the
//! test says why it skips, except under CI.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// The adapter's command, or `None` (said) when its dependencies are missing.
fn acpx_runner() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/acpx-runner");
    if dir.join("node_modules/.bin/node").exists() && dir.join("node_modules/acpx").exists() {
        return Some(dir.join("bin/acpx-runner"));
    }
    common::skip(
        "acpx-runner",
        "run `npm ci` in docs/examples/acpx-runner (Node 22, acpx 0.19.1, smol-toml, pinned)",
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

/// The one failure a clean acpx cell may show: finding A1 of
/// `docs/findings/acpx.md`, a race acpx's queue owner wins now and then (it
/// answers the agent's permission request before the runner's acceptance is
/// durable; 1 of 5 clean cells of the seed-44 wave). Any other failure
/// fails the test.
const A1: &str = "before recording its acceptance";

#[test]
fn acpx_passes_the_doctor_with_a_clean_cell_that_passes_every_oracle() {
    let Some(runner) = acpx_runner() else { return };
    let (code, out, err) = turncut(&["doctor", "--runner-cmd", &runner.display().to_string()]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("profiles claimed: runner-acpx-claude\n"),
        "{out}"
    );
    for oracle in harness::oracles::ORACLES {
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{oracle} ")))
            .unwrap_or_else(|| panic!("no row for {oracle}:\n{out}"));
        let a1 = oracle == "contract" && row.contains(A1);
        assert!(row.contains(" pass ") || a1, "{oracle}: {row}\n{out}");
    }
}
