//! Named fault points of a fake: `--exit POINT`, `--hang POINT` and
//! `--answer POINT=NAME`.
//!
//! Every boundary a fake passes (a message received, a turn recorded, a
//! response sent) goes through [`Faults::point`], which first offers the point
//! to the harness through `cutpoint::hit` and then applies a fault given on the
//! command line. `POINT` is a cut-point name, optionally with `#N` for its N-th
//! occurrence (default the first). An exit is a SIGKILL of the fake itself, so
//! nothing after the point runs, not even buffered writes; a hang stops the
//! fake's loop forever while the process stays alive. An answer is what the
//! harness's cut-point reply `answer NAME` does, without the harness: at a
//! point where the fake may answer with a failure ([`Faults::answer_point`]),
//! it answers with `NAME` (a `wire::upstream` fault or `error-answer`), so a
//! tool (`turncut fidelity`) can make a fake fail there on its own.
//!
//! A fault fires once per state directory: before it fires it is written to
//! `<state-dir>/faults.fired` (fsync), and a fake started again on the same
//! state skips it. A runner that restarts its provider after a cut therefore
//! meets a healthy provider, as it would after a real crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use serde_json::json;

use crate::journal::Journal;

/// The fault points armed for this process.
#[derive(Debug, Default)]
pub struct Faults {
    exit: Vec<cutpoint::Arm>,
    hang: Vec<cutpoint::Arm>,
    /// `--answer` arms with the answer each gives.
    answer: Vec<(cutpoint::Arm, String)>,
    counts: Mutex<HashMap<String, u64>>,
    fired_file: Option<PathBuf>,
}

/// Name of the file, in the state directory, listing faults already fired.
pub const FIRED_FILE: &str = "faults.fired";

/// The command-line faults of a fake, as given: `--exit`, `--hang` and
/// `--answer` values.
#[derive(Debug, Default)]
pub struct Specs<'a> {
    /// `--exit POINT` values.
    pub exit: &'a [String],
    /// `--hang POINT` values.
    pub hang: &'a [String],
    /// `--answer POINT=NAME` values.
    pub answer: &'a [String],
}

impl Faults {
    /// Parses the command line's fault values, dropping those already fired
    /// on `state_dir`.
    pub fn new(specs: &Specs<'_>, state_dir: Option<&Path>) -> anyhow::Result<Faults> {
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
        let mut answer = Vec::new();
        for spec in specs.answer {
            let (arms, name) = parse_answer(spec)?;
            answer.extend(
                live("answer", arms)
                    .into_iter()
                    .map(|a| (a, name.to_owned())),
            );
        }
        Ok(Faults {
            exit: live("exit", parse(specs.exit)?),
            hang: live("hang", parse(specs.hang)?),
            answer,
            counts: Mutex::new(HashMap::new()),
            fired_file,
        })
    }

    /// Passes the boundary `name`: cut point first, then any armed fault.
    pub fn point(&self, name: &str, journal: &Journal) {
        cutpoint::hit(name);
        self.armed(name, self.count(name), journal);
    }

    /// Passes the boundary `name` where a request was received and is about
    /// to be answered: the harness may tell the fake to answer it with an
    /// error instead (`cutpoint::hit_answer`; the names are
    /// `wire::upstream`'s), else an `--answer` armed at this hit does.
    /// Returns that name, journaled as the fact `fault.answer` first, with
    /// the `thread` (conversation) of the request when it names one; then
    /// any armed `--exit`/`--hang` applies.
    pub fn answer_point(
        &self,
        name: &str,
        thread: Option<&str>,
        journal: &Journal,
    ) -> Option<String> {
        self.answer_point_in(name, thread, None, journal)
    }

    /// [`Faults::answer_point`] for a request that may name no
    /// conversation yet (one that starts one): its `fault.answer` names
    /// the working directory it was made for too (`cwd`, else the
    /// process's own), which tells the task of a cell of several tasks
    /// whose request it was.
    pub fn answer_point_in(
        &self,
        name: &str,
        thread: Option<&str>,
        cwd: Option<&str>,
        journal: &Journal,
    ) -> Option<String> {
        let n = self.count(name);
        let answer = cutpoint::hit_answer(name).or_else(|| {
            let (arm, answer) = self
                .answer
                .iter()
                .find(|(a, _)| a.point == name && a.n == n)?;
            self.mark_fired("answer", &arm.point, arm.n);
            Some(answer.clone())
        });
        if let Some(a) = &answer {
            let mut fact = json!({ "point": name, "answer": a });
            if let Some(t) = thread {
                fact["thread"] = json!(t);
            }
            // The request's working directory, else the process's own: a
            // runner starts each task's provider in that task's workspace,
            // and a handshake (`initialize`) names neither conversation nor
            // directory.
            let own = std::env::current_dir()
                .ok()
                .map(|d| d.display().to_string());
            if let Some(c) = cwd.map(str::to_owned).or(own) {
                fact["cwd"] = json!(c);
            }
            journal.fact("fault.answer", fact);
        }
        self.armed(name, n, journal);
        answer
    }

