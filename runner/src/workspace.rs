//! The one workspace confiner of the runner: every path a tool names, for
//! the native tools (`native::tools`) and for the ACP client tools
//! (`fs/read_text_file`, `fs/write_text_file`, a `terminal/create` working
//! directory in `engine`), is opened here beneath the task workspace, or
//! refused.
//!
//! Nothing is opened by path. The workspace is held as a directory
//! descriptor, and a tool's path is taken apart lexically into plain names
//! (`.` dropped, `..` taken back, and a `..` above the workspace refused),
//! then opened one name at a time from that descriptor with `openat(2)` and
//! `O_NOFOLLOW`: a symbolic link in any component is refused, whether it
//! leads out or not, so no swap of a directory for a link (a `renameat2`
//! exchange racing the tool, measured before: 21-40 files written outside
//! per 300 writes) can lead an open out of the workspace. With no link ever
//! followed, taking `..` back lexically is what the kernel would do too.
//! This is the guarantee of `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! built from plain `openat` so that it holds on every kernel and under
//! seccomp profiles that refuse `openat2`. Writes are bounded and atomic (a
//! temporary file created exclusively in the same directory descriptor and
//! renamed over the target there), reads are bounded.
//!
//! It is not an OS sandbox and does not decide whether a call may run; that
//! is the engine's write-ahead discipline. A tool shell (`Bash`, a terminal)
//! runs with the runner's privileges; only its working directory comes from
//! here ([`Workspace::dir_path`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Why a directory cannot be a workspace.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the workspace {} is not usable: {reason}", path.display())]
pub struct WorkspaceError {
    /// The directory as given.
    pub path: PathBuf,
    /// Why it is not usable.
    pub reason: String,
}

/// The directory a task's tools are confined to: its canonical path (for
/// messages and absolute tool paths) and a descriptor of it, opened once,
/// from which every tool path is opened.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    dir: Arc<OwnedFd>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Workspace) -> bool {
        self.root == other.root
    }
}

impl Eq for Workspace {}

/// Whether a walk creates the directories it does not find.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    Create,
    Refuse,
}

impl Workspace {
    /// The workspace at `dir`, which must be an existing directory; an
    /// absolute `dir` must still be canonical (a workspace replaced by a
    /// symbolic link since its admission is refused), and it is opened one
    /// component at a time without following a link.
    pub fn new(dir: impl AsRef<Path>) -> Result<Workspace, WorkspaceError> {
        let dir = dir.as_ref();
        let unusable = |reason: String| WorkspaceError {
            path: dir.to_path_buf(),
            reason,
        };
        let root = dir.canonicalize().map_err(|e| unusable(e.to_string()))?;
        if dir.is_absolute() && root != dir {
            return Err(unusable(format!(
                "it is not canonical (it leads to {})",
                root.display()
            )));
        }
        let top = openat(
            nix::fcntl::AT_FDCWD,
            "/",
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unusable(e.to_string()))?;
        let names: Vec<&OsStr> = root
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        let dir = walk(top, &names, Missing::Refuse).map_err(|e| match e {
            Errno::ENOTDIR => unusable("it is not a directory".to_owned()),
            Errno::ELOOP => unusable("a component of it is a symbolic link".to_owned()),
            e => unusable(io::Error::from(e).to_string()),
        })?;
        Ok(Workspace {
            root,
            dir: Arc::new(dir),
        })
    }

    /// The canonical path of the workspace.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A path that names the workspace directory itself through this
    /// process's descriptor of it (`/proc/self/fd/N`), for a tool's working
    /// directory: a child changes into it before it executes, so a
    /// workspace renamed or replaced by a link since cannot redirect it.
    pub fn dir_path(&self) -> PathBuf {
        fd_path(self.dir.as_fd())
    }

