//! Greedy autoregressive decoding with a KV cache (Llama).
//!
//! One prefill pass over the left-padded prompts yields the first token; then one single-token pass per further
//! token, each reading the cache. Exactly `n_out` tokens per row: EOS is either an ordinary token
//! ([`EosPolicy::Ignore`]) or never chosen ([`EosPolicy::Suppress`]).
//!
//! Positions are padding-aware, as HF llama computes them from the attention mask: a token's RoPE position is
//! its index among the row's real tokens (padding gets 0 and is never attended to). A row's tokens therefore do
//! not depend on how much padding the batch gave it.

use candle_core::Tensor;
use schema::grid::ModelKind;

use super::{EosPolicy, GenerateError, check_finite, check_interrupted, left_pad, params_err};
use crate::model::transformer::argmax_rows;
use crate::model::{LoadedModel, LogitsSpan, Positions};
use crate::timing::Stopwatch;

/// Result of [`generate_ar`].
#[derive(Debug, Clone, PartialEq)]
pub struct ArOutput {
    /// `n_out` generated ids per row.
    pub tokens: Vec<Vec<u32>>,
    /// The prompt pass that yields the first token.
    pub prefill_ms: f64,
    /// From the ids on the device to the last token.
    pub e2e_ms: f64,
    /// Time of each token: `[0]` is the prefill, then one entry per decode step (`n_out` entries).
    pub token_ms: Vec<f64>,
    /// The padded prompt length (the longest prompt).
    pub prompt_len: usize,
}

/// Greedy decoding of exactly `n_out` tokens per prompt (ids without BOS; rows may differ in length).
pub fn generate_ar(
    model: &LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
    eos: EosPolicy,
) -> Result<ArOutput, GenerateError> {
    if model.kind != ModelKind::Llama {
        return params_err("autoregressive decoding needs a causal (Llama) model; use generate_llada for LLaDA");
    }
    if n_out == 0 {
        return params_err("n_out must be at least 1");
    }
    let batch = left_pad(prompts, model.special.pad)?;
    let (b, p) = (prompts.len(), batch.len);
    let max_pos = model.config.max_position_embeddings;
    if p + n_out > max_pos {
        return params_err(format!("prompt ({p}) + n_out ({n_out}) exceeds max_position_embeddings ({max_pos})"));
    }
    let banned: &[u32] = match eos {
        EosPolicy::Ignore => &[],
        EosPolicy::Suppress => &model.special.stop,
    };
    let tf = &model.transformer;
    let device = tf.device();
    // Key validity over the whole run: padding, then real prompt tokens, then generated tokens.
    let key_valid: Vec<Vec<bool>> =
        batch.valid.iter().map(|v| v.iter().copied().chain(std::iter::repeat_n(true, n_out)).collect()).collect();
    let n_pad: Vec<usize> = prompts.iter().map(|r| p - r.len()).collect();
    let prefill_pos = if batch.any_pad {
        Positions::PerRow(n_pad.iter().map(|&c| (0..p).map(|j| j.saturating_sub(c) as u32).collect()).collect())
    } else {
        Positions::Range { start: 0, len: p }
    };
    let flat: Vec<u32> = batch.rows.iter().flatten().copied().collect();
    let ids = Tensor::from_vec(flat, (b, p), device)?;
    let valid = batch.any_pad.then_some(key_valid.as_slice());

    let total = Stopwatch::start(device)?;
    let mut lap = Stopwatch::start(device)?;
    // Sized for every token fed: the padded prompt and the n_out - 1 generated tokens fed back.
    let mut cache = tf.new_cache(p + n_out - 1);
    let rope = tf.rope(&prefill_pos)?;
    let bias = tf.attention_bias(valid, b, 0, p, p)?;
    let mut logits = tf.forward(&ids, &rope, bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
    let mut next = argmax_rows(&logits.squeeze(1)?, banned)?;
    let prefill_ms = total.elapsed_ms()?;
    let mut token_ms = vec![lap.lap_ms()?];
    let mut tokens: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();

    for s in 1..n_out {
        check_interrupted()?;
        // The token chosen at step s-1 sits at absolute index p + s - 1.
        let pos = p + s - 1;
        let ids = Tensor::from_vec(next.clone(), (b, 1), device)?;
        let positions = if batch.any_pad {
            Positions::PerRow(n_pad.iter().map(|&c| vec![(pos - c) as u32]).collect())
        } else {
            Positions::Range { start: pos, len: 1 }
        };
        let rope = tf.rope(&positions)?;
        let bias = tf.attention_bias(valid, b, pos, 1, pos + 1)?;
        logits = tf.forward(&ids, &rope, bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
        next = argmax_rows(&logits.squeeze(1)?, banned)?;
        for (row, &t) in tokens.iter_mut().zip(&next) {
            row.push(t);
        }
        token_ms.push(lap.lap_ms()?);
    }
    let e2e_ms = total.elapsed_ms()?;
    // After the timed region: NaN anywhere upstream reaches the last step's logits.
    check_finite(&logits, "the logits of the last decode step")?;
    debug_assert!(tokens.iter().all(|r| r.len() == n_out));
    Ok(ArOutput { tokens, prefill_ms, e2e_ms, token_ms, prompt_len: p })
}
