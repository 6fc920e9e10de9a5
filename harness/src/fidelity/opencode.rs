//! The OpenCode moments of the differential (wired with the real
//! `opencode serve` profile).

use std::path::Path;

use super::Row;

/// The rows of every OpenCode moment.
pub fn rows(_turncut: &Path, _opencode: &Path, _dir: &Path) -> Result<Vec<Row>, String> {
    Err("the OpenCode moments are not wired yet".to_owned())
}
