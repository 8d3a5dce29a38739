//! The answer (the landing view): the finding in a sentence and the speedup at parity per series and (N, B) as a
//! heat map.

use metrics::parity::AtBatch;
use schema::parity::Parity;

use crate::bundle::LoadedBundle;
use crate::figure::{Axis, Figure, HeatCell, Panel, Plot};

use super::NO_QUALITY;
use super::choices::filter_choices;
use super::options::Options;
use super::parity::{parity_records, record_cell};
use super::quality::quality_metric;
use super::series::{sampler_label, series_label, short_model};

/// A heat cell's text where the autoregressive cell at its B did not finish and parity was reached (no verdict
/// without the baseline's latency); written `n/b` where the words do not fit.
pub const NO_BASELINE: &str = "no baseline";

/// The mark after a speedup whose parity may come from repetitive text (the tooltip says why).
pub const LOW_ENTROPY_MARK: &str = "*";

/// The mark after a speedup whose S_parity is uncertain: parity not reached in every bootstrap resample (the
/// tooltip says in how many).
pub const UNCERTAIN_MARK: &str = "?";

/// The answer, from the main bundle's parity records ([`metrics::parity::parity`], the numbers `report` prints):
/// one sentence stating the finding, and the verdict as one heat map, a panel per diffusion series (columns B, rows
/// N): each cell says the speedup at parity and is coloured by its log2 on a scale diverging at 1x (blue faster,
/// red slower; grey, hatched, where parity was not reached or the diffusion cell at S_parity has no timing, written
/// `n/p` and `n/m` where the words do not fit); the tooltip names S_parity and the interval. `Err` when nothing
/// measured quality.
pub fn answer(bundles: &[&LoadedBundle], o: &Options) -> Result<(String, Figure), String> {
    let (metric, _) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let lb = bundles.first().ok_or("no bundle")?;
    let ch = filter_choices(&[lb]);
    let mut panels: Vec<Panel> = Vec::new();
    // (speedup, where) of every cell with one, the number of (series, N, B) with a verdict (a speedup, or parity not
    // reached), of those where parity was reached but the diffusion cell at S_parity has no timing (no verdict), and
    // of those without data.
    // `no_baseline`: of those whose autoregressive cell did not finish at that B (reached parity, or no data: no
    // verdict without the baseline's latency; where parity was not reached, the verdict needs none).
    let (mut found, mut judged, mut unmeasured, mut no_data, mut no_baseline) = (Vec::new(), 0, 0, 0, 0);
    for r in parity_records(lb, &metric).iter() {
        let Some(cell) = record_cell(lb, r) else { continue };
        let series = format!("{} vs {}", series_label(cell), short_model(&r.ar_model));
        // Panels side by side: a short title (model and series), the whole label in each tooltip.
        // Worded as the other views' series are (model, then sampler), a variant other than the reference after.
        let mut title = format!("{} ({})", short_model(&r.diffusion_model), sampler_label(r.sampler));
        if let Some(v) = r.variant().filter(|v| *v != schema::grid::SamplerVariant::Reference) {
            title = format!("{title} {v}");
        }
        let i = panels.iter().position(|p| p.title == title).unwrap_or(panels.len());
        if i == panels.len() {
            panels.push(Panel { title, cells: Vec::new() });
        }
        // An uncertain S_parity (not reached in every bootstrap resample): its speedups marked
        // ([`UNCERTAIN_MARK`]) and said in each tooltip, as the S_parity table and `report` say it.
        let uncertain = metrics::parity::uncertain_text(r);
        for at in metrics::parity::rows_by_batch(&lb.bundle, r) {
            let (n, b) = (r.seq_len, at.batch_size());
            // Degenerate text at S_parity at this B (as the S_parity table judges it): the speedup marked (said in
            // the notes, [`LOW_ENTROPY_MARK`]) and in the tooltip, so the verdict is not read without it.
            let low = metrics::parity::low_entropy_at_batch(&lb.bundle, lb.quality(), r, b)
                .map(|(d, a)| metrics::parity::low_entropy_text(d, a));
            let (e, note, unfinished) = match at {
                AtBatch::Row(row) => (row.speedup, row.note.clone(), false),
                AtBatch::Unfinished { what, .. } => (None, Some(metrics::parity::unfinished_baseline_text(what)), true),
            };
            // Parity not reached is a verdict without any latency; reached, it needs the baseline's.
            let label = match (unfinished, r.outcome) {
                (true, Parity::Reached { .. } | Parity::NoData) => NO_BASELINE,
                _ => metrics::parity::no_speedup_label(r),
            };
            match (e, &r.outcome) {
                (Some(e), _) => {
                    judged += 1;
                    found.push((e.value, format!("{series}, N = {n}, B = {b}")));
                }
                (None, Parity::NotReached { .. }) => judged += 1,
                (None, _) if unfinished => no_baseline += 1,
                (None, Parity::Reached { .. }) => unmeasured += 1,
                (None, Parity::NoData) => no_data += 1,
            }
            panels[i].cells.push(HeatCell {
                row: ch.seqs.iter().position(|&y| y == n).unwrap_or(0),
                col: ch.batches.iter().position(|&x| x == b).unwrap_or(0),
                value: e.map(|e| e.value.log2()),
                text: e.map_or_else(
                    || label.into(),
                    |e| {
                        format!(
                            "{:.2}x{}{}",
                            e.value,
                            if uncertain.is_some() { UNCERTAIN_MARK } else { "" },
                            if low.is_some() { LOW_ENTROPY_MARK } else { "" }
                        )
                    },
                ),
                oom: false,
                tip: format!(
                    "{series}\nN = {n}, B = {b}\nS_parity: {}{}{}\nspeedup at parity: {}{}",
                    metrics::parity::s_parity_text(r),
                    metrics::parity::s_parity_interval_text(r).map_or(String::new(), |i| format!(" ({i})")),
                    metrics::parity::s_parity_bracket_text(r).map_or(String::new(), |i| format!("\n{i}")),
                    e.map_or_else(
                        || format!("- ({})", note.as_deref().unwrap_or(label)),
                        |e| match (e.low, e.high) {
                            (Some(l), Some(h)) => format!("{:.3}x [{l:.3}, {h:.3}]", e.value),
                            _ => format!("{:.3}x", e.value),
                        }
                    ),
                    low.as_ref().map_or(String::new(), |w| format!("\nWarning: {w}"))
                ) + &uncertain
                    .as_ref()
                    .map_or(String::new(), |w| format!("\nWarning: {w}: {}", metrics::parity::UNCERTAIN_SPEEDUP)),
                cell: None,
            });
        }
    }
    if panels.is_empty() {
        // Why: a bundle of one kind of model has no pair to judge.
        let has = |ar: bool| lb.bundle.cells.iter().any(|c| (c.key.sampler == schema::Sampler::ArGreedy) == ar);
        return Err(match (has(true), has(false)) {
            (false, false) => "S_parity needs cells: this bundle has none (a run that measured nothing, or a merge of \
                               none)"
                .into(),
            (false, _) => "S_parity needs an autoregressive baseline: this bundle has only diffusion cells".into(),
            (_, false) => "S_parity needs a diffusion model: this bundle has only autoregressive cells".into(),
            // An unfinished run measures a group's quality with its largest B, which may not have run yet.
            _ => match &lb.partial {
                Some(counts) => format!(
                    "no diffusion series against an AR model has quality values yet: this is a PARTIAL bundle \
                     ({counts}, an unfinished run), and the quality groups that pair them are not measured yet (each \
                     group's quality comes with its largest B); S_parity shows once they are: open a whole bundle, \
                     or this one when its run has finished"
                ),
                None => "no diffusion series against an AR model has quality values".into(),
            },
        });
    }
    let fastest = found.iter().max_by(|a, b| a.0.total_cmp(&b.0));
    let slowest = found.iter().min_by(|a, b| a.0.total_cmp(&b.0));
    let faster = found.iter().filter(|f| f.0 > 1.0).count();
    // The (series, N, B) without a verdict, said apart from those judged.
    let unjudged = [
        (
            unmeasured,
            "where parity was reached but the diffusion cell at S_parity has no timing at that B (not measured)",
        ),
        (no_data, "without data"),
        (no_baseline, "whose autoregressive cell at that B did not finish (no baseline latency)"),
    ]
    .iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, what)| format!("{count} more {what}"))
    .collect::<Vec<_>>();
    let unjudged = match unjudged.is_empty() {
        true => String::new(),
        false => format!(" Not judged: {}.", unjudged.join("; ")),
    };
    let sentence = match (slowest, fastest) {
        (Some(lo), Some(hi)) => format!(
            "At the AR model's quality ({metric}), the diffusion model is faster in {faster} of the {judged} \
             (series, N, B) judged: the speedup at parity ranges from {:.2}x ({}) to {:.2}x ({}); where a cell \
             says no parity, the diffusion model did not reach the AR model's quality at any step count tried.\
             {unjudged}",
            lo.0, lo.1, hi.0, hi.1
        ),
        _ if unmeasured > 0 => format!(
            "The diffusion model reaches the AR model's quality ({metric}) in {unmeasured} (series, N, B), but its \
             cells at S_parity have no timing (failed or not run): there is no speedup at parity to report ({judged} \
             (series, N, B) judged, none with a speedup).{}",
            [
                (no_data, "have no data"),
                (no_baseline, "have no baseline latency (their autoregressive cell did not finish)")
            ]
            .iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, what)| format!(" {count} more {what}."))
            .collect::<String>()
        ),
        _ => format!(
            "The diffusion model reaches the AR model's quality ({metric}) in none of the {judged} (series, N, B) \
             judged: there is no speedup at parity to report.{unjudged}"
        ),
    };
    let records = parity_records(lb, &metric);
    let mut sentence = sentence;
    for note in metrics::parity::cautions(&lb.bundle, &records) {
        sentence = format!("{sentence} Caution: {note}.");
    }
    // An N at which no autoregressive cell finished has no cells in the heat map at all.
    for (model, n) in metrics::parity::unjudged_baselines(&lb.bundle, &records) {
        sentence = format!("{sentence} Warning: {}.", metrics::parity::unjudged_baseline_text(short_model(model), n));
    }
    let figure = Figure {
        title: "Speedup at parity, L_e2e(AR) / L_e2e(diffusion at S_parity)".into(),
        plot: Plot::Heat {
            x: Axis::categorical("batch size B", ch.batches.iter().map(|b| b.to_string()).collect()),
            y: Axis::categorical("sequence length N", ch.seqs.iter().map(|n| n.to_string()).collect()),
            panels,
            unit: "speedup".into(),
            center: Some(0.0),
        },
    };
    Ok((sentence, figure))
}
