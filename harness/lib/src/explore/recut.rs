//! Second cuts inside recoveries, for `explore --workflows`.
//!
//! A program's random schedules rarely put their second fault inside the
//! recovery the first one caused, at the one boundary where a bug lives: a
//! lost turn continued, then the next message's intent failing; a turn
//! re-sent, then the runner killed before the re-send's acceptance. Drawn
//! uniformly, such a pair is one schedule in thousands. So each program
//! also draws first events (those whose point and fault its profile has not
//! traced first) and traces the recovery each causes. A recovery — its
//! profile, the path it walked and the work the program leaves waiting
//! behind it, as stage 2 picks its representatives
//! (`recuts::waiting_work`) — is cut again with a sample of the second
//! faults stage 2 would use at its boundaries (`recuts::span`,
//! `recuts::second_faults`): [`PER_RECOVERY`] the first time it is walked,
//! [`PER_VISIT_AGAIN`] each later time, never a second cut (point and
//! fault) already run inside it. The cost follows the recoveries found and
//! the cuts not yet run in them, not the programs run: coverage guides the
//! search, as a fuzzer's does.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::cell::CellEnv;
use crate::model::{Event, Fault};
use crate::scenario::Scenario;
use crate::{plan, recuts};

/// A recovery: (profile, path, work left waiting).
type RecoveryKey = (String, String, usize);

/// What an exploration has cut: each recovery traced, with the second
/// cuts (point and fault) already run inside it, and the first events
/// (profile, point, fault) already traced.
#[derive(Default)]
pub struct Recovered {
    recoveries: Mutex<HashMap<RecoveryKey, HashSet<(String, Fault)>>>,
    firsts: Mutex<HashSet<(String, String, Fault)>>,
}

impl Recovered {
    /// How many recoveries were cut again.
    pub fn count(&self) -> usize {
        self.recoveries.lock().expect("recovered").len()
    }

    /// Records a first event of `profile` to trace; whether its point and
    /// fault are new to this exploration (the occurrence aside: a bug
    /// lives at a kind of boundary, and each program has its own counts).
    pub fn first_new(&self, profile: &str, first: &Event) -> bool {
        let key = (profile.to_owned(), first.cut.point.clone(), first.fault);
        self.firsts.lock().expect("firsts").insert(key)
    }

    /// At most [`PER_RECOVERY`] of `cuts` (at a recovery's first visit;
    /// [`PER_VISIT_AGAIN`] at a later one) whose second event (point and
    /// fault) was not yet run inside the recovery `key`, drawn by `rng`,
    /// recorded as run.
    fn untried(
        &self,
        key: RecoveryKey,
        cuts: Vec<Vec<Event>>,
        rng: &mut impl proptest::prelude::Rng,
    ) -> Vec<Vec<Event>> {
        let mut all = self.recoveries.lock().expect("recovered");
        let k = match all.contains_key(&key) {
            true => PER_VISIT_AGAIN,
            false => PER_RECOVERY,
        };
        let tried = all.entry(key).or_default();
        let second = |s: &Vec<Event>| s.last().map(|e| (e.cut.point.clone(), e.fault));
        let fresh = cuts
            .into_iter()
            .filter(|s| second(s).is_some_and(|x| !tried.contains(&x)))
            .collect();
        let picked = writes_first(fresh, k, rng);
        tried.extend(picked.iter().filter_map(second));
        picked
    }
}

/// The two-event schedules that cut the recovery after `first` again: a
/// sample of [`PER_RECOVERY`] of `[first, second]` for each boundary of its
/// span and each of that boundary's second faults, those whose second
/// event was run inside the same recovery before left out. None when the
/// traced run walked no recovery, every second cut of it was run, or it
/// could not be made (a power cut's recovery walks a kill's paths on less
/// state, as stage 2 reasons).
pub fn recovery_schedules(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    first: &Event,
    seen: &Recovered,
    rng: &mut impl proptest::prelude::Rng,
) -> Vec<Vec<Event>> {
    if first.fault == Fault::PowerCut {
        return Vec::new();
    }
    let Ok((path, after)) = crate::discover::walk_recovery(env, scenario, profile, first, None)
    else {
        return Vec::new();
    };
    if path.is_empty() || path == "unknown" {
        return Vec::new();
    }
    let key = (profile.to_owned(), path, recuts::waiting_work(scenario));
    seen.untried(key, second_cuts(first, &after), rng)
}

/// The second cuts run per new recovery: a sample, drawn by the
/// explorer's generator, in boundary order. All of them (stage 2's ~50 per
/// recovery, ~200 per program) held an explorer on one program for
/// minutes: at `--jobs 1` a 4-minute run at seed 1 cut the first program's
/// recoveries for the whole budget, and never drew a program of another
/// profile, nor a power cut. The wave's stage 2 stays exhaustive.
pub const PER_RECOVERY: usize = 12;

