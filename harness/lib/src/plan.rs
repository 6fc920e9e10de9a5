//! Planning, the pure part: from the boundaries of a clean run (read from
//! its trace, `boundaries_of`), expand cells (point × occurrence × fault),
//! trim them by durable segment, number and seed them, sample them for a
//! budget and split them into shards; check a `--cut`, a `--schedule` or a
//! scenario's points against the boundaries. It starts no process: the
//! traced runs that find the boundaries are `discover`'s, so everything
//! here is tested on boundaries made by hand.
//!
//! Nothing is hand-listed: the boundaries are whatever the runner and its
//! provider hit in a clean run. A provider fault is planned only at points
//! where the trace shows a live provider (between `provider_identity` and
//! `provider_stop` of the runner), so no cell fires a fault at nothing.

use crate::model::{CellSpec, Cut, Event, Fault, Role};
use crate::nemesis;
use crate::scenario::{CutSelection, Scenario};

/// A boundary of a clean run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The cut.
    pub cut: Cut,
    /// The process that reached it.
    pub role: Role,
    /// Whether a provider process is alive when it is hit.
    pub provider_alive: bool,
    /// Its durable segment in the clean run: how many durable writes of
    /// its own role (the runner's `runner.*.persisted`, a provider's
    /// `*.recorded`) came before it, counted per role because the runner's
    /// and a provider's hits interleave by timing while each one's own
    /// order does not. Boundaries of one role and segment leave that
    /// process's durable state the same behind a kill (see
    /// [`trim_by_segment`]).
    pub segment: usize,
}

/// Whether a hit is a durable write: the runner's `runner.<write>.persisted`
/// or a provider's `<proto>.<what>.recorded`.
pub fn is_durable_write(point: &str) -> bool {
    point.ends_with(".persisted") || point.ends_with(".recorded")
}

/// How many one-cut cells a process fault keeps per durable segment of an
/// `every-boundary` scenario (see [`trim_by_segment`]).
///
/// - `kill-runner` and `kill-provider`: 3 — the segment's first boundary
///   (the write itself), its last (just before the next write) and one more
///   drawn by the seed.
/// - `hang-provider`: 2, the first and the last. A hang leaves the state of
///   a `kill-provider` at the same boundary once the idle timeout kills the
///   provider; what it adds is how the runner finds a silent provider, and
///   what the provider's other threads do meanwhile, which the ends of a
///   segment show.
/// - `kill-both`: 1, drawn by the seed. It leaves the durable state of a
///   `kill-runner` at the same boundary (a `kill-runner` freezes the
///   providers, and the restarted runner kills them), so the two walk the
///   same recovery; they differ only in whether the old provider is still
///   there when the runner restarts, which does not depend on where in the
///   segment the cut fell.
pub fn segment_keep(fault: Fault) -> usize {
    match fault {
        Fault::KillBoth => 1,
        Fault::HangProvider => 2,
        _ => 3,
    }
}

/// Trims the one-cut process-fault cells of an `every-boundary` scenario to
/// [`segment_keep`] per durable segment (of one role: `Boundary::segment`)
/// and fault: the boundaries of one segment leave the same durable state
/// behind a kill, and the runner recovers from its durable state, so they
/// walk the same recovery path; the wave's room goes to cutting those
/// recoveries (`recuts`). What is kept of a segment changes with the seed
/// where a draw is made. Storage faults, controller actions and the clean
/// cell are never trimmed.
pub fn trim_by_segment(
    cells: Vec<Vec<crate::model::Event>>,
    boundaries: &[Boundary],
    seed: u64,
) -> Vec<Vec<crate::model::Event>> {
    use std::collections::BTreeMap;
    let segment_of = |c: &Cut| {
        boundaries
            .iter()
            .find(|b| &b.cut == c)
            .map(|b| (b.role, b.segment))
    };
    // Per (role, segment, fault): the boundaries in the planned order.
    let mut members: BTreeMap<((Role, usize), Fault), Vec<usize>> = BTreeMap::new();
    let order = |c: &Cut| boundaries.iter().position(|b| &b.cut == c);
    for events in &cells {
        if let [e] = events.as_slice()
            && e.fault.is_process()
            && let (Some(seg), Some(at)) = (segment_of(&e.cut), order(&e.cut))
        {
            members.entry((seg, e.fault)).or_default().push(at);
        }
    }
    let keep = kept_per_segment(members, seed);
    cells
        .into_iter()
        .filter(|events| match events.as_slice() {
            [e] if e.fault.is_process() => {
                order(&e.cut).is_none_or(|at| keep.contains(&(at, e.fault)))
            }
            _ => true,
        })
        .collect()
}

