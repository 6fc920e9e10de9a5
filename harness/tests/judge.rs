//! `turncut judge`: a saved cell's evidence judged again gives the verdicts
//! the wave gave it, and a path without evidence is refused with its place.

mod common;

use std::process::{Command, Output};

use common::{exe, forgetful_runnerd};
use serde_json::Value;

const ID: &str = "everyday-workflows.runner-codex.local.single-task";

fn turncut(args: &[&str]) -> Command {
    let mut cmd = Command::new(exe());
    cmd.args(args);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("turncut runs")
}

/// `(oracle, verdict)` of every oracle that did not pass, as printed.
fn printed_failures(out: &Output) -> Vec<(String, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let verdict = w.next()?;
            let oracle = w.next()?;
            matches!(verdict, "fail" | "unknown").then(|| (oracle.to_owned(), verdict.to_owned()))
        })
        .collect()
}

#[test]
fn a_saved_cell_is_judged_again_as_the_wave_judged_it() {
    let dir = tempfile::tempdir().unwrap();
    let runner = forgetful_runnerd(dir.path());
    let out = dir.path().join("wave");
    let cell = [
        "--cut",
        "runner.turn_accepted.persisted#1",
        "--fault",
        "kill-runner",
    ];
    let ran = run(turncut(&["run", ID])
        .args(cell)
        .arg("--runner-cmd")
        .arg(&runner)
        .arg("--out")
        .arg(&out));
    assert_eq!(ran.status.code(), Some(1), "the forgetful runner fails");
    let wave: Value =
        serde_json::from_slice(&std::fs::read(out.join("wave.json")).unwrap()).unwrap();
    let c = &wave["cells"][0];
    let mut expected: Vec<(String, String)> = c["oracles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["verdict"] != "pass")
        .map(|o| {
            (
                o["oracle"].as_str().unwrap().to_owned(),
                o["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(!expected.is_empty());
    let cell_dir = out
        .join("cells")
        .join(c["spec"]["cell_id"].as_str().unwrap());
    let judged = run(turncut(&["judge"]).arg(&cell_dir));
    assert_eq!(
        judged.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&judged.stdout)
    );
    let mut got = printed_failures(&judged);
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    let stdout = String::from_utf8_lossy(&judged.stdout);
    assert!(
        stdout.contains(&format!("verdict: {}", c["verdict"].as_str().unwrap())),
        "{stdout}"
    );
    // The evidence file itself is accepted too.
    let again = run(turncut(&["judge"]).arg(cell_dir.join("evidence.json")));
    assert_eq!(again.stdout, judged.stdout);
}

#[test]
fn a_path_without_evidence_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let missing = run(turncut(&["judge"]).arg(dir.path()));
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("evidence.json") && err.contains("cells/t###"),
        "{err}"
    );
    let bad = dir.path().join("evidence.json");
    std::fs::write(&bad, "{\n  \"actions\": 7\n}\n").unwrap();
    let corrupt = run(turncut(&["judge"]).arg(&bad));
    assert_eq!(corrupt.status.code(), Some(2));
    let err = String::from_utf8_lossy(&corrupt.stderr);
    assert!(err.contains(&format!("{}:2:", bad.display())), "{err}");
}

/// `run --keep` on a passing cell: the console names the kept directory and
/// the report's `cells/t###/`, which holds the evidence and links to it,
/// and `turncut judge` gives the cell's verdict from either place.
#[test]
fn a_kept_passing_cell_is_found_from_the_report_and_judged() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wave");
    let tmp = dir.path().join("cells");
    std::fs::create_dir(&tmp).unwrap();
    let ran = run(turncut(&["--keep", "run", ID])
        .args([
            "--cut",
            "runner.turn_accepted.persisted#1",
            "--fault",
            "kill-runner",
        ])
        .env("TURNCUT_TMPDIR", &tmp)
        .arg("--out")
        .arg(&out));
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "the reference runner passes: {stderr}"
    );
    let cell_dir = out.join("cells").join("t001");
    let said = format!("kept t001: {}", cell_dir.display());
    assert!(stderr.contains(&said), "the console says where: {stderr}");
    let kept = std::fs::read_link(cell_dir.join("kept"))
        .expect("cells/t001/kept links the kept directory");
    assert!(kept.starts_with(&tmp), "{}", kept.display());
    assert!(stderr.contains(&kept.display().to_string()), "{stderr}");
    assert!(
        kept.join("evidence.json").is_file(),
        "the kept directory holds its evidence"
    );
    for place in [cell_dir.clone(), kept.clone()] {
        let judged = run(turncut(&["judge"]).arg(&place));
        let stdout = String::from_utf8_lossy(&judged.stdout);
        assert_eq!(
            judged.status.code(),
            Some(0),
            "{}: {stdout}",
            place.display()
        );
        assert!(stdout.contains("verdict: pass"), "{stdout}");
    }
}
