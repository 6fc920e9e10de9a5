//! `cutpoint` lets the turncut harness stop a process at a named boundary.
//!
//! The runner and the fake providers link this crate and call
//! [`hit`]`("runner.turn_intent.persisted")` at each boundary worth cutting at;
//! names follow `<component>.<subject>.<moment>`. Whether a hit does anything is
//! decided once per process from the `TURNCUT_*` environment variables (see
//! [`ENV_SOCKET`], [`ENV_ARM`], [`ENV_TRACE`] and [`ENV_ROLE`]): a disarmed
//! process pays one relaxed atomic load per hit, a traced one appends a JSON
//! line per hit, and an armed one connects to the harness at the armed
//! occurrence and blocks until told to continue or killed. The harness half of
//! that exchange ([`Listener`], [`HeldHit`], [`trace_read`]) lives here too so
//! that the harness and the tests share one implementation of the wire format.
//! This crate deliberately does not kill processes, decide where to cut, or
//! know anything about runners or providers; it only reports and waits.
//!
//! # Wire form
//!
//! An armed process connects to [`ENV_SOCKET`], writes its [`Hit`] as one JSON
//! line and reads one reply line:
//!
//! - `continue` — go on past the point ([`HeldHit::resume`]);
//! - `fail EIO` or `fail ENOSPC` — the operation at this point fails with that
//!   errno ([`HeldHit::fail`], [`IoFault`]). Only a point passed with
//!   [`hit_io`] can fail: it returns the error and the caller treats it as the
//!   failure of the write (or read) it was about to make, as RocksDB's
//!   fault-injection file system does. A point passed with [`hit`] cannot
//!   fail; it logs the reply to stderr and continues;
//! - `corrupt` — the read at this point returns data that does not decode
//!   ([`IoFault::Corrupt`]): [`hit_io`] returns an `InvalidData` error, and
//!   the caller fails the read as its decoder would (SQLite: `SQLITE_CORRUPT`).
//!   Like `fail`, only a [`hit_io`] point can take it;
//! - `answer NAME` — the process answers the request it just received with
//!   the error `NAME` stands for instead of its real answer
//!   ([`HeldHit::answer`]). Only a point passed with [`hit_answer`] takes it
//!   (it returns `NAME`); elsewhere it is logged and treated as `continue`;
//! - nothing (the harness closed the connection) — logged, then as `continue`.
//!
//! The process stays blocked until a reply arrives or it is killed.

mod client;
mod harness;
mod parent;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use client::{active, held, hit, hit_answer, hit_io, hit_off, init};
pub use harness::{HeldHit, Holding, Listener, MESSAGE_WAIT_MS, Waker, trace_read};
pub use parent::{DIE_WITH_ENV, die_with_parent};

/// Path of the unix stream socket the harness listens on.
pub const ENV_SOCKET: &str = "TURNCUT_CUT_SOCKET";
/// Comma-separated `point#occurrence` entries at which to block (see [`parse_arm`]).
pub const ENV_ARM: &str = "TURNCUT_CUT_ARM";
/// File to which every hit is appended as one JSON line.
pub const ENV_TRACE: &str = "TURNCUT_CUT_TRACE";
/// Free-form role copied into every message, `unknown` when unset.
pub const ENV_ROLE: &str = "TURNCUT_ROLE";

/// A storage fault the harness can answer an armed hit with: the point's
/// operation fails with an errno (reply `fail EIO` / `fail ENOSPC`), or
/// reads data that does not decode (reply `corrupt`).
///
/// The runner turns [`IoFault::Eio`] into one failed write (`fail-write`) or
/// read (`fail-read`), [`IoFault::Enospc`] into a full disk for the rest of
/// the process's life (`disk-full`) and [`IoFault::Corrupt`] into a read that
/// returns a corrupt page (`corrupt-read`: SQLite's `SQLITE_CORRUPT`); what a
/// fault means past the one operation is the caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IoFault {
    /// `EIO`: the operation failed.
    Eio,
    /// `ENOSPC`: no space left on the device.
    Enospc,
    /// The read succeeded, but what it read is corrupt (a page whose bytes
    /// do not decode). No errno says this: the kernel returned the bytes, and
    /// only the reader finds them wrong, so it has a reply of its own.
    Corrupt,
}

/// The error [`hit_io`] returns for [`IoFault::Corrupt`] (inside an
/// [`io::Error`] of kind [`io::ErrorKind::InvalidData`]), so that
/// [`IoFault::of_error`] tells it from any other invalid data.
#[derive(Debug)]
struct CorruptData;

impl fmt::Display for CorruptData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the data read is corrupt (injected by the harness)")
    }
}

impl std::error::Error for CorruptData {}

impl IoFault {
    /// Every fault, in wire-name order.
    pub const ALL: [IoFault; 3] = [IoFault::Eio, IoFault::Enospc, IoFault::Corrupt];

