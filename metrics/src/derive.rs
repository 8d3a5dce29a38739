//! Every derived number, computed once: summary statistics, latencies, throughput, Pareto fronts,
//! S_parity and the speedup factor. The runner's reports and the explorer (compiled to wasm) both call
//! this module, so they cannot disagree.
//!
//! Definitions follow the study (section 3.1): ITL = (L_e2e - prefill) / (N_out - 1);
//! T_gen = B x N_out / L_e2e (the valid output tokens: a position a diffusion model left masked is none);
//! S_parity = min{ k : f_llada(k) at least as good as Q_llama }; speedup = L_e2e(AR) / L_e2e(LLaDA at S_parity).
//! A statistic of no values is `None`, never 0.

use serde::{Deserialize, Serialize};

pub use schema::bundle::Direction;
use schema::bundle::{Bundle, Cell, CellStatus, Repetition, Sampler};
use schema::grid::BlockCache;
pub use schema::parity::Parity;

/// Summary statistics of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (mean of the two middle values for even n).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sample standard deviation (n - 1); `None` for one value (no spread was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub std: Option<f64>,
}

/// Summarizes finite values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    summarize_owned(values.to_vec())
}

/// [`summarize`] of values the caller no longer needs (reordered in place: one allocation less per summary).
fn summarize_owned(mut v: Vec<f64>) -> Option<Summary> {
    v.retain(|x| x.is_finite());
    let n = v.len();
    if n == 0 {
        return None;
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    let std = (n > 1).then(|| (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    let (min, max) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    // The median by selection, not a full sort (a cell's thousands of step times are summarized at load).
    let (lower, &mut upper, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let median =
        if n % 2 == 1 { upper } else { (lower.iter().copied().fold(f64::NEG_INFINITY, f64::max) + upper) / 2.0 };
    Some(Summary { n, mean, median, min, max, std })
}

/// Inter-token latency of one AR repetition, when it has a prefill time and more than one token per row.
pub fn itl_ms(rep: &Repetition, output_tokens_per_row: u32) -> Option<f64> {
    let prefill = rep.prefill_ms?;
    (output_tokens_per_row > 1).then(|| (rep.e2e_ms - prefill) / f64::from(output_tokens_per_row - 1))
}

/// Generation throughput of one repetition in tokens per second (B x N_out / L_e2e, counting the valid output
/// tokens: `Repetition::output_tokens`).
pub fn tokens_per_s(rep: &Repetition) -> Option<f64> {
    (rep.e2e_ms > 0.0).then(|| rep.output_tokens as f64 / (rep.e2e_ms / 1000.0))
}

/// Throughput in UTF-8 bytes of decoded text per second (comparable across tokenizers).
pub fn bytes_per_s(rep: &Repetition) -> Option<f64> {
    (rep.e2e_ms > 0.0).then(|| rep.output_bytes as f64 / (rep.e2e_ms / 1000.0))
}

/// Everything derived for one cell. Absent where the cell did not measure it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    /// End-to-end latency, ms.
    pub e2e_ms: Option<Summary>,
    /// Prefill / TTFT, ms (AR).
    pub prefill_ms: Option<Summary>,
    /// Inter-token latency, ms (AR).
    pub itl_ms: Option<Summary>,
    /// Time to the first committed block, ms (diffusion).
    pub first_block_ms: Option<Summary>,
    /// Mean time per diffusion step, ms, over all steps of all repetitions.
    pub step_ms: Option<Summary>,
    /// Tokens per second over the batch.
    pub tokens_per_s: Option<Summary>,
    /// Decoded UTF-8 bytes per second over the batch.
    pub bytes_per_s: Option<Summary>,
    /// Tokens committed per forward evaluation and sequence (N_out / forwards, pooled over the repetitions): the
    /// hardware-independent cost of a sampler (AR: 1).
    pub tokens_per_forward: Option<f64>,
    /// Forward passes per run (median over the repetitions).
    pub forward_passes: Option<Summary>,
    /// Largest peak allocated device bytes over the repetitions.
    pub peak_allocated_bytes: Option<u64>,
    /// Largest peak reserved device bytes over the repetitions.
    pub peak_reserved_bytes: Option<u64>,
    /// Largest peak resident set size (CPU runs).
    pub peak_rss_bytes: Option<u64>,
}

/// Summarizes a cell's repetitions. A cell that did not finish (out of memory or failed after some repetitions,
/// which the runner keeps as measured) has no summary, all `None`: every reader then gives it no timing, as
/// `report` and `compare` say.
pub fn cell_summary(cell: &Cell) -> CellSummary {
    if cell.status != CellStatus::Ok {
        return CellSummary::default();
    }
    let reps = &cell.repetitions;
    let collect = |f: &dyn Fn(&Repetition) -> Option<f64>| summarize_owned(reps.iter().filter_map(f).collect());
    let n_out = cell.key.output_tokens;
    // Sized up front and copied slice by slice (a flattening collect grows the vector one value at a time).
    let step_lists = || reps.iter().filter_map(|r| r.step_ms.as_deref());
    let mut steps = Vec::with_capacity(step_lists().map(<[f64]>::len).sum());
    step_lists().for_each(|s| steps.extend_from_slice(s));
    let forwards: u64 = reps.iter().filter_map(|r| r.forward_passes).map(u64::from).sum();
    // Per sequence: the batch's tokens over B rows (a forward of B rows advances each of them).
    let b = u64::from(cell.key.batch_size.max(1));
    let tokens: u64 = reps.iter().filter(|r| r.forward_passes.is_some()).map(|r| r.output_tokens).sum::<u64>() / b;
    CellSummary {
        e2e_ms: collect(&|r| Some(r.e2e_ms)),
        prefill_ms: collect(&|r| r.prefill_ms),
        itl_ms: collect(&|r| itl_ms(r, n_out)),
        first_block_ms: collect(&|r| r.first_block_ms),
        step_ms: summarize_owned(steps),
        tokens_per_s: collect(&tokens_per_s),
        bytes_per_s: collect(&bytes_per_s),
        tokens_per_forward: (forwards > 0).then(|| tokens as f64 / forwards as f64),
        forward_passes: collect(&|r| r.forward_passes.map(f64::from)),
        peak_allocated_bytes: reps.iter().filter_map(|r| r.peak_allocated_bytes).max(),
        peak_reserved_bytes: reps.iter().filter_map(|r| r.peak_reserved_bytes).max(),
        peak_rss_bytes: reps.iter().filter_map(|r| r.peak_rss_bytes).max(),
    }
}

/// A cell's measured latency summary when it ran successfully.
fn ok_latency(cell: &Cell) -> Option<Summary> {
    // Only the latencies: the full `cell_summary` would also summarize every diffusion step.
    (cell.status == CellStatus::Ok)
        .then(|| summarize(&cell.repetitions.iter().map(|r| r.e2e_ms).collect::<Vec<_>>()))
        .flatten()
}

/// A diffusion cell's steps: K for a K-driven sampler; for a threshold sampler the forward passes it measured (the
/// median over its repetitions, rounded up), its place on every steps axis. `None` for AR cells and for threshold
/// cells that recorded no forwards.
pub fn cell_steps(cell: &Cell) -> Option<u32> {
    match (cell.key.steps, cell.key.threshold) {
        (Some(k), _) => Some(k),
        (None, Some(_)) => {
            let f: Vec<f64> = cell.repetitions.iter().filter_map(|r| r.forward_passes).map(f64::from).collect();
            summarize_owned(f).map(|s| s.median.ceil() as u32)
        }
        (None, None) => None,
    }
}

/// One point of a latency-vs-steps curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepPoint {
    /// Diffusion steps K.
    pub steps: u32,
    /// Latency statistics of the cell, ms.
    pub e2e_ms: Summary,
}

/// The AR model's latency at the same (B, N): the reference line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArReference {
    /// AR model id.
    pub model: String,
    /// Latency statistics, ms.
    pub e2e_ms: Summary,
}

/// Latency against diffusion steps for one diffusion model and sampler at one (B, N).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    /// Diffusion model id.
    pub model: String,
    /// Its sampler.
    pub sampler: Sampler,
    /// Its block cache.
    pub cache: Option<BlockCache>,
    /// A threshold series: its points sit at their measured forwards ([`cell_steps`]).
    pub thresholded: bool,
    /// Batch size B.
    pub batch_size: u32,
    /// Sequence length N.
    pub seq_len: u32,
    /// Points sorted by K; only cells with status `ok`.
    pub points: Vec<StepPoint>,
    /// The AR model at the same (B, N), if measured.
    pub ar_reference: Option<ArReference>,
}

