//! Where the vendored protocol specs live, and whether they still match the shared copies.
//!
//! The specs are vendored under `harness/conformance/specs/` so the crate builds and tests on
//! its own; the project also keeps a canonical copy in `shared/protocols/` next to the
//! workspace. This module only locates and compares files. It deliberately does not parse or
//! interpret any spec; that is the job of the per-protocol modules such as [`crate::codex`].

use std::path::{Path, PathBuf};

use crate::Error;

/// The environment variable that points the crate at a different specs directory, for
/// example to check the fakes against a newer release of a protocol before vendoring it.
pub const PROTOCOLS_DIR_ENV: &str = "TURNCUT_PROTOCOLS_DIR";

/// The directory holding the vendored specs: `$TURNCUT_PROTOCOLS_DIR` when set, otherwise
/// `specs/` inside this crate.
pub fn specs_dir() -> PathBuf {
    match std::env::var_os(PROTOCOLS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("specs"),
    }
}

/// The project's canonical copy of the specs, `<workspace root>/../shared/protocols`, when it
/// exists on this machine.
///
/// The workspace root is two levels above this crate. A checkout without the shared folder
/// (a CI runner, a contributor's clone) gets `None`, and drift checks are skipped there.
pub fn shared_protocols_dir() -> Option<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Canonicalizing first makes `..` mean the real parent even when the crate is reached
    // through a symlink.
    let manifest = manifest
        .canonicalize()
        .unwrap_or_else(|_| manifest.to_path_buf());
    let workspace_root = manifest.parent()?.parent()?;
    let shared = workspace_root.parent()?.join("shared").join("protocols");
    shared.is_dir().then_some(shared)
}

/// One file of the shared copy that the vendored copy does not reproduce byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// The file's path relative to both spec roots, with `/` separators.
    pub relative_path: String,
    /// What is wrong, as a lowercase fragment: "missing from the vendored copy" or
    /// "differs from the vendored copy".
    pub problem: &'static str,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.relative_path, self.problem)
    }
}

/// Lists every file under `shared` that is absent from `vendored` or differs from it.
///
/// Only this direction is checked: the shared copy is the source of truth, and an extra
/// vendored file (for example a spec this crate alone needs) is not drift.
pub fn spec_drift(shared: &Path, vendored: &Path) -> Result<Vec<Drift>, Error> {
    let mut files = Vec::new();
    collect_files(shared, Path::new(""), &mut files)?;
    files.sort();
    let mut drift = Vec::new();
    for relative in files {
        let shared_bytes = std::fs::read(shared.join(&relative)).map_err(|source| Error::Read {
            path: shared.join(&relative),
            source,
        })?;
        let relative_path = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        match std::fs::read(vendored.join(&relative)) {
            Ok(vendored_bytes) if vendored_bytes == shared_bytes => {}
            Ok(_) => drift.push(Drift {
                relative_path,
                problem: "differs from the vendored copy",
            }),
            Err(_) => drift.push(Drift {
                relative_path,
                problem: "missing from the vendored copy",
            }),
        }
    }
    Ok(drift)
}

fn collect_files(root: &Path, relative: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let dir = root.join(relative);
    let entries = std::fs::read_dir(&dir).map_err(|source| Error::Walk {
        path: dir.clone(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Walk {
            path: dir.clone(),
            source,
        })?;
        let child = relative.join(entry.file_name());
        // `metadata` follows symlinks, so a linked spec file is compared by its contents.
        let metadata = std::fs::metadata(entry.path()).map_err(|source| Error::Walk {
            path: entry.path(),
            source,
        })?;
        if metadata.is_dir() {
            collect_files(root, &child, out)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}
