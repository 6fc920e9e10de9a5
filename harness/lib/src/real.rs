//! The real products behind the `*-real` profiles (`wire::profiles::REAL`):
//! finding (or installing) the pinned program, the command line a cell's
//! runner starts it with, the fake model API it talks to, and reading its
//! own durable state back as evidence.
//!
//! A real product has no cut points of its own: a cell cuts at the runner's
//! points and at the fake model API's (`model.*`, role [`MODEL_ROLE`]), and
//! faults reach the product by signal to its process group.

use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wire::profiles::{Program, Protocol, Real};

use crate::supervisor::GroupChild;

mod acp;
mod claude;
mod codex;
mod opencode;

pub use acp::{name_effects, name_turns};

pub(crate) use opencode::CREDENTIAL_FIFO_ENV;

/// Set to `1` to let turncut install a missing real product with npm.
pub const INSTALL_ENV: &str = "TURNCUT_INSTALL_REAL";

/// Where the real products are installed and looked up after `PATH`
/// (overrides the default `<workspace>/target/npm`).
pub const PREFIX_ENV: &str = "TURNCUT_NPM_PREFIX";

/// The cut-point role of the fake model API in a real profile's cell: its
/// hits are boundaries, but a provider fault there signals the real
/// product, not the model API.
pub const MODEL_ROLE: crate::model::Role = crate::model::Role::Model;

/// The least provider idle timeout in a real product's cell: a real product
/// goes quiet for longer than a fake between two messages (it thinks, it
/// writes its rollout, it starts its tools).
pub const IDLE_FLOOR_MS: u64 = 5_000;

/// The least idle timeout of a real ACP agent: the runner bounds a
/// provider's start by its idle timeout, and `opencode acp` answers
/// `initialize` only after 4.5-6.3 s on an idle 2-core machine (five runs,
/// a plain key file for the credential, `--print-logs`: 2.4 s to "setup
/// connection", the rest inside `initialize`). At 5 s every start was
/// stopped as silent and every cell of a sampled wave ended `unknown`.
/// `claude-agent-acp` starts Claude Code (a Node program of its own) at
/// `session/new` and `session/load`.
pub const ACP_IDLE_FLOOR_MS: u64 = 20_000;

/// The least idle timeout in a real product's cell ([`IDLE_FLOOR_MS`], or
/// [`ACP_IDLE_FLOOR_MS`] for an ACP agent).
pub fn idle_floor_ms(real: &Real) -> u64 {
    if real.mirrors == "runner-acpx-claude" {
        ACP_IDLE_FLOOR_MS
    } else {
        IDLE_FLOOR_MS
    }
}

/// The least idle timeout in a real product's `hang-provider` cell. The
/// runner bounds a provider's start by its idle timeout too, so this is at
/// least the product's start: `opencode serve` takes 2-4 s to its first
/// answer (it loads its plugins), and at 2 s every restart after a hang was
/// lost five times over (`provider_start_failed`, 5 of 5 hang cells); codex
/// answers `initialize` well within 2 s on an idle machine, but not on a
/// loaded one (a sampled wave at a load average of 16 lost 1 of 40 cells to
/// `provider_start_failed` at 2 s).
pub fn hang_idle_floor_ms(real: &Real) -> u64 {
    idle_floor_ms(real)
}

/// The least deadline of each wait in a real product's cell: a recovery
/// restarts the product (OpenCode: 3-6 s to its first answer) and plays
/// the turn again; 15 s was passed by healthy OpenCode cells.
pub const WAIT_FLOOR_MS: u64 = 60_000;

/// The least deadline of each wait in a cell of `real`: [`WAIT_FLOOR_MS`],
/// doubled for the ACP agent, whose hang cell waits its 20 s idle floor and
/// then a restart of 5+ s before the turn goes on (a loaded machine took
/// 27 s from the submit to the agent's second model request, and the cell
/// missed 60 s).
pub fn wait_floor_ms(real: &Real) -> u64 {
    if idle_floor_ms(real) == ACP_IDLE_FLOOR_MS {
        2 * WAIT_FLOOR_MS
    } else {
        WAIT_FLOOR_MS
    }
}

/// The real Codex: its package also brings the `bwrap` that codex-acp's
/// sandbox needs.
const CODEX: Real = wire::profiles::REAL[0];
const _: () = assert!(matches!(CODEX.program, Program::Codex));