    /// Counts a hit of `name`: which hit of it this is (0 when nothing is
    /// armed, so nothing is counted).
    fn count(&self, name: &str) -> u64 {
        if self.exit.is_empty() && self.hang.is_empty() && self.answer.is_empty() {
            return 0;
        }
        let mut counts = self.counts.lock().expect("fault counters");
        let c = counts.entry(name.to_owned()).or_insert(0);
        *c += 1;
        *c
    }

    /// Applies a `--exit` or `--hang` armed at the `n`-th hit of `name`.
    fn armed(&self, name: &str, n: u64, journal: &Journal) {
        if self.exit.is_empty() && self.hang.is_empty() {
            return;
        }
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

/// Parses an `--answer` value, `POINT[#N]=NAME`: its arms and the answer,
/// which must be one a fake gives (`wire::upstream`'s).
fn parse_answer(spec: &str) -> anyhow::Result<(Vec<cutpoint::Arm>, &str)> {
    let Some((point, name)) = spec.split_once('=') else {
        bail!("--answer {spec}: expected POINT[#N]=NAME, e.g. codex.model.requested#1=rate-limit");
    };
    let known = ::wire::upstream::UpstreamFault::parse(name).is_some()
        || name == ::wire::upstream::ERROR_ANSWER;
    if !known {
        let names: Vec<&str> = ::wire::upstream::UpstreamFault::ALL
            .iter()
            .map(|f| f.as_str())
            .chain([::wire::upstream::ERROR_ANSWER])
            .collect();
        bail!(
            "--answer {spec}: no answer {name:?}; use one of {}",
            names.join(", ")
        );
    }
    let arms = cutpoint::parse_arm(point).with_context(|| format!("--answer {spec}"))?;
    if arms.iter().any(|a| a.n == cutpoint::EVERY) {
        bail!("--answer {spec}: an answer fires once; name one occurrence (POINT#N)");
    }
    Ok((arms, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(answer: &[&str], dir: &Path) -> anyhow::Result<Faults> {
        let answer: Vec<String> = answer.iter().map(|s| (*s).to_owned()).collect();
        let specs = Specs {
            answer: &answer,
            ..Specs::default()
        };
        Faults::new(&specs, Some(dir))
    }

    #[test]
    fn an_armed_answer_fires_at_its_hit_once_per_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(Some(&dir.path().join("j.jsonl"))).unwrap();
        let f = faults(&["model.responses.received#2=rate-limit"], dir.path()).unwrap();
        let p = "model.responses.received";
        assert_eq!(f.answer_point(p, Some("c"), &journal), None);
        assert_eq!(
            f.answer_point(p, Some("c"), &journal).as_deref(),
            Some("rate-limit")
        );
        assert_eq!(f.answer_point(p, Some("c"), &journal), None);
        let entries = wire::journal::read(&dir.path().join("j.jsonl")).unwrap();
        let answers: Vec<_> = entries
            .iter()
            .filter(|e| e.fact.as_deref() == Some("fault.answer"))
            .map(|e| e.data.clone())
            .collect();
        // It names the process's working directory: a runner starts each
        // task's provider in that task's workspace.
        let here = std::env::current_dir().unwrap().display().to_string();
        assert_eq!(
            answers,
            [json!({ "point": p, "answer": "rate-limit", "thread": "c", "cwd": here })]
        );
        // A request that names its directory names that one.
        let f = faults(&["codex.thread_start.received#1=error-answer"], dir.path()).unwrap();
        let q = "codex.thread_start.received";
        assert!(
            f.answer_point_in(q, None, Some("/ws/task-2"), &journal)
                .is_some()
        );
        let entries = wire::journal::read(&dir.path().join("j.jsonl")).unwrap();
        let last = entries.last().unwrap();
        assert_eq!(last.data["cwd"], "/ws/task-2", "{:?}", last.data);
        // Started again on the same state, the fired answer is gone.
        let again = faults(&["model.responses.received#2=rate-limit"], dir.path()).unwrap();
        assert!(again.answer.is_empty());
    }

    #[test]
    fn a_bad_answer_spec_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        for (spec, says) in [
            ("model.responses.received", "expected POINT[#N]=NAME"),
            ("model.responses.received=teapot", "use one of rate-limit"),
            (
                "model.responses.received#*=rate-limit",
                "name one occurrence",
            ),
            ("#1=rate-limit", "--answer #1=rate-limit"),
        ] {
            let e = faults(&[spec], dir.path()).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{spec}: {e:#}");
        }
    }
}
