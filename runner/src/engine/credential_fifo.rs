//! A one-shot FIFO that hands the credential to a provider that reads it
//! from a file (a profile with `credential_fifo = true`, e.g. the real
//! `opencode serve`, whose configuration reads its key with
//! `{file:{env:VAR}}`). The profile's `credential_env` then names the
//! FIFO's path instead of holding the key: the key is neither in the
//! provider's environment, which its tool shells inherit whole, nor on any
//! disk (a FIFO's data lives in the kernel). The FIFO is served once and
//! removed right after.
//!
//! A provider that dies before it reads the FIFO leaves the serving thread
//! blocked and an empty FIFO in its private directory until the runner
//! exits; nothing of the key is written anywhere.

use std::io::Write as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use super::Secret;

/// Creates a private directory under the system's temporary directory
/// holding a FIFO, and serves `secret` through it once on a thread of its
/// own; the FIFO's path.
pub fn serve(secret: &Secret, marker: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("runnerd-{marker}"));
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
            // Blocks until the provider opens the FIFO for reading.
            if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&fifo) {
                let _ = w.write_all(key.as_bytes());
            }
            remove(&fifo, &served);
        })?;
    Ok(path)
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
        let path = serve(&Secret::new("k-123".to_owned()), "spawn-test-fifo").unwrap();
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
