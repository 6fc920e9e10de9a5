//! Which process reached a cut point (`Role`): the runner, a provider or a
//! model API, as the cutpoint wire names it. Only the name and its parsing
//! live here; what a role may be cut with is `Fault`'s.

use serde::{Deserialize, Serialize};

/// Which process reached a cut point: the `TURNCUT_ROLE` it was started
/// with (the cutpoint wire carries it as text, `unknown` when unset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The runner under test.
    Runner,
    /// A provider (a fake, or a real product behind the harness's `tap`).
    Provider,
    /// The fake model API of a real product or the native profile.
    Model,
    /// A process started without a role.
    #[serde(other)]
    Unknown,
}

impl Role {
    /// The role named `name` on the cutpoint wire.
    pub fn of(name: &str) -> Role {
        match name {
            "runner" => Role::Runner,
            "provider" => Role::Provider,
            "model" => Role::Model,
            _ => Role::Unknown,
        }
    }

    /// Its name on the wire and in `TURNCUT_ROLE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Runner => "runner",
            Role::Provider => "provider",
            Role::Model => "model",
            Role::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
