//! Quality: the metric shown, the cells' values, and quality against the diffusion steps with S_parity marked.

use metrics::derive::{self, Direction, Parity, QualityPoint};
use schema::CellStatus;

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, Mark, Plot, RefLine, Style};

use super::choices::{kept_where, set};
use super::options::{Filters, Options};
use super::parity::parity_records;
use super::series::{Palette, key_text, push_mark, series_label, short_model, sort_marks, steps_axis, tag};
use super::{NO_QUALITY, bars_text, drawn_shape, shape_text, value_text};

/// The quality metric shown: the chosen one if a bundle has it, else the one the first bundle's run defines
/// S_parity with (`quality.parity_metric`, scored by its primary evaluator), else the first any bundle has.
pub fn quality_metric(bundles: &[&LoadedBundle], o: &Options) -> Option<(String, Direction)> {
    let all: Vec<&crate::bundle::QualityValue> = bundles.iter().flat_map(|b| b.quality().iter().flatten()).collect();
    let run_metric = bundles.first().and_then(|b| metrics::parity::ParityOptions::from_config(&b.bundle)).map(|p| {
        match p.evaluator {
            Some(e) => format!("{} [{e}]", p.metric),
            None => p.metric,
        }
    });
    let find = |m: &String| all.iter().find(|q| q.metric == *m);
    let pick =
        o.metric.as_ref().and_then(find).or_else(|| run_metric.as_ref().and_then(find)).or_else(|| all.first())?;
    Some((pick.metric.clone(), pick.direction))
}

/// Every quality metric name of the loaded bundles.
pub fn quality_metrics(bundles: &[&LoadedBundle]) -> Vec<String> {
    set(bundles.iter().flat_map(|b| b.quality_labels())).into_iter().collect()
}

pub(super) fn quality_of(lb: &LoadedBundle, cell: usize, metric: &str) -> Option<f64> {
    lb.quality().get(cell)?.iter().find(|q| q.metric == metric).map(|q| q.value)
}

/// Quality points (cells with the metric and a latency) of one bundle at (B, N), diffusion then AR.
pub(super) fn quality_points(lb: &LoadedBundle, f: &Filters, metric: &str, b: u32, n: u32) -> Vec<QualityPoint> {
    kept_where(lb, f, &|c| c.key.batch_size == b && c.key.seq_len == n && c.status == CellStatus::Ok)
        .into_iter()
        .filter_map(|c| {
            Some(QualityPoint {
                cell: c.index,
                steps: derive::cell_steps(c.cell),
                e2e_ms: c.summary.e2e_ms?.median,
                quality: quality_of(lb, c.index, metric)?,
            })
        })
        .collect()
}

pub(super) fn direction_text(d: Direction) -> &'static str {
    match d {
        Direction::LowerIsBetter => "lower is better",
        Direction::HigherIsBetter => "higher is better",
    }
}

