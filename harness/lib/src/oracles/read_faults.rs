//! Read faults (`fail-read`, `corrupt-read`) as the justification of a run's
//! `storage_failed`, kept apart from the oracles that ask for it (`contract`,
//! `retry.works`) so that the rule has one place.
//!
//! The contract (`docs/recovery-contract.md`, "Read faults") tries a failed
//! read again before it fails a run: a read changes nothing, so a second try
//! is safe, and a disk that failed one read often serves the next. One read
//! fault therefore never justifies `storage_failed`; a read that failed
//! again when tried again (two read faults or more in the cell) does. This
//! does not hold a runner to the reference runner's count of tries: it only
//! asks that a runner try a failed read at least once more.

use crate::evidence::{ActionKind, Evidence};

/// Whether the read faults the harness applied justify a run's
/// `storage_failed`: at least two (see the module doc).
pub(super) fn justify_storage_failed(e: &Evidence) -> bool {
    read_faults_applied(e) >= 2
}

/// How many read faults the harness applied in the cell.
fn read_faults_applied(e: &Evidence) -> usize {
    e.actions
        .iter()
        .filter(|a| matches!(a.what, ActionKind::Fault(f) if f.is_read()))
        .count()
}
