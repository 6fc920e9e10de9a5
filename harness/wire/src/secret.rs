//! The provider credential's names and the canary the harness plants in it.
//!
//! The credential must never reach a tool's environment, the disk, logs or
//! reports; the effect command and the oracles check for it by these names.

/// The variable the runner reads the provider credential from (and removes
/// from its own environment before it starts anything).
pub const CREDENTIAL_ENV: &str = "TURNCUT_PROVIDER_API_KEY";

/// Prefix of every canary credential the harness plants. A value starting with
/// it in a tool's environment means a credential leaked into a tool shell.
pub const CANARY_PREFIX: &str = "turncut-canary-";

/// Environment variables that carry provider credentials. Fakes remove them
/// from a tool's environment, as a careful provider does.
pub const CREDENTIAL_VARS: &[&str] = &[
    "TURNCUT_PROVIDER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "CODEX_API_KEY",
];

/// Whether this process's environment holds a credential variable or a value
/// carrying the canary prefix.
pub fn environment_has_secret() -> bool {
    std::env::vars_os().any(|(k, v)| {
        let named = k.to_str().is_some_and(|k| CREDENTIAL_VARS.contains(&k));
        let canary = v.to_string_lossy().contains(CANARY_PREFIX);
        named || canary
    })
}