/// Latency-vs-steps series of a bundle, sorted by (N, B, model, sampler, cache, K- before threshold-driven).
pub fn latency_vs_steps(bundle: &Bundle) -> Vec<LatencySeries> {
    use std::collections::BTreeMap;
    // Indexed by key, so a bundle of 10,000 cells costs one pass, not one scan per series.
    type Key<'a> = (u32, u32, &'a str, Sampler, Option<BlockCache>, bool);
    let mut series: BTreeMap<Key<'_>, LatencySeries> = BTreeMap::new();
    let mut ar: BTreeMap<(u32, u32), ArReference> = BTreeMap::new();
    for cell in &bundle.cells {
        let key = &cell.key;
        let Some(e2e) = ok_latency(cell) else { continue };
        match cell_steps(cell) {
            None if key.sampler == Sampler::ArGreedy => {
                // The first AR cell of a shape in file order is its reference.
                ar.entry((key.seq_len, key.batch_size))
                    .or_insert_with(|| ArReference { model: key.model.clone(), e2e_ms: e2e });
            }
            None => {}
            Some(k) => series
                .entry((
                    key.seq_len,
                    key.batch_size,
                    key.model.as_str(),
                    key.sampler,
                    key.cache,
                    key.threshold.is_some(),
                ))
                .or_insert_with(|| LatencySeries {
                    model: key.model.clone(),
                    sampler: key.sampler,
                    cache: key.cache,
                    thresholded: key.threshold.is_some(),
                    batch_size: key.batch_size,
                    seq_len: key.seq_len,
                    points: Vec::new(),
                    ar_reference: None,
                })
                .points
                .push(StepPoint { steps: k, e2e_ms: e2e }),
        }
    }
    series
        .into_values()
        .map(|mut s| {
            s.points.sort_by_key(|p| p.steps);
            s.ar_reference = ar.get(&(s.seq_len, s.batch_size)).cloned();
            s
        })
        .collect()
}

