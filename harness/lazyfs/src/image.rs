//! The power cut itself: the durable image of a stopped mount, written into
//! a staging directory beside the backing one, compared with what the
//! backing holds (the changes the cut makes), then moved into its place.
//!
//! The image is what a walk from the root over durable names reaches: each
//! directory's names at its last sync, each file's bytes at its last sync. A
//! directory named by durable entries in two directories (moved, and both
//! directories synced at different times) appears where its newest entry
//! puts it; one that a walk reaches twice (a cycle of such moves) appears
//! once. A file with several durable names is one inode with several links.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use nix::sys::stat::{Mode, SFlag};

use crate::durable::{Durable, Ino, Kind, ROOT, State};

/// One path the cut changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Relative to the mount's root.
    pub path: String,
    pub kind: ChangeKind,
}

/// How the cut changed a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// A file's bytes went back to its last sync.
    Reverted {
        /// Its size before the cut.
        written_bytes: u64,
        /// Its size after.
        durable_bytes: u64,
    },
    /// A name not yet durable is gone (with everything under it).
    Gone,
    /// A durable name that had been removed or renamed away is back.
    Back,
    /// The name now names an inode of another kind.
    Replaced,
}

/// Writes the durable image of `state` over `backing`; returns what changed.
pub(crate) fn replace_with_durable(state: &mut State, backing: &Path) -> io::Result<Vec<Change>> {
    let name = backing
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = backing.with_file_name(format!(".{name}.lazyfs-cut-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::create_dir(&staging)?;
    write_image(state, &staging)?;
    let changes = diff(&snapshot(backing)?, &snapshot(&staging)?);
    for entry in std::fs::read_dir(backing)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    for entry in std::fs::read_dir(&staging)? {
        let entry = entry?;
        std::fs::rename(entry.path(), backing.join(entry.file_name()))?;
    }
    let mode = state.node(ROOT)?.mode & 0o7777;
    std::fs::set_permissions(backing, std::fs::Permissions::from_mode(mode))?;
    std::fs::remove_dir(&staging)?;
    Ok(changes)
}

/// Where each directory's newest durable entry puts it: (parent, name, seq).
fn newest_places(state: &State) -> HashMap<Ino, (Ino, OsString, u64)> {
    let mut best: HashMap<Ino, (Ino, OsString, u64)> = HashMap::new();
    for (&parent, node) in &state.nodes {
        let Durable::Names(names) = &node.durable else {
            continue;
        };
        for (name, &(child, seq)) in names {
            if state.nodes.get(&child).is_none_or(|c| c.kind != Kind::Dir) {
                continue;
            }
            if best.get(&child).is_none_or(|b| b.2 < seq) {
                best.insert(child, (parent, name.clone(), seq));
            }
        }
    }
    best
}

fn write_image(state: &mut State, staging: &Path) -> io::Result<()> {
    let places = newest_places(state);
    let mut written: HashMap<Ino, PathBuf> = HashMap::new();
    let mut visited = HashSet::from([ROOT]);
    let mut stack = vec![(ROOT, staging.to_path_buf())];
    while let Some((dir, at)) = stack.pop() {
        let names: Vec<(OsString, Ino, u64)> = match &state.node(dir)?.durable {
            Durable::Names(names) => names.iter().map(|(n, &(i, s))| (n.clone(), i, s)).collect(),
            _ => state
                .current_names(dir)?
                .into_iter()
                .map(|(n, i)| (n, i, 0))
                .collect(),
        };
        for (name, ino, seq) in names {
            let path = at.join(&name);
            let node = state.node(ino)?;
            let mode = node.mode & 0o7777;
            match node.kind {
                Kind::Dir => {
                    let here = places
                        .get(&ino)
                        .is_none_or(|p| *p == (dir, name.clone(), seq));
                    if here && visited.insert(ino) {
                        std::fs::create_dir(&path)?;
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                        stack.push((ino, path));
                    }
                }
                Kind::File => {
                    if let Some(first) = written.get(&ino) {
                        std::fs::hard_link(first, &path)?;
                        continue;
                    }
                    match &node.durable {
                        Durable::Content(bytes) => std::fs::write(&path, bytes)?,
                        // The unchanged inode itself, linked through its
                        // `/proc/self/fd` link (followed), not copied.
                        _ => nix::unistd::linkat(
                            nix::fcntl::AT_FDCWD,
                            &node.proc_path()?,
                            nix::fcntl::AT_FDCWD,
                            &path,
                            nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
                        )?,
                    }
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                    written.insert(ino, path);
                }
                Kind::Symlink => {
                    let target = node.target.clone().unwrap_or_default();
                    std::os::unix::fs::symlink(target, &path)?;
                }
                Kind::Special => {
                    let kind = SFlag::from_bits_truncate(node.mode & SFlag::S_IFMT.bits());
                    nix::sys::stat::mknod(&path, kind, Mode::from_bits_truncate(mode), node.rdev)?;
                }
            }
        }
    }
    Ok(())
}

/// What a path holds, for the comparison.
#[derive(PartialEq, Eq)]
enum Snap {
    Dir,
    File(Vec<u8>),
    Link(OsString),
    Other,
}

fn snapshot(root: &Path) -> io::Result<BTreeMap<String, Snap>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let ft = entry.file_type()?;
            let snap = if ft.is_dir() {
                stack.push((entry.path(), rel.clone()));
                Snap::Dir
            } else if ft.is_file() {
                Snap::File(std::fs::read(entry.path())?)
            } else if ft.is_symlink() {
                Snap::Link(std::fs::read_link(entry.path())?.into_os_string())
            } else {
                Snap::Other
            };
            out.insert(rel, snap);
        }
    }
    Ok(out)
}

/// The changes from `before` to `after`, a gone or returned directory
/// standing for everything under it.
fn diff(before: &BTreeMap<String, Snap>, after: &BTreeMap<String, Snap>) -> Vec<Change> {
    let mut changes: Vec<Change> = Vec::new();
    let paths: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for path in paths {
        let covered = changes.iter().any(|c| {
            matches!(
                c.kind,
                ChangeKind::Gone | ChangeKind::Back | ChangeKind::Replaced
            ) && path.starts_with(&format!("{}/", c.path))
        });
        if covered {
            continue;
        }
        let kind = match (before.get(path), after.get(path)) {
            (Some(_), None) => ChangeKind::Gone,
            (None, Some(_)) => ChangeKind::Back,
            (Some(Snap::File(b)), Some(Snap::File(a))) if a != b => ChangeKind::Reverted {
                written_bytes: b.len() as u64,
                durable_bytes: a.len() as u64,
            },
            (Some(b), Some(a)) if std::mem::discriminant(a) != std::mem::discriminant(b) => {
                ChangeKind::Replaced
            }
            (Some(Snap::Link(b)), Some(Snap::Link(a))) if a != b => ChangeKind::Replaced,
            _ => continue,
        };
        changes.push(Change {
            path: path.clone(),
            kind,
        });
    }
    changes
}
