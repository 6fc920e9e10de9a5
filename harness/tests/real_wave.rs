//! The real products' profiles in waves, through the `turncut` binary: a
//! sampled wave on the real codex app-server, the real opencode serve and
//! the real opencode acp under kills and hangs, judged by the same oracles from the
//! product's own state; and a product that is not installed listed as
//! skipped with its reason, never run and never passed.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use harness::model::{Verdict, WaveResult};

/// Cells of a real profile's wave here: one-cut cells of its single-task
/// scenario (the whole wave runs with `turncut wave --only <profile>`, and
/// the workflow's real-products job runs 40 cells of each). An OpenCode cell
/// starts the real server once per runner (its turns are then read from its
/// SQLite store) and costs about 11 s at 2 jobs, a codex cell about 2.6 s;
/// the waves run side by side, the two OpenCode ones one at a time
/// ([`OPENCODE`]).
fn budget(profile: &str) -> usize {
    if profile.contains("opencode") { 2 } else { 10 }
}

fn turncut() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turncut"));
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    cmd.env_remove("GITHUB_STEP_SUMMARY");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    eprintln!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn wave_at(dir: &Path) -> WaveResult {
    harness::report::read_wave(&dir.join("wave.json")).unwrap()
}

/// Held by an OpenCode wave: its server takes seconds of CPU to start, and
/// at three test threads (`.ci/run`) both OpenCode waves and the codex one
/// started their products at once; on a loaded host `opencode acp` then
/// answered `initialize` after 20 s, past the runner's floor, and the clean
/// runs could not be planned.
static OPENCODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A sampled wave of `profile`'s scenario ids, or `skipped: …`.
fn sampled_wave(profile: &str) {
    let _one = profile
        .contains("opencode")
        .then(|| OPENCODE.lock().unwrap_or_else(|e| e.into_inner()));
    let real = wire::profiles::real(profile).unwrap();
    if let Err(why) =
        harness::real::locate_or_install(real, &harness::report::console(Default::default()))
    {
        common::skip("real", &why);
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let only = format!("{profile}.local.single-task");
    let status = run(turncut()
        .args(["wave", "--only", &only, "--seed", "3", "--budget"])
        .arg(budget(profile).to_string())
        .args(["--depth", "1", "--jobs", "2", "--out"])
        .arg(out.path()))
    .status;
    let wave = wave_at(out.path());
    let bad: Vec<String> = wave
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .map(harness::report::cell_line)
        .collect();
    assert!(wave.skipped.is_empty(), "{:?}", wave.skipped);
    assert_eq!(wave.cells.len(), budget(profile));
    assert!(bad.is_empty() && status.success(), "{}", bad.join("\n"));
}

#[test]
fn a_sampled_wave_on_the_real_codex_passes() {
    sampled_wave("runner-codex-real");
}

#[test]
fn a_sampled_wave_on_the_real_opencode_passes() {
    sampled_wave("runner-opencode-real");
}

/// Every cell of this wave once ended `unknown`: `opencode acp` answers
/// `initialize` only after 4.5-6.3 s, and the runner, which bounds a
/// provider's start by its idle timeout, stopped each start at the 5 s floor
/// of the real products. Its floors are now its own (`real::idle_floor_ms`,
/// `real::wait_floor_ms`).
#[test]
fn a_sampled_wave_on_the_real_acp_agent_passes() {
    sampled_wave("runner-acpx-opencode-real");
}

/// Without the product (nothing on PATH, an empty npm prefix, no install),
/// its ids are listed as skipped with the reason in every report; the
/// fakes' ids still run.
#[test]
fn a_real_product_that_is_not_installed_is_listed_as_skipped() {
    let out = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let output = run(turncut()
        .args([
            "wave",
            "--real",
            "--only",
            "single-task",
            "--budget",
            "2",
            "--seed",
            "3",
            "--out",
        ])
        .arg(out.path())
        .env("PATH", "/usr/bin:/bin")
        .env(harness::real::PREFIX_ENV, empty.path())
        .env_remove(harness::real::INSTALL_ENV));
    assert!(output.status.success());
    let wave = wave_at(out.path());
    let skipped: Vec<&str> = wave
        .skipped
        .iter()
        .map(|s| s.scenario_id.as_str())
        .collect();
    assert_eq!(
        skipped,
        vec![
            "everyday-workflows.runner-codex-real.local.single-task",
            "everyday-workflows.runner-opencode-real.local.single-task",
            "everyday-workflows.runner-acpx-opencode-real.local.single-task",
            "everyday-workflows.runner-acpx-codex-real.local.single-task",
            "everyday-workflows.runner-acpx-claude-real.local.single-task",
        ]
    );
    assert!(
        wave.skipped[0]
            .reason
            .contains("turncut providers --install")
    );
    assert!(
        wave.cells
            .iter()
            .all(|c| !c.spec.scenario_id.contains("-real"))
    );
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("**Skipped:**"), "{summary}");
    assert!(summary.contains("## Skipped"), "{summary}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("SKIPPED"), "{stdout}");
}
