//! One parallel map for the harness's independent runs: planning's clean
//! traced runs, stage 2's traced recoveries. Each item is taken by the next
//! free thread; the results come back in the items' order, so what is
//! decided from them does not depend on which thread ran what. Long runs
//! may be taken first ([`map_longest_first`]), so none is left alone at the
//! end.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every item of `items`, on `jobs` threads (at least one), in the
/// items' order.
pub fn map<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_longest_first(items, jobs, |_| 0, f)
}

/// [`map`], with the items taken longest first by `cost` (ties in the
/// items' order): a long item left for last runs alone while the other
/// threads have nothing to do. The results still come back in the items'
/// order; only which runs overlap changes.
pub fn map_longest_first<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    cost: impl Fn(&T) -> u64,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let order = longest_first(items, cost);
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&i) = order.get(k) else { break };
                    let r = f(&items[i]);
                    out.lock().expect("results")[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every item was mapped"))
        .collect()
}

/// The indices of `items`, the costliest first (a stable sort: equal costs
/// keep the items' order).
pub fn longest_first<T>(items: &[T], cost: impl Fn(&T) -> u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&items[i])));
    order
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_the_items_order_whatever_the_threads() {
        let items: Vec<u64> = (0..50).collect();
        for jobs in [0, 1, 3, 64] {
            let out = super::map(&items, jobs, |n| {
                // Uneven work, so that threads finish out of order.
                std::thread::yield_now();
                n * n
            });
            assert_eq!(
                out,
                items.iter().map(|n| n * n).collect::<Vec<_>>(),
                "jobs {jobs}"
            );
        }
        assert!(super::map(&[] as &[u8], 4, |_| ()).is_empty());
    }

    #[test]
    fn the_costliest_items_are_taken_first_and_the_results_keep_the_items_order() {
        let items: Vec<u64> = vec![3, 9, 1, 9, 5];
        assert_eq!(super::longest_first(&items, |n| *n), vec![1, 3, 4, 0, 2]);
        // One thread takes the items in that order.
        let taken = std::sync::Mutex::new(Vec::new());
        let out = super::map_longest_first(
            &items,
            1,
            |n| *n,
            |n| {
                taken.lock().unwrap().push(*n);
                n * 2
            },
        );
        assert_eq!(taken.into_inner().unwrap(), vec![9, 9, 5, 3, 1]);
        assert_eq!(out, vec![6, 18, 2, 18, 10]);
    }
}