/// Indices of the points on the Pareto front of (latency, quality): no other point is at least as fast and
/// at least as good while strictly better in one of the two. Sorted by latency. Non-finite points are ignored.
pub fn pareto_front(points: &[(f64, f64)], direction: Direction) -> Vec<usize> {
    let finite = |p: &(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let dominates = |a: (f64, f64), b: (f64, f64)| {
        let faster_or_eq = a.0 <= b.0;
        let better_or_eq = direction.at_least_as_good(a.1, b.1);
        faster_or_eq && better_or_eq && (a.0 < b.0 || a.1 != b.1)
    };
    let mut front: Vec<usize> = (0..points.len())
        .filter(|&i| finite(&points[i]))
        .filter(|&i| !points.iter().filter(|p| finite(p)).any(|&q| dominates(q, points[i])))
        .collect();
    front.sort_unstable_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    front
}

/// S_parity = min{ k : f(k) at least as good as `baseline` } over `(k, f(k))` points (any order).
pub fn s_parity(points: &[(u32, f64)], baseline: f64, direction: Direction) -> Parity {
    match s_parity_point(points, baseline, direction) {
        Some(i) => Parity::Reached { steps: points[i].0 },
        None => match points.iter().filter(|p| p.1.is_finite()).map(|p| p.0).max() {
            Some(max_steps) => Parity::NotReached { max_steps },
            None => Parity::NoData,
        },
    }
}

/// The index of the point [`s_parity`] names: of the points with a finite value at least as good as `baseline`,
/// the first (in the given order) with the fewest steps; `None` when there is none.
pub fn s_parity_point(points: &[(u32, f64)], baseline: f64, direction: Direction) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, p) in points.iter().enumerate() {
        let good = p.1.is_finite() && direction.at_least_as_good(p.1, baseline);
        if good && best.is_none_or(|b| p.0 < points[b].0) {
            best = Some(i);
        }
    }
    best
}

/// Speedup factor = L_e2e(AR) / L_e2e(diffusion at S_parity); > 1 means the diffusion model is viable.
pub fn speedup(ar_e2e_ms: f64, diffusion_e2e_ms: f64) -> Option<f64> {
    (ar_e2e_ms.is_finite() && ar_e2e_ms > 0.0 && diffusion_e2e_ms.is_finite() && diffusion_e2e_ms > 0.0)
        .then(|| ar_e2e_ms / diffusion_e2e_ms)
}

