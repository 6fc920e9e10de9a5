//! `turncut replay`: one cell of a wave run again the way the wave ran it,
//! its result compared with the one in the wave's `wave.json`.

use std::path::{Path, PathBuf};

use harness::model::{CellResult, Verdict};
use harness::{report, scenario, wave};

use super::{Code, Exit, bad, emit, env_for};
use crate::Common;

/// The wave directory and cell id of `<wave-dir>/t###` or
/// `<wave-dir>/cells/t###`.
fn cell_path(cell: &Path) -> Result<(PathBuf, String), Exit> {
    let cell_id = cell
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.starts_with('t'))
        .ok_or_else(|| bad(format!("{}: expected <wave-dir>/t###", cell.display())))?
        .to_owned();
    let mut wave_dir = cell.parent().unwrap_or(Path::new(".")).to_owned();
    if wave_dir.file_name().is_some_and(|n| n == "cells") {
        wave_dir = wave_dir.parent().unwrap_or(Path::new(".")).to_owned();
    }
    Ok((wave_dir, cell_id))
}

pub fn replay(exe: &Path, common: &Common, cell: &Path) -> Result<Code, Exit> {
    let (wave_dir, cell_id) = cell_path(cell)?;
    let wave = report::read_wave(&wave_dir.join("wave.json")).map_err(bad)?;
    let old = wave
        .cells
        .iter()
        .find(|c| c.spec.cell_id == cell_id)
        .ok_or_else(|| bad(format!("{} has no cell {cell_id}", wave_dir.display())))?;
    let version = env!("CARGO_PKG_VERSION");
    if !wave.run.turncut_version.is_empty() && wave.run.turncut_version != version {
        eprintln!(
            "turncut: warning: the wave ran on turncut {}, this is {version}",
            wave.run.turncut_version
        );
    }
    let (env, mut scenarios) = env_for(exe, common, Some(&wave.run))?;
    harness::workflow::add_wave_program(&mut scenarios, &old.spec.scenario_id);
    if scenario::find(&scenarios, &old.spec.scenario_id).is_none() {
        return Err(bad(format!(
            "scenario {} is not in the scenarios; pass the wave's --scenarios DIR",
            old.spec.scenario_id
        )));
    }
    let run = wave::run_one(&env, &scenarios, &old.spec);
    let new = &run.result;
    let failing = |c: &CellResult| -> Vec<String> {
        c.oracles
            .iter()
            .filter(|o| o.verdict != Verdict::Pass)
            .map(|o| format!("{} {}", o.oracle, o.verdict.as_str()))
            .collect()
    };
    let same = new.verdict == old.verdict
        && new.outcome.state == old.outcome.state
        && failing(new) == failing(old);
    let mut text = format!("{}\n", report::cell_line(new));
    let describe = |c: &CellResult| {
        format!(
            "{} ({}{})",
            c.verdict.as_str(),
            harness::model::TaskState::name(c.outcome.state),
            failing(c)
                .iter()
                .map(|f| format!(", {f}"))
                .collect::<String>()
        )
    };
    if same {
        text.push_str(&format!(
            "same result as in {}: {}\n",
            wave.wave_id,
            describe(old)
        ));
    } else {
        text.push_str(&format!(
            "DIFFERENT from {}: was {}, now {}\n",
            wave.wave_id,
            describe(old),
            describe(new)
        ));
    }
    emit(&text);
    Ok(if same {
        Code::of(new.verdict)
    } else {
        Code::NotPass
    })
}
