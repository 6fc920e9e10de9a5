//! The `turncut` command line as a user runs it: real processes, real
//! reports, documented exit codes.

use std::path::Path;
use std::process::Command;

fn turncut() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_turncut"));
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    cmd
}

#[test]
fn list_shows_the_built_in_scenario_ids() {
    let out = turncut().arg("list").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for id in [
        "everyday-workflows.runner-codex.local.single-task",
        "everyday-workflows.runner-codex.local.recover-controller",
        "everyday-workflows.runner-codex.local.multi-tool-turn",
        "restart-chaos.runner-codex.local.cut-turn-start-retry",
        "restart-chaos.runner-codex.local.lost-active-turn",
        "restart-chaos.runner-codex.local.pending-approval",
        "restart-chaos.runner-codex.local.double-restart",
    ] {
        assert!(text.contains(id), "{id} missing from:\n{text}");
    }
}

#[test]
fn a_sampled_wave_writes_its_reports_and_a_cell_replays_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wave");
    let status = turncut()
        .args([
            "wave",
            "--seed",
            "7",
            "--budget",
            "10",
            "--jobs",
            "2",
            "--no-recuts",
        ])
        // One scenario id: the test pays for one planning, not every id's.
        .args([
            "--only",
            "everyday-workflows.runner-codex.local.single-task",
            "--message-format",
            "json",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(0));
    json_progress_holds_every_cell(&status.stdout, 10);
    for f in ["wave.json", "summary.md", "junit.xml", "report.html"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let wave = harness::report::read_wave(&out.join("wave.json")).unwrap();
    assert_eq!(wave.cells.len(), 10);
    assert!(wave.wave_id.starts_with("w-s7-"), "{}", wave.wave_id);
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert_eq!(
        junit.matches("<testcase").count(),
        10,
        "one test case per cell"
    );
    let first = &wave.cells[0].spec.cell_id;
    let replay = turncut()
        .arg("replay")
        .arg(out.join(first))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(0), "{text}");
    assert!(text.contains("same result"), "{text}");
}

/// `--message-format json`: stdout is JSON lines only, one `cell` line per
/// cell (numbered 1..=N of N), ending with the `wave` outcome.
fn json_progress_holds_every_cell(stdout: &[u8], cells: usize) {
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    let mut done: Vec<u64> = lines
        .iter()
        .filter(|l| l["type"] == "cell")
        .map(|l| {
            assert_eq!(l["total"], cells, "{l}");
            assert_eq!(l["verdict"], "pass", "{l}");
            l["done"].as_u64().unwrap()
        })
        .collect();
    // Two jobs may print their cells in either order.
    done.sort_unstable();
    assert_eq!(done, (1..=cells as u64).collect::<Vec<_>>());
    let last = lines.last().expect("a wave line");
    assert_eq!(last["type"], "wave", "{last}");
    assert_eq!(
        (last["cells"].as_u64(), last["pass"].as_u64()),
        (Some(cells as u64), Some(cells as u64))
    );
    assert!(
        lines.iter().any(|l| l["type"] == "note"),
        "notes go to the stream too"
    );
}

#[test]
fn bad_input_exits_2_with_the_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "suite = \"s\"\ncase = \"c\"\nprofiles = [\"runner-codex\"]\ntitle = \"t\"\n[[steps]]\nsubmit = { prompt = \"x\" }\n[chaos]\nfaults = [\"kill-everything\"]\n",
    )
    .unwrap();
    let out = turncut()
        .args(["list", "--scenarios"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:8:11: unknown fault \"kill-everything\""),
        "{err}"
    );

    let out = turncut()
        .args(["run", "no.such.scenario.id"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario id"));

    let out = turncut()
        .args([
            "run",
            "everyday-workflows.runner-codex.local.single-task",
            "--cut",
            "runner.turn_intent.persisted#1",
            "--fault",
            "kill-everything",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // A command that prints text for people refuses JSON lines rather than
    // mixing the two on stdout; nothing ran.
    for args in [
        &["explore", "--time", "1s"][..],
        &["list"],
        &["wave", "--repeat", "2"],
    ] {
        let out = turncut()
            .args(args)
            .args(["--message-format", "json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("JSON lines are for `run`"), "{args:?}: {err}");
    }
}

#[test]
fn one_cell_runs_and_passes() {
    let out = turncut()
        .args([
            "run",
            "restart-chaos.runner-codex.local.cut-turn-start-retry",
            "--cut",
            "codex.turn.recorded#1",
            "--fault",
            "kill-runner",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("1 cells, 1 pass"), "{text}");
}

#[test]
fn the_release_runner_has_no_seeded_bugs() {
    let dir = tempfile::tempdir().unwrap();
    let out = turncut()
        .args(["runnerd", "--seeded-bug", "null-cause", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seeded-bug"));
}

/// The pids of the processes whose parent is `pid`, with their command lines.
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == pid {
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            out.push((child, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

/// Whether `pid` still runs (a zombie no one reaped has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

/// The runner and a stress worker are this binary, started without a fork
/// of the harness (`supervisor::GroupChild::spawn`): each asks for its own
/// death signal at start. A SIGKILLed `turncut` still takes them with it.
#[test]
fn the_runner_and_a_stress_worker_die_with_a_sigkilled_turncut() {
    let mut harness = turncut()
        .args([
            "--stress",
            "1",
            "--idle-timeout-ms",
            "60000",
            "--hang-idle-timeout-ms",
            "60000",
            "--cell-wait-ms",
            "60000",
            "run",
            "everyday-workflows.runner-codex.local.single-task",
            "--cut",
            "codex.turn_start.received#1",
            "--fault",
            "hang-provider",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let children = loop {
        let children = children_of(harness.id());
        let has = |what: &str| children.iter().any(|(_, c)| c.contains(what));
        if has(" runnerd ") && has(harness::stress::WORKER_ARG) {
            break children;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "turncut never had both a runner and a stress worker: {children:?}"
        );
        std::thread::yield_now();
    };
    eprintln!("children of turncut: {children:?}");
    harness.kill().unwrap();
    harness.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while children.iter().any(|(pid, _)| alive(*pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "outlived a SIGKILLed turncut: {children:?}"
        );
        std::thread::yield_now();
    }
}

/// A child told a parent that is not its own (the harness died before the
/// child asked for its death signal, and the child was reparented) ends at
/// once; told its real parent, it runs.
#[test]
fn a_child_whose_harness_is_already_gone_ends_at_once() {
    let orphaned = turncut()
        .arg("list")
        .env(cutpoint::DIE_WITH_ENV, "1")
        .output()
        .unwrap();
    assert_eq!(orphaned.status.code(), Some(137), "{orphaned:?}");
    assert!(orphaned.stdout.is_empty());
    let parented = turncut()
        .arg("list")
        .env(cutpoint::DIE_WITH_ENV, std::process::id().to_string())
        .output()
        .unwrap();
    assert!(parented.status.success(), "{parented:?}");
}
