//! Snapshot reports of the recovery behaviour, checked by `cargo test`.
//!
//! For every `scenarios/*.toml` (insta's `glob!`, one snapshot per file, no
//! `#[test]` per file) and each of its profiles: a fixed sample of at most
//! [`CELLS_PER_PROFILE`] cells (chosen by a hash of each cell's own name, so
//! adding a boundary elsewhere does not reshuffle it; the wave runs them
//! all), every one of which must pass every oracle, and the clean run's
//! normalized timeline. Each sampled cell is a line `point#n  fault  path`
//! (runner points first, then the provider's, by name and occurrence): its
//! recovery *path*, run by run (`continued → completed`, `failed
//! ambiguous_turn_start → retry → completed`, `adopted → completed`, …,
//! `Evidence::path`). A change in recovery behaviour is a snapshot diff,
//! reviewed with `cargo insta review` (CI runs with `INSTA_UPDATE=no`).
//! `INSTA_GLOB_FILTER=single-task.toml` runs one file. A file of several
//! tasks is judged without a snapshot (its sampled cells must pass every
//! oracle): its cut points count every task's hits, so which task a cut
//! lands in follows the tasks' interleaving (`judged_only`).
//!
//! **Paths that depend on timing.** At some cuts the contract allows more
//! than one path: the runner's reader and writer threads and the provider
//! run on while the runner is held at its boundary, so an approval may be
//! answered, a command started or a turn completed before the fault lands,
//! or not. (`turncut wave --repeat 2` measures how many cells do this.)
//! Such an entry lists the allowed paths, `path | path`, learned by running
//! the cells [`ROUNDS_ENV`] times when the snapshot is written and then
//! reviewed like any entry. A cell whose path is outside its entry runs
//! again (at most [`ATTEMPTS`] times in all). A cell that stays outside in
//! every attempt (each run passing every oracle) is a *stray*, said on
//! stderr: up to [`STRAYS_ALLOWED`] per scenario file are let through as
//! timing (a fresh-clone CI run had 1 of 1,787 entries whose five learning
//! rounds never showed the path it then took three times); more fail the
//! test with the list. A change in recovery behaviour moves every entry
//! whose path runs through the changed rule; relearning the snapshot shows
//! it as a diff.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use harness::cell::CellEnv;
use harness::model::{CellSpec, Cut, Fault, Verdict};
use harness::report::matrix;
use harness::wave::Finished;
use harness::{plan, scenario, wave};

mod common;

/// Cells snapshotted per scenario and profile (sampled by seed 7).
const CELLS_PER_PROFILE: usize = 24;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

fn scenarios_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// The idle timeout of hang-provider cells here (the wave's is shorter).
const SNAPSHOT_HANG_IDLE_MS: u64 = 250;

/// Cells of one profile run at once; with [`PROFILES_AT_ONCE`] profiles,
/// four cells in all. At two in all the test used one of CI's two cores
/// (179 s user + 106 s system CPU in 275 s): a cell mostly waits on its
/// processes.
const JOBS: usize = 2;

#[test]
fn scenarios() {
    insta::glob!("../../scenarios", "*.toml", |path| {
        let case = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a scenario file name");
        check(case);
    });
}

/// Runs the sampled cells of `case` and renders the snapshot text.
fn check(case: &str) {
    let dir = scenarios_dir();
    let scenarios = scenario::load_dir(&dir).expect("the built-in scenarios load");
    let s = scenarios
        .iter()
        .find(|s| s.case == case)
        .unwrap_or_else(|| panic!("no built-in scenario {case}"));
    if s.faults.contains(&Fault::PowerCut)
        && let Some(why) = lazyfs::unavailable()
    {
        // Every cell of a power-cut scenario mounts a lazy file system.
        common::skip("fuse", &format!("the {case} snapshot needs FUSE: {why}"));
        return;
    }
    // The real products' profiles are judged by their own wave
    // (tests/real_wave.rs): whether they run depends on what is installed,
    // and a snapshot must not.
    let profiles: Vec<&String> = s
        .profiles
        .iter()
        .filter(|p| wire::profiles::real(p).is_none())
        .collect();
    if s.tasks().len() > 1 {
        // A cut point counts the hits of every task, so which task a cut
        // lands in, and the boundaries themselves, follow the tasks'
        // interleaving: a path per cut is no fixed function of the cut. The
        // sample must still pass every oracle.
        eprintln!(
            "{case}: {} tasks, judged without a snapshot",
            s.tasks().len()
        );
        by_profile(&profiles, |profile| {
            judged_only(&dir, &scenarios, s, profile)
        });
        return;
    }
    let sections = by_profile(&profiles, |profile| section(&dir, &scenarios, s, profile));
    let mut text = String::new();
    // Every listed cut point happens in the clean run of some profile.
    let mut unmatched: Option<BTreeSet<String>> = None;
    let mut strays: Vec<String> = Vec::new();
    for mut one in sections {
        text.push_str(&one.text);
        strays.append(&mut one.strays);
        unmatched = Some(match unmatched {
            None => one.unmatched,
            Some(u) => u.intersection(&one.unmatched).cloned().collect(),
        });
    }
    let unmatched = unmatched.unwrap_or_default();
    assert!(
        unmatched.is_empty(),
        "{case}: cut points that happen in no profile's clean run: {unmatched:?}"
    );
    assert!(
        strays.len() <= STRAYS_ALLOWED,
        "{case}: {} sampled cells took paths their snapshot entries do not list, in every attempt (a change in recovery behaviour; relearn with {ROUNDS_ENV}=3 INSTA_UPDATE=always and review the diff):\n{}",
        strays.len(),
        strays.join("\n")
    );
    insta::with_settings!({
        snapshot_path => "../../reports/snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("scenario", text);
    });
}

