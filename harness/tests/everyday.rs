//! CI and everyday use through the `turncut` binary: shards that merge,
//! replay that reproduces, bad input refused before any cell runs, a closed
//! stdout, and a fail budget.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use harness::model::{Verdict, WaveResult};

/// The one scenario id the small waves here use (one discovery run).
const ID: &str = "everyday-workflows.runner-codex.local.single-task";

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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn wave_at(dir: &Path) -> WaveResult {
    harness::report::read_wave(&dir.join("wave.json")).unwrap()
}

/// A runner that leaks its credential into its state directory whenever a
/// cut is armed, so every cut cell fails the secrecy oracle and clean runs
/// pass: a custom `--runner-cmd` with a real, repeatable failure.
fn leaky_runner(dir: &Path) -> PathBuf {
    let path = dir.join("leaky-runner.sh");
    let script = format!(
        "#!/bin/sh\n\
         state=''; prev=''\n\
         for a in \"$@\"; do [ \"$prev\" = --state-dir ] && state=\"$a\"; prev=\"$a\"; done\n\
         if [ -n \"$TURNCUT_CUT_ARM\" ]; then mkdir -p \"$state\"; printf '%s' \"$TURNCUT_PROVIDER_API_KEY\" > \"$state/leak.txt\"; fi\n\
         exec '{}' runnerd \"$@\"\n",
        env!("CARGO_BIN_EXE_turncut")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// (cell id, name, verdict) of every cell, in order.
fn cells_of(w: &WaveResult) -> Vec<(String, String, Verdict)> {
    w.cells
        .iter()
        .map(|c| (c.spec.cell_id.clone(), c.spec.name(), c.verdict))
        .collect()
}

#[test]
fn two_shards_merge_into_the_unsharded_wave_with_their_cell_directories() {
    let dir = tempfile::tempdir().unwrap();
    let runner = leaky_runner(dir.path());
    let wave = |out: &Path, shard: Option<&str>| {
        let mut cmd = turncut();
        cmd.args([
            "wave", "--seed", "11", "--budget", "6", "--jobs", "2", "--only", ID,
        ])
        // The merge of stage-1 shards; tests/plan.rs merges stage 2 too.
        .arg("--no-recuts")
        .arg("--runner-cmd")
        .arg(&runner)
        .arg("--out")
        .arg(out);
        if let Some(s) = shard {
            cmd.args(["--shard", s]);
        }
        run(&mut cmd)
    };
    let whole = dir.path().join("whole");
    let one = dir.path().join("one");
    let two = dir.path().join("two");
    let merged = dir.path().join("merged");
    for (out, shard) in [(&whole, None), (&one, Some("1/2")), (&two, Some("2/2"))] {
        let o = wave(out, shard);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    }
    let step_summary = dir.path().join("step-summary.md");
    let o = run(turncut()
        .args(["report", "merge"])
        .args([&one, &two])
        .arg("--out")
        .arg(&merged)
        .env("GITHUB_STEP_SUMMARY", &step_summary));
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));

    let (w, m) = (wave_at(&whole), wave_at(&merged));
    assert_eq!(wave_at(&one).wave_id, wave_at(&two).wave_id);
    assert_eq!(m.wave_id, w.wave_id);
    assert_eq!(cells_of(&m), cells_of(&w));
    assert_eq!(m.cells.len(), 6);
    let failing: Vec<&str> = m
        .cells
        .iter()
        .filter(|c| c.verdict != Verdict::Pass)
        .map(|c| c.spec.cell_id.as_str())
        .collect();
    assert!(!failing.is_empty(), "the leaky runner fails every cut cell");
    for id in failing {
        let script = merged.join("cells").join(id).join("reproduce.sh");
        assert!(script.is_file(), "{} kept by the merge", script.display());
        assert_eq!(
            std::fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert!(merged.join("cells").join(id).join("timeline.txt").is_file());
    }
    let summary = std::fs::read_to_string(&step_summary).unwrap();
    assert!(
        summary.contains(&format!("# turncut wave `{}`", m.wave_id)),
        "{summary}"
    );
}

#[test]
fn replay_and_reproduce_sh_use_the_custom_runner_of_the_wave() {
    let dir = tempfile::tempdir().unwrap();
    let runner = leaky_runner(dir.path());
    let out = dir.path().join("wave");
    let o = run(turncut()
        .args(["wave", "--seed", "5", "--budget", "2", "--only", ID])
        .args(["--idle-timeout-ms", "400"])
        .arg("--runner-cmd")
        .arg(&runner)
        .arg("--out")
        .arg(&out));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let w = wave_at(&out);
    assert_eq!(w.run.runner_cmd, Some(vec![runner.display().to_string()]));
    assert_eq!(w.run.idle_timeout_ms, 400);
    assert_eq!(w.run.scenarios, None, "built-in scenarios");
    assert_eq!(w.run.turncut_version, env!("CARGO_PKG_VERSION"));
    let failed = w
        .cells
        .iter()
        .find(|c| c.verdict == Verdict::Fail)
        .expect("a failing cell");
    assert!(
        failed
            .oracles
            .iter()
            .any(|o| o.oracle == harness::model::Oracle::Secrecy && o.verdict == Verdict::Fail),
        "{failed:?}"
    );

    // replay runs the leaky runner again: the same failure, exit 1.
    let o = run(turncut().arg("replay").arg(out.join(&failed.spec.cell_id)));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("same result") && text.contains("secrecy fail"),
        "{text}"
    );

    // With the built-in runner instead the cell passes: a different result
    // also exits 1, and says so.
    let o = run(turncut()
        .arg("replay")
        .arg(out.join("cells").join(&failed.spec.cell_id))
        .arg("--runner-cmd")
        .arg(format!("{} runnerd", env!("CARGO_BIN_EXE_turncut"))));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("DIFFERENT"), "{text}");

    // reproduce.sh: executable, the absolute turncut, no --scenarios for
    // built-in scenarios, and it fails the same way.
    let script = out
        .join("cells")
        .join(&failed.spec.cell_id)
        .join("reproduce.sh");
    let body = std::fs::read_to_string(&script).unwrap();
    assert!(body.contains(env!("CARGO_BIN_EXE_turncut")), "{body}");
    assert!(!body.contains("--scenarios"), "{body}");
    assert!(body.contains("--idle-timeout-ms 400"), "{body}");
    let o = run(Command::new(&script).current_dir(dir.path()));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("1 fail"), "{text}");
}

