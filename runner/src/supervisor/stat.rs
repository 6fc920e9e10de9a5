//! The one reader of `/proc/<pid>/stat` in the runner: a process's identity
//! (pid, process group, start time), its parent and its scheduler state,
//! and the numbered entries of `/proc`. Every question the supervisor asks
//! `/proc` about a process goes through [`read_stat`].
//!
//! It deliberately sends no signal and decides nothing: what a reading
//! means (alive, gone, recycled) is `liveness`'s.

use std::io;

use super::ProcessIdentity;

pub(super) use wire::procstat::StatParseError;

/// One reading of `/proc/<pid>/stat`: the identity plus the scheduler state,
/// which is needed to tell a zombie from a live process, and the parent,
/// which links a process to the provider that started it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StatSnapshot {
    pub(super) identity: ProcessIdentity,
    /// Field 4 (`ppid`).
    pub(super) ppid: i32,
    /// Field 3 (`state`): `R`, `S`, `D`, `Z`, `X`, ….
    pub(super) state: char,
}

/// Parses the contents of `/proc/<pid>/stat` (`wire::procstat`, the one
/// parser of every program here).
pub(super) fn parse_stat(pid: i32, contents: &[u8]) -> Result<StatSnapshot, StatParseError> {
    let stat = wire::procstat::parse(pid, contents)?;
    Ok(StatSnapshot {
        identity: ProcessIdentity {
            pid,
            pgid: stat.pgid,
            start_time: stat.start_time,
        },
        ppid: stat.ppid,
        state: stat.state,
    })
}

/// Reads and parses `/proc/<pid>/stat`: `NotFound` when there is no such
/// process, `InvalidData` when the line cannot be parsed, `InvalidInput` for
/// a pid that names no single process.
pub(super) fn read_stat(pid: i32) -> io::Result<StatSnapshot> {
    if pid <= 0 {
        // Pids 0 and below are never processes; `kill` would read them as
        // "my group" or "everyone", so they must never reach a signal call.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        ));
    }
    let contents = std::fs::read(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &contents).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads the identity of `pid` from `/proc/<pid>/stat`.
///
/// Errors with `NotFound` when there is no such process and with
/// `InvalidData` when the stat line cannot be parsed.
pub fn identity_of(pid: i32) -> io::Result<ProcessIdentity> {
    read_stat(pid).map(|snapshot| snapshot.identity)
}

/// Whether `error` says the process does not exist (no `/proc` entry, or
/// `ESRCH`).
pub(super) fn is_no_such_process(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH)
}

/// Whether this kernel lists a task's children in
/// `/proc/<pid>/task/<tid>/children` (`CONFIG_PROC_CHILDREN`).
pub(super) fn children_listed() -> bool {
    static LISTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LISTED.get_or_init(|| {
        let me = std::process::id();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// The children of `pid` now, from `/proc/<pid>/task/<tid>/children` of
/// each of its threads (a child belongs to the thread that forked it, or
/// to the one an orphan was handed to): the subtree only, where a scan of
/// `/proc` reads every process. Only where [`children_listed`]; none when
/// `pid` is gone.
pub fn children_of(pid: i32) -> Vec<i32> {
    if pid <= 0 {
        return Vec::new();
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        children.extend(
            list.split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok()),
        );
    }
    children
}

/// The pid an entry of `/proc` names, if it names a process.
pub(super) fn proc_pid(entry: &std::fs::DirEntry) -> Option<i32> {
    entry
        .file_name()
        .to_str()
        .and_then(|n| n.parse::<i32>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A realistic stat line with the given comm, pgrp and starttime.
    fn stat_line(pid: i32, comm: &[u8], pgrp: i32, start_time: u64) -> Vec<u8> {
        let mut line = format!("{pid} (").into_bytes();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") S 1 {pgrp} {pgrp} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {start_time} \
                 8192000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn parse_stat_splits_after_last_paren() {
        let line = stat_line(4242, b"a) b) c", 4000, 987_654);
        let snapshot = parse_stat(4242, &line).unwrap();
        assert_eq!(
            snapshot,
            StatSnapshot {
                identity: ProcessIdentity {
                    pid: 4242,
                    pgid: 4000,
                    start_time: 987_654,
                },
                ppid: 1,
                state: 'S',
            }
        );

        // A comm that is not UTF-8 and looks like further fields is still
        // skipped as a whole.
        let line = stat_line(7, b"\xff) Z 1 2 3 (", 7, 11);
        let snapshot = parse_stat(7, &line).unwrap();
        assert_eq!(snapshot.state, 'S');
        assert_eq!(snapshot.identity.start_time, 11);
    }

    #[test]
    fn parse_stat_rejects_malformed_lines() {
        assert_eq!(
            parse_stat(1, b"1 (init S 1 1"),
            Err(StatParseError::MissingCommEnd)
        );
        assert_eq!(
            parse_stat(1, b"1 (init) S 1 1 1"),
            Err(StatParseError::MissingField {
                field: 22,
                name: "starttime",
            })
        );
        assert!(matches!(
            parse_stat(2, &stat_line(1, b"init", 1, 5)),
            Err(StatParseError::PidMismatch {
                expected: 2,
                found: 1,
            })
        ));
        let mut line = stat_line(1, b"init", 1, 5);
        let text = String::from_utf8(line.clone())
            .unwrap()
            .replace(" 0 5 ", " 0 five ");
        line = text.into_bytes();
        assert!(matches!(
            parse_stat(1, &line),
            Err(StatParseError::BadField { field: 22, .. })
        ));
    }
}
