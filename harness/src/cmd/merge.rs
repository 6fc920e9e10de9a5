//! `turncut report merge`: the shards of one wave joined into one report.

use std::path::{Path, PathBuf};

use harness::report;

use super::reports::{clear_old_cells, store_wave};
use super::{Code, Exit, bad, emit, harness_err, prepare_out};

/// `turncut report merge`: joins the shards, copies their `cells/`
/// directories and writes the merged reports.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Code, Exit> {
    let mut waves = Vec::new();
    for d in dirs {
        waves.push(report::read_wave(&d.join("wave.json")).map_err(bad)?);
    }
    let merged = report::merge(waves).map_err(bad)?;
    prepare_out(out)?;
    clear_old_cells(out)?;
    for d in dirs {
        let cells = d.join("cells");
        if cells.is_dir() {
            copy_dir(&cells, &out.join("cells"))
                .map_err(|e| harness_err(format!("copying {}: {e}", cells.display())))?;
        }
    }
    store_wave(out, &merged, &harness::progress::Timelines::new())?;
    emit(&report::summary_markdown(&merged));
    Ok(Code::of(merged.verdict()))
}

/// Copies a directory tree (file modes too, so `reproduce.sh` stays
/// executable; symbolic links as links).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            // A kept cell's `kept` link to its directory stays a link.
            let _ = std::fs::remove_file(&target);
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
