//! `turncut doctor`: the runner of `--runner-cmd` (runnerd by default)
//! checked against the runner contract (`harness::doctor`), with the
//! `single-task` scenario's script; prints the checks and the oracles table.
//! Exit 0 when a wave can run, 2 with the first missing piece.

use std::path::Path;

use harness::{doctor, scenario};

use super::{Code, Exit, bad, emit, env_for};
use crate::Common;

/// The scenario whose script and cut points the doctor uses.
const CASE: &str = "single-task";

/// `turncut doctor [--profile P]…`.
pub fn doctor(exe: &Path, common: &Common, profiles: &[String]) -> Result<Code, Exit> {
    let (env, scenarios) = env_for(exe, common, None)?;
    let fakes: Vec<String> = wire::profiles::BUILTIN
        .iter()
        .map(|p| p.name.to_owned())
        .collect();
    for p in profiles {
        if !fakes.contains(p) {
            return Err(bad(format!(
                "--profile {p}: the doctor runs the fake providers' profiles only ({})",
                fakes.join(", ")
            )));
        }
    }
    let profiles = if profiles.is_empty() {
        fakes
    } else {
        profiles.to_vec()
    };
    let id = format!("everyday-workflows.{}.local.{CASE}", profiles[0]);
    let (s, _) = scenario::find(&scenarios, &id)
        .ok_or_else(|| bad(format!("the scenarios have no {id}, which the doctor runs")))?;
    eprintln!(
        "turncut doctor: {} on {} (each profile: a start, the API, a clean task, a traced clean cell)",
        env.runner_cmd.join(" "),
        profiles.join(", ")
    );
    let report = doctor::examine(&env, s, &profiles);
    emit(&doctor::render(&report));
    // A runner a wave cannot run on is bad input for the wave (exit 2).
    Ok(if report.ready() {
        Code::Pass
    } else {
        Code::BadInput
    })
}
