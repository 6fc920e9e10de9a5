//! `runnerd`, the durable reference runner: the system under test.
//!
//! It takes tasks from a controller over an HTTP API (`api`), drives a
//! coding-agent provider through a protocol driver (`driver`), keeps every
//! intent and outcome in SQLite (`store`) before acting on it, and applies the
//! recovery contract after a restart or a lost provider (`engine`). Providers
//! run as supervised processes whose stop can be proven (`supervisor`). Causes
//! form a closed set (`causes`). It must survive a SIGKILL at any instant
//! without replaying a turn or an effect. It knows nothing about the harness
//! beyond the `cutpoint` calls at its boundaries.

pub mod api;
pub mod causes;
pub mod cli;
pub mod cut;
pub mod driver;
pub mod engine;
pub mod ids;
pub mod native;
pub mod own_process;
pub mod profiles;
pub mod seeded;
pub mod server;
pub mod state_lock;
pub mod store;
pub mod supervisor;
pub mod workspace;

/// The cut-point role this crate reports to the harness.
pub const CUT_ROLE: &str = "runner";
