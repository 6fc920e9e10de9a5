//! `runnerd`, the durable reference runner: the system under test.
//!
//! This crate is an empty shell until the runner issue lands: it links the
//! `cutpoint` client so the workspace layout is fixed from the start. It has no
//! binary yet, so nothing can mistake it for a working runner.

/// The cut-point role this crate reports to the harness.
pub const CUT_ROLE: &str = "runner";