/// Profiles whose sections run at once, each [`JOBS`] cells at a time: one
/// profile's clean traced run (a single process set) leaves a core idle that
/// the other's cells use. The sections come back in `profiles`' order.
const PROFILES_AT_ONCE: usize = 2;

/// `f` for every profile, [`PROFILES_AT_ONCE`] at a time, in order.
fn by_profile<T: Send>(profiles: &[&String], f: impl Fn(&str) -> T + Sync) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for _ in 0..PROFILES_AT_ONCE {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(profile) = profiles.get(i) else {
                        break;
                    };
                    let out = f(profile);
                    done.lock().unwrap().insert(i, out);
                }
            });
        }
    });
    done.into_inner().unwrap().into_values().collect()
}

/// One profile's part of a scenario's snapshot.
struct Section {
    text: String,
    /// The scenario's cut points that did not happen in this profile's clean run.
    unmatched: BTreeSet<String>,
    strays: Vec<String>,
}

/// Discovers `profile`'s boundaries, runs its sampled cells (each must
/// pass every oracle) and renders its section.
fn section(
    dir: &Path,
    scenarios: &[scenario::Scenario],
    s: &scenario::Scenario,
    profile: &str,
) -> Section {
    let id = s.id(profile);
    let (env, d, expanded, cells) = sampled(dir, s, profile);
    let unmatched = plan::unmatched_points(s, &d.boundaries)
        .into_iter()
        .collect();
    let known = recorded(&s.case, &id);
    let (finished, paths, strays) = run_for_paths(&env, scenarios, &cells, &known);
    assert_all_pass(&id, &finished);
    let mut text = format!("# {id}\n# {}\n", s.title);
    text.push_str(&format!("clean run: {}\n", d.clean_state));
    text.push_str(&format!(
        "boundaries: {}, cells: {} sampled of {}\n",
        d.boundaries.len(),
        cells.len(),
        expanded.len()
    ));
    text.push_str(
        "entries: cut point, fault, the recovery path run by run (`→`); `|` between paths the contract allows there\n\n",
    );
    text.push_str(&entries(&d.boundaries, &finished, &paths));
    text.push_str("\nclean timeline (run-log event kinds):\n");
    for kind in &d.clean_timeline {
        text.push_str(&format!("  {kind}\n"));
    }
    text.push('\n');
    Section {
        text,
        unmatched,
        strays,
    }
}

/// A scenario of several tasks: `profile`'s clean run and its sampled
/// cells, each of which must pass every oracle (no snapshot).
fn judged_only(
    dir: &Path,
    scenarios: &[scenario::Scenario],
    s: &scenario::Scenario,
    profile: &str,
) {
    let (env, _, _, cells) = sampled(dir, s, profile);
    assert_all_pass(&s.id(profile), &run_reaching_cuts(&env, scenarios, &cells));
}

/// `profile`'s cell environment, discovery (its clean run must pass), every
/// cell of `s` on it, and the fixed sample of them.
fn sampled(
    dir: &Path,
    s: &scenario::Scenario,
    profile: &str,
) -> (
    CellEnv,
    harness::discover::Discovery,
    Vec<CellSpec>,
    Vec<CellSpec>,
) {
    let id = s.id(profile);
    let mut env = CellEnv::new(exe(), dir);
    // A healthy provider on a busy machine may pause past the wave's short
    // hang timeout and be stopped as hung, which changes the path a
    // snapshot records.
    env.hang_idle_timeout_ms = SNAPSHOT_HANG_IDLE_MS;
    // Traced as a wave plans it: a clean run in which the runner found a
    // healthy provider silent (a busy machine) traced a recovery the load
    // caused, and its boundaries with it; such a run is traced again with
    // longer timeouts.
    let d = harness::planner::discover_retrying(&env, s, profile)
        .unwrap_or_else(|e| panic!("the clean run of {id} is traced: {}", e.message));
    assert_eq!(
        d.clean_verdict,
        Verdict::Pass,
        "the clean run of {id} must pass"
    );
    let expanded = plan::number(
        7,
        plan::expand(s, &d.boundaries)
            .expect("cells expand")
            .into_iter()
            .map(|event| (id.clone(), event))
            .collect(),
    );
    // A fixed sample per profile keeps `cargo test` within CI's budget;
    // the wave runs every cell.
    let cells = plan::sample(expanded.clone(), Some(CELLS_PER_PROFILE), 7);
    (env, d, expanded, cells)
}

