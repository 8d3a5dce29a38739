//! The S_parity rows: per bundle, (B, N) and diffusion series, the records of `metrics::parity` as text.

use std::fmt::Write as _;

use metrics::derive::{self, ParityPanel};
use schema::Cell;

use crate::bundle::LoadedBundle;

use super::NO_QUALITY;
use super::choices::{kept, set};
use super::options::{Filters, Options};
use super::quality::{direction_text, quality_metric};
use super::series::{series_label, short_model, tag};

/// One row of the S_parity panel: a diffusion model/sampler against the AR model at one (B, N).
#[derive(Debug, Clone, PartialEq)]
pub struct ParityRow {
    /// `[A] ` / `[B] ` or empty.
    pub tag: String,
    /// Diffusion series label.
    pub diffusion: String,
    /// AR model.
    pub ar: String,
    /// Batch size.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// The derived panel.
    pub panel: ParityPanel,
    /// A threshold series: its points are thresholds, S_parity their measured forwards (no K interval).
    pub thresholded: bool,
    /// S_parity in words ([`metrics::parity::s_parity_text`], as `report` writes it).
    pub s_parity: String,
    /// Key of the matched diffusion cell.
    pub matched_key: Option<String>,
    /// Key of the AR cell.
    pub ar_key: String,
    /// Entropy far below the AR model's at S_parity (needs the `unigram_entropy` metric).
    pub entropy_warning: bool,
    /// 95% bootstrap intervals of S_parity and of this B's speedup, as text (needs per-prompt values).
    pub bootstrap: Option<String>,
    /// S_parity is uncertain: parity was reached in fewer than all of the bootstrap resamples (`report`'s bold
    /// warning, on the same test); the warning's text.
    pub uncertain: Option<String>,
}

/// The warning `report` prints under a record whose parity the point estimate reached but not every bootstrap
/// resample did (its reached fraction below 1): S_parity is uncertain.
fn uncertain_text(r: &metrics::parity::ParityRecord) -> Option<String> {
    metrics::parity::uncertain_text(r).map(|w| format!("{w}: {}", metrics::parity::UNCERTAIN_SPEEDUP))
}

/// The bundle's S_parity records for a metric label of the explorer (`metric` or `metric [evaluator]`), with the
/// bootstrap settings of the run's config (1000 resamples, seed 0 without one).
/// Computed once per bundle and metric (the page redraws the table on every change of its state).
pub(super) fn parity_records(lb: &LoadedBundle, label: &str) -> std::sync::Arc<Vec<metrics::parity::ParityRecord>> {
    lb.parity_cache.get_or(label, || match label_options(&lb.bundle, &[lb], label) {
        Some(opts) => metrics::parity::parity(&lb.bundle, &opts),
        None => Vec::new(),
    })
}

/// The S_parity options of a metric label (`metric` or `metric [evaluator]`) as the first quality value of
/// `bundles` with that label names it, with the bootstrap settings of `config`'s run; `None` when no cell has it.
pub(super) fn label_options(
    config: &schema::Bundle,
    bundles: &[&LoadedBundle],
    label: &str,
) -> Option<metrics::parity::ParityOptions> {
    let q =
        bundles.iter().flat_map(|lb| lb.bundle.cells.iter().flat_map(|c| &c.quality)).find(|q| q.label() == label)?;
    Some(metrics::parity::ParityOptions::for_metric(config, q.metric.clone(), q.evaluator.clone()))
}

/// A speedup as text (`1.23x`), `-` where there is none.
pub(super) fn speedup_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{s:.2}x"))
}

/// The intervals of one batch size's row from its record.
pub(super) fn bootstrap_text(r: &metrics::parity::ParityRecord, b: u32) -> Option<String> {
    let i = r.s_parity_interval?;
    let k = |x: Option<u32>| x.map_or("not reached".to_string(), |k| k.to_string());
    let mut t = format!("S_parity [{}, {}]", k(i.low), k(i.high));
    if let Some(f) = r.reached_fraction {
        let _ = write!(t, ", reached in {:.0}% of resamples", f * 100.0);
    }
    if let Some((lo, hi)) =
        r.speedups.iter().find(|s| s.batch_size == b).and_then(|s| s.speedup).and_then(|e| Some((e.low?, e.high?)))
    {
        let _ = write!(t, "; speedup [{lo:.2}x, {hi:.2}x]");
    }
    Some(t)
}

/// A diffusion cell of a record's series at its N (for the series' label and the filters).
pub(super) fn record_cell<'a>(lb: &'a LoadedBundle, r: &metrics::parity::ParityRecord) -> Option<&'a Cell> {
    lb.bundle.cells.iter().find(|c| {
        c.key.seq_len == r.seq_len
            && c.key.model == r.diffusion_model
            && c.key.sampler == r.sampler
            && c.key.block_length == r.block_length
            && c.key.variant() == r.variant()
    })
}

