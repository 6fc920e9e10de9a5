//! The `runnerd` command line.
//!
//! `runnerd --state-dir DIR --listen 127.0.0.1:PORT [--provider-idle-timeout-ms N]
//! [--profiles FILE] [--token-file FILE] [--provider-key-file FILE]`. It prints
//! one line `listening on http://ADDR` when ready. Exit codes: 0 after SIGTERM or
//! SIGINT, 2 bad input (arguments, profiles, key file, address in use or not
//! loopback), 3 runtime error (storage). A build with the `seeded-bugs` feature
//! also takes `--seeded-bug NAME` (`crate::seeded`); other builds reject it.

use std::ffi::OsString;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::engine::{Engine, EngineOptions, Secret};

/// The environment variable that may carry the provider credential.
pub const CREDENTIAL_ENV: &str = "TURNCUT_PROVIDER_API_KEY";

/// The durable reference runner.
#[derive(Debug, Parser)]
#[command(name = "runnerd", version, about)]
pub struct Args {
    /// State directory (created 0700): SQLite store, token, provider state.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// Loopback address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Kill a provider silent for this long during a request or a turn.
    #[arg(long, default_value_t = 30_000)]
    pub provider_idle_timeout_ms: u64,
    /// Grace after SIGTERM before SIGKILL when stopping a provider.
    #[arg(long, default_value_t = 500)]
    pub provider_term_grace_ms: u64,
    /// Profiles file (TOML) adding or overriding profiles.
    #[arg(long)]
    pub profiles: Option<PathBuf>,
    /// Bearer token file; default DIR/token, generated 0600 if missing.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Provider credential file (mode 0600); default the TURNCUT_PROVIDER_API_KEY variable.
    #[arg(long)]
    pub provider_key_file: Option<PathBuf>,
    /// Switch on one deliberate contract violation (mutation testing of the
    /// harness only; docs/seeded-bugs.md).
    #[cfg(feature = "seeded-bugs")]
    #[arg(long, value_enum, value_name = "NAME")]
    pub seeded_bug: Option<crate::seeded::SeededBug>,
}

/// Runs runnerd with `args` (including the program name); returns the exit code.
pub fn main(args: impl IntoIterator<Item = OsString>) -> i32 {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    #[cfg(feature = "seeded-bugs")]
    if let Some(bug) = args.seeded_bug {
        crate::seeded::activate(bug);
        eprintln!(
            "runnerd: seeded bug {} is active: this runner breaks its contract on purpose",
            bug.as_str()
        );
    }
    if let Err(e) = cutpoint::init() {
        eprintln!("runnerd: {e}");
        return 2;
    }
    let credential = match read_credential(args.provider_key_file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runnerd: {e:#}");
            return 2;
        }
    };
    // The credential lives in memory only from here on: no child inherits
    // it by accident, and it only reaches a provider through its profile.
    // SAFETY: no other thread exists yet.
    unsafe { std::env::remove_var(CREDENTIAL_ENV) };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,runner=info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "runnerd: --listen {} is not a loopback address; runnerd only serves 127.0.0.1 or ::1",
            args.listen
        );
        return 2;
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("runnerd"));
    let profiles = match crate::profiles::load(&exe, args.profiles.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("runnerd: {e:#}");
            return 2;
        }
    };
    let (store, epoch) = match crate::store::Store::open(&args.state_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "runnerd: failed to open the store in {}: {e}",
                args.state_dir.display()
            );
            return 3;
        }
    };
    let token = match token(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("runnerd: {e:#}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runnerd: failed to start the runtime: {e}");
            return 3;
        }
    };
    let opts = EngineOptions {
        state_dir: args.state_dir.clone(),
        epoch,
        idle: Duration::from_millis(args.provider_idle_timeout_ms),
        term_grace: Duration::from_millis(args.provider_term_grace_ms),
        kill_grace: Duration::from_secs(2),
        profiles,
        credential,
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                eprintln!(
                    "runnerd: address {} is in use; pick another --listen port (0 picks a free one) or stop the process that holds it",
                    args.listen
                );
                return 2;
            }
            Err(e) => {
                eprintln!("runnerd: failed to listen on {}: {e}", args.listen);
                return 2;
            }
        };
        let engine = Engine::new(store, opts);
        match engine.recover_all().await {
            Ok(n) if n > 0 => tracing::info!("resuming {n} unsettled task(s)"),
            Ok(_) => {}
            Err(e) => {
                eprintln!("runnerd: failed to read unsettled tasks: {e}");
                return 3;
            }
        }
        let addr = listener.local_addr().expect("a bound listener has an address");
        let state = Arc::new(crate::api::ApiState { engine, token });
        println!("listening on http://{addr}");
        let _ = std::io::stdout().flush();
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler can be installed");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        // No Nagle delay on small answers and event pages.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        match axum::serve(listener, crate::api::router(state))
            .with_graceful_shutdown(shutdown)
            .await
        {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("runnerd: the server failed: {e}");
                3
            }
        }
    })
}

fn read_credential(file: Option<&Path>) -> anyhow::Result<Option<Secret>> {
    if let Some(path) = file {
        let meta = std::fs::metadata(path).map_err(|e| {
            anyhow::anyhow!("failed to read --provider-key-file {}: {e}", path.display())
        })?;
        if meta.mode() & 0o077 != 0 {
            anyhow::bail!(
                "--provider-key-file {} is readable by others (mode {:o}); chmod 600 it",
                path.display(),
                meta.mode() & 0o777
            );
        }
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("failed to read --provider-key-file {}: {e}", path.display())
        })?;
        return Ok(Some(Secret::new(text.trim().to_owned())));
    }
    Ok(std::env::var(CREDENTIAL_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new))
}

fn token(args: &Args) -> anyhow::Result<String> {
    if let Some(path) = &args.token_file {
        let t = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("failed to read --token-file {}: {e}", path.display()))?;
        let t = t.trim().to_owned();
        anyhow::ensure!(!t.is_empty(), "--token-file {} is empty", path.display());
        return Ok(t);
    }
    let path = args.state_dir.join("token");
    if let Ok(t) = std::fs::read_to_string(&path)
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    let t = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let tmp = args.state_dir.join("token.tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("failed to write {}: {e}", tmp.display()))?;
    f.write_all(t.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(t)
}

/// Without the feature the `--seeded-bug` flag does not exist.
#[cfg(all(test, not(feature = "seeded-bugs")))]
mod tests {
    use super::*;

    /// Clap's unknown-argument error, exit 2.
    #[test]
    fn seeded_bug_is_an_unknown_argument_without_the_feature() {
        let err = Args::try_parse_from([
            "runnerd",
            "--state-dir",
            "/nonexistent",
            "--seeded-bug",
            "null-cause",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        assert_eq!(err.exit_code(), 2);
        let code = main(
            [
                "runnerd",
                "--state-dir",
                "/nonexistent",
                "--seeded-bug",
                "null-cause",
            ]
            .map(OsString::from),
        );
        assert_eq!(code, 2);
    }
}
