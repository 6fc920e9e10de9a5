//! Named fault points of a fake: `--exit POINT` and `--hang POINT`.
//!
//! Every boundary a fake passes (a message received, a turn recorded, a
//! response sent) goes through [`Faults::point`], which first offers the point
//! to the harness through `cutpoint::hit` and then applies a fault given on the
//! command line. `POINT` is a cut-point name, optionally with `#N` for its N-th
//! occurrence (default the first). An exit is a SIGKILL of the fake itself, so
//! nothing after the point runs, not even buffered writes; a hang stops the
//! fake's loop forever while the process stays alive.
//!
//! A fault fires once per state directory: before it fires it is written to
//! `<state-dir>/faults.fired` (fsync), and a fake started again on the same
//! state skips it. A runner that restarts its provider after a cut therefore
//! meets a healthy provider, as it would after a real crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;

use crate::journal::Journal;

/// The fault points armed for this process.
#[derive(Debug, Default)]
pub struct Faults {
    exit: Vec<cutpoint::Arm>,
    hang: Vec<cutpoint::Arm>,
    counts: Mutex<HashMap<String, u64>>,
    fired_file: Option<PathBuf>,
}

/// Name of the file, in the state directory, listing faults already fired.
pub const FIRED_FILE: &str = "faults.fired";

impl Faults {
    /// Parses `--exit` and `--hang` values, dropping those already fired on
    /// `state_dir`.
    pub fn new(
        exit: &[String],
        hang: &[String],
        state_dir: Option<&Path>,
    ) -> Result<Faults, cutpoint::Error> {
        let fired_file = state_dir.map(|d| d.join(FIRED_FILE));
        let fired: Vec<String> = fired_file
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default();
        let parse = |specs: &[String]| -> Result<Vec<cutpoint::Arm>, cutpoint::Error> {
            let mut arms = Vec::new();
            for spec in specs {
                arms.extend(cutpoint::parse_arm(spec)?);
            }
            Ok(arms)
        };
        let live = |kind: &str, arms: Vec<cutpoint::Arm>| -> Vec<cutpoint::Arm> {
            arms.into_iter()
                .filter(|a| !fired.contains(&format!("{kind} {a}")))
                .collect()
        };
        Ok(Faults {
            exit: live("exit", parse(exit)?),
            hang: live("hang", parse(hang)?),
            counts: Mutex::new(HashMap::new()),
            fired_file,
        })
    }

    /// Passes the boundary `name`: cut point first, then any armed fault.
    pub fn point(&self, name: &str, journal: &Journal) {
        cutpoint::hit(name);
        self.armed(name, journal);
    }

    /// Passes the boundary `name` where a request was received and is about
    /// to be answered: the harness may tell the fake to answer it with an
    /// error instead (`cutpoint::hit_answer`; the names are
    /// `wire::upstream`'s). Returns that name, journaled as the fact
    /// `fault.answer` first, with the `thread` (conversation) of the
    /// request when it names one; then any armed `--exit`/`--hang` applies.
    pub fn answer_point(
        &self,
        name: &str,
        thread: Option<&str>,
        journal: &Journal,
    ) -> Option<String> {
        let answer = cutpoint::hit_answer(name);
        if let Some(a) = &answer {
            let mut fact = json!({ "point": name, "answer": a });
            if let Some(t) = thread {
                fact["thread"] = json!(t);
            }
            journal.fact("fault.answer", fact);
        }
        self.armed(name, journal);
        answer
    }

    /// Applies a `--exit` or `--hang` armed at this hit of `name`.
    fn armed(&self, name: &str, journal: &Journal) {
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
            self.mark_fired("exit", name, n);
            journal.fact("fault.exit", json!({ "point": name, "n": n }));
            // SIGKILL rather than exit(): nothing may be flushed or cleaned up,
            // exactly as when the harness kills the process.
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            unreachable!("SIGKILL returned");
        }
        if matches(&self.hang) {
            self.mark_fired("hang", name, n);
            journal.fact("fault.hang", json!({ "point": name, "n": n }));
            loop {
                std::thread::park();
            }
        }
    }

    fn mark_fired(&self, kind: &str, name: &str, n: u64) {
        let Some(path) = &self.fired_file else { return };
        let line = format!("{kind} {name}#{n}\n");
        let written = crate::journal::open_append(path).and_then(|f| {
            crate::journal::append_once(&f, line.as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written {
            // Firing without the mark would fire again after a restart and
            // turn one fault into a crash loop; refusing is the honest choice.
            eprintln!(
                "fake-provider: failed to record fired fault in {}: {e}",
                path.display()
            );
            std::process::exit(3);
        }
    }
}
