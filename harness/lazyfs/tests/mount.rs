//! A lazy mount's life, with real processes: a SIGKILLed owner leaves no
//! mount behind, a power cut with a process still inside is refused and
//! changes nothing, dropping the handle unmounts; and the cases of the model
//! that `docs/lazyfs.md` spells out (a replace by rename without a file
//! sync, a rename without a directory sync, a file written after its last
//! name went, `O_APPEND`).

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lazyfs::{ChangeKind, LazyFs};

const OWNER_ENV: &str = "LAZYFS_TEST_OWNER";
/// Set for an owner whose guard is this test binary exec'd
/// ([`guard_entry`]), not a fork.
const EXEC_GUARD_ENV: &str = "LAZYFS_TEST_EXEC_GUARD";
const WAIT: Duration = Duration::from_secs(10);

struct Rig {
    _dir: tempfile::TempDir,
    backing: PathBuf,
    mnt: PathBuf,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
    std::fs::create_dir(&backing).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    Rig {
        backing,
        mnt: mnt.canonicalize().expect("canonical"),
        _dir: dir,
    }
}

/// Whether `path` is a mount point in this process's mount table.
fn mounted(path: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let path = path.to_string_lossy();
    table.lines().any(|l| l.split(' ').nth(4) == Some(&*path))
}

/// Waits until `path` is no longer mounted: the mount table changing wakes
/// a poll of `/proc/self/mountinfo` (`POLLPRI`), so no fixed sleep.
fn wait_unmounted(path: &Path) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let table = File::open("/proc/self/mountinfo").expect("mountinfo");
    let deadline = Instant::now() + WAIT;
    while mounted(path) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds = [PollFd::new(table.as_fd(), PollFlags::POLLPRI)];
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let _ = poll(&mut fds, PollTimeout::from(ms));
    }
    true
}

/// The owner process: mounts, says so, waits to be killed.
fn owner(paths: &str) {
    let (backing, mnt) = paths.split_once(':').expect("BACKING:MNT");
    let (backing, mnt) = (Path::new(backing), Path::new(mnt));
    let fs = match std::env::var_os(EXEC_GUARD_ENV) {
        Some(_) => {
            let mut guard = lazyfs::GuardProgram::new(std::env::current_exe().expect("exe"));
            guard.args = ["--exact", "guard_entry", "--nocapture"]
                .map(Into::into)
                .to_vec();
            LazyFs::mount_guarded_by(backing, mnt, &guard)
        }
        None => LazyFs::mount(backing, mnt),
    }
    .expect("mount");
    println!("mounted");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(fs);
}

/// How the owner process runs.
enum As {
    /// As this test runs (root on CI: mount(2) and lazyfs's own guard).
    Itself,
    /// With a `PATH` that has no `fusermount3`: the mount needs no package.
    WithoutFusermount3,
    /// As `nobody`: only `fusermount3` can mount, and its helper guards.
    Nobody,
    /// With its guard exec'd (this binary's [`guard_entry`]).
    ExecGuard,
}

/// Runs test `name` of this binary as the owner of a mount of `r`, waits
/// until it mounted, SIGKILLs it, and checks that its mount goes and that
/// nothing it started stays (the guard is found by the owner's environment,
/// which a fork keeps).
fn kill_the_owner(name: &str, r: &Rig, how: As) {
    let paths = format!("{}:{}", r.backing.display(), r.mnt.display());
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    cmd.args(["--exact", name, "--nocapture"])
        .env(OWNER_ENV, &paths)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    match how {
        As::Itself => {}
        As::WithoutFusermount3 => {
            let empty = r.backing.parent().expect("rig dir").join("empty-path");
            std::fs::create_dir_all(&empty).expect("mkdir");
            cmd.env("PATH", &empty);
        }
        As::Nobody => {
            use std::os::unix::process::CommandExt as _;
            cmd.uid(65534).gid(65534);
        }
        As::ExecGuard => {
            cmd.env(EXEC_GUARD_ENV, "1");
        }
    }
    let mut child = cmd.spawn().expect("spawn the owner");
    // The test harness's own lines come first.
    let out = BufReader::new(child.stdout.take().expect("stdout"));
    let said = out.lines().map_while(Result::ok).any(|l| l == "mounted");
    assert!(said, "the owner mounted");
    assert!(mounted(&r.mnt), "the owner's mount is in the table");
    // An exec'd guard has its own environment (`GUARD_ENV` and `PATH`), not
    // the owner's, which a forked one keeps.
    let guard_entry = format!("{}={}", lazyfs::GUARD_ENV, r.mnt.display());
    let exec_guards = processes_with_env(&guard_entry);
    match how {
        As::ExecGuard => assert_eq!(exec_guards.len(), 1, "one exec'd guard"),
        _ => assert!(
            exec_guards.is_empty(),
            "{exec_guards:?}: the guard was exec'd"
        ),
    }
    child.kill().expect("SIGKILL the owner");
    child.wait().expect("reap the owner");
    assert!(
        wait_unmounted(&r.mnt),
        "the helper unmounts a dead owner's mount within {WAIT:?}"
    );
    let entry = format!("{OWNER_ENV}={paths}");
    for pid in processes_with_env(&entry).into_iter().chain(exec_guards) {
        assert!(
            wait_gone(pid),
            "process {pid} ({}) the owner started is still alive {WAIT:?} after it was killed",
            comm(pid)
        );
    }
}

