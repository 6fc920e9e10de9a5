//! The `fake-provider` command line, shared by the standalone binary and by
//! `turncut fake-provider`.
//!
//! Exit codes: 0 normal end (stdin closed), 2 bad input (arguments, script,
//! fault points, cut-point environment), 3 runtime error (I/O, storage).

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::effect::EffectArgs;
use crate::faults::Faults;
use crate::script::Script;
use crate::serving::Options;

/// Faithful fake coding-agent providers with hang and kill points.
#[derive(Debug, Parser)]
#[command(name = "fake-provider", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A fake Codex app-server on stdio (one JSON object per line).
    Codex(ProviderArgs),
    /// A fake OpenCode server (`opencode serve`): HTTP and SSE on loopback.
    Opencode(OpencodeArgs),
    /// A fake ACP (Agent Client Protocol v1) agent on stdio (JSON-RPC 2.0 lines).
    Acp(AcpArgs),
    /// A fake OpenAI-Responses-compatible model API (`POST /v1/responses`, SSE) on loopback.
    ModelApi(ModelApiArgs),
    /// The tool command: append one line to the effect ledger.
    Effect(EffectArgs),
    /// A transparent recorder in front of a real stdio provider: passes
    /// every line both ways and journals it (`tap --journal J -- PROGRAM…`).
    Tap(crate::tap::TapArgs),
    /// A transparent recorder in front of a real HTTP provider: announces
    /// its own port, forwards every request and journals it
    /// (`tap-http --journal J -- PROGRAM…`).
    TapHttp(crate::tap_http::TapHttpArgs),
}

/// Options shared by every fake provider.
#[derive(Debug, clap::Args)]
pub struct ProviderArgs {
    /// Directory of the durable conversation store (created if missing).
    #[arg(long)]
    state_dir: PathBuf,
    /// Journal file [default: <state-dir>/journal.jsonl].
    #[arg(long)]
    journal: Option<PathBuf>,
    /// Effect ledger file [default: <state-dir>/ledger.jsonl].
    #[arg(long)]
    ledger: Option<PathBuf>,
    /// Script of the fake model (TOML, `[[turn]]` tables); a built-in default
    /// otherwise: one message, one command needing approval, a final message.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Stop answering forever at this point (`name` or `name#N`); repeatable.
    #[arg(long = "hang", value_name = "POINT")]
    hang: Vec<String>,
    /// SIGKILL this process at this point (`name` or `name#N`); repeatable.
    #[arg(long = "exit", value_name = "POINT")]
    exit: Vec<String>,
    /// Answer with a failure at this point (`name=NAME` or `name#N=NAME`),
    /// as the harness's cut-point reply `answer NAME` does: an upstream
    /// fault (`rate-limit`, `stream-cut`, …) at a model point, `error-answer`
    /// at a request's `.received` point; once per state dir; repeatable.
    #[arg(long = "answer", value_name = "POINT=NAME")]
    answer: Vec<String>,
    /// Keep a long-lived child process, as real providers keep tool shells:
    /// `sleep` starts `sleep 86400` in a session of its own at startup, with
    /// no stdio of the provider's, and leaves it running when the provider
    /// ends. Only a stop that covers every process the provider started
    /// (the runner's spawn marker) removes it.
    #[arg(long, value_name = "PROGRAM", value_parser = ["sleep"])]
    child: Option<String>,
}

/// Options of `fake-provider opencode`.
#[derive(Debug, clap::Args)]
pub struct OpencodeArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// TCP port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Address to listen on; loopback only.
    #[arg(long, default_value = "127.0.0.1")]
    hostname: String,
}

/// Options of `fake-provider acp`.
#[derive(Debug, clap::Args)]
pub struct AcpArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// Which real agent's crash behaviour to play: `claude` (the agent of
    /// `runner-acpx-claude`: echoes the user message, runs commands in the
    /// client's terminals), `opencode` (`opencode acp`: no echo, a tool
    /// call `in_progress` before its permission request, commands run by
    /// the agent itself in a session of their own, which outlive its kill)
    /// or `codex` (`codex-acp` at a failure of its model API: no echo, every
    /// upstream fault fails the prompt with its error; else as `claude`).
    #[arg(long, value_enum, default_value_t = crate::acp::Like::Claude)]
    like: crate::acp::Like,
    /// Write the end of a turn this many ms after answering its
    /// `session/prompt` (and before exiting at the end of stdin), as Claude
    /// Code writes its transcript on a timer; 0 writes it first.
    #[arg(long, default_value_t = 0)]
    finish_lag_ms: u64,
}