    /// The fault's name on the wire: the errno name (`EIO`, `ENOSPC`), or
    /// `corrupt`.
    pub fn as_str(self) -> &'static str {
        match self {
            IoFault::Eio => "EIO",
            IoFault::Enospc => "ENOSPC",
            IoFault::Corrupt => "corrupt",
        }
    }

    /// The raw errno; `None` for [`IoFault::Corrupt`], which no errno says.
    pub fn errno(self) -> Option<i32> {
        match self {
            IoFault::Eio => Some(nix::errno::Errno::EIO as i32),
            IoFault::Enospc => Some(nix::errno::Errno::ENOSPC as i32),
            IoFault::Corrupt => None,
        }
    }

    /// The error a failed operation returns: the errno as the kernel would
    /// return it, or for a corrupt read an [`io::ErrorKind::InvalidData`]
    /// error that [`IoFault::of_error`] recognises.
    pub fn to_io_error(self) -> io::Error {
        match self.errno() {
            Some(errno) => io::Error::from_raw_os_error(errno),
            None => io::Error::new(io::ErrorKind::InvalidData, CorruptData),
        }
    }

    /// The fault an error of [`hit_io`] (or [`IoFault::to_io_error`]) stands
    /// for; `None` for any other error.
    pub fn of_error(e: &io::Error) -> Option<IoFault> {
        if e.get_ref().is_some_and(|inner| inner.is::<CorruptData>()) {
            return Some(IoFault::Corrupt);
        }
        let errno = e.raw_os_error()?;
        IoFault::ALL.into_iter().find(|f| f.errno() == Some(errno))
    }

    /// The reply line that injects this fault, without its newline:
    /// `fail EIO`, `fail ENOSPC`, `corrupt`.
    pub fn reply(self) -> String {
        match self {
            IoFault::Corrupt => "corrupt".to_owned(),
            errno => format!("fail {}", errno.as_str()),
        }
    }

    /// Parses a reply line (`fail EIO`, `corrupt`); `None` for anything else.
    pub(crate) fn from_reply(line: &str) -> Option<IoFault> {
        IoFault::ALL.into_iter().find(|f| f.reply() == line)
    }
}

impl fmt::Display for IoFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IoFault {
    type Err = String;

    /// Parses a wire name: `EIO`, `ENOSPC`, `corrupt`.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        IoFault::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| {
                format!("unknown storage fault {name:?}; expected EIO, ENOSPC or corrupt")
            })
    }
}

/// The name in an `answer NAME` reply line; `None` for any other line or a
/// name that is empty or has characters other than `a-z`, `0-9` and `-`.
pub(crate) fn answer_of_reply(line: &str) -> Option<&str> {
    let name = line.strip_prefix("answer ")?;
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then_some(name)
}

/// One hit of a cut point: the message sent to the harness and the trace line.
///
/// `n` is the 1-based occurrence of `point` within the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hit {
    pub role: String,
    pub pid: u32,
    pub point: String,
    pub n: u64,
}

impl fmt::Display for Hit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}#{} ({} pid {})",
            self.point, self.n, self.role, self.pid
        )
    }
}

/// One armed occurrence: block at the `n`-th hit of `point`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Arm {
    pub point: String,
    pub n: u64,
}

/// The occurrence of an arm written `#*`: every hit of its point.
pub const EVERY: u64 = 0;

impl Arm {
    /// Whether the `n`-th hit of `point` is armed: the point is equal, or the
    /// arm's point ends in `.*` and is a prefix of it (`runner.write.*`); the
    /// occurrence is equal, or the arm's is [`EVERY`] (`#*`).
    pub fn matches(&self, point: &str, n: u64) -> bool {
        let point_ok = match self.point.strip_suffix('*') {
            Some(prefix) if prefix.ends_with('.') => point.starts_with(prefix),
            _ => self.point == point,
        };
        point_ok && (self.n == EVERY || self.n == n)
    }
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.n == EVERY {
            write!(f, "{}#*", self.point)
        } else {
            write!(f, "{}#{}", self.point, self.n)
        }
    }
}

impl FromStr for Arm {
    type Err = Error;

    /// Parses a single `point#n` or bare `point` entry.
    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        parse_entry(entry).map_err(Error::from)
    }
}

