//! One parallel map for the harness's independent runs: planning's clean
//! traced runs, stage 2's traced recoveries. Each item is taken by the next
//! free thread; the results come back in the items' order, so what is
//! decided from them does not depend on which thread ran what.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every item of `items`, on `jobs` threads (at least one), in the
/// items' order.
pub fn map<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
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
}
