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

/// `turncut fidelity`: the differential table of every real product that
/// is installed; a product that is not is reported as not compared.
pub fn fidelity(exe: &Path) -> i32 {
    let started = Instant::now();
    let dir = match harness::tempdirs::tempdir("fidelity") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("turncut fidelity: {e}");
            return 3;
        }
    };
    let mut rows = Vec::new();
    let mut incomplete = false;
    for r in &wire::profiles::REAL {
        let found = real::locate_or_install(r);
        let compared = match (r.bin, found) {
            (_, Err(why)) => Err(format!("not compared: {why}")),
            ("codex", Ok(bin)) => fidelity::codex::rows(exe, &bin, &dir.path().join(r.name)),
            ("opencode", Ok(bin)) => fidelity::opencode::rows(exe, &bin, &dir.path().join(r.name)),
            (other, Ok(_)) => Err(format!("no moments for {other}")),
        };
        match compared {
            Ok(mut more) => rows.append(&mut more),
            Err(why) => {
                incomplete = true;
                eprintln!("{}: {why}", r.name);
            }
        }
    }
    print!("{}", fidelity::render(&rows));
    println!("wall {:.1} s", started.elapsed().as_secs_f64());
    i32::from(incomplete || rows.iter().any(fidelity::Row::differs))
}
