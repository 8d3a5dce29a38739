//! Peak memory: N x B heat maps, one per model (allocated or the pool's reserved peaks; a CPU bundle's RSS).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use metrics::derive::{MemoryMetric, gigabytes, memory_heatmap};

use crate::bundle::LoadedBundle;
use crate::figure::{Axis, CellId, Figure, HeatCell, Panel, Plot};

use super::choices::{filter_choices, kept, set};
use super::options::{Filters, Options};
use super::series::{short_model, tag};

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
                    let text = if h.oom {
                        "OOM".to_string()
                    } else {
                        value.map_or("n/a".into(), |v| format!("{v:.2} {unit}"))
                    };
                    let mut tip = format!(
                        "{t}{m} N={} B={} ({} cell{})\n",
                        h.seq_len,
                        h.batch_size,
                        h.cells.len(),
                        if h.cells.len() == 1 { "" } else { "s" }
                    );
                    match (h.peak_bytes, h.oom) {
                        (Some(v), oom) => {
                            let _ = write!(tip, "{:.3} GB ({v} bytes)", gigabytes(v));
                            if oom {
                                tip.push_str("\nout of memory in at least one cell");
                            }
                        }
                        (None, true) => tip.push_str("out of memory"),
                        (None, false) => tip.push_str("not measured"),
                    }
                    HeatCell {
                        row: ys.iter().position(|n| *n == h.seq_len).unwrap_or(0),
                        col: xs.iter().position(|b| *b == h.batch_size).unwrap_or(0),
                        value,
                        text,
                        oom: h.oom,
                        tip,
                        cell: h.cells.first().map(|&cell| CellId { bundle: *bi, cell }),
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
        None => "Largest peak over the diffusion steps K at each (N, B) (filter K to see one); ".into(),
    };
    notes.push(match measured {
        true => format!(
            "{over_k}{unit} = 10^{} bytes; the colour bar spans the figure's smallest to largest value.",
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
