//! turncut, the restart-chaos harness for AI-agent runners.
//!
//! This crate is the harness behind the `turncut` binary. Today it holds the
//! process `supervisor`, a Codex app-server client (`codex_client`) and the
//! `demo` that drives the fake Codex provider through a turn and a crash sweep;
//! the scenario → cell → oracle pipeline grows here next. The harness never
//! links runner internals: it sees a runner only through HTTP and signals.

pub mod codex_client;
pub mod demo;
pub mod model;
pub mod runner_client;
pub mod supervisor;
