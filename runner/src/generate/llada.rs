//! The reference LLaDA sampler (`generate.py` of ML-GSAI/LLaDA), step for step, and its block-cache and
//! confidence-threshold variants.
//!
//! The working sequence is the (left-padded) prompt followed by `n_out` mask tokens, split into
//! `n_out / block_length` blocks worked through left to right with `steps / blocks` steps each. At the start of
//! a block, each row's M masked positions get a schedule: every step unmasks floor(M / steps_per_block) tokens
//! and the first M mod steps_per_block steps one more ([`transfer_schedule`]). Each step is one full
//! bidirectional forward over the whole sequence (no cache; NFE = steps). Per row, the masked positions up to the
//! current block's end are ranked by confidence (softmax probability of the predicted token, computed on the device
//! in f32 by default, in f64 as the reference does, or in the logits' dtype: see [`Confidence`]; or uniform
//! random numbers) and the top k take their predicted tokens; everything else gets -inf.
//! A committed token is never remasked and there is no early stop. A position whose predicted token is the mask id
//! itself stays masked when chosen: it is ranked again at the next step and, as in the reference, in later blocks
//! (the schedule counts only the current block's masks). The committed counts ([`LladaOutput::transfers`]) count
//! real tokens only.
//!
//! Faster variants (Fast-dLLM's, written from its paper's description; each a sampler series of the grid):
//! - A block KV cache ([`BlockCache`]): the block's first step is one full forward that also fills a cache of every
//!   position's keys and values; the block's other steps feed only the block and what follows it (`prefix`: the
//!   positions before the block are read from the cache) or only the block (`dual`: the positions after it too).
//!   Cached keys and values are those of the block's first step: the approximation the method makes. Our
//!   choices: the cache holds the whole sequence in one preallocated buffer per layer (the prefix cache rewrites
//!   the positions it feeds rather than dropping them), and the LM head still runs only over the positions ranked
//!   (the block's; at a refresh, from the first still-masked position before it).
//! - Confidence-threshold parallel decoding (`threshold`): each step commits every masked position of the block
//!   whose confidence is at least the threshold, and the most confident one when none is; a block ends when it
//!   is full, so the number of forwards is measured. In a batch, a step runs while any row's block has a masked
//!   position; full rows commit nothing. A block whose steps commit nothing (the model predicts the mask id
//!   wherever a step commits: the reference would loop forever) fails the generation
//!   ([`GenerateError::Stalled`]).
//! - With a cache, a K-driven block also ends as soon as it is full (Fast-dLLM's loop), so surplus steps
//!   (K / blocks > block_length) cost no forward; a cached step ranks the block's positions only, a full forward
//!   (a block's first) every masked position up to the block's end, as the reference.
//!
//! Deliberate, result-preserving differences from the reference:
//! - The LM head runs only over the positions ranked: the current block's, from the first still-masked position
//!   before it where there is one. Elsewhere the reference gives -inf confidence (after the block) or the position
//!   is committed, so those logits are never used. The transformer body still runs over the whole sequence each
//!   step; only the head's unused rows are skipped (about 6% of a step's FLOPs at the 8B shapes with N = 1024,
//!   block 32).
//! - Gumbel-max is computed as argmax(logits + T * Gumbel), the logarithm of the reference's
//!   exp(logits) / (-log U)^T: the same argmax without overflowing exp. The noise is drawn on the device in f32
//!   from its seeded generator by default, or on the host from a seeded SplitMix64 in f64 ([`GumbelNoise`]):
//!   the host stream gives the same samples on every device (but not bitwise torch's); the device's does not.
//! - Ties in the top-k break towards the lower position (torch.topk leaves them unspecified).
//! - A prompt containing the mask id is refused (the reference would let the sampler overwrite it).
//!
//! Left-padded rows keep RoPE positions 0..L-1 (as the reference). The padding is masked out of attention here,
//! where the official model code builds a mask from `attention_mask` but never applies it (LLaDA was trained
//! without one): a padded row's output can differ from its unpadded run and from the official code's. The sweep
//! never pads (every row holds exactly the cell's prompt tokens), so its cells are not affected.

