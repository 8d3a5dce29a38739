//! Every derived number, computed once: summary statistics, latencies, throughput, Pareto fronts,
//! S_parity and the speedup factor. The runner's reports and the explorer (compiled to wasm) both call
//! this module, so they cannot disagree.
//!
//! Definitions follow the study (section 3.1): ITL = (L_e2e - prefill) / (N_out - 1);
//! T_gen = B x N_out / L_e2e; S_parity = min{ k : f_llada(k) at least as good as Q_llama };
//! speedup = L_e2e(AR) / L_e2e(LLaDA at S_parity). A statistic of no values is `None`, never 0.

use serde::{Deserialize, Serialize};

use crate::bundle::{Bundle, Cell, CellStatus, Repetition, Sampler};

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
    /// Sample standard deviation (n - 1); 0 for one value.
    pub std: f64,
}

/// Summarizes finite values; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    let var = if n > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64 } else { 0.0 };
    Some(Summary { n, mean, median, min: v[0], max: v[n - 1], std: var.sqrt() })
}

/// Inter-token latency of one AR repetition, when it has a prefill time and more than one token per row.
pub fn itl_ms(rep: &Repetition, output_tokens_per_row: u32) -> Option<f64> {
    let prefill = rep.prefill_ms?;
    (output_tokens_per_row > 1).then(|| (rep.e2e_ms - prefill) / f64::from(output_tokens_per_row - 1))
}

/// Generation throughput of one repetition in tokens per second (B x N_out / L_e2e).
pub fn tokens_per_s(rep: &Repetition) -> Option<f64> {
    (rep.e2e_ms > 0.0).then(|| rep.output_tokens as f64 / (rep.e2e_ms / 1000.0))
}

/// Throughput in UTF-8 bytes of decoded text per second (comparable across tokenizers).
pub fn bytes_per_s(rep: &Repetition) -> Option<f64> {
    (rep.e2e_ms > 0.0).then(|| rep.output_bytes as f64 / (rep.e2e_ms / 1000.0))
}

/// Everything derived for one cell. Absent where the cell did not measure it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Tokens committed per forward evaluation (B x N_out / NFE).
    pub tokens_per_forward: Option<f64>,
    /// Largest peak allocated device bytes over the repetitions.
    pub peak_allocated_bytes: Option<u64>,
    /// Largest peak reserved device bytes over the repetitions.
    pub peak_reserved_bytes: Option<u64>,
    /// Largest peak resident set size (CPU runs).
    pub peak_rss_bytes: Option<u64>,
}

/// Summarizes a cell's repetitions.
pub fn cell_summary(cell: &Cell) -> CellSummary {
    let reps = &cell.repetitions;
    let collect = |f: &dyn Fn(&Repetition) -> Option<f64>| summarize(&reps.iter().filter_map(f).collect::<Vec<_>>());
    let n_out = cell.key.output_tokens;
    let steps: Vec<f64> = reps.iter().filter_map(|r| r.step_ms.as_ref()).flatten().copied().collect();
    let forwards: u64 = reps.iter().filter_map(|r| r.forward_passes).map(u64::from).sum();
    let tokens: u64 = reps.iter().filter(|r| r.forward_passes.is_some()).map(|r| r.output_tokens).sum();
    CellSummary {
        e2e_ms: collect(&|r| Some(r.e2e_ms)),
        prefill_ms: collect(&|r| r.prefill_ms),
        itl_ms: collect(&|r| itl_ms(r, n_out)),
        first_block_ms: collect(&|r| r.first_block_ms),
        step_ms: summarize(&steps),
        tokens_per_s: collect(&tokens_per_s),
        bytes_per_s: collect(&bytes_per_s),
        tokens_per_forward: (forwards > 0).then(|| tokens as f64 / forwards as f64),
        peak_allocated_bytes: reps.iter().filter_map(|r| r.peak_allocated_bytes).max(),
        peak_reserved_bytes: reps.iter().filter_map(|r| r.peak_reserved_bytes).max(),
        peak_rss_bytes: reps.iter().filter_map(|r| r.peak_rss_bytes).max(),
    }
}

