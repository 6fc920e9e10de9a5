//! `turncut mutants`: the default wave against every seeded bug of runnerd,
//! per profile.
//!
//! It builds runnerd with the `seeded-bugs` feature into its own target
//! directory (`target/seeded`, so the release `runnerd` never contains a bug),
//! runs each profile's part of the wave once per bug with `--seeded-bug NAME`
//! (planned against that runner, as a wave plans against the runner it
//! tests) and once with no bug as the control. Where the planning's traced
//! runs cannot finish under a bug (it strands the task), the bug runs the
//! control's cells instead and says so. It reports bug × profile → oracles
//! that caught it → failing cells as one typed event
//! ([`ProgressEvent::MutantsFinished`]: a table on the console, a `mutants` line in
//! JSON), never printing itself. A bug's run stops at its first caught cell
//! unless `--full` asks for every cell (the control always runs in full). It
//! exits 0 only when every bug is caught on every profile and the control
//! passes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::cell::CellEnv;
use crate::model::mutants::{CONTROL, HARNESS_ERROR};
use crate::model::{MutantRow, MutantsResult, Verdict};
use crate::progress::{Progress, ProgressEvent};
use crate::{plan, scenario, wave};

/// A seeded bug of runnerd (`docs/seeded-bugs.md`), as `main.rs` reads it
/// from runnerd's own list (`runner::seeded::SeededBug`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bug {
    /// Its `--seeded-bug` name.
    pub name: &'static str,
    /// The protocols of the profiles it can fire on.
    pub protocols: Vec<wire::profiles::Protocol>,
}

impl Bug {
    /// Whether the bug can fire for `profile`: a real profile counts as the
    /// fake profile it mirrors, an unknown one as a Codex profile.
    pub fn applies(&self, profile: &str) -> bool {
        let profile = wire::profiles::REAL
            .iter()
            .find(|r| r.name == profile)
            .map_or(profile, |r| r.mirrors);
        let protocol = wire::profiles::builtin(profile)
            .map_or(wire::profiles::Protocol::Codex, |p| p.protocol);
        self.protocols.contains(&protocol)
    }
}

/// Builds the seeded runnerd and returns its path.
pub fn build_seeded(progress: &Progress) -> anyhow::Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = source.canonicalize().unwrap_or(source);
    anyhow::ensure!(
        root.join("Cargo.toml").is_file(),
        "turncut mutants builds runnerd with the seeded-bugs feature and needs the source tree at {}",
        root.display()
    );
    let target = root.join("target/seeded");
    progress.note(&format!(
        "building runnerd with --features seeded-bugs into {} …",
        target.display()
    ));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "runner",
            "--features",
            "seeded-bugs",
            "--bin",
            "runnerd",
            "--target-dir",
        ])
        .arg(&target)
        .status()?;
    anyhow::ensure!(
        status.success(),
        "building the seeded runnerd failed ({status})"
    );
    Ok(target.join("release/runnerd"))
}

/// What `turncut mutants` runs.
pub struct Selection<'a> {
    /// Every seeded bug of runnerd.
    pub bugs: &'a [Bug],
    /// Parallel cells.
    pub jobs: usize,
    /// Only these bugs (comma-separated).
    pub only: Option<&'a str>,
    /// Cells per bug and profile.
    pub budget: Option<usize>,
    /// Only these profiles (comma-separated).
    pub profiles: Option<&'a str>,
    /// Every cell for every bug instead of stopping at the first catch.
    pub full: bool,
    /// Run the control (no bug seeded) too; without it a clean table means
    /// only that every bug run was caught.
    pub control: bool,
    /// The wave's reach (`--depth 1` for the one-cut wave).
    pub reach: wave::Reach,
    /// The seed the cells are planned, drawn and sampled with.
    pub seed: u64,
    /// Where the progress and the table go.
    pub progress: &'a Progress,
}