use candle_core::{D, DType, Tensor};
use schema::grid::ModelKind;
use serde::{Deserialize, Serialize};

use super::{GenerateError, MaskedBatch, check_finite, check_interrupted, masked_batch, params_err};
use crate::device::timing::Stopwatch;
use crate::model::{LoadedModel, LogitsSpan, Positions};
use crate::synth::rng::SplitMix64;

/// How the positions to commit are ranked within a block, the precision of that ranking and where Gumbel noise
/// is drawn: the config's enums, one type each for config and sampler.
pub use schema::grid::{BlockCache, Confidence, GumbelNoise, Remasking};

/// Sampler parameters (`gen_length` is the `n_out` argument).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LladaParams {
    /// Total forward passes; a multiple of the number of blocks.
    pub steps: usize,
    /// Tokens per block; `n_out` must be a multiple of it.
    pub block_length: usize,
    /// 0: argmax; > 0: Gumbel-max sampling at this temperature.
    #[serde(default)]
    pub temperature: f64,
    #[serde(default = "default_remasking")]
    pub remasking: Remasking,
    /// Seed of the Gumbel noise and of random remasking.
    #[serde(default)]
    pub seed: u64,
    /// Classifier-free guidance scale s (the reference's `cfg_scale`): 0 is none; s > 0 adds an unconditional
    /// pass per step with the prompt masked, and the logits become `un + (s + 1) * (cond - un)`: 2 forward
    /// evaluations per step (both rows of a step go through one batched forward of 2B rows).
    #[serde(default)]
    pub cfg_scale: f64,
    /// Precision of the low-confidence ranking (see [`Confidence`]).
    #[serde(default)]
    pub confidence: Confidence,
    /// Where the Gumbel noise of temperature > 0 is drawn (see [`GumbelNoise`]).
    #[serde(default)]
    pub gumbel_noise: GumbelNoise,
    /// A block KV cache (see [`BlockCache`]); `None`: one full forward per step, the reference's.
    #[serde(default)]
    pub cache: Option<BlockCache>,
    /// Confidence-threshold parallel decoding: each step commits every masked position of the block whose
    /// confidence is at least this (at least one), until the block is full; `steps` is then not used. `None`: the
    /// fixed schedule of `steps` steps.
    #[serde(default)]
    pub threshold: Option<f64>,
}

fn default_remasking() -> Remasking {
    Remasking::LowConfidence
}

impl Default for LladaParams {
    /// The reference defaults: 128 steps, one block of 128, temperature 0, low-confidence remasking.
    fn default() -> Self {
        Self {
            steps: 128,
            block_length: 128,
            temperature: 0.0,
            remasking: Remasking::LowConfidence,
            seed: 0,
            cfg_scale: 0.0,
            confidence: Confidence::F32,
            gumbel_noise: GumbelNoise::Device,
            cache: None,
            threshold: None,
        }
    }
}

impl LladaParams {
    /// Checks the parameters against `n_out`; returns (blocks, steps per block); a threshold sampler's steps per
    /// block are measured, and returned as 0.
    pub fn validate(&self, n_out: usize) -> Result<(usize, usize), GenerateError> {
        if n_out == 0 {
            return params_err("n_out must be at least 1");
        }
        if self.block_length == 0 || !n_out.is_multiple_of(self.block_length) {
            return params_err(format!(
                "n_out ({n_out}) must be a positive multiple of block_length ({})",
                self.block_length
            ));
        }
        let blocks = n_out / self.block_length;
        if let Some(t) = self.threshold {
            if !(t.is_finite() && t >= 0.0) {
                return params_err(format!("threshold must be a finite number >= 0, got {t}"));
            }
        } else if self.steps == 0 {
            return params_err("steps must be at least 1");
        } else if !self.steps.is_multiple_of(blocks) {
            return params_err(format!(
                "steps ({}) must be a multiple of the number of blocks ({blocks} = n_out {n_out} / block_length {})",
                self.steps, self.block_length
            ));
        }
        if self.threshold.is_some() {
            return self.check_rest().map(|()| (blocks, 0));
        }
        self.check_rest()?;
        Ok((blocks, self.steps / blocks))
    }

