//! Time per token and per step: the AR model's TTFT and ITL against B, the diffusion model's time per step
//! against K.

use std::collections::BTreeSet;

use metrics::derive::{CellRef, ar_timings, step_timings};
use schema::Sampler;

use crate::bundle::LoadedBundle;
use crate::figure::{Axis, CellId, Figure, Mark, Plot, Style};

use super::choices::{filter_choices, kept_where, seq_len};
use super::not_drawn;
use super::options::{Filters, Options};
use super::series::{
    Palette, key_text, ms, point_label, push_mark, series_label, short_model, sort_marks, steps_axis, tag,
};

pub(super) fn ar_timing(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let ar = |c: &schema::Cell| c.key.sampler == Sampler::ArGreedy;
    notes.extend(not_drawn(bundles, f, "autoregressive cells", &ar, (true, true)));
    let mut series = Vec::new();
    let mut seqs = BTreeSet::new();
    for lb in bundles {
        let ar = kept_where(lb, f, &|c| c.key.sampler == Sampler::ArGreedy);
        seqs.extend(ar.iter().map(|c| c.cell.key.seq_len));
    }
    let seqs: Vec<u32> = seqs.into_iter().collect();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells = kept_where(lb, f, &|c| c.key.sampler == Sampler::ArGreedy);
        for a in ar_timings(&cells) {
            let c = &lb.bundle.cells[a.cell];
            let j = seqs.iter().position(|n| *n == c.key.seq_len).unwrap_or(0);
            let id = Some(CellId { bundle: bi, cell: a.cell });
            let name = short_model(&c.key.model);
            for (what, s, colour) in [("TTFT", a.ttft_ms, 2 * j), ("ITL", a.itl_ms, 2 * j + 1)] {
                let mark = Mark {
                    x: f64::from(c.key.batch_size),
                    y: s.median,
                    lo: Some(s.min),
                    hi: Some(s.max),
                    tip: format!("{}\nTTFT {}\nITL {}", key_text(&t, c), ms(&a.ttft_ms), ms(&a.itl_ms)),
                    cell: id,
                    label: None,
                };
                let label = format!("{t}{name} {what}, N={}", c.key.seq_len);
                push_mark(&mut series, label, colour, Style::Line, bi > 0, mark);
            }
        }
    }
    if series.is_empty() {
        return Err("no successful autoregressive cell with a prefill time matches the filters".into());
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: "Autoregressive model: time to first token (TTFT) and inter-token latency (ITL)".into(),
        plot: Plot::Xy {
            x: Axis { pow2: true, ..Axis::numeric("batch size B", o.log_x) },
            y: Axis::numeric("median time (ms)", o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}

pub(super) fn step_time(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let n = seq_len(&ch, f, notes).ok_or("no cells")?;
    let diffusion = |c: &schema::Cell| c.key.seq_len == n && c.key.sampler != Sampler::ArGreedy;
    notes.extend(not_drawn(bundles, f, &format!("diffusion cells, N = {n}"), &diffusion, (true, false)));
    let mut series = Vec::new();
    let batches: Vec<u32> = ch.batches.clone();
    // A colour per series and B (two series at one B told apart; the same in a compared bundle, dashed).
    let mut pal = Palette::of(bundles, o);
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells: Vec<CellRef> = kept_where(lb, f, &|c| c.key.seq_len == n);
        for st in step_timings(&cells) {
            let c = &lb.bundle.cells[st.cell];
            let j = batches.iter().position(|b| *b == c.key.batch_size).unwrap_or(0);
            let mark = Mark {
                x: f64::from(st.steps),
                y: st.step_ms.median,
                lo: Some(st.step_ms.min),
                hi: Some(st.step_ms.max),
                tip: format!("{}\ntime per step {}", key_text(&t, c), ms(&st.step_ms)),
                cell: Some(CellId { bundle: bi, cell: st.cell }),
                // A threshold series is placed at its measured forwards: its points say their threshold.
                label: c.key.threshold.map(|_| point_label(c, st.steps)),
            };
            let label = format!("{t}{} B={}", series_label(c), c.key.batch_size);
            let colour = pal.colour(c) * batches.len() + j;
            push_mark(&mut series, label, colour, Style::Line, bi > 0, mark);
        }
    }
    if series.is_empty() {
        return Err("no successful diffusion cell with step times matches the filters".into());
    }
    sort_marks(&mut series);
    Ok(Figure {
        title: format!(
            "Time per diffusion step, N = {n} (median over all steps and repetitions; bars min..max over them)"
        ),
        plot: Plot::Xy {
            x: steps_axis(&series),
            y: Axis::numeric("time per step (ms)", o.log_y),
            series,
            refs: Vec::new(),
            grid: None,
        },
    })
}
