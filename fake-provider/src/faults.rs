//! Named fault points of a fake: `--exit POINT` and `--hang POINT`.
//!
//! Every boundary a fake passes (a message received, a turn recorded, a
//! response sent) goes through [`Faults::point`], which first offers the point
//! to the harness through `cutpoint::hit` and then applies a fault given on the
//! command line. `POINT` is a cut-point name, optionally with `#N` for its N-th
//! occurrence (default the first). An exit is a SIGKILL of the fake itself, so
//! nothing after the point runs, not even buffered writes; a hang stops the
//! fake's loop forever while the process stays alive.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::json;

use crate::journal::Journal;

/// The fault points armed for this process.
#[derive(Debug, Default)]
pub struct Faults {
    exit: Vec<cutpoint::Arm>,
    hang: Vec<cutpoint::Arm>,
    counts: Mutex<HashMap<String, u64>>,
}

impl Faults {
    /// Parses `--exit` and `--hang` values.
    pub fn new(exit: &[String], hang: &[String]) -> Result<Faults, cutpoint::Error> {
        let parse = |specs: &[String]| -> Result<Vec<cutpoint::Arm>, cutpoint::Error> {
            let mut arms = Vec::new();
            for spec in specs {
                arms.extend(cutpoint::parse_arm(spec)?);
            }
            Ok(arms)
        };
        Ok(Faults {
            exit: parse(exit)?,
            hang: parse(hang)?,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// Passes the boundary `name`: cut point first, then any armed fault.
    pub fn point(&self, name: &str, journal: &Journal) {
        cutpoint::hit(name);
        if self.exit.is_empty() && self.hang.is_empty() {
            return;
        }
        let n = {
            let mut counts = self.counts.lock().expect("fault counters");
            let c = counts.entry(name.to_owned()).or_insert(0);
            *c += 1;
            *c
        };
        let matches = |arms: &[cutpoint::Arm]| arms.iter().any(|a| a.point == name && a.n == n);
        if matches(&self.exit) {
            journal.fact("fault.exit", json!({ "point": name, "n": n }));
            // SIGKILL rather than exit(): nothing may be flushed or cleaned up,
            // exactly as when the harness kills the process.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL returned");
        }
        if matches(&self.hang) {
            journal.fact("fault.hang", json!({ "point": name, "n": n }));
            loop {
                std::thread::park();
            }
        }
    }
}