/// What a process fault keeps of each durable segment: `members` holds,
/// per (role, segment) and fault, the positions of its cuts (any order);
/// each keeps [`segment_keep`] of them ([`kept_of_segment`]), drawn by
/// `seed` and the segment. The (position, fault) pairs kept.
pub fn kept_per_segment(
    members: std::collections::BTreeMap<((Role, usize), Fault), Vec<usize>>,
    seed: u64,
) -> std::collections::HashSet<(usize, Fault)> {
    let mut keep = std::collections::HashSet::new();
    for (((role, seg), fault), mut at) in members {
        // The draw's seed names the segment: its role and its count.
        let draw = mix(seed ^ ((seg * 4 + role as usize) as u64) ^ ((fault as u64) << 32)) as usize;
        at.sort_unstable();
        for i in kept_of_segment(at.len(), segment_keep(fault), draw) {
            keep.insert((at[i], fault));
        }
    }
    keep
}

/// Which of a segment's `len` boundaries (in order) a fault keeping `keep`
/// of them keeps: 1, the one `draw` picks; 2, the first and the last; 3,
/// those and one between them that `draw` picks.
fn kept_of_segment(len: usize, keep: usize, draw: usize) -> Vec<usize> {
    if len <= keep {
        return (0..len).collect();
    }
    match keep {
        0 => Vec::new(),
        1 => vec![draw % len],
        2 => vec![0, len - 1],
        _ => vec![0, 1 + draw % (len - 2), len - 1],
    }
}

/// The boundaries of a clean run's trace, in its order: each distinct
/// `point#n`, with whether a provider is alive when it is hit.
pub fn boundaries_of(hits: Vec<cutpoint::Hit>) -> Vec<Boundary> {
    let mut boundaries: Vec<Boundary> = Vec::new();
    let alive = provider_alive_at(&hits);
    let mut writes: std::collections::HashMap<Role, usize> = Default::default();
    for (h, provider_alive) in hits.into_iter().zip(alive) {
        let segment = writes.entry(Role::of(&h.role)).or_default();
        if is_durable_write(&h.point) {
            *segment += 1;
        }
        let segment = *segment;
        let cut = Cut {
            point: h.point.clone(),
            n: h.n,
        };
        if boundaries.iter().any(|b| b.cut == cut) {
            continue;
        }
        boundaries.push(Boundary {
            segment,
            cut,
            role: Role::of(&h.role),
            provider_alive,
        });
    }
    boundaries
}

/// Whether a provider is alive at each hit of a trace: a provider hit is
/// by definition from a live provider; a runner hit has one only inside a
/// window the runner opened with a recorded identity and has not closed
/// with a recorded stop. A killed runner's providers are stopped by the
/// next one, so its window counts until that stop.
pub fn provider_alive_at(hits: &[cutpoint::Hit]) -> Vec<bool> {
    let mut alive = 0i64;
    hits.iter()
        .map(|h| {
            let role = Role::of(&h.role);
            if role == Role::Runner {
                match h.point.as_str() {
                    "runner.provider_identity.persisted" => alive += 1,
                    "runner.provider_stop.persisted" => alive = (alive - 1).max(0),
                    _ => {}
                }
            }
            role == Role::Provider || alive > 0
        })
        .collect()
}

