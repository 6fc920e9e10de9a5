//! Cost of persisting one run-log event at history 10 and at history 10,000.
//!
//! `cargo bench -p runner --bench persist`. Each event is its own durable
//! transaction (WAL, `synchronous=FULL`), exactly as the engine writes it. The
//! target (DESIGN §7) is a ratio of at most 1.5 between the two histories.

use std::time::Instant;

use runner::store::Store;
use serde_json::json;

const SAMPLES: usize = 300;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Appends `n` history events for `task` in one transaction (setup only).
fn fill(store: &Store, task: &str, n: usize) {
    let task = task.to_owned();
    store
        .call_blocking(move |db| {
            let conn = db.conn();
            conn.execute_batch("BEGIN")?;
            for seq in 1..=n as i64 {
                conn.execute(
                    "INSERT INTO events(task_id, seq, run_id, ts_ms, kind, data) VALUES (?1, ?2, NULL, 0, 'history', '{}')",
                    rusqlite::params![task, seq],
                )?;
            }
            conn.execute_batch("COMMIT")?;
            Ok(())
        })
        .expect("history is written");
}

fn measure(store: &Store, task: &str) -> f64 {
    let mut times = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES + 10 {
        let t = task.to_owned();
        let started = Instant::now();
        store
            .call_blocking(move |db| {
                db.append(
                    "bench",
                    &t,
                    None,
                    "item.completed",
                    json!({ "i": i, "text": "a line of output" }),
                )
            })
            .expect("append");
        if i >= 10 {
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    median(times)
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = Store::open(&dir.path().join("state")).expect("store");
    fill(&store, "small", 10);
    fill(&store, "large", 10_000);
    // Interleave the two so disk noise hits both alike.
    let mut small = Vec::new();
    let mut large = Vec::new();
    for _ in 0..3 {
        small.push(measure(&store, "small"));
        large.push(measure(&store, "large"));
    }
    let (s, l) = (median(small), median(large));
    println!("persist one event (durable transaction), median of {SAMPLES} x 3:");
    println!("  history 10:      {s:8.1} us");
    println!("  history 10,000:  {l:8.1} us");
    println!("  ratio:           {:8.2} (target <= 1.5)", l / s);
}
