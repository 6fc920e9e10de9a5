//! The bounds of a provider's output, shared by every driver: how fast it
//! may write ([`OutputBudget`]), how much of what it wrote may wait for the
//! engine ([`queue`]), and how long one request may wait for its answer
//! ([`Pending`]).
//!
//! A provider's output is hostile by assumption: a reader that buffers
//! whatever arrives lets a provider printing small lines fill the runner's
//! memory (measured: 100 MB of lines peaked runnerd at 2.6-3.9 GiB), and an
//! idle timer that any line resets lets a provider keep a request that it
//! never answers alive forever by chattering. So a reader waits for room in
//! a queue bounded in bytes before it reads on (the pipe fills and the
//! provider blocks: backpressure), output faster than the budget stops the
//! provider with `provider_protocol_error`, and a request's wait is measured
//! from its send and reset only by progress toward its answer.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::DriverError;

/// The default of `--provider-output-bytes-per-s-max`: above anything a
/// provider streams in earnest (a one-off large answer, such as a line of
/// the largest size, fits in the burst), below what a flood of small lines
/// reaches when the engine reads it as fast as it can.
pub const OUTPUT_BYTES_PER_S_MAX: u64 = 4 << 20;

/// How many seconds of budget one burst may spend at once.
pub const OUTPUT_BURST_S: u64 = 2;

/// The default of `--provider-request-timeout-ms`: the longest one request
/// may take, however much progress it shows (a long `session/load` replay, a
/// long streamed model answer).
pub const REQUEST_TIMEOUT_MS: u64 = 300_000;

/// How many bytes of provider output may wait for the engine in one
/// connection's queue (one line of the largest size always fits).
pub const QUEUED_BYTES_MAX: usize = 8 << 20;

/// What each queued message is charged on top of its bytes: a parsed JSON
/// value takes more memory than its text, and a flood of tiny lines must
/// not queue millions of them.
const QUEUED_OVERHEAD_BYTES: usize = 512;

/// The bounds of one provider connection, each with its unit.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// A request or turn that makes no progress this long is lost.
    pub idle: Duration,
    /// The longest one request may take, progress or not.
    pub request: Duration,
    /// Output bytes per second past which the provider is stopped.
    pub output_bytes_per_s_max: u64,
}

impl Bounds {
    /// The bounds with `idle` and the defaults for the rest.
    pub fn with_idle(idle: Duration) -> Bounds {
        Bounds {
            idle,
            request: Duration::from_millis(REQUEST_TIMEOUT_MS),
            output_bytes_per_s_max: OUTPUT_BYTES_PER_S_MAX,
        }
    }
}

/// The error of a provider silent for `idle`.
pub fn unresponsive(idle: Duration) -> DriverError {
    DriverError::Unresponsive {
        idle_ms: idle.as_millis() as u64,
        unanswered: None,
    }
}

/// A token bucket of output bytes: it holds at most [`OUTPUT_BURST_S`]
/// seconds of budget and refills at the budget's rate, so a burst may spend
/// that much at once and a sustained flood faster than the rate runs it dry.
/// Since a reader waits for the engine (`queue`), what it measures is how
/// fast the runner takes the provider's output, never more than that.
#[derive(Debug)]
pub struct OutputBudget {
    bytes_per_s_max: u64,
    tokens: f64,
    refilled: Instant,
}

impl OutputBudget {
    /// A full bucket for `bytes_per_s_max`.
    pub fn new(bytes_per_s_max: u64) -> OutputBudget {
        OutputBudget {
            bytes_per_s_max,
            tokens: Self::burst(bytes_per_s_max),
            refilled: Instant::now(),
        }
    }

    fn burst(bytes_per_s_max: u64) -> f64 {
        bytes_per_s_max as f64 * OUTPUT_BURST_S as f64
    }

    /// Spends `n` bytes just read; the error names the limit once the
    /// provider has written faster than it for too long.
    pub fn spend(&mut self, n: usize) -> Result<(), String> {
        let now = Instant::now();
        let rate = self.bytes_per_s_max as f64;
        let refill = now.duration_since(self.refilled).as_secs_f64() * rate;
        self.tokens = (self.tokens + refill).min(Self::burst(self.bytes_per_s_max));
        self.refilled = now;
        self.tokens -= n as f64;
        if self.tokens < 0.0 {
            return Err(format!(
                "more output than its budget of {} bytes per second \
                 (provider_output_bytes_per_s_max)",
                self.bytes_per_s_max
            ));
        }
        Ok(())
    }
}

