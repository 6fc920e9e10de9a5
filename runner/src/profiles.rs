//! Provider profiles: which driver talks to which command line.
//!
//! The built-in profiles run the fakes found beside the runner binary (the
//! standalone `fake-provider`, or `turncut fake-provider` when runnerd is
//! `turncut runnerd`): `runner-codex` (`fake-provider codex`),
//! `runner-acpx-claude` (`fake-provider acp`) and `runner-opencode`
//! (`fake-provider opencode --port 0`). A TOML profiles file can define or
//! override profiles with any command line, such as a real `codex app-server`.
//! Placeholders in a command: `{provider_dir}` (a per-task state directory for
//! the provider), `{workspace}`, `{task_id}`. This module only describes
//! profiles; it never starts anything.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The protocol a profile speaks.
pub use wire::profiles::Protocol as DriverKind;

/// One profile.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The driver.
    pub driver: DriverKind,
    /// The provider command line, with placeholders.
    pub command: Vec<String>,
    /// The answer to approval requests: `accept` or `decline`.
    #[serde(default = "default_approval")]
    pub approval: String,
    /// The environment variable that carries the credential to the provider.
    #[serde(default = "default_credential_env")]
    pub credential_env: String,
    /// Hand the credential through a one-shot FIFO whose path
    /// `credential_env` names, for a provider that reads its key from a file
    /// and gives its tools its whole environment (`engine::credential_fifo`).
    #[serde(default)]
    pub credential_fifo: bool,
    /// Hand the credential through a Unix socket whose path
    /// `credential_env` names, for a provider that connects to it and reads
    /// its key (the fakes: `wire::secret::receive_credential`): only a
    /// connection from the provider's own process is served, and no scan of
    /// every process is needed to know it (`engine::credential_socket`).
    #[serde(default)]
    pub credential_socket: bool,
    /// How many times the FIFO (or socket) is served, each time to the provider's own
    /// process only: a provider may read its key file more than once
    /// (`opencode acp` reads it at start and at `session/new`).
    #[serde(default = "default_credential_reads")]
    pub credential_reads: u32,
    /// The model a native profile asks for.
    #[serde(default = "default_model")]
    pub model: String,
}

fn default_model() -> String {
    "gpt-5-codex".to_owned()
}

fn default_credential_reads() -> u32 {
    1
}

fn default_approval() -> String {
    "accept".to_owned()
}

fn default_credential_env() -> String {
    "TURNCUT_PROVIDER_API_KEY".to_owned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    #[serde(default)]
    profile: BTreeMap<String, Profile>,
}

/// The command that reaches `fake-provider` from this executable.
pub fn fake_provider_command(exe: &Path) -> Vec<String> {
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    if name == "turncut" {
        return vec![exe.display().to_string(), "fake-provider".to_owned()];
    }
    let beside = dir.join("fake-provider");
    if beside.is_file() {
        return vec![beside.display().to_string()];
    }
    vec![
        dir.join("turncut").display().to_string(),
        "fake-provider".to_owned(),
    ]
}

/// The built-in profiles, plus those of `file` (which win).
pub fn load(exe: &Path, file: Option<&Path>) -> anyhow::Result<BTreeMap<String, Profile>> {
    let mut profiles = BTreeMap::new();
    for p in &wire::profiles::BUILTIN {
        let mut command = fake_provider_command(exe);
        command.extend([
            p.fake.to_owned(),
            "--state-dir".to_owned(),
            "{provider_dir}".to_owned(),
        ]);
        command.extend(p.fake_args.iter().map(|a| a.to_string()));
        profiles.insert(
            p.name.to_owned(),
            Profile {
                driver: p.protocol,
                command,
                approval: default_approval(),
                credential_env: default_credential_env(),
                // The fakes take their key from a socket, as a careful
                // provider would: it is in no environment a tool can read.
                credential_fifo: false,
                credential_socket: true,
                credential_reads: default_credential_reads(),
                model: default_model(),
            },
        );
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("failed to read profiles file {}: {e}", path.display()))?;
        let parsed: ProfilesFile = toml::from_str(&text).map_err(|e| {
            let place = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                    format!("{}:{line}:{col}", path.display())
                })
                .unwrap_or_else(|| path.display().to_string());
            anyhow::anyhow!("{place}: {}", e.message())
        })?;
        for (name, p) in parsed.profile {
            if p.command.is_empty() {
                anyhow::bail!("{}: profile {name} has an empty command", path.display());
            }
            if p.credential_fifo && p.credential_socket {
                anyhow::bail!(
                    "{}: profile {name}: credential_fifo and credential_socket are both set; \
                     keep the one the provider reads (a file: credential_fifo; a Unix socket: \
                     credential_socket)",
                    path.display()
                );
            }
            if !matches!(p.approval.as_str(), "accept" | "decline") {
                anyhow::bail!(
                    "{}: profile {name}: approval must be \"accept\" or \"decline\", not {:?}",
                    path.display(),
                    p.approval
                );
            }
            profiles.insert(name, p);
        }
    }
    Ok(profiles)
}

/// Substitutes the placeholders of a command line.
pub fn expand(
    command: &[String],
    provider_dir: &Path,
    workspace: &str,
    task_id: &str,
) -> Vec<String> {
    command
        .iter()
        .map(|a| {
            a.replace("{provider_dir}", &provider_dir.display().to_string())
                .replace("{workspace}", workspace)
                .replace("{task_id}", task_id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fakes take their key from the socket; a profile may ask for one
    /// hand-off, not both, and the refusal names the file and the fix.
    #[test]
    fn a_profile_takes_the_socket_or_the_fifo_not_both() {
        let exe = Path::new("/opt/turncut");
        let builtin = load(exe, None).unwrap();
        assert!(
            builtin
                .values()
                .all(|p| p.credential_socket && !p.credential_fifo)
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profiles.toml");
        let both = "[profile.p]\ndriver = \"codex\"\ncommand = [\"x\"]\n\
                    credential_fifo = true\ncredential_socket = true\n";
        std::fs::write(&file, both).unwrap();
        let err = load(exe, Some(&file)).unwrap_err().to_string();
        assert!(err.contains("profile p"), "{err}");
        assert!(err.contains("keep the one the provider reads"), "{err}");
        std::fs::write(&file, both.replace("credential_socket = true\n", "")).unwrap();
        let one = load(exe, Some(&file)).unwrap();
        assert!(one["p"].credential_fifo && !one["p"].credential_socket);
    }
}