/// Live processes (not zombies) whose initial environment holds `entry`.
fn processes_with_env(entry: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        });
        if !zombie && environ.split(|b| *b == 0).any(|v| v == entry.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Waits until process `pid` has exited: its pidfd becomes readable then.
fn wait_gone(pid: i32) -> bool {
    // SAFETY: pidfd_open with a pid and no flags; the descriptor is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return true; // Already gone.
    }
    // SAFETY: the descriptor was just opened and nothing else owns it.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = u16::try_from(WAIT.as_millis()).unwrap_or(u16::MAX);
    poll(&mut fds, PollTimeout::from(ms)).is_ok_and(|n| n == 1) || comm(pid).is_empty()
}

#[test]
fn a_killed_owner_leaves_no_mount_behind() {
    if let Ok(paths) = std::env::var(OWNER_ENV) {
        return owner(&paths);
    }
    kill_the_owner("a_killed_owner_leaves_no_mount_behind", &rig(), As::Itself);
}

/// The guard of an owner that passes a program of its own
/// (`LazyFs::mount_guarded_by`, as `turncut` does) is that program exec'd,
/// not a fork of the owner, and unmounts a SIGKILLed owner's mount all the
/// same.
#[test]
fn an_exec_guard_unmounts_a_killed_owners_mount() {
    if let Ok(paths) = std::env::var(OWNER_ENV) {
        return owner(&paths);
    }
    if let Some(why) = lazyfs::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    kill_the_owner(
        "an_exec_guard_unmounts_a_killed_owners_mount",
        &rig(),
        As::ExecGuard,
    );
}

/// The entry point of this binary exec'd as a mount's guard; in any other
/// run it returns at once.
#[test]
fn guard_entry() {
    lazyfs::serve_guard_if_asked();
}

/// As root, `fusermount3` is not needed: the owner mounts with mount(2) and
/// its own guard unmounts when it is SIGKILLed.
#[test]
fn a_root_owner_without_fusermount3_mounts_and_leaves_no_mount_behind() {
    if let Ok(paths) = std::env::var(OWNER_ENV) {
        return owner(&paths);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, so mount(2) cannot mount FUSE here");
        return;
    }
    assert_eq!(lazyfs::unavailable(), None, "root with /dev/fuse can mount");
    kill_the_owner(
        "a_root_owner_without_fusermount3_mounts_and_leaves_no_mount_behind",
        &rig(),
        As::WithoutFusermount3,
    );
}

/// A user who is not root mounts through `fusermount3`, whose
/// `auto_unmount` helper unmounts when the owner is SIGKILLed. Run as
/// `nobody` from root (the only way to reach that path on a root machine).
#[test]
fn a_user_who_is_not_root_mounts_through_fusermount3() {
    if let Ok(paths) = std::env::var(OWNER_ENV) {
        return owner(&paths);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can start the owner as another user");
        return;
    }
    if !std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("fusermount3").is_file())
    {
        eprintln!("skipped: fusermount3 is not on PATH (Debian: apt-get install fuse3)");
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata("/dev/fuse").map_or(0, |m| m.permissions().mode());
    if mode & 0o006 != 0o006 {
        eprintln!(
            "skipped: /dev/fuse (mode {:o}) is closed to other users here, so no user but root can use FUSE",
            mode & 0o777
        );
        return;
    }
    let r = rig();
    for dir in [r.backing.parent().expect("rig dir"), &r.backing, &r.mnt] {
        std::os::unix::fs::chown(dir, Some(65534), Some(65534)).expect("chown to nobody");
    }
    kill_the_owner(
        "a_user_who_is_not_root_mounts_through_fusermount3",
        &r,
        As::Nobody,
    );
}

