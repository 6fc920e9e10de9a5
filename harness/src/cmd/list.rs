//! `turncut list` (scenario ids and titles) and `turncut boundaries` (the
//! cut points of a clean traced run).

use std::path::Path;

use harness::scenario;

use super::{Code, Exit, emit, env_for, harness_err, unknown_id};
use crate::Common;

/// `turncut list [PATTERN]`: every scenario id containing `pattern`, with
/// its title.
pub fn list(exe: &Path, common: &Common, pattern: Option<&str>) -> Result<Code, Exit> {
    let (_, scenarios) = env_for(exe, common, None)?;
    let mut text = String::new();
    for s in &scenarios {
        for id in s.ids() {
            if pattern.is_none_or(|p| id.contains(p)) {
                text.push_str(&format!("{id}\t{}\n", s.title));
            }
        }
    }
    emit(&text);
    Ok(Code::Pass)
}

/// `turncut boundaries ID`: the cut points of a clean traced run, with
/// whether a provider is alive at each; exit 1 when the clean run did not
/// pass.
pub fn boundaries(exe: &Path, common: &Common, scenario_id: &str) -> Result<Code, Exit> {
    let (env, scenarios) = env_for(exe, common, None)?;
    let (s, profile) = scenario::find(&scenarios, scenario_id)
        .ok_or_else(|| unknown_id(&scenarios, scenario_id))?;
    let d = harness::planner::discover_retrying(&env, s, &profile)
        .map_err(|e| harness_err(format!("{e:#}")))?;
    let mut text = format!(
        "{scenario_id}: {} boundaries (clean run: {}, {} ms)\n",
        d.boundaries.len(),
        d.clean_state,
        d.clean_ms
    );
    for b in &d.boundaries {
        text.push_str(&format!(
            "{:<9} {:<60} {}\n",
            b.role,
            b.cut.to_string(),
            if b.provider_alive {
                "provider alive"
            } else {
                "no provider"
            }
        ));
    }
    emit(&text);
    Ok(Code::of(d.clean_verdict))
}