// ---- The explorer's views ------------------------------------------------------------------------------
//
// Each view takes the cells the user's filters kept, as [`CellRef`]s (a cell, its index in the bundle and
// its [`CellSummary`], computed once when the bundle is read), and returns the numbers it plots.

/// A cell with its position in the bundle and its summary.
#[derive(Debug, Clone, Copy)]
pub struct CellRef<'a> {
    /// Index into [`Bundle::cells`].
    pub index: usize,
    /// The cell.
    pub cell: &'a Cell,
    /// Its [`cell_summary`].
    pub summary: &'a CellSummary,
}

/// [`cell_summary`] of every cell, in bundle order.
pub fn summaries(bundle: &Bundle) -> Vec<CellSummary> {
    bundle.cells.iter().map(cell_summary).collect()
}

/// Throughput of one successful cell: a bar with the spread of its repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputBar {
    /// Index of the cell in the bundle.
    pub cell: usize,
    /// Tokens per second over the batch (B x N_out / L_e2e), over the repetitions.
    pub tokens_per_s: Summary,
    /// Decoded UTF-8 bytes per second over the batch, over the repetitions.
    pub bytes_per_s: Summary,
}

/// Throughput bars of the successful cells, in the order given.
pub fn throughput_bars(cells: &[CellRef<'_>]) -> Vec<ThroughputBar> {
    cells
        .iter()
        .filter(|c| c.cell.status == CellStatus::Ok)
        .filter_map(|c| {
            Some(ThroughputBar {
                cell: c.index,
                tokens_per_s: c.summary.tokens_per_s?,
                bytes_per_s: c.summary.bytes_per_s?,
            })
        })
        .collect()
}

/// Which memory figure a heatmap shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMetric {
    /// Peak bytes allocated by tensors on the device.
    Allocated,
    /// Peak bytes reserved by the device's memory pool.
    Reserved,
    /// Peak resident set size of the process (CPU runs).
    Rss,
}

impl MemoryMetric {
    /// The metric's value in a summary.
    pub fn of(self, s: &CellSummary) -> Option<u64> {
        match self {
            MemoryMetric::Allocated => s.peak_allocated_bytes,
            MemoryMetric::Reserved => s.peak_reserved_bytes,
            MemoryMetric::Rss => s.peak_rss_bytes,
        }
    }
}

/// One cell of a memory heatmap: a model at one (N, B), over every cell given with that key (all K).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryCell {
    /// Model id.
    pub model: String,
    /// Sequence length N (heatmap row).
    pub seq_len: u32,
    /// Batch size B (heatmap column).
    pub batch_size: u32,
    /// Largest peak over the successful cells (a device peak does not depend on K much, the largest is
    /// what must fit); `None` when none measured it.
    pub peak_bytes: Option<u64>,
    /// Indices of the cells merged here.
    pub cells: Vec<usize>,
    /// The cell of [`Self::peak_bytes`] (the first of equal peaks), when one measured it.
    #[serde(default)]
    pub largest: Option<usize>,
    /// The cells that ran out of memory: beside a peak of the cells that ran, they say which K or series did not
    /// fit.
    #[serde(default)]
    pub oom_cells: Vec<usize>,
}

impl MemoryCell {
    /// True when any cell at this (model, N, B) ran out of memory.
    pub fn oom(&self) -> bool {
        !self.oom_cells.is_empty()
    }
}

