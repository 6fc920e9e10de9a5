//! The subcommands of `turncut`, one module each, and what they share: the
//! error with its exit code, the cell environment from the options
//! (`env_for`), the report directory check and the stdout writer.
//!
//! `main.rs` parses the command line and dispatches here; nothing here
//! defines a flag.

use std::path::{Path, PathBuf};

use harness::cell::CellEnv;
use harness::model::{RunConfig, Verdict};
use harness::scenario;

use crate::Common;

pub mod crash_round;
pub mod doctor;
pub mod explore;
pub mod explore_workflows;
pub mod judge;
pub mod lazyfs;
pub mod list;
pub mod merge;
pub mod providers;
pub mod replay;
mod reports;
pub mod run;
mod stage2;
pub mod wave;

/// turncut's exit codes (README.md, "Exit codes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    /// 0: every cell or check passed.
    Pass = 0,
    /// 1: a check failed or was `unknown`, or the run stopped early.
    NotPass = 1,
    /// 2: bad input, found before anything ran.
    BadInput = 2,
    /// 3: the harness itself failed.
    HarnessError = 3,
}

impl Code {
    /// The code of a verdict: 0 pass, 1 anything else.
    pub fn of(v: Verdict) -> Code {
        match v {
            Verdict::Pass => Code::Pass,
            Verdict::Unknown | Verdict::Fail => Code::NotPass,
        }
    }

    /// [`Code::Pass`] when `ok`, else [`Code::NotPass`].
    pub fn pass_if(ok: bool) -> Code {
        if ok { Code::Pass } else { Code::NotPass }
    }

    /// The process exit status.
    pub fn status(self) -> i32 {
        self as i32
    }
}

/// An error with its exit code.
pub struct Exit(pub Code, pub String);

/// Bad input (exit 2).
pub fn bad(m: impl std::fmt::Display) -> Exit {
    Exit(Code::BadInput, m.to_string())
}

/// A harness error (exit 3).
pub fn harness_err(m: impl std::fmt::Display) -> Exit {
    Exit(Code::HarnessError, m.to_string())
}

/// Writes `text` to stdout; a closed pipe (`turncut list | head -1`) ends
/// turncut quietly with exit 0 instead of a panic.
pub(crate) fn emit(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("turncut: writing to stdout: {e}");
        std::process::exit(Code::HarnessError.status());
    }
}

/// Maps a planning error: a scenario problem found against the boundaries
/// is bad input (exit 2), anything else a harness error.
fn plan_err(e: harness::planner::PlanError) -> Exit {
    match e {
        harness::planner::PlanError::Scenario(se) => bad(se),
        harness::planner::PlanError::Harness(e) => harness_err(format!("{e:#}")),
    }
}

/// A seed from the clock (seconds since the epoch), for a command given none.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_secs())
}

/// The cell environment and scenarios: options given on the command line,
/// else those `recorded` in a wave.json (replay), else the defaults.
fn env_for(
    exe: &Path,
    common: &Common,
    recorded: Option<&RunConfig>,
) -> Result<(CellEnv, Vec<scenario::Scenario>), Exit> {
    // Cell directories of harness processes that were killed (SIGKILL skips
    // their cleanup) go before new ones are made.
    let swept = harness::tempdirs::sweep_stale();
    if swept > 0 {
        eprintln!("turncut: removed {swept} cell directories left by killed turncut runs");
    }
    let dir = match (
        &common.scenarios,
        recorded.and_then(|r| r.scenarios.as_ref()),
    ) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(d)) if !Path::new(d).is_dir() => {
            return Err(bad(format!(
                "the wave ran the scenarios of {d}, which is not here; pass --scenarios DIR"
            )));
        }
        (None, r) => r.map(PathBuf::from),
    };
    let scenarios = scenario::load(dir.as_deref()).map_err(bad)?;
    let mut env = CellEnv::new(exe, &dir.unwrap_or_default());
    env.stress = common.stress;
    env.progress = common.progress.clone();
    let runner_cmd = match (&common.runner_cmd, recorded) {
        (Some(cmd), _) => Some(cmd.split_whitespace().map(str::to_owned).collect()),
        (None, Some(r)) => r.runner_cmd.clone(),
        (None, None) => None,
    };
    if let Some(cmd) = runner_cmd {
        if cmd.is_empty() {
            return Err(bad("--runner-cmd is empty"));
        }
        env.runner_cmd = cmd;
    }
    env.runner_extra = match recorded {
        Some(r) if common.runner_args.is_empty() => r.runner_args.clone(),
        _ => common.runner_args.clone(),
    };
    let pick = |given: Option<u64>, recorded: Option<u64>, default: u64| {
        given.or(recorded.filter(|v| *v > 0)).unwrap_or(default)
    };
    env.idle_timeout_ms = pick(
        common.idle_timeout_ms,
        recorded.map(|r| r.idle_timeout_ms),
        env.idle_timeout_ms,
    );
    env.hang_idle_timeout_ms = pick(
        common.hang_idle_timeout_ms,
        recorded.map(|r| r.hang_idle_timeout_ms),
        env.hang_idle_timeout_ms,
    );
    env.wait_ms = pick(
        common.cell_wait_ms,
        recorded.map(|r| r.cell_wait_ms),
        env.wait_ms,
    );
    env.keep = common.keep;
    env.recut = !recorded.is_some_and(|r| r.depth1_only);
    Ok((env, scenarios))
}

fn unknown_id(scenarios: &[scenario::Scenario], id: &str) -> Exit {
    let ids: Vec<String> = scenarios.iter().flat_map(|s| s.ids()).collect();
    bad(format!(
        "unknown scenario id {id}{}; `turncut list` shows the ids",
        scenario::did_you_mean(id, ids.iter().map(String::as_str))
    ))
}

/// Creates the report directory before any cell runs, so a bad `--out`
/// (e.g. under a regular file) is bad input, not a loss after the wave.
fn prepare_out(out: &Path) -> Result<(), Exit> {
    if let Err(e) = std::fs::create_dir_all(out) {
        let file = out.ancestors().find(|a| a.is_file());
        return Err(bad(match file {
            Some(f) => format!(
                "--out {}: {} is a file, not a directory",
                out.display(),
                f.display()
            ),
            None => format!("--out {}: cannot create it: {e}", out.display()),
        }));
    }
    tempfile::tempfile_in(out)
        .map(drop)
        .map_err(|e| bad(format!("--out {}: cannot write there: {e}", out.display())))
}

/// The scenario ids containing `only` (all without it); none is bad input.
/// The scenario ids `--only` selects. A real product's id (`*-real`
/// profiles: seconds per cell, not milliseconds) is in only when `real`
/// (`--real`) or when `--only` names its profile; what is left out is said.
fn matching_ids(
    scenarios: &[scenario::Scenario],
    only: Option<&str>,
    real: bool,
) -> Result<Vec<String>, Exit> {
    let chosen = |id: &String| match wire::profiles::real(scenario::profile_of(id)) {
        Some(r) => real || only.is_some_and(|o| o.contains(r.name)),
        None => true,
    };
    let (ids, left): (Vec<String>, Vec<String>) = scenarios
        .iter()
        .flat_map(|s| s.ids())
        .filter(|id| only.is_none_or(|o| id.contains(o)))
        .partition(chosen);
    if !left.is_empty() {
        eprintln!(
            "left out {} scenario ids of real products (--real, or --only runner-codex-real / runner-opencode-real, runs them)",
            left.len()
        );
    }
    if ids.is_empty() {
        return Err(bad(
            "no scenario matches --only; `turncut list` shows the ids",
        ));
    }
    Ok(ids)
}
