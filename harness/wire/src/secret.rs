//! The provider credential's names and the canary the harness plants in it.
//!
//! The credential must never reach a tool's environment, the disk, logs or
//! reports; the effect command and the oracles check for it by these names.

/// The variable the runner reads the provider credential from (and removes
/// from its own environment before it starts anything).
pub const CREDENTIAL_ENV: &str = "TURNCUT_PROVIDER_API_KEY";

/// Prefix of every canary credential the harness plants. A value starting with
/// it in a tool's environment means a credential leaked into a tool shell.
pub const CANARY_PREFIX: &str = "turncut-canary-";

/// Environment variables that carry provider credentials. Fakes remove them
/// from a tool's environment, as a careful provider does.
pub const CREDENTIAL_VARS: &[&str] = &[
    "TURNCUT_PROVIDER_API_KEY",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "CODEX_API_KEY",
];

/// How long a provider waits for the runner's credential socket or FIFO to
/// be served.
pub const FIFO_READ_WAIT_MS: u64 = 10_000;

/// The credential as a provider receives it in [`CREDENTIAL_ENV`]: the value
/// itself, or, when the value is the path of a Unix socket or a FIFO (a
/// runner's one-shot hand-off that keeps the key out of every environment),
/// what a connection to the socket, or the FIFO, holds, read once within
/// [`FIFO_READ_WAIT_MS`]. `None` when there is none, or the hand-off was
/// gone, never served, or refused this process (an empty answer).
pub fn receive_credential() -> Option<String> {
    use std::os::unix::fs::FileTypeExt as _;
    let value = std::env::var(CREDENTIAL_ENV).ok()?;
    let path = std::path::PathBuf::from(&value);
    let kind = path
        .is_absolute()
        .then(|| std::fs::metadata(&path).ok())
        .flatten()
        .map(|m| m.file_type());
    let wait = std::time::Duration::from_millis(FIFO_READ_WAIT_MS);
    match kind {
        Some(k) if k.is_socket() => read_socket(&path, wait),
        Some(k) if k.is_fifo() => read_fifo(path, wait),
        _ => Some(value),
    }
    .filter(|key| !key.is_empty())
}

/// What a connection to the runner's credential socket `path` holds.
fn read_socket(path: &std::path::Path, wait: std::time::Duration) -> Option<String> {
    use std::io::Read as _;
    let mut conn = std::os::unix::net::UnixStream::connect(path).ok()?;
    conn.set_read_timeout(Some(wait)).ok()?;
    let mut key = String::new();
    conn.read_to_string(&mut key).ok()?;
    Some(key)
}

/// What the runner's credential FIFO `path` holds.
fn read_fifo(path: std::path::PathBuf, wait: std::time::Duration) -> Option<String> {
    // Opening a FIFO blocks until its writer opens it: read on a thread of
    // its own, so a runner that gave up never blocks the provider.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(&path));
    });
    rx.recv_timeout(wait).ok()?.ok()
}

/// Whether this process's environment holds a credential variable or a value
/// carrying the canary prefix.
pub fn environment_has_secret() -> bool {
    std::env::vars_os().any(|(k, v)| {
        let named = k.to_str().is_some_and(|k| CREDENTIAL_VARS.contains(&k));
        let canary = v.to_string_lossy().contains(CANARY_PREFIX);
        named || canary
    })
}