/// A copy of the built-in scenario `single-task` with its chaos replaced.
fn scenario_dir(chaos: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = harness::scenario::BUILTIN
        .iter()
        .find(|(name, _)| *name == "single-task.toml")
        .unwrap()
        .1;
    let start = text.find("[chaos]").unwrap();
    let end = text.find("[expect]").unwrap();
    let text = format!("{}[chaos]\n{chaos}\n\n{}", &text[..start], &text[end..])
        .lines()
        .map(|l| match l.starts_with("profiles = [") {
            true => "profiles = [\"runner-codex\"]",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("profiles = [\"runner-codex\"]\n"), "{text}");
    std::fs::write(dir.path().join("s.toml"), text).unwrap();
    dir
}

/// Runs turncut, expects exit 2 before any cell ran, with `needle` on
/// stderr.
fn refused(args: &[&str], scenarios: Option<&Path>, needle: &str) {
    let mut cmd = turncut();
    cmd.args(args);
    if let Some(s) = scenarios {
        cmd.arg("--scenarios").arg(s);
    }
    let o = run(&mut cmd);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
    assert!(!err.contains("cells, "), "no cell ran: {err}");
}

#[test]
fn a_misspelt_cut_point_is_refused_with_a_suggestion() {
    refused(
        &[
            "run",
            ID,
            "--cut",
            "runner.turn_intent.persistd#1",
            "--fault",
            "kill-runner",
        ],
        None,
        "never reaches point runner.turn_intent.persistd (did you mean \"runner.turn_intent.persisted\"?)",
    );
}

#[test]
fn an_occurrence_beyond_the_clean_run_is_refused() {
    refused(
        &[
            "run",
            ID,
            "--cut",
            "runner.turn_intent.persisted#9",
            "--fault",
            "kill-runner",
        ],
        None,
        "reaches runner.turn_intent.persisted 1 time(s), so #9 never happens",
    );
}

#[test]
fn a_misspelt_runner_point_in_a_scenario_is_refused_at_its_place() {
    let dir =
        scenario_dir("cut = [\"runner.turn_intent.persisted\", \"runner.turn_acepted.persisted\"]");
    let file = dir.path().join("s.toml").display().to_string();
    refused(
        &["wave", "--seed", "1"],
        Some(dir.path()),
        &format!(
            "{file}:19:40: cut point runner.turn_acepted.persisted never happens in a clean run of any profile of this scenario (did you mean \"runner.turn_accepted.persisted\"?)"
        ),
    );
}

#[test]
fn a_misspelt_provider_point_in_a_scenario_is_refused_at_its_place() {
    let dir = scenario_dir("cut = [\"codex.turn.recordd\"]");
    let file = dir.path().join("s.toml").display().to_string();
    refused(
        &["run", "everyday-workflows.runner-codex.local.single-task"],
        Some(dir.path()),
        &format!(
            "{file}:19:8: cut point codex.turn.recordd never happens in a clean run of any profile of this scenario (did you mean \"codex.turn.recorded\"?)"
        ),
    );
}

#[test]
fn an_unknown_fault_in_a_scenario_is_refused_with_a_suggestion() {
    let dir = scenario_dir("faults = [\"kill-runer\"]");
    let file = dir.path().join("s.toml").display().to_string();
    refused(
        &["list"],
        Some(dir.path()),
        &format!("{file}:19:11: unknown fault \"kill-runer\" (did you mean \"kill-runner\"?)"),
    );
}

#[test]
fn an_unknown_fault_on_the_command_line_lists_the_faults() {
    refused(
        &[
            "run",
            ID,
            "--cut",
            "runner.turn_intent.persisted#1",
            "--fault",
            "kill-runnr",
        ],
        None,
        &format!(
            "[possible values: {}]",
            harness::model::Fault::ALL.map(|f| f.as_str()).join(", ")
        ),
    );
}

#[test]
fn out_under_a_regular_file_is_refused_before_planning() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("wave");
    refused(
        &["wave", "--budget", "2", "--out", out.to_str().unwrap()],
        None,
        &format!("{} is a file, not a directory", file.display()),
    );
}

