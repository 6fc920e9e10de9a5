//! A SIGKILLed `turncut` cannot remove its cell directories; the next run
//! sweeps those of dead harness processes, and only those.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn cell_dirs(tmp: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("turncut-cell-") || n.starts_with("turncut-trace-"))
        .collect();
    names.sort();
    names
}

#[test]
fn a_killed_turncut_leaves_cell_directories_that_the_next_run_sweeps() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = "everyday-workflows.runner-codex.local.single-task";
    let mut wave = Command::new(exe())
        .args(["run", scenario])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while !cell_dirs(tmp.path())
        .iter()
        .any(|n| n.starts_with("turncut-cell-"))
    {
        assert!(Instant::now() < deadline, "no cell directory appeared");
        std::thread::yield_now();
    }
    wave.kill().unwrap();
    wave.wait().unwrap();
    let left = cell_dirs(tmp.path());
    assert!(
        !left.is_empty(),
        "SIGKILL leaves the running cells' directories"
    );
    // A directory of a live owner (this test process) must survive the sweep.
    let live = harness::tempdirs::tempdir_in("cell", tmp.path()).unwrap();
    let out = Command::new(exe())
        .args(["boundaries", scenario])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("removed"),
        "the sweep says what it removed: {stderr}"
    );
    let after = cell_dirs(tmp.path());
    let live_name = live
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        after,
        vec![live_name],
        "only the live owner's directory is left"
    );
}