/// The boundaries of a recovery: the hits of a traced run after its
/// event's mark (at index `mark`), each numbered by its point from 1 (a
/// recovery's `#N` counts from the event on), with whether a provider was
/// alive there (counted over the whole run) and its durable segment in the
/// recovery (its role's durable writes since the mark, as
/// [`boundaries_of`] counts a clean run's). `skip` leaves out hits that
/// are not the recovery's (the mark itself, the remains of what the event
/// killed).
pub fn recovery_boundaries(
    hits: &[cutpoint::Hit],
    mark: usize,
    skip: impl Fn(&cutpoint::Hit) -> bool,
) -> Vec<Boundary> {
    let mut counts: std::collections::HashMap<&str, u64> = Default::default();
    let mut writes: std::collections::HashMap<Role, usize> = Default::default();
    let alive = provider_alive_at(hits);
    let mut out = Vec::new();
    for (h, alive) in hits.iter().zip(alive).skip(mark + 1) {
        if skip(h) {
            continue;
        }
        let n = counts.entry(h.point.as_str()).or_default();
        *n += 1;
        let segment = writes.entry(Role::of(&h.role)).or_default();
        if is_durable_write(&h.point) {
            *segment += 1;
        }
        out.push(Boundary {
            cut: Cut {
                point: h.point.clone(),
                n: *n,
            },
            role: Role::of(&h.role),
            provider_alive: alive,
            segment: *segment,
        });
    }
    out
}

