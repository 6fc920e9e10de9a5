//! The runner's side of the cut points: `hit` passes a named point from async
//! code, `persisted` the point after a durable write
//! (`runner.<write>.persisted`).
//!
//! Every part of the runner that reports a boundary (the engine, the
//! drivers, the API) calls these, so none of them depends on another for
//! it. The names are the harness's contract and never change here; the wire
//! form and the arming live in the `cutpoint` crate.

/// Passes a cut point from async code. A held point blocks its thread, so
/// the hold runs under `block_in_place`: the worker's other tasks (the HTTP
/// API among them) move to another thread instead of waiting behind it.
/// Only the armed occurrence does: every other hit is counted (and traced)
/// where it is.
pub fn hit(point: &str) {
    cutpoint::hit_off(point, |hold| tokio::task::block_in_place(hold));
}

/// Passes `runner.<write>.persisted`, the point after the durable write
/// named `write`.
pub fn persisted(write: &str) {
    hit(&format!("runner.{write}.persisted"));
}
