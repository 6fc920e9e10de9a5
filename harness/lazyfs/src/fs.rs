//! The FUSE side: each kernel request as a call on the mount's
//! [`State`], its answer or its errno sent back.
//!
//! The state sits behind one mutex, shared with the [`crate::LazyFs`] that
//! reads its counters and takes it back at a power cut; while the mount
//! serves, the one FUSE thread is the only one that changes it. The kernel
//! checks permissions (`default_permissions`) and keeps POSIX locks itself
//! (no `FUSE_POSIX_LOCKS`), so neither is here. Writes reach the backing file
//! before the reply (no writeback cache); opens keep the page cache
//! (`FOPEN_KEEP_CACHE`), which is safe because nothing else writes the
//! backing directory while it is mounted, and which lets processes share a
//! `MAP_SHARED` mapping (SQLite's `-shm`) coherently.

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use nix::sys::stat::FileStat;
use nix::sys::time::TimeSpec;

use crate::durable::{Ino, State};

/// How long the kernel may cache names and attributes. Only this mount
/// changes the backing directory, so the kernel's copy stays right; a power
/// cut mounts afresh, with empty caches.
const TTL: Duration = Duration::from_secs(1);

pub(crate) struct Fs {
    pub(crate) state: Arc<Mutex<State>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
    } else {
        UNIX_EPOCH
    }
}

pub(crate) fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn attr(ino: Ino, st: &FileStat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: file_type(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timespec(t: Option<TimeOrNow>) -> TimeSpec {
    match t {
        None => TimeSpec::UTIME_OMIT,
        Some(TimeOrNow::Now) => TimeSpec::UTIME_NOW,
        Some(TimeOrNow::SpecificTime(t)) => {
            TimeSpec::from(t.duration_since(UNIX_EPOCH).unwrap_or_default())
        }
    }
}

impl Fs {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> io::Result<T>) -> Result<T, Errno> {
        let mut state = self.state.lock().expect("lazyfs state");
        f(&mut state).map_err(errno)
    }

    fn entry(&self, reply: ReplyEntry, f: impl FnOnce(&mut State) -> io::Result<(Ino, FileStat)>) {
        match self.with(f) {
            Ok((ino, st)) => reply.entry(&TTL, &attr(ino, &st), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn empty(&self, reply: ReplyEmpty, f: impl FnOnce(&mut State) -> io::Result<()>) {
        match self.with(f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, |s| s.lookup(parent.0, name));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.state
            .lock()
            .expect("lazyfs state")
            .forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|s| s.node(ino.0)?.stat()) {
            Ok(st) => reply.attr(&TTL, &attr(ino.0, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = ino.0;
        let done = self.with(|s| {
            if let Some(mode) = mode {
                s.setattr_mode(ino, mode)?;
            }
            if uid.is_some() || gid.is_some() {
                s.setattr_owner(ino, uid, gid)?;
            }
            if let Some(size) = size {
                s.truncate_path(ino, size)?;
            }
            if atime.is_some() || mtime.is_some() {
                s.setattr_times(ino, timespec(atime), timespec(mtime))?;
            }
            s.node(ino)?.stat()
        });
        match done {
            Ok(st) => reply.attr(&TTL, &attr(ino, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.with(|s| Ok(s.node(ino.0)?.target.clone())) {
            Ok(Some(target)) => reply.data(target.as_encoded_bytes()),
            Ok(None) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |s| s.mknod(parent.0, name, mode, rdev));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |s| s.mkdir(parent.0, name, mode));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.unlink(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.unlink(parent.0, name, true));
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |s| s.symlink(parent.0, link_name, target));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| {
            s.rename((parent.0, name), (newparent.0, newname), flags.bits())
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(reply, |s| s.link(ino.0, newparent.0, newname));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| s.open(ino.0, flags.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|s| s.read(fh.0, offset, size)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|s| s.write(fh.0, offset, data)) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close makes nothing durable.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| {
            s.release(fh.0);
            Ok(())
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| s.fsync(fh.0, datasync));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| s.opendir(ino.0)) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let state = self.state.lock().expect("lazyfs state");
        let handle = match state.handle(fh.0) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(e)),
        };
        for (i, (name, ino, _)) in handle.entries.iter().enumerate().skip(offset as usize) {
            let mode = state.node(*ino).map_or(libc::S_IFREG, |n| n.mode);
            if reply.add(INodeNo(*ino), i as u64 + 1, file_type(mode), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| {
            s.release(fh.0);
            Ok(())
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| s.fsyncdir(ino.0, datasync));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|s| s.statfs()) {
            Ok(v) => reply.statfs(
                v.blocks(),
                v.blocks_free(),
                v.blocks_available(),
                v.files(),
                v.files_free(),
                v.block_size() as u32,
                v.name_max() as u32,
                v.fragment_size() as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.with(|s| s.create(parent.0, name, mode, flags)) {
            Ok((ino, st, fh)) => reply.created(
                &TTL,
                &attr(ino, &st),
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| s.fallocate(fh.0, offset, length, mode));
    }
}
