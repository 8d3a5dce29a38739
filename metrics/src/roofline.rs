//! Roofline context: the work a generation does, analytic from the model's shape, in one place.
//!
//! The runner stores these counts per repetition ([`Repetition::weights_read_bytes`],
//! [`Repetition::flop_count`], [`Repetition::kv_cache_bytes`]); the explorer divides them by the measured time
//! ([`achieved_bytes_per_s`], [`achieved_flops_per_s`]) to show how close a run came to the device's memory
//! bandwidth and matrix rate. `dllm-bench bench-kernels` uses the same functions.
//!
//! The counts follow what the runner's transformer computes (one decoder for both architectures: pre-norm
//! blocks with q/k/v/o projections, GQA attention, a SwiGLU MLP, an untied LM head):
//! - Weights read by one forward: every weight matrix and norm vector once (whatever the batch), plus the
//!   embedding rows gathered for the input tokens (the embedding table itself is not streamed).
//! - FLOPs of one forward over `tokens` new tokens per row attending to `context` keys, with logits for
//!   `logits` positions per row: 2 per multiply-add of the projections and the MLP over `B x tokens`, 4 x
//!   `tokens x context x hidden` per layer and row for the two attention products (QK^T and AV, computed in
//!   full: the causal mask is applied to a full score matrix), and 2 x `B x logits x hidden x vocab` for the
//!   LM head. Norms, RoPE, softmax and activations are left out (a few per cent at most).
//! - AR: a prefill over the prompt (logits for its last position), then one single-token step per further
//!   token, each attending to the cache; every step reads all weights once.
//! - LLaDA: each of the K steps is a full bidirectional forward over the whole sequence (no cache), with logits
//!   for the current block only (as the runner's sampler).
//!
//! Activation memory is derived, not stored: peak allocated - weights - KV cache ([`activation_bytes`]).

use crate::derive::CellRef;
use schema::bundle::{Bundle, CellStatus, DevicePeaks, ModelShape, Repetition};
use schema::grid::Precision;

/// Bytes per element of a precision.
pub fn precision_bytes(p: Precision) -> u64 {
    match p {
        Precision::F32 => 4,
        Precision::Bf16 | Precision::F16 => 2,
    }
}

/// Head dimension (`hidden / heads`).
pub fn head_dim(s: &ModelShape) -> u64 {
    u64::from(s.hidden) / u64::from(s.heads.max(1))
}

/// Elements of one block's weight matrices: q, k, v, o and the three MLP matrices.
pub fn matrix_params_per_layer(s: &ModelShape) -> u64 {
    let h = u64::from(s.hidden);
    let q = u64::from(s.heads) * head_dim(s);
    let kv = u64::from(s.kv_heads) * head_dim(s);
    h * q + 2 * h * kv + q * h + 3 * h * u64::from(s.intermediate)
}

/// Every parameter: embedding, blocks (matrices and two norms each), final norm, untied LM head.
pub fn parameters(s: &ModelShape) -> u64 {
    let h = u64::from(s.hidden);
    let v = u64::from(s.vocab);
    2 * v * h + u64::from(s.layers) * (matrix_params_per_layer(s) + 2 * h) + h
}

/// The parameters a checkpoint stores: [`parameters`], less the LM head where it is the embedding (`tied_head`:
/// `tie_word_embeddings`, LLaDA's `weight_tying`), whose one matrix serves both. (What a forward streams,
/// [`streamed_parameters`], is the same either way: the head's matrix is read once.)
pub fn stored_parameters(s: &ModelShape, tied_head: bool) -> u64 {
    parameters(s) - if tied_head { u64::from(s.vocab) * u64::from(s.hidden) } else { 0 }
}

/// Parameters one forward streams whatever the batch: every block, the final norm and the LM head (not the
/// embedding table).
pub fn streamed_parameters(s: &ModelShape) -> u64 {
    parameters(s) - u64::from(s.vocab) * u64::from(s.hidden)
}

