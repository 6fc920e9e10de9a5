//! Serving the control API over HTTP/1.1 (hyper, the router from `api`),
//! with every resource a client can hold bounded:
//!
//! - at most [`Limits::connections_max`] connections at once; one over the
//!   limit is answered 503 `too_many_connections` and closed, so runnerd
//!   never runs out of descriptors for its store and providers (measured
//!   before: 1,100 idle connections held runnerd at its 1,024-descriptor
//!   limit and health checks timed out);
//! - a connection's request head must arrive within
//!   [`Limits::header_read_timeout`] of the connection (or of the end of its
//!   previous request): an idle or trickling client is dropped;
//! - after SIGTERM no connection is accepted, open ones are asked to finish
//!   their request, and runnerd exits after [`Limits::shutdown_grace`]
//!   whatever is still open (a half-sent request, an event stream).
//!
//! It decides nothing about requests: `api` does.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::causes::RequestError;

/// The default of `--connections-max`.
pub const CONNECTIONS_MAX: usize = 256;

/// The default of `--http-header-read-timeout-ms`.
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;

/// How long open connections get to finish after SIGTERM.
pub const SHUTDOWN_GRACE_MS: u64 = 5_000;

/// How many connections over the limit may be answered at once; past that
/// they are closed unanswered.
const OVERFLOW_ANSWERS_MAX: usize = 32;

/// How long an answered connection over the limit is read (and what it
/// sends discarded) before it is closed, so its client reads the answer
/// instead of a reset.
const OVERFLOW_LINGER_MS: u64 = 1_000;

/// The bounds of the server.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub connections_max: usize,
    pub header_read_timeout: Duration,
    pub shutdown_grace: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes, then for at
/// most the shutdown grace.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(limits.connections_max));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_ANSWERS_MAX));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let service = TowerToHyperService::new(router);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of descriptors or memory for the moment: a pause,
                    // not a busy loop, and the connections already open go on.
                    tracing::warn!("failed to accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // No Nagle delay on small answers and event pages.
        let _ = tcp.set_nodelay(true);
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            if let Ok(answer) = Arc::clone(&overflow).try_acquire_owned() {
                let connections_max = limits.connections_max;
                tokio::spawn(async move {
                    refuse(tcp, connections_max).await;
                    drop(answer);
                });
            }
            continue;
        };
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), service.clone()));
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open {} ms after SIGTERM were cut",
            limits.shutdown_grace.as_millis()
        );
    }
}

/// Answers a connection over the limit with a JSON 503 and closes it after
/// reading what its client sends for a moment.
async fn refuse(mut tcp: TcpStream, connections_max: usize) {
    let reason = RequestError::TooManyConnections;
    let body = serde_json::json!({
        "error": format!("runnerd has its limit of {connections_max} open connections; try again"),
        "reason": reason.as_str(),
    })
    .to_string();
    let head = format!(
        "HTTP/1.1 {} Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        reason.status(),
        body.len()
    );
    let linger = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(body.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_millis(OVERFLOW_LINGER_MS), linger).await;
}