/// A queue of provider output bounded by the bytes it holds: a sender waits
/// for room, so the reader behind it stops reading.
pub fn queue<T>(bytes_max: usize) -> (QueueTx<T>, QueueRx<T>) {
    let room = Arc::new(Semaphore::new(bytes_max));
    let (tx, rx) = mpsc::unbounded_channel();
    (
        QueueTx {
            tx,
            room: Arc::clone(&room),
            bytes_max,
        },
        QueueRx { rx, room },
    )
}

/// The sending side of [`queue`].
pub struct QueueTx<T> {
    tx: mpsc::UnboundedSender<(T, usize, u32)>,
    room: Arc<Semaphore>,
    bytes_max: usize,
}

/// The receiving side of [`queue`].
pub struct QueueRx<T> {
    rx: mpsc::UnboundedReceiver<(T, usize, u32)>,
    room: Arc<Semaphore>,
}

impl<T> QueueTx<T> {
    /// Queues `item` of `bytes` once there is room for it; false when the
    /// receiver is gone.
    pub async fn send(&self, item: T, bytes: usize) -> bool {
        let cost = (bytes + QUEUED_OVERHEAD_BYTES).min(self.bytes_max);
        let cost = u32::try_from(cost).unwrap_or(u32::MAX);
        match self.room.acquire_many(cost).await {
            Ok(permit) => permit.forget(),
            Err(_) => return false,
        }
        self.tx.send((item, bytes, cost)).is_ok()
    }
}

impl<T> QueueRx<T> {
    /// The next item and its size in bytes; `None` once the sender is gone
    /// and the queue empty.
    pub async fn recv(&mut self) -> Option<(T, usize)> {
        let (item, bytes, cost) = self.rx.recv().await?;
        self.room.add_permits(cost as usize);
        Some((item, bytes))
    }
}

impl<T> Drop for QueueRx<T> {
    fn drop(&mut self) {
        // A sender waiting for room gives up instead of waiting forever.
        self.room.close();
    }
}

/// The wait for the answer to one request: it ends `idle` after the send
/// or after the last progress toward the answer, and never later than the
/// request timeout after the send. Other messages that arrive meanwhile are
/// counted, not progress.
#[derive(Debug)]
pub struct Pending {
    method: String,
    sent: Instant,
    idle: Duration,
    idle_until: Instant,
    request_until: Instant,
    others: usize,
}

impl Pending {
    /// A request `method` sent now under `bounds`.
    pub fn new(method: &str, bounds: &Bounds) -> Pending {
        let sent = Instant::now();
        Pending {
            method: method.to_owned(),
            sent,
            idle: bounds.idle,
            idle_until: sent + bounds.idle,
            request_until: sent + bounds.request,
            others: 0,
        }
    }

    /// When the wait ends.
    pub fn deadline(&self) -> Instant {
        self.idle_until.min(self.request_until)
    }

    /// Something that brings the answer closer arrived.
    pub fn progress(&mut self) {
        self.idle_until = Instant::now() + self.idle;
    }

    /// Something unrelated to the answer arrived.
    pub fn other(&mut self) {
        self.others += 1;
    }

    /// The error of a wait that reached its deadline.
    pub fn expired(&self) -> DriverError {
        let waited_ms = self.sent.elapsed().as_millis() as u64;
        DriverError::Unresponsive {
            idle_ms: self.idle.as_millis() as u64,
            unanswered: Some(format!(
                "{} was not answered in {waited_ms} ms ({} other messages meanwhile)",
                self.method, self.others
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flood_runs_the_budget_dry_and_a_trickle_does_not() {
        let mut budget = OutputBudget::new(1000);
        assert!(budget.spend(1200).is_ok());
        assert!(budget.spend(700).is_ok());
        let err = budget.spend(200).unwrap_err();
        assert!(err.contains("budget of 1000 bytes per second"), "{err}");
        let mut budget = OutputBudget::new(1 << 30);
        for _ in 0..1000 {
            assert!(budget.spend(10).is_ok());
        }
    }

    #[tokio::test]
    async fn a_full_queue_holds_its_sender_until_the_receiver_takes_one() {
        let (tx, mut rx) = queue::<u32>(2 * QUEUED_OVERHEAD_BYTES);
        assert!(tx.send(1, 0).await);
        assert!(tx.send(2, 0).await);
        let third = tokio::time::timeout(Duration::from_millis(50), tx.send(3, 0)).await;
        assert!(third.is_err(), "a third item found room");
        assert_eq!(rx.recv().await, Some((1, 0)));
        assert!(tx.send(3, 0).await);
        drop(rx);
        assert!(!tx.send(4, 0).await, "no receiver");
    }
}