/// The listed cut points of `scenario` that never happen in this clean run
/// (`boundaries`): points of other protocols, or runner points of another
/// driver. A point in no profile's list is a mistake; the snapshot tests
/// check the built-in scenarios for it.
pub fn unmatched_points(scenario: &Scenario, boundaries: &[Boundary]) -> Vec<String> {
    match &scenario.cut {
        CutSelection::Points(names) => names
            .iter()
            .filter(|n| !boundaries.iter().any(|b| &b.cut.point == *n))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// The components whose cut points a scenario may name.
pub const POINT_FAMILIES: &[&str] = &["runner", "codex", "acp", "opencode", "model"];

/// The cuts and faults of one scenario: the clean cell first, then every
/// selected boundary × fault.
pub fn expand(scenario: &Scenario, boundaries: &[Boundary]) -> anyhow::Result<Vec<Option<Event>>> {
    let mut out = vec![None];
    let selected: Vec<&Boundary> = match &scenario.cut {
        CutSelection::None => Vec::new(),
        CutSelection::EveryBoundary => boundaries.iter().collect(),
        CutSelection::Points(names) => {
            // A scenario names provider points of every protocol it runs on
            // (`codex.turn.recorded`, `acp.turn.recorded`, …); a point of a
            // provider family this profile does not run is not for it. A
            // point of its own family that never happens is a mistake.
            let families: std::collections::HashSet<&str> = boundaries
                .iter()
                .filter_map(|b| b.cut.point.split('.').next())
                .collect();
            for n in names {
                let family = n.split('.').next().unwrap_or_default();
                if !POINT_FAMILIES.contains(&family) {
                    anyhow::bail!(
                        "{}: point {n} belongs to no component; points start with one of {}",
                        scenario.path.display(),
                        POINT_FAMILIES.join(", ")
                    );
                }
            }
            // Runner points can belong to one driver (`runner.tool_*` exist
            // only where the runner executes tools): absent ones are skipped
            // here and listed by `unmatched_points`.
            let names: Vec<&String> = names
                .iter()
                .filter(|n| n.split('.').next().is_some_and(|f| families.contains(f)))
                .filter(|n| {
                    !n.starts_with("runner.") || boundaries.iter().any(|b| &b.cut.point == *n)
                })
                .collect();
            for n in &names {
                if !boundaries.iter().any(|b| &&b.cut.point == n) {
                    anyhow::bail!(
                        "{}: point {n} never happens in a clean run; `turncut boundaries` lists the points",
                        scenario.path.display()
                    );
                }
            }
            boundaries
                .iter()
                .filter(|b| names.contains(&&b.cut.point))
                .collect()
        }
    };
    for b in selected {
        for &fault in &scenario.faults {
            if planned_at(b, fault) {
                debug_assert!(fault.applies_at(&b.cut.point));
                out.push(Some(Event {
                    cut: b.cut.clone(),
                    fault,
                }));
            }
        }
    }
    Ok(out)
}

/// Whether a one-cut cell of `fault` is planned at boundary `b`: a provider
/// fault needs a live provider; before-write and before-read points are
/// where storage faults apply (each kind at its own), and the other faults
/// cut at the boundaries after each write (explore and depth-2 cells reach
/// the before-write points with any fault); a power cut where
/// `Fault::power_cut_planned_at` says.
fn planned_at(b: &Boundary, fault: Fault) -> bool {
    let store_point = crate::model::is_store_point(&b.cut.point);
    if fault.class() == crate::model::FaultClass::Answer {
        // Where the process answers a request (`Fault::applies_at`).
        return fault.applies_at(&b.cut.point);
    }
    if nemesis::needs_provider(fault) && !b.provider_alive {
        return false;
    }
    if fault.is_storage() != store_point || !fault.applies_at(&b.cut.point) {
        return false;
    }
    fault != Fault::PowerCut || Fault::power_cut_planned_at(&b.cut.point, b.role)
}

/// Checks a `--cut`/`--fault` pair against the boundaries of a clean run
/// of `scenario_id`, before any cell runs: the point must happen, the
/// occurrence must be reached, and a provider fault needs a live provider.
pub fn check_cut(
    boundaries: &[Boundary],
    scenario_id: &str,
    cut: &Cut,
    fault: Fault,
) -> Result<(), String> {
    let hits: Vec<&Boundary> = boundaries
        .iter()
        .filter(|b| b.cut.point == cut.point)
        .collect();
    let listing = format!("`turncut boundaries {scenario_id}` lists them");
    let Some(last) = hits.iter().map(|b| b.cut.n).max() else {
        let dym = crate::scenario::did_you_mean(
            &cut.point,
            boundaries.iter().map(|b| b.cut.point.as_str()),
        );
        return Err(format!(
            "--cut {cut}: a clean run of {scenario_id} never reaches point {}{dym}; {listing}",
            cut.point
        ));
    };
    let Some(at) = hits.iter().find(|b| b.cut.n == cut.n) else {
        return Err(format!(
            "--cut {cut}: a clean run of {scenario_id} reaches {} {last} time(s), so #{} never happens; {listing}",
            cut.point, cut.n
        ));
    };
    if nemesis::needs_provider(fault) && !at.provider_alive {
        return Err(format!(
            "--fault {fault} at {cut}: no provider process is alive there; use kill-runner"
        ));
    }
    check_fault_point(fault, &cut.point)
}

/// A write fault needs a runner's before-write point, a read fault a
/// before-read point.
fn check_fault_point(fault: Fault, point: &str) -> Result<(), String> {
    if fault.applies_at(point) {
        return Ok(());
    }
    if fault.is_read() {
        return Err(format!(
            "{fault} at {point}: read faults apply only at the runner's before-read points ({}*, e.g. runner.read.turns); `turncut boundaries` lists them",
            crate::model::READ_POINTS
        ));
    }
    if fault.is_storage() {
        return Err(format!(
            "{fault} at {point}: write faults apply only at the runner's before-write points ({}*, e.g. runner.write.turn_intent); `turncut boundaries` lists them",
            crate::model::WRITE_POINTS
        ));
    }
    if point.starts_with(crate::model::READ_POINTS) {
        return Err(format!(
            "{fault} at {point}: a before-read point takes only fail-read, corrupt-read, kill-runner and power-cut; cut at another boundary instead"
        ));
    }
    Err(format!(
        "{fault} at {point}: a before-write point takes only fail-write, disk-full, kill-runner and power-cut; cut after the write instead (its .persisted point)"
    ))
}

/// The most events a schedule may have.
pub const MAX_EVENTS: usize = 8;

/// Checks a `--schedule` against the boundaries of a clean run of
/// `scenario_id`, before any cell runs: the first event as [`check_cut`]
/// checks a cut; each later event's point must belong to the runner or this
/// profile's provider (a point of another protocol can never happen).
pub fn check_schedule(
    boundaries: &[Boundary],
    scenario_id: &str,
    events: &[crate::model::Event],
) -> Result<(), String> {
    let Some(first) = events.first() else {
        return Err("the schedule is empty".to_owned());
    };
    if events.len() > MAX_EVENTS {
        return Err(format!(
            "the schedule has {} events; at most {MAX_EVENTS}",
            events.len()
        ));
    }
    check_cut(boundaries, scenario_id, &first.cut, first.fault)?;
    let families: std::collections::HashSet<&str> = boundaries
        .iter()
        .filter_map(|b| b.cut.point.split('.').next())
        .collect();
    for (i, e) in events.iter().enumerate().skip(1) {
        check_fault_point(e.fault, &e.cut.point).map_err(|m| format!("event {}: {m}", i + 1))?;
        let family = e.cut.point.split('.').next().unwrap_or_default();
        if !families.contains(family) {
            let mut known: Vec<&str> = families.iter().copied().collect();
            known.sort();
            return Err(format!(
                "event {} ({e}): {scenario_id} runs no component with {family}.* points (its points start with {}); `turncut boundaries {scenario_id}` lists them",
                i + 1,
                known.join(", ")
            ));
        }
    }
    Ok(())
}

/// A cell of `scenario_id` running `events`, seeded by its name.
pub fn schedule_cell(
    wave_seed: u64,
    cell_id: String,
    scenario_id: String,
    events: &[crate::model::Event],
) -> CellSpec {
    let mut spec = CellSpec {
        cell_id,
        scenario_id: scenario_id.into(),
        seed: 0,
        events: events.to_vec(),
    };
    spec.seed = cell_seed(wave_seed, &spec.name());
    spec
}

/// Checks the `cut` list of `scenario` against `boundaries`, the union of
/// the clean runs of its profiles: every point must belong to a component
/// and happen in at least one of them. The error has the point's place in
/// the file and the closest boundary name.
pub fn check_points(
    scenario: &Scenario,
    boundaries: &[Boundary],
) -> Result<(), crate::scenario::ScenarioError> {
    let CutSelection::Points(names) = &scenario.cut else {
        return Ok(());
    };
    for n in names {
        let family = n.split('.').next().unwrap_or_default();
        if !POINT_FAMILIES.contains(&family) {
            return Err(scenario.error_at_point(
                n,
                format!(
                    "cut point {n} belongs to no component; points start with one of {}",
                    POINT_FAMILIES.join(", ")
                ),
            ));
        }
        if !boundaries.iter().any(|b| &b.cut.point == n) {
            let dym =
                crate::scenario::did_you_mean(n, boundaries.iter().map(|b| b.cut.point.as_str()));
            return Err(scenario.error_at_point(
                n,
                format!(
                    "cut point {n} never happens in a clean run of any profile of this scenario{dym}; `turncut boundaries <scenario-id>` lists the points"
                ),
            ));
        }
    }
    Ok(())
}

/// SplitMix64: a small, well-known mixing function for deterministic seeds.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The seed of a cell, from the wave seed and the cell's name.
pub fn cell_seed(wave_seed: u64, name: &str) -> u64 {
    let mut h = mix(wave_seed);
    for b in name.bytes() {
        h = mix(h ^ u64::from(b));
    }
    h
}

/// Numbers cells of schedules (an empty one is a clean cell) `t001…` in
/// order and seeds them.
pub fn number_schedules(
    wave_seed: u64,
    cells: Vec<(String, Vec<crate::model::Event>)>,
) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .map(|(i, (id, events))| schedule_cell(wave_seed, format!("t{:03}", i + 1), id, &events))
        .collect()
}

/// Numbers cells `t001…` in order and seeds them: each a clean run or one
/// cut with its fault.
pub fn number(wave_seed: u64, cells: Vec<(String, Option<Event>)>) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .map(|(i, (scenario_id, event))| {
            let mut spec = CellSpec {
                cell_id: format!("t{:03}", i + 1),
                scenario_id: scenario_id.into(),
                seed: 0,
                events: event.into_iter().collect(),
            };
            spec.seed = cell_seed(wave_seed, &spec.name());
            spec
        })
        .collect()
}

