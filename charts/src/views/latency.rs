//! Latency against the diffusion steps K: one line per diffusion series, the AR model as a reference line; or,
//! with the energy option, joules per generated token against K.

use metrics::derive::{self, CellRef};
use schema::{CellStatus, Sampler};

use crate::bundle::LoadedBundle;
use crate::figure::{self, Axis, CellId, Figure, Mark, Plot, RefLine, Style};

use super::choices::kept_where;
use super::energy;
use super::options::{Filters, Options};
use super::series::{
    Palette, key_text, ms, point_label, push_mark, series_label, short_model, sort_marks, steps_axis, tag,
};
use super::{drawn_shape, shape_text, value_text};

pub(super) fn latency(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let (b, n) = drawn_shape(bundles, f, notes)?;
    let mut pal = Palette::of(bundles, o);
    let (mut series, mut refs, mut missing) = (Vec::new(), Vec::new(), 0);
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let at: Vec<CellRef> =
            kept_where(lb, f, &|c| c.key.batch_size == b && c.key.seq_len == n && c.status == CellStatus::Ok);
        for c in &at {
            // The y of a cell: its latency, or its energy per token (a cell without energy is left out).
            let e = match o.energy {
                false => c.summary.e2e_ms,
                true => energy::per_token(c.cell).or_else(|| {
                    missing += 1;
                    None
                }),
            };
            let Some(e) = e else { continue };
            match derive::cell_steps(c.cell) {
                None if c.cell.key.sampler != Sampler::ArGreedy => {}
                None => refs.push(RefLine {
                    label: format!(
                        "{t}{} (autoregressive){}",
                        short_model(&c.cell.key.model),
                        value_text(o, || match o.energy {
                            false => format!("{:.1} ms", e.median),
                            true => format!("{:.3} J/token", e.median),
                        })
                    ),
                    value: e.median,
                    vertical: false,
                    colour: figure::AR,
                    alt: bi > 0,
                    facet: 0,
                    band: None,
                }),
                Some(k) => {
                    let label = format!("{t}{}", series_label(c.cell));
                    let mark = Mark {
                        x: f64::from(k),
                        y: e.median,
                        lo: Some(e.min),
                        hi: Some(e.max),
                        tip: match o.energy {
                            false => format!("{}\nL_e2e {}", key_text(&t, c.cell), ms(&e)),
                            true => format!(
                                "{}\nenergy median {:.4} J per token (min {:.4}, max {:.4})",
                                key_text(&t, c.cell),
                                e.median,
                                e.min,
                                e.max
                            ),
                        },
                        cell: Some(CellId { bundle: bi, cell: c.index }),
                        label: Some(point_label(c.cell, k)),
                    };
                    push_mark(&mut series, label, pal.colour(c.cell), Style::Line, bi > 0, mark);
                }
            }
        }
    }
    // Only the AR model kept (the sampler filter): its latency is a line across K, with no diffusion point to draw.
    if series.is_empty() && !refs.is_empty() {
        return Err("this view draws the diffusion cells against K, the autoregressive model as a line across them, \
                    and the filters keep no diffusion cell: choose a diffusion sampler (or all), or read the \
                    autoregressive timings in TTFT / ITL and Throughput"
            .into());
    }
    sort_marks(&mut series);
    let (what, axis) = match o.energy {
        false => ("Latency", "median end-to-end latency L_e2e (ms)"),
        true => {
            notes.push(energy::note(missing));
            ("Energy per token", energy::AXIS)
        }
    };
    Ok(Figure {
        // What the marks and their error bars are, in the title: a printed figure has no tooltip.
        title: format!("{what} vs diffusion steps{} (median; bars min..max over repetitions)", shape_text(o, b, n)),
        plot: Plot::Xy { x: steps_axis(&series), y: Axis::numeric(axis, o.log_y), series, refs, grid: None },
    })
}
