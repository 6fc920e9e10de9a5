//! Serving the control API over HTTP/1.1 (hyper, the router from `api`),
//! with every resource a client can hold bounded, and the API reachable at
//! those bounds:
//!
//! - at most [`Limits::connections_max`] connections at once, so runnerd
//!   never runs out of descriptors for its store and providers (1,100 idle
//!   connections once held runnerd at its 1,024-descriptor limit). At the
//!   limit a new connection takes the place of the one idle the longest
//!   ([`Table`]: no request in flight, none read yet or its last one
//!   answered), which is closed: idle connections cannot lock out a client
//!   that sends a request, the operator's health check and authenticated
//!   calls among them (before, they were answered 503 until the idle ones
//!   timed out, for up to 35 s). Only when every connection has a request
//!   in flight is a new one answered 503 `too_many_connections` and closed;
//! - a connection's request head must arrive within
//!   [`Limits::header_read_timeout`] of the connection (or of the end of its
//!   previous request): an idle or trickling client is dropped;
//! - after SIGTERM no connection is accepted, open ones are asked to finish
//!   their request, and runnerd exits after [`Limits::shutdown_grace`]
//!   whatever is still open (a half-sent request, an event stream).
//!
//! It decides nothing about requests: `api` does.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};

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

/// The open connections, under one lock: which have a request in flight,
/// and since when each idle one has been idle, so that at the limit the
/// one idle the longest makes room for a new one.
struct Table {
    connections_max: usize,
    inner: Mutex<Conns>,
}

#[derive(Default)]
struct Conns {
    /// The next connection's id.
    next_id: u64,
    /// Counts accepts and answered requests: a connection's `idle_since` is
    /// its value when the connection went idle, so the smallest is the one
    /// idle the longest.
    tick: u64,
    open: HashMap<u64, Conn>,
}

struct Conn {
    /// Requests read and not yet answered in full (body included).
    in_flight: usize,
    idle_since: u64,
    /// Closes the connection to make room for a new one.
    close: Option<oneshot::Sender<()>>,
}

impl Table {
    /// A table for at most `connections_max` connections.
    fn new(connections_max: usize) -> Arc<Table> {
        Arc::new(Table {
            connections_max,
            inner: Mutex::new(Conns::default()),
        })
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.inner.lock().expect("the connection table")
    }

    /// Admits a new connection: its id, and what says when it is closed to
    /// make room. At the limit the connection idle the longest is closed
    /// (its entry leaves at once, its socket as soon as its task sees the
    /// word); `None` when every connection has a request in flight.
    fn admit(&self) -> Option<(u64, oneshot::Receiver<()>)> {
        let mut c = self.conns();
        if c.open.len() >= self.connections_max {
            let oldest = c
                .open
                .iter()
                .filter(|(_, k)| k.in_flight == 0)
                .min_by_key(|(_, k)| k.idle_since)
                .map(|(id, _)| *id)?;
            if let Some(close) = c.open.remove(&oldest).and_then(|k| k.close) {
                let _ = close.send(());
            }
        }
        let (close, closed) = oneshot::channel();
        let (id, tick) = (c.next_id, c.tick);
        c.next_id += 1;
        c.tick += 1;
        c.open.insert(
            id,
            Conn {
                in_flight: 0,
                idle_since: tick,
                close: Some(close),
            },
        );
        Some((id, closed))
    }

    /// A request of connection `id` was read; it is in flight until the
    /// returned guard drops (its answer sent in full, or dropped).
    fn begin(self: &Arc<Self>, id: u64) -> InFlight {
        if let Some(k) = self.conns().open.get_mut(&id) {
            k.in_flight += 1;
        }
        InFlight {
            table: Arc::clone(self),
            id,
        }
    }

    /// Connection `id` is closed.
    fn remove(&self, id: u64) {
        self.conns().open.remove(&id);
    }

    /// How many connections are open, and how many of them have a request
    /// in flight.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let c = self.conns();
        let busy = c.open.values().filter(|k| k.in_flight > 0).count();
        (c.open.len(), busy)
    }
}

/// A request in flight: dropped when its answer has been sent in full (or
/// dropped), which makes its connection idle again if it was the last.
struct InFlight {
    table: Arc<Table>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut c = self.table.conns();
        let tick = c.tick;
        if let Some(k) = c.open.get_mut(&self.id) {
            k.in_flight = k.in_flight.saturating_sub(1);
            if k.in_flight == 0 {
                k.idle_since = tick;
            }
            c.tick += 1;
        }
    }
}

/// The API as one connection's service: each request is in flight from the
/// moment its head is read until its body is sent ([`Tracked`]).
#[derive(Clone)]
struct Service {
    inner: TowerToHyperService<axum::Router>,
    table: Arc<Table>,
    id: u64,
}

type Answer = hyper::Response<Tracked<axum::body::Body>>;

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = Answer;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Self::Error>> + Send>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.table.begin(self.id);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await?;
            Ok(answer.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// An answer's body, with its request in flight until the body is dropped.
struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then for at
/// most the shutdown grace.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let table = Table::new(limits.connections_max);
    let overflow = Arc::new(Semaphore::new(OVERFLOW_ANSWERS_MAX));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let api = TowerToHyperService::new(router);
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
        let Some((id, closed)) = table.admit() else {
            if let Ok(answer) = Arc::clone(&overflow).try_acquire_owned() {
                let connections_max = limits.connections_max;
                tokio::spawn(async move {
                    refuse(tcp, connections_max).await;
                    drop(answer);
                });
            }
            continue;
        };
        let service = Service {
            inner: api.clone(),
            table: Arc::clone(&table),
            id,
        };
        let connection = graceful.watch(http.serve_connection(TokioIo::new(tcp), service));
        let table = Arc::clone(&table);
        tokio::spawn(async move {
            // Closed to make room, the connection is dropped, and its
            // socket with it: it had no request in flight.
            tokio::select! {
                _ = connection => {}
                _ = closed => {}
            }
            table.remove(id);
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

/// Answers a connection over the limit (every open one has a request in
/// flight) with a JSON 503 and closes it after reading what its client
/// sends for a moment.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_limit_the_connection_idle_the_longest_makes_room() {
        let table = Table::new(3);
        let (a, mut a_closed) = table.admit().unwrap();
        let (_b, mut b_closed) = table.admit().unwrap();
        let (_c, _) = table.admit().unwrap();
        // `a` has a request in flight: it is not idle, `b` is the oldest idle.
        let request = table.begin(a);
        let (_d, _) = table.admit().expect("room is made");
        assert!(
            b_closed.try_recv().is_ok(),
            "b, idle the longest, is closed"
        );
        assert!(
            a_closed.try_recv().is_err(),
            "a request in flight is never cut"
        );
        assert_eq!(table.counts(), (3, 1));
        // `a`'s request is answered: it is idle now, but since after `c`.
        drop(request);
        let (_e, _) = table.admit().unwrap();
        assert!(
            a_closed.try_recv().is_err(),
            "c went first: a answered later"
        );
        assert_eq!(table.counts(), (3, 0));
    }

    #[test]
    fn with_every_connection_busy_a_new_one_is_refused() {
        let table = Table::new(2);
        let (a, _) = table.admit().unwrap();
        let (b, _) = table.admit().unwrap();
        let _ra = table.begin(a);
        let _rb = table.begin(b);
        assert!(table.admit().is_none());
        assert_eq!(table.counts(), (2, 2));
        table.remove(a);
        assert!(
            table.admit().is_some(),
            "a closed connection frees its place"
        );
    }
}
