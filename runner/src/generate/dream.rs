//! Dream's sampler (`diffusion_generate` of HKUNLP/Dream), written from its published description.
//!
//! The working sequence is the (left-padded) prompt followed by `n_out` mask tokens: one region, no blocks. Step
//! i of K goes from time t = t_i to s = t_{i+1} of `linspace(1, eps, K + 1)` (eps = 10^-3) and is one full
//! bidirectional forward over the whole sequence (no cache; NFE = K). Dream's shift: the logit at position j
//! predicts token j + 1, so masked position j reads the logits of position j - 1 (the first generated position
//! reads the prompt's last). Every masked position gets a prediction (argmax at temperature 0; otherwise a sample
//! from softmax(logits / T), after the nucleus filter `top_p` when set) and, by the rule (`alg`), a confidence:
//! - `maskgit_plus`: the prediction's probability; `topk_margin`: the top-1 minus the top-2 probability;
//!   `entropy`: the negative entropy sum(p ln(p + 10^-10)). Each row commits its `floor(M (1 - s/t))` most
//!   confident masked positions (M: its masked positions at the step's start), all that remain at the last step
//!   ([`dream_transfer_count`]);
//! - `origin`: each masked position is committed with probability 1 - s/t (1 at the last step), by a seeded draw
//!   per masked position in row-major order.
//!
//! A committed token is never remasked; there is no early stop.
//!
//! Our choices where the description is silent or where we differ:
//! - Ties in the ranking break towards the lower position (torch.topk leaves them unspecified); the argmax takes
//!   the lowest id of equal logits.
//! - The schedule is computed in f64 (the reference's `linspace` and `1 - s / t` are f32 tensors: at an exact
//!   integer boundary the truncated count may differ by one). The count is per row; the reference uses the batch's
//!   mean masked count, which is the same number here because every row starts with `n_out` masks and commits
//!   the same count at every step.
//! - Left padding: as the reference, a padded row's RoPE positions count its real tokens (0 at its first real
//!   token) and pad keys are masked out of attention, so a padded row generates what it would alone. Pad queries
//!   still attend to the real keys (the reference masks them too); their outputs are never read.
//! - At temperature 0 without `top_p` (the study's setting) the argmax and confidences are reduced on the device in
//!   f32 and only B x N_out values reach the host; with sampling or `top_p` the logits of the generated region are
//!   copied to the host and processed in f64 (samples from the run's seeded SplitMix64, not torch's generator).
//! - Dream's `alg_temp` (sampling positions instead of ranking them) and `top_k` are not implemented.
//! - A prompt containing the mask id is refused.

use candle_core::{D, DType, Tensor};
use schema::grid::{DreamAlg, ModelKind};

use super::{GenerateError, MaskedBatch, check_finite, check_interrupted, masked_batch, params_err};
use crate::device::timing::Stopwatch;
use crate::model::{LoadedModel, LogitsSpan, Positions};
use crate::synth::rng::SplitMix64;

/// The last time of Dream's schedule (`eps` of its generation config).
pub const DREAM_EPS: f64 = 1e-3;

/// Parameters of Dream's sampler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DreamParams {
    /// Steps K: forward passes.
    pub steps: usize,
    /// The decoding rule.
    pub alg: DreamAlg,
    /// 0: argmax; > 0: sample from softmax(logits / T).
    pub temperature: f64,
    /// Nucleus filter in (0, 1]; `None` or 1: none.
    pub top_p: Option<f64>,
    /// Seed of sampling and of `origin`'s draws.
    pub seed: u64,
}

impl Default for DreamParams {
    /// Dream's generation defaults for greedy decoding: 512 steps, `entropy` (its examples' rule), temperature 0.
    fn default() -> Self {
        Self { steps: 512, alg: DreamAlg::Entropy, temperature: 0.0, top_p: None, seed: 0 }
    }
}

impl DreamParams {
    fn validate(&self, n_out: usize) -> Result<(), GenerateError> {
        if n_out == 0 {
            return params_err("n_out must be at least 1");
        }
        if self.steps == 0 {
            return params_err("steps must be at least 1");
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return params_err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return params_err(format!("top_p must be in (0, 1], got {p}"));
        }
        Ok(())
    }