/// Memory heatmap cells, sorted by (model, N, B).
pub fn memory_heatmap(cells: &[CellRef<'_>], metric: MemoryMetric) -> Vec<MemoryCell> {
    let mut out: Vec<MemoryCell> = Vec::new();
    for c in cells {
        let k = &c.cell.key;
        let value = (c.cell.status == CellStatus::Ok).then(|| metric.of(c.summary)).flatten();
        let oom_cells = if matches!(c.cell.status, CellStatus::Oom { .. }) { vec![c.index] } else { Vec::new() };
        match out.iter_mut().find(|m| m.model == k.model && m.seq_len == k.seq_len && m.batch_size == k.batch_size) {
            Some(m) => {
                if value > m.peak_bytes {
                    m.peak_bytes = value;
                    m.largest = Some(c.index);
                }
                m.cells.push(c.index);
                m.oom_cells.extend(oom_cells);
            }
            None => out.push(MemoryCell {
                model: k.model.clone(),
                seq_len: k.seq_len,
                batch_size: k.batch_size,
                peak_bytes: value,
                cells: vec![c.index],
                largest: value.map(|_| c.index),
                oom_cells,
            }),
        }
    }
    out.sort_by(|a, b| (&a.model, a.seq_len, a.batch_size).cmp(&(&b.model, b.seq_len, b.batch_size)));
    out
}

/// Bytes to decimal gigabytes (10^9), the unit of the heatmap labels.
pub fn gigabytes(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// TTFT and ITL of one successful autoregressive cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArTiming {
    /// Index of the cell in the bundle.
    pub cell: usize,
    /// Time to first token (the prefill pass), ms.
    pub ttft_ms: Summary,
    /// Inter-token latency, ms: (L_e2e - prefill) / (N_out - 1).
    pub itl_ms: Summary,
}

/// TTFT and ITL of the successful AR cells that recorded a prefill time.
pub fn ar_timings(cells: &[CellRef<'_>]) -> Vec<ArTiming> {
    cells
        .iter()
        .filter(|c| c.cell.status == CellStatus::Ok && c.cell.key.sampler == Sampler::ArGreedy)
        .filter_map(|c| Some(ArTiming { cell: c.index, ttft_ms: c.summary.prefill_ms?, itl_ms: c.summary.itl_ms? }))
        .collect()
}

/// Time per diffusion step of one successful diffusion cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    /// Index of the cell in the bundle.
    pub cell: usize,
    /// Diffusion steps ([`cell_steps`]).
    pub steps: u32,
    /// Statistics over every step of every repetition, ms.
    pub step_ms: Summary,
}

/// Time per step of the successful diffusion cells that recorded step times.
pub fn step_timings(cells: &[CellRef<'_>]) -> Vec<StepTiming> {
    cells
        .iter()
        .filter(|c| c.cell.status == CellStatus::Ok)
        .filter_map(|c| Some(StepTiming { cell: c.index, steps: cell_steps(c.cell)?, step_ms: c.summary.step_ms? }))
        .collect()
}

// ---- Quality: Pareto frontier, quality vs steps, S_parity -----------------------------------------------
//
// Bundles carry quality per cell (schema 1.2: measured once per group, in its largest batch; see
// `parity::cell_quality`). These functions take plain inputs, one [`QualityPoint`] per cell that has a value of
// the chosen metric, so they work from whatever a bundle holds.

/// A cell's latency and its value of one quality metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QualityPoint {
    /// Index of the cell in the bundle.
    pub cell: usize,
    /// Diffusion steps ([`cell_steps`]: K, or a threshold cell's measured forwards); `None` for the AR model.
    pub steps: Option<u32>,
    /// Median end-to-end latency, ms.
    pub e2e_ms: f64,
    /// The metric's value.
    pub quality: f64,
}

/// The Pareto view of one (B, N): every point, and which are on the frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParetoView {
    /// The points, as given.
    pub points: Vec<QualityPoint>,
    /// Indices into `points` of the frontier, sorted by latency.
    pub front: Vec<usize>,
}

/// Pareto frontier of (latency, quality) over diffusion and AR points together.
pub fn pareto_view(points: &[QualityPoint], direction: Direction) -> ParetoView {
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.e2e_ms, p.quality)).collect();
    ParetoView { points: points.to_vec(), front: pareto_front(&xy, direction) }
}

/// The S_parity panel of one (B, N).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParityPanel {
    /// The S_parity search over the grid's K.
    pub parity: Parity,
    /// Where the true S_parity lies given the grid: (largest K tried below S_parity that missed, S_parity].
    /// `None` as the lower end when S_parity is the smallest K tried.
    pub interval: Option<(Option<u32>, u32)>,
    /// The AR baseline cell.
    pub ar: QualityPoint,
    /// The diffusion cell at S_parity.
    pub matched: Option<QualityPoint>,
    /// L_e2e(AR) / L_e2e(diffusion at S_parity).
    pub speedup: Option<f64>,
    /// Speedup > 1: the diffusion model is faster at equal quality.
    pub viable: Option<bool>,
}