/// The S_parity rows: per bundle, per (B, N) kept (N fixed by the filter or the smallest), per diffusion
/// series; `Err` with the reason when there is no quality data. Every number comes from the bundle's parity
/// records ([`metrics::parity::parity`], as `report` and the stored `bundle.parity`), read per batch size by
/// [`derive::parity_panel`]: the explorer never computes S_parity itself.
pub fn parity_rows(bundles: &[&LoadedBundle], f: &Filters, o: &Options) -> Result<(String, Vec<ParityRow>), String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let mut rows = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let recs = parity_records(lb, &metric);
        let kept_cells = kept(lb, f);
        let is_kept = |key: &schema::CellKey| kept_cells.iter().any(|c| c.cell.key == *key);
        let shapes = set(kept_cells.iter().map(|c| (c.cell.key.seq_len, c.cell.key.batch_size)));
        for (n, b) in shapes {
            for r in recs.iter().filter(|r| r.seq_len == n) {
                let Some(panel) = derive::parity_panel(r, b, &lb.bundle.cells) else { continue };
                let Some(series) = record_cell(lb, r) else { continue };
                let ar_cell = &lb.bundle.cells[panel.ar.cell];
                // The filters keep the AR cell and at least one cell of the diffusion series at this (B, N).
                let series_kept = kept_cells.iter().any(|c| {
                    c.cell.key.batch_size == b
                        && c.cell.key.seq_len == n
                        && c.cell.key.model == r.diffusion_model
                        && c.cell.key.sampler == r.sampler
                        && c.cell.key.variant() == r.variant()
                });
                if !is_kept(&ar_cell.key) || !series_kept {
                    continue;
                }
                // Judged as the answer's heat map, `report` and `figures` judge it (one function).
                let entropy_warning = metrics::parity::low_entropy_at_batch(&lb.bundle, lb.quality(), r, b).is_some();
                rows.push(ParityRow {
                    s_parity: metrics::parity::s_parity_text(r),
                    uncertain: uncertain_text(r),
                    bootstrap: bootstrap_text(r, b),
                    tag: t.clone(),
                    diffusion: series_label(series),
                    ar: short_model(&ar_cell.key.model).to_string(),
                    batch: b,
                    seq: n,
                    matched_key: panel.matched.map(|m| lb.bundle.cells[m.cell].key.to_string()),
                    ar_key: ar_cell.key.to_string(),
                    panel,
                    thresholded: r.thresholded,
                    entropy_warning,
                });
            }
        }
    }
    if rows.is_empty() {
        return Err(format!("no (B, N) with both an AR and a diffusion value of {metric} matches the filters"));
    }
    Ok((format!("{metric} ({})", direction_text(dir)), rows))
}

/// The note above the S_parity rows naming the autoregressive cells the filters keep that did not finish (out of
/// memory, failed, skipped): their (B, N) has no row, as it has no baseline latency to divide by, which a table that
/// silently lacks a batch size would not say. `None` when every such cell ran.
pub fn parity_not_drawn(bundles: &[&LoadedBundle], f: &Filters) -> Option<String> {
    let ar = |c: &Cell| c.key.sampler == schema::Sampler::ArGreedy;
    super::not_drawn(bundles, f, "no S_parity row at their B and N: no baseline latency", &ar, (true, true))
}

/// The warning on degenerate text (see [`ParityRow::entropy_warning`]).
pub const ENTROPY_WARNING: &str =
    "the diffusion model's output entropy is far below the AR model's: parity may come from degenerate text";

impl ParityRow {
    /// The row's warnings, for its warning column: S_parity uncertain ([`ParityRow::uncertain`]), then degenerate
    /// text (`ENTROPY_WARNING`); empty when none applies.
    pub fn warnings(&self) -> Vec<String> {
        let mut w: Vec<String> = self.uncertain.iter().cloned().collect();
        if self.entropy_warning {
            w.push(ENTROPY_WARNING.into());
        }
        w
    }

    /// The interval as text: `(32, 64]`.
    pub fn interval_text(&self) -> String {
        // A threshold series tries thresholds, not K: no interval of steps (its S_parity names the threshold).
        if self.thresholded {
            return "- (a threshold series)".into();
        }
        match self.panel.interval {
            Some((Some(lo), hi)) => format!("({lo}, {hi}]"),
            Some((None, hi)) => format!("<= {hi} (smallest K tried)"),
            None => "-".into(),
        }
    }

    /// Speedup as text.
    pub fn speedup_text(&self) -> String {
        speedup_text(self.panel.speedup)
    }

    /// The verdict.
    pub fn verdict(&self) -> String {
        match self.panel.viable {
            Some(true) => "viable (speedup > 1)".into(),
            Some(false) => "not viable (slower at parity)".into(),
            None => {
                let (verdict, why) = metrics::parity::verdict_without_speedup_why(self.panel.parity);
                format!("{verdict} ({why})")
            }
        }
    }
}
