//! lazyfs: a FUSE file system that loses, on demand, every write not yet made
//! durable — a power cut for the processes above it.
//!
//! [`LazyFs::mount`] serves a backing directory at a mount point as a
//! passthrough: every operation goes to the backing directory at once, so the
//! processes above see an ordinary file system. Beside it, lazyfs keeps what a
//! disk would have kept: per file, its content at its last `fsync`/`fdatasync`;
//! per directory, its names at its last `fsync` (creates, renames, unlinks and
//! `mkdir`s are durable only then). [`LazyFs::cut_power`] rewrites the backing
//! directory to exactly that durable image and mounts it again: the state a
//! machine restarts on. `docs/lazyfs.md` is the model: what is and is not
//! modelled, and why (ext4 `data=ordered` without `auto_da_alloc` for file
//! data, the POSIX minimum for names).
//!
//! It does not model the backing directory's own durability (it is never
//! fsynced: the power cut is simulated, not real), metadata other than names
//! (modes and times are kept as they are), nor a crash in the middle of a
//! `write(2)` (a write is all or nothing). The harness uses it as a leaf: it
//! depends on no workspace crate.
//!
//! A mount is owned by its [`LazyFs`]: dropping it unmounts lazily, and a
//! helper unmounts it when the owning process dies (SIGKILL included), so a
//! dead owner leaves no mount behind. As root the mount is made with the
//! mount system call and the helper is lazyfs's own guard (a forked child);
//! otherwise `fusermount3` mounts and stays as the `auto_unmount` helper.

mod durable;
mod fs;
mod guard;
mod image;
mod mount;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use guard::{GUARD_ENV, GuardProgram, serve_guard_if_asked};
pub use image::{Change, ChangeKind};

/// What went wrong; each message reads after "failed to …".
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// FUSE cannot be used on this machine; the reason says what is missing.
    #[error("use FUSE: {0}")]
    Unavailable(String),
    /// A path given to [`LazyFs::mount`] is not a usable directory.
    #[error("mount {path}: {reason}")]
    BadPath { path: PathBuf, reason: String },
    /// The kernel or `fusermount3` refused the mount.
    #[error("mount lazyfs at {mountpoint}: {source}")]
    Mount {
        mountpoint: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Processes still use the mount: a power cut needs them gone first
    /// (the mount is left serving, unchanged).
    #[error(
        "cut power under {mountpoint}: processes {pids:?} still use it (kill them and wait for them first)"
    )]
    Busy { mountpoint: PathBuf, pids: Vec<u32> },
    /// Unmounting failed.
    #[error("unmount {mountpoint}: {source}")]
    Unmount {
        mountpoint: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The durable image could not be written into the backing directory.
    #[error("write the durable image into {backing}: {source}")]
    Image {
        backing: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why FUSE cannot be mounted here, or `None` when it can: `/dev/fuse` must
/// open for reading and writing, and either this process may mount FUSE
/// with the mount system call (root with CAP_SYS_ADMIN: found out once per
/// process with a probe mount) or `fusermount3` (Debian's `fuse3`) is on
/// `PATH`. The reason ends with the fix.
pub fn unavailable() -> Option<String> {
    mount::unavailable()
}

/// The counters of one path (relative to the mount's root, `.` for the root
/// itself), summed over every mount of a [`LazyFs`]: what the processes above
/// asked of it, for measuring what a program syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    /// `write` requests (the kernel may split or merge a program's writes).
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// `fsync` of the file, or of the directory for a directory.
    pub fsyncs: u64,
    /// `fdatasync` of the file (or of the directory).
    pub fdatasyncs: u64,
    /// Renames onto this path.
    pub renames_onto: u64,
}

/// Every path's counters, by path.
pub type Counters = BTreeMap<String, PathCounters>;

/// What one power cut did: what it lost (a "cut" is a schedule's place,
/// `point#n`; this is the power cut's result).
#[derive(Clone, Debug)]
pub struct PowerLoss {
    /// Every path whose state the cut changed, in path order: the writes and
    /// names that were not durable.
    pub changes: Vec<Change>,
    /// The time from the request to the FS serving again: unmount, the image
    /// written, mounted again.
    pub took: Duration,
}

/// A lazy mount, served by a thread of this process. Dropping it unmounts
/// lazily (the backing directory keeps every write, as after a clean
/// shutdown); [`LazyFs::cut_power`] is the unclean one.
pub struct LazyFs {
    backing: PathBuf,
    mountpoint: PathBuf,
    live: Option<mount::Live>,
    /// The program each mount's guard runs as (`None`: a fork).
    guard: Option<GuardProgram>,
    /// The counters of the mounts before the current one.
    past: Counters,
}

impl std::fmt::Debug for LazyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFs")
            .field("backing", &self.backing)
            .field("mountpoint", &self.mountpoint)
            .field("mounted", &self.live.is_some())
            .finish()
    }
}

