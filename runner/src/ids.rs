//! Fresh opaque ids (runs, spawn markers, native conversations): a prefix
//! and a random UUID, so an id never repeats across runner processes.

/// A fresh opaque id with a prefix.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}
