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

/// runnerd started with `product` as its one profile `name` (driver
/// `driver`, its model API at `model_url`), its state and logs under `dir`,
/// the credential the canary ending in `tag`, no cut armed: a real
/// product's task run as a controller runs it.
pub fn start_real_runner(
    dir: &Path,
    product: &harness::real::Product,
    (name, driver): (&str, &str),
    model_url: &str,
    tag: &str,
) -> harness::runner_client::RunnerProcess {
    let profiles = format!(
        "[profile.{name}]\ndriver = \"{driver}\"\ncommand = {}\n{}",
        serde_json::to_string(&product.command(model_url, "test").unwrap()).unwrap(),
        product.credential_lines()
    );
    std::fs::write(dir.join("profiles.toml"), profiles).unwrap();
    let extra = vec![
        "--profiles".to_owned(),
        dir.join("profiles.toml").display().to_string(),
        "--provider-idle-timeout-ms".to_owned(),
        "60000".to_owned(),
    ];
    let state = dir.join("state");
    let mut cmd = harness::runner_client::RunnerCommand::via(exe()).command(&state, &extra);
    cmd.env(
        wire::secret::CREDENTIAL_ENV,
        format!("{}{tag}", wire::secret::CANARY_PREFIX),
    )
    .env_remove(cutpoint::ENV_ARM)
    .env_remove(cutpoint::ENV_SOCKET);
    let stderr_log = dir.join("runnerd.stderr");
    harness::runner_client::RunnerProcess::start(
        &mut cmd,
        &state,
        &stderr_log,
        std::time::Duration::from_secs(30),
    )
    .unwrap()
}