/// The snake-case slug of a protocol method for cut-point names:
/// `turn/start` → `turn_start`, `serverRequest/resolved` → `server_request_resolved`.
pub fn slug(method: &str) -> String {
    let mut out = String::with_capacity(method.len() + 4);
    for c in method.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// Parses a `TURNCUT_CUT_ARM` value such as `a.b.c#2,d.e.f`.
///
/// Entries are separated by commas and may be padded with whitespace; a bare
/// name means its first occurrence, `#*` every occurrence, and a name ending
/// in `.*` every point under that prefix (`runner.write.*#*`). Empty entries, empty names and
/// occurrences that are not positive integers are rejected with an error
/// naming the offending entry, because a typo here would otherwise silently
/// turn a crash test into a run that never cuts.
pub fn parse_arm(spec: &str) -> Result<Vec<Arm>, Error> {
    spec.split(',')
        .enumerate()
        .map(|(index, entry)| {
            if entry.trim().is_empty() {
                Err(ConfigError::EmptyEntry {
                    spec: spec.to_owned(),
                    position: index + 1,
                })
            } else {
                parse_entry(entry)
            }
        })
        .collect::<Result<_, _>>()
        .map_err(Error::from)
}

fn parse_entry(raw: &str) -> Result<Arm, ConfigError> {
    let entry = raw.trim();
    let (point, occurrence) = match entry.split_once('#') {
        Some((point, occurrence)) => (point, Some(occurrence)),
        None => (entry, None),
    };
    if point.is_empty() {
        return Err(ConfigError::EmptyPoint {
            entry: entry.to_owned(),
        });
    }
    if point.chars().any(char::is_whitespace) {
        return Err(ConfigError::BadPoint {
            entry: entry.to_owned(),
        });
    }
    let n = match occurrence {
        None => 1,
        Some("*") => EVERY,
        // Only plain digits are accepted: `u64::from_str` would also take a
        // leading `+`, which no harness writes on purpose.
        Some(text) => text
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| text.parse::<u64>().ok())
            .flatten()
            .filter(|&n| n > 0)
            .ok_or_else(|| ConfigError::BadOccurrence {
                entry: entry.to_owned(),
                occurrence: text.to_owned(),
            })?,
    };
    Ok(Arm {
        point: point.to_owned(),
        n,
    })
}

