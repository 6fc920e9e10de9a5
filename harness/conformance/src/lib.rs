//! Conformance checks for the wire protocols turncut's fakes and drivers speak.
//!
//! The fake providers must be indistinguishable from the real agents, and the runner's
//! drivers must send only what the real agents accept. This crate holds both sides to the
//! published, machine-readable specs vendored under `specs/`: every message, in either
//! direction, is validated against the real schema, and the tables of which methods exist
//! are read from that schema rather than written by hand. It covers the Codex app-server
//! ([`CodexSchema`], [`CodexSession`]), ACP ([`AcpSchema`], [`AcpSession`]) and the OpenCode
//! server API ([`OpenCodeSpec`]: bodies by route and status, `/event` events), sibling
//! modules over the same [`Direction`] and [`Violation`]. It deliberately checks the wire format
//! only: it does not run processes, read pipes or judge conversation order, which belong to
//! the harness and its oracles.
//!
//! ```no_run
//! use conformance::{CodexSession, Direction};
//! use serde_json::json;
//!
//! let mut session = CodexSession::new();
//! let request = json!({"id": 1, "method": "thread/start", "params": {}});
//! if let Err(violation) = session.check(Direction::ClientToServer, &request) {
//!     panic!("{violation}");
//! }
//! ```

pub mod acp;
pub mod codex;
mod document;
mod error;
pub mod opencode;
pub mod specs;
mod violation;

pub use acp::{ACP_SCHEMA_FILE, AcpMethod, AcpSchema, AcpSession, acp};
pub use codex::{
    CODEX_SCHEMA_FILE, CallKind, CodexSchema, CodexSession, MethodSpec, PendingRequest, codex,
};
pub use error::Error;
pub use opencode::{OPENCODE_SPEC_FILE, OpenCodeSpec, opencode};
pub use specs::{Drift, PROTOCOLS_DIR_ENV, shared_protocols_dir, spec_drift, specs_dir};
pub use violation::{Direction, Violation};

/// Renders an error and its sources on one line, outermost first, joined the way the
/// lowercase-fragment messages are meant to read ("read spec file x: no such file").
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