/// The second cuts run when a recovery is walked again (by another first
/// event, in another program): fewer, so that a recovery many first events
/// walk is cut through over an exploration, and one that few walk is cut
/// at [`PER_RECOVERY`] boundaries the first time.
pub const PER_VISIT_AGAIN: usize = 4;

/// At most `k` of `cuts`, drawn by `rng`: up to two thirds of them among
/// the second cuts before one of the runner's durable writes (kill-runner,
/// fail-write), the rest among all the others left. A recovery's writes
/// are where a crash changes what the next runner finds (a re-sent turn's
/// acceptance, the next message's intent): a few of some fifty boundaries
/// of a span, they were cut about once in four walks of a recovery, and
/// the second cut `absent-keeps-acceptance` needs (kill-runner before the
/// re-send's acceptance) was never reached in 10 minutes.
fn writes_first(
    cuts: Vec<Vec<Event>>,
    k: usize,
    rng: &mut impl proptest::prelude::Rng,
) -> Vec<Vec<Event>> {
    let at_write = |s: &Vec<Event>| {
        s.last()
            .is_some_and(|e| e.cut.point.starts_with(crate::model::WRITE_POINTS))
    };
    let (writes, others): (Vec<_>, Vec<_>) = cuts.into_iter().partition(at_write);
    let (mut picked, left) = split_sample(writes, k - k / 3, rng);
    let rest = sampled(
        left.into_iter().chain(others).collect(),
        k - picked.len(),
        rng,
    );
    picked.extend(rest);
    picked
}

/// At most `k` of `schedules`, drawn by `rng` (a partial Fisher-Yates
/// shuffle of their indices), in their order.
pub fn sampled(
    schedules: Vec<Vec<Event>>,
    k: usize,
    rng: &mut impl proptest::prelude::Rng,
) -> Vec<Vec<Event>> {
    split_sample(schedules, k, rng).0
}

/// [`sampled`], and the schedules it left, in their order.
fn split_sample(
    schedules: Vec<Vec<Event>>,
    k: usize,
    rng: &mut impl proptest::prelude::Rng,
) -> (Vec<Vec<Event>>, Vec<Vec<Event>>) {
    let n = schedules.len();
    if n <= k {
        return (schedules, Vec::new());
    }
    let mut index: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = i + (rng.next_u64() % (n - i) as u64) as usize;
        index.swap(i, j);
    }
    let mut picked = vec![false; n];
    for &i in &index[..k] {
        picked[i] = true;
    }
    let (kept, left): (Vec<_>, Vec<_>) = schedules.into_iter().zip(picked).partition(|(_, k)| *k);
    let strip = |v: Vec<(Vec<Event>, bool)>| v.into_iter().map(|(s, _)| s).collect();
    (strip(kept), strip(left))
}

