//! The one workspace confiner of the runner: every path a tool names, for
//! the native tools (`native::tools`) and for the ACP client tools
//! (`fs/read_text_file`, `fs/write_text_file`, a `terminal/create` working
//! directory in `engine`), is resolved here to a canonical path inside the
//! task workspace, or refused. Neither `..` nor a symlink leads out: the
//! nearest existing ancestor is canonicalized (`symlink_metadata`, so a
//! dangling link is seen as a link and refused), files are opened with
//! `O_NOFOLLOW`, and writes are bounded and atomic (a temporary file renamed
//! over the target).
//!
//! It is not an OS sandbox and does not decide whether a call may run; that
//! is the engine's write-ahead discipline.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

/// Why a directory cannot be a workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the workspace {} is not usable: {reason}", path.display())]
pub struct WorkspaceError {
    /// The directory as given.
    pub path: PathBuf,
    /// Why it is not usable.
    pub reason: String,
}

/// The directory a task's tools are confined to, canonicalized once.
/// Every path a tool names, native or ACP, goes through [`Workspace::resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace at `dir`, which must be an existing directory.
    pub fn new(dir: impl AsRef<Path>) -> Result<Workspace, WorkspaceError> {
        let dir = dir.as_ref();
        let unusable = |reason: String| WorkspaceError {
            path: dir.to_path_buf(),
            reason,
        };
        let root = dir.canonicalize().map_err(|e| unusable(e.to_string()))?;
        if !root.is_dir() {
            return Err(unusable("it is not a directory".to_owned()));
        }
        Ok(Workspace { root })
    }

    /// The canonical path of the workspace.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves `path` (relative to the workspace, or absolute) to a canonical
    /// path inside the workspace. The nearest existing ancestor is
    /// canonicalized, which resolves every `..` and symlink in it; the
    /// components after it do not exist yet and must be plain names. A
    /// dangling symlink is refused, because writing through it would create
    /// its target wherever that is.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        if path.is_empty() {
            return Err("the path is empty".to_owned());
        }
        if path.contains('\0') {
            return Err(format!("the path {path:?} contains a NUL byte"));
        }
        let outside = || {
            format!(
                "the path {path} is outside the workspace {}",
                self.root.display()
            )
        };
        // `join` keeps an absolute `path` as it is.
        let joined = self.root.join(path);
        let mut existing = joined.as_path();
        let mut missing = Vec::new();
        loop {
            match std::fs::symlink_metadata(existing) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot resolve the path {path}: {e}")),
            }
            // A missing directory cannot be canonicalized, so a `..` after it
            // could not be resolved safely.
            match (existing.components().next_back(), existing.parent()) {
                (Some(Component::Normal(name)), Some(parent)) => {
                    missing.push(name);
                    existing = parent;
                }
                _ => return Err(outside()),
            }
        }
        let mut real = existing.canonicalize().map_err(|e| {
            let dangling = std::fs::symlink_metadata(existing)
                .is_ok_and(|m| m.file_type().is_symlink())
                && e.kind() == io::ErrorKind::NotFound;
            if dangling {
                format!(
                    "cannot resolve the path {path}: {} is a symbolic link to nothing",
                    existing.display()
                )
            } else {
                format!("cannot resolve the path {path}: {e}")
            }
        })?;
        real.extend(missing.iter().rev());
        if real.starts_with(&self.root) {
            Ok(real)
        } else {
            Err(outside())
        }
    }
    /// Reads the UTF-8 text file at `path` (inside the workspace), at most
    /// `limit` bytes; a larger file is an error naming the limit.
    pub fn read_text(&self, path: &str, limit: usize) -> Result<String, String> {
        let real = self.resolve(path)?;
        let (file, len) = open_regular(&real, path)?;
        read_bounded(file, len, path, limit, "read")
    }

    /// Creates or replaces the file at `path` (inside the workspace) with
    /// `content` of at most `limit` bytes, creating missing parent
    /// directories, atomically ([`replace_atomically`]). A replaced file keeps
    /// its permission bits; a new one is 0600. Returns what was done.
    pub fn write_text(&self, path: &str, content: &str, limit: usize) -> Result<String, String> {
        if content.len() > limit {
            return Err(format!(
                "the content is {} bytes, over the write limit of {limit} bytes",
                content.len()
            ));
        }
        let real = self.resolve(path)?;
        let mode = match std::fs::symlink_metadata(&real) {
            Ok(m) if m.is_file() => Some(m.permissions().mode() & 0o7777),
            Ok(_) => return Err(format!("{path} exists and is not a regular file")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot inspect {path}: {e}")),
        };
        let parent = real
            .parent()
            .ok_or_else(|| format!("{path} has no parent directory"))?;
        // `parent` is inside the workspace and its missing part is plain names,
        // so this creates directories only inside the workspace.
        create_dir_all_durably(parent, 0o777)
            .map_err(|e| format!("cannot create the directories of {path}: {e}"))?;
        replace_atomically(&real, content.as_bytes(), mode)
            .map_err(|e| format!("cannot write {path}: {e}"))?;
        let verb = if mode.is_some() {
            "replaced"
        } else {
            "created"
        };
        Ok(format!("{verb} {path} ({} bytes)", content.len()))
    }
}

