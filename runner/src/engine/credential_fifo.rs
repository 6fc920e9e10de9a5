//! A one-shot FIFO that hands the credential to a provider that reads it
//! from a file (a profile with `credential_fifo = true`, e.g. the real
//! `opencode serve`, whose configuration reads its key with
//! `{file:{env:VAR}}`). The profile's `credential_env` then names the
//! FIFO's path instead of holding the key: the key is neither in the
//! provider's environment, which its tool shells inherit whole, nor on any
//! disk (a FIFO's data lives in the kernel). The FIFO, in a 0700 directory
//! of its own under the state directory (`credentials/<marker>`), is served
//! once and removed right after; what a killed runner left there is removed
//! by the next one ([`sweep`], under the state directory's lock).
//!
//! The built-in profiles (the fakes) take their key this way too, so that
//! no sibling of a provider (an ACP terminal, a native `Bash`, both children
//! of runnerd with its uid) finds it in the provider's `/proc/PID/environ`.
//!
//! The serving thread waits for a reader at most [`READER_WAIT_MS`]: a
//! provider that dies first, or never reads its key, leaves nothing behind
//! once that time has passed; nothing of the key is written anywhere.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::Secret;

/// How long the FIFO waits for its provider to open it.
pub const READER_WAIT_MS: u64 = 60_000;

/// The directory of the state directory `state` that holds the FIFOs.
fn base(state: &Path) -> PathBuf {
    state.join("credentials")
}

/// Removes every FIFO an earlier runner left in `state` (its provider died
/// or it was killed before the key was read); only one runner holds a state
/// directory, so none of them is being served.
pub fn sweep(state: &Path) {
    let _ = std::fs::remove_dir_all(base(state));
}

/// Creates a private directory under the state directory `state` holding a
/// FIFO, and serves `secret` through it once on a thread of its own; the
/// FIFO's path.
pub fn serve(state: &Path, secret: &Secret, marker: &str) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(base(state))?;
    let dir = base(state).join(marker);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let path = dir.join("credential");
    nix::unistd::mkfifo(
        &path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)?;
    let key = secret.0.clone();
    let (fifo, served) = (path.clone(), dir.clone());
    std::thread::Builder::new()
        .name("credential-fifo".to_owned())
        .spawn(move || {
            if let Some(mut w) = open_when_read(&fifo) {
                let _ = w.write_all(key.as_bytes());
            }
            remove(&fifo, &served);
        })?;
    Ok(path)
}

/// The FIFO opened for writing once a reader has it open (a non-blocking
/// open fails with `ENXIO` until then), or `None` after [`READER_WAIT_MS`].
fn open_when_read(fifo: &Path) -> Option<std::fs::File> {
    let deadline = Instant::now() + Duration::from_millis(READER_WAIT_MS);
    let mut delay = Duration::from_millis(1);
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo);
        match opened {
            // A key is far below a pipe's capacity: one non-blocking write.
            Ok(w) => return Some(w),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            Err(_) => return None,
        }
    }
}

fn remove(fifo: &Path, dir: &Path) {
    let _ = std::fs::remove_file(fifo);
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifo_gives_the_key_once_then_is_gone() {
        let state = tempfile::tempdir().unwrap();
        let path = serve(
            state.path(),
            &Secret::new("k-123".to_owned()),
            "spawn-test-fifo",
        )
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::FileTypeExt as _;
        assert!(meta.file_type().is_fifo());
        let read = std::fs::read_to_string(&path).unwrap();
        assert_eq!(read, "k-123");
        // The serving thread removes it after the one read; wait for that
        // with a deadline (nothing announces it).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while path.parent().unwrap().exists() {
            assert!(std::time::Instant::now() < until, "the FIFO stayed");
            std::thread::yield_now();
        }
    }
}
