//! What `turncut mutants` found: one row per seeded bug × profile, the
//! control's row among them. Data only: `mutants` fills it, the reporters
//! render it (the table on the console, a `mutants` JSON line).

use std::collections::BTreeMap;

/// The bug name of the control run (runnerd with no seeded bug).
pub const CONTROL: &str = "(none)";

/// The name under which a cell that a harness error cut short is counted
/// in [`MutantRow::caught_by`]: it caught nothing.
pub const HARNESS_ERROR: &str = "harness-error";

/// One row of the mutants table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MutantRow {
    /// The bug ([`CONTROL`] for the control).
    pub bug: String,
    /// The profile.
    pub profile: String,
    /// Cells run.
    pub cells: usize,
    /// Oracle name → failing cells.
    pub caught_by: BTreeMap<String, usize>,
    /// Cells that did not pass.
    pub failing: usize,
    /// One failing cell's name.
    pub example: Option<String>,
}

impl MutantRow {
    /// `oracle (n), …`, or `none` when nothing caught the bug.
    pub fn caught_by_text(&self, none: &str) -> String {
        let by: Vec<String> = self
            .caught_by
            .iter()
            .map(|(o, n)| format!("{o} ({n})"))
            .collect();
        if by.is_empty() {
            none.to_owned()
        } else {
            by.join(", ")
        }
    }

    /// A bug's row is good when an oracle caught it (a missed cut, vacuity,
    /// tested nothing: it catches no bug); the control's when nothing failed.
    pub fn good(&self) -> bool {
        if self.bug == CONTROL {
            return self.failing == 0;
        }
        self.caught_by
            .keys()
            .any(|k| k != HARNESS_ERROR && k != super::Oracle::Vacuity.as_str())
    }
}

/// A whole mutants run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MutantsResult {
    /// Its rows, in the order they ran (the control's first).
    pub rows: Vec<MutantRow>,
    /// Whether the control ran (`--no-control` skips it).
    pub control: bool,
    /// Its wall time.
    pub duration_ms: u64,
}

impl MutantsResult {
    /// Whether every row is good: every bug caught on every profile, and
    /// the control (when it ran) clean.
    pub fn ok(&self) -> bool {
        self.rows.iter().all(MutantRow::good)
    }
}
