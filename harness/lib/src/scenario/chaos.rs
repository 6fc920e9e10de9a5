//! A scenario's `[chaos]` table: which points it cuts (`cut`), with which
//! faults, a `recut`, and the `schedules` every wave runs; parsed and
//! validated before anything runs, each error at its place.

use serde::Deserialize;
use toml::Spanned;

use super::{Ctx, CutSelection, OwnSchedule, ScenarioError, did_you_mean};
use crate::model::Fault;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChaos {
    #[serde(default)]
    pub(super) cut: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub(super) faults: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(super) recut: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) schedules: Option<Vec<Spanned<String>>>,
}

/// `[chaos] schedules`: each a `--schedule` string, parsed here; whether
/// its points happen is checked once the boundaries are known.
pub(super) fn parse_schedules(
    ctx: &Ctx<'_>,
    list: &[Spanned<String>],
) -> Result<Vec<OwnSchedule>, ScenarioError> {
    let mut out = Vec::new();
    for s in list {
        let events = crate::model::parse_schedule(s.get_ref())
            .map_err(|e| ctx.err(s.span(), format!("schedules: {e}")))?;
        out.push((events, wire::script::line_col(ctx.text, s.span().start)));
    }
    Ok(out)
}

/// The `[chaos]` table: the cut selection, the faults and the `recut`;
/// the place of each listed cut point goes into `cut_places`.
pub(super) fn parse_chaos(
    ctx: &Ctx<'_>,
    ch: &RawChaos,
    cut_places: &mut std::collections::BTreeMap<String, (usize, usize)>,
) -> Result<(CutSelection, Vec<Fault>, Option<crate::model::Cut>), ScenarioError> {
    let recut = match &ch.recut {
        None => None,
        Some(r) => Some(parse_recut(ctx, r)?),
    };
    let cut = match &ch.cut {
        None => CutSelection::EveryBoundary,
        Some(v) => parse_cut_selection(ctx, v, cut_places)?,
    };
    let faults = match &ch.faults {
        None => Fault::DEFAULT.to_vec(),
        Some(list) => parse_faults(ctx, list, &cut)?,
    };
    Ok((cut, faults, recut))
}

/// `recut`: one point such as `runner.turn_accepted.persisted#1`.
fn parse_recut(ctx: &Ctx<'_>, r: &Spanned<String>) -> Result<crate::model::Cut, ScenarioError> {
    let arms =
        cutpoint::parse_arm(r.get_ref()).map_err(|e| ctx.err(r.span(), format!("recut: {e}")))?;
    match arms.as_slice() {
        [a] => Ok(crate::model::Cut {
            point: a.point.clone(),
            n: a.n,
        }),
        _ => Err(ctx.err(
            r.span(),
            "recut takes one point such as \"runner.turn_accepted.persisted#1\"",
        )),
    }
}

/// `cut`: `"every-boundary"`, `"none"` or a list of point names (each
/// placed in `cut_places`).
fn parse_cut_selection(
    ctx: &Ctx<'_>,
    v: &Spanned<toml::Value>,
    cut_places: &mut std::collections::BTreeMap<String, (usize, usize)>,
) -> Result<CutSelection, ScenarioError> {
    let items = match v.get_ref() {
        toml::Value::String(s) if s == "every-boundary" => return Ok(CutSelection::EveryBoundary),
        toml::Value::String(s) if s == "none" => return Ok(CutSelection::None),
        toml::Value::Array(items) => items,
        _ => {
            return Err(ctx.err(
                v.span(),
                "cut must be \"every-boundary\", \"none\" or a list of point names",
            ));
        }
    };
    let mut names = Vec::new();
    for it in items {
        match it.as_str() {
            Some(s) if s.contains('.') && !s.contains('#') => names.push(s.to_owned()),
            _ => {
                return Err(ctx.err(
                    v.span(),
                    "cut lists point names such as \"runner.turn_intent.persisted\" (without #N: every occurrence is cut)",
                ));
            }
        }
    }
    for n in &names {
        let span = v.span();
        let at = ctx.text[span.clone()]
            .find(&format!("\"{n}\""))
            .map_or(span.start, |i| span.start + i);
        cut_places.insert(n.clone(), wire::script::line_col(ctx.text, at));
    }
    if names.is_empty() {
        return Err(ctx.err(
            v.span(),
            "cut = [] cuts nothing; write cut = \"none\" for a clean run only",
        ));
    }
    Ok(CutSelection::Points(names))
}

/// `faults`: known faults, none twice; empty only with `cut = "none"`.
fn parse_faults(
    ctx: &Ctx<'_>,
    list: &Spanned<Vec<Spanned<String>>>,
    cut: &CutSelection,
) -> Result<Vec<Fault>, ScenarioError> {
    let mut out = Vec::new();
    for f in list.get_ref() {
        match Fault::parse(f.get_ref()) {
            Some(fault) if !out.contains(&fault) => out.push(fault),
            Some(_) => {
                return Err(ctx.err(f.span(), format!("fault {:?} is listed twice", f.get_ref())));
            }
            None => {
                return Err(ctx.err(
                    f.span(),
                    format!(
                        "unknown fault {:?}{}; faults are {}",
                        f.get_ref(),
                        did_you_mean(f.get_ref(), Fault::ALL.map(Fault::as_str)),
                        Fault::ALL.map(Fault::as_str).join(", ")
                    ),
                ));
            }
        }
    }
    if out.is_empty() && *cut != CutSelection::None {
        return Err(ctx.err(
            list.span(),
            "faults is empty; list at least one or set cut = \"none\"",
        ));
    }
    Ok(out)
}