    fn check_rest(&self) -> Result<(), GenerateError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return params_err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if !(self.cfg_scale.is_finite() && self.cfg_scale >= 0.0) {
            return params_err(format!("cfg_scale must be >= 0, got {}", self.cfg_scale));
        }
        Ok(())
    }
}

/// Tokens to unmask at each of a block's `steps_per_block` steps when `masked` positions are masked.
pub fn transfer_schedule(masked: usize, steps_per_block: usize) -> Vec<usize> {
    if steps_per_block == 0 {
        return Vec::new();
    }
    let (base, rem) = (masked / steps_per_block, masked % steps_per_block);
    (0..steps_per_block).map(|i| base + usize::from(i < rem)).collect()
}

/// Result of [`generate_llada`].
#[derive(Debug, Clone, PartialEq)]
pub struct LladaOutput {
    /// `n_out` generated ids per row.
    pub tokens: Vec<Vec<u32>>,
    /// From the ids on the device to the last commit.
    pub e2e_ms: f64,
    /// From the start until the first block is fully committed.
    pub first_block_ms: f64,
    /// Wall time of each step (forward + selection).
    pub step_ms: Vec<f64>,
    /// Forward evaluations: steps, twice that with classifier-free guidance.
    pub nfe: usize,
    /// Forwards run in each block (steps per block, or as many as the threshold needed).
    pub block_steps: Vec<usize>,
    /// Bytes of the block cache's buffers (`None` without a cache).
    pub cache_bytes: Option<usize>,
    /// Tokens committed at each step, per row: `transfers[step][row]`.
    pub transfers: Vec<Vec<usize>>,
    /// The padded prompt length (the longest prompt).
    pub prompt_len: usize,
}

/// Runs the reference sampler on `prompts` (ids without BOS), generating exactly `n_out` tokens per row.
pub fn generate_llada(
    model: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    params: &LladaParams,
) -> Result<LladaOutput, GenerateError> {
    generate_llada_observed(model, prompts, n_out, params, &mut |_, _| {})
}