/// One forward pass of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    /// Rows (B).
    pub batch: u64,
    /// New tokens per row fed through the blocks.
    pub tokens: u64,
    /// Keys each query attends to (cached + new).
    pub context: u64,
    /// Positions per row that get logits.
    pub logits: u64,
}

/// Bytes of weights one forward reads: the streamed parameters and the gathered embedding rows.
pub fn forward_weight_bytes(s: &ModelShape, f: Forward, dtype_bytes: u64) -> u64 {
    let gathered = product(&[f.batch, f.tokens, u64::from(s.hidden)]);
    product(&[streamed_parameters(s).saturating_add(gathered), dtype_bytes])
}

/// `a x b x ...`, at most [`u64::MAX`]: every count here saturates instead of wrapping, and a saturated count is
/// not recorded ([`countable`]).
fn product(factors: &[u64]) -> u64 {
    factors.iter().fold(1u64, |acc, &f| acc.saturating_mul(f))
}

/// A count as a bundle records it: `None` when it saturated (a grid too large for 64 bits of FLOPs or bytes, as
/// no real model's is), never a wrapped number.
pub fn countable(count: u64) -> Option<u64> {
    (count != u64::MAX).then_some(count)
}

/// FLOPs of one forward (see the module doc for what is counted).
pub fn forward_flops(s: &ModelShape, f: Forward) -> u64 {
    let h = u64::from(s.hidden);
    let layers = u64::from(s.layers);
    let projections = product(&[2, f.batch, f.tokens, matrix_params_per_layer(s), layers]);
    let attention = product(&[4, f.batch, f.tokens, f.context, h, layers]);
    let head = product(&[2, f.batch, f.logits, h, u64::from(s.vocab)]);
    projections.saturating_add(attention).saturating_add(head)
}

/// Bytes of K and V for `tokens` tokens of `batch` rows over all layers.
pub fn kv_cache_bytes(s: &ModelShape, batch: u64, tokens: u64, dtype_bytes: u64) -> u64 {
    product(&[2, u64::from(s.layers), batch, tokens, u64::from(s.kv_heads), head_dim(s), dtype_bytes])
}

/// The work of one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Work {
    /// Forward passes.
    pub forwards: u64,
    /// Bytes of weights read over all forwards.
    pub weights_read_bytes: u64,
    /// FLOPs over all forwards.
    pub flops: u64,
    /// AR: the KV cache at the last step (`prompt + n_out - 1` tokens per row); diffusion: the block cache's
    /// buffers; `None` without a cache.
    pub kv_cache_bytes: Option<u64>,
}

impl Work {
    fn add(&mut self, s: &ModelShape, f: Forward, dtype_bytes: u64) {
        self.forwards += 1;
        self.weights_read_bytes = self.weights_read_bytes.saturating_add(forward_weight_bytes(s, f, dtype_bytes));
        self.flops = self.flops.saturating_add(forward_flops(s, f));
    }
}

/// Greedy AR decoding of `n_out` tokens after a (padded) prompt of `prompt` tokens, `batch` rows.
pub fn autoregressive(s: &ModelShape, batch: u64, prompt: u64, n_out: u64, dtype_bytes: u64) -> Work {
    let mut w = Work::default();
    if n_out == 0 {
        return w;
    }
    w.add(s, Forward { batch, tokens: prompt, context: prompt, logits: 1 }, dtype_bytes);
    for step in 1..n_out {
        // The token chosen at step - 1 is fed; it attends to the prompt and every token fed before it.
        w.add(s, Forward { batch, tokens: 1, context: prompt + step, logits: 1 }, dtype_bytes);
    }
    w.kv_cache_bytes = Some(kv_cache_bytes(s, batch, prompt + n_out - 1, dtype_bytes));
    w
}

/// One AR decode step of `batch` rows attending to `context` keys (the new token included).
pub fn decode_step(s: &ModelShape, batch: u64, context: u64, dtype_bytes: u64) -> Work {
    let mut w = Work::default();
    w.add(s, Forward { batch, tokens: 1, context, logits: 1 }, dtype_bytes);
    w
}

