//! Times `cutpoint::hit` in the disarmed and in the active-but-not-matching states.
//!
//! The state is fixed once per process, so the bench measures the disarmed
//! path in this process and then re-runs itself with an arm that never
//! matches (and no trace) to measure the active path. It is a plain
//! `Instant`-timed loop, not a statistical benchmark: it exists to catch an
//! order-of-magnitude regression in the cost of a disarmed hit.

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

const CALLS: u32 = 10_000_000;
/// Set in the re-run child so that it measures the active path instead.
const CHILD_MODE: &str = "CUTPOINT_BENCH_ACTIVE";

fn time_hits(label: &str) {
    cutpoint::init().expect("the bench sets a well-formed environment");
    // Warm up so the first-hit initialisation is not part of the figure.
    cutpoint::hit("bench.warm.up");
    let start = Instant::now();
    for _ in 0..CALLS {
        cutpoint::hit(black_box("bench.loop.hit"));
    }
    let elapsed = start.elapsed();
    let per_call = elapsed.as_secs_f64() * 1e9 / f64::from(CALLS);
    println!("{label}: {per_call:.2} ns/call ({CALLS} calls in {elapsed:?})");
}

fn main() {
    if std::env::var_os(CHILD_MODE).is_some() {
        time_hits("active hit, non-matching arm, no trace");
        return;
    }
    for var in [
        cutpoint::ENV_ARM,
        cutpoint::ENV_SOCKET,
        cutpoint::ENV_TRACE,
        cutpoint::ENV_ROLE,
    ] {
        if std::env::var_os(var).is_some() {
            eprintln!("disarmed bench: unset {var} first");
            std::process::exit(2);
        }
    }
    time_hits("disarmed hit");
    let exe = std::env::current_exe().expect("the bench knows its own path");
    // The socket path is never connected to because the arm never matches.
    let status = Command::new(exe)
        .env(CHILD_MODE, "1")
        .env(cutpoint::ENV_ARM, "bench.never.hit#1")
        .env(cutpoint::ENV_SOCKET, "/nonexistent/cutpoint-bench.sock")
        .status()
        .expect("the bench can re-run itself");
    assert!(status.success(), "active bench run failed: {status}");
}