    /// The plain names `path` (relative to the workspace, or absolute inside
    /// it) consists of, after `.` and `..`; an error for a path that is empty,
    /// has a NUL, or leads out.
    fn names(&self, path: &str) -> Result<Vec<OsString>, String> {
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
        let given = Path::new(path);
        let relative = match given.strip_prefix(&self.root) {
            Ok(rest) => rest,
            Err(_) if given.is_absolute() => return Err(outside()),
            Err(_) => given,
        };
        let mut names: Vec<OsString> = Vec::new();
        for c in relative.components() {
            match c {
                Component::Normal(n) => names.push(n.to_owned()),
                Component::CurDir => {}
                Component::ParentDir => {
                    names.pop().ok_or_else(outside)?;
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(names)
    }

    /// Where `path` lands inside the workspace, after checking that no
    /// existing component of it is a symbolic link. Only for messages and
    /// tests: nothing is ever opened by this path.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let names = self.names(path)?;
        let mut dir = self.dup()?;
        for (i, name) in names.iter().enumerate() {
            match open_dir(&dir, name) {
                Ok(next) => dir = next,
                Err(Errno::ENOENT) => break,
                Err(Errno::ENOTDIR) if i + 1 == names.len() => break,
                Err(e) => return Err(self.open_error(path, &names, e)),
            }
        }
        Ok(names.iter().fold(self.root.clone(), |p, n| p.join(n)))
    }

    /// The directory `path` names, opened beneath the workspace (a
    /// terminal's working directory); keep it open while it is used.
    pub fn open_dir(&self, path: &str) -> Result<OwnedFd, String> {
        let names = self.names(path)?;
        let refs: Vec<&OsStr> = names.iter().map(OsString::as_os_str).collect();
        walk(self.dup()?, &refs, Missing::Refuse).map_err(|e| self.open_error(path, &names, e))
    }

    /// Reads the UTF-8 text file at `path` (inside the workspace), at most
    /// `limit` bytes; a larger file is an error naming the limit.
    pub fn read_text(&self, path: &str, limit: usize) -> Result<String, String> {
        let (_, _, file) = self.open_file(path)?;
        read_bounded(file, path, limit, "read")
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
        let (dir, name) = self.parent(path, Missing::Create)?;
        let mode = match fstatat(
            &dir,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) if kind(&st) == SFlag::S_IFREG => Some(st.st_mode & 0o7777),
            Ok(st) if kind(&st) == SFlag::S_IFLNK => {
                let names = self.names(path).unwrap_or_default();
                return Err(self.open_error(path, &names, Errno::ELOOP));
            }
            Ok(_) => return Err(format!("{path} exists and is not a regular file")),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(format!("cannot inspect {path}: {}", io::Error::from(e))),
        };
        replace_atomically(&dir, &name, content.as_bytes(), mode)
            .map_err(|e| format!("cannot write {path}: {e}"))?;
        let verb = if mode.is_some() {
            "replaced"
        } else {
            "created"
        };
        Ok(format!("{verb} {path} ({} bytes)", content.len()))
    }

    /// Reads the text file at `path` (at most `limit` bytes, the limit
    /// named `what` in errors), hands it to `edit` and replaces the file
    /// atomically with what `edit` returns, in the same directory
    /// descriptor, keeping its permission bits; `edit`'s answer.
    pub fn edit_text(
        &self,
        path: &str,
        limit: usize,
        what: &str,
        edit: impl FnOnce(&str) -> Result<(String, String), String>,
    ) -> Result<String, String> {
        let (dir, name, file) = self.open_file(path)?;
        let mode = fstat(&file)
            .map_err(|e| format!("cannot inspect {path}: {}", io::Error::from(e)))?
            .st_mode
            & 0o7777;
        let text = read_bounded(file, path, limit, what)?;
        let (edited, answer) = edit(&text)?;
        replace_atomically(&dir, &name, edited.as_bytes(), Some(mode))
            .map_err(|e| format!("cannot write {path}: {e}"))?;
        Ok(answer)
    }

    /// The existing regular file at `path`, opened for reading beneath the
    /// workspace without following a link and without blocking on a FIFO,
    /// with its directory and name.
    fn open_file(&self, path: &str) -> Result<(OwnedFd, OsString, File), String> {
        let (dir, name) = self.parent(path, Missing::Refuse)?;
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = openat(&dir, name.as_os_str(), flags, Mode::empty()).map_err(|e| {
            let names = self.names(path).unwrap_or_default();
            self.open_error(path, &names, e)
        })?;
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot inspect {path}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{path} is not a regular file"));
        }
        Ok((dir, name, file))
    }

    /// The directory holding the file `path` names (its missing directories
    /// created with `Missing::Create`) and the file's name.
    fn parent(&self, path: &str, missing: Missing) -> Result<(OwnedFd, OsString), String> {
        let mut names = self.names(path)?;
        let Some(name) = names.pop() else {
            return Err(format!(
                "the path {path} names the workspace itself, which is not a regular file"
            ));
        };
        let refs: Vec<&OsStr> = names.iter().map(OsString::as_os_str).collect();
        let dir = walk(self.dup()?, &refs, missing).map_err(|e| {
            let mut all = names.clone();
            all.push(name.clone());
            self.open_error(path, &all, e)
        })?;
        Ok((dir, name))
    }

    fn dup(&self) -> Result<OwnedFd, String> {
        self.dir
            .try_clone()
            .map_err(|e| format!("cannot use the workspace descriptor: {e}"))
    }

