//! Peak memory: N x B heat maps, one per model (allocated or the pool's reserved peaks; a CPU bundle's RSS).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use metrics::derive::{MemoryMetric, memory_heatmap};
use schema::grid::SamplerVariant;

use crate::bundle::LoadedBundle;
use crate::figure::{Axis, CellId, Figure, HeatCell, Panel, Plot};

use super::choices::{filter_choices, kept, set};
use super::options::{Filters, Options};
use super::series::{point_suffix, short_model, tag};

/// A peak in the figure's unit with three decimals (`20.293 MB`, `28.388 GB`): the tooltip's, finer than the cell's.
fn bytes_text(v: u64, unit: &str, per: f64) -> String {
    format!("{:.3} {unit}", v as f64 / per)
}

pub(super) fn memory(
    bundles: &[&LoadedBundle],
    f: &Filters,
    o: &Options,
    notes: &mut Vec<String>,
) -> Result<Figure, String> {
    let ch = filter_choices(bundles);
    let (xs, ys) = (ch.batches.clone(), ch.seqs.clone());
    let mut metric_names = BTreeSet::new();
    let mut heats = Vec::new();
    for (bi, lb) in bundles.iter().enumerate() {
        let t = tag(bi, bundles.len());
        let cells = kept(lb, f);
        let cpu = lb.bundle.provenance.device.kind == "cpu"
            || (cells.iter().all(|c| c.summary.peak_allocated_bytes.is_none())
                && cells.iter().any(|c| c.summary.peak_rss_bytes.is_some()));
        let metric = if cpu { MemoryMetric::Rss } else { o.memory };
        metric_names.insert(match metric {
            MemoryMetric::Allocated => "peak allocated device memory",
            MemoryMetric::Reserved => "peak reserved device memory (memory pool)",
            MemoryMetric::Rss => "peak resident set size of the process (CPU run: no device memory)",
        });
        if cpu && o.memory == MemoryMetric::Reserved {
            notes.push(format!("{t}CPU bundle: it has no reserved device memory, so RSS is shown."));
        }
        heats.push((bi, t, metric, memory_heatmap(&cells, metric)));
    }
    // One unit for the whole figure, fitted to its values: MB when every peak is below 1 GB.
    let largest = heats.iter().flat_map(|h| h.3.iter().filter_map(|c| c.peak_bytes)).max().unwrap_or(0);
    let (unit, per) = if largest < 1_000_000_000 { ("MB", 1e6) } else { ("GB", 1e9) };
    let mut panels = Vec::new();
    for (bi, t, metric, heat) in &heats {
        let models = set(heat.iter().map(|h| h.model.as_str()));
        for m in models {
            let cells = heat
                .iter()
                .filter(|h| h.model == m)
                .map(|h| {
                    let value = h.peak_bytes.map(|v| v as f64 / per);
                    // A merged cell's own part of the key: its series (other than the reference) and K or threshold.
                    let cell_text = |i: usize| {
                        let k = &bundles[*bi].bundle.cells[i].key;
                        let series = k.variant().filter(|v| *v != SamplerVariant::Reference).map(|v| format!("{v} "));
                        let point = point_suffix(k.steps, k.threshold);
                        format!("{}{}", series.unwrap_or_default(), point.trim_start())
                    };
                    // Every cell ran out of memory: dark, `OOM`. Some did: the peak of those that ran, in the
                    // scale, with how many did not fit (a merged `OOM` would hide that the rest ran, and their peak).
                    let text = match (value, h.oom_cells.len()) {
                        (None, n) if n > 0 => "OOM".to_string(),
                        (None, _) => "n/a".into(),
                        (Some(v), 0) => format!("{v:.2} {unit}"),
                        (Some(v), n) => format!("{v:.2} {unit}, {n} OOM"),
                    };
                    let mut tip = format!(
                        "{t}{m} N={} B={} ({} cell{})\n",
                        h.seq_len,
                        h.batch_size,
                        h.cells.len(),
                        if h.cells.len() == 1 { "" } else { "s" }
                    );
                    match h.peak_bytes {
                        Some(v) => {
                            let _ = write!(tip, "largest peak {} ({v} bytes)", bytes_text(v, unit, per));
                            if let Some(i) = h.largest.filter(|_| h.cells.len() > 1) {
                                let _ = write!(tip, ", at {}", cell_text(i));
                            }
                        }
                        None if h.oom() => tip.push_str("out of memory"),
                        None => tip.push_str("not measured"),
                    }
                    if value.is_some() && !h.oom_cells.is_empty() {
                        let which: Vec<String> = h.oom_cells.iter().map(|&i| cell_text(i)).collect();
                        let _ = write!(tip, "\nout of memory: {}", which.join("; "));
                    }
                    HeatCell {
                        row: ys.iter().position(|n| *n == h.seq_len).unwrap_or(0),
                        col: xs.iter().position(|b| *b == h.batch_size).unwrap_or(0),
                        value,
                        text,
                        oom: value.is_none() && h.oom(),
                        tip,
                        cell: h.largest.or(h.cells.first().copied()).map(|cell| CellId { bundle: *bi, cell }),
                    }
                })
                .collect();
            let what = match metric {
                MemoryMetric::Allocated => "allocated",
                MemoryMetric::Reserved => "reserved",
                MemoryMetric::Rss => "RSS",
            };
            panels.push(Panel { title: format!("{t}{} ({what})", short_model(m)), cells });
        }
    }
    if panels.is_empty() {
        return Err("no cell matches the filters".into());
    }
    // What the figure draws: a note about K, units and the colour bar only where they apply.
    let measured = panels.iter().flat_map(|p| &p.cells).any(|c| c.value.is_some());
    let over_k = match f.steps {
        Some(_) => String::new(),
        None => {
            "Largest peak over the diffusion steps K and sampler series at each (N, B) (filter K to see one); ".into()
        }
    };
    // A peak beside cells that did not fit: said what it is.
    let partial = heats.iter().flat_map(|h| &h.3).any(|h| h.peak_bytes.is_some() && !h.oom_cells.is_empty());
    let partial = match partial {
        true => {
            "a value followed by \"n OOM\" is the peak of the cells that ran, n others at that (N, B) having run out of memory (the tooltip names them); "
        }
        false => "",
    };
    notes.push(match measured {
        true => format!(
            "{over_k}{partial}{unit} = 10^{} bytes; the colour bar spans the figure's smallest to largest value.",
            if unit == "MB" { 6 } else { 9 }
        ),
        false => format!(
            "No cell here recorded its peak memory ({}): the cells read n/a (OOM where one ran out of memory).",
            metric_names.iter().copied().collect::<Vec<_>>().join("; ")
        ),
    });
    Ok(Figure {
        title: format!("Memory: {}", metric_names.into_iter().collect::<Vec<_>>().join("; ")),
        plot: Plot::Heat {
            x: Axis::categorical("batch size B", xs.iter().map(|b| b.to_string()).collect()),
            y: Axis::categorical("sequence length N", ys.iter().map(|n| n.to_string()).collect()),
            panels,
            unit: unit.into(),
            center: None,
        },
    })
}
