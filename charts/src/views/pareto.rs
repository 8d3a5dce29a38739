//! The Pareto frontier of quality against latency (or energy per token, or the hardware-independent cost axes).

use metrics::derive::{QualityPoint, pareto_view};

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, Mark, Plot, Series, Style};

use super::energy;
use super::options::{Filters, Options, ParetoX};
use super::parity::parity_records;
use super::quality::{cell_interval, direction_text, quality_metric, quality_points};
use super::series::{Palette, key_text, point_label, push_mark, series_label, short_model, tag};
use super::{NO_QUALITY, bars_text, drawn_shape, shape_text};

pub(super) fn pareto(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let (metric, dir) = quality_metric(bundles, o).ok_or(NO_QUALITY)?;
    let (b, n) = drawn_shape(bundles, f, notes)?;
    let mut pal = Palette::of(bundles, o);
    let mut series = Vec::new();
    // The x of a point: its latency, or (hardware-independent) its forwards or tokens per forward per sequence.
    // The frontier is taken over the plotted x itself as a cost: latency, forwards, or forwards per token (1 /
    // tokens per forward, pooled over the repetitions as the axis is), so that no point it passes through is beaten
    // by another on the chart.
    let px = o.pareto_x;
    // With the energy option, latency's place is energy per token's (a cell without energy has no place).
    let energy = o.energy && px == ParetoX::Latency;
    let joules = |lb: &LoadedBundle, p: &QualityPoint| energy::per_token(&lb.bundle.cells[p.cell]).map(|e| e.median);
    let mut missing = 0;
    let x_of = |lb: &LoadedBundle, p: &QualityPoint| {
        let s = lb.summary(p.cell);
        match px {
            ParetoX::Latency if energy => joules(lb, p),
            ParetoX::Latency => Some(p.e2e_ms),
            ParetoX::Forwards => s.forward_passes.map(|f| f.median),
            ParetoX::TokensPerForward => s.tokens_per_forward,
        }
    };
    let mut with_intervals = false;
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let mut pts = quality_points(lb, f, &metric, b, n);
        let recs = parity_records(lb, &metric);
        let ar_model = pts.iter().find(|p| p.steps.is_none()).map(|p| lb.bundle.cells[p.cell].key.model.as_str());
        let cost = |p: &QualityPoint| match px {
            ParetoX::TokensPerForward => lb.summary(p.cell).tokens_per_forward.filter(|t| *t > 0.0).map(|t| 1.0 / t),
            _ => lb.summary(p.cell).forward_passes.map(|f| f.median),
        };
        if px != ParetoX::Latency {
            // Points of bundles that did not record forwards have no place on these axes.
            pts.retain(|p| cost(p).is_some());
            pts.iter_mut().for_each(|p| p.e2e_ms = cost(p).unwrap_or(f64::NAN));
        }
        if energy {
            let before = pts.len();
            pts.retain(|p| joules(lb, p).is_some());
            missing += before - pts.len();
            pts.iter_mut().for_each(|p| p.e2e_ms = joules(lb, p).unwrap_or(f64::NAN));
        }
        let view = pareto_view(&pts, dir);
        let front: Vec<Mark> = view
            .front
            .iter()
            .map(|&i| {
                let p = &pts[i];
                let x = x_of(lb, p).unwrap_or(f64::NAN);
                Mark { x, y: p.quality, lo: None, hi: None, tip: String::new(), cell: None, label: None }
            })
            .collect();
        if !front.is_empty() {
            series.push(Series {
                label: match o.multiples {
                    true => format!("{t}Pareto frontier"),
                    false => format!("{t}Pareto frontier ({} points)", front.len()),
                },
                colour: figure::FRONTIER,
                style: Style::Frontier,
                alt: bi > 0,
                marks: front,
                facet: 0,
            });
        }
        for (i, p) in pts.iter().enumerate() {
            let c = &lb.bundle.cells[p.cell];
            let on = view.front.contains(&i);
            let s = lb.summary(p.cell);
            // Only what was measured. The tokens per forward are pooled over the runs (N_out / the mean forwards),
            // so the mean is shown beside the median the x axis uses: they differ when prompts differ per run.
            let mut measured = Vec::new();
            if let Some(e) = s.e2e_ms {
                measured.push(format!("L_e2e median {:.2} ms", e.median));
            }
            if let (Some(f), Some(tpf)) = (s.forward_passes, s.tokens_per_forward) {
                measured.push(format!(
                    "forwards per run median {} (mean {:.1}), {tpf:.2} tokens per forward",
                    f.median, f.mean
                ));
            }
            if let Some(j) = energy::per_token(c).filter(|_| energy) {
                measured.push(format!("energy median {:.4} J per token", j.median));
            }
            let mut measured = measured.join(", ");
            if !measured.is_empty() {
                measured.push('\n');
            }
            // The quality's 95% bootstrap interval as the point's error bar (the frontier is the point estimates').
            let (lo, hi) = cell_interval(&recs, &c.key, ar_model).unzip();
            with_intervals |= lo.is_some();
            let interval = match (lo, hi) {
                (Some(lo), Some(hi)) => format!(" (95% bootstrap [{lo:.4}, {hi:.4}])"),
                _ => String::new(),
            };
            let mark = Mark {
                x: x_of(lb, p).unwrap_or(f64::NAN),
                y: p.quality,
                lo,
                hi,
                tip: format!(
                    "{}\n{measured}{metric} {:.4}{interval} ({})\n{}",
                    key_text(&t, c),
                    p.quality,
                    direction_text(dir),
                    if on { "on the Pareto frontier" } else { "dominated" }
                ),
                cell: Some(CellId { bundle: bi, cell: p.cell }),
                label: p.steps.map(|k| point_label(c, k)),
            };
            let (label, style) = match p.steps {
                Some(_) => (format!("{t}{}", series_label(c)), Style::Line),
                None => (format!("{t}{} (autoregressive)", short_model(&c.key.model)), Style::Points),
            };
            push_mark(&mut series, label, pal.colour(c), style, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err(format!("no cell at B = {b}, N = {n} has a value of {metric}"));
    }
    // Diffusion curves follow the x axis (K is also the latency order).
    for s in series.iter_mut().filter(|s| s.style == Style::Line) {
        s.marks.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    notes.push(format!("Quality metric: {metric} ({}).", direction_text(dir)));
    if energy {
        notes.push(energy::note(missing));
    }
    let (what, axis) = match px {
        ParetoX::Latency if energy => ("energy", energy::AXIS),
        ParetoX::Latency => ("latency", "median end-to-end latency L_e2e (ms)"),
        ParetoX::Forwards => ("forward passes", "forward passes per run (median; fewer is cheaper)"),
        ParetoX::TokensPerForward => ("tokens per forward", "tokens per forward pass and sequence (more is cheaper)"),
    };
    Ok(Figure {
        title: format!(
            "Pareto frontier: {what} vs {metric}{}{}",
            shape_text(o, b, n),
            bars_text(with_intervals, "quality's 95% interval")
        ),
        plot: Plot::Xy {
            x: Axis::numeric(axis, o.log_x),
            y: Axis::numeric(format!("{metric} ({})", direction_text(dir)), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}
