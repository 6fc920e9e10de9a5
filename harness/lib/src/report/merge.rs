//! `turncut report merge`: the shards of one wave joined into one wave.

use super::ReportError;
use crate::model::{CellResult, Stages, WAVE_FORMAT_VERSION, WaveResult};

/// Joins the shards of one wave (`turncut report merge`) into one unsharded
/// wave with its cells sorted by cell id.
///
/// All waves must share the wave id and seed. When they are shards, every
/// shard `i/n` must be there exactly once, since a merged wave with a shard
/// missing would report a verdict over cells that never ran. A wave run in
/// two phases ([`Stages::Stage1`] shards, then the [`Stages::Stage2`] runs
/// of `turncut plan --stage2`) needs every shard of both phases. A cell id
/// seen twice is an error. The merged `jobs` is the sum of a phase's shards'
/// (they ran side by side on separate machines, the larger phase's count),
/// and its wall time the longest shard's of each phase, added.
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
    let phases = phases(&wave_id, &waves)?;
    for phase in &phases {
        check_shards(&wave_id, phase)?;
    }
    let jobs = phases
        .iter()
        .map(|p| p.iter().map(|w| w.jobs).sum::<usize>())
        .max()
        .unwrap_or(0);
    let duration_ms = phases
        .iter()
        .map(|p| p.iter().map(|w| w.duration_ms).max().unwrap_or(0))
        .sum();
    let run = first.run.clone();
    let not_run = waves.iter().map(|w| w.not_run).sum();
    let skipped = all_skipped(&waves);
    let stopped = stopped(&waves);
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
        stopped,
        skipped,
        stages: Stages::Both,
    })
}

/// What every wave skipped, each once: the plan's skipped ids go to shard
/// 1, the power-cut cells a shard's machine could not run to that shard.
fn all_skipped(waves: &[WaveResult]) -> Vec<crate::model::Skipped> {
    let mut skipped: Vec<crate::model::Skipped> = Vec::new();
    for s in waves.iter().flat_map(|w| &w.skipped) {
        if !skipped.contains(s) {
            skipped.push(s.clone());
        }
    }
    skipped
}

/// Why the waves that stopped early stopped, each named by its shard.
fn stopped(waves: &[WaveResult]) -> Option<String> {
    let stopped: Vec<String> = waves
        .iter()
        .filter_map(|w| {
            let why = w.stopped.as_ref()?;
            Some(match w.shard {
                Some((i, n)) => format!("shard {i}/{n}: {why}"),
                None => why.clone(),
            })
        })
        .collect();
    (!stopped.is_empty()).then(|| stopped.join("; "))
}

/// Joins the stage-1 shards of a wave run in two phases into the one stage
/// 1 that `turncut plan --stage2` plans stage 2 from, with the checks of
/// [`merge`] (every shard once, no cell twice). Every wave must have run
/// stage 1 alone.
pub fn merge_stage1(mut waves: Vec<WaveResult>) -> Result<WaveResult, ReportError> {
    for w in &mut waves {
        if w.stages != Stages::Stage1 {
            return Err(ReportError::StagesIncomplete {
                wave_id: w.wave_id.clone(),
                found: "a wave that did not run stage 1 alone".to_owned(),
                missing: "stage-1 shards only".to_owned(),
            });
        }
        // One phase joined on its own is the whole of that phase.
        w.stages = Stages::Both;
    }
    merge(waves)
}

/// The waves by phase: all of them when they ran both stages, else the
/// stage-1 runs and the stage-2 runs, both required unless stage 1 stopped
/// early.
fn phases<'a>(
    wave_id: &str,
    waves: &'a [WaveResult],
) -> Result<Vec<Vec<&'a WaveResult>>, ReportError> {
    let of = |stages: Stages| -> Vec<&WaveResult> {
        waves.iter().filter(|w| w.stages == stages).collect()
    };
    let (both, one, two) = (of(Stages::Both), of(Stages::Stage1), of(Stages::Stage2));
    let incomplete = |found: &str, missing: &str| ReportError::StagesIncomplete {
        wave_id: wave_id.to_owned(),
        found: found.to_owned(),
        missing: missing.to_owned(),
    };
    match (both.is_empty(), one.is_empty(), two.is_empty()) {
        (_, true, true) => Ok(vec![both]),
        (true, false, false) => Ok(vec![one, two]),
        (false, _, _) => Err(incomplete(
            "a wave that ran both stages",
            "stage-1 or stage-2 runs beside it",
        )),
        // A stage 1 that stopped early (--max-fail, an interrupt) has no
        // stage 2, as an unsharded wave that stopped in stage 1 has none.
        (true, false, true) if one.iter().any(|w| w.stopped.is_some() || w.not_run > 0) => {
            Ok(vec![one])
        }
        (true, false, true) => Err(incomplete(
            "stage-1 runs",
            "the stage-2 runs planned from them",
        )),
        (true, true, false) => Err(incomplete(
            "stage-2 runs",
            "the stage-1 runs they were planned from",
        )),
    }
}

/// Checks that sharded waves are each shard of one run exactly once.
fn check_shards(wave_id: &str, waves: &[&WaveResult]) -> Result<(), ReportError> {
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