/// The npm prefix real products are installed under.
pub fn npm_prefix() -> PathBuf {
    if let Some(p) = std::env::var_os(PREFIX_ENV) {
        return PathBuf::from(p);
    }
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("target/npm")
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The version in the `package.json` of the npm package `package` that
/// `bin` belongs to (its real path's nearest such directory), if it is one.
fn package_version(bin: &Path, package: &str) -> Option<String> {
    let real = std::fs::canonicalize(bin).ok()?;
    real.ancestors().skip(1).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("package.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        (json["name"] == package).then(|| json["version"].as_str().map(str::to_owned))?
    })
}

/// Whether `bin` is the pinned version: its npm package's `package.json`
/// says so, or, for a program from elsewhere, `bin --version` names it
/// (the ACP agents have no `--version`: `codex-acp` refuses the flag,
/// `claude-agent-acp` starts serving).
fn is_pinned(bin: &Path, real: &Real) -> Result<(), String> {
    if let Some(version) = package_version(bin, real.package) {
        return if version == real.version {
            Ok(())
        } else {
            Err(format!(
                "{} is {}@{version}, the profile pins {}",
                bin.display(),
                real.package,
                real.version
            ))
        };
    }
    let out = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{} --version: {e}", bin.display()))?;
    let said = String::from_utf8_lossy(&out.stdout);
    if said.contains(real.version) {
        Ok(())
    } else {
        Err(format!(
            "{} is version {:?}, the profile pins {}@{}",
            bin.display(),
            said.trim(),
            real.package,
            real.version
        ))
    }
}

/// The pinned program of `real`: on `PATH`, else under [`npm_prefix`]; or
/// why there is none.
pub fn locate(real: &Real) -> Result<PathBuf, String> {
    if real.program == Program::CodexAcp
        && let Err(why) = codex::bwrap_dir()
    {
        return Err(format!(
            "{why}; `turncut providers --install` (or {INSTALL_ENV}=1) installs {}@{} for it, or install bubblewrap",
            CODEX.package, CODEX.version
        ));
    }
    let cached = npm_prefix().join("node_modules/.bin").join(real.bin);
    let mut why = Vec::new();
    for candidate in on_path(real.bin).into_iter().chain([cached]) {
        if !candidate.is_file() {
            continue;
        }
        match is_pinned(&candidate, real) {
            Ok(()) => return Ok(candidate),
            Err(e) => why.push(e),
        }
    }
    if why.is_empty() {
        why.push(format!(
            "{} is not on PATH nor in {}",
            real.bin,
            npm_prefix().display()
        ));
    }
    Err(format!(
        "{}; `turncut providers --install` (or {INSTALL_ENV}=1) installs {}@{} there",
        why.join("; "),
        real.package,
        real.version
    ))
}

