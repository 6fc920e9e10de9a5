//! The oracles' names: one closed set, so a report, `decisive` or a test
//! matches an oracle, not a string. Judging lives in `oracles`; this is
//! the name each result carries (`OracleResult::oracle`), stored in
//! `wave.json` as the same kebab-case text as ever.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An oracle: one rule a cell's evidence is judged by, with the one name
/// every report spells it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Oracle {
    /// No provider turn started twice for one message.
    NoReplayTurn,
    /// No effect ran twice; the task's effects counted whole.
    NoReplayEffect,
    /// Every failure carries a structured, recoverable-or-not cause.
    CauseStructured,
    /// The recovery contract's tables (`docs/recovery-contract.md`).
    Contract,
    /// A Retry admitted after a failure runs and ends well.
    RetryWorks,
    /// The fence: a failed-closed task refuses follow-ups, and a refused
    /// message reaches no provider.
    Fence,
    /// Every accepted message is consumed once or named as waiting.
    NoLoss,
    /// An effect the runner recorded done survives a power cut.
    DurableEffect,
    /// The task settles before the cell's deadline.
    Liveness,
    /// The credential reaches no disk, log or process it must not.
    Secrecy,
    /// No process is left behind.
    Hygiene,
    /// The cell tested what it names (its events applied).
    Vacuity,
    /// An injected provider error or model API failure ends with the
    /// contract's cause for it, retried only as the contract lets it.
    Upstream,
}

impl Oracle {
    /// Every oracle, in report order.
    pub const ALL: [Oracle; 13] = [
        Oracle::NoReplayTurn,
        Oracle::NoReplayEffect,
        Oracle::CauseStructured,
        Oracle::Contract,
        Oracle::RetryWorks,
        Oracle::Fence,
        Oracle::NoLoss,
        Oracle::DurableEffect,
        Oracle::Liveness,
        Oracle::Secrecy,
        Oracle::Hygiene,
        Oracle::Vacuity,
        Oracle::Upstream,
    ];

    /// Its name in reports (`no-replay.turn`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Oracle::NoReplayTurn => "no-replay.turn",
            Oracle::NoReplayEffect => "no-replay.effect",
            Oracle::CauseStructured => "cause.structured",
            Oracle::Contract => "contract",
            Oracle::RetryWorks => "retry.works",
            Oracle::Fence => "fence",
            Oracle::NoLoss => "no-loss",
            Oracle::DurableEffect => "durable.effect",
            Oracle::Liveness => "liveness",
            Oracle::Secrecy => "secrecy",
            Oracle::Hygiene => "hygiene",
            Oracle::Vacuity => "vacuity",
            Oracle::Upstream => "upstream",
        }
    }

    /// The oracle named `name` in reports, if any.
    pub fn parse(name: &str) -> Option<Oracle> {
        Oracle::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

impl std::fmt::Display for Oracle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Stored as its name.
impl Serialize for Oracle {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read from its name; another name is an error that lists the known ones.
impl<'de> Deserialize<'de> for Oracle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Oracle::parse(&name).ok_or_else(|| {
            let known: Vec<&str> = Oracle::ALL.iter().map(|o| o.as_str()).collect();
            serde::de::Error::custom(format!(
                "unknown oracle {name:?} (known: {})",
                known.join(", ")
            ))
        })
    }
}
