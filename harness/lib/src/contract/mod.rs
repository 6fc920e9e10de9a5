//! The recovery contract as data, independent of any runner's code.
//!
//! The closed sets of causes (with their `recoverable` flags), contract events,
//! Retry block reasons and refusal reasons, as `docs/recovery-contract.md`
//! lists them; a test keeps the two equal. The oracles judge a runner against
//! these tables, never against the runner's own enums, so a runner that
//! changes its codes cannot quietly change what is judged.

pub mod model;

/// Causes and whether each is recoverable.
pub const CAUSES: &[(&str, bool)] = &[
    ("provider_turn_lost_on_restore", true),
    ("ambiguous_turn_start", false),
    ("active_turn_recovery_closed", false),
    ("continuation_exhausted", false),
    ("cleanup_quarantined", false),
    ("provider_protocol_error", false),
    ("provider_start_failed", false),
    ("storage_failed", false),
    ("upstream_rate_limited", true),
    ("upstream_overloaded", true),
    ("upstream_server_error", true),
    ("upstream_stream_broken", true),
    ("upstream_unauthorized", false),
    ("context_window_exceeded", false),
    ("provider_lookup_failed", false),
];

/// The causes after which the runner tries again by itself before it
/// settles (the "runner retries" column): one continuation of a lost turn,
/// the model request again after a transient upstream failure.
pub const RUNNER_RETRIES: &[&str] = &[
    "provider_turn_lost_on_restore",
    "upstream_rate_limited",
    "upstream_overloaded",
    "upstream_server_error",
    "upstream_stream_broken",
];

/// Server-authored contract events.
pub const EVENTS: &[&str] = &[
    "provider_exited",
    "provider_unresponsive",
    "tool_outcome_uncertain",
    "stopped_conversation_verified",
    "prior_owner_fence_refused",
    "message.stranded",
];

/// Reasons a Retry may be refused.
pub const RETRY_BLOCKS: &[&str] = &[
    "execution_active",
    "process_running",
    "cleanup_quarantined",
    "nothing_to_retry",
];

/// Reasons other requests may be refused.
pub const REFUSALS: &[&str] = &[
    "prior_owner_fence_refused",
    "id_conflict",
    "unknown_profile",
];

/// Causes that fail a run closed after a cut, each justified by evidence.
pub const FAIL_CLOSED: &[&str] = &[
    "ambiguous_turn_start",
    "active_turn_recovery_closed",
    "continuation_exhausted",
];

/// Whether a profile's "was this turn recorded?" lookup can tell a completed
/// turn from an interrupted one (`wire::profiles::Builtin::proves_completion`:
/// ACP cannot, so its runner continues a recorded, accepted turn instead of
/// adopting it). Unknown profiles are held to the precise rule.
pub fn proves_completion(profile: &str) -> bool {
    wire::profiles::facts(profile).is_none_or(|p| p.proves_completion)
}

/// The expected `recoverable` flag of a cause, or `None` outside the set.
pub fn recoverable(code: &str) -> Option<bool> {
    CAUSES.iter().find(|(c, _)| *c == code).map(|(_, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
        let start = doc.find(heading).unwrap_or_else(|| panic!("no {heading}"));
        doc[start..]
            .lines()
            .skip(1)
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().trim_matches('`').to_owned())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_tables_match_the_contract_document() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/recovery-contract.md"
        ))
        .unwrap();
        let causes: Vec<(String, bool)> = table(&doc, "## Causes")
            .into_iter()
            .map(|r| (r[0].clone(), r[1] == "true"))
            .collect();
        let ours: Vec<(String, bool)> = CAUSES.iter().map(|(c, r)| (c.to_string(), *r)).collect();
        assert_eq!(causes, ours);
        let retries: Vec<String> = table(&doc, "## Causes")
            .into_iter()
            .filter(|r| r[2] == "yes")
            .map(|r| r[0].clone())
            .collect();
        assert_eq!(retries, RUNNER_RETRIES);
        let names =
            |h: &str| -> Vec<String> { table(&doc, h).into_iter().map(|r| r[0].clone()).collect() };
        assert_eq!(names("## Events"), EVENTS);
        assert_eq!(names("## Retry block reasons"), RETRY_BLOCKS);
        assert_eq!(names("## Refusal reasons"), REFUSALS);
    }
}