/// Runs the mutants and reports the table ([`ProgressEvent::MutantsFinished`]);
/// true when every bug was caught and the control passed.
pub fn run(
    exe: &Path,
    scenarios_dir: &Option<PathBuf>,
    sel: &Selection<'_>,
) -> anyhow::Result<bool> {
    let scenarios = scenario::load(scenarios_dir.as_deref())?;
    sel.progress
        .note(&format!("turncut mutants: seed {}", sel.seed));
    let bin = build_seeded(sel.progress)?;
    // Its `main` asks for its own death signal, as turncut's does.
    crate::supervisor::dies_with_parent(&bin);
    let by_profile = ids_by_profile(&scenarios, sel.profiles)?;
    let selected = selected_bugs(sel.bugs, sel.only)?;
    let mut env = CellEnv::new(exe, &scenarios_dir.clone().unwrap_or_default());
    // A healthy cell settles in well under a second; a bug that strands a
    // task should cost seconds, not the default wait.
    env.wait_ms = 2_000;
    env.runner_cmd = vec![bin.display().to_string()];
    env.recut = !sel.reach.depth1_only;
    env.progress = sel.progress.clone();
    let mut rows = Vec::new();
    let started = Instant::now();
    let planned = plan_control(&env, &scenarios, sel, &by_profile)?;
    let control = std::iter::once(None).filter(|_| sel.control);
    if !sel.control {
        sel.progress
            .note("mutants: the control is planned but not run (--no-control)");
    }
    for bug in control.chain(selected.iter().map(Some)) {
        for profile in by_profile.keys() {
            if bug.is_some_and(|b| !b.applies(profile)) {
                continue;
            }
            let bug = bug.map_or(CONTROL, |b| b.name);
            let (cells, judged) = if bug == CONTROL {
                (planned[profile].clone(), Vec::new())
            } else {
                plan_for(
                    &env,
                    &scenarios,
                    sel,
                    bug,
                    &by_profile[profile],
                    &planned[profile],
                )?
            };
            let row = run_row(&env, &scenarios, sel, bug, profile, &cells, judged);
            sel.progress.note(&format!(
                "{bug} on {profile}: {} of {} cells run not passing; caught by {} ({:.0} s so far)",
                row.failing,
                row.cells,
                row.caught_by_text("nothing"),
                started.elapsed().as_secs_f64()
            ));
            rows.push(row);
        }
    }
    let result = MutantsResult {
        rows,
        control: sel.control,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    sel.progress.emit(ProgressEvent::MutantsFinished(&result));
    Ok(result.ok())
}

/// The control's cells per profile, planned with no bug seeded: the
/// fallback of an id a bug keeps from being planned.
fn plan_control(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    sel: &Selection<'_>,
    by_profile: &BTreeMap<String, Vec<String>>,
) -> anyhow::Result<BTreeMap<String, Vec<crate::model::CellSpec>>> {
    let mut planned = BTreeMap::new();
    for (profile, ids) in by_profile {
        let p =
            crate::planner::plan_cells(env, scenarios, ids, sel.seed, true, sel.reach, sel.jobs)?;
        anyhow::ensure!(
            p.judged.is_empty() && p.not_planned.is_empty(),
            "the control runner could not plan {profile}: {:?} {:?}",
            p.not_planned,
            p.judged.iter().map(|r| r.spec.name()).collect::<Vec<_>>()
        );
        planned.insert(profile.clone(), plan::sample(p.cells, sel.budget, sel.seed));
    }
    Ok(planned)
}

/// The scenario ids of each profile, only those of `profiles` when given
/// (comma-separated; each must be a profile some scenario runs).
fn ids_by_profile(
    scenarios: &[scenario::Scenario],
    profiles: Option<&str>,
) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut by_profile: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // A real product's profile runs only when named: every bug against
    // the real codex is minutes of the machine.
    let named = |p: &str| profiles.is_some_and(|l| l.split(',').any(|w| w.trim() == p));
    for s in scenarios {
        for p in &s.profiles {
            if wire::profiles::real(p).is_some() && !named(p) {
                continue;
            }
            by_profile.entry(p.clone()).or_default().push(s.id(p));
        }
    }
    if let Some(list) = profiles {
        let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
        for w in &wanted {
            anyhow::ensure!(
                by_profile.contains_key(*w),
                "no built-in scenario runs profile {w}; profiles are {}",
                by_profile.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        by_profile.retain(|p, _| wanted.contains(&p.as_str()));
    }
    Ok(by_profile)
}

/// The bugs of `only` (comma-separated, each one of `bugs`), or every bug.
fn selected_bugs(bugs: &[Bug], only: Option<&str>) -> anyhow::Result<Vec<Bug>> {
    let Some(list) = only else {
        return Ok(bugs.to_vec());
    };
    let names: Vec<&str> = bugs.iter().map(|b| b.name).collect();
    list.split(',')
        .map(str::trim)
        .map(|w| {
            bugs.iter()
                .find(|b| b.name == w)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("unknown bug {w}; bugs are {}", names.join(", ")))
        })
        .collect()
}

/// Runs one profile's part of the wave with `bug` seeded (none for
/// [`CONTROL`]); a bug's run stops at its first catch unless `full`.
fn run_row(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    sel: &Selection<'_>,
    bug: &str,
    profile: &str,
    cells: &[crate::model::CellSpec],
    judged: Vec<crate::model::CellResult>,
) -> MutantRow {
    let mut env = env.clone();
    if bug != CONTROL {
        env.runner_extra = vec!["--seeded-bug".into(), bug.into()];
    }
    let stop = (bug != CONTROL && !sel.full).then_some(wave::StopAfter::Caught(1));
    let stage2 = (!sel.reach.depth1_only).then_some(crate::recuts::Stage2 {
        wave_seed: sel.seed,
        keep_ppm: None,
    });
    // A clean run the bug already failed in planning is its first catch.
    let caught_in_planning = stop.is_some() && judged.iter().any(planning_catch);
    let mut results: Vec<crate::model::CellResult> = judged;
    if !caught_in_planning {
        let stages = crate::stages::run_stages(&env, scenarios, cells, sel.jobs, stop, stage2);
        results.extend(stages.finished.into_iter().map(|f| f.result));
    }
    tally(bug, profile, &results)
}

/// Whether a judged planning run caught the bug: the runner failed an
/// oracle other than vacuity in its clean run (its harness error is the
/// deadline the stranded task never met).
fn planning_catch(r: &crate::model::CellResult) -> bool {
    r.oracles.iter().any(crate::oracles::decisive)
}

/// One bug × profile row from its cells' results: what caught it. A
/// harness error is no catch (a judged planning run is: `p###`).
fn tally(bug: &str, profile: &str, results: &[crate::model::CellResult]) -> MutantRow {
    let mut row = MutantRow {
        bug: bug.to_owned(),
        profile: profile.to_owned(),
        cells: results.len(),
        caught_by: BTreeMap::new(),
        failing: 0,
        example: None,
    };
    for r in results.iter().filter(|r| r.verdict != Verdict::Pass) {
        row.failing += 1;
        let planning = r.spec.cell_id.starts_with('p') && planning_catch(r);
        // A deadline the runner let pass is its doing: the oracles say what
        // caught it (liveness for a stranded task).
        if r.error.is_some() && !planning && !r.outcome.deadline_passed {
            *row.caught_by.entry(HARNESS_ERROR.into()).or_default() += 1;
            continue;
        }
        row.example.get_or_insert_with(|| r.spec.name());
        for o in r.oracles.iter().filter(|o| o.verdict == Verdict::Fail) {
            *row.caught_by.entry(o.oracle.as_str().into()).or_default() += 1;
        }
    }
    row
}

/// The cells of `ids` planned against the runner with `bug` seeded, as a
/// wave plans against the runner it tests, and the clean traced runs the
/// bug failed (judged like cells: a catch). An id the bug kept from being
/// planned for another reason runs the control's cells (`control`).
fn plan_for(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    sel: &Selection<'_>,
    bug: &str,
    ids: &[String],
    control: &[crate::model::CellSpec],
) -> anyhow::Result<(Vec<crate::model::CellSpec>, Vec<crate::model::CellResult>)> {
    let mut env = env.clone();
    env.runner_extra = vec!["--seeded-bug".into(), bug.into()];
    let p = crate::planner::plan_cells(&env, scenarios, ids, sel.seed, true, sel.reach, sel.jobs)?;
    let mut cells = plan::sample(p.cells, sel.budget, sel.seed);
    for skipped in &p.not_planned {
        env.progress.note(&format!(
            "{bug}: {} not planned under the bug ({}); running the control's cells for it",
            skipped.scenario_id, skipped.reason
        ));
        cells.extend(
            control
                .iter()
                .filter(|c| c.scenario_id == skipped.scenario_id)
                .cloned(),
        );
    }
    Ok((cells, p.judged))
}
