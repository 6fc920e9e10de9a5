//! `turncut providers`: the real products of the `*-real` profiles, where
//! each is or why it is missing; `--install` installs the missing ones.
//! `turncut fidelity`: the crash-semantics differential against them.

use std::path::Path;
use std::time::Instant;

use harness::{fidelity, real};

use super::Code;

/// `turncut providers [--install]`: exit 0 when every real product is
/// there (after installing, with `--install`), 1 otherwise.
pub fn providers(install: bool, progress: &harness::progress::Progress) -> Code {
    let mut missing = 0;
    for r in &wire::profiles::REAL {
        let found = match real::locate(r) {
            Err(_) if install => real::install(r, progress),
            other => other,
        };
        match found {
            Ok(path) => println!(
                "{:<25} {}@{}  {}",
                r.name,
                r.package,
                r.version,
                path.display()
            ),
            Err(why) => {
                missing += 1;
                println!("{:<25} {}@{}  missing: {why}", r.name, r.package, r.version);
            }
        }
    }
    Code::pass_if(missing == 0)
}

/// The arguments of `turncut fidelity`.
#[derive(Debug, clap::Args)]
pub struct FidelityArgs {
    /// Only this real profile (runner-codex-real, runner-opencode-real, …).
    #[arg(long)]
    only: Option<String>,
    /// Play each moment N times on the real product (each distinct
    /// reading gets its rows, labelled with how often it came up).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=50))]
    runs: u32,
    /// Only these moments: `crash` (a SIGKILL at a point of the turn) or
    /// `upstream` (the model API fails the turn: every real product's but
    /// `opencode acp`'s, which has none) [default: both].
    #[arg(long, value_parser = ["crash", "upstream"])]
    moments: Option<String>,
}

/// `turncut fidelity [--only PROFILE] [--runs N] [--moments crash|upstream]`:
/// the differential table of each real product against its fake, one
/// product after the other.
pub fn fidelity(exe: &Path, args: &FidelityArgs, progress: &harness::progress::Progress) -> Code {
    let (only, runs) = (args.only.as_deref(), args.runs);
    let which = match args.moments.as_deref() {
        Some("crash") => fidelity::Moments::Crash,
        Some("upstream") => fidelity::Moments::Upstream,
        _ => fidelity::Moments::All,
    };
    let started = Instant::now();
    let chosen: Vec<&wire::profiles::Real> = wire::profiles::REAL
        .iter()
        .filter(|r| only.is_none_or(|o| o == r.name))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = wire::profiles::REAL.iter().map(|r| r.name).collect();
        eprintln!(
            "turncut fidelity: --only {}: no such real profile; use one of {}",
            only.unwrap_or_default(),
            names.join(", ")
        );
        return Code::BadInput;
    }
    let dir = match harness::tempdirs::tempdir("fidelity") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("turncut fidelity: {e}");
            return Code::HarnessError;
        }
    };
    let mut rows = Vec::new();
    let mut failed = false;
    for r in chosen {
        match product_rows(exe, r, &dir.path().join(r.name), runs, which, progress) {
            Ok(more) => rows.extend(more),
            Err(why) => {
                failed = true;
                eprintln!("{}: {why}", r.name);
            }
        }
    }
    print!("{}", fidelity::render(&rows));
    println!("wall {:.1} s", started.elapsed().as_secs_f64());
    Code::pass_if(!failed && !rows.iter().any(fidelity::Row::differs))
}

/// The rows of the real product `r` against its fake, in `product_dir`; an
/// error when it could not be compared, or compared no row of the moments
/// it has to play (no evidence of fidelity).
fn product_rows(
    exe: &Path,
    r: &'static wire::profiles::Real,
    product_dir: &Path,
    runs: u32,
    which: fidelity::Moments,
    progress: &harness::progress::Progress,
) -> Result<Vec<fidelity::Row>, String> {
    let planned = moments(r.name, which);
    eprintln!("{}: {planned} moments, {runs} run(s) each …", r.name);
    if which.upstream() && is_acp(r) && !fidelity::acp::upstream_compared(r) {
        eprintln!(
            "{}: no upstream-failure moments (`opencode acp`'s are not compared yet)",
            r.name
        );
    }
    let bin = real::locate_or_install(r, progress).map_err(|why| format!("not compared: {why}"))?;
    let rows = match r.name {
        "runner-codex-real" => fidelity::codex::rows(exe, &bin, product_dir, runs, which),
        _ if is_acp(r) => fidelity::acp::rows(exe, r, &bin, product_dir, runs, which),
        _ => fidelity::opencode::rows(exe, &bin, product_dir, runs, which),
    }?;
    if rows.is_empty() && planned > 0 {
        return Err(format!(
            "no row compared of its {planned} moments (nothing to judge the fake by)"
        ));
    }
    Ok(rows)
}

/// Whether `r` is an ACP agent (its differential is `fidelity::acp`'s).
fn is_acp(r: &wire::profiles::Real) -> bool {
    wire::profiles::facts(r.name).is_some_and(|f| f.protocol == wire::profiles::Protocol::Acp)
}

/// How many moments a product's differential plays.
fn moments(profile: &str, which: fidelity::Moments) -> usize {
    let upstream = match wire::profiles::real(profile) {
        Some(r) if !is_acp(r) || fidelity::acp::upstream_compared(r) => {
            wire::upstream::UpstreamFault::ALL.len()
        }
        _ => 0,
    };
    let crash = match profile {
        "runner-codex-real" => fidelity::codex::Moment::ALL.len(),
        _ if wire::profiles::real(profile).is_some_and(is_acp) => fidelity::acp::Moment::ALL.len(),
        _ => fidelity::opencode::Moment::ALL.len(),
    };
    usize::from(which.crash()) * crash + usize::from(which.upstream()) * upstream
}