/// [`generate_llada`] calling `observe(step, sequences)` after every step with the whole padded sequences.
pub fn generate_llada_observed(
    model: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    params: &LladaParams,
    observe: &mut dyn FnMut(usize, &[Vec<u32>]),
) -> Result<LladaOutput, GenerateError> {
    if model.kind != ModelKind::Llada {
        return params_err("the LLaDA sampler needs a bidirectional (LLaDA) model");
    }
    let (blocks, spb) = params.validate(n_out)?;
    let MaskedBatch { batch, mask, mut x, key_valid } = masked_batch(model, prompts, n_out)?;
    let (b, p) = (prompts.len(), batch.len);
    let len = p + n_out;
    let tf = &model.transformer;
    let device = tf.device();
    let bl = params.block_length;
    let mut rng = SplitMix64::new(params.seed);
    let device_noise = seed_device_noise(device, params)?;

    let total = Stopwatch::start(device)?;
    let mut lap = Stopwatch::start(device)?;
    let rope = tf.rope(&Positions::Range { start: 0, len })?;
    let valid = batch.any_pad.then_some(key_valid.as_slice());
    // With guidance, each step's forward runs the B conditional rows and their B unconditional twins (the prompt's
    // real tokens masked; padding stays padding) as one batch of 2B rows.
    let guided = params.cfg_scale > 0.0;
    let rows = if guided { 2 * b } else { b };
    let key_valid_rows: Vec<Vec<bool>> = key_valid.iter().cycle().take(rows).cloned().collect();
    let valid_rows = batch.any_pad.then_some(key_valid_rows.as_slice());
    let bias = tf.attention_bias(if guided { valid_rows } else { valid }, rows, 0, len, len)?;
    let mut cache = params.cache.map(|_| tf.new_cache(len));
    let mut block_steps = Vec::with_capacity(blocks);
    let mut step_ms = Vec::new();
    let mut transfers = Vec::new();
    let mut first_block_ms = 0.0;
    let mut step = 0;
    let mut last_logits = None;
    let mut stalled = 0;
    for block in 0..blocks {
        let (start, end) = (p + block * bl, p + (block + 1) * bl);
        let masked_in_block = |x: &[Vec<u32>]| {
            x.iter().map(|row| row[start..end].iter().filter(|&&t| t == mask).count()).collect::<Vec<_>>()
        };
        let schedules: Vec<Vec<usize>> = masked_in_block(&x).into_iter().map(|m| transfer_schedule(m, spb)).collect();
        for s in 0.. {
            // A K-driven block ends after its steps (a cached one as soon as it is full, as Fast-dLLM's); a threshold
            // block when every row's block is full.
            let full = || masked_in_block(&x).iter().all(|&m| m == 0);
            let done = match (params.threshold, params.cache) {
                (Some(_), _) => full(),
                (None, None) => s == spb,
                (None, Some(_)) => s == spb || full(),
            };
            if done {
                break;
            }
            check_interrupted()?;
            // The positions ranked this step: on a full forward, every masked position up to the block's end, as
            // the reference ranks them (a position whose committed prediction was the mask id stays masked, and is
            // ranked again in later blocks); on a cached step, the block's alone (Fast-dLLM's).
            let whole = params.cache.is_none() || s == 0;
            let leftover = |row: &Vec<u32>| row[p..start].iter().position(|&t| t == mask).map(|j| p + j);
            let lo = if whole { x.iter().filter_map(leftover).min().unwrap_or(start) } else { start };
            // The positions this step feeds: all of them without a cache and at a block's refresh; from the block's
            // start to the end with a prefix cache; the block alone with a dual cache.
            let (from, to, span) = match params.cache {
                _ if whole => (0, len, LogitsSpan::Range { start: lo, len: end - lo }),
                Some(BlockCache::Prefix) => (start, len, LogitsSpan::Range { start: 0, len: bl }),
                _ => (start, end, LogitsSpan::All),
            };
            let mut flat: Vec<u32> = Vec::with_capacity(rows * (to - from));
            x.iter().for_each(|row| flat.extend_from_slice(&row[from..to]));
            if guided {
                for (row, valid) in x.iter().zip(&batch.valid) {
                    let masked_prompt = (from..to).map(|j| if j < p && valid[j] { mask } else { row[j] });
                    flat.extend(masked_prompt);
                }
            }
            let ids = Tensor::from_vec(flat, (rows, to - from), device)?;
            let step_rope = if to - from == len { rope.clone() } else { rope.narrow(from, to - from)? };
            if let Some(c) = cache.as_mut() {
                c.seek(from)?;
            }
            let mut logits = tf.forward(&ids, &step_rope, bias.as_ref(), cache.as_mut(), span)?;
            if guided {
                let (cond, un) = (logits.narrow(0, 0, b)?, logits.narrow(0, b, b)?);
                logits = (&un + ((cond - &un)? * (params.cfg_scale + 1.0))?)?;
            }
            let (pred, conf) = predict(&logits, params, device_noise, &mut rng)?;
            last_logits = Some(logits);
            let mut applied = Vec::with_capacity(b);
            let w = end - lo;
            let rows = x.iter_mut().zip(&schedules).zip(conf.chunks(w).zip(pred.chunks(w)));
            for ((row, schedule), (conf, pred)) in rows {
                let k = match params.threshold {
                    // A row whose block is full waits for the others.
                    Some(_) if !row[start..end].contains(&mask) => 0,
                    Some(t) => threshold_count(&row[lo..end], mask, conf, t),
                    None => schedule[s],
                };
                let ranked = &mut row[lo..end];
                let chosen = select_positions(ranked, mask, conf, k);
                for &j in &chosen {
                    ranked[j] = pred[j];
                }
                // Tokens committed: a chosen position that took the mask id is still masked.
                applied.push(chosen.iter().filter(|&&j| ranked[j] != mask).count());
            }
            // A threshold block that commits nothing would run forever (the model predicts the mask id wherever it
            // commits): at temperature 0 with low-confidence remasking the next step is this one again.
            if params.threshold.is_some() && applied.iter().all(|&n| n == 0) {
                stalled += 1;
                let repeats = params.temperature == 0.0 && params.remasking == Remasking::LowConfidence;
                if repeats || stalled >= MAX_STALLED_STEPS {
                    return Err(GenerateError::Stalled(format!(
                        "block {block} of the threshold sampler committed no token in {stalled} forward(s): the \
                         model predicts the mask id at every position the step chose, so the block cannot be \
                         filled"
                    )));
                }
            } else {
                stalled = 0;
            }
            transfers.push(applied);
            step_ms.push(lap.lap_ms()?);
            observe(step, &x);
            step += 1;
        }
        block_steps.push(step - block_steps.iter().sum::<usize>());
        if block == 0 {
            first_block_ms = total.elapsed_ms()?;
        }
    }
    let e2e_ms = total.elapsed_ms()?;
    // After the timed region: NaN anywhere upstream reaches the last step's logits.
    if let Some(l) = &last_logits {
        check_finite(l, "the logits of the last diffusion step")?;
    }
    Ok(LladaOutput {
        tokens: x.iter().map(|r| r[p..].to_vec()).collect(),
        e2e_ms,
        first_block_ms,
        step_ms,
        nfe: if guided { 2 * step } else { step },
        block_steps,
        cache_bytes: cache.as_ref().map(|c| c.allocated_bytes()),
        transfers,
        prompt_len: p,
    })
}

