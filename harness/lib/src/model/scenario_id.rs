//! The scenario id: the one place that knows its shape.

use serde::{Deserialize, Serialize};

/// A scenario id, `<suite>.<profile>.<location>.<case>`
/// (`everyday-workflows.runner-codex.local.single-task`): the one place
/// that knows its shape. It reads as the text it is (a `&str`, in
/// `wave.json` a string); its parts come from [`ScenarioId::profile`] and
/// the others, never from splitting it by hand.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ScenarioId(String);

impl ScenarioId {
    /// The id of `case` at `location` in `suite`, on `profile`.
    pub fn new(suite: &str, profile: &str, location: &str, case: &str) -> ScenarioId {
        ScenarioId(format!("{suite}.{profile}.{location}.{case}"))
    }

    /// Its `i`-th part, or `""` (an id written by hand may have fewer).
    fn part(&self, i: usize) -> &str {
        ScenarioId::part_of(&self.0, i)
    }

    /// The `i`-th part of the id `id` held as text.
    pub fn part_of(id: &str, i: usize) -> &str {
        id.splitn(4, '.').nth(i).unwrap_or_default()
    }

    /// The suite (`everyday-workflows`).
    pub fn suite(&self) -> &str {
        self.part(0)
    }

    /// The profile (`runner-codex`).
    pub fn profile(&self) -> &str {
        self.part(1)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for ScenarioId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for ScenarioId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ScenarioId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for ScenarioId {
    fn from(s: String) -> ScenarioId {
        ScenarioId(s)
    }
}

impl From<&str> for ScenarioId {
    fn from(s: &str) -> ScenarioId {
        ScenarioId(s.to_owned())
    }
}

impl PartialEq<str> for ScenarioId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ScenarioId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ScenarioId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}
