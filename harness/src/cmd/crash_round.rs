//! `turncut crash-round`: many tasks on one runner state, the runner
//! SIGKILLed at seeded moments (`harness::crash_round`).

use std::path::Path;
use std::time::Duration;

use super::{Code, Exit, bad, clock_seed, harness_err};
use crate::{Common, CrashRoundArgs};

/// `turncut crash-round`: exit 1 unless the round ended clean.
pub fn run(exe: &Path, common: &Common, args: &CrashRoundArgs) -> Result<Code, Exit> {
    let CrashRoundArgs {
        tasks,
        kills,
        seed,
        round_wait_ms,
    } = *args;
    if tasks == 0 {
        return Err(bad("--tasks must be at least 1"));
    }
    let seed = seed.unwrap_or_else(clock_seed);
    eprintln!("crash round: {tasks} tasks, {kills} runner kills, seed {seed}");
    let opts = harness::crash_round::Options {
        tasks,
        kills,
        seed,
        wait: Duration::from_millis(common.cell_wait_ms.unwrap_or(0).max(60_000)),
        round_wait: Duration::from_millis(round_wait_ms),
        keep: common.keep,
        progress: common.progress.clone(),
    };
    let figures = harness::crash_round::run(exe, &opts)
        .map_err(|e| harness_err(format!("crash round failed: {e:#}")))?;
    print!("{}", harness::crash_round::render(&figures));
    Ok(Code::pass_if(figures.clean()))
}