/// Opens an existing regular file for reading without following a final
/// symlink (the path is canonical, so one there was put there since) and
/// without blocking on a FIFO.
pub(crate) fn open_regular(real: &Path, path: &str) -> Result<(File, u64), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(real)
        .map_err(|e| format!("cannot open {path}: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect {path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{path} is not a regular file"));
    }
    Ok((file, meta.len()))
}

/// Reads at most `limit` bytes of an open file as UTF-8; `what` names the
/// limit in the error. The file may grow after it was measured, so the read
/// itself is bounded too.
pub(crate) fn read_bounded(
    file: File,
    len: u64,
    path: &str,
    limit: usize,
    what: &str,
) -> Result<String, String> {
    let over =
        |size: String| format!("{path} is {size} bytes, over the {what} limit of {limit} bytes");
    if len > limit as u64 {
        return Err(over(len.to_string()));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if bytes.len() > limit {
        return Err(over(format!("at least {}", bytes.len())));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{path} is not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Creates `dir` and its missing parents (each with `mode`, less the
/// umask), each new one durable: a new name is durable only once its
/// directory is synced (`docs/lazyfs.md`), so after each `mkdir` its parent
/// is synced. Without it a power loss can take a whole new directory, and
/// everything synced inside it, away.
pub(crate) fn create_dir_all_durably(dir: &Path, mode: u32) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.exists()) {
        missing.push(d);
        at = d.parent();
    }
    for d in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => continue,
            Err(e) => return Err(e),
        }
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            File::open(parent)?.sync_all()?;
        }
    }
    Ok(())
}

/// Replaces `target` with `bytes` atomically: a temporary file in the same
/// directory (created exclusively, 0600), written and synced, given `mode`
/// (the replaced file's permission bits, or 0600 for a new file), renamed
/// over the target, and the directory synced. A reader sees the old or the
/// new content, never a mix; a crash leaves at most a stray temporary file.
pub(crate) fn replace_atomically(target: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    let tmp = dir.join(format!(".turncut-{}.tmp", uuid::Uuid::new_v4().simple()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            file.set_permissions(Permissions::from_mode(mode))?;
        }
        // SEEDED BUG atomic-write-without-fsync: the rename can reach the
        // disk before the bytes (ext4 without auto_da_alloc: an empty file).
        if !crate::seeded::atomic_write_without_fsync() {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, target)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    // SEEDED BUG rename-without-dir-sync: the rename is not durable, so a
    // power loss brings back the old file (or none).
    if crate::seeded::rename_without_dir_sync() {
        return Ok(());
    }
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::symlink;

    /// A dangling link inside the workspace to a file outside is refused for
    /// reading and writing, named by a relative or an absolute path, with an
    /// absolute or a relative target; nothing appears outside.
    #[test]
    fn dangling_links_are_refused_in_every_form() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir(root.join("ws")).expect("mkdir");
        let ws = Workspace::new(root.join("ws")).expect("workspace");
        symlink(root.join("abs-target"), root.join("ws/abs")).expect("symlink");
        symlink("../rel-target", root.join("ws/rel")).expect("symlink");
        for link in ["abs", "rel"] {
            let absolute = root.join("ws").join(link).display().to_string();
            for path in [link, absolute.as_str()] {
                let err = ws.write_text(path, "x", 16).expect_err(path);
                assert!(err.contains("is a symbolic link to nothing"), "{err}");
                let err = ws.read_text(path, 16).expect_err(path);
                assert!(err.contains("is a symbolic link to nothing"), "{err}");
            }
        }
        assert!(!root.join("abs-target").exists());
        assert!(!root.join("rel-target").exists());
    }

    #[test]
    fn reads_and_writes_are_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::new(dir.path()).expect("workspace");
        assert_eq!(
            ws.write_text("f", "12345", 4),
            Err("the content is 5 bytes, over the write limit of 4 bytes".to_owned())
        );
        assert_eq!(
            ws.write_text("f", "1234", 4),
            Ok("created f (4 bytes)".to_owned())
        );
        let err = ws.read_text("f", 3).expect_err("over the limit");
        assert!(err.contains("over the read limit of 3 bytes"), "{err}");
        assert_eq!(ws.read_text("f", 4), Ok("1234".to_owned()));
    }
}
