//! The reporters that store a wave rather than show it: [`ReportDir`] (the
//! report directory, `--out`: `wave.json`, `summary.md`, `junit.xml`,
//! `report.html`) and [`StepSummary`] (`summary.md` appended to
//! `$GITHUB_STEP_SUMMARY` on GitHub Actions). Both act on the wave's end
//! ([`ProgressEvent::WaveFinished`]) only; the per-cell directories (`cells/t###/`,
//! the evidence, which the stream does not carry) are the command's.

use std::path::{Path, PathBuf};

use super::{summary_markdown, write_wave_with};
use crate::progress::{ProgressEvent, Reporter};

/// Writes the report files of a finished wave into its directory.
pub struct ReportDir {
    dir: PathBuf,
    /// The first write that failed, for [`Reporter::finish`].
    error: Option<String>,
}

impl ReportDir {
    /// The reports of the wave go into `dir` (created if missing).
    pub fn new(dir: &Path) -> ReportDir {
        ReportDir {
            dir: dir.to_owned(),
            error: None,
        }
    }
}

impl Reporter for ReportDir {
    fn report(&mut self, event: &ProgressEvent<'_>) {
        if let ProgressEvent::WaveFinished { wave, timelines } = event
            && let Err(e) = write_wave_with(&self.dir, wave, timelines)
        {
            self.error.get_or_insert(e.to_string());
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        self.error.take().map_or(Ok(()), Err)
    }
}

/// Appends a finished wave's `summary.md` to `$GITHUB_STEP_SUMMARY`; a
/// failure to write it is said on stderr but fails nothing.
pub struct StepSummary {
    path: PathBuf,
}

impl StepSummary {
    /// The step summary of `$GITHUB_STEP_SUMMARY`, when it is set (GitHub
    /// Actions).
    pub fn from_env() -> Option<StepSummary> {
        std::env::var_os("GITHUB_STEP_SUMMARY").map(|p| StepSummary { path: p.into() })
    }
}

impl Reporter for StepSummary {
    fn report(&mut self, event: &ProgressEvent<'_>) {
        let ProgressEvent::WaveFinished { wave, .. } = event else {
            return;
        };
        use std::io::Write as _;
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(summary_markdown(wave).as_bytes()));
        if let Err(e) = written {
            eprintln!(
                "turncut: appending to $GITHUB_STEP_SUMMARY ({}): {e}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::{Progress, Timelines};

    #[test]
    fn the_report_directory_is_written_from_the_wave_s_end_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let progress = Progress::new(vec![Box::new(ReportDir::new(&dir))]);
        progress.note("planning");
        progress.emit(ProgressEvent::Batch { total: 1 });
        assert!(!dir.exists(), "nothing before the wave's end");
        let wave = super::super::tests::sample_wave();
        let timelines = Timelines::from([(wave.cells[0].spec.cell_id.clone(), "t".into())]);
        progress.emit(ProgressEvent::WaveFinished {
            wave: &wave,
            timelines: &timelines,
        });
        assert_eq!(progress.finish(), Ok(()));
        for f in [
            super::super::WAVE_JSON,
            super::super::SUMMARY_MD,
            super::super::JUNIT_XML,
            super::super::REPORT_HTML,
        ] {
            assert!(dir.join(f).is_file(), "{f}");
        }
        assert_eq!(
            super::super::read_wave(&dir.join("wave.json")).unwrap(),
            wave
        );
        // A directory that cannot be made is an error at the end, not a panic.
        let blocked = tmp.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        let progress = Progress::new(vec![Box::new(ReportDir::new(&blocked.join("out")))]);
        progress.emit(ProgressEvent::WaveFinished {
            wave: &wave,
            timelines: &timelines,
        });
        assert!(progress.finish().is_err());
    }
}
