//! Protocol-faithful fakes of coding-agent providers, for restart-chaos tests.
//!
//! Each fake is a real process speaking a real wire protocol, driven by a
//! scripted model (`script`), with a durable conversation store, an evidence
//! `journal`, an effect `ledger` written by the tool command itself, and named
//! fault points (`faults`) on top of the `cutpoint` crate. This crate knows
//! nothing about scenarios, cells or oracles: it produces evidence, the harness
//! judges it.

pub use wire::{journal, ledger, script};

pub mod acp;
pub mod cli;
pub mod codex;
pub mod effect;
pub mod faults;
mod http;
pub mod model_api;
pub mod opencode;
pub mod process;
pub mod recorded;
mod rpc;
pub mod serving;
pub mod shell;
mod stdio;
pub mod tap;
pub mod tap_http;
pub mod turns;