    fn nucleus(&self) -> Option<f64> {
        self.top_p.filter(|&p| p < 1.0)
    }
}

/// Dream's times `linspace(1, eps, steps + 1)`: step i goes from `t[i]` to `t[i + 1]`.
pub fn dream_timesteps(steps: usize) -> Vec<f64> {
    (0..=steps).map(|i| 1.0 + (DREAM_EPS - 1.0) * i as f64 / steps.max(1) as f64).collect()
}

/// Positions to commit at step `step` of `steps` (0-based) when `masked` are masked (ranked rules): `floor(masked
/// * (1 - s / t))`, and every one at the last step.
pub fn dream_transfer_count(masked: usize, step: usize, steps: usize) -> usize {
    if step + 1 >= steps {
        return masked;
    }
    let ts = dream_timesteps(steps);
    let (t, s) = (ts[step], ts[step + 1]);
    (masked as f64 * (1.0 - s / t)) as usize
}

/// `origin`'s probability of committing a masked position at step `step` of `steps`: 1 - s/t, 1 at the last.
pub fn dream_origin_probability(step: usize, steps: usize) -> f64 {
    if step + 1 >= steps {
        return 1.0;
    }
    let ts = dream_timesteps(steps);
    1.0 - ts[step + 1] / ts[step]
}

/// Result of [`generate_dream`].
#[derive(Debug, Clone, PartialEq)]
pub struct DreamOutput {
    /// `n_out` generated ids per row.
    pub tokens: Vec<Vec<u32>>,
    /// From the ids on the device to the last commit.
    pub e2e_ms: f64,
    /// Wall time of each step (forward + selection).
    pub step_ms: Vec<f64>,
    /// Forward evaluations: K.
    pub nfe: usize,
    /// Tokens committed at each step, per row: `transfers[step][row]`.
    pub transfers: Vec<Vec<usize>>,
    /// The padded prompt length (the longest prompt).
    pub prompt_len: usize,
}

/// Runs Dream's sampler on `prompts` (ids without BOS), generating exactly `n_out` tokens per row.
pub fn generate_dream(
    model: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    params: &DreamParams,
) -> Result<DreamOutput, GenerateError> {
    if model.kind != ModelKind::Dream {
        return params_err("Dream's sampler needs a Dream model (the Qwen2 layout, bidirectional, shifted logits)");
    }
    params.validate(n_out)?;
    let MaskedBatch { batch, mask, mut x, key_valid } = masked_batch(model, prompts, n_out)?;
    let (b, p) = (prompts.len(), batch.len);
    let len = p + n_out;
    let tf = &model.transformer;
    let device = tf.device();
    let mut rng = SplitMix64::new(params.seed);

    let total = Stopwatch::start(device)?;
    let mut lap = Stopwatch::start(device)?;
    // Dream's positions: a row's real tokens count from 0 (pad positions are never attended to).
    let positions = if batch.any_pad {
        let rows = key_valid
            .iter()
            .map(|v| {
                let mut next = 0u32;
                let mut position = |real: bool| {
                    let at = next;
                    next += u32::from(real);
                    if real { at } else { 0 }
                };
                v.iter().map(|&ok| position(ok)).collect()
            })
            .collect();
        Positions::PerRow(rows)
    } else {
        Positions::Range { start: 0, len }
    };
    let rope = tf.rope(&positions)?;
    let bias = tf.attention_bias(batch.any_pad.then_some(key_valid.as_slice()), b, 0, len, len)?;
    // The shift: the logits of positions p - 1 .. len - 2 predict positions p .. len - 1.
    let span = LogitsSpan::Range { start: p - 1, len: n_out };
    let mut step_ms = Vec::with_capacity(params.steps);
    let mut transfers = Vec::with_capacity(params.steps);
    let mut last_logits = None;
    for step in 0..params.steps {
        check_interrupted()?;
        let flat: Vec<u32> = x.iter().flatten().copied().collect();
        let ids = Tensor::from_vec(flat, (b, len), device)?;
        let logits = tf.forward(&ids, &rope, bias.as_ref(), None, span)?;
        let (pred, conf) = dream_predict(&logits, params, &mut rng)?;
        last_logits = Some(logits);
        let mut applied = Vec::with_capacity(b);
        for ((row, pred), conf) in x.iter_mut().zip(pred.chunks(n_out)).zip(conf.chunks(n_out)) {
            let region = &mut row[p..];
            let chosen = match params.alg {
                DreamAlg::Origin => {
                    let prob = dream_origin_probability(step, params.steps);
                    let masked = region.iter().enumerate().filter(|&(_, &t)| t == mask).map(|(j, _)| j);
                    masked.collect::<Vec<_>>().into_iter().filter(|_| rng.next_f64() < prob).collect()
                }
                _ => {
                    let m = region.iter().filter(|&&t| t == mask).count();
                    super::select_positions(region, mask, conf, dream_transfer_count(m, step, params.steps))
                }
            };
            for &j in &chosen {
                region[j] = pred[j];
            }
            // Tokens committed: a position that took the mask id is still masked.
            applied.push(chosen.iter().filter(|&&j| region[j] != mask).count());
        }
        transfers.push(applied);
        step_ms.push(lap.lap_ms()?);
    }
    let e2e_ms = total.elapsed_ms()?;
    if let Some(l) = &last_logits {
        check_finite(l, "the logits of the last diffusion step")?;
    }
    Ok(DreamOutput {
        tokens: x.iter().map(|r| r[p..].to_vec()).collect(),
        e2e_ms,
        step_ms,
        nfe: params.steps,
        transfers,
        prompt_len: p,
    })
}

