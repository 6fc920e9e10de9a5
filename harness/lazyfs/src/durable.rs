//! The state behind one mount: the nodes the kernel knows, the open handles,
//! and beside the backing directory (which always holds the *current* state,
//! every write applied) what a disk would have kept at a power cut.
//!
//! Each node remembers its durable state only once something changes it:
//! [`Durable::Unchanged`] means the backing still holds it as at the mount.
//! Before the first change — a write, a truncate, a name added or removed in
//! a directory, the node's last name removed — the node is *materialized*:
//! its durable content (a file's bytes, a directory's names) is copied into
//! memory. A sync then copies the current state over it: `fsync` of a file
//! its bytes (only the ranges written since, [`Node::dirty`]), `fsync` of a
//! directory its names. The power cut (`image.rs`) writes the durable state
//! of every node reachable by durable names.
//!
//! Every node holds an `O_PATH` descriptor of its backing inode, so an
//! operation reaches the inode wherever it has been renamed, and the inode
//! number cannot be reused while the node lives. The descriptor goes when the
//! kernel forgets a node whose backing inode has no name left.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

use crate::PathCounters;

/// A node number, the one the kernel sees; 1 is the root.
pub(crate) type Ino = u64;

/// The root's node number (FUSE's).
pub(crate) const ROOT: Ino = 1;

/// What kind of inode a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO or a socket: a name with no content.
    Special,
}

impl Kind {
    pub(crate) fn of(st: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Special,
        }
    }
}

/// One directory's durable names: name → (node, the sequence number of the
/// directory sync that made this entry durable; 0 for an entry there at the
/// mount). A directory named by several durable entries (a rename whose two
/// directories were synced at different times) is where its newest entry says.
pub(crate) type Names = BTreeMap<OsString, (Ino, u64)>;

/// A node's durable state.
#[derive(Debug)]
pub(crate) enum Durable {
    /// As at the mount: the backing still holds it (a file's bytes, a
    /// directory's names) or it never changes (a symlink, a FIFO).
    Unchanged,
    /// A file's bytes at its last sync (empty for a file created since).
    Content(Vec<u8>),
    /// A directory's names at its last sync (none for one created since).
    Names(Names),
}

/// A node the kernel knows (or a durable name refers to).
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    /// `O_PATH` on the backing inode; `None` once it is gone and forgotten.
    pub(crate) fd: Option<OwnedFd>,
    key: (u64, u64),
    lookups: u64,
    pub(crate) durable: Durable,
    /// The byte range written since the last sync, as one covering range
    /// (an end of `u64::MAX` after a truncate: everything past the start).
    dirty: Option<(u64, u64)>,
    /// The last known mode bits (`st_mode`), for the image of a node whose
    /// descriptor is gone.
    pub(crate) mode: u32,
    pub(crate) rdev: u64,
    /// A symlink's target.
    pub(crate) target: Option<OsString>,
    counters: PathCounters,
    /// The node's path when its descriptor went, for its counters.
    last_path: Option<String>,
}

impl Node {
    /// The backing inode's path through `/proc/self/fd`, which follows the
    /// inode across renames.
    pub(crate) fn proc_path(&self) -> io::Result<PathBuf> {
        let fd = self.fd.as_ref().ok_or_else(gone)?;
        Ok(PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())))
    }

    pub(crate) fn stat(&self) -> io::Result<FileStat> {
        let fd = self.fd.as_ref().ok_or_else(gone)?;
        Ok(nix::sys::stat::fstat(fd)?)
    }
}

/// An open file or directory.
#[derive(Debug)]
pub(crate) struct Handle {
    pub(crate) node: Ino,
    /// The backing file (read-write when possible: a sync reads it back).
    pub(crate) file: Option<File>,
    /// A directory's entries, read at `opendir`.
    pub(crate) entries: Vec<(OsString, Ino, Kind)>,
    /// Opened `O_SYNC`/`O_DSYNC`: every write is durable when it returns.
    sync_writes: bool,
}

