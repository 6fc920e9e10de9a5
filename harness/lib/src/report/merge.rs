//! `turncut report merge`: the shards of one wave joined into one wave.

use super::ReportError;
use crate::model::{CellResult, WAVE_FORMAT_VERSION, WaveResult};

/// Joins the shards of one wave (`turncut report merge`) into one unsharded
/// wave with its cells sorted by cell id.
///
/// All waves must share the wave id and seed. When they are shards, every
/// shard `i/n` must be there exactly once, since a merged wave with a shard
/// missing would report a verdict over cells that never ran. A cell id seen
/// twice is an error. The merged `jobs` is the sum of the shards' (they ran
/// side by side on separate machines) and its wall time is the longest shard's.
pub fn merge(waves: Vec<WaveResult>) -> Result<WaveResult, ReportError> {
    let Some(first) = waves.first() else {
        return Err(ReportError::NothingToMerge);
    };
    let wave_id = first.wave_id.clone();
    let seed = first.seed;
    for other in &waves[1..] {
        if other.wave_id != wave_id || other.seed != seed {
            return Err(ReportError::WaveMismatch {
                first: wave_id,
                first_seed: seed,
                other: other.wave_id.clone(),
                other_seed: other.seed,
            });
        }
    }
    check_shards(&wave_id, &waves)?;

    let jobs = waves.iter().map(|w| w.jobs).sum();
    let run = first.run.clone();
    let not_run = waves.iter().map(|w| w.not_run).sum();
    // Every shard planned the same ids, so each skipped the same ones.
    let skipped = first.skipped.clone();
    let stopped: Vec<String> = waves
        .iter()
        .filter_map(|w| {
            let (i, n) = w.shard?;
            Some(format!("shard {i}/{n}: {}", w.stopped.as_ref()?))
        })
        .collect();
    let duration_ms = waves.iter().map(|w| w.duration_ms).max().unwrap_or(0);
    let mut cells: Vec<CellResult> = waves.into_iter().flat_map(|w| w.cells).collect();
    crate::model::sort_cells(&mut cells, |c| &c.spec.cell_id);
    if let Some(pair) = cells
        .windows(2)
        .find(|pair| pair[0].spec.cell_id == pair[1].spec.cell_id)
    {
        return Err(ReportError::DuplicateCell {
            wave_id,
            cell_id: pair[0].spec.cell_id.clone(),
        });
    }
    Ok(WaveResult {
        v: WAVE_FORMAT_VERSION,
        wave_id,
        seed,
        shard: None,
        jobs,
        duration_ms,
        cells,
        run,
        not_run,
        stopped: (!stopped.is_empty()).then(|| stopped.join("; ")),
        skipped,
    })
}

/// Checks that sharded waves are each shard of one run exactly once.
fn check_shards(wave_id: &str, waves: &[WaveResult]) -> Result<(), ReportError> {
    let shards: Vec<(u32, u32)> = waves.iter().filter_map(|w| w.shard).collect();
    if shards.is_empty() {
        return Ok(());
    }
    if shards.len() != waves.len() {
        return Err(ReportError::MixedSharding {
            wave_id: wave_id.to_owned(),
        });
    }
    let (_, count) = shards[0];
    let mut seen = std::collections::BTreeSet::new();
    for &(i, n) in &shards {
        if n != count {
            return Err(ReportError::ShardCountMismatch {
                wave_id: wave_id.to_owned(),
                first: format!("{}/{}", shards[0].0, count),
                other: format!("{i}/{n}"),
            });
        }
        if !seen.insert(i) {
            return Err(ReportError::DuplicateShard {
                wave_id: wave_id.to_owned(),
                shard: format!("{i}/{n}"),
            });
        }
    }
    // Counting distinct indexes works whether shards are numbered from 0 or 1.
    if seen.len() != count as usize {
        return Err(ReportError::MissingShards {
            wave_id: wave_id.to_owned(),
            found: seen.len(),
            count,
        });
    }
    Ok(())
}
