//! `turncut providers`: the real products of the `*-real` profiles, where
//! each is or why it is missing; `--install` installs the missing ones.
//! `turncut fidelity`: the crash-semantics differential against them.

use std::path::Path;
use std::time::Instant;

use harness::{fidelity, real};

/// `turncut providers [--install]`: exit 0 when every real product is
/// there (after installing, with `--install`), 1 otherwise.
pub fn providers(install: bool) -> i32 {
    let mut missing = 0;
    for r in &wire::profiles::REAL {
        let found = match real::locate(r) {
            Err(_) if install => real::install(r),
            other => other,
        };
        match found {
            Ok(path) => println!(
                "{:<22} {}@{}  {}",
                r.name,
                r.package,
                r.version,
                path.display()
            ),
            Err(why) => {
                missing += 1;
                println!("{:<22} {}@{}  missing: {why}", r.name, r.package, r.version);
            }
        }
    }
    i32::from(missing > 0)
}

/// `turncut fidelity`: the differential table of the real codex against
/// the fake codex (OpenCode's moments are measured by
/// `tests/real_opencode.rs`, which prints its own table).
pub fn fidelity(exe: &Path) -> i32 {
    let started = Instant::now();
    let dir = match harness::tempdirs::tempdir("fidelity") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("turncut fidelity: {e}");
            return 3;
        }
    };
    let Some(r) = wire::profiles::real("runner-codex-real") else {
        return 3;
    };
    let rows = match real::locate_or_install(r)
        .map_err(|why| format!("not compared: {why}"))
        .and_then(|bin| fidelity::codex::rows(exe, &bin, &dir.path().join(r.name)))
    {
        Ok(rows) => rows,
        Err(why) => {
            eprintln!("{}: {why}", r.name);
            return 1;
        }
    };
    print!("{}", fidelity::render(&rows));
    println!(
        "wall {:.1} s (the OpenCode moments: cargo test -p harness --test real_opencode -- --nocapture)",
        started.elapsed().as_secs_f64()
    );
    i32::from(rows.iter().any(fidelity::Row::differs))
}
