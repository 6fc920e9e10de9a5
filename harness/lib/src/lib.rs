//! turncut, the restart-chaos harness for AI-agent runners.
//!
//! This crate is the harness behind the `turncut` binary: `scenario` (parse and
//! validate) → `plan` (discover boundaries, expand cells) → `cell` (run one cut
//! with one fault, applied by `nemesis`) → `evidence` → `oracles` → `report`,
//! with `wave` running many cells, `explore` running random schedules shrunk
//! by proptest, and `mutants` running waves against seeded
//! bugs. The harness never links runner internals: it sees a runner only
//! through HTTP (`runner_client`) and signals (`supervisor`, `nemesis`).

pub mod cell;
pub mod codex_client;
pub mod contract;
pub mod crash_round;
pub mod demo;
pub mod discover;
pub mod doctor;
pub mod evidence;
pub mod explore;
pub mod fidelity;
pub mod freezer;
pub mod judge;
pub mod model;
pub mod mutants;
pub mod nemesis;
pub mod oracles;
pub mod par;
pub mod plan;
pub mod planner;
pub mod progress;
pub mod real;
pub mod recuts;
pub mod report;
pub mod run_log;
pub mod runner_client;
pub mod runner_spec;
pub mod scenario;
pub mod stages;
pub mod stress;
pub mod supervisor;
pub mod tempdirs;
pub mod timing;
pub mod wave;
pub mod workflow;
