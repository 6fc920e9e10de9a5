//! The `runnerd` command line.
//!
//! `runnerd --state-dir DIR --listen 127.0.0.1:PORT [--provider-idle-timeout-ms N]
//! [--profiles FILE] [--token-file FILE] [--provider-key-file FILE]`. It prints
//! one line `listening on http://ADDR` when ready. Exit codes: 0 after SIGTERM or
//! SIGINT, 2 bad input (arguments, profiles, key file, address in use or not
//! loopback, a state directory another runnerd holds: `state_lock`), 3
//! runtime error (storage). A build with the `seeded-bugs` feature
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
pub use wire::secret::CREDENTIAL_ENV;

/// The shortest bearer token accepted from a file.
pub const TOKEN_BYTES_MIN: usize = 16;

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
    /// Kill a provider that makes no progress for this long during a
    /// request or a turn (other messages do not count toward a request).
    #[arg(long, default_value_t = 30_000)]
    pub provider_idle_timeout_ms: u64,
    /// The longest one provider request may take, progress or not.
    #[arg(long, default_value_t = crate::driver::budget::REQUEST_TIMEOUT_MS)]
    pub provider_request_timeout_ms: u64,
    /// Stop a provider (provider_protocol_error) that writes more than this
    /// many bytes per second.
    #[arg(long, default_value_t = crate::driver::budget::OUTPUT_BYTES_PER_S_MAX)]
    pub provider_output_bytes_per_s_max: u64,
    /// Grace after SIGTERM before SIGKILL when stopping a provider.
    #[arg(long, default_value_t = 500)]
    pub provider_term_grace_ms: u64,
    /// Grace before SIGTERM for a provider whose run's turns all ended: its
    /// input closed, it may exit on its own (and finish writing its record
    /// of the last turn) until then.
    #[arg(long, default_value_t = wire::profiles::EXIT_GRACE_MS)]
    pub provider_exit_grace_ms: u64,
    /// The most control API connections open at once; one more is answered
    /// 503 too_many_connections.
    #[arg(long, default_value_t = crate::server::CONNECTIONS_MAX)]
    pub connections_max: usize,
    /// Close a connection whose request head has not arrived this long
    /// after it opened (or after its previous request).
    #[arg(long, default_value_t = crate::server::HEADER_READ_TIMEOUT_MS)]
    pub http_header_read_timeout_ms: u64,
    /// The container every provider runs in: auto (cgroup v2, else the v1
    /// freezer, else the subreaper), cgroup-v2, cgroup-v1-freezer or
    /// subreaper.
    #[arg(long, default_value = "auto")]
    pub provider_containment: crate::supervisor::containment::Choice,
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
    // Before anything else (no thread exists yet): closed to inspection by
    // the tools it runs, and the credential out of its environment. The
    // kernel keeps the initial environment readable in /proc/PID/environ for
    // the life of the image, so the key's bytes there are overwritten.
    if let Err(e) = crate::own_process::forbid_inspection() {
        eprintln!("runnerd: failed to make the process not dumpable: {e}");
        return 2;
    }
    // SAFETY: no other thread exists yet.
    let from_env = match unsafe { crate::own_process::take_env_scrubbed(CREDENTIAL_ENV) } {
        Ok(key) => key,
        Err(e) => {
            eprintln!("runnerd: failed to take {CREDENTIAL_ENV} out of the environment: {e}");
            return 2;
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
    match start(args, from_env) {
        Ok(code) => code,
        Err(Exit(code, message)) => {
            eprintln!("runnerd: {message}");
            code
        }
    }
}

/// Why runnerd stops: its exit code and what it says.
struct Exit(i32, String);

/// Everything before serving: cut points, the state directory and its
/// lock, credential, logging, profiles, store, token and runtime; then
/// serves until SIGTERM.
fn start(mut args: Args, from_env: Option<String>) -> Result<i32, Exit> {
    cutpoint::init().map_err(|e| Exit(2, e.to_string()))?;
    args.state_dir = state_dir(&args.state_dir)?;
    // Held until this function returns, which is when runnerd exits.
    let _lock = crate::state_lock::acquire(&args.state_dir).map_err(|e| match e {
        crate::state_lock::LockError::Held { .. } => Exit(2, e.to_string()),
        crate::state_lock::LockError::Io { .. } => Exit(3, e.to_string()),
    })?;
    let credential = read_credential(args.provider_key_file.as_deref(), from_env)
        .map_err(|e| Exit(2, format!("{e:#}")))?;
    // The credential lives in memory only from here on: no child inherits
    // it by accident, and it only reaches a provider through its profile.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,runner=info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    if !args.listen.ip().is_loopback() {
        return Err(Exit(
            2,
            format!(
                "--listen {} is not a loopback address; runnerd only serves 127.0.0.1 or ::1",
                args.listen
            ),
        ));
    }
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("runnerd"));
    let profiles = crate::profiles::load(&exe, args.profiles.as_deref())
        .map_err(|e| Exit(2, format!("{e:#}")))?;
    let containment = crate::supervisor::containment::init(args.provider_containment)
        .map_err(|e| Exit(2, format!("--provider-containment: {e}")))?;
    tracing::info!("providers run in containers of {}", containment.mechanism());
    let (store, epoch) = crate::store::Store::open(&args.state_dir).map_err(|e| {
        Exit(
            3,
            format!(
                "failed to open the store in {}: {e}",
                args.state_dir.display()
            ),
        )
    })?;
    let token = token(&args).map_err(|e| Exit(2, format!("{e:#}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Exit(3, format!("failed to start the runtime: {e}")))?;
    let opts = engine_options(&args, epoch, profiles, credential);
    let limits = crate::server::Limits {
        connections_max: args.connections_max,
        header_read_timeout: Duration::from_millis(args.http_header_read_timeout_ms),
        shutdown_grace: Duration::from_millis(crate::server::SHUTDOWN_GRACE_MS),
    };
    let code = runtime.block_on(serve(args.listen, store, opts, token, limits));
    // Tasks still running (an actor waiting on its provider, a tool) must
    // not hold the exit: the grace has passed.
    runtime.shutdown_timeout(Duration::from_millis(500));
    code
}

/// The engine's options from the command line.
fn engine_options(
    args: &Args,
    epoch: i64,
    profiles: std::collections::BTreeMap<String, crate::profiles::Profile>,
    credential: Option<Secret>,
) -> EngineOptions {
    EngineOptions {
        state_dir: args.state_dir.clone(),
        epoch,
        bounds: crate::driver::Bounds {
            idle: idle_timeout(args.provider_idle_timeout_ms),
            request: Duration::from_millis(args.provider_request_timeout_ms),
            output_bytes_per_s_max: args.provider_output_bytes_per_s_max,
        },
        exit_grace: Duration::from_millis(args.provider_exit_grace_ms),
        term_grace: Duration::from_millis(args.provider_term_grace_ms),
        kill_grace: Duration::from_secs(2),
        profiles,
        credential,
    }
}

/// The provider idle timeout of `--provider-idle-timeout-ms`.
fn idle_timeout(ms: u64) -> Duration {
    // SEEDED BUG idle-timeout-in-micros: a unit slip; a healthy provider
    // that pauses half a millisecond between two messages is "unresponsive".
    if crate::seeded::idle_timeout_in_micros() {
        return Duration::from_micros(ms);
    }
    Duration::from_millis(ms)
}

/// The state directory, created (0700, durably) if missing, as an absolute canonical
/// path: everything derived from it (`{provider_dir}` in a provider's command
/// line) must not depend on the working directory of whoever reads it, and a
/// provider runs in the task's workspace.
fn state_dir(dir: &Path) -> Result<PathBuf, Exit> {
    // Durably: a power cut must not take the new directory, and everything
    // synced inside it, away (`docs/lazyfs.md`).
    crate::workspace::create_dir_all_durably(dir, 0o700)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| {
            Exit(
                2,
                format!("failed to use the state directory {}: {e}", dir.display()),
            )
        })
}

/// Binds, prints the address, resumes the unsettled tasks and serves the
/// API until SIGTERM or Ctrl-C (or until the tasks to resume cannot be
/// read: exit 3).
async fn serve(
    listen: std::net::SocketAddr,
    store: crate::store::Store,
    opts: EngineOptions,
    token: String,
    limits: crate::server::Limits,
) -> Result<i32, Exit> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Exit(2, format!(
            "address {listen} is in use; pick another --listen port (0 picks a free one) or stop the process that holds it"
        )),
        _ => Exit(2, format!("failed to listen on {listen}: {e}")),
    })?;
    let engine = Engine::new(store, opts);
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    let state = Arc::new(crate::api::ApiState {
        engine: Arc::clone(&engine),
        token,
    });
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    // The tasks are resumed once the address is out: their read passes a
    // cut point (`runner.read.tasks`), which a harness can answer only once
    // it knows the runner is up. A request meanwhile sees a task as the
    // store holds it; one that wakes a task of an earlier process starts
    // its actor as the resumption would, and a task this process admitted
    // is not resumed at all (`Db::unsettled_tasks`).
    let (failed, mut resume_failed) = tokio::sync::oneshot::channel::<String>();
    tokio::spawn(async move {
        match engine.recover_all().await {
            Ok(n) if n > 0 => tracing::info!("resuming {n} unsettled task(s)"),
            Ok(_) => {}
            Err(e) => {
                let _ = failed.send(format!("failed to read unsettled tasks: {e}"));
            }
        }
    });
    let mut why = None;
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler can be installed");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            Ok(failure) = &mut resume_failed => why = Some(failure),
        }
    };
    crate::server::serve(listener, crate::api::router(state), limits, shutdown).await;
    match why {
        Some(failure) => Err(Exit(3, failure)),
        None => Ok(0),
    }
}