/// The S_parity panel of one batch size, read from the parity record of its series ([`crate::parity::parity`],
/// the one computation of S_parity that `report`, the stored `bundle.parity` and the explorer share): S_parity
/// and the K below it, the AR cell and the diffusion cell at S_parity at batch size `b`, the speedup and the
/// verdict. `None` when the record has no AR cell at `b` (the record's speedup rows list every B with one).
/// `cells` are the bundle's cells, for the points' indices.
pub fn parity_panel(record: &schema::parity::ParityRecord, b: u32, cells: &[Cell]) -> Option<ParityPanel> {
    let row = record.speedups.iter().find(|s| s.batch_size == b)?;
    let index = |key: &schema::CellKey| cells.iter().position(|c| c.key == *key);
    let ar =
        QualityPoint { cell: index(&row.ar_cell)?, steps: None, e2e_ms: row.ar_e2e_ms, quality: record.baseline.value };
    let interval = crate::parity::grid_interval(record);
    let matched = match (record.outcome, &row.diffusion_cell, row.diffusion_e2e_ms) {
        (Parity::Reached { steps }, Some(key), Some(e2e_ms)) => Some(QualityPoint {
            cell: index(key)?,
            steps: Some(steps),
            e2e_ms,
            quality: record.curve.iter().find(|c| c.steps == steps)?.quality.value,
        }),
        _ => None,
    };
    let speedup = row.speedup.map(|e| e.value);
    Some(ParityPanel { parity: record.outcome, interval, ar, matched, speedup, viable: row.viable })
}

/// Below this fraction of the AR model's output entropy, the diffusion output is flagged as suspiciously
/// repetitive: a low perplexity can then come from degenerate text rather than good text.
pub const ENTROPY_WARNING_RATIO: f64 = 0.8;

/// True when the diffusion output's entropy is far below the AR model's (see [`ENTROPY_WARNING_RATIO`]).
pub fn entropy_warning(diffusion_entropy: f64, ar_entropy: f64) -> bool {
    diffusion_entropy.is_finite()
        && ar_entropy.is_finite()
        && ar_entropy > 0.0
        && diffusion_entropy < ENTROPY_WARNING_RATIO * ar_entropy
}

/// How the run measured that a reader must know before its numbers, as (headline, the rest) each (`report` writes
/// the headline in bold; `figures` puts both in its captions, the explorer under its timing charts): too few runs to say how much a number varies, or
/// fewer warm-ups than the study's protocol (section 4.3.1: 3 on the GPU, 1 for the CPU test), and, for the runner's
/// bundles, that the timings are of its implementation, not of the study's software stack (section 4.2.4).
pub fn run_cautions(bundle: &Bundle) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if bundle.provenance.by_runner() {
        out.push((
            "Timings of dllm-bench's own implementation (Rust, candle)".to_string(),
            ", not of the study's PyTorch and HF transformers stack (section 4.2.4): latencies and speedups are \
             partly the implementations'. jobs/hf_reference.py measures the same grid on that stack, and `dllm-bench \
             report BUNDLE --compare HF.json` gives each arm's factor runner / HF."
                .to_string(),
        ));
    }
    let measured: Vec<&Cell> =
        bundle.cells.iter().filter(|c| c.status == CellStatus::Ok && !c.repetitions.is_empty()).collect();
    let single = measured.iter().filter(|c| c.repetitions.len() < 2).count();
    if single > 0 {
        out.push((
            format!("{single} of {} measured cells have one repetition", measured.len()),
            ": their medians are single runs, with no spread (no standard deviation; the min..max bars over \
             repetitions have no length, while the step-time view's span the steps of one run). Run with \
             `--repetitions 3` or more to see the run-to-run variation."
                .to_string(),
        ));
    }
    let study = if bundle.provenance.device.kind == "cpu" { 1 } else { 3 };
    let warmup = bundle.provenance.config.run.warmup;
    if warmup < study {
        out.push((
            match warmup {
                1 => "1 warm-up run per cell".to_string(),
                n => format!("{n} warm-up runs per cell"),
            },
            format!(
                ", fewer than the study's {study} on this device (section 4.3.1): the first measured runs may include \
                 one-time costs (kernel loading, allocation)."
            ),
        ));
    }
    out
}
