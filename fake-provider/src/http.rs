//! The serving loop of the HTTP fakes (OpenCode, the model API).

use axum::serve::ListenerExt as _;
use serde_json::json;

use crate::journal::Journal;

/// Announces `<banner> listening on http://ADDR` on stdout (the one line a
/// driver waits for), then serves `app` until SIGTERM, which is journaled.
///
/// Accepted sockets get `TCP_NODELAY`: events are small writes, and Nagle's
/// algorithm would hold each one back until the previous is acknowledged (a
/// delayed ACK: ~40 ms a stall).
pub(crate) async fn serve(
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