/// A malformed cut-point environment.
///
/// It is `Clone` because the process-wide configuration is parsed once and
/// every later [`init`] call reports the same error again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("empty entry {position} in TURNCUT_CUT_ARM \"{spec}\"")]
    EmptyEntry { spec: String, position: usize },
    #[error("empty point name in TURNCUT_CUT_ARM entry \"{entry}\"")]
    EmptyPoint { entry: String },
    #[error("whitespace inside the point name of TURNCUT_CUT_ARM entry \"{entry}\"")]
    BadPoint { entry: String },
    #[error(
        "bad occurrence \"{occurrence}\" in TURNCUT_CUT_ARM entry \"{entry}\": expected a positive integer"
    )]
    BadOccurrence { entry: String, occurrence: String },
    #[error("missing TURNCUT_CUT_SOCKET while TURNCUT_CUT_ARM is set")]
    MissingSocket,
    #[error("{var} is not valid unicode")]
    NotUnicode { var: &'static str },
    #[error("cannot open TURNCUT_CUT_TRACE file {path}: {reason}")]
    Trace { path: PathBuf, reason: String },
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The `TURNCUT_*` environment (or a spec given to [`parse_arm`]) is malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Nothing arrived before the deadline; `ms` is the whole deadline.
    #[error("timed out after {ms} ms waiting for {what}")]
    Timeout { what: &'static str, ms: u64 },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A [`Waker`] ended the wait.
    #[error("the cut-point listener was woken to stop")]
    Woken,
    /// The peer sent something that is not a [`Hit`] line.
    #[error("bad cut-point message {line:?}: {reason}")]
    BadMessage { line: String, reason: String },
    /// A trace file line is not a [`Hit`].
    #[error("bad line {line_no} in trace {path}: {reason}")]
    BadTrace {
        path: PathBuf,
        line_no: usize,
        reason: String,
    },
}

impl Error {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms(spec: &str) -> Vec<Arm> {
        parse_arm(spec).unwrap_or_else(|e| panic!("{spec:?} should parse: {e}"))
    }

    fn arm_error(spec: &str) -> String {
        match parse_arm(spec) {
            Ok(arms) => panic!("{spec:?} should be rejected, parsed as {arms:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn bare_name_means_first_occurrence() {
        assert_eq!(
            arms("runner.turn.start"),
            vec![Arm {
                point: "runner.turn.start".into(),
                n: 1
            }]
        );
    }

    #[test]
    fn wildcards_arm_every_occurrence_and_every_point_under_a_prefix() {
        let all = arms("runner.write.*#*");
        assert_eq!(all[0].to_string(), "runner.write.*#*");
        assert!(all[0].matches("runner.write.turn_intent", 1));
        assert!(all[0].matches("runner.write.run_settled", 7));
        assert!(!all[0].matches("runner.turn_intent.persisted", 1));
        assert!(!all[0].matches("runner.writex", 1));
        let every = arms("a.b#*");
        assert!(every[0].matches("a.b", 1) && every[0].matches("a.b", 40));
        assert!(!every[0].matches("a.bc", 1));
        // A `*` that is not a whole last segment is a plain name.
        let plain = arms("a.b*#2");
        assert!(plain[0].matches("a.b*", 2) && !plain[0].matches("a.bc", 2));
    }

    #[test]
    fn parse_display_round_trip() {
        for spec in [
            "a.b.c#1",
            "a.b.c#2,d.e.f#1",
            "runner.turn_intent.persisted#18446744073709551615",
            "x#3,x#3,y#10",
        ] {
            let parsed = arms(spec);
            let shown = parsed
                .iter()
                .map(Arm::to_string)
                .collect::<Vec<_>>()
                .join(",");
            assert_eq!(shown, spec);
            assert_eq!(arms(&shown), parsed);
            for arm in &parsed {
                assert_eq!(&arm.to_string().parse::<Arm>().unwrap(), arm);
            }
        }
    }

    #[test]
    fn whitespace_around_entries_is_ignored() {
        assert_eq!(arms(" a#2 , b "), arms("a#2,b#1"));
    }

    #[test]
    fn malformed_entries_are_named() {
        assert_eq!(
            arm_error("a#x"),
            r#"bad occurrence "x" in TURNCUT_CUT_ARM entry "a#x": expected a positive integer"#
        );
        assert_eq!(
            arm_error("a#0"),
            r#"bad occurrence "0" in TURNCUT_CUT_ARM entry "a#0": expected a positive integer"#
        );
        assert!(arm_error("b#1,a#+2").contains(r#"entry "a#+2""#));
        assert!(arm_error("a#").contains(r#"entry "a#""#));
        assert!(arm_error("a#1#2").contains(r#"entry "a#1#2""#));
        assert!(arm_error("a#99999999999999999999").contains("expected a positive integer"));
        assert_eq!(
            arm_error("#3"),
            r##"empty point name in TURNCUT_CUT_ARM entry "#3""##
        );
        assert_eq!(
            arm_error("a,,b"),
            r#"empty entry 2 in TURNCUT_CUT_ARM "a,,b""#
        );
        assert!(arm_error("a,").contains("empty entry 2"));
        assert!(arm_error("").contains("empty entry 1"));
        assert!(arm_error("a b#1").contains("whitespace"));
    }

    #[test]
    fn hit_wire_format_is_stable() {
        let hit = Hit {
            role: "runner".into(),
            pid: 42,
            point: "a.b.c".into(),
            n: 3,
        };
        let line = serde_json::to_string(&hit).unwrap();
        assert_eq!(line, r#"{"role":"runner","pid":42,"point":"a.b.c","n":3}"#);
        assert_eq!(serde_json::from_str::<Hit>(&line).unwrap(), hit);
    }

    #[test]
    fn fault_replies_round_trip_and_carry_the_errno() {
        for (fault, reply, errno) in [
            (IoFault::Eio, "fail EIO", Some(5)),
            (IoFault::Enospc, "fail ENOSPC", Some(28)),
            (IoFault::Corrupt, "corrupt", None),
        ] {
            assert_eq!(fault.reply(), reply);
            assert_eq!(IoFault::from_reply(reply), Some(fault));
            assert_eq!(fault.as_str().parse::<IoFault>(), Ok(fault));
            let error = fault.to_io_error();
            assert_eq!(error.raw_os_error(), errno);
            assert_eq!(IoFault::of_error(&error), Some(fault), "{error}");
        }
        let corrupt = IoFault::Corrupt.to_io_error();
        assert_eq!(corrupt.kind(), io::ErrorKind::InvalidData);
        // Other invalid data, or another errno, is no injected fault.
        let other = io::Error::new(io::ErrorKind::InvalidData, "bad utf-8");
        assert_eq!(IoFault::of_error(&other), None);
        assert_eq!(IoFault::of_error(&io::Error::from_raw_os_error(1)), None);
        for other in [
            "continue",
            "fail",
            "fail ",
            "fail eio",
            "fail EIO ",
            "fail EPERM",
            "fail corrupt",
            "corrupt ",
            "CORRUPT",
        ] {
            assert_eq!(IoFault::from_reply(other), None, "{other:?}");
        }
        assert!(
            "EPERM"
                .parse::<IoFault>()
                .unwrap_err()
                .contains("EIO, ENOSPC or corrupt")
        );
    }

    #[test]
    fn an_answer_reply_names_a_fault_in_lowercase_and_dashes() {
        assert_eq!(answer_of_reply("answer rate-limit"), Some("rate-limit"));
        assert_eq!(answer_of_reply("answer error-answer"), Some("error-answer"));
        for bad in [
            "answer ",
            "answer Rate",
            "answer a b",
            "answer\trate",
            "fail EIO",
            "continue",
        ] {
            assert_eq!(answer_of_reply(bad), None, "{bad:?}");
        }
    }
}