impl LazyFs {
    /// Mounts `backing` (an existing directory) at `mountpoint` (an existing
    /// directory, outside `backing`). Everything already in `backing` is
    /// durable.
    ///
    /// Its guard is a fork of this process; [`LazyFs::mount_guarded_by`]
    /// is cheaper in a large process.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<LazyFs, Error> {
        LazyFs::mount_with(backing, mountpoint, None)
    }

    /// [`LazyFs::mount`], with `guard` exec'd as the guard that unmounts
    /// the mount if this process dies (`guard` module): no fork of this
    /// process, whose memory the forked guard would share copy-on-write.
    pub fn mount_guarded_by(
        backing: &Path,
        mountpoint: &Path,
        guard: &GuardProgram,
    ) -> Result<LazyFs, Error> {
        LazyFs::mount_with(backing, mountpoint, Some(guard.clone()))
    }

    fn mount_with(
        backing: &Path,
        mountpoint: &Path,
        guard: Option<GuardProgram>,
    ) -> Result<LazyFs, Error> {
        if let Some(reason) = unavailable() {
            return Err(Error::Unavailable(reason));
        }
        let backing = canonical_dir(backing)?;
        let mountpoint = canonical_dir(mountpoint)?;
        if mountpoint.starts_with(&backing) || backing.starts_with(&mountpoint) {
            return Err(Error::BadPath {
                path: mountpoint,
                reason: format!("overlaps the backing directory {}", backing.display()),
            });
        }
        let live = mount::Live::start(&backing, &mountpoint, guard.as_ref())?;
        Ok(LazyFs {
            backing,
            mountpoint,
            live: Some(live),
            guard,
            past: Counters::new(),
        })
    }

    /// Where the processes see the file system.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The directory that holds the files.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// Cuts the power: unmounts (every process using the mount must be gone:
    /// otherwise [`Error::Busy`] and nothing changes), rewrites the backing
    /// directory to the durable image (file contents as last synced, each
    /// directory's names as at its last sync), and mounts it again at the
    /// same place, every file now durable.
    pub fn cut_power(&mut self) -> Result<PowerLoss, Error> {
        let started = Instant::now();
        let live = self.live.take().expect("a LazyFs is mounted between calls");
        let state = match live.stop(&self.mountpoint) {
            Ok(state) => state,
            Err((live, e)) => {
                self.live = Some(*live);
                return Err(e);
            }
        };
        let mut state = into_inner(state);
        merge(&mut self.past, &state.counters());
        let changes = image::replace_with_durable(&mut state, &self.backing).map_err(|source| {
            Error::Image {
                backing: self.backing.clone(),
                source,
            }
        })?;
        drop(state);
        self.live = Some(mount::Live::start(
            &self.backing,
            &self.mountpoint,
            self.guard.as_ref(),
        )?);
        Ok(PowerLoss {
            changes,
            took: started.elapsed(),
        })
    }

    /// The counters so far, over every mount since [`LazyFs::mount`].
    pub fn counters(&self) -> Counters {
        let mut all = self.past.clone();
        if let Some(live) = &self.live {
            merge(
                &mut all,
                &live.state.lock().expect("lazyfs state").counters(),
            );
        }
        all
    }

    /// Unmounts cleanly (every process using the mount must be gone:
    /// otherwise [`Error::Busy`]); the backing directory keeps every write.
    /// Returns the counters.
    pub fn unmount(mut self) -> Result<Counters, Error> {
        let live = self.live.take().expect("a LazyFs is mounted between calls");
        match live.stop(&self.mountpoint) {
            Ok(state) => {
                merge(&mut self.past, &into_inner(state).counters());
                Ok(std::mem::take(&mut self.past))
            }
            Err((live, e)) => {
                self.live = Some(*live);
                Err(e)
            }
        }
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            live.detach(&self.mountpoint);
        }
    }
}

fn into_inner(state: Arc<Mutex<durable::State>>) -> durable::State {
    match Arc::try_unwrap(state) {
        Ok(m) => m.into_inner().expect("lazyfs state"),
        Err(_) => panic!("the FUSE session ended but still holds the lazyfs state"),
    }
}

fn merge(into: &mut Counters, from: &Counters) {
    for (path, c) in from {
        let e = into.entry(path.clone()).or_default();
        e.writes += c.writes;
        e.bytes_written += c.bytes_written;
        e.fsyncs += c.fsyncs;
        e.fdatasyncs += c.fdatasyncs;
        e.renames_onto += c.renames_onto;
    }
}

fn canonical_dir(path: &Path) -> Result<PathBuf, Error> {
    let bad = |reason: String| Error::BadPath {
        path: path.to_path_buf(),
        reason,
    };
    let real = path.canonicalize().map_err(|e| bad(e.to_string()))?;
    if !real.is_dir() {
        return Err(bad("not a directory".to_owned()));
    }
    Ok(real)
}