/// Consecutive forwards of a threshold block that commit nothing (see [`GenerateError::Stalled`]) before the
/// sampler gives up, where the steps are not bound to repeat (temperature > 0, random remasking).
const MAX_STALLED_STEPS: usize = 64;

/// The positions of `block` to commit this step: the `k` masked positions with the highest confidence, ties
/// (and NaN, ranked last) broken towards the lower position. Unmasked positions are never chosen.
pub fn select_positions(block: &[u32], mask: u32, conf: &[f64], k: usize) -> Vec<usize> {
    let mut cand: Vec<(usize, f64)> = block
        .iter()
        .enumerate()
        .filter(|&(_, &t)| t == mask)
        .map(|(j, _)| (j, nan_low(conf.get(j).copied().unwrap_or(f64::NEG_INFINITY))))
        .collect();
    cand.sort_by(|a, c| c.1.total_cmp(&a.1).then(a.0.cmp(&c.0)));
    cand.truncate(k);
    cand.into_iter().map(|(j, _)| j).collect()
}

/// Confidence-threshold decoding: how many of `block`'s masked positions to commit this step: those whose
/// confidence is at least `threshold`, and at least one while any is masked (the most confident).
pub fn threshold_count(block: &[u32], mask: u32, conf: &[f64], threshold: f64) -> usize {
    let masked = block.iter().enumerate().filter(|&(_, &t)| t == mask);
    let above = masked.clone().filter(|&(j, _)| conf.get(j).is_some_and(|&c| c >= threshold)).count();
    if masked.count() == 0 { 0 } else { above.max(1) }
}

fn nan_low(x: f64) -> f64 {
    if x.is_nan() { f64::NEG_INFINITY } else { x }
}

/// Whether this generation's Gumbel noise comes from the device's generator: `gumbel_noise = "device"` with
/// temperature > 0 on a device whose generator can be seeded (not the CPU's). Seeds it with the run's seed, so
/// each repetition draws the same noise on the same device and library version.
pub(crate) fn seed_device_noise(device: &candle_core::Device, params: &LladaParams) -> Result<bool, GenerateError> {
    let on_device = params.temperature > 0.0 && params.gumbel_noise == GumbelNoise::Device && !device.is_cpu();
    if on_device {
        device.set_seed(params.seed)?;
    }
    Ok(on_device)
}

