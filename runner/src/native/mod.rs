//! The native OpenAI-Responses profile, where the runner itself is the agent
//! loop: it calls the model, executes the tools the model asks for
//! (`tools`), and keeps a resumable checkpoint of the turn (`checkpoint`).
//!
//! This module holds the parts that need no network and no store: what a tool
//! does and what a checkpoint contains. The write-ahead discipline around them
//! (a call is `executing` before its effect, its outcome is durable before the
//! next model request; DESIGN §3.4 rules 4 and 5) belongs to the engine.

pub mod checkpoint;
pub mod tools;
