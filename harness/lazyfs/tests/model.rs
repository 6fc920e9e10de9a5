//! The lazy file system against a pure model of itself: any sequence of
//! creates, writes, truncates, syncs, renames, links, unlinks, `mkdir`s and
//! `rmdir`s, played through a real mount, then a power cut, leaves exactly
//! the durable image the model computes; and before the cut the mount shows
//! exactly the model's current state. Two rounds per case: the mount that a
//! cut leaves serves the next round.
//!
//! The model (`Model`) is written apart from the implementation: inodes,
//! each directory's current names and durable names, each file's current and
//! durable bytes. A directory moved between two directories synced at
//! different times is where its newest durable entry says (`docs/lazyfs.md`).
//!
//! `PROPTEST_CASES=N` sets the number of cases (64 by default); a failure
//! prints the shrunk sequence of operations.

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use proptest::prelude::*;

/// The directories an operation can name, parents before children.
const DIRS: [&str; 5] = ["", "d", "e", "d/s", "e/s"];
/// The names of files in each directory.
const FILE_NAMES: [&str; 2] = ["a", "b"];

fn file_slot(i: usize) -> String {
    let dir = DIRS[i / FILE_NAMES.len() % DIRS.len()];
    let name = FILE_NAMES[i % FILE_NAMES.len()];
    join(dir, name)
}