/// Predicted token and confidence for each position of `logits` `(batch, block, vocab)`, row-major.
///
/// With temperature > 0 the Gumbel noise comes from the device's generator when `device_noise` (f32, see
/// [`seed_device_noise`]) or else from the host stream `rng` (f64, uploaded); the perturbed argmax is taken in
/// that precision whatever [`Confidence`] says, so the samples do not depend on it. Random remasking draws its
/// one value per ranked position and row from `rng`.
pub(crate) fn predict(
    logits: &Tensor,
    params: &LladaParams,
    device_noise: bool,
    rng: &mut SplitMix64,
) -> Result<(Vec<u32>, Vec<f64>), GenerateError> {
    let (b, bl, v) = logits.dims3()?;
    // The logits in f32, converted once where a path needs them (no copy when the model already runs in f32).
    let f32_logits = || logits.to_dtype(DType::F32);
    let lf = match params.confidence {
        Confidence::F32 => f32_logits()?,
        Confidence::F64 => logits.to_dtype(DType::F64)?,
        Confidence::Logits => logits.clone(),
    };
    let wide = lf.dtype();
    let pred = if params.temperature > 0.0 {
        // Standard Gumbel noise g = -log(-log U), U in (0, 1).
        let t = params.temperature;
        let perturbed = if device_noise {
            // The generator's U may be 0 or 1 (cuRAND's is in (0, 1]): clamp to the open interval's f32 ends.
            let u = Tensor::rand(0f32, 1f32, (b, bl, v), logits.device())?;
            let u = u.clamp(f32::MIN_POSITIVE, 1.0 - f32::EPSILON / 2.0)?;
            let g = u.log()?.neg()?.log()?.neg()?;
            let base = if wide == DType::F32 { lf.clone() } else { f32_logits()? };
            (base + (g * t)?)?
        } else {
            let noise: Vec<f64> = (0..b * bl * v).map(|_| -(-rng.next_open01().ln()).ln() * t).collect();
            let noise = Tensor::from_vec(noise, (b, bl, v), logits.device())?;
            (logits.to_dtype(DType::F64)? + noise)?
        };
        perturbed.argmax_keepdim(D::Minus1)?
    } else {
        lf.argmax_keepdim(D::Minus1)?
    };
    let pred_ids = pred.flatten_all()?.to_vec1::<u32>()?;
    let conf = match params.remasking {
        Remasking::LowConfidence => {
            // One fused softmax over the vocabulary (candle's kernel: exp(l - max) / sum per row, parallel over
            // rows): the chosen token's probability is the row's maximum when it is the argmax.
            // The softmax accumulates in at least f32 (as CUDA's kernel does for bf16 and f16; candle's CPU kernel
            // would sum 126,464 terms in bf16, which stops growing long before the end); `logits` rounds back.
            let soft_in = if matches!(wide, DType::F32 | DType::F64) { lf.clone() } else { f32_logits()? };
            let probs = candle_nn::ops::softmax_last_dim(&soft_in.contiguous()?)?.to_dtype(wide)?;
            let conf = if params.temperature > 0.0 {
                probs.gather(&pred.contiguous()?, D::Minus1)?
            } else {
                probs.max_keepdim(D::Minus1)?
            };
            // A value per ranked position and row: widening them on the device changes nothing of their rounding.
            conf.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?
        }
        Remasking::Random => (0..b * bl).map(|_| rng.next_f64()).collect(),
    };
    Ok((pred_ids, conf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_in_the_logits_dtype_accumulates_over_a_large_vocabulary() {
        // bf16 logits over LLaDA's vocabulary, one clear winner: a bf16 running sum of 126,464 terms stops growing
        // early and would make the probability far too large. `logits` must agree with `f32` to bf16 rounding.
        let v = 126_464;
        let row: Vec<f32> = (0..v).map(|i| if i == 7 { 6.0 } else { ((i % 97) as f32) / 97.0 }).collect();
        let logits = Tensor::from_vec(row, (1, 1, v), &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(DType::BF16))
            .expect("logits");
        let mut rng = SplitMix64::new(0);
        let mut conf = |confidence| {
            let params = LladaParams { confidence, ..LladaParams::default() };
            predict(&logits, &params, false, &mut rng).expect("predict")
        };
        let (ids32, c32) = conf(Confidence::F32);
        let (ids, c) = conf(Confidence::Logits);
        assert_eq!((ids32[0], ids[0]), (7, 7));
        let rel = (c[0] - c32[0]).abs() / c32[0];
        assert!(rel < 1e-2, "logits-dtype confidence {} vs f32 {} (relative {rel})", c[0], c32[0]);
    }
}
