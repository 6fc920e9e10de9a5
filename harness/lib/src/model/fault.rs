//! The faults a cell applies at a cut: what each is called in scenarios,
//! schedules and reports, and how the cell applies it (its class).

use serde::{Deserialize, Serialize};

/// How a fault is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultClass {
    /// A signal to the runner or the provider's group (`nemesis::blow`).
    Process,
    /// A controller request sent while the hit is held.
    Action,
    /// The held write or read fails (the cut-point reply `fail <errno>`,
    /// or `corrupt` for a read).
    Storage,
    /// Every process of the cell frozen and killed, unsynced writes lost.
    Power,
    /// The held process answers its request with an error (`answer <fault>`).
    Answer,
}

/// What the harness does at a cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the runner; its provider survives as an orphan.
    KillRunner,
    /// SIGKILL the provider's process group; the runner survives.
    KillProvider,
    /// SIGKILL both.
    KillBoth,
    /// SIGSTOP the provider's process group: it stops answering forever.
    HangProvider,
    /// A controller action, not a signal: while the runner or provider is
    /// held at the cut, the controller sends a follow-up, then the hit goes
    /// on. The follow-up lands exactly in the window of that boundary.
    FollowUp,
    /// A controller action: while the hit is held, the controller asks for
    /// a Retry (refused with 409 unless the task has failed; admitted, it
    /// races whatever the held process does next).
    Retry,
    /// A storage fault at a runner's before-write point (`runner.write.*`):
    /// this one durable write fails with EIO; the next ones succeed.
    FailWrite,
    /// A storage fault at a runner's before-write point: the disk is full,
    /// so this write and every later write of that runner fail with ENOSPC;
    /// the disk comes back when the harness restarts the runner, at its
    /// next attempted write.
    DiskFull,
    /// A power loss: every process of the cell frozen, then SIGKILLed, then
    /// every write not yet made durable dropped from the runner's state
    /// directory (with the providers' stores inside it) and the workspace,
    /// which sit on lazy mounts in such a cell (`docs/lazyfs.md`); the runner
    /// starts again on what survived. The ledger and the journal are the
    /// world's record and stay off the mounts.
    PowerCut,
    /// A provider answers a request with its protocol's error (`wire::upstream`).
    ErrorAnswer,
    /// The model API answers 429 with `Retry-After` (`wire::upstream::UpstreamFault`).
    RateLimit,
    /// The model API answers 500.
    ServerError,
    /// The model API answers 503.
    Unavailable,
    /// The model API answers 529 (overloaded).
    Overload,
    /// The model API answers 401, and every later request of that conversation.
    AuthExpired,
    /// The model API answers 400 `context_length_exceeded`.
    ContextOverflow,
    /// The model API resets the connection after an event of its stream.
    StreamCut,
    /// The model API ends its stream early, without `response.completed`.
    StreamTruncated,
    /// The model API sends a malformed event, then ends its stream.
    MalformedEvent,
    /// A storage fault at a runner's before-read point (`runner.read.*`):
    /// this one read fails with EIO (`SQLITE_IOERR_READ`); the next succeed.
    FailRead,
    /// A storage fault at a runner's before-read point: this one read returns
    /// a corrupt page (reply `corrupt`, `SQLITE_CORRUPT`); the next succeed.
    CorruptRead,
}

impl Fault {
    /// Every fault, in report order.
    pub const ALL: [Fault; 21] = [
        Fault::KillRunner,
        Fault::KillProvider,
        Fault::KillBoth,
        Fault::HangProvider,
        Fault::FollowUp,
        Fault::Retry,
        Fault::FailWrite,
        Fault::DiskFull,
        Fault::PowerCut,
        Fault::ErrorAnswer,
        Fault::RateLimit,
        Fault::ServerError,
        Fault::Unavailable,
        Fault::Overload,
        Fault::AuthExpired,
        Fault::ContextOverflow,
        Fault::StreamCut,
        Fault::StreamTruncated,
        Fault::MalformedEvent,
        Fault::FailRead,
        Fault::CorruptRead,
    ];

    /// The faults of a scenario that names none: the process faults.
    pub const DEFAULT: [Fault; 4] = [
        Fault::KillRunner,
        Fault::KillProvider,
        Fault::KillBoth,
        Fault::HangProvider,
    ];

    /// The name used in scenario files, cell names and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::KillRunner => "kill-runner",
            Fault::KillProvider => "kill-provider",
            Fault::KillBoth => "kill-both",
            Fault::HangProvider => "hang-provider",
            Fault::FollowUp => "follow-up",
            Fault::Retry => "retry",
            Fault::FailWrite => "fail-write",
            Fault::DiskFull => "disk-full",
            Fault::PowerCut => "power-cut",
            Fault::FailRead => "fail-read",
            Fault::CorruptRead => "corrupt-read",
            Fault::ErrorAnswer => wire::upstream::ERROR_ANSWER,
            _ => self
                .upstream()
                .map_or("", wire::upstream::UpstreamFault::as_str),
        }
    }

    /// How the harness applies the fault: every fault is in exactly one
    /// class, and the cell's event loop dispatches on it.
    pub fn class(self) -> FaultClass {
        match self {
            Fault::KillRunner | Fault::KillProvider | Fault::KillBoth | Fault::HangProvider => {
                FaultClass::Process
            }
            Fault::FollowUp | Fault::Retry => FaultClass::Action,
            Fault::FailWrite | Fault::DiskFull | Fault::FailRead | Fault::CorruptRead => {
                FaultClass::Storage
            }
            Fault::PowerCut => FaultClass::Power,
            _ => FaultClass::Answer,
        }
    }

    /// Whether the fault is a storage fault: it applies only at a runner's
    /// before-write points (`WRITE_POINTS`: `fail-write`, `disk-full`) or
    /// before-read points (`READ_POINTS`: `fail-read`, `corrupt-read`).
    pub fn is_storage(self) -> bool {
        self.class() == FaultClass::Storage
    }

    /// Whether the fault is a read fault: it applies only at a before-read point.
    pub fn is_read(self) -> bool {
        matches!(self, Fault::FailRead | Fault::CorruptRead)
    }

    /// Whether the fault is a signal to a process (a kill or a hang).
    pub fn is_process(self) -> bool {
        self.class() == FaultClass::Process
    }

    /// Whether the fault is a controller action rather than a signal.
    pub fn is_action(self) -> bool {
        self.class() == FaultClass::Action
    }

    /// Parses a fault name.
    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