#[test]
fn a_cut_with_a_process_inside_is_refused_and_changes_nothing() {
    let r = rig();
    let mut fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    std::fs::write(r.mnt.join("f"), "unsynced").expect("write");
    let open = File::open(r.mnt.join("f")).expect("open");
    let err = fs.cut_power().expect_err("a busy mount");
    match err {
        lazyfs::Error::Busy { pids, .. } => assert!(pids.contains(&std::process::id()), "{pids:?}"),
        other => panic!("{other}"),
    }
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("f")).expect("read"),
        "unsynced"
    );
    drop(open);
    let cut = fs.cut_power().expect("cut");
    assert_eq!(cut.changes.len(), 1, "{:?}", cut.changes);
    assert_eq!(cut.changes[0].kind, ChangeKind::Gone);
    assert!(!r.mnt.join("f").exists());
}

#[test]
fn dropping_the_handle_unmounts_and_keeps_every_write() {
    let r = rig();
    let fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    std::fs::write(r.mnt.join("f"), "never synced").expect("write");
    assert!(mounted(&r.mnt));
    drop(fs);
    assert!(wait_unmounted(&r.mnt));
    assert_eq!(
        std::fs::read_to_string(r.backing.join("f")).expect("read"),
        "never synced"
    );
}

fn sync_dir(path: &Path) {
    File::open(path)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

/// ext4 without `auto_da_alloc`: the rename is durable, the bytes are not.
#[test]
fn a_replace_by_rename_without_a_file_sync_leaves_an_empty_file() {
    let r = rig();
    std::fs::write(r.backing.join("config"), "old").expect("seed");
    let mut fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    std::fs::write(r.mnt.join("config.tmp"), "new").expect("write");
    std::fs::rename(r.mnt.join("config.tmp"), r.mnt.join("config")).expect("rename");
    sync_dir(&r.mnt);
    fs.cut_power().expect("cut");
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("config")).expect("read"),
        ""
    );
}

/// The file synced, its directory not: the old name and content are back.
#[test]
fn a_rename_without_a_directory_sync_is_undone() {
    let r = rig();
    std::fs::write(r.backing.join("config"), "old").expect("seed");
    let mut fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    let mut f = File::create(r.mnt.join("config.tmp")).expect("create");
    f.write_all(b"new").expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    std::fs::rename(r.mnt.join("config.tmp"), r.mnt.join("config")).expect("rename");
    let cut = fs.cut_power().expect("cut");
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("config")).expect("read"),
        "old"
    );
    assert!(!r.mnt.join("config.tmp").exists(), "{:?}", cut.changes);
}

/// A file whose last name went stays reachable by its open descriptor; a
/// sync of it makes its bytes durable, and its name comes back when the
/// unlink was never made durable.
#[test]
fn an_unlinked_file_synced_through_its_descriptor_comes_back_with_its_bytes() {
    let r = rig();
    let mut fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    let mut f = File::create(r.mnt.join("log")).expect("create");
    f.write_all(b"one").expect("write");
    f.sync_all().expect("fsync");
    sync_dir(&r.mnt);
    std::fs::remove_file(r.mnt.join("log")).expect("unlink");
    f.write_all(b" two").expect("write after the unlink");
    f.sync_all().expect("fsync after the unlink");
    drop(f);
    fs.cut_power().expect("cut");
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("log")).expect("read"),
        "one two"
    );
}

/// `O_APPEND` writes land at the end, and only the synced ones survive.
#[test]
fn appends_land_at_the_end_and_survive_only_when_synced() {
    let r = rig();
    std::fs::write(r.backing.join("journal"), "a\n").expect("seed");
    let mut fs = LazyFs::mount(&r.backing, &r.mnt).expect("mount");
    let mut f = OpenOptions::new()
        .append(true)
        .open(r.mnt.join("journal"))
        .expect("open");
    f.write_all(b"b\n").expect("append");
    f.sync_data().expect("fdatasync");
    f.write_all(b"c\n").expect("append");
    drop(f);
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("journal")).expect("read"),
        "a\nb\nc\n"
    );
    let cut = fs.cut_power().expect("cut");
    assert_eq!(
        std::fs::read_to_string(r.mnt.join("journal")).expect("read"),
        "a\nb\n"
    );
    let counters = fs.counters();
    assert_eq!(counters["journal"].fdatasyncs, 1, "{counters:?}");
    assert_eq!(counters["journal"].bytes_written, 4, "{counters:?}");
    assert_eq!(
        cut.changes[0].kind,
        ChangeKind::Reverted {
            written_bytes: 6,
            durable_bytes: 4
        }
    );
}
