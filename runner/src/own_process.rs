//! What runnerd does to its own process before anything else runs: it
//! forbids inspection by processes of its own uid, and takes the credential
//! out of its environment, `/proc/PID/environ` included.
//!
//! runnerd holds the provider credential and the API token in memory, and
//! the tools it runs (ACP terminals, native Bash) run with its uid. A process
//! of the same uid may read another's `/proc/PID/mem` and `environ` and
//! `PTRACE_ATTACH` it, unless that process is not dumpable
//! (`PR_SET_DUMPABLE 0`): then only a process with `CAP_SYS_PTRACE` may. The
//! flag is reset by every `execve`, so the children runnerd starts are
//! dumpable as usual (which is why no child holds a credential in its
//! environment: `docs/security.md`).
//!
//! It does not defend against root or a process with `CAP_SYS_PTRACE`.

/// Makes this process not dumpable: no core file, and `/proc/PID/mem`,
/// `/proc/PID/environ` and `ptrace` closed to every process without
/// `CAP_SYS_PTRACE`, same uid included.
pub fn forbid_inspection() -> std::io::Result<()> {
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)
}

/// Takes the variable `name` out of this process's environment and returns
/// its value: the value is overwritten with NUL bytes in the image's initial
/// environment block (what `/proc/PID/environ` reads for the life of the
/// image, which removing the variable alone would leave as it was), and the
/// variable is removed from the environment children inherit. `None` when
/// it is not set.
///
/// # Safety
/// No other thread may exist: the environment is changed.
pub unsafe fn take_env_scrubbed(name: &str) -> std::io::Result<Option<String>> {
    let Some(value) = std::env::var_os(name) else {
        return Ok(None);
    };
    let (start, end) = environ_block()?;
    let prefix = format!("{name}=");
    // SAFETY: [start, end) is the kernel's `env_start..env_end` of this
    // image: the environment strings at the top of the main thread's stack,
    // mapped and writable for the life of the process, and no other thread
    // exists to read them meanwhile.
    let block = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    for entry in block.split_mut(|b| *b == 0) {
        if entry.starts_with(prefix.as_bytes()) {
            entry[prefix.len()..].fill(0);
        }
    }
    // SAFETY: the caller guarantees no other thread exists.
    unsafe { std::env::remove_var(name) };
    Ok(Some(value.to_string_lossy().into_owned()))
}

/// The initial environment block of this image, `env_start` and `env_end`
/// (fields 50 and 51 of `/proc/self/stat`).
fn environ_block() -> std::io::Result<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let bad = || std::io::Error::other("/proc/self/stat has no environment block");
    let after = stat
        .get(stat.rfind(')').ok_or_else(bad)? + 1..)
        .ok_or_else(bad)?;
    // Fields after the command's closing parenthesis start at field 3.
    let mut fields = after.split_whitespace().skip(50 - 3);
    let mut next =
        || -> std::io::Result<usize> { fields.next().and_then(|f| f.parse().ok()).ok_or_else(bad) };
    let (start, end) = (next()?, next()?);
    if start == 0 || end <= start {
        return Err(bad());
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests {
    /// The block `/proc/self/environ` reads is the one the scrub writes:
    /// a child started with a variable reads it back as NUL bytes there.
    #[test]
    fn a_scrubbed_variable_is_nul_bytes_in_proc_environ_and_gone_from_the_environment() {
        let me = std::env::current_exe().expect("the test binary knows its own path");
        if std::env::var_os("OWN_PROCESS_SCRUB_CHILD").is_some() {
            // SAFETY: the child runs this one test (an exact filter, one
            // test thread); the harness's main thread only waits for it.
            let v = unsafe { super::take_env_scrubbed("OWN_PROCESS_SCRUB_KEY") }.unwrap();
            assert_eq!(v.as_deref(), Some("scrub-canary-42"));
            let environ = std::fs::read("/proc/self/environ").unwrap();
            let text = String::from_utf8_lossy(&environ);
            assert!(!text.contains("scrub-canary-42"), "{text}");
            assert!(text.contains("OWN_PROCESS_SCRUB_KEY=\0"));
            assert!(std::env::var_os("OWN_PROCESS_SCRUB_KEY").is_none());
            return;
        }
        let out = std::process::Command::new(me)
            .args([
                "--exact",
                "own_process::tests::a_scrubbed_variable_is_nul_bytes_in_proc_environ_and_gone_from_the_environment",
                "--test-threads=1",
                "--nocapture",
            ])
            .env("OWN_PROCESS_SCRUB_CHILD", "1")
            .env("OWN_PROCESS_SCRUB_KEY", "scrub-canary-42")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
    }
}
