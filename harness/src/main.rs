//! The `turncut` binary: the harness CLI, and a multi-call entry point so that
//! `turncut fake-provider …` and `turncut runnerd …` run the fakes and the
//! runner from the same build. The dispatch calls only each program's `main`;
//! the harness itself never uses runner internals.
//!
//! Exit codes: 0 all pass, 1 a check failed, 2 bad input, 3 harness error.

use std::ffi::OsString;

use clap::{Parser, Subcommand};

/// Restart-chaos harness for AI-agent runners.
#[derive(Debug, Parser)]
#[command(name = "turncut", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drive the fake Codex provider through a full turn, then SIGKILL it at
    /// every boundary of that turn and check what a restart reads back.
    Demo {
        /// Keep the temporary directory with every state dir, journal and ledger.
        #[arg(long)]
        keep: bool,
    },
    /// Run the reference runner (same as the standalone `runnerd` binary).
    #[command(name = "runnerd", disable_help_flag = true)]
    Runnerd {
        /// Arguments for `runnerd`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run a fake provider (same as the standalone `fake-provider` binary).
    #[command(name = "fake-provider", disable_help_flag = true)]
    FakeProvider {
        /// Arguments for `fake-provider`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let exe = std::env::current_exe().unwrap_or_else(|_| "turncut".into());
    // The fake providers parse their own arguments, so they are dispatched
    // before clap sees anything.
    if args.get(1).is_some_and(|a| a == "fake-provider") {
        let forwarded =
            std::iter::once(OsString::from("fake-provider")).chain(args[2..].iter().cloned());
        let self_cmd = vec![exe.into_os_string(), OsString::from("fake-provider")];
        std::process::exit(fake_provider::cli::main(forwarded, self_cmd));
    }
    if args.get(1).is_some_and(|a| a == "runnerd") {
        let forwarded = std::iter::once(OsString::from("runnerd")).chain(args[2..].iter().cloned());
        std::process::exit(runner::cli::main(forwarded));
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let code = match cli.command {
        Command::Demo { keep } => match harness::demo::run(&exe, keep) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("turncut demo: {e:#}");
                3
            }
        },
        Command::FakeProvider { .. } | Command::Runnerd { .. } => unreachable!("dispatched above"),
    };
    std::process::exit(code);
}