/// Keeps `budget` cells chosen by seed (all when the budget covers them),
/// in their original order.
pub fn sample(cells: Vec<CellSpec>, budget: Option<usize>, wave_seed: u64) -> Vec<CellSpec> {
    let Some(budget) = budget.filter(|b| *b < cells.len()) else {
        return cells;
    };
    let mut keyed: Vec<(u64, usize)> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| (cell_seed(wave_seed ^ 0x5eed, &c.name()), i))
        .collect();
    keyed.sort();
    let mut keep: Vec<usize> = keyed.into_iter().take(budget).map(|(_, i)| i).collect();
    keep.sort();
    keep.into_iter().map(|i| cells[i].clone()).collect()
}

/// The cells of shard `index` (1-based) of `count`.
pub fn shard(cells: Vec<CellSpec>, index: u32, count: u32) -> Vec<CellSpec> {
    cells
        .into_iter()
        .enumerate()
        .filter(|(i, _)| (*i as u32) % count == index - 1)
        .map(|(_, c)| c)
        .collect()
}

/// Parses `P#N`.
pub fn parse_cut(s: &str) -> anyhow::Result<Cut> {
    let arms = cutpoint::parse_arm(s)?;
    match arms.as_slice() {
        [a] if a.n != cutpoint::EVERY && !a.point.ends_with('*') => Ok(Cut {
            point: a.point.clone(),
            n: a.n,
        }),
        _ => anyhow::bail!(
            "--cut takes one hit of one point, such as runner.turn_intent.persisted#1 (not #* or a prefix.*: a cut is one hit)"
        ),
    }
}