/// `[first, second]` for every second event stage 2 plans in the recovery
/// `after` (its boundaries after `first`).
fn second_cuts(first: &Event, after: &[plan::Boundary]) -> Vec<Vec<Event>> {
    recuts::span(after)
        .into_iter()
        .flat_map(|b| {
            recuts::second_faults(b).into_iter().map(|fault| {
                let second = Event {
                    cut: b.cut.clone(),
                    fault,
                };
                vec![first.clone(), second]
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cut, Role};

    fn b(point: &str, n: u64) -> plan::Boundary {
        plan::Boundary {
            segment: 0,
            cut: Cut {
                point: point.into(),
                n,
            },
            role: Role::Runner,
            provider_alive: true,
        }
    }

    #[test]
    fn a_recovery_is_cut_at_each_boundary_of_its_span_with_each_second_fault() {
        let first = Event {
            cut: Cut {
                point: "runner.item.persisted".into(),
                n: 2,
            },
            fault: Fault::KillRunner,
        };
        let after = [
            b("runner.write.turn_ended", 1),
            b("runner.turn_accepted.persisted", 1),
            b("runner.write.turn_intent", 1),
        ];
        let cuts = second_cuts(&first, &after);
        let named: Vec<String> = cuts
            .iter()
            .map(|s| crate::model::format_schedule(s))
            .collect();
        assert!(cuts.iter().all(|s| s[0] == first && s.len() == 2));
        // The next message's intent after the recovered turn may fail:
        // the write the seeded bug `retry-decides-by-primary-turn` needs.
        assert!(
            named
                .iter()
                .any(|s| s.ends_with("runner.write.turn_intent#1/fail-write")),
            "{named:?}"
        );
        assert!(
            named
                .iter()
                .any(|s| s.ends_with("runner.write.turn_ended#1/kill-runner")),
            "{named:?}"
        );
    }

    fn kill(point: &str, n: u64) -> Vec<Event> {
        vec![Event {
            cut: Cut {
                point: point.into(),
                n,
            },
            fault: Fault::KillRunner,
        }]
    }

    /// A recovery seen again is cut only where it was not cut before (its
    /// second events' points and faults): 12 cuts at its first visit, 4 at
    /// each later one, until every cut was run; another recovery, or the
    /// same path with other work waiting, is cut afresh.
    #[test]
    fn a_recovery_is_cut_again_only_where_it_was_not_cut_before() {
        let seen = Recovered::default();
        let key = |work| {
            (
                "runner-codex".to_owned(),
                "continued → completed".to_owned(),
                work,
            )
        };
        let cuts: Vec<Vec<Event>> = (1..=20).map(|n| kill(&format!("runner.p{n}"), n)).collect();
        let mut rng = crate::workflow::seeded_runner(1, 0);
        let mut run = Vec::new();
        let mut sizes = Vec::new();
        for _ in 0..4 {
            let visit = seen.untried(key(2), cuts.clone(), rng.rng());
            sizes.push(visit.len());
            run.extend(visit);
        }
        assert_eq!(
            sizes,
            [12, 4, 4, 0],
            "12, then 4 at a time, until none is left"
        );
        run.sort_by_key(|s| s[0].cut.n);
        assert_eq!(run, cuts, "each cut once");
        // The same point at another occurrence is the same cut.
        assert!(
            seen.untried(key(2), vec![kill("runner.p1", 9)], rng.rng())
                .is_empty()
        );
        assert_eq!(seen.untried(key(3), cuts, rng.rng()).len(), 12);
        assert_eq!(seen.count(), 2);
    }

    /// A recovery's durable writes are cut first: at its first walk 8 of
    /// its 12 second cuts are before a write (while any is left), at a
    /// later walk 3 of 4; the others fill the rest.
    #[test]
    fn a_recoverys_writes_are_cut_first() {
        let seen = Recovered::default();
        let key = (
            "runner-codex".to_owned(),
            "re-sent → completed".to_owned(),
            0,
        );
        let mut cuts: Vec<Vec<Event>> =
            (1..=40).map(|n| kill(&format!("runner.p{n}"), 1)).collect();
        cuts.extend((1..=10).map(|n| kill(&format!("runner.write.w{n}"), 1)));
        let mut rng = crate::workflow::seeded_runner(1, 0);
        let writes = |v: &[Vec<Event>]| {
            v.iter()
                .filter(|s| s[0].cut.point.starts_with("runner.write."))
                .count()
        };
        let visits: Vec<(usize, usize)> = (0..3)
            .map(|_| {
                let v = seen.untried(key.clone(), cuts.clone(), rng.rng());
                (v.len(), writes(&v))
            })
            .collect();
        assert_eq!(
            visits,
            [(12, 8), (4, 2), (4, 0)],
            "10 writes: 8, then the 2 left"
        );
    }

    /// A first event is new once per profile, point and fault.
    #[test]
    fn a_first_event_is_new_once_per_point_and_fault() {
        let seen = Recovered::default();
        let e = |n| kill("runner.item.persisted", n).remove(0);
        assert!(seen.first_new("runner-codex", &e(1)));
        assert!(!seen.first_new("runner-codex", &e(2)));
        assert!(seen.first_new("runner-opencode", &e(1)));
    }

    /// A recovery's second cuts are sampled: at most `k`, in their order,
    /// the same for the same generator, all of them when there are fewer.
    #[test]
    fn a_recoverys_second_cuts_are_a_seeded_sample_in_order() {
        let schedules: Vec<Vec<Event>> = (1..=40)
            .map(|n| {
                vec![Event {
                    cut: Cut {
                        point: "runner.item.persisted".into(),
                        n,
                    },
                    fault: Fault::KillRunner,
                }]
            })
            .collect();
        let draw = |seed| {
            let mut rng = crate::workflow::seeded_runner(seed, 0);
            sampled(schedules.clone(), 12, rng.rng())
        };
        let (a, b) = (draw(1), draw(1));
        assert_eq!(a, b, "seeded");
        assert_eq!(a.len(), 12);
        let ns: Vec<u64> = a.iter().map(|s| s[0].cut.n).collect();
        assert!(ns.windows(2).all(|w| w[0] < w[1]), "in order: {ns:?}");
        assert_ne!(ns, (1..=12).collect::<Vec<_>>(), "not the first twelve");
        assert_ne!(draw(2), a, "another seed, another sample");
        let mut rng = crate::workflow::seeded_runner(1, 0);
        assert_eq!(sampled(schedules[..5].to_vec(), 12, rng.rng()).len(), 5);
    }
}
