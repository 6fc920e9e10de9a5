//! What runnerd does to its own process before anything else runs: it
//! forbids inspection by processes of its own uid, and keeps its name after
//! it re-executed itself to drop the credential from its environment.
//!
//! runnerd holds the provider credential and the API token in memory, and
//! the tools it runs (ACP terminals, native Bash) run with its uid. A process
//! of the same uid may read another's `/proc/PID/mem` and `environ` and
//! `PTRACE_ATTACH` it, unless that process is not dumpable
//! (`PR_SET_DUMPABLE 0`): then only a process with `CAP_SYS_PTRACE` may. The
//! flag is reset by every `execve`, so it is set again in the re-executed
//! image, and the children runnerd starts are dumpable as usual (which is
//! why no child holds a credential in its environment: `docs/security.md`).
//!
//! It does not defend against root or a process with `CAP_SYS_PTRACE`.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt as _;

/// The longest process name the kernel keeps (`TASK_COMM_LEN` - 1).
const COMM_BYTES_MAX: usize = 15;

/// Makes this process not dumpable: no core file, and `/proc/PID/mem`,
/// `/proc/PID/environ` and `ptrace` closed to every process without
/// `CAP_SYS_PTRACE`, same uid included.
pub fn forbid_inspection() -> std::io::Result<()> {
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)
}

/// After a re-execution through `/proc/self/exe` the kernel names the
/// process `exe` (the last component of the path it ran); this gives it back
/// the name its first image had, the last component of `argv[0]` (`runnerd`,
/// or `turncut` for `turncut runnerd`), so `pgrep runnerd` finds it.
pub fn keep_name(argv0: &OsStr) {
    let Ok(comm) = std::fs::read("/proc/self/comm") else {
        return;
    };
    if comm.strip_suffix(b"\n").unwrap_or(&comm) != b"exe" {
        return;
    }
    let base = std::path::Path::new(argv0)
        .file_name()
        .unwrap_or(argv0)
        .as_bytes();
    let name = &base[..base.len().min(COMM_BYTES_MAX)];
    if let Ok(name) = CString::new(name) {
        // Best effort: a wrong name never stops the runner.
        let _ = nix::sys::prctl::set_name(&name);
    }
}
