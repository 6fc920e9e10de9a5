//! SQLite in WAL mode on a lazy mount, as runnerd's store runs: a writer
//! process commits rows one transaction each, is SIGKILLed, the power is
//! cut, and the database is opened again. With `synchronous=FULL` every
//! commit survives; with `synchronous=NORMAL` (which syncs the WAL only at a
//! checkpoint) the commits since the last checkpoint are gone. The writer is
//! this test binary again (`CHILD_ENV`), so the database is used through the
//! mount by a process that dies as a runner does, with its `-shm` mapped.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "LAZYFS_TEST_SQLITE_WRITER";
const ROWS: usize = 5;

/// The writer: opens the database named by [`CHILD_ENV`] with the
/// `synchronous` level in `LAZYFS_TEST_SYNCHRONOUS`, commits [`ROWS`] rows,
/// says so after each, then waits to be killed.
fn writer(db: &str) {
    let sync = std::env::var("LAZYFS_TEST_SYNCHRONOUS").expect("the level");
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.pragma_update(None, "journal_mode", "wal")
        .expect("wal");
    conn.pragma_update(None, "synchronous", &sync)
        .expect("synchronous");
    for i in 0..ROWS {
        conn.execute("INSERT INTO t (n) VALUES (?1)", [i as i64])
            .expect("insert");
        println!("committed {i}");
    }
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    unreachable!("the writer is killed, never told to go on");
}

/// Opens `db` in this process, the one that serves the mount, in exclusive
/// locking mode: SQLite then keeps the WAL index on the heap and never maps
/// the `-shm` file. A mapping of a file on our own mount, in the process
/// whose thread answers FUSE, deadlocks: an munmap holds the address space
/// while the writeback it waits for needs the FUSE thread, which waits for
/// the address space to copy its reply (seen: two tests stuck in D state).
fn open_here(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.pragma_update(None, "locking_mode", "exclusive")
        .expect("exclusive locking");
    conn
}

fn rows(db: &Path) -> usize {
    let conn = open_here(db);
    conn.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))
        .expect("the table, created before the writer, is durable") as usize
}

/// Runs the writer at `synchronous` on a lazy mount, kills it after its
/// last commit, cuts the power, and returns the rows left.
fn rows_after_cut(synchronous: &str, test: &str) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
    std::fs::create_dir(&backing).expect("mkdir");
    std::fs::create_dir(&mnt).expect("mkdir");
    let started = std::time::Instant::now();
    let mut fs = lazyfs::LazyFs::mount(&backing, &mnt).expect("mount");
    eprintln!("mounted in {:?}", started.elapsed());
    let db = mnt.join("runner.sqlite3");
    {
        // The table, made durable by a clean close (a checkpoint, synced).
        let conn = open_here(&db);
        conn.pragma_update(None, "journal_mode", "wal")
            .expect("wal");
        conn.execute_batch("CREATE TABLE t (n INTEGER)")
            .expect("create");
    }
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &db)
        .env("LAZYFS_TEST_SYNCHRONOUS", synchronous)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the writer");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let last = format!("committed {}", ROWS - 1);
    let mut seen = false;
    for line in stdout.lines() {
        if line.expect("a line") == last {
            seen = true;
            break;
        }
    }
    assert!(seen, "the writer committed every row");
    child.kill().expect("SIGKILL the writer");
    child.wait().expect("reap the writer");
    let cut = fs.cut_power().expect("cut power");
    eprintln!(
        "synchronous={synchronous}: cut in {:?}: {:?}",
        cut.took, cut.changes
    );
    let left = rows(&db);
    fs.unmount().expect("unmount");
    left
}

#[test]
fn wal_commits_survive_a_power_cut_with_synchronous_full() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        return writer(&db);
    }
    let test = "wal_commits_survive_a_power_cut_with_synchronous_full";
    assert_eq!(rows_after_cut("FULL", test), ROWS);
}

#[test]
fn wal_commits_since_the_checkpoint_are_lost_with_synchronous_normal() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        return writer(&db);
    }
    let test = "wal_commits_since_the_checkpoint_are_lost_with_synchronous_normal";
    assert_eq!(rows_after_cut("NORMAL", test), 0);
}