    /// The message for `errno` from opening `path` (`names`): a symbolic link
    /// is named, the rest is the system's sentence.
    fn open_error(&self, path: &str, names: &[OsString], errno: Errno) -> String {
        if errno == Errno::ELOOP {
            let link = self.first_link(names);
            return match link {
                Some(link) => format!(
                    "cannot open {path}: {} is a symbolic link, and tools do not follow symbolic links",
                    link.display()
                ),
                None => format!(
                    "cannot open {path}: it goes through a symbolic link, and tools do not follow symbolic links"
                ),
            };
        }
        format!("cannot open {path}: {}", io::Error::from(errno))
    }

    /// The first component of `names` that is a symbolic link now (for a
    /// message only: the open already failed).
    fn first_link(&self, names: &[OsString]) -> Option<PathBuf> {
        let mut dir = self.dup().ok()?;
        let mut at = self.root.clone();
        for name in names {
            at.push(name);
            let st = fstatat(
                &dir,
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .ok()?;
            if kind(&st) == SFlag::S_IFLNK {
                return Some(at);
            }
            dir = open_dir(&dir, name).ok()?;
        }
        None
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// `/proc/self/fd/N` for `fd`: in a child before it executes, the same
/// directory (descriptors are inherited until `exec` closes them).
pub(crate) fn fd_path(fd: impl AsFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
}

/// Opens the directory `name` in `dir` without following a link; a link
/// is `ELOOP` (the kernel says `ENOTDIR` for a link opened as a directory
/// with `O_NOFOLLOW`).
fn open_dir(dir: &OwnedFd, name: &OsStr) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty()).map_err(|e| {
        let link = || {
            fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| kind(&st) == SFlag::S_IFLNK)
        };
        if e == Errno::ENOTDIR && link() {
            Errno::ELOOP
        } else {
            e
        }
    })
}

/// Opens `names` one at a time from `dir` without following a link,
/// creating the missing ones with `Missing::Create`.
fn walk(mut dir: OwnedFd, names: &[&OsStr], missing: Missing) -> Result<OwnedFd, Errno> {
    for name in names {
        dir = match open_dir(&dir, name) {
            Ok(next) => next,
            Err(Errno::ENOENT) if missing == Missing::Create => {
                // Another writer may create it first; either way it is there.
                match mkdirat(&dir, *name, Mode::from_bits_truncate(0o777)) {
                    // A new name is durable once its directory is synced
                    // (docs/lazyfs.md): a power loss must not take the new
                    // directory, and what is synced inside it, away.
                    Ok(()) => nix::unistd::fsync(&dir)?,
                    Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                open_dir(&dir, name)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(dir)
}

/// Reads at most `limit` bytes of an open file as UTF-8; `what` names the
/// limit in the error. The file may grow after it was measured, so the read
/// itself is bounded too.
pub(crate) fn read_bounded(
    file: File,
    path: &str,
    limit: usize,
    what: &str,
) -> Result<String, String> {
    let len = file
        .metadata()
        .map_err(|e| format!("cannot inspect {path}: {e}"))?
        .len();
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
    // A relative `dir`'s last parent is the empty path: the working
    // directory, which exists.
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
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

/// Replaces `name` in `dir` with `bytes` atomically: a temporary file in
/// the same directory (created exclusively, 0600, not through a link),
/// written and synced, given `mode` (the replaced file's permission bits, or
/// 0600 for a new file), renamed over the target within the directory, and
/// the directory synced. A reader sees the old or the new content, never a
/// mix; a crash leaves at most a stray temporary file.
pub(crate) fn replace_atomically(
    dir: &OwnedFd,
    name: &OsStr,
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    let tmp = format!(".turncut-{}.tmp", uuid::Uuid::new_v4().simple());
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut file = File::from(openat(
        dir,
        tmp.as_str(),
        flags,
        Mode::from_bits_truncate(0o600),
    )?);
    let written = (|| {
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            fchmod(&file, Mode::from_bits_truncate(mode))?;
        }
        // SEEDED BUG atomic-write-without-fsync: the rename can reach the
        // disk before the bytes (ext4 without auto_da_alloc: an empty file).
        if !crate::seeded::atomic_write_without_fsync() {
            file.sync_all()?;
        }
        renameat(dir, tmp.as_str(), dir, name)?;
        Ok::<_, io::Error>(())
    })();
    if let Err(e) = written {
        let _ = unlinkat(dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e);
    }
    // SEEDED BUG rename-without-dir-sync: the rename is not durable, so a
    // power loss brings back the old file (or none).
    if crate::seeded::rename_without_dir_sync() {
        return Ok(());
    }
    nix::unistd::fsync(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests;