/// Reads a secret file named by `flag`: it must be a regular file of mode
/// 0600 or stricter holding at least `bytes_min` bytes (surrounding
/// whitespace trimmed).
fn read_secret_file(flag: &str, path: &Path, bytes_min: usize) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("failed to read {flag} {}: {e}", path.display()))?;
    anyhow::ensure!(
        meta.is_file(),
        "{flag} {} is not a regular file",
        path.display()
    );
    anyhow::ensure!(
        meta.mode() & 0o077 == 0,
        "{flag} {} is readable or writable by others (mode {:o}); chmod 600 it",
        path.display(),
        meta.mode() & 0o777
    );
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("failed to read {flag} {}: {e}", path.display()))?;
    let text = text.trim();
    anyhow::ensure!(!text.is_empty(), "{flag} {} is empty", path.display());
    anyhow::ensure!(
        text.len() >= bytes_min,
        "{flag} {} holds {} bytes; at least {bytes_min} are needed",
        path.display(),
        text.len()
    );
    Ok(text.to_owned())
}

/// The provider credential: `--provider-key-file` when given, else what
/// [`CREDENTIAL_ENV`] held (taken out of the environment at start).
fn read_credential(
    file: Option<&Path>,
    from_env: Option<String>,
) -> anyhow::Result<Option<Secret>> {
    if let Some(path) = file {
        return read_secret_file("--provider-key-file", path, 1).map(|k| Some(Secret::new(k)));
    }
    Ok(from_env.filter(|k| !k.is_empty()).map(Secret::new))
}