/// Prediction and confidence (by `params.alg`) of every position of `logits` `(batch, n, vocab)`, row-major.
pub(crate) fn dream_predict(
    logits: &Tensor,
    params: &DreamParams,
    rng: &mut SplitMix64,
) -> Result<(Vec<u32>, Vec<f64>), GenerateError> {
    if params.temperature > 0.0 || params.nucleus().is_some() {
        return host_predict(logits, params, rng);
    }
    let lf = logits.to_dtype(DType::F32)?.contiguous()?;
    let pred = lf.argmax_keepdim(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?;
    let host = |t: Tensor| -> Result<Vec<f64>, GenerateError> { Ok(t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?) };
    let conf = match params.alg {
        DreamAlg::Origin => vec![0.0; pred.len()],
        DreamAlg::MaskgitPlus => host(candle_nn::ops::softmax_last_dim(&lf)?.max_keepdim(D::Minus1)?)?,
        DreamAlg::TopkMargin => {
            let probs = candle_nn::ops::softmax_last_dim(&lf)?;
            let top = probs.max_keepdim(D::Minus1)?;
            let at_top = probs.broadcast_eq(&top)?;
            let ties = host(at_top.to_dtype(DType::F32)?.sum_keepdim(D::Minus1)?)?;
            let second = host(at_top.where_cond(&probs.zeros_like()?, &probs)?.max_keepdim(D::Minus1)?)?;
            let top = host(top)?;
            // Two equal top probabilities are a margin of 0 (the second-largest of the sorted values is the top).
            top.iter().zip(&second).zip(&ties).map(|((t, s), &n)| if n >= 2.0 { 0.0 } else { t - s }).collect()
        }
        DreamAlg::Entropy => {
            let probs = candle_nn::ops::softmax_last_dim(&lf)?;
            host((&probs * (&probs + 1e-10)?.log()?)?.sum_keepdim(D::Minus1)?)?
        }
    };
    Ok((pred, conf))
}

/// [`dream_predict`] on the host in f64: temperature, nucleus filter, softmax, sample or argmax, confidence.
fn host_predict(
    logits: &Tensor,
    params: &DreamParams,
    rng: &mut SplitMix64,
) -> Result<(Vec<u32>, Vec<f64>), GenerateError> {
    let (b, n, v) = logits.dims3()?;
    let all = logits.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
    let mut pred = Vec::with_capacity(b * n);
    let mut conf = Vec::with_capacity(b * n);
    for row in all.chunks(v) {
        let (id, c) = predict_one(row, params, rng);
        pred.push(id);
        conf.push(c);
    }
    Ok((pred, conf))
}

/// One position's prediction and confidence from its logits, in f64.
pub fn predict_one(logits: &[f64], params: &DreamParams, rng: &mut SplitMix64) -> (u32, f64) {
    let t = params.temperature;
    let mut l: Vec<f64> = logits.iter().map(|&x| if t > 0.0 { x / t } else { x }).collect();
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.sort_by(|&a, &c| l[c].total_cmp(&l[a]).then(a.cmp(&c)));
    if let Some(top_p) = params.nucleus() {
        // Keep the most probable tokens up to and including the first whose cumulative probability exceeds top_p.
        let probs = softmax(&l);
        let mut cum = 0.0;
        let mut keep = vec![false; l.len()];
        for &i in &order {
            keep[i] = true;
            cum += probs[i];
            if cum > top_p {
                break;
            }
        }
        l.iter_mut().zip(&keep).filter(|(_, k)| !**k).for_each(|(x, _)| *x = f64::NEG_INFINITY);
    }
    let probs = softmax(&l);
    let id = if t > 0.0 {
        let u = rng.next_f64();
        let mut cum = 0.0;
        let mut pick = order[0];
        for &i in &order {
            cum += probs[i];
            if u < cum {
                pick = i;
                break;
            }
        }
        pick
    } else {
        order[0]
    };
    let mut sorted: Vec<f64> = order.iter().map(|&i| probs[i]).collect();
    sorted.sort_by(|a, c| c.total_cmp(a));
    let c = match params.alg {
        DreamAlg::Origin => 0.0,
        DreamAlg::MaskgitPlus => probs[id],
        DreamAlg::TopkMargin => sorted[0] - sorted.get(1).copied().unwrap_or(0.0),
        DreamAlg::Entropy => probs.iter().map(|&q| q * (q + 1e-10).ln()).sum(),
    };
    (id as u32, c)
}

fn softmax(l: &[f64]) -> Vec<f64> {
    let m = l.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = l.iter().map(|&x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_by_hand() {
        // K = 4: t = 1, 0.75025, 0.5005, 0.25075, 0.001.
        // Step 0: 8 * (1 - 0.75025) = 1.998 -> 1. Step 1 (7 masked): 7 * (1 - 0.5005 / 0.75025) = 2.330 -> 2.
        // Step 2 (5 masked): 5 * (1 - 0.25075 / 0.5005) = 2.495 -> 2. Step 3: the remaining 3.
        let mut m = 8;
        let mut counts = Vec::new();
        for i in 0..4 {
            let k = dream_transfer_count(m, i, 4);
            counts.push(k);
            m -= k;
        }
        assert_eq!(counts, [1, 2, 2, 3]);
        assert!((dream_origin_probability(0, 4) - 0.24975).abs() < 1e-12);
        assert_eq!(dream_origin_probability(3, 4), 1.0);
        assert_eq!(dream_transfer_count(5, 0, 1), 5);
    }

    #[test]
    fn confidences_by_hand() {
        let mut rng = SplitMix64::new(0);
        let l = [2f64.ln(), 1f64.ln(), 1f64.ln()]; // probabilities 0.5, 0.25, 0.25
        let c = |alg| predict_one(&l, &DreamParams { alg, ..DreamParams::default() }, &mut SplitMix64::new(0));
        assert_eq!(c(DreamAlg::MaskgitPlus).0, 0);
        assert!((c(DreamAlg::MaskgitPlus).1 - 0.5).abs() < 1e-12);
        assert!((c(DreamAlg::TopkMargin).1 - 0.25).abs() < 1e-12);
        let ent = 0.5 * (0.5f64 + 1e-10).ln() + 2.0 * 0.25 * (0.25f64 + 1e-10).ln();
        assert!((c(DreamAlg::Entropy).1 - ent).abs() < 1e-12);
        // top_p 0.6 keeps 0.5 and the first 0.25 (cumulative 0.75 > 0.6): renormalised 2/3, 1/3.
        let p = DreamParams { alg: DreamAlg::MaskgitPlus, top_p: Some(0.6), ..DreamParams::default() };
        let (id, conf) = predict_one(&l, &p, &mut rng);
        assert_eq!(id, 0);
        assert!((conf - 2.0 / 3.0).abs() < 1e-12);
        // top_p 0.4 keeps the top token only.
        let p = DreamParams { top_p: Some(0.4), ..p };
        assert!((predict_one(&l, &p, &mut rng).1 - 1.0).abs() < 1e-12);
    }
}