/// A cell's measured latency summary when it ran successfully.
fn ok_latency(cell: &Cell) -> Option<Summary> {
    (cell.status == CellStatus::Ok).then(|| cell_summary(cell).e2e_ms).flatten()
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
    /// Batch size B.
    pub batch_size: u32,
    /// Sequence length N.
    pub seq_len: u32,
    /// Points sorted by K; only cells with status `ok`.
    pub points: Vec<StepPoint>,
    /// The AR model at the same (B, N), if measured.
    pub ar_reference: Option<ArReference>,
}

/// Latency-vs-steps series of a bundle, sorted by (N, B, model, sampler).
pub fn latency_vs_steps(bundle: &Bundle) -> Vec<LatencySeries> {
    let mut series: Vec<LatencySeries> = Vec::new();
    for cell in &bundle.cells {
        let (Some(k), Some(e2e)) = (cell.key.steps, ok_latency(cell)) else { continue };
        let key = &cell.key;
        let point = StepPoint { steps: k, e2e_ms: e2e };
        match series.iter_mut().find(|s| {
            s.model == key.model
                && s.sampler == key.sampler
                && s.batch_size == key.batch_size
                && s.seq_len == key.seq_len
        }) {
            Some(s) => s.points.push(point),
            None => series.push(LatencySeries {
                model: key.model.clone(),
                sampler: key.sampler,
                batch_size: key.batch_size,
                seq_len: key.seq_len,
                points: vec![point],
                ar_reference: None,
            }),
        }
    }
    for s in &mut series {
        s.points.sort_by_key(|p| p.steps);
        s.ar_reference = bundle
            .cells
            .iter()
            .filter(|c| {
                c.key.sampler == Sampler::ArGreedy && c.key.batch_size == s.batch_size && c.key.seq_len == s.seq_len
            })
            .find_map(|c| ok_latency(c).map(|e2e_ms| ArReference { model: c.key.model.clone(), e2e_ms }));
    }
    series.sort_by(|a, b| {
        (a.seq_len, a.batch_size, &a.model, a.sampler).cmp(&(b.seq_len, b.batch_size, &b.model, b.sampler))
    });
    series
}

/// Whether larger or smaller values of a quality metric are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Perplexity and other losses.
    LowerIsBetter,
    /// BERTScore, ROUGE and other scores.
    HigherIsBetter,
}

impl Direction {
    /// True when `a` is at least as good as `b`.
    pub fn at_least_as_good(self, a: f64, b: f64) -> bool {
        match self {
            Direction::LowerIsBetter => a <= b,
            Direction::HigherIsBetter => a >= b,
        }
    }
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
    front.sort_by(|&a, &b| points[a].0.total_cmp(&points[b].0).then(a.cmp(&b)));
    front
}

/// The outcome of the S_parity search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Parity {
    /// The fewest steps of the grid at which the diffusion model is at least as good as the AR baseline.
    Reached {
        /// S_parity.
        steps: u32,
    },
    /// No step count of the grid reached parity; `max_steps` is the largest tried.
    NotReached {
        /// K_max of the grid.
        max_steps: u32,
    },
    /// No diffusion quality values at all.
    NoData,
}

/// S_parity = min{ k : f(k) at least as good as `baseline` } over `(k, f(k))` points (any order).
pub fn s_parity(points: &[(u32, f64)], baseline: f64, direction: Direction) -> Parity {
    let valid: Vec<(u32, f64)> = points.iter().copied().filter(|p| p.1.is_finite()).collect();
    match valid.iter().filter(|p| direction.at_least_as_good(p.1, baseline)).map(|p| p.0).min() {
        Some(steps) => Parity::Reached { steps },
        None => match valid.iter().map(|p| p.0).max() {
            Some(max_steps) => Parity::NotReached { max_steps },
            None => Parity::NoData,
        },
    }
}

/// Speedup factor = L_e2e(AR) / L_e2e(diffusion at S_parity); > 1 means the diffusion model is viable.
pub fn speedup(ar_e2e_ms: f64, diffusion_e2e_ms: f64) -> Option<f64> {
    (ar_e2e_ms.is_finite() && diffusion_e2e_ms.is_finite() && diffusion_e2e_ms > 0.0)
        .then(|| ar_e2e_ms / diffusion_e2e_ms)
}
