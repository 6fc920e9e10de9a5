//! Helpers shared by integration tests (`mod common;`); a test file uses
//! some of them.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The `turncut` under test.
pub fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_turncut"))
}

/// A runnerd that loses its state on every start: a script in `dir` that
/// deletes the database under `--state-dir` and then runs `turncut runnerd`.
/// A runner defect from the outside, for tests that the harness catches it.
pub fn forgetful_runnerd(dir: &Path) -> PathBuf {
    let wrapper = dir.join("forgetful-runnerd");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n# runnerd that forgets everything: its database goes before it starts.\n\
             prev=\nfor a in \"$@\"; do\n  [ \"$prev\" = --state-dir ] && rm -f \"$a\"/runner.sqlite3*\n  prev=$a\ndone\n\
             exec '{}' runnerd \"$@\"\n",
            exe().display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .expect("make the wrapper executable");
    wrapper
}

/// Says why a test skips (`skipped: …` on stdout), or fails it instead when
/// `TURNCUT_REQUIRE` (a comma-separated list) names `kind`: `.ci/run` lists
/// there what it installed or found (`seeded`, `fuse`, `real`, `npm`,
/// `chromium`, `node`, `python3`, `ts-runner`, `acpx-runner`, `freezer`), so a skip on CI
/// is a failure, never a quiet pass.
pub fn skip(kind: &str, why: &str) {
    let required = std::env::var("TURNCUT_REQUIRE").unwrap_or_default();
    assert!(
        !required.split(',').any(|r| r.trim() == kind),
        "TURNCUT_REQUIRE lists {kind}, but this test would skip: {why}"
    );
    println!("skipped: {why}");
}