/// A LLaDA sampler with a block cache or none: `block_forwards[i]` forwards in block `i` (K / blocks each for a
/// K-driven sampler; measured for a threshold sampler) of `block_length` positions after a padded prompt of
/// `prompt` tokens. Without a cache every forward is a full one ([`diffusion`]); with one, a block's first forward
/// is full and the others feed the block and everything after it (`prefix`) or the block alone (`dual`), their
/// queries attending to every position. The cache's bytes: K and V of every layer for the whole sequence.
pub fn diffusion_sampler(
    s: &ModelShape,
    batch: u64,
    prompt: u64,
    block_length: u64,
    block_forwards: &[u64],
    cache: Option<schema::grid::BlockCache>,
    dtype_bytes: u64,
) -> Work {
    use schema::grid::BlockCache;
    let len = prompt + block_length * block_forwards.len() as u64;
    let mut w = Work::default();
    for (i, &forwards) in block_forwards.iter().enumerate() {
        let start = prompt + block_length * i as u64;
        for f in 0..forwards {
            let tokens = match cache {
                Some(_) if f == 0 => len,
                None => len,
                Some(BlockCache::Prefix) => len - start,
                Some(BlockCache::Dual) => block_length,
            };
            w.add(s, Forward { batch, tokens, context: len, logits: block_length }, dtype_bytes);
        }
    }
    w.kv_cache_bytes = cache.map(|_| kv_cache_bytes(s, batch, len, dtype_bytes));
    w
}

/// The LLaDA sampler: `steps` full forwards over `seq_len` = prompt + n_out tokens, logits for one block.
pub fn diffusion(s: &ModelShape, batch: u64, seq_len: u64, block_length: u64, steps: u64, dtype_bytes: u64) -> Work {
    let f = Forward { batch, tokens: seq_len, context: seq_len, logits: block_length };
    Work {
        forwards: steps,
        weights_read_bytes: steps.saturating_mul(forward_weight_bytes(s, f, dtype_bytes)),
        flops: steps.saturating_mul(forward_flops(s, f)),
        kv_cache_bytes: None,
    }
}

/// Weights read per second over the repetition's end-to-end time.
pub fn achieved_bytes_per_s(rep: &Repetition) -> Option<f64> {
    let bytes = rep.weights_read_bytes?;
    (rep.e2e_ms > 0.0).then(|| bytes as f64 / (rep.e2e_ms / 1e3))
}

/// FLOPs per second over the repetition's end-to-end time.
pub fn achieved_flops_per_s(rep: &Repetition) -> Option<f64> {
    let flops = rep.flop_count?;
    (rep.e2e_ms > 0.0).then(|| flops as f64 / (rep.e2e_ms / 1e3))
}

/// One cell on the roofline chart: its arithmetic intensity and the rates it achieved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RooflinePoint {
    /// Index of the cell in the bundle.
    pub cell: usize,
    /// FLOPs of one repetition (the median over the repetitions that recorded it).
    pub flop_count: u64,
    /// Bytes of weights one repetition read (the median over the repetitions that recorded it).
    pub weights_read_bytes: u64,
    /// Median end-to-end latency, ms.
    pub e2e_ms: f64,
    /// Arithmetic intensity: FLOPs per byte of weights read.
    pub intensity: f64,
    /// FLOPs per second over the median latency.
    pub flops_per_s: f64,
    /// Bytes of weights read per second over the median latency.
    pub bytes_per_s: f64,
}

fn median_count(values: impl Iterator<Item = u64>) -> Option<u64> {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some(v[n / 2 - 1] / 2 + v[n / 2] / 2 + (v[n / 2 - 1] % 2 + v[n / 2] % 2) / 2),
    }
}