#[test]
fn a_zero_budget_is_refused() {
    refused(&["wave", "--budget", "0"], None, "must be at least 1");
}

#[test]
fn list_into_a_closed_pipe_exits_quietly() {
    let mut child = turncut()
        .arg("list")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end at once, as `head -1` does after its line.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A runner that works for the clean traced discovery run but exits at
/// once in every cell: a runner that cannot work.
fn broken_runner(dir: &Path) -> PathBuf {
    let path = dir.join("broken-runner.sh");
    let script = format!(
        "#!/bin/sh\n[ -n \"$TURNCUT_CUT_TRACE\" ] && exec '{}' runnerd \"$@\"\nexit 1\n",
        env!("CARGO_BIN_EXE_turncut")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn max_fail_stops_a_broken_runner_early_with_a_partial_report() {
    let dir = tempfile::tempdir().unwrap();
    let runner = broken_runner(dir.path());
    let out = dir.path().join("wave");
    let started = Instant::now();
    let o = run(turncut()
        .args([
            "wave",
            "--seed",
            "3",
            "--only",
            ID,
            "--jobs",
            "1",
            "--max-fail",
            "3",
        ])
        .arg("--runner-cmd")
        .arg(&runner)
        .arg("--out")
        .arg(&out));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let w = wave_at(&out);
    assert_eq!(w.cells.len(), 3, "one job: exactly three cells ran");
    assert!(w.not_run > 10, "{}", w.not_run);
    let stopped = w.stopped.clone().unwrap();
    assert!(stopped.contains("--max-fail 3"), "{stopped}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains(&format!("{} planned cells did not run", w.not_run)),
        "{summary}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("NOT COMPLETE"));
}

#[test]
fn ctrl_c_writes_a_partial_report() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wave");
    let mut child = turncut()
        .args(["wave", "--seed", "4", "--only", ID, "--jobs", "1", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Plain progress lines (stderr is not a terminal): interrupt after the
    // first finished cell.
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map(Result::unwrap)
        .find(|l| l.starts_with("[1/"))
        .expect("a progress line");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{first}\n{}", rest.join("\n"));
    let w = wave_at(&out);
    assert!(
        !w.cells.is_empty() && w.not_run > 0,
        "{} ran",
        w.cells.len()
    );
    assert!(w.stopped.unwrap().contains("interrupted"));
}

#[test]
fn the_built_in_scenarios_need_no_source_tree() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(turncut().arg("list").current_dir(dir.path()));
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().count(),
        harness::scenario::load(None)
            .unwrap()
            .iter()
            .map(|s| s.ids().len())
            .sum::<usize>()
    );
    assert!(text.contains(ID), "{text}");
}

#[test]
fn a_wave_written_again_into_its_directory_keeps_no_stale_cells() {
    let dir = tempfile::tempdir().unwrap();
    let runner = leaky_runner(dir.path());
    let out = dir.path().join("wave");
    let wave = |runner: Option<&Path>| {
        let mut cmd = turncut();
        cmd.args([
            "wave", "--seed", "9", "--budget", "2", "--only", ID, "--out",
        ])
        .arg(&out);
        if let Some(r) = runner {
            cmd.arg("--runner-cmd").arg(r);
        }
        run(&mut cmd)
    };
    assert_eq!(wave(Some(&runner)).status.code(), Some(1));
    assert!(out.join("cells").is_dir());
    // The same wave id with the built-in runner: every cell passes, and the
    // failing run's cell directories are gone.
    assert_eq!(wave(None).status.code(), Some(0));
    assert!(!out.join("cells").exists());
}

#[test]
fn bad_schedules_and_explore_options_are_refused_before_anything_runs() {
    let schedule = |s: &str, needle: &str| refused(&["run", ID, "--schedule", s], None, needle);
    schedule(
        "runner.turn_intent.persisted#1/boom",
        "unknown fault \"boom\"; faults are kill-runner",
    );
    schedule(
        "runner.turn_intent.persisted/kill-runner",
        "the cut needs #N",
    );
    schedule(
        "runner.turn_intent.persisted#1/fail-write",
        "write faults apply only at the runner's before-write points",
    );
    schedule(
        "runner.turn_intent.persisted#1/fail-read",
        "read faults apply only at the runner's before-read points",
    );
    schedule(
        "runner.write.turn_intent#1/corrupt-read",
        "read faults apply only at the runner's before-read points",
    );
    schedule(
        "runner.read.turns#1/follow-up",
        "a before-read point takes only fail-read, corrupt-read, kill-runner and power-cut",
    );
    schedule(
        "runner.turn_intent.persisted#1/kill-runner+acp.turn.recorded#1/kill-provider",
        "event 2 (acp.turn.recorded#1/kill-provider): everyday-workflows.runner-codex.local.single-task runs no component with acp.* points",
    );
    schedule(
        "runner.write.turn_intent#1/follow-up",
        "a before-write point takes only fail-write, disk-full, kill-runner and power-cut",
    );
    refused(
        &["explore", "--time", "0"],
        None,
        "--time 0 would explore nothing",
    );
    refused(&["explore", "--time", "soon"], None, "--time \"soon\"");
    refused(&["explore", "--events", "0"], None, "--events \"0\"");
    refused(&["explore", "--events", "2-9"], None, "MAX <= 8");
    refused(
        &["explore", "--only", "no-such-scenario"],
        None,
        "no scenario matches --only",
    );
}