/// Attempts per cell whose armed cut is not reached.
const ATTEMPTS: usize = 3;

/// Runs `cells`; a cell whose armed cut was not reached (its path before the
/// cut took a turn the harness does not hold, e.g. an idle timeout on a
/// loaded machine) runs again, at most [`ATTEMPTS`] times in all, said on
/// stderr. The wave never does this: there such a cell is reported and
/// counted. A snapshot records what the runner does *at* each cut, which a
/// cell that missed its cut cannot show.
fn run_reaching_cuts(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    cells: &[CellSpec],
) -> Vec<Finished> {
    let mut finished = wave::run_cells(env, scenarios, cells, JOBS);
    for attempt in 2..=ATTEMPTS {
        let missed: Vec<CellSpec> = finished
            .iter()
            .filter(|f| f.result.spec.cut().is_some() && !f.result.outcome.reached_cut)
            .map(|f| f.result.spec.clone())
            .collect();
        if missed.is_empty() {
            break;
        }
        eprintln!(
            "attempt {attempt}: {} cells did not reach their cut: {:?}",
            missed.len(),
            missed.iter().map(CellSpec::name).collect::<Vec<_>>()
        );
        let again = wave::run_cells(env, scenarios, &missed, JOBS);
        for f in again {
            if let Some(slot) = finished
                .iter_mut()
                .find(|old| old.result.spec.cell_id == f.result.spec.cell_id)
            {
                *slot = f;
            }
        }
    }
    finished
}

