//! Quality: the metric shown, the cells' values, and quality against the diffusion steps with S_parity marked.

use metrics::derive::{self, Direction, Parity, QualityPoint};
use schema::CellStatus;

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, Mark, Plot, RefLine, Style};

use super::choices::{kept_where, set, shape};
use super::options::{Filters, Options};
use super::parity::parity_records;
use super::series::{Palette, key_text, push_mark, series_label, short_model, sort_marks, steps_axis, tag};
use super::{NO_QUALITY, not_drawn, shape_text, value_text};

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
    let ((b, n), note) = shape(bundles, f).ok_or("no cells")?;
    notes.extend(note);
    let at = |c: &schema::Cell| c.key.batch_size == b && c.key.seq_len == n;
    notes.extend(not_drawn(bundles, f, &format!("B = {b}, N = {n}"), &at, (false, false)));
    let mut pal = Palette::of(bundles, o);
    let (mut series, mut refs) = (Vec::new(), Vec::new());
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let pts = quality_points(lb, f, &metric, b, n);
        let ar = pts.iter().find(|p| p.steps.is_none()).copied();
        if let Some(a) = ar {
            let model = short_model(&lb.bundle.cells[a.cell].key.model);
            refs.push(RefLine {
                label: format!("{t}{model} (autoregressive){}", value_text(o, || format!("{:.4}", a.quality))),
                value: a.quality,
                vertical: false,
                colour: figure::AR,
                alt: bi > 0,
                facet: 0,
            });
        }
        for p in pts.iter().filter(|p| p.steps.is_some()) {
            let c = &lb.bundle.cells[p.cell];
            let mark = Mark {
                x: f64::from(p.steps.unwrap_or(1)),
                y: p.quality,
                lo: None,
                hi: None,
                tip: format!(
                    "{}\n{metric} {:.4} ({})\nL_e2e median {:.2} ms",
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
        if let Some(a) = ar {
            // S_parity of each diffusion series drawn here, from the bundle's parity records.
            let ar_model = &lb.bundle.cells[a.cell].key.model;
            let recs = parity_records(lb, &metric);
            for r in recs.iter().filter(|r| r.seq_len == n && r.ar_model == *ar_model) {
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
                    });
                }
            }
        }
    }
    if series.is_empty() {
        return Err(format!("no diffusion cell at B = {b}, N = {n} has a value of {metric}"));
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("{metric} vs diffusion steps{}", shape_text(o, b, n)),
        plot: Plot::Xy {
            x: steps_axis(&series),
            y: Axis::numeric(format!("{metric} ({})", direction_text(dir)), o.log_y),
            series,
            refs,
            grid: None,
        },
    })
}