/// Installs the pinned `real` under [`npm_prefix`] with npm, saying how
/// long it took on `progress`.
pub fn install(real: &Real, progress: &crate::progress::Progress) -> Result<PathBuf, String> {
    let npm = on_path("npm").ok_or("npm is not on PATH (apt-get install npm)")?;
    if real.program == Program::CodexAcp && codex::bwrap_dir().is_err() {
        // The bubblewrap codex-acp's sandbox needs comes with Codex.
        install(&CODEX, progress)?;
    }
    let prefix = npm_prefix();
    // One npm at a time in a prefix (tests and cells of several processes
    // may ask at once): an exclusive lock on a file in it, then look again.
    std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    let lock = std::fs::File::create(prefix.join(".turncut-install.lock"))
        .map_err(|e| format!("{}: {e}", prefix.display()))?;
    lock.lock()
        .map_err(|e| format!("lock {}: {e}", prefix.display()))?;
    if let Ok(found) = locate(real) {
        return Ok(found);
    }
    let started = Instant::now();
    let out = Command::new(npm)
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(&prefix)
        .arg(format!("{}@{}", real.package, real.version))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("failed to run npm: {e}"))?;
    progress.note(&format!(
        "npm install {}@{}: {} in {} ms",
        real.package,
        real.version,
        out.status,
        started.elapsed().as_millis()
    ));
    if !out.status.success() {
        return Err(format!(
            "npm install {}@{} failed ({}): {}",
            real.package,
            real.version,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    locate(real)
}

/// [`locate`], installing first when [`INSTALL_ENV`] is `1`.
pub fn locate_or_install(
    real: &Real,
    progress: &crate::progress::Progress,
) -> Result<PathBuf, String> {
    match locate(real) {
        Ok(p) => Ok(p),
        Err(_) if std::env::var(INSTALL_ENV).as_deref() == Ok("1") => install(real, progress),
        Err(e) => Err(e),
    }
}

/// Why the profile `profile` cannot run here, if it is a real product's
/// that is not installed (looked up, or installed, once per process).
pub fn unavailable(profile: &str, progress: &crate::progress::Progress) -> Option<String> {
    static FOUND: std::sync::Mutex<Vec<(&'static str, Option<String>)>> =
        std::sync::Mutex::new(Vec::new());
    let real = wire::profiles::real(profile)?;
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, why)) = found.iter().find(|(name, _)| *name == real.name) {
        return why.clone();
    }
    let why = locate_or_install(real, progress).err();
    found.push((real.name, why.clone()));
    why
}

/// A real product a cell runs: the program and its private home.
#[derive(Clone, Debug)]
pub struct Product {
    /// The profile.
    pub real: &'static Real,
    /// The pinned program.
    pub bin: PathBuf,
    /// Its private home (config, data, HOME of its shells), kept across
    /// restarts of the product.
    pub home: PathBuf,
}

impl Product {
    /// The argv the runner's profile starts it with (the credential comes
    /// from the runner, by [`Product::credential_env`]), its tool shells
    /// tagged with `tag` so the cell finds what they leave behind.
    pub fn command(&self, model_url: &str, tag: &str) -> anyhow::Result<Vec<String>> {
        self.command_for(model_url, tag, false)
    }

    /// [`Product::command`] for a script with `patches` (codex: its
    /// sandbox read-only, so an `apply_patch` asks for approval as the
    /// scenario means; else `workspace-write`, so a command that needs no
    /// approval lands its effect).
    pub fn command_for(
        &self,
        model_url: &str,
        tag: &str,
        patches: bool,
    ) -> anyhow::Result<Vec<String>> {
        std::fs::create_dir_all(self.home.join("home"))?;
        match self.real.program {
            Program::Codex => Ok(codex::command(self, model_url, tag, patches)),
            Program::CodexAcp => Ok(codex::acp_command(self, model_url, tag, patches)),
            Program::ClaudeAgentAcp => Ok(claude::command(self, model_url)),
            Program::Opencode if self.protocol() == Protocol::Acp => {
                opencode::command(self, model_url, &["acp"])
            }
            Program::Opencode => opencode::command(self, model_url, &["serve"]),
        }
    }

    /// The protocol the product speaks (its mirrored fake's).
    pub fn protocol(&self) -> Protocol {
        wire::profiles::facts(self.real.name).map_or(Protocol::Native, |f| f.protocol)
    }

    /// The `fake-provider` tap that records its wire in a cell: `tap` for a
    /// stdio protocol, `tap-http` for OpenCode's HTTP.
    pub fn tap(&self) -> &'static str {
        match self.protocol() {
            Protocol::Opencode => "tap-http",
            _ => "tap",
        }
    }

    /// The profile lines that hand it the credential: as its API key in
    /// its environment (codex and codex-acp keep `*KEY*` variables out of
    /// their tool shells; Claude Code does not, see `docs/real-providers.md`),
    /// or through the runner's credential FIFO (OpenCode gives its tools its
    /// whole environment; its configuration reads the FIFO: once for
    /// `opencode serve`, twice for `opencode acp`, at its start and at
    /// `session/new`).
    pub fn credential_lines(&self) -> String {
        let fifo = |reads: u32| {
            format!(
                "credential_env = \"{}\"\ncredential_fifo = true\ncredential_reads = {reads}\n",
                opencode::CREDENTIAL_FIFO_ENV
            )
        };
        match (self.real.program, self.protocol()) {
            (Program::Opencode, Protocol::Acp) => fifo(2),
            (Program::Opencode, _) => fifo(1),
            (Program::ClaudeAgentAcp, _) => "credential_env = \"ANTHROPIC_API_KEY\"\n".to_owned(),
            (Program::Codex | Program::CodexAcp, _) => {
                "credential_env = \"OPENAI_API_KEY\"\n".to_owned()
            }
        }
    }

    /// Every turn the product durably recorded, read from its home once the
    /// cell's processes are dead: Codex's through its own API, by a server
    /// started in `cwd` (the workspace the product ran in) against
    /// `model_url` within `within`; OpenCode's from its SQLite store;
    /// the ACP agents' from their session files. `journal` is the cell's
    /// wire journal (an ACP agent's turns are named by it).
    pub fn recorded_turns(
        &self,
        model_url: &str,
        cwd: &Path,
        within: Duration,
        journal: &[wire::journal::Entry],
    ) -> Result<Vec<wire::recorded::RecordedTurn>, String> {
        let turns = |read: Vec<opencode::TurnText>| read.into_iter().map(|(t, _)| t).collect();
        // An ACP agent's turns are named by the prompts that carried them.
        let named = |read: Vec<opencode::TurnText>| {
            let texts: Vec<(String, String)> = read
                .iter()
                .map(|(t, text)| (t.turn.clone(), text.clone()))
                .collect();
            let mut named: Vec<_> = turns(read);
            name_turns(&mut named, journal, &texts);
            named
        };
        match (self.real.program, self.protocol()) {
            (Program::Codex, _) => codex::recorded_turns(self, model_url, cwd, within),
            // `opencode acp` keeps its sessions where `opencode serve` reads them.
            (Program::Opencode, Protocol::Acp) => opencode::recorded_turns(self).map(named),
            (Program::Opencode, _) => opencode::recorded_turns(self).map(turns),
            (Program::CodexAcp, _) => codex::rollout_turns(self).map(named),
            (Program::ClaudeAgentAcp, _) => claude::recorded_turns(self).map(named),
        }
    }
}

