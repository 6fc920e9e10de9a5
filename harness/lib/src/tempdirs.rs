//! The temporary directories of turncut processes (cells, traced discovery
//! runs), named for their owner so that a later run can sweep what a killed
//! harness left behind.
//!
//! A name is `turncut-<kind>-<pid>.<start time>-<random>`: the owner's pid and
//! its start time (clock ticks after boot, from `/proc/<pid>/stat`), so a
//! recycled pid never makes a dead owner look alive. A directory kept with
//! `--keep` holds a [`KEPT`] file and is never swept. This module does not
//! remove directories of live owners, nor anything it did not name.
//!
//! They go under [`root`]: a memory filesystem (`/dev/shm`) when there is
//! one with room, because a cell's runner commits every write with `fsync`
//! and on a disk that costs the wave about a sixth of its time while no
//! fault depends on it (a kill keeps the page cache; a power cut goes
//! through the cell's own lazy mount, `cell::power`).

use std::path::{Path, PathBuf};

/// The file that marks a directory kept on purpose (`--keep`).
pub const KEPT: &str = ".turncut-kept";

const PREFIX: &str = "turncut-";

/// The variable that names where turncut's temporary directories go,
/// over every default.
pub const ROOT_ENV: &str = "TURNCUT_TMPDIR";

/// The memory filesystem tried when neither [`ROOT_ENV`] nor `TMPDIR` says.
const SHM: &str = "/dev/shm";

/// The free space `/dev/shm` needs to be used (a container's default of
/// 64 MiB is too small for a wave beside a real product's data).
const SHM_MIN_FREE: u64 = 1 << 30;

/// Where turncut's temporary directories go: [`ROOT_ENV`] when set, else
/// `TMPDIR` when set (the user chose), else `/dev/shm` when it is a
/// writable memory filesystem with [`SHM_MIN_FREE`] free, else the
/// system's temporary directory.
pub fn root() -> PathBuf {
    if let Some(dir) = std::env::var_os(ROOT_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if std::env::var_os("TMPDIR").is_none() && shm_usable(Path::new(SHM)) {
        return PathBuf::from(SHM);
    }
    std::env::temp_dir()
}

/// Whether `dir` is a memory filesystem this process can write, with room.
fn shm_usable(dir: &Path) -> bool {
    use nix::sys::{statfs, statvfs};
    let tmpfs = statfs::statfs(dir).is_ok_and(|s| s.filesystem_type() == statfs::TMPFS_MAGIC);
    let room = statvfs::statvfs(dir)
        .is_ok_and(|s| s.blocks_available().saturating_mul(s.fragment_size()) >= SHM_MIN_FREE);
    let writable = nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok();
    tmpfs && room && writable
}

/// A new temporary directory of `kind` owned by this process, under
/// [`root`].
pub fn tempdir(kind: &str) -> std::io::Result<tempfile::TempDir> {
    tempdir_in(kind, &root())
}

/// [`tempdir`] in `root`.
pub fn tempdir_in(kind: &str, root: &Path) -> std::io::Result<tempfile::TempDir> {
    let pid = std::process::id();
    let start = crate::nemesis::start_time(pid).unwrap_or(0);
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{kind}-{pid}.{start}-"))
        .tempdir_in(root)
}

/// Marks `dir` as kept on purpose, so no later sweep removes it.
pub fn mark_kept(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join(KEPT), b"kept with --keep\n")
}

/// The owner (pid, start time) a directory name encodes, if it is ours.
fn owner(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (_kind, rest) = rest.split_once('-')?;
    let (owner, _random) = rest.split_once('-')?;
    let (pid, start) = owner.split_once('.')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Removes the temporary directories in `root` whose owner is no longer
/// alive and which were not kept; returns how many were removed.
pub fn sweep_stale_in(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(owner) else {
            continue;
        };
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || path.join(KEPT).exists() || crate::nemesis::alive_same(pid, Some(start)) {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// [`sweep_stale_in`] over [`root`] and the system's temporary directory
/// (where an older turncut, or one run with another `TMPDIR`, left them).
pub fn sweep_stale() -> usize {
    let (root, system) = (root(), std::env::temp_dir());
    let mut removed = sweep_stale_in(&root);
    if system != root {
        removed += sweep_stale_in(&system);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a memory filesystem is taken for `/dev/shm`'s place: the crate's
    /// own directory (a disk, or at least not a tmpfs here) never is, and
    /// a missing directory never is.
    #[test]
    fn only_a_writable_memory_filesystem_with_room_is_taken() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let here_is_tmpfs = nix::sys::statfs::statfs(here)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        if !here_is_tmpfs {
            assert!(
                !shm_usable(here),
                "{} is no memory filesystem",
                here.display()
            );
        }
        assert!(!shm_usable(Path::new("/nonexistent/turncut")));
    }

    #[test]
    fn names_carry_the_owner_and_parse_back() {
        let root = tempfile::tempdir().unwrap();
        let dir = tempdir_in("cell", root.path()).unwrap();
        let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        let (pid, start) = owner(&name).expect("our own name parses");
        assert_eq!(pid, std::process::id());
        assert_eq!(Some(start), crate::nemesis::start_time(pid));
        assert_eq!(owner("turncut-cell-x"), None);
        assert_eq!(owner("other-cell-1.2-abc"), None);
    }

    #[test]
    fn a_sweep_removes_dead_owners_dirs_only() {
        let root = tempfile::tempdir().unwrap();
        let mine = tempdir_in("cell", root.path()).unwrap().keep();
        // A dead owner: a pid that exists with another start time is not it.
        let dead = root
            .path()
            .join(format!("turncut-cell-{}.1-abc", std::process::id()));
        std::fs::create_dir_all(dead.join("state")).unwrap();
        let kept = root.path().join("turncut-cell-1.1-kept");
        std::fs::create_dir(&kept).unwrap();
        mark_kept(&kept).unwrap();
        let foreign = root.path().join("turncut-notes");
        std::fs::create_dir(&foreign).unwrap();
        assert_eq!(sweep_stale_in(root.path()), 1);
        assert!(!dead.exists(), "the dead owner's directory is swept");
        assert!(mine.exists(), "a live owner's directory stays");
        assert!(kept.exists(), "a kept directory stays");
        assert!(foreign.exists(), "a name that is not ours stays");
    }
}
