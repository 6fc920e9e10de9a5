//! Second cuts inside new recoveries, for `explore --workflows`.
//!
//! A program's random schedules rarely put their second fault inside the
//! recovery the first one caused, at the one boundary where a bug lives: a
//! lost turn continued, then the next message's intent failing; a turn
//! re-sent, then the runner killed before the re-send's acceptance. Drawn
//! uniformly, such a pair is one schedule in thousands. So each program
//! also draws one first event and traces the recovery it causes; when that
//! recovery is new to this exploration — its profile, the path it walked
//! and the work the program leaves waiting behind it, as stage 2 picks its
//! representatives (`recuts::waiting_work`) — it is cut again with a
//! sample ([`PER_RECOVERY`]) of the second faults stage 2 would use at its
//! boundaries (`recuts::span`, `recuts::second_faults`). A recovery seen before is not traced again, so
//! the cost follows the recoveries found, not the programs run: coverage
//! guides the search, as a fuzzer's does.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::cell::CellEnv;
use crate::model::{Event, Fault};
use crate::scenario::Scenario;
use crate::{plan, recuts};

/// The recoveries whose boundaries were cut again: (profile, path, work
/// left waiting).
#[derive(Default)]
pub struct Recovered(Mutex<HashSet<(String, String, usize)>>);

impl Recovered {
    /// How many recoveries were cut again.
    pub fn count(&self) -> usize {
        self.0.lock().expect("recovered").len()
    }

    /// Records a recovery; whether it is new.
    fn first_time(&self, key: (String, String, usize)) -> bool {
        self.0.lock().expect("recovered").insert(key)
    }
}

/// The two-event schedules that cut the recovery after `first` again, when
/// that recovery is new: `[first, second]` for each boundary of its span
/// and each of that boundary's second faults. None when the traced run
/// walked no recovery, one seen before, or could not be made (a power
/// cut's recovery walks a kill's paths on less state, as stage 2 reasons).
pub fn recovery_schedules(
    env: &CellEnv,
    scenario: &Scenario,
    profile: &str,
    first: &Event,
    seen: &Recovered,
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
    if !seen.first_time(key) {
        return Vec::new();
    }
    second_cuts(first, &after)
}

/// The second cuts run per new recovery: a sample, drawn by the
/// explorer's generator, in boundary order. All of them (stage 2's ~50 per
/// recovery, ~200 per program) held an explorer on one program for
/// minutes: at `--jobs 1` a 4-minute run at seed 1 cut the first program's
/// recoveries for the whole budget, and never drew a program of another
/// profile, nor a power cut. The wave's stage 2 stays exhaustive.
pub const PER_RECOVERY: usize = 12;

/// At most `k` of `schedules`, drawn by `rng` (a partial Fisher-Yates
/// shuffle of their indices), in their order.
pub fn sampled(
    schedules: Vec<Vec<Event>>,
    k: usize,
    rng: &mut impl proptest::prelude::Rng,
) -> Vec<Vec<Event>> {
    let n = schedules.len();
    if n <= k {
        return schedules;
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
    schedules
        .into_iter()
        .zip(picked)
        .filter_map(|(s, keep)| keep.then_some(s))
        .collect()
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

    #[test]
    fn a_recovery_is_cut_again_only_the_first_time() {
        let seen = Recovered::default();
        let key = (
            "runner-codex".to_owned(),
            "continued → completed".to_owned(),
            2,
        );
        assert!(seen.first_time(key.clone()));
        assert!(!seen.first_time(key));
        assert!(seen.first_time(("runner-codex".into(), "continued → completed".into(), 3)));
        assert_eq!(seen.count(), 2);
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