/// The fake model API of a real profile's cell, killed (as a process group)
/// on drop. It serves until its stdin closes.
pub struct ModelApi {
    child: GroupChild,
    _stdin: Option<ChildStdin>,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
}

impl ModelApi {
    /// The command of `turncut fake-provider model-api` playing `script`,
    /// its state, journal and ledger at these paths (start it with
    /// [`ModelApi::start`]).
    pub fn command(
        turncut: &Path,
        state: &Path,
        journal: &Path,
        ledger: &Path,
        script: &Path,
    ) -> Command {
        let mut cmd = Command::new(turncut);
        cmd.args(["fake-provider", "model-api", "--state-dir"])
            .arg(state)
            .arg("--journal")
            .arg(journal)
            .arg("--ledger")
            .arg(ledger)
            .arg("--script")
            .arg(script);
        cmd
    }

    /// Starts `turncut fake-provider model-api` from `cmd` (whose arguments
    /// name its state, journal, ledger and script) and waits, at most
    /// `within`, for its listening line.
    pub fn start(cmd: &mut Command, within: Duration) -> anyhow::Result<ModelApi> {
        cmd.args(["--port", "0"])
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        let (mut child, url) = spawn_listening(cmd, "model api listening on ", within)?;
        let stdin = child.inner().stdin.take();
        Ok(ModelApi {
            child,
            _stdin: stdin,
            url,
        })
    }

    /// Its pid (the leader of its process group).
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Kills it and waits for it (its journal is whole afterwards).
    pub fn stop(mut self) {
        let _ = self.child.kill();
    }
}

/// Spawns `cmd` in a process group of its own with stdout piped, and
/// returns it with what follows `marker` on the first stdout line that
/// holds it (a server's URL; OpenCode prints a warning line first), waiting
/// at most `within`. Stdout is drained afterwards.
pub fn spawn_listening(
    cmd: &mut Command,
    marker: &str,
    within: Duration,
) -> anyhow::Result<(GroupChild, String)> {
    use std::io::BufRead as _;
    cmd.stdout(Stdio::piped());
    let mut child = GroupChild::spawn(cmd)?;
    let stdout = child
        .inner()
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let (tx, rx) = mpsc::channel();
    let wanted = marker.to_owned();
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(stdout).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(at) = line.find(&wanted) {
                let _ = tx.send(line[at + wanted.len()..].trim().to_owned());
                break;
            }
        }
        for _ in lines {}
    });
    let url = rx.recv_timeout(within).map_err(|e| match e {
        mpsc::RecvTimeoutError::Timeout => {
            anyhow::anyhow!("no line with {marker:?} within {within:?}")
        }
        mpsc::RecvTimeoutError::Disconnected => {
            anyhow::anyhow!("it closed its stdout (ended?) before a line with {marker:?}")
        }
    })?;
    Ok((child, url))
}
