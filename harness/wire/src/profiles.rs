//! The built-in provider profiles, once: which protocol each speaks, which
//! fake serves it, and what the harness may expect of it. The runner builds
//! its built-in profiles from this table; the harness's scenarios, cells,
//! contract oracle and mutants read it.

use serde::Deserialize;

/// runnerd's default `--provider-exit-grace-ms`: how long a provider whose
/// turns all ended may take to exit on its own once its input is closed
/// (Claude Code writes its transcript on a 100 ms timer after answering).
/// The harness shortens it in hang cells, never lengthens it.
pub const EXIT_GRACE_MS: u64 = 2_000;

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

/// The real program behind a real profile: how it is started and
/// configured, and how its state is read back (its protocol alone does not
/// say: three ACP agents serve the ACP profile).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `codex app-server`.
    Codex,
    /// `opencode serve`, or `opencode acp` for the ACP profile.
    Opencode,
    /// `codex-acp`: Codex's core behind an ACP agent (Zed's); its model
    /// speaks the OpenAI Responses API.
    CodexAcp,
    /// `claude-agent-acp`: the Claude Agent SDK (Claude Code) behind an ACP
    /// agent (Zed's); its model speaks the Anthropic Messages API.
    ClaudeAgentAcp,
}

/// A profile with a real product as its provider: the same protocol and
/// recovery facts as the fake profile it mirrors, but the real program
/// (installed from npm, pinned), whose model is the fake model API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Real {
    /// The profile name scenarios list.
    pub name: &'static str,
    /// The fake profile with the same protocol (the differential's partner).
    pub mirrors: &'static str,
    /// The npm package that installs it.
    pub package: &'static str,
    /// Its pinned version (the version of the vendored protocol spec).
    pub version: &'static str,
    /// The executable the package installs.
    pub bin: &'static str,
    /// Which program it is.
    pub program: Program,
}

/// Every profile with a real product.
pub const REAL: [Real; 5] = [
    Real {
        name: "runner-codex-real",
        mirrors: "runner-codex",
        package: "@openai/codex",
        version: "0.171.0",
        bin: "codex",
        program: Program::Codex,
    },
    Real {
        name: "runner-opencode-real",
        mirrors: "runner-opencode",
        package: "opencode-ai",
        version: "1.18.33",
        bin: "opencode",
        program: Program::Opencode,
    },
    // OpenCode's own ACP agent (`opencode acp`, the same package): a real
    // agent for the ACP profile, offline against the fake model API.
    Real {
        name: "runner-acpx-opencode-real",
        mirrors: "runner-acpx-claude",
        package: "opencode-ai",
        version: "1.18.33",
        bin: "opencode",
        program: Program::Opencode,
    },
    // The two ACP agents the seed platform drives through acpx, offline:
    // codex-acp against the fake Responses API, claude-agent-acp (the
    // Claude Agent SDK) against the fake Messages API.
    Real {
        name: "runner-acpx-codex-real",
        mirrors: "runner-acpx-claude",
        package: "@zed-industries/codex-acp",
        version: "0.16.0",
        bin: "codex-acp",
        program: Program::CodexAcp,
    },
    Real {
        name: "runner-acpx-claude-real",
        mirrors: "runner-acpx-claude",
        package: "@zed-industries/claude-agent-acp",
        version: "0.23.1",
        bin: "claude-agent-acp",
        program: Program::ClaudeAgentAcp,
    },
];

/// The built-in profile with a fake provider called `name`.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTIN.iter().find(|p| p.name == name)
}

/// The profile with a real provider called `name`.
pub fn real(name: &str) -> Option<&'static Real> {
    REAL.iter().find(|p| p.name == name)
}

/// The protocol and recovery facts of the profile `name`: its own, or
/// those of the fake profile a real one mirrors.
pub fn facts(name: &str) -> Option<&'static Builtin> {
    builtin(name).or_else(|| real(name).and_then(|r| builtin(r.mirrors)))
}

/// The names of every profile a scenario may list: the fakes', then the
/// real products'.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTIN
        .iter()
        .map(|p| p.name)
        .chain(REAL.iter().map(|p| p.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_only_acp_cannot_prove_completion() {
        let mut names: Vec<_> = names().collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), BUILTIN.len() + REAL.len());
        let weak: Vec<_> = BUILTIN.iter().filter(|p| !p.proves_completion).collect();
        assert_eq!(weak.len(), 1);
        assert_eq!(weak[0].protocol, Protocol::Acp);
        assert!(builtin("runner-native-openai").unwrap().native());
        assert!(builtin("runner-foo").is_none());
    }

    #[test]
    fn a_real_profile_has_the_facts_of_the_fake_it_mirrors() {
        for r in &REAL {
            let fake = builtin(r.mirrors).expect("a real profile mirrors a fake one");
            assert_eq!(facts(r.name), Some(fake));
            assert!(builtin(r.name).is_none());
            assert!(!fake.native());
        }
    }
}
