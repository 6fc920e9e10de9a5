//! What a protocol violation looks like: which way the message went, which message it was,
//! and what the spec says is wrong with it.
//!
//! A violation is data about the system under test (a fake provider or a runner driver that
//! sent something the real peer would not accept), so it is a value a test asserts on, never
//! a panic. This module deliberately knows nothing about any particular protocol.

use std::fmt;

/// Which way a message travelled on one connection.
///
/// The client is the side that opened the connection and sent `initialize` (a runner
/// driver); the server is the agent process (the real `codex app-server` or a fake of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

impl Direction {
    /// The direction a reply to a message travelling this way takes.
    pub fn opposite(self) -> Self {
        match self {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::ClientToServer => "client→server",
            Direction::ServerToClient => "server→client",
        })
    }
}

/// One message that the published spec rejects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The way the offending message travelled.
    pub direction: Direction,
    /// Which message it was, for example ``request `turn/start` id 3``.
    pub message_summary: String,
    /// What is wrong, at most [`Violation::ERRORS_MAX`] entries, each naming the place in the
    /// message, what the spec wanted and the schema keyword that said so.
    pub errors: Vec<String>,
}

impl Violation {
    /// How many errors a violation keeps. A badly wrong message produces dozens of schema
    /// errors, and past the first few they repeat the same mistake.
    pub const ERRORS_MAX: usize = 10;

    /// Builds a violation, keeping at most [`Violation::ERRORS_MAX`] errors.
    pub fn new(
        direction: Direction,
        message_summary: impl Into<String>,
        mut errors: Vec<String>,
    ) -> Self {
        errors.truncate(Self::ERRORS_MAX);
        Violation {
            direction,
            message_summary: message_summary.into(),
            errors,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "protocol violation in {} {}",
            self.direction, self.message_summary
        )?;
        for error in &self.errors {
            write!(f, "\n  - {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}
