//! CPU pressure beside the cells (`--stress N`): N busy worker processes for
//! as long as the [`Stress`] lives, as stress-ng's cpu stressor keeps its
//! workers busy. It is how a user checks that a runner's timeouts hold on a
//! loaded host, and how turncut checks that its own verdicts do.
//!
//! Each worker is `turncut __stress`, a process that computes forever; it
//! runs in its own process group, dies with the harness
//! (`supervisor::GroupChild`) and is killed when the `Stress` is dropped.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::supervisor::GroupChild;

/// The hidden subcommand a worker runs.
pub const WORKER_ARG: &str = "__stress";

/// N busy workers, killed on drop.
pub struct Stress {
    workers: Vec<GroupChild>,
}

impl Stress {
    /// Starts `n` workers of the `turncut` at `exe` (none for 0).
    pub fn start(exe: &Path, n: usize) -> std::io::Result<Stress> {
        let mut workers = Vec::with_capacity(n);
        for _ in 0..n {
            let mut cmd = Command::new(exe);
            cmd.arg(WORKER_ARG)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            workers.push(GroupChild::spawn(&mut cmd)?);
        }
        Ok(Stress { workers })
    }

    /// How many workers run.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

/// A worker's body: integer and floating-point work in a loop that the
/// optimizer cannot remove; it never returns.
pub fn work() -> ! {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut f: f64 = 1.000_001;
    loop {
        for _ in 0..1_000_000 {
            x = crate::plan::mix(x);
            f = (f * 1.000_000_1).sqrt() + 1.0;
        }
        std::hint::black_box((x, f));
    }
}