/// Everything behind one mount; the FUSE thread owns it while the mount
/// serves, the [`crate::LazyFs`] after.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) backing: PathBuf,
    pub(crate) nodes: HashMap<Ino, Node>,
    by_key: HashMap<(u64, u64), Ino>,
    next_ino: Ino,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    seq: u64,
}

fn gone() -> io::Error {
    io::Error::from_raw_os_error(libc::ESTALE)
}

fn o_path(dir: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    Ok(nix::fcntl::openat(dir, name, flags, Mode::empty())?)
}

impl State {
    /// The state of a fresh mount of `backing`: everything in it durable.
    pub(crate) fn new(backing: &Path) -> io::Result<State> {
        let root = nix::fcntl::open(
            backing,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let mut state = State {
            backing: backing.to_path_buf(),
            nodes: HashMap::new(),
            by_key: HashMap::new(),
            next_ino: ROOT,
            handles: HashMap::new(),
            next_fh: 1,
            seq: 0,
        };
        let ino = state.insert(root)?;
        debug_assert_eq!(ino, ROOT);
        Ok(state)
    }

    pub(crate) fn node(&self, ino: Ino) -> io::Result<&Node> {
        self.nodes.get(&ino).ok_or_else(gone)
    }

    fn node_mut(&mut self, ino: Ino) -> io::Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or_else(gone)
    }

