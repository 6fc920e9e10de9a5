//! The real `opencode serve`: its command line against the fake model API,
//! and its durable turns read back through its session API after the cell.

use std::time::Duration;

use wire::recorded::RecordedTurn;

use super::Product;

/// The argv of `opencode serve` against `model_url`.
pub(super) fn command(_p: &Product, _model_url: &str, _tag: &str) -> anyhow::Result<Vec<String>> {
    anyhow::bail!("runner-opencode-real is not wired yet")
}

/// Every turn of every session in the product's home.
pub(super) fn recorded_turns(
    _p: &Product,
    _model_url: &str,
    _within: Duration,
) -> Result<Vec<RecordedTurn>, String> {
    Err("runner-opencode-real is not wired yet".to_owned())
}