/// Options of `fake-provider model-api`.
#[derive(Debug, clap::Args)]
pub struct ModelApiArgs {
    #[command(flatten)]
    provider: ProviderArgs,
    /// TCP port to listen on (127.0.0.1); 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
}

/// Runs the command line `args` (including the program name). `self_cmd` is
/// the command that reaches this CLI again (for tool commands). Returns the
/// exit code.
pub fn main(args: impl IntoIterator<Item = OsString>, self_cmd: Vec<OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match cli.command {
        Command::Effect(args) => match crate::effect::run_effect(&args) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!(
                    "fake-provider effect: failed to append to {}: {e}",
                    args.ledger.display()
                );
                3
            }
        },
        Command::Tap(args) => crate::tap::run_tap(&args),
        Command::TapHttp(args) => crate::tap_http::run_tap_http(&args),
        Command::Codex(args) => run("codex", args, self_cmd, crate::codex::serve),
        Command::Opencode(args) => {
            // A port in use is bad input (exit 2), found before anything starts.
            let listener = match crate::opencode::bind(&args.hostname, args.port) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("fake-provider opencode: {e}");
                    return 2;
                }
            };
            run("opencode", args.provider, self_cmd, |o| {
                crate::opencode::serve(o, listener)
            })
        }
        Command::ModelApi(args) => {
            // A port in use is bad input (exit 2), found before anything starts.
            let listener = match crate::model_api::bind(args.port) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("fake-provider model-api: {e}");
                    return 2;
                }
            };
            run("model-api", args.provider, self_cmd, |o| {
                crate::model_api::serve(o, listener)
            })
        }
        Command::Acp(args) => run("acp", args.provider, self_cmd, |o| {
            crate::acp::serve(
                o,
                args.like,
                std::time::Duration::from_millis(args.finish_lag_ms),
            )
        }),
    }
}

/// Validates `args` (exit 2 when they are bad), then serves (exit 3 on a
/// runtime error, 0 when stdin closes).
fn run(
    name: &str,
    args: ProviderArgs,
    self_cmd: Vec<OsString>,
    serve: impl FnOnce(Options) -> anyhow::Result<()>,
) -> i32 {
    // Taken as a real provider takes its key at start (from a runner's socket or FIFO
    // when it hands it over so); the fake needs no key and keeps none.
    drop(::wire::secret::receive_credential());
    let opts = match provider_options(args, self_cmd) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fake-provider {name}: {e:#}");
            return 2;
        }
    };
    match serve(opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("fake-provider {name}: {e:#}");
            3
        }
    }
}

fn provider_options(args: ProviderArgs, self_cmd: Vec<OsString>) -> anyhow::Result<Options> {
    cutpoint::init()?;
    let script = match &args.script {
        Some(p) => Script::load(p)?,
        None => Script::builtin(),
    };
    std::fs::create_dir_all(&args.state_dir)?;
    let specs = crate::faults::Specs {
        exit: &args.exit,
        hang: &args.hang,
        answer: &args.answer,
    };
    let faults = Faults::new(&specs, Some(&args.state_dir))?;
    if args.child.is_some() {
        spawn_session_child()?;
    }
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    let ledger = absolute(
        args.ledger
            .unwrap_or_else(|| args.state_dir.join("ledger.jsonl")),
    );
    let journal = absolute(
        args.journal
            .unwrap_or_else(|| args.state_dir.join("journal.jsonl")),
    );
    Ok(Options {
        state_dir: args.state_dir,
        journal: Some(journal),
        ledger,
        script,
        faults,
        self_cmd,
    })
}

/// Starts `sleep 86400` in a new session with null stdio (so it never holds
/// the provider's pipes open) and does not wait for it.
fn spawn_session_child() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("86400")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid(2) is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| anyhow::anyhow!("failed to start the --child sleep: {e}"))?;
    // Detached on purpose: the child outlives this process unless stopped.
    drop(child);
    Ok(())
}
