//! One reading of `/proc/<pid>/stat`: how every program here tells a
//! process from a later one that reuses its pid (the start time), finds its
//! group and parent, and tells a zombie from a live process.
//!
//! The comm field (2) is in parentheses and may itself contain spaces, `)`
//! and bytes that are not UTF-8 (a process can name itself anything), so the
//! fixed fields are taken from after the LAST `)`.

use std::io;

/// The fields of a stat line that turncut's programs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Field 1.
    pub pid: i32,
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, `T`, …
    pub state: char,
    /// Field 4.
    pub ppid: i32,
    /// Field 5.
    pub pgid: i32,
    /// Field 22: clock ticks after boot at which the process started; a
    /// recycled pid has a different value.
    pub start_time: u64,
}

impl Stat {
    /// A zombie or a dead task: it runs nothing any more.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Why a stat line could not be understood.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StatParseError {
    #[error("no ')' closes the comm field")]
    MissingCommEnd,
    #[error("field {field} ({name}) is missing")]
    MissingField { field: usize, name: &'static str },
    #[error("field {field} ({name}) is not valid: {value:?}")]
    BadField {
        field: usize,
        name: &'static str,
        value: String,
    },
    #[error("the stat line is for pid {found}, not {expected}")]
    PidMismatch { expected: i32, found: i32 },
}

/// Parses the contents of `/proc/<pid>/stat`, checking it is `pid`'s.
pub fn parse(pid: i32, contents: &[u8]) -> Result<Stat, StatParseError> {
    let close = contents
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(StatParseError::MissingCommEnd)?;
    let head = &contents[..close];
    let pid_end = head
        .iter()
        .position(|&b| b == b' ')
        .ok_or(missing(1, "pid"))?;
    let found: i32 = parse_field(&head[..pid_end], 1, "pid")?;
    if found != pid {
        return Err(StatParseError::PidMismatch {
            expected: pid,
            found,
        });
    }
    let tail = std::str::from_utf8(&contents[close + 1..])
        .map_err(|_| bad(3, "state", &contents[close + 1..]))?;
    // Index 0 of the tail is field 3, so field n is at index n - 3.
    let fields: Vec<&str> = tail.split_ascii_whitespace().collect();
    let field = |n: usize, name: &'static str| -> Result<&str, StatParseError> {
        fields.get(n - 3).copied().ok_or(missing(n, name))
    };
    let state_text = field(3, "state")?;
    let mut chars = state_text.chars();
    let state = match (chars.next(), chars.next()) {
        (Some(c), None) => c,
        _ => return Err(bad(3, "state", state_text.as_bytes())),
    };
    Ok(Stat {
        pid,
        state,
        ppid: parse_field(field(4, "ppid")?.as_bytes(), 4, "ppid")?,
        pgid: parse_field(field(5, "pgrp")?.as_bytes(), 5, "pgrp")?,
        start_time: parse_field(field(22, "starttime")?.as_bytes(), 22, "starttime")?,
    })
}

/// Reads `pid`'s stat line: `NotFound` when there is no such process,
/// `InvalidData` when the line cannot be understood, `InvalidInput` for a pid
/// that is not a process id (0 or negative mean groups to `kill`).
pub fn read(pid: i32) -> io::Result<Stat> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        ));
    }
    let contents = std::fs::read(format!("/proc/{pid}/stat"))?;
    parse(pid, &contents).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The start time of `pid` while it is alive and not a zombie.
pub fn live_start_time(pid: u32) -> Option<u64> {
    let stat = read(i32::try_from(pid).ok()?).ok()?;
    (!stat.is_dead()).then_some(stat.start_time)
}

/// The parent of `pid`, if it exists.
pub fn parent_of(pid: i32) -> Option<i32> {
    read(pid).ok().map(|s| s.ppid)
}