fn dir_slot(i: usize) -> &'static str {
    // The root cannot be made, removed or moved.
    DIRS[1 + i % (DIRS.len() - 1)]
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(usize),
    Write {
        file: usize,
        offset: u16,
        len: u8,
        byte: u8,
    },
    Truncate {
        file: usize,
        len: u16,
    },
    Fsync(usize),
    Fdatasync(usize),
    Unlink(usize),
    Rename(usize, usize),
    Link(usize, usize),
    Mkdir(usize),
    Rmdir(usize),
    RenameDir(usize, usize),
    FsyncDir(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let f = 0..DIRS.len() * FILE_NAMES.len();
    let d = 0..DIRS.len() - 1;
    prop_oneof![
        3 => f.clone().prop_map(Op::Create),
        4 => (f.clone(), 0..96u16, 1..48u8, any::<u8>())
            .prop_map(|(file, offset, len, byte)| Op::Write { file, offset, len, byte }),
        1 => (f.clone(), 0..128u16).prop_map(|(file, len)| Op::Truncate { file, len }),
        3 => f.clone().prop_map(Op::Fsync),
        1 => f.clone().prop_map(Op::Fdatasync),
        2 => f.clone().prop_map(Op::Unlink),
        3 => (f.clone(), f.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (f.clone(), f).prop_map(|(a, b)| Op::Link(a, b)),
        2 => d.clone().prop_map(Op::Mkdir),
        1 => d.clone().prop_map(Op::Rmdir),
        1 => (d.clone(), d).prop_map(|(a, b)| Op::RenameDir(a, b)),
        3 => (0..DIRS.len()).prop_map(Op::FsyncDir),
    ]
}

/// One inode of the model.
#[derive(Clone, Debug)]
enum Node {
    File {
        now: Vec<u8>,
        durable: Vec<u8>,
    },
    Dir {
        now: BTreeMap<String, usize>,
        durable: BTreeMap<String, (usize, u64)>,
    },
}

/// What a path holds in an image.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Snap {
    Dir,
    File(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Model {
    nodes: Vec<Node>,
    seq: u64,
}

impl Model {
    /// A model whose every path in `image` is durable (as at a mount);
    /// `links` names the paths that are one inode (hard links), by a key.
    fn from_image(image: &BTreeMap<String, Snap>, links: &BTreeMap<String, u64>) -> Model {
        let mut m = Model {
            nodes: vec![Node::Dir {
                now: BTreeMap::new(),
                durable: BTreeMap::new(),
            }],
            seq: 0,
        };
        let mut by_key: BTreeMap<u64, usize> = BTreeMap::new();
        for (path, snap) in image {
            let (parent, name) = split(path);
            let parent = m.resolve(parent).expect("parents come first");
            let known = links.get(path).and_then(|k| by_key.get(k)).copied();
            let ino = known.unwrap_or_else(|| {
                m.nodes.push(match snap {
                    Snap::Dir => Node::Dir {
                        now: BTreeMap::new(),
                        durable: BTreeMap::new(),
                    },
                    Snap::File(b) => Node::File {
                        now: b.clone(),
                        durable: b.clone(),
                    },
                });
                m.nodes.len() - 1
            });
            if let Some(&k) = links.get(path) {
                by_key.insert(k, ino);
            }
            let Node::Dir { now, durable } = &mut m.nodes[parent] else {
                unreachable!()
            };
            now.insert(name.to_owned(), ino);
            durable.insert(name.to_owned(), (ino, 0));
        }
        m
    }

    fn resolve(&self, path: &str) -> Option<usize> {
        let mut at = 0;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            let Node::Dir { now, .. } = &self.nodes[at] else {
                return None;
            };
            at = *now.get(part)?;
        }
        Some(at)
    }

    fn is_dir(&self, path: &str) -> bool {
        self.resolve(path)
            .is_some_and(|i| matches!(self.nodes[i], Node::Dir { .. }))
    }

    fn is_file(&self, path: &str) -> bool {
        self.resolve(path)
            .is_some_and(|i| matches!(self.nodes[i], Node::File { .. }))
    }

    fn names(&mut self, dir: usize) -> &mut BTreeMap<String, usize> {
        let Node::Dir { now, .. } = &mut self.nodes[dir] else {
            panic!("not a directory")
        };
        now
    }

    fn file(&mut self, path: &str) -> (&mut Vec<u8>, &mut Vec<u8>) {
        let i = self.resolve(path).expect("exists");
        let Node::File { now, durable } = &mut self.nodes[i] else {
            panic!("not a file")
        };
        (now, durable)
    }

    fn add(&mut self, path: &str, node: Node) {
        let (parent, name) = split(path);
        self.nodes.push(node);
        let ino = self.nodes.len() - 1;
        let parent = self.resolve(parent).expect("parent exists");
        self.names(parent).insert(name.to_owned(), ino);
    }

    fn remove(&mut self, path: &str) -> usize {
        let (parent, name) = split(path);
        let parent = self.resolve(parent).expect("parent exists");
        self.names(parent).remove(name).expect("exists")
    }

    /// Whether `path` can be created: its parent is a directory and the
    /// name is free.
    fn creatable(&self, path: &str) -> bool {
        self.is_dir(split(path).0) && self.resolve(path).is_none()
    }

    /// Applies `op`; returns the paths it uses, or `None` when it is not
    /// valid in this state (then nothing changes and it is not played).
    fn apply(&mut self, op: &Op) -> Option<()> {
        match *op {
            Op::Create(f) => {
                let p = file_slot(f);
                self.creatable(&p).then(|| {
                    self.add(
                        &p,
                        Node::File {
                            now: vec![],
                            durable: vec![],
                        },
                    )
                })
            }
            Op::Write {
                file,
                offset,
                len,
                byte,
            } => {
                let p = file_slot(file);
                self.is_file(&p).then(|| {
                    let (now, _) = self.file(&p);
                    let end = offset as usize + len as usize;
                    if now.len() < end {
                        now.resize(end, 0);
                    }
                    now[offset as usize..end].fill(byte);
                })
            }
            Op::Truncate { file, len } => {
                let p = file_slot(file);
                self.is_file(&p)
                    .then(|| self.file(&p).0.resize(len as usize, 0))
            }
            Op::Fsync(f) | Op::Fdatasync(f) => {
                let p = file_slot(f);
                self.is_file(&p).then(|| {
                    let (now, durable) = self.file(&p);
                    *durable = now.clone();
                })
            }
            Op::Unlink(f) => {
                let p = file_slot(f);
                self.is_file(&p).then(|| {
                    self.remove(&p);
                })
            }
            Op::Rename(a, b) => {
                let (from, to) = (file_slot(a), file_slot(b));
                let ok = from != to
                    && self.is_file(&from)
                    && self.is_dir(split(&to).0)
                    && (self.resolve(&to).is_none() || self.is_file(&to));
                ok.then(|| {
                    let same = self.resolve(&from) == self.resolve(&to);
                    if !same {
                        if self.resolve(&to).is_some() {
                            self.remove(&to);
                        }
                        let ino = self.remove(&from);
                        let (parent, name) = split(&to);
                        let parent = self.resolve(parent).expect("checked");
                        self.names(parent).insert(name.to_owned(), ino);
                    }
                })
            }
            Op::Link(a, b) => {
                let (from, to) = (file_slot(a), file_slot(b));
                (self.is_file(&from) && self.creatable(&to)).then(|| {
                    let ino = self.resolve(&from).expect("checked");
                    let (parent, name) = split(&to);
                    let parent = self.resolve(parent).expect("checked");
                    self.names(parent).insert(name.to_owned(), ino);
                })
            }
            Op::Mkdir(d) => {
                let p = dir_slot(d);
                self.creatable(p).then(|| {
                    self.add(
                        p,
                        Node::Dir {
                            now: BTreeMap::new(),
                            durable: BTreeMap::new(),
                        },
                    )
                })
            }
            Op::Rmdir(d) => {
                let p = dir_slot(d);
                let empty = self.resolve(p).is_some_and(
                    |i| matches!(&self.nodes[i], Node::Dir { now, .. } if now.is_empty()),
                );
                empty.then(|| {
                    self.remove(p);
                })
            }
            Op::RenameDir(a, b) => {
                let (from, to) = (dir_slot(a), dir_slot(b));
                let ok =
                    self.is_dir(from) && self.creatable(to) && !to.starts_with(&format!("{from}/"));
                ok.then(|| {
                    let ino = self.remove(from);
                    let (parent, name) = split(to);
                    let parent = self.resolve(parent).expect("checked");
                    self.names(parent).insert(name.to_owned(), ino);
                })
            }
            Op::FsyncDir(d) => {
                let p = DIRS[d];
                let i = self.resolve(p).filter(|_| self.is_dir(p))?;
                self.seq += 1;
                let seq = self.seq;
                let Node::Dir { now, durable } = &mut self.nodes[i] else {
                    unreachable!()
                };
                *durable = now
                    .iter()
                    .map(|(name, &ino)| {
                        let s = match durable.get(name) {
                            Some(&(was, s)) if was == ino => s,
                            _ => seq,
                        };
                        (name.clone(), (ino, s))
                    })
                    .collect();
                Some(())
            }
        }
    }

    /// What the mount shows now.
    fn current(&self) -> BTreeMap<String, Snap> {
        let mut out = BTreeMap::new();
        let mut stack = vec![(0, String::new())];
        while let Some((dir, at)) = stack.pop() {
            let Node::Dir { now, .. } = &self.nodes[dir] else {
                unreachable!()
            };
            for (name, &ino) in now {
                let path = join(&at, name);
                match &self.nodes[ino] {
                    Node::Dir { .. } => {
                        out.insert(path.clone(), Snap::Dir);
                        stack.push((ino, path));
                    }
                    Node::File { now, .. } => {
                        out.insert(path, Snap::File(now.clone()));
                    }
                }
            }
        }
        out
    }

    /// What survives a power cut: from the root, durable names only; a
    /// directory where its newest durable entry puts it, once.
    fn durable(&self) -> BTreeMap<String, Snap> {
        let mut newest: BTreeMap<usize, (usize, String, u64)> = BTreeMap::new();
        for (parent, node) in self.nodes.iter().enumerate() {
            if let Node::Dir { durable, .. } = node {
                for (name, &(ino, seq)) in durable {
                    let dir = matches!(self.nodes[ino], Node::Dir { .. });
                    if dir && newest.get(&ino).is_none_or(|n| n.2 < seq) {
                        newest.insert(ino, (parent, name.clone(), seq));
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        let mut seen = HashSet::from([0]);
        let mut stack = vec![(0, String::new())];
        while let Some((dir, at)) = stack.pop() {
            let Node::Dir { durable, .. } = &self.nodes[dir] else {
                unreachable!()
            };
            for (name, &(ino, seq)) in durable {
                let path = join(&at, name);
                match &self.nodes[ino] {
                    Node::Dir { .. } => {
                        if newest[&ino] == (dir, name.clone(), seq) && seen.insert(ino) {
                            out.insert(path.clone(), Snap::Dir);
                            stack.push((ino, path));
                        }
                    }
                    Node::File { durable, .. } => {
                        out.insert(path, Snap::File(durable.clone()));
                    }
                }
            }
        }
        out
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Plays `op` (valid by the model) through the mount at `m`.
fn play(m: &Path, op: &Op) -> std::io::Result<()> {
    let open_rw = |p: &str| OpenOptions::new().write(true).open(m.join(p));
    match *op {
        Op::Create(f) => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.join(file_slot(f)))
            .map(drop),
        Op::Write {
            file,
            offset,
            len,
            byte,
        } => open_rw(&file_slot(file))?.write_all_at(&vec![byte; len as usize], offset.into()),
        Op::Truncate { file, len } => open_rw(&file_slot(file))?.set_len(len.into()),
        Op::Fsync(f) => File::open(m.join(file_slot(f)))?.sync_all(),
        Op::Fdatasync(f) => File::open(m.join(file_slot(f)))?.sync_data(),
        Op::Unlink(f) => std::fs::remove_file(m.join(file_slot(f))),
        Op::Rename(a, b) => std::fs::rename(m.join(file_slot(a)), m.join(file_slot(b))),
        Op::Link(a, b) => std::fs::hard_link(m.join(file_slot(a)), m.join(file_slot(b))),
        Op::Mkdir(d) => std::fs::create_dir(m.join(dir_slot(d))),
        Op::Rmdir(d) => std::fs::remove_dir(m.join(dir_slot(d))),
        Op::RenameDir(a, b) => std::fs::rename(m.join(dir_slot(a)), m.join(dir_slot(b))),
        Op::FsyncDir(d) => File::open(m.join(DIRS[d]))?.sync_all(),
    }
}

/// Each file under `root` with its inode number: which paths are one file.
fn inodes(root: &Path) -> BTreeMap<String, u64> {
    use std::os::unix::fs::MetadataExt as _;
    read_tree(root)
        .into_iter()
        .filter(|(_, s)| matches!(s, Snap::File(_)))
        .map(|(p, _)| {
            let ino = std::fs::symlink_metadata(root.join(&p))
                .expect("stat")
                .ino();
            (p, ino)
        })
        .collect()
}

/// Everything under `root`, as the model renders it.
fn read_tree(root: &Path) -> BTreeMap<String, Snap> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, at)) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read_dir") {
            let e = e.expect("entry");
            let path = join(&at, &e.file_name().to_string_lossy());
            if e.file_type().expect("type").is_dir() {
                out.insert(path.clone(), Snap::Dir);
                stack.push((e.path(), path));
            } else {
                out.insert(path, Snap::File(std::fs::read(e.path()).expect("read")));
            }
        }
    }
    out
}

fn initial() -> BTreeMap<String, Snap> {
    BTreeMap::from([
        ("a".to_owned(), Snap::File(b"at the mount".to_vec())),
        ("d".to_owned(), Snap::Dir),
        ("d/b".to_owned(), Snap::File(b"also at the mount".to_vec())),
        ("d/s".to_owned(), Snap::Dir),
    ])
}

fn write_tree(root: &Path, tree: &BTreeMap<String, Snap>) {
    for (path, snap) in tree {
        match snap {
            Snap::Dir => std::fs::create_dir(root.join(path)).expect("mkdir"),
            Snap::File(b) => std::fs::write(root.join(path), b).expect("write"),
        }
    }
}

fn run_case(rounds: &[Vec<Op>]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backing, mountpoint) = (dir.path().join("backing"), dir.path().join("mnt"));
    std::fs::create_dir(&backing).expect("mkdir");
    std::fs::create_dir(&mountpoint).expect("mkdir");
    write_tree(&backing, &initial());
    let mut fs = lazyfs::LazyFs::mount(&backing, &mountpoint).expect("mount");
    let mut model = Model::from_image(&initial(), &BTreeMap::new());
    for ops in rounds {
        for op in ops {
            if model.apply(op).is_some() {
                play(&mountpoint, op).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
            }
        }
        prop_assert_eq!(
            read_tree(&mountpoint),
            model.current(),
            "the mount before the cut"
        );
        fs.cut_power().expect("cut power");
        let durable = model.durable();
        prop_assert_eq!(
            read_tree(&backing),
            durable.clone(),
            "the backing directory after the cut"
        );
        prop_assert_eq!(
            read_tree(&mountpoint),
            durable.clone(),
            "the mount after the cut"
        );
        model = Model::from_image(&durable, &inodes(&backing));
    }
    fs.unmount().expect("unmount");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_power_cut_leaves_exactly_the_durable_image(
        rounds in prop::collection::vec(prop::collection::vec(op(), 0..40), 2)
    ) {
        run_case(&rounds)?;
    }
}

/// The model itself: a write synced, a rename not, a directory sync.
#[test]
fn the_model_keeps_only_what_was_synced() {
    let mut m = Model::from_image(&initial(), &BTreeMap::new());
    for op in [
        // Slot 1 is `b`, slot 0 `a`, slot 3 `d/b`, slot 5 `e/b`.
        Op::Create(1),
        Op::Write {
            file: 1,
            offset: 0,
            len: 2,
            byte: b'x',
        },
        Op::Fsync(1),
        Op::Write {
            file: 0,
            offset: 0,
            len: 2,
            byte: b'y',
        },
        Op::Rename(3, 5), // not valid: there is no `e`
        Op::FsyncDir(0),
    ] {
        m.apply(&op);
    }
    let durable = m.durable();
    assert_eq!(durable["a"], Snap::File(b"at the mount".to_vec()));
    assert_eq!(durable["b"], Snap::File(b"xx".to_vec()));
    assert_eq!(durable["d/b"], Snap::File(b"also at the mount".to_vec()));
}
