//! `durable.effect`: a file the runner wrote for a tool, whose outcome its
//! run log holds as done, is on disk with what the tool asked to write —
//! after a power cut too.
//!
//! The run log's claim: a `tool.executing` of kind `write_text_file` (ACP's
//! client tool) or `Write` (the native tool), its `detail.path`, and for the
//! same key a `tool.outcome` that completed (`status: completed`, or the
//! native `ok: true`). The provider's own record says what the write was to
//! put there: the journaled `fs/write_text_file` requests for that path, or
//! the model's `Write` calls naming it (their `content`). The workspace, read at the end of the cell, says what is
//! there. In a power-cut cell the workspace sits on a lazy mount, so a file
//! the runner renamed into place without syncing its bytes (empty) or its
//! directory (gone) fails here while the run log still says done. It does
//! not judge tools whose effect the runner does not write itself (commands:
//! the ledger and `no-replay.effect` hold those).

use std::collections::BTreeMap;

use super::Judgement;
use super::Oracle;
use crate::evidence::{Evidence, Source};
use crate::model::OracleResult;
use crate::run_log::{Data, Kind, RunLogEvent};

/// A write the run log holds as done.
struct Claim<'a> {
    key: &'a str,
    path: &'a str,
    /// The `tool.outcome` event's sequence number.
    seq: i64,
}

/// The `tool.executing` kinds of a file write the runner performs itself:
/// ACP's `fs/write_text_file`, the native `Write` tool.
const WRITE_KINDS: [&str; 2] = ["write_text_file", "Write"];

/// Every file write the run log `events` holds as completed, in run-log
/// order.
fn claims(events: &[RunLogEvent]) -> Vec<Claim<'_>> {
    let mut paths: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for ev in events {
        match &ev.data {
            Data::ToolExecuting(x)
                if x.kind.as_deref().is_some_and(|k| WRITE_KINDS.contains(&k)) =>
            {
                if let Some(path) = x.detail.as_ref().and_then(|d| d.path.as_deref()) {
                    paths.insert(&x.key, path);
                }
            }
            Data::ToolOutcome(o) if o.completed() => {
                if let Some(path) = paths.get(o.key.as_str()) {
                    out.push(Claim {
                        key: &o.key,
                        path,
                        seq: ev.seq,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Why a tool call's event in `events` does not parse, if one does not: a
/// write the run log holds could be hidden in it.
fn malformed_tool_event(events: &[RunLogEvent]) -> Option<String> {
    events
        .iter()
        .filter(|ev| matches!(ev.kind(), Kind::ToolExecuting | Kind::ToolOutcome))
        .find_map(|ev| ev.error().map(ToString::to_string))
}

/// `path` as the workspace evidence names it: relative to the workspace.
fn in_workspace<'a>(e: &Evidence, path: &'a str) -> Option<&'a str> {
    let relative = match path.strip_prefix(e.workspace_root.as_str()) {
        Some(rest) if !e.workspace_root.is_empty() => rest.strip_prefix('/')?,
        _ if path.starts_with('/') => return None,
        _ => path,
    };
    Some(relative.trim_start_matches("./"))
}

/// The oracle; see the module doc. Judged twice in a power-cut cell: the
/// writes the run log held as done before the cut (the controller's own
/// read) against the workspace right after it, before the runner could
/// write again; and the final run log against the final workspace.
pub fn durable_effect(e: &Evidence) -> OracleResult {
    let mut j = Judgement::new(Oracle::DurableEffect);
    let at_end = claims(&e.events);
    let before_cut = match (&e.events_before_power_cut, &e.workspace_after_cut) {
        (Some(events), Some(files)) => Some((claims(events), files)),
        _ => None,
    };
    let hidden = malformed_tool_event(&e.events)
        .or_else(|| malformed_tool_event(e.events_before_power_cut.as_deref()?));
    if at_end.is_empty()
        && before_cut.as_ref().is_none_or(|(c, _)| c.is_empty())
        && hidden.is_none()
    {
        return j.done();
    }
    j = j.needs(e, &[Source::RunLog, Source::Journal, Source::Workspace]);
    if let Some(why) = hidden {
        j.unknown.get_or_insert(format!("run-log: {why}"));
    }
    if let Some((claims, files)) = &before_cut {
        check(&mut j, e, claims, files, "after the power cut");
    }
    if let Some(files) = &e.workspace {
        check(&mut j, e, &at_end, files, "at the end of the cell");
    }
    j.done()
}

/// Holds each path's last completed write in `claims` to `files`.
fn check(
    j: &mut Judgement,
    e: &Evidence,
    claims: &[Claim<'_>],
    files: &BTreeMap<String, String>,
    when: &str,
) {
    let mut last: BTreeMap<&str, &Claim<'_>> = BTreeMap::new();
    for c in claims {
        last.insert(c.path, c);
    }
    for c in last.values() {
        let wanted = e.writes_asked(c.path);
        let at = format!("events#{}", c.seq);
        let Some(rel) = in_workspace(e, c.path) else {
            j.unknown.get_or_insert(format!(
                "the write of {} (tool {}) names a path outside the workspace",
                c.path, c.key
            ));
            continue;
        };
        if wanted.is_empty() {
            j.unknown.get_or_insert(format!(
                "the run log holds a write of {} (tool {}) the journal never asked for",
                c.path, c.key
            ));
            continue;
        }
        match files.get(rel) {
            None => j.fail(
                format!(
                    "the run log holds the write of {} (tool {}) as completed, but the file is not in the workspace {when}",
                    c.path, c.key
                ),
                [at],
            ),
            Some(now) if !wanted.contains(now) => j.fail(
                format!(
                    "the run log holds the write of {} (tool {}) as completed, but the file holds {} bytes no write asked for {when} (asked: {:?})",
                    c.path,
                    c.key,
                    now.len(),
                    wanted
                ),
                [at],
            ),
            Some(_) => {}
        }
    }
}