/// The processes whose initial environment holds `entry` (`NAME=value`,
/// whole), in `/proc`'s order; processes whose environment cannot be read
/// (another user's, a kernel thread's, one gone since the listing) are
/// skipped, and only an unreadable `/proc` is an error. How the runner
/// finds a spawn marker and the harness a cell's tag: every entry of
/// `/proc` is opened relative to one descriptor of it and read into one
/// buffer, since the scan runs at every stop and kill of a wave.
pub fn pids_with_env(entry: &[u8]) -> io::Result<Vec<i32>> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::io::Read as _;
    let proc_dir = std::fs::File::open("/proc")?;
    let mut found = Vec::new();
    let mut environ = Vec::with_capacity(16 * 1024);
    for e in std::fs::read_dir("/proc")? {
        let e = e?;
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        let Ok(fd) = openat(
            &proc_dir,
            format!("{pid}/environ").as_str(),
            flags,
            Mode::empty(),
        ) else {
            continue;
        };
        environ.clear();
        if std::fs::File::from(fd).read_to_end(&mut environ).is_err() {
            continue;
        }
        if environ.split(|b| *b == 0).any(|v| v == entry) {
            found.push(pid);
        }
    }
    Ok(found)
}

fn missing(field: usize, name: &'static str) -> StatParseError {
    StatParseError::MissingField { field, name }
}

fn bad(field: usize, name: &'static str, bytes: &[u8]) -> StatParseError {
    StatParseError::BadField {
        field,
        name,
        value: String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn parse_field<T: std::str::FromStr>(
    bytes: &[u8],
    field: usize,
    name: &'static str,
) -> Result<T, StatParseError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(field, name, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(pid: i32, comm: &[u8], pgid: i32, start: u64) -> Vec<u8> {
        let mut l = format!("{pid} (").into_bytes();
        l.extend_from_slice(comm);
        l.extend_from_slice(
            format!(") S 1 {pgid} {pgid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0").as_bytes(),
        );
        l
    }

    #[test]
    fn fields_come_after_the_last_paren() {
        let stat = parse(4242, &line(4242, b"a) b) c", 4000, 987_654)).unwrap();
        let want = Stat {
            pid: 4242,
            state: 'S',
            ppid: 1,
            pgid: 4000,
            start_time: 987_654,
        };
        assert_eq!(stat, want);
        let odd = parse(7, &line(7, b"\xff) Z 1 2 3 (", 7, 11)).unwrap();
        assert_eq!((odd.state, odd.start_time), ('S', 11));
    }

    #[test]
    fn malformed_lines_are_refused() {
        assert_eq!(
            parse(1, b"1 (init S 1 1"),
            Err(StatParseError::MissingCommEnd)
        );
        assert_eq!(parse(1, b"1 (init) S 1 1 1"), Err(missing(22, "starttime")));
        assert!(matches!(
            parse(2, &line(1, b"init", 1, 5)),
            Err(StatParseError::PidMismatch {
                expected: 2,
                found: 1
            })
        ));
        let text = String::from_utf8(line(1, b"init", 1, 5))
            .unwrap()
            .replace(" 0 5 ", " 0 five ");
        assert!(matches!(
            parse(1, text.as_bytes()),
            Err(StatParseError::BadField { field: 22, .. })
        ));
    }

    #[test]
    fn this_process_reads_as_alive() {
        let me = std::process::id();
        let stat = read(me as i32).unwrap();
        assert!(!stat.is_dead());
        assert_eq!(live_start_time(me), Some(stat.start_time));
        assert_eq!(parent_of(me as i32), Some(stat.ppid));
        assert_eq!(read(0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    /// A child started with an entry is found by it, and by nothing else:
    /// not by a prefix of it, and not once it is gone.
    #[test]
    fn a_process_is_found_by_its_environment_entry() {
        let entry = format!("WIRE_SCAN_TEST={}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("WIRE_SCAN_TEST", std::process::id().to_string())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // The spawn returns once the child's exec has begun, which can be
        // before the kernel has set where its environment lies: until
        // then it reads empty.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let found = loop {
            let found = pids_with_env(entry.as_bytes()).unwrap();
            if !found.is_empty() || std::time::Instant::now() > until {
                break found;
            }
            std::thread::yield_now();
        };
        let prefix = pids_with_env(&entry.as_bytes()[..entry.len() - 1]).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, vec![pid]);
        assert!(!prefix.contains(&pid), "{prefix:?}");
        assert!(!pids_with_env(entry.as_bytes()).unwrap().contains(&pid));
    }
}
