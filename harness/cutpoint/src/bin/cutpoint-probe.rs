//! `cutpoint-probe` is a stand-in for the runner in `cutpoint`'s own tests.
//!
//! It calls [`cutpoint::init`] (exiting with code 2 if the environment is
//! malformed), then hits each point named on the command line in order and
//! prints `passed <point>` after each one and `done` at the end, so a test can
//! tell from stdout exactly how far the process got. A point written `io:<point>`
//! is passed with [`cutpoint::hit_io`], as before a write that can fail, and a
//! failure prints `failed <point> errno <n>` (`failed <point> corrupt` for a
//! corrupt read) instead; one written `answer:<point>` is passed with
//! [`cutpoint::hit_answer`], as where a request is answered, and an injected
//! answer prints `answered <point> <name>`. A leading `--lazy` skips
//! `init` so that tests can exercise the lazy first-hit path. It deliberately
//! does nothing else: no work between hits, no signal handling.

use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut points: Vec<String> = std::env::args().skip(1).collect();
    let lazy = points.first().is_some_and(|first| first == "--lazy");
    if lazy {
        points.remove(0);
    } else if let Err(e) = cutpoint::init() {
        eprintln!("cutpoint-probe: {e}");
        return ExitCode::from(2);
    }
    let mut out = io::stdout().lock();
    for arg in &points {
        let line = match (arg.strip_prefix("io:"), arg.strip_prefix("answer:")) {
            (Some(point), _) => match cutpoint::hit_io(point) {
                Ok(()) => format!("passed {point}"),
                Err(e) => match cutpoint::IoFault::of_error(&e) {
                    Some(cutpoint::IoFault::Corrupt) => format!("failed {point} corrupt"),
                    _ => format!("failed {point} errno {}", e.raw_os_error().unwrap_or(0)),
                },
            },
            (None, Some(point)) => match cutpoint::hit_answer(point) {
                None => format!("passed {point}"),
                Some(name) => format!("answered {point} {name}"),
            },
            (None, None) => {
                cutpoint::hit(arg);
                format!("passed {arg}")
            }
        };
        // Each line is flushed on its own so that a test reading the pipe
        // sees progress up to the moment the process blocks or dies.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return ExitCode::FAILURE;
        }
    }
    if writeln!(out, "done").and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
