//! `turncut judge`: the oracles run again on a saved cell's evidence
//! (`<wave-dir>/cells/t###/evidence.json`), nothing else run — how an oracle
//! change is checked against the evidence of an old wave.

use std::path::{Path, PathBuf};

use harness::evidence::Evidence;

use super::{Code, Exit, bad};

/// The evidence file of `path`: the file itself, or `evidence.json` in the
/// cell directory it names.
fn evidence_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("evidence.json")
    } else {
        path.to_owned()
    }
}

/// The saved evidence, or why it cannot be read (exit 2).
fn read(path: &Path) -> Result<Evidence, Exit> {
    let file = evidence_file(path);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        bad(format!(
            "{}: {e} (give a cell directory of a wave's report, `<wave-dir>/cells/t###`, or its evidence.json)",
            file.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "{}:{}:{}: not a cell's evidence: {e}",
            file.display(),
            e.line(),
            e.column()
        ))
    })
}

/// Prints the oracles' verdicts on the saved evidence at `path`; exit 0
/// when every oracle passes, 1 otherwise, 2 when there is no evidence.
pub fn judge(path: &Path) -> Result<Code, Exit> {
    let ev = read(path)?;
    let (verdict, oracles) = harness::oracles::judge_cell(&ev);
    if let Some(spec) = &ev.spec {
        println!("{}  {}", spec.cell_id, spec.name());
    }
    for o in &oracles {
        println!("{:<8}{:<18}{}", o.verdict.as_str(), o.oracle, o.message);
    }
    if let Some(e) = &ev.harness_error {
        println!("harness error: {e}");
    }
    println!("verdict: {}", verdict.as_str());
    Ok(Code::of(verdict))
}
