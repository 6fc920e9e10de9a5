//! What crosses turncut's program boundaries, defined once.
//!
//! The runner (`runnerd`), the fake providers and the harness are separate
//! programs that agree on a few conventions: the fakes' evidence files (the
//! `journal` and the effect `ledger`), the scripted model (`script`), what a
//! provider durably recorded of a turn (`recorded`), the text that marks a
//! continuation (`marker`), how a controller's message id travels inside a
//! provider's client id (`client_id`), and how a process is told from a later
//! one with its pid (`procstat`), the built-in provider profiles
//! (`profiles`), the fakes' durable stores, as the harness reads them
//! (`stores`), and the failures a provider meets in production (`upstream`). Each lives here and nowhere else.
//!
//! This crate depends on no other crate of the workspace: the runner, the
//! fakes and the harness depend on it, never the other way round (the tidy
//! test in `harness/tests/tidy.rs` keeps it so).

pub mod client_id;
pub mod journal;
pub mod ledger;
pub mod marker;
pub mod procstat;
pub mod profiles;
pub mod recorded;
pub mod script;
pub mod secret;
pub mod stores;
pub mod upstream;
