//! What the HTTP fakes (OpenCode, the model API) share: the loopback-only
//! bind, the process around the server (a tokio runtime, the exit when the
//! parent closes stdin, SIGTERM), and the journaling of requests and
//! responses. Routes and bodies are each fake's own.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{Method, StatusCode, Uri};
use axum::serve::ListenerExt as _;
use serde_json::{Value, json};

use crate::journal::Journal;

/// Binds `hostname:port`, refusing anything that is not loopback. The error is
/// a sentence for the user (exit code 2).
pub(crate) fn bind(hostname: &str, port: u16) -> Result<std::net::TcpListener, String> {
    let ip: std::net::IpAddr = match hostname {
        "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        h => h
            .parse()
            .map_err(|_| format!("--hostname {h:?} is not an IP address or localhost"))?,
    };
    if !ip.is_loopback() {
        return Err(format!(
            "--hostname {hostname} is not a loopback address; the fake serves loopback only"
        ));
    }
    std::net::TcpListener::bind((ip, port)).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => format!("port {port} on {ip} is already in use"),
        _ => format!("failed to listen on {ip}:{port}: {e}"),
    })
}

/// Runs an HTTP fake until stdin closes or SIGTERM arrives, then exits the
/// process with 0: a runtime of `worker_threads`, the stdin watch (journaled
/// `process.stdin_closed`, in the journal `journal` finds in `shared`), and
/// [`serve`] of `app` on `listener`.
pub(crate) fn run<S: Send + Sync + 'static>(
    shared: &Arc<S>,
    journal: fn(&S) -> &Journal,
    listener: std::net::TcpListener,
    worker_threads: usize,
    banner: &str,
    app: axum::Router,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .enable_all()
        .build()?;
    let stdin_shared = Arc::clone(shared);
    crate::stdio::exit_when_stdin_closes(move || {
        journal(&stdin_shared).fact("process.stdin_closed", json!({}));
    });
    runtime.block_on(serve(listener, app, banner, journal(shared)))?;
    std::process::exit(0);
}

/// Announces `<banner> listening on http://ADDR` on stdout (the one line a
/// driver waits for), then serves `app` until SIGTERM, which is journaled.
///
/// Accepted sockets get `TCP_NODELAY`: events are small writes, and Nagle's
/// algorithm would hold each one back until the previous is acknowledged (a
/// delayed ACK: ~40 ms a stall).
async fn serve(
    listener: std::net::TcpListener,
    app: axum::Router,
    banner: &str,
    journal: &Journal,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    let addr = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{banner} listening on http://{addr}")?;
    out.flush()?;
    drop(out);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::select! {
        r = axum::serve(listener, app) => r?,
        _ = term.recv() => journal.fact("process.sigterm", json!({})),
    }
    Ok(())
}

/// Journals a received request: method, path and body (JSON when it parses,
/// else text; null when empty).
pub(crate) fn journal_in(journal: &Journal, method: &Method, uri: &Uri, body: &Bytes) {
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    journal.message_in(&json!({ "method": method.as_str(), "path": uri.path(), "body": body }));
}

/// Journals a response about to be sent.
pub(crate) fn journal_out(
    journal: &Journal,
    method: &Method,
    uri: &Uri,
    status: StatusCode,
    body: &Value,
) {
    journal.message_out(&json!({
        "method": method.as_str(),
        "path": uri.path(),
        "status": status.as_u16(),
        "body": body,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_binds() {
        assert!(bind("0.0.0.0", 0).unwrap_err().contains("loopback"));
        assert!(bind("example.com", 0).unwrap_err().contains("not an IP"));
        let l = bind("127.0.0.1", 0).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(
            bind("127.0.0.1", port)
                .unwrap_err()
                .contains("already in use")
        );
    }
}