/// Parses `I/N`.
pub fn parse_shard(s: &str) -> anyhow::Result<(u32, u32)> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--shard takes I/N, e.g. 1/4"))?;
    let (i, n): (u32, u32) = (i.trim().parse()?, n.trim().parse()?);
    anyhow::ensure!(
        n >= 1 && (1..=n).contains(&i),
        "--shard {s}: I must be between 1 and N"
    );
    Ok((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(role: &str, pid: u32, point: &str) -> cutpoint::Hit {
        cutpoint::Hit {
            role: role.into(),
            pid,
            point: point.into(),
            n: 0,
        }
    }

    /// A recovery's boundaries count each point from the event's mark on,
    /// leave out what `skip` says (the mark, a doomed pid's remains), and
    /// know a provider alive from an identity recorded before the mark.
    #[test]
    fn a_recovery_is_numbered_from_its_event_on() {
        let hits = [
            hit("runner", 1, "runner.provider_identity.persisted"),
            hit("runner", 1, "runner.item.persisted"),
            hit("turncut", 1, "turncut.event"),
            hit("provider", 9, "codex.turn.recorded"),
            hit("runner", 2, "runner.item.persisted"),
            hit("runner", 2, "runner.provider_stop.persisted"),
            hit("runner", 2, "runner.item.persisted"),
        ];
        let got = recovery_boundaries(&hits, 2, |h| h.pid == 9);
        let shown: Vec<(String, bool, usize)> = got
            .iter()
            .map(|b| (b.cut.to_string(), b.provider_alive, b.segment))
            .collect();
        assert_eq!(
            shown,
            [
                ("runner.item.persisted#1".to_owned(), true, 1),
                ("runner.provider_stop.persisted#1".to_owned(), false, 2),
                ("runner.item.persisted#2".to_owned(), false, 3),
            ]
        );
        assert!(got.iter().all(|b| b.role == Role::Runner));
    }

    /// A cut is one hit: `--cut` refuses what only an arm may say (every
    /// occurrence, every point under a prefix), and its `#N` shows back.
    #[test]
    fn a_cut_is_one_hit_of_one_point() {
        let cut = parse_cut("runner.turn_intent.persisted#2").unwrap();
        assert_eq!(cut.to_string(), "runner.turn_intent.persisted#2");
        assert_eq!(cut.arm().to_string(), "runner.turn_intent.persisted#2");
        for arm_only in [
            "runner.turn_intent.persisted#*",
            "runner.write.*#1",
            "a#1,b#1",
        ] {
            let err = parse_cut(arm_only).unwrap_err().to_string();
            assert!(err.contains("one hit of one point"), "{arm_only}: {err}");
        }
    }

    /// A segment of five boundaries keeps three cells of `kill-runner` and
    /// `kill-provider` (its ends and one drawn), two of `hang-provider` (its
    /// ends) and one of `kill-both` (drawn); storage faults are not trimmed.
    #[test]
    fn a_segment_keeps_each_process_fault_its_own_count() {
        let boundaries: Vec<Boundary> = (1..=5)
            .map(|n| Boundary {
                cut: Cut {
                    point: "acp.x".into(),
                    n,
                },
                role: Role::Provider,
                provider_alive: true,
                segment: 0,
            })
            .collect();
        let faults = [
            Fault::KillRunner,
            Fault::KillProvider,
            Fault::HangProvider,
            Fault::KillBoth,
            Fault::FailWrite,
        ];
        let cells: Vec<Vec<Event>> = boundaries
            .iter()
            .flat_map(|b| {
                faults.iter().map(|f| {
                    vec![Event {
                        cut: b.cut.clone(),
                        fault: *f,
                    }]
                })
            })
            .collect();
        for seed in 0..20 {
            let kept = trim_by_segment(cells.clone(), &boundaries, seed);
            let of = |f: Fault| -> Vec<u64> {
                kept.iter()
                    .filter(|e| e[0].fault == f)
                    .map(|e| e[0].cut.n)
                    .collect()
            };
            for f in [Fault::KillRunner, Fault::KillProvider] {
                let n = of(f);
                assert_eq!(n.len(), 3, "{f}: {n:?}");
                assert!(n.contains(&1) && n.contains(&5), "{f}: {n:?}");
            }
            assert_eq!(of(Fault::HangProvider), vec![1, 5]);
            assert_eq!(of(Fault::KillBoth).len(), 1);
            assert_eq!(of(Fault::FailWrite).len(), 5);
        }
        assert_eq!(kept_of_segment(2, 3, 7), vec![0, 1]);
        assert_eq!(kept_of_segment(1, 2, 7), vec![0]);
    }

    fn specs(n: usize) -> Vec<CellSpec> {
        number(
            7,
            (0..n)
                .map(|i| {
                    (
                        "s".to_owned(),
                        Some(Event {
                            cut: Cut {
                                point: format!("p.{i}.x"),
                                n: 1,
                            },
                            fault: Fault::KillRunner,
                        }),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn seeds_and_samples_are_deterministic() {
        let a = specs(50);
        let b = specs(50);
        assert_eq!(a, b);
        assert_eq!(a[0].cell_id, "t001");
        let s1 = sample(a.clone(), Some(10), 7);
        let s2 = sample(b, Some(10), 7);
        assert_eq!(s1, s2);
        assert_eq!(s1.len(), 10);
        assert_ne!(
            sample(a.clone(), Some(10), 8),
            s1,
            "another seed samples other cells"
        );
        assert_eq!(sample(a.clone(), Some(100), 7).len(), 50);
    }

    #[test]
    fn shards_partition_the_cells() {
        let all = specs(17);
        let mut joined: Vec<CellSpec> = (1..=3).flat_map(|i| shard(all.clone(), i, 3)).collect();
        joined.sort_by(|x, y| x.cell_id.cmp(&y.cell_id));
        assert_eq!(joined, all);
        assert!(parse_shard("0/3").is_err());
        assert!(parse_shard("4/3").is_err());
        assert_eq!(parse_shard("2/3").unwrap(), (2, 3));
    }

    /// A scenario file with `chaos`, the rest as small as parses.
    fn scenario(chaos: &str) -> Scenario {
        let text = format!(
            "suite = \"s\"\ncase = \"c\"\nprofiles = [\"runner-codex\"]\ntitle = \"t\"\n\
             [[script.turn]]\nsay = []\nfinal = \"done\"\n\
             [[steps]]\nsubmit = {{ prompt = \"go\" }}\n[[steps]]\nawait = \"settled\"\n\
             [chaos]\n{chaos}\n"
        );
        crate::scenario::parse(&text, "s/c.toml").expect("the test scenario parses")
    }

    /// Hand-made boundaries of a clean run: a before-write point, its
    /// durable write with no provider yet, the provider's identity (a
    /// provider alive from there), a provider point, a before-read point.
    fn clean_run() -> Vec<Boundary> {
        let b = |point: &str, role: Role, provider_alive: bool, segment: usize| Boundary {
            cut: Cut {
                point: point.into(),
                n: 1,
            },
            role,
            provider_alive,
            segment,
        };
        vec![
            b("runner.write.task_admitted", Role::Runner, false, 0),
            b("runner.task_admitted.persisted", Role::Runner, false, 1),
            b("runner.provider_identity.persisted", Role::Runner, true, 2),
            b("codex.turn.recorded", Role::Provider, true, 1),
            b("runner.read.turns", Role::Runner, true, 2),
        ]
    }

    /// The clean cell comes first; a process fault is planned after each
    /// write, a provider fault only where a provider is alive, a write fault
    /// only at the before-write point and a read fault only at the
    /// before-read one.
    #[test]
    fn expand_puts_each_fault_where_it_applies() {
        let s = scenario(
            "cut = \"every-boundary\"\nfaults = [\"kill-runner\", \"kill-provider\", \"fail-write\", \"fail-read\"]",
        );
        let cells = expand(&s, &clean_run()).expect("expands");
        assert_eq!(cells[0], None, "the clean cell first");
        let planned: Vec<String> = cells.iter().flatten().map(ToString::to_string).collect();
        assert_eq!(
            planned,
            [
                "runner.write.task_admitted#1/fail-write",
                "runner.task_admitted.persisted#1/kill-runner",
                "runner.provider_identity.persisted#1/kill-runner",
                "runner.provider_identity.persisted#1/kill-provider",
                "codex.turn.recorded#1/kill-runner",
                "codex.turn.recorded#1/kill-provider",
                "runner.read.turns#1/fail-read",
            ]
        );
    }

    /// A scenario's named points: a point of another provider's protocol is
    /// not this profile's and plans nothing; one of no component, or one
    /// of its own protocol that never happens, is an error.
    #[test]
    fn expand_plans_named_points_of_this_profile_only() {
        let s = scenario(
            "cut = [\"codex.turn.recorded\", \"acp.turn.recorded\"]\nfaults = [\"kill-provider\"]",
        );
        let cells = expand(&s, &clean_run()).expect("expands");
        let planned: Vec<String> = cells.iter().flatten().map(ToString::to_string).collect();
        assert_eq!(planned, ["codex.turn.recorded#1/kill-provider"]);
        let unmatched = unmatched_points(&s, &clean_run());
        assert_eq!(unmatched, ["acp.turn.recorded"]);
        let never = scenario("cut = [\"codex.turn.never\"]\nfaults = [\"kill-runner\"]");
        let e = expand(&never, &clean_run()).expect_err("a point that never happens");
        assert!(e.to_string().contains("never happens"), "{e}");
    }

    /// Expand, number, sample and shard, as a wave plans without a process:
    /// the sample keeps the planned order, and the shards split it exactly.
    #[test]
    fn a_plan_of_hand_made_boundaries_samples_and_shards_in_order() {
        let s = scenario(
            "cut = \"every-boundary\"\nfaults = [\"kill-runner\", \"kill-provider\", \"kill-both\", \"hang-provider\"]",
        );
        let expanded = expand(&s, &clean_run()).expect("expands");
        let cells = number(
            7,
            expanded
                .into_iter()
                .map(|e| ("s.runner-codex.local.c".to_owned(), e))
                .collect(),
        );
        // The clean cell, `kill-runner` after each of the three writes, and
        // the three provider faults where the provider is alive (two).
        assert_eq!(cells.len(), 1 + 3 + 3 * 2);
        let ids: Vec<&str> = cells.iter().map(|c| c.cell_id.as_str()).collect();
        assert_eq!(ids[..3], ["t001", "t002", "t003"]);
        let sampled = sample(cells.clone(), Some(6), 7);
        assert_eq!(sampled.len(), 6);
        let at = |c: &CellSpec| cells.iter().position(|x| x == c).expect("a planned cell");
        let order: Vec<usize> = sampled.iter().map(at).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        let shards: Vec<Vec<CellSpec>> = (1..=4).map(|i| shard(sampled.clone(), i, 4)).collect();
        assert_eq!(
            shards.iter().map(Vec::len).collect::<Vec<_>>(),
            [2, 2, 1, 1]
        );
        let mut joined: Vec<CellSpec> = shards.concat();
        joined.sort_by_key(at);
        assert_eq!(joined, sampled);
    }
}