    /// The backing directory of node `ino`, as a descriptor for `*at` calls.
    fn dir_fd(&self, ino: Ino) -> io::Result<&OwnedFd> {
        let node = self.node(ino)?;
        if node.kind != Kind::Dir {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        node.fd.as_ref().ok_or_else(gone)
    }

    /// Registers the inode `fd` is open on, or returns its node when it
    /// has one (the descriptor is then closed).
    fn insert(&mut self, fd: OwnedFd) -> io::Result<Ino> {
        let st = nix::sys::stat::fstat(&fd)?;
        let key = (st.st_dev, st.st_ino);
        if let Some(&ino) = self.by_key.get(&key) {
            return Ok(ino);
        }
        let kind = Kind::of(&st);
        let target = match kind {
            Kind::Symlink => Some(nix::fcntl::readlinkat(&fd, "")?),
            _ => None,
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_key.insert(key, ino);
        self.nodes.insert(
            ino,
            Node {
                kind,
                fd: Some(fd),
                key,
                lookups: 0,
                durable: Durable::Unchanged,
                dirty: None,
                mode: st.st_mode,
                rdev: st.st_rdev,
                target,
                counters: PathCounters::default(),
                last_path: None,
            },
        );
        Ok(ino)
    }

    /// The node of `name` in directory `parent`, registered if new. Does
    /// not count as a kernel lookup.
    pub(crate) fn child(&mut self, parent: Ino, name: &OsStr) -> io::Result<Ino> {
        let fd = o_path(self.dir_fd(parent)?, name)?;
        self.insert(fd)
    }

    /// A kernel lookup: the node of `name` in `parent`, counted until the
    /// kernel forgets it.
    pub(crate) fn lookup(&mut self, parent: Ino, name: &OsStr) -> io::Result<(Ino, FileStat)> {
        let ino = self.child(parent, name)?;
        let node = self.node_mut(ino)?;
        node.lookups += 1;
        let st = node.stat()?;
        node.mode = st.st_mode;
        Ok((ino, st))
    }

    /// The kernel forgot `n` lookups of `ino`. A node with no lookups left
    /// whose backing inode has no name and no open handle lets its
    /// descriptor go (its durable state was materialized before its last
    /// name went, so the image does not need the inode).
    pub(crate) fn forget(&mut self, ino: Ino, n: u64) {
        let open = self.handles.values().any(|h| h.node == ino);
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups > 0 || open || ino == ROOT || !node.stat().is_ok_and(|st| st.st_nlink == 0)
        {
            return;
        }
        let path = self.path_of(ino);
        let node = self.nodes.get_mut(&ino).expect("checked above");
        node.last_path = Some(path);
        node.fd = None;
        self.by_key.remove(&node.key);
    }

    /// The node's current path under the mount (`.` for the root), or the
    /// last known one.
    pub(crate) fn path_of(&self, ino: Ino) -> String {
        let Some(node) = self.nodes.get(&ino) else {
            return "?".to_owned();
        };
        if let Some(p) = &node.last_path {
            return p.clone();
        }
        let Ok(link) = node.proc_path().and_then(std::fs::read_link) else {
            return "?".to_owned();
        };
        match link.strip_prefix(&self.backing) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => link.display().to_string(),
        }
    }

    /// Every node's counters, by path.
    pub(crate) fn counters(&self) -> crate::Counters {
        let mut all = crate::Counters::new();
        for (&ino, node) in &self.nodes {
            if node.counters != PathCounters::default() {
                let mut path = self.path_of(ino);
                if let Some(p) = path.strip_suffix(" (deleted)") {
                    path = p.to_owned();
                }
                crate::merge(&mut all, &BTreeMap::from([(path, node.counters)]));
            }
        }
        all
    }

    /// Copies the node's durable state into memory before its first change.
    fn materialize(&mut self, ino: Ino) -> io::Result<()> {
        let node = self.node(ino)?;
        if !matches!(node.durable, Durable::Unchanged) {
            return Ok(());
        }
        let durable = match node.kind {
            Kind::File => Durable::Content(std::fs::read(node.proc_path()?)?),
            Kind::Dir => Durable::Names(
                self.current_names(ino)?
                    .into_iter()
                    .map(|(name, ino)| (name, (ino, 0)))
                    .collect(),
            ),
            Kind::Symlink | Kind::Special => return Ok(()),
        };
        self.node_mut(ino)?.durable = durable;
        Ok(())
    }

    /// The names the backing directory holds now, each with its node.
    pub(crate) fn current_names(&mut self, dir: Ino) -> io::Result<BTreeMap<OsString, Ino>> {
        let path = self.node(dir)?.proc_path()?;
        let mut names = BTreeMap::new();
        for entry in std::fs::read_dir(path)? {
            let name = entry?.file_name();
            let ino = self.child(dir, &name)?;
            names.insert(name, ino);
        }
        Ok(names)
    }

    /// Before the name `name` in `dir` goes or is replaced: the directory's
    /// names and the named node's content are materialized (the backing
    /// loses both).
    fn before_name_change(&mut self, dir: Ino, name: Option<&OsStr>) -> io::Result<()> {
        self.materialize(dir)?;
        if let Some(name) = name
            && let Ok(ino) = self.child(dir, name)
        {
            self.materialize(ino)?;
        }
        Ok(())
    }

    /// A new node: `fd` on an inode created since the mount, whose durable
    /// state is empty (no bytes, no names) until it is synced.
    fn created(&mut self, fd: OwnedFd) -> io::Result<(Ino, FileStat)> {
        let ino = self.insert(fd)?;
        let node = self.node_mut(ino)?;
        node.durable = match node.kind {
            Kind::File => Durable::Content(Vec::new()),
            Kind::Dir => Durable::Names(Names::new()),
            Kind::Symlink | Kind::Special => Durable::Unchanged,
        };
        node.lookups += 1;
        let st = node.stat()?;
        Ok((ino, st))
    }

    pub(crate) fn mkdir(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
    ) -> io::Result<(Ino, FileStat)> {
        self.before_name_change(parent, None)?;
        let dir = self.dir_fd(parent)?;
        nix::sys::stat::mkdirat(dir, name, Mode::from_bits_truncate(mode))?;
        let fd = o_path(dir, name)?;
        // The process's umask applied on top of the caller's: give the mode asked for.
        nix::sys::stat::fchmodat(
            dir,
            name,
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
        )?;
        self.created(fd)
    }

    pub(crate) fn mknod(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> io::Result<(Ino, FileStat)> {
        let kind = SFlag::from_bits_truncate(mode & SFlag::S_IFMT.bits());
        if ![SFlag::S_IFREG, SFlag::S_IFIFO, SFlag::S_IFSOCK].contains(&kind) {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        self.before_name_change(parent, None)?;
        let dir = self.dir_fd(parent)?;
        let perm = Mode::from_bits_truncate(mode);
        nix::sys::stat::mknodat(dir, name, kind, perm, rdev.into())?;
        let fd = o_path(dir, name)?;
        nix::sys::stat::fchmodat(
            dir,
            name,
            perm,
            nix::sys::stat::FchmodatFlags::NoFollowSymlink,
        )?;
        self.created(fd)
    }

    pub(crate) fn symlink(
        &mut self,
        parent: Ino,
        name: &OsStr,
        target: &Path,
    ) -> io::Result<(Ino, FileStat)> {
        self.before_name_change(parent, None)?;
        let dir = self.dir_fd(parent)?;
        nix::unistd::symlinkat(target, dir, name)?;
        let fd = o_path(dir, name)?;
        self.created(fd)
    }

    /// A new name for `ino` (a hard link).
    pub(crate) fn link(
        &mut self,
        ino: Ino,
        parent: Ino,
        name: &OsStr,
    ) -> io::Result<(Ino, FileStat)> {
        self.before_name_change(parent, None)?;
        let from = self.node(ino)?.proc_path()?;
        let dir = self.dir_fd(parent)?;
        nix::unistd::linkat(
            nix::fcntl::AT_FDCWD,
            &from,
            dir,
            name,
            nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
        )?;
        let node = self.node_mut(ino)?;
        node.lookups += 1;
        let st = node.stat()?;
        Ok((ino, st))
    }

    /// `create(2)` of a new file, opened with `flags`.
    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> io::Result<(Ino, FileStat, u64)> {
        self.before_name_change(parent, None)?;
        let dir = self.dir_fd(parent)?;
        let perm = Mode::from_bits_truncate(mode);
        let oflags =
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let file = File::from(nix::fcntl::openat(dir, name, oflags, perm)?);
        nix::sys::stat::fchmod(&file, perm)?;
        let fd = o_path(dir, name)?;
        let (ino, st) = self.created(fd)?;
        let fh = self.add_handle(ino, Some(file), flags);
        Ok((ino, st, fh))
    }

    pub(crate) fn unlink(&mut self, parent: Ino, name: &OsStr, dir: bool) -> io::Result<()> {
        self.before_name_change(parent, Some(name))?;
        let flag = if dir {
            nix::unistd::UnlinkatFlags::RemoveDir
        } else {
            nix::unistd::UnlinkatFlags::NoRemoveDir
        };
        nix::unistd::unlinkat(self.dir_fd(parent)?, name, flag)?;
        Ok(())
    }

    pub(crate) fn rename(
        &mut self,
        from: (Ino, &OsStr),
        to: (Ino, &OsStr),
        flags: u32,
    ) -> io::Result<()> {
        self.before_name_change(from.0, None)?;
        self.before_name_change(to.0, Some(to.1))?;
        let flags = nix::fcntl::RenameFlags::from_bits_truncate(flags);
        nix::fcntl::renameat2(
            self.dir_fd(from.0)?,
            from.1,
            self.dir_fd(to.0)?,
            to.1,
            flags,
        )?;
        if let Ok(ino) = self.child(to.0, to.1) {
            self.node_mut(ino)?.counters.renames_onto += 1;
        }
        Ok(())
    }

    fn add_handle(&mut self, node: Ino, file: Option<File>, flags: i32) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        let sync_writes = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        self.handles.insert(
            fh,
            Handle {
                node,
                file,
                entries: Vec::new(),
                sync_writes,
            },
        );
        fh
    }

    pub(crate) fn handle(&self, fh: u64) -> io::Result<&Handle> {
        self.handles
            .get(&fh)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
    }

    /// Opens a file. The backing file is opened read-write when it can be
    /// (a sync reads the written bytes back), without `O_APPEND` (the
    /// kernel gives every write its offset) and without `O_TRUNC` (applied
    /// here, as a change).
    pub(crate) fn open(&mut self, ino: Ino, flags: i32) -> io::Result<u64> {
        let path = self.node(ino)?.proc_path()?;
        let keep = flags & (libc::O_NONBLOCK | libc::O_NOATIME);
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(keep)
            .open(&path);
        let file = match rw {
            Ok(f) => f,
            Err(_) => {
                let mut o = std::fs::OpenOptions::new();
                match flags & libc::O_ACCMODE {
                    libc::O_WRONLY => o.write(true),
                    libc::O_RDWR => o.read(true).write(true),
                    _ => o.read(true),
                };
                o.custom_flags(keep).open(&path)?
            }
        };
        if flags & libc::O_TRUNC != 0 {
            self.truncate(ino, &file, 0)?;
        }
        Ok(self.add_handle(ino, Some(file), flags))
    }

    pub(crate) fn release(&mut self, fh: u64) {
        self.handles.remove(&fh);
    }

    pub(crate) fn read(&self, fh: u64, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let file = self.handle(fh)?.file.as_ref().ok_or_else(gone)?;
        let mut buf = vec![0; size as usize];
        let mut n = 0;
        while n < buf.len() {
            match file.read_at(&mut buf[n..], offset + n as u64)? {
                0 => break,
                k => n += k,
            }
        }
        buf.truncate(n);
        Ok(buf)
    }

    pub(crate) fn write(&mut self, fh: u64, offset: u64, data: &[u8]) -> io::Result<usize> {
        let (ino, sync) = {
            let h = self.handle(fh)?;
            (h.node, h.sync_writes)
        };
        self.materialize(ino)?;
        let file = self.handle(fh)?.file.as_ref().ok_or_else(gone)?;
        file.write_all_at(data, offset)?;
        let node = self.node_mut(ino)?;
        node.counters.writes += 1;
        node.counters.bytes_written += data.len() as u64;
        widen(&mut node.dirty, offset, offset + data.len() as u64);
        if sync {
            self.sync_file(ino)?;
        }
        Ok(data.len())
    }

    /// Sets the size of `ino` through `file`.
    pub(crate) fn truncate(&mut self, ino: Ino, file: &File, size: u64) -> io::Result<()> {
        self.materialize(ino)?;
        let old = file.metadata()?.len();
        file.set_len(size)?;
        widen(&mut self.node_mut(ino)?.dirty, old.min(size), u64::MAX);
        Ok(())
    }

    /// `truncate(2)` without a handle.
    pub(crate) fn truncate_path(&mut self, ino: Ino, size: u64) -> io::Result<()> {
        let path = self.node(ino)?.proc_path()?;
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        self.truncate(ino, &file, size)
    }

    pub(crate) fn fallocate(
        &mut self,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> io::Result<()> {
        let ino = self.handle(fh)?.node;
        self.materialize(ino)?;
        let file = self.handle(fh)?.file.as_ref().ok_or_else(gone)?;
        let flags = nix::fcntl::FallocateFlags::from_bits_truncate(mode);
        nix::fcntl::fallocate(file, flags, offset as i64, len as i64)?;
        widen(&mut self.node_mut(ino)?.dirty, offset, u64::MAX);
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its current bytes become durable.
    pub(crate) fn fsync(&mut self, fh: u64, datasync: bool) -> io::Result<()> {
        let ino = self.handle(fh)?.node;
        let node = self.node_mut(ino)?;
        if datasync {
            node.counters.fdatasyncs += 1;
        } else {
            node.counters.fsyncs += 1;
        }
        if node.kind == Kind::File {
            self.sync_file(ino)?;
        }
        Ok(())
    }

    fn sync_file(&mut self, ino: Ino) -> io::Result<()> {
        let node = self.node_mut(ino)?;
        let Some((start, end)) = node.dirty.take() else {
            return Ok(());
        };
        let file = File::open(node.proc_path()?)?;
        let size = file.metadata()?.len();
        let Durable::Content(bytes) = &mut node.durable else {
            unreachable!("a written file is materialized");
        };
        bytes.resize(size as usize, 0);
        let end = end.min(size);
        if start < end {
            file.read_exact_at(&mut bytes[start as usize..end as usize], start)?;
        }
        Ok(())
    }

    /// `fsync` of a directory: its current names become durable. A name
    /// that was durable before keeps its sequence number; a new one gets
    /// this sync's.
    pub(crate) fn fsyncdir(&mut self, ino: Ino, datasync: bool) -> io::Result<()> {
        self.materialize(ino)?;
        let names = self.current_names(ino)?;
        self.seq += 1;
        let seq = self.seq;
        let node = self.node_mut(ino)?;
        if datasync {
            node.counters.fdatasyncs += 1;
        } else {
            node.counters.fsyncs += 1;
        }
        let Durable::Names(old) = &node.durable else {
            unreachable!("a directory is materialized as names");
        };
        let new = names
            .into_iter()
            .map(|(name, child)| {
                let seq = match old.get(&name) {
                    Some(&(was, s)) if was == child => s,
                    _ => seq,
                };
                (name, (child, seq))
            })
            .collect();
        node.durable = Durable::Names(new);
        Ok(())
    }

    /// Opens a directory: its entries as they are now.
    pub(crate) fn opendir(&mut self, ino: Ino) -> io::Result<u64> {
        let names = self.current_names(ino)?;
        let mut entries = vec![(".".into(), ino, Kind::Dir), ("..".into(), ino, Kind::Dir)];
        for (name, child) in names {
            entries.push((name, child, self.node(child)?.kind));
        }
        let fh = self.add_handle(ino, None, 0);
        self.handles.get_mut(&fh).expect("just added").entries = entries;
        Ok(fh)
    }

    pub(crate) fn setattr_mode(&mut self, ino: Ino, mode: u32) -> io::Result<()> {
        let path = self.node(ino)?.proc_path()?;
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            &path,
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )?;
        Ok(())
    }

    pub(crate) fn setattr_owner(
        &mut self,
        ino: Ino,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        let fd = self.node(ino)?.fd.as_ref().ok_or_else(gone)?;
        nix::unistd::fchownat(
            fd,
            "",
            uid.map(nix::unistd::Uid::from_raw),
            gid.map(nix::unistd::Gid::from_raw),
            nix::fcntl::AtFlags::AT_EMPTY_PATH,
        )?;
        Ok(())
    }

    pub(crate) fn setattr_times(
        &mut self,
        ino: Ino,
        atime: nix::sys::time::TimeSpec,
        mtime: nix::sys::time::TimeSpec,
    ) -> io::Result<()> {
        let path = self.node(ino)?.proc_path()?;
        nix::sys::stat::utimensat(
            nix::fcntl::AT_FDCWD,
            &path,
            &atime,
            &mtime,
            nix::sys::stat::UtimensatFlags::FollowSymlink,
        )?;
        Ok(())
    }

    pub(crate) fn statfs(&self) -> io::Result<nix::sys::statvfs::Statvfs> {
        let fd = self.node(ROOT)?.fd.as_ref().ok_or_else(gone)?;
        Ok(nix::sys::statvfs::fstatvfs(fd)?)
    }
}

/// Widens the covering range `dirty` by `start..end`.
fn widen(dirty: &mut Option<(u64, u64)>, start: u64, end: u64) {
    *dirty = Some(match *dirty {
        Some((s, e)) => (s.min(start), e.max(end)),
        None => (start, end),
    });
}