pub(super) fn quality_steps(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let (b, n) = drawn_shape(bundles, f, notes)?;
    let mut pal = Palette::of(bundles, o);
    let (mut series, mut refs) = (Vec::new(), Vec::new());
    let mut with_intervals = false;
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let pts = quality_points(lb, f, &metric, b, n);
        let ar = pts.iter().find(|p| p.steps.is_none()).copied();
        let recs = parity_records(lb, &metric);
        let ar_model = ar.map(|a| lb.bundle.cells[a.cell].key.model.as_str());
        if let Some(a) = ar {
            let model = short_model(&lb.bundle.cells[a.cell].key.model);
            // Q_llama's 95% bootstrap interval, a band behind its line.
            let band = cell_interval(&recs, &lb.bundle.cells[a.cell].key, None);
            with_intervals |= band.is_some();
            let interval = band.map_or(String::new(), |(lo, hi)| format!(", 95% [{lo:.4}, {hi:.4}] shaded"));
            // Small multiples name no values: the band is said without them.
            let shaded = if band.is_some() && o.multiples { ", 95% interval shaded" } else { "" };
            refs.push(RefLine {
                label: format!(
                    "{t}{model} (autoregressive){}{shaded}",
                    value_text(o, || format!("{:.4}{interval}", a.quality))
                ),
                value: a.quality,
                vertical: false,
                colour: figure::AR,
                alt: bi > 0,
                facet: 0,
                band,
            });
        }
        for p in pts.iter().filter(|p| p.steps.is_some()) {
            let c = &lb.bundle.cells[p.cell];
            let (lo, hi) = point_interval(&recs, &c.key, ar_model).unzip();
            with_intervals |= lo.is_some();
            let interval = match (lo, hi) {
                (Some(lo), Some(hi)) => format!(" (95% bootstrap [{lo:.4}, {hi:.4}])"),
                _ => String::new(),
            };
            let mark = Mark {
                x: f64::from(p.steps.unwrap_or(1)),
                y: p.quality,
                lo,
                hi,
                tip: format!(
                    "{}\n{metric} {:.4}{interval} ({})\nL_e2e median {:.2} ms",
                    key_text(&t, c),
                    p.quality,
                    direction_text(dir),
                    p.e2e_ms
                ),
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: c.key.threshold.map(|th| format!("t={th}")),
            };
            push_mark(&mut series, format!("{t}{}", series_label(c)), pal.colour(c), Style::Line, bi > 0, mark);
        }
        if let Some(ar_model) = ar_model {
            // S_parity of each diffusion series drawn here, from the bundle's parity records.
            for r in recs.iter().filter(|r| r.seq_len == n && r.ar_model == ar_model) {
                // The record's series among the diffusion points drawn (a threshold cell has no K: its x is its
                // measured forwards).
                let of_record = |p: &&QualityPoint| {
                    let k = &lb.bundle.cells[p.cell].key;
                    p.steps.is_some()
                        && k.model == r.diffusion_model
                        && k.sampler == r.sampler
                        && k.variant() == r.variant()
                };
                // A threshold series' S_parity is its point at the record's threshold, placed at that point's x.
                let drawn = match r.parity_threshold {
                    Some(th) => {
                        pts.iter().filter(of_record).find(|p| lb.bundle.cells[p.cell].key.threshold == Some(th))
                    }
                    None => pts.iter().find(of_record),
                };
                // In its series' colour, and named after it: with several series, each line says whose it is.
                if let (Some(p), Parity::Reached { steps }) = (drawn, r.outcome) {
                    let c = &lb.bundle.cells[p.cell];
                    let of = series_label(c);
                    let x = match r.parity_threshold {
                        Some(_) => p.steps.unwrap_or(steps),
                        None => steps,
                    };
                    let label = match r.parity_threshold {
                        _ if o.multiples => format!("{t}S_parity of {of}"),
                        Some(th) if x != steps => format!(
                            "{t}S_parity at threshold {th} of {of} ({steps} forwards where parity was judged, {x} \
                             here)"
                        ),
                        Some(th) => format!("{t}S_parity = {steps} forwards (threshold {th}) of {of}"),
                        None => format!("{t}S_parity = {steps} of {of}"),
                    };
                    refs.push(RefLine {
                        label,
                        value: f64::from(x),
                        vertical: true,
                        colour: pal.colour(c),
                        alt: bi > 0,
                        facet: 0,
                        band: None,
                    });
                }
            }
        }
    }
    if series.is_empty() {
        return Err(format!("no diffusion cell at B = {b}, N = {n} has a value of {metric}"));
    }
    sort_marks(&mut series);
    // What the error bars are, in the title: a printed figure has no tooltip.
    let bars = bars_text(with_intervals, "95% bootstrap intervals over prompts");
    Ok(Figure {
        title: format!("{metric} vs diffusion steps{}{bars}", shape_text(o, b, n)),
        plot: Plot::Xy {
            x: steps_axis(&series),
            y: Axis::numeric(format!("{metric} ({})", direction_text(dir)), o.log_y),
            series,
            refs,
            grid: None,
        },
    })
}

/// The 95% bootstrap interval of a diffusion cell's quality: its group's point on the curve of the parity record of
/// its series at its N (against `ar_model` where there is one, else the first such record: the curve's resamples
/// are drawn per N, whichever AR model the record compares). `None` without a bootstrap (no per-prompt values).
fn point_interval(
    recs: &[metrics::parity::ParityRecord],
    key: &schema::CellKey,
    ar_model: Option<&str>,
) -> Option<(f64, f64)> {
    let of_series = |r: &&metrics::parity::ParityRecord| {
        r.seq_len == key.seq_len
            && r.diffusion_model == key.model
            && r.sampler == key.sampler
            && r.block_length == key.block_length
            && r.variant() == key.variant()
    };
    let interval = |r: &metrics::parity::ParityRecord| {
        let point = r.curve.iter().find(|p| match key.threshold {
            Some(t) => p.threshold == Some(t),
            None => p.threshold.is_none() && Some(p.steps) == key.steps,
        })?;
        Some((point.quality.low?, point.quality.high?))
    };
    let mut of = recs.iter().filter(of_series);
    of.clone().filter(|r| ar_model.is_none_or(|m| r.ar_model == m)).find_map(interval).or_else(|| of.find_map(interval))
}

/// The 95% bootstrap interval of a cell's quality from its bundle's parity records: an AR cell's is Q_llama's (a
/// record of its model at its N: one baseline, resampled per N, the same in each), a diffusion cell's its point's
/// ([`point_interval`]). `None` without a bootstrap.
pub(super) fn cell_interval(
    recs: &[metrics::parity::ParityRecord],
    key: &schema::CellKey,
    ar_model: Option<&str>,
) -> Option<(f64, f64)> {
    match key.sampler == schema::Sampler::ArGreedy {
        true => recs
            .iter()
            .filter(|r| r.seq_len == key.seq_len && r.ar_model == key.model)
            .find_map(|r| Some((r.baseline.low?, r.baseline.high?))),
        false => point_interval(recs, key, ar_model),
    }
}
