//! The built-in provider profiles, once: which protocol each speaks, which
//! fake serves it, and what the harness may expect of it. The runner builds
//! its built-in profiles from this table; the harness's scenarios, cells,
//! contract oracle and mutants read it.

use serde::Deserialize;

/// The protocol a profile speaks (the runner's driver).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Codex app-server over stdio.
    Codex,
    /// Agent Client Protocol over stdio (ACPX-style agents).
    Acp,
    /// OpenCode server over HTTP + SSE.
    Opencode,
    /// An OpenAI-Responses model API; the runner runs the tools itself.
    Native,
}

impl Protocol {
    /// The name a cell's evidence and trace use for the runner's driver.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Codex => "codex",
            Protocol::Acp => "acp",
            Protocol::Opencode => "opencode",
            Protocol::Native => "native",
        }
    }
}

/// A built-in profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Builtin {
    /// The profile name scenarios list.
    pub name: &'static str,
    pub protocol: Protocol,
    /// The `fake-provider` subcommand that serves it.
    pub fake: &'static str,
    /// Extra arguments of that subcommand.
    pub fake_args: &'static [&'static str],
    /// Whether the provider's "was this turn recorded?" answer tells a
    /// completed turn from an interrupted one. ACP's cannot (a `session/load`
    /// replay shows the user message, not the turn's end), so its runner
    /// continues a recorded, accepted turn instead of adopting it.
    pub proves_completion: bool,
}

impl Builtin {
    /// The runner runs the tools itself (no provider turn to look up,
    /// continue, adopt or fail closed).
    pub fn native(&self) -> bool {
        self.protocol == Protocol::Native
    }
}

/// Every built-in profile.
pub const BUILTIN: [Builtin; 4] = [
    Builtin {
        name: "runner-codex",
        protocol: Protocol::Codex,
        fake: "codex",
        fake_args: &[],
        proves_completion: true,
    },
    Builtin {
        name: "runner-acpx-claude",
        protocol: Protocol::Acp,
        fake: "acp",
        fake_args: &[],
        proves_completion: false,
    },
    Builtin {
        name: "runner-opencode",
        protocol: Protocol::Opencode,
        fake: "opencode",
        fake_args: &["--port", "0"],
        proves_completion: true,
    },
    Builtin {
        name: "runner-native-openai",
        protocol: Protocol::Native,
        fake: "model-api",
        fake_args: &["--port", "0"],
        proves_completion: true,
    },
];

/// The built-in profile called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTIN.iter().find(|p| p.name == name)
}

/// The names of the built-in profiles.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|p| p.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_only_acp_cannot_prove_completion() {
        let mut names: Vec<_> = names().collect();
        names.dedup();
        assert_eq!(names.len(), BUILTIN.len());
        let weak: Vec<_> = BUILTIN.iter().filter(|p| !p.proves_completion).collect();
        assert_eq!(weak.len(), 1);
        assert_eq!(weak[0].protocol, Protocol::Acp);
        assert!(builtin("runner-native-openai").unwrap().native());
        assert!(builtin("runner-foo").is_none());
    }
}