/// The roofline points of the successful cells that recorded their work (bundles of schema 1.2 and later), in
/// the order given: intensity = FLOPs / bytes of weights read; the achieved rates divide the counts (the
/// median over the repetitions; analytic, so all repetitions of a cell normally agree) by the median
/// end-to-end latency ([`crate::derive::CellSummary::e2e_ms`]).
pub fn roofline_points(cells: &[CellRef<'_>]) -> Vec<RooflinePoint> {
    cells
        .iter()
        .filter(|c| c.cell.status == CellStatus::Ok)
        .filter_map(|c| {
            let reps = &c.cell.repetitions;
            let flop_count = median_count(reps.iter().filter_map(|r| r.flop_count))?;
            let weights_read_bytes = median_count(reps.iter().filter_map(|r| r.weights_read_bytes))?;
            let e2e_ms = c.summary.e2e_ms?.median;
            let secs = e2e_ms / 1e3;
            (secs > 0.0 && weights_read_bytes > 0).then(|| RooflinePoint {
                cell: c.index,
                flop_count,
                weights_read_bytes,
                e2e_ms,
                intensity: flop_count as f64 / weights_read_bytes as f64,
                flops_per_s: flop_count as f64 / secs,
                bytes_per_s: weights_read_bytes as f64 / secs,
            })
        })
        .collect()
}

/// True when any cell of the bundle recorded its work (weights read and FLOPs), i.e. a roofline can be drawn.
pub fn has_roofline(bundle: &Bundle) -> bool {
    bundle.cells.iter().flat_map(|c| &c.repetitions).any(|r| r.flop_count.is_some() && r.weights_read_bytes.is_some())
}

/// The device ceilings a bundle recorded (since 1.4: each execution's probes before its first cell), with the
/// index of the execution that measured them, in execution order. The roofline's ceilings are the first's; every
/// reader takes them from here.
pub fn recorded_peaks(bundle: &Bundle) -> Vec<(usize, &DevicePeaks)> {
    bundle.provenance.executions.iter().enumerate().filter_map(|(i, e)| Some((i, e.device_peaks.as_ref()?))).collect()
}

/// The roofline ceiling at arithmetic intensity `intensity` (FLOP/byte): min(peak FLOP rate, intensity x peak
/// bandwidth); a peak that is `None` does not bound it (`None` when neither is given).
pub fn attainable_flops_per_s(
    intensity: f64,
    peak_bytes_per_s: Option<f64>,
    peak_flops_per_s: Option<f64>,
) -> Option<f64> {
    match (peak_bytes_per_s.map(|b| b * intensity), peak_flops_per_s) {
        (Some(m), Some(p)) => Some(m.min(p)),
        (a, b) => a.or(b),
    }
}

/// The ridge point: the intensity (FLOP/byte) where the bandwidth roof meets the compute roof.
pub fn ridge_intensity(peak_bytes_per_s: f64, peak_flops_per_s: f64) -> Option<f64> {
    (peak_bytes_per_s > 0.0).then(|| peak_flops_per_s / peak_bytes_per_s)
}

/// Activation memory at the peak: peak allocated - weights - KV cache (AR), when the device reported a peak.
pub fn activation_bytes(rep: &Repetition, weights_bytes: Option<u64>) -> Option<u64> {
    let peak = rep.peak_allocated_bytes?;
    Some(peak.saturating_sub(weights_bytes?).saturating_sub(rep.kv_cache_bytes.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Meta-Llama-3-8B.
    fn llama3_8b() -> ModelShape {
        ModelShape { layers: 32, hidden: 4096, heads: 32, kv_heads: 8, intermediate: 14336, vocab: 128_256 }
    }

    #[test]
    fn llama3_8b_parameters_and_kv() {
        let s = llama3_8b();
        assert_eq!(parameters(&s), 8_030_261_248);
        // 128 KiB of KV per token in bf16 (the model card's figure).
        assert_eq!(kv_cache_bytes(&s, 1, 1, 2), 128 * 1024);
    }

    #[test]
    fn ar_counts_a_prefill_and_n_out_minus_one_steps() {
        let s = llama3_8b();
        let w = autoregressive(&s, 1, 10, 4, 2);
        assert_eq!(w.forwards, 4);
        let streamed = streamed_parameters(&s) * 2;
        assert_eq!(w.weights_read_bytes, 4 * streamed + (10 + 3) * 4096 * 2);
        assert_eq!(w.kv_cache_bytes, Some(13 * 128 * 1024));
        // A decode step is about 2 FLOPs per parameter.
        let step = decode_step(&s, 1, 11, 2).flops as f64;
        let ratio = step / (2.0 * streamed_parameters(&s) as f64);
        assert!((1.0..1.01).contains(&ratio), "{ratio}");
    }

    #[test]
    fn counts_past_64_bits_saturate_and_are_not_recorded() {
        // LLaDA-8B's shape at B = 4096, N = 4096, K = 32768: about 9e21 FLOPs, past u64 (1.8e19).
        let s = ModelShape { vocab: 126_464, kv_heads: 32, intermediate: 12288, ..llama3_8b() };
        let w = diffusion(&s, 4096, 4096, 32, 32_768, 2);
        assert_eq!(w.flops, u64::MAX);
        assert_eq!(countable(w.flops), None);
        // The primary grid's largest cell fits, and is recorded as counted.
        let w = diffusion(&s, 32, 2048, 32, 256, 2);
        assert!(w.flops < u64::MAX / 10);
        assert_eq!(countable(w.flops), Some(w.flops));
    }

    #[test]
    fn diffusion_step_is_2_params_tokens_plus_attention() {
        let s = ModelShape { vocab: 126_464, kv_heads: 32, intermediate: 12288, ..llama3_8b() };
        let (b, n) = (8u64, 1024u64);
        let w = diffusion(&s, b, n, 32, 1, 2);
        let blocks = 2 * b * n * matrix_params_per_layer(&s) * 32;
        let attention = 4 * n * n * 4096 * 32 * b;
        let head = 2 * b * 32 * 4096 * 126_464;
        assert_eq!(w.flops, blocks + attention + head);
    }

    #[test]
    fn roofline_points_use_the_median_latency() {
        let json = include_str!("../../schema/tests/fixtures/v1.2/demo-quality.json");
        let b = schema::read_bundle(json).expect("fixture reads");
        assert!(has_roofline(&b));
        let sums = crate::derive::summaries(&b);
        let cells: Vec<CellRef> = b
            .cells
            .iter()
            .zip(&sums)
            .enumerate()
            .map(|(index, (cell, summary))| CellRef { index, cell, summary })
            .collect();
        let pts = roofline_points(&cells);
        assert!(!pts.is_empty());
        let p = pts[0];
        let c = &b.cells[p.cell];
        let rep = &c.repetitions[0];
        assert_eq!(Some(p.flop_count), rep.flop_count);
        assert_eq!(Some(p.weights_read_bytes), rep.weights_read_bytes);
        let median = sums[p.cell].e2e_ms.expect("latency").median;
        assert!((p.flops_per_s - p.flop_count as f64 / (median / 1e3)).abs() < 1e-6 * p.flops_per_s);
        assert!((p.intensity * p.bytes_per_s - p.flops_per_s).abs() < 1e-6 * p.flops_per_s);
    }

    #[test]
    fn ceilings_and_ridge() {
        assert_eq!(attainable_flops_per_s(10.0, Some(2.0), Some(100.0)), Some(20.0));
        assert_eq!(attainable_flops_per_s(100.0, Some(2.0), Some(100.0)), Some(100.0));
        assert_eq!(attainable_flops_per_s(100.0, None, Some(5.0)), Some(5.0));
        assert_eq!(attainable_flops_per_s(100.0, Some(2.0), None), Some(200.0));
        assert_eq!(attainable_flops_per_s(1.0, None, None), None);
        assert!(ridge_intensity(4.8e12, 989e12).is_some_and(|r| (r - 989.0 / 4.8).abs() < 1e-9));
        assert_eq!(ridge_intensity(0.0, 1.0), None);
        assert_eq!(median_count([3, 1, 2].into_iter()), Some(2));
        assert_eq!(median_count([u64::MAX, u64::MAX].into_iter()), Some(u64::MAX));
    }
}