fn token(args: &Args) -> anyhow::Result<String> {
    if let Some(path) = &args.token_file {
        return read_secret_file("--token-file", path, TOKEN_BYTES_MIN);
    }
    let path = args.state_dir.join("token");
    if path.exists() {
        return read_secret_file("the token file", &path, TOKEN_BYTES_MIN)
            .map_err(|e| anyhow::anyhow!("{e:#}; delete it to have a new one generated"));
    }
    let t = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let tmp = args.state_dir.join("token.tmp");
    // A leftover temporary file may have any mode; the token gets a new one.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("failed to write {}: {e}", tmp.display()))?;
    f.write_all(t.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    // The rename is durable only once the directory is synced.
    std::fs::File::open(&args.state_dir)?.sync_all()?;
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

/// With the feature, `--seeded-bug` takes every name and refuses others.
#[cfg(all(test, feature = "seeded-bugs"))]
mod seeded_flag_tests {
    use super::*;
    use crate::seeded::SeededBug;
    use clap::{CommandFactory as _, ValueEnum as _};

    fn parse(name: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from([
            "runnerd",
            "--state-dir",
            "/nonexistent",
            "--seeded-bug",
            name,
        ])
    }

    #[test]
    fn every_name_parses_as_clap_and_as_str_agree() {
        assert_eq!(SeededBug::ALL.len(), SeededBug::value_variants().len());
        for bug in SeededBug::ALL {
            let clap_name = bug.to_possible_value().expect("no variant is skipped");
            assert_eq!(clap_name.get_name(), bug.as_str(), "clap and as_str agree");
            let args = parse(bug.as_str()).expect("a valid name parses");
            assert_eq!(args.seeded_bug, Some(bug));
        }
    }

    #[test]
    fn an_unknown_name_is_exit_2_listing_the_valid_names() {
        let err = parse("no-such-bug").unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
        assert_eq!(err.exit_code(), 2);
        let text = err.render().to_string();
        for bug in SeededBug::ALL {
            assert!(text.contains(bug.as_str()), "{text}");
        }
    }

    #[test]
    fn the_help_lists_every_name() {
        let help = Args::command().render_long_help().to_string();
        for bug in SeededBug::ALL {
            assert!(help.contains(bug.as_str()), "{help}");
        }
    }
}