/// One line per sampled cell: `point#n  fault  path[ | path…]`, the rows of
/// the outcome matrix (`report::matrix`) with runner points first, then the
/// provider's, each by point name and occurrence, then by fault (in
/// `Fault::ALL` order); not in the clean run's order: threads of one
/// process (an HTTP fake's handlers and its turn) interleave their hits by
/// timing, and the snapshot must not.
fn entries(
    boundaries: &[plan::Boundary],
    finished: &[Finished],
    paths: &BTreeMap<String, BTreeSet<String>>,
) -> String {
    let provider = |cut: &Cut| {
        boundaries
            .iter()
            .find(|b| &b.cut == cut)
            .is_some_and(|b| b.role != harness::model::Role::Runner)
    };
    let mut rows: Vec<(&Cut, [Vec<&Finished>; Fault::ALL.len()])> =
        matrix::rows(finished.iter().map(|f| (&f.result.spec, f)))
            .into_iter()
            .filter_map(|r| Some((r.cut?, r.by_fault)))
            .collect();
    rows.sort_by_key(|(cut, _)| (provider(cut), cut.point.clone(), cut.n));
    let point_width = rows
        .iter()
        .map(|(cut, _)| format!("{}#{}", cut.point, cut.n).len())
        .max()
        .unwrap_or(0);
    let fault_width = Fault::ALL
        .iter()
        .map(|f| f.as_str().len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (cut, by_fault) in &rows {
        for (fault, slot) in Fault::ALL.iter().zip(by_fault) {
            // A cell run again is in its slot once per run, under one name.
            let Some(f) = slot.first() else { continue };
            let set = paths
                .get(&f.result.spec.name())
                .cloned()
                .unwrap_or_default();
            let text = set.into_iter().collect::<Vec<_>>().join(" | ");
            out.push_str(&format!(
                "{:<point_width$}  {:<fault_width$}  {text}\n",
                format!("{}#{}", cut.point, cut.n),
                fault.as_str()
            ));
        }
    }
    out
}

/// Entries of one scenario file whose cell took, in every attempt, a path
/// the entry does not list, still passing every oracle, that the check lets
/// through as timing (said on stderr). Measured: a fresh-clone CI run had 1
/// such entry of 1,787; a change in recovery behaviour moves many (every
/// entry whose path runs through the changed rule).
const STRAYS_ALLOWED: usize = 3;

/// Set to N (e.g. `3`) while writing snapshots: every sampled cell runs N
/// times, and its entry lists every path seen (with those already in the
/// snapshot; delete the `.snap` to start afresh).
const ROUNDS_ENV: &str = "TURNCUT_SNAPSHOT_ROUNDS";

/// The paths each cell of `id` has in the snapshot on disk, by cell name
/// (`id@point#n/fault`).
fn recorded(case: &str, id: &str) -> BTreeMap<String, BTreeSet<String>> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../reports/snapshots/scenario@{case}.toml.snap"));
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut out = BTreeMap::new();
    let header = format!("# {id}");
    let Some(start) = text.lines().position(|l| l == header) else {
        return out;
    };
    for line in text.lines().skip(start + 1) {
        if line.starts_with("clean timeline") {
            break;
        }
        // `point#n  fault  paths`: neither a point nor a fault has a space.
        let Some((cut, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some((fault, paths)) = rest.trim_start().split_once(' ') else {
            continue;
        };
        if Fault::parse(fault).is_none() {
            continue;
        }
        let set = paths.trim().split(" | ").map(str::to_owned).collect();
        out.insert(format!("{id}@{cut}/{fault}"), set);
    }
    out
}

/// Runs `cells` and returns their paths, by cell name: with
/// [`ROUNDS_ENV`] set, the union over its rounds and what `known` lists;
/// otherwise `known`'s set where the cell took one of its paths (a path
/// outside it is run again, at most [`ATTEMPTS`] times in all), and that set
/// plus the new path where it did not.
fn run_for_paths(
    env: &CellEnv,
    scenarios: &[scenario::Scenario],
    cells: &[CellSpec],
    known: &BTreeMap<String, BTreeSet<String>>,
) -> (
    Vec<Finished>,
    BTreeMap<String, BTreeSet<String>>,
    Vec<String>,
) {
    let rounds: usize = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let mut finished = run_reaching_cuts(env, scenarios, cells);
    let mut seen: BTreeMap<String, BTreeSet<String>> = finished
        .iter()
        .map(|f| {
            (
                f.result.spec.name(),
                BTreeSet::from([f.result.outcome.path.clone()]),
            )
        })
        .collect();
    let outside = |seen: &BTreeMap<String, BTreeSet<String>>| -> Vec<CellSpec> {
        cells
            .iter()
            .filter(|c| {
                let set = known.get(&c.name());
                seen.get(&c.name())
                    .is_some_and(|s| set.is_some_and(|k| !s.is_subset(k)))
            })
            .cloned()
            .collect()
    };
    let learning = rounds > 1;
    let extra = if learning { rounds - 1 } else { ATTEMPTS - 1 };
    for _ in 0..extra {
        let again = if learning {
            cells.to_vec()
        } else {
            outside(&seen)
        };
        if again.is_empty() {
            break;
        }
        if !learning {
            eprintln!(
                "{} cells took a path the snapshot does not list; running them again: {:?}",
                again.len(),
                again.iter().map(CellSpec::name).collect::<Vec<_>>()
            );
        }
        for f in run_reaching_cuts(env, scenarios, &again) {
            let name = f.result.spec.name();
            let path = f.result.outcome.path.clone();
            let set = seen.entry(name.clone()).or_default();
            if !learning && known.get(&name).is_some_and(|k| k.contains(&path)) {
                // One of the allowed paths: the earlier one was timing.
                *set = BTreeSet::from([path]);
            } else {
                set.insert(path);
            }
            finished.push(f);
        }
    }
    let mut strays = Vec::new();
    for (name, set) in seen.iter_mut() {
        let Some(k) = known.get(name) else { continue };
        if learning || set.is_subset(k) {
            set.extend(k.iter().cloned());
        } else {
            // Every run passed every oracle; one stray entry is timing, many
            // are a change (see `STRAYS_ALLOWED`).
            let stray = format!("{name}: took {set:?} in every attempt, the snapshot lists {k:?}");
            eprintln!("{stray}");
            strays.push(stray);
            *set = k.clone();
        }
    }
    (finished, seen, strays)
}

/// Every run of every cell passed every oracle.
fn assert_all_pass(id: &str, finished: &[Finished]) {
    let failing: Vec<String> = finished
        .iter()
        .filter(|f| f.result.verdict != Verdict::Pass)
        .map(|f| {
            format!(
                "{} {}: {}\n    {}",
                f.result.verdict.as_str(),
                f.result.spec.name(),
                f.result
                    .oracles
                    .iter()
                    .filter(|o| o.verdict != Verdict::Pass)
                    .map(|o| format!("{}: {}", o.oracle, o.message))
                    .chain(f.result.error.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
                f.result.reproduce
            )
        })
        .collect();
    assert!(
        failing.is_empty(),
        "cells of {id} did not pass:\n{}",
        failing.join("\n")
    );
}
