//! Throughput: tokens/s (or bytes/s) per batch size as bars, and its scaling with the batch size as lines.

use metrics::derive::{CellRef, Summary, throughput_bars};
use schema::key::Threshold;
use schema::{Cell, Sampler};

use crate::bundle::LoadedBundle;
use crate::figure::{Axis, CellId, Figure, Mark, Plot, Series, Style};

use super::choices::{filter_choices, kept_where, seq_len, set};
use super::not_drawn;
use super::options::{Filters, Options};
use super::series::{PointPalette, key_text, point_suffix, push_mark, series_label, sort_marks, tag};

pub(super) fn throughput(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let n = seq_len(&ch, f, notes).ok_or("no cells")?;
    notes.extend(not_drawn(bundles, f, &format!("N = {n}"), &|c: &Cell| c.key.seq_len == n, (true, false)));
    if o.throughput_lines {
        if f.batch.is_some() {
            notes.push(
                "One batch size is kept by the filters: each line is a point (choose B = all to see the scaling)."
                    .into(),
            );
        }
        return scaling(bundles, f, n, o);
    }
    // (bundle, cell index, cell, tokens/s, bytes/s)
    let mut bars: Vec<(usize, usize, &Cell, Summary, Summary)> = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let cells: Vec<CellRef> = kept_where(lb, f, &|c| c.key.seq_len == n);
        for t in throughput_bars(&cells) {
            bars.push((bi, t.cell, &lb.bundle.cells[t.cell], t.tokens_per_s, t.bytes_per_s));
        }
    }
    // Small multiples share the x axis: every B the filters keep, at every N.
    let batches: Vec<u32> = match o.multiples {
        true => ch.batches.iter().copied().filter(|b| f.batch.is_none_or(|x| x == *b)).collect(),
        false => set(bars.iter().map(|b| b.2.key.batch_size)).into_iter().collect(),
    };
    // One bar per (bundle, model, sampler, K or threshold) in each B; AR first, then by K, then by threshold.
    // The set orders by (diffusion, label, K, threshold, bundle); the ids are kept as (bundle, diffusion, label, K,
    // threshold).
    type Id = (usize, bool, String, Option<u32>, Option<Threshold>);
    let id_of = |bi: usize, c: &Cell| -> Id {
        (bi, c.key.sampler != Sampler::ArGreedy, series_label(c), c.key.steps, c.key.threshold)
    };
    let ids: Vec<Id> = set(bars.iter().map(|(bi, _, c, ..)| {
        let (bi, d, label, k, t) = id_of(*bi, c);
        (d, label, k, t, bi)
    }))
    .into_iter()
    .map(|(d, label, k, t, bi)| (bi, d, label, k, t))
    .collect();
    let width = 0.84 / ids.len().max(1) as f64;
    let mut pal = PointPalette::of(bundles, o);
    let mut series: Vec<Series> = Vec::new();
    let unit = if o.bytes { "bytes/s" } else { "tokens/s" };
    for (j, id) in ids.iter().enumerate() {
        let t = tag(id.0, bundles.len());
        let mut marks = Vec::new();
        let mut colour = 0;
        let same = |b: &&(usize, usize, &Cell, Summary, Summary)| id_of(b.0, b.2) == *id;
        for (bi, ci, c, tok, byt) in bars.iter().filter(same) {
            colour = pal.colour(c);
            let v = if o.bytes { byt } else { tok };
            let cat = batches.iter().position(|x| *x == c.key.batch_size).unwrap_or(0);
            marks.push(Mark {
                x: cat as f64 - 0.42 + width * (j as f64 + 0.5),
                y: v.median,
                lo: Some(v.min),
                hi: Some(v.max),
                tip: format!(
                    "{}\n{:.1} tokens/s (min {:.1}, max {:.1})\n{:.1} bytes/s (min {:.1}, max {:.1})",
                    key_text(&t, c),
                    tok.median,
                    tok.min,
                    tok.max,
                    byt.median,
                    byt.min,
                    byt.max
                ),
                cell: Some(CellId { bundle: *bi, cell: *ci }),
                label: None,
            });
        }
        series.push(Series {
            label: format!("{t}{}{}", id.2, point_suffix(id.3, id.4)),
            colour,
            style: Style::Bars { width: width * 0.92 },
            alt: id.0 > 0,
            marks,
            facet: 0,
        });
    }
    // A log axis cannot place a bar of 0 (continuations that decode to no bytes): said, not silently left out.
    let zero = series.iter().flat_map(|s| &s.marks).filter(|m| m.y <= 0.0).count();
    if o.log_y && zero > 0 {
        notes.push(format!("{zero} bars of 0 {unit} are not drawn on the log axis (turn log y off to see them at 0)."));
    }
    Ok(Figure {
        title: format!(
            "Throughput ({unit}, median with min..max over repetitions), {}",
            if o.multiples { "every N".to_string() } else { format!("N = {n}") }
        ),
        plot: Plot::Xy {
            x: Axis::categorical("batch size B", batches.iter().map(|b| format!("B={b}")).collect()),
            y: Axis::numeric(format!("generation throughput ({unit})"), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

/// Throughput scaling with the batch size at sequence length `n`: tokens/s (or bytes/s) against B, a line per model,
/// sampler and K, min..max over repetitions as error bars; the throughput bars' numbers
/// (`metrics::derive::throughput_bars`) drawn as lines. `dllm-bench figures` writes it
/// (`throughput_vs_batch_size_N*.svg`); the explorer shows the same numbers as bars, or as these lines.
pub fn throughput_scaling(bundles: &[&LoadedBundle], n: u32, o: &Options) -> Result<Figure, String> {
    scaling(bundles, &Filters::default(), n, o)
}

/// [`throughput_scaling`] over the cells `f` keeps (the explorer's Throughput view with "lines over B").
fn scaling(bundles: &[&LoadedBundle], f: &Filters, n: u32, o: &Options) -> Result<Figure, String> {
    let mut pal = PointPalette::of(bundles, o);
    let mut series = Vec::new();
    let unit = if o.bytes { "bytes/s" } else { "tokens/s" };
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells: Vec<CellRef> = kept_where(lb, f, &|c| c.key.seq_len == n);
        for bar in throughput_bars(&cells) {
            let c = &lb.bundle.cells[bar.cell];
            let v = if o.bytes { bar.bytes_per_s } else { bar.tokens_per_s };
            let mark = Mark {
                x: f64::from(c.key.batch_size),
                y: v.median,
                lo: Some(v.min),
                hi: Some(v.max),
                tip: format!("{}\n{:.1} {unit} (min {:.1}, max {:.1})", key_text(&t, c), v.median, v.min, v.max),
                cell: Some(CellId { bundle: bi, cell: bar.cell }),
                label: None,
            };
            let label = format!("{t}{}{}", series_label(c), point_suffix(c.key.steps, c.key.threshold));
            push_mark(&mut series, label, pal.colour(c), Style::Line, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err(format!("no successful cell at N = {n} has a throughput"));
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!("Throughput scaling with the batch size ({unit}, median with min..max), N = {n}"),
        plot: Plot::Xy {
            x: Axis { pow2: true, ..Axis::numeric("batch size B", true) },
            y: Axis::numeric(format!("generation throughput ({unit})"), o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}
