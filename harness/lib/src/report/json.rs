//! `wave.json`: read back with its format version checked first.

use std::path::Path;

use serde::Deserialize;

use super::ReportError;
use crate::model::{WAVE_FORMAT_VERSION, WaveResult};

/// Reads a `wave.json`, checking its format version first so a file from
/// another turncut fails with a clear message instead of a field error.
pub fn read_wave(path: &Path) -> Result<WaveResult, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parse_error = |source| ReportError::Parse {
        path: path.to_path_buf(),
        source,
    };

    // Only the version is read first: a newer format may have changed every
    // other field, and "version 2 is not supported" beats "missing field x".
    #[derive(Deserialize)]
    struct VersionProbe {
        v: Option<serde_json::Value>,
    }
    let probe: VersionProbe = serde_json::from_str(&text).map_err(parse_error)?;
    match probe.v {
        None => {
            return Err(ReportError::MissingVersion {
                path: path.to_path_buf(),
            });
        }
        Some(v) if v.as_u64() != Some(u64::from(WAVE_FORMAT_VERSION)) => {
            return Err(ReportError::Version {
                path: path.to_path_buf(),
                found: v.to_string(),
                expected: WAVE_FORMAT_VERSION,
            });
        }
        Some(_) => {}
    }
    serde_json::from_str(&text).map_err(parse_error)
}
