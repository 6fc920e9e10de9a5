//! Dying with the harness, asked for by the child itself.
//!
//! The harness starts every process in its own group with a death signal
//! (`PR_SET_PDEATHSIG`), so that even a SIGKILLed harness leaves no process
//! behind. Set between fork and exec, that signal costs a fork of the
//! harness, whose wave process holds hundreds of megabytes. A program that
//! links this crate (turncut's multi-call binary, the standalone `runnerd`)
//! sets it itself instead, first thing in `main` ([`die_with_parent`]), and
//! the harness can spawn it with `posix_spawn`, which copies nothing.

/// Tells a child the pid of the harness that started it; [`die_with_parent`]
/// reads it.
pub const DIE_WITH_ENV: &str = "TURNCUT_DIE_WITH_PARENT";

/// The first thing a program that links this crate does in `main`: when a
/// harness started it with [`DIE_WITH_ENV`], takes the variable out of the
/// environment (its own children do not inherit it), asks for `SIGKILL`
/// when the thread that started it ends, and exits at once if that parent
/// has already gone (it was reparented before the request took effect).
/// Must run while the process has one thread.
pub fn die_with_parent() {
    let Some(parent) = std::env::var_os(DIE_WITH_ENV) else {
        return;
    };
    // SAFETY: called first in `main`, while this process has one thread.
    unsafe { std::env::remove_var(DIE_WITH_ENV) };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let parent: Option<i32> = parent.to_str().and_then(|p| p.parse().ok());
    if parent != Some(nix::unistd::getppid().as_raw()) {
        std::process::exit(137);
    }
}
