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
use crate::device::timing::Marks;
use crate::model::transformer::Greedy;
use crate::model::{LoadedModel, LogitsSpan, Positions};

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
    // Every token fed: the padded prompt and the n_out - 1 generated tokens fed back (the KV cache's size).
    let fed = p + n_out - 1;
    // RoPE tables of every position fed, and the decode steps' key mask over all of them, made once before the
    // timed region (as a model's cos/sin cache is made at load): each forward takes a slice on the device and
    // nothing is computed on the host or uploaded per token. Left-padded rows count positions from their first
    // real token.
    let positions = if batch.any_pad {
        Positions::PerRow(n_pad.iter().map(|&c| (0..fed).map(|j| j.saturating_sub(c) as u32).collect()).collect())
    } else {
        Positions::Range { start: 0, len: fed }
    };
    let rope_all = tf.rope(&positions)?;
    let flat: Vec<u32> = batch.rows.iter().flatten().copied().collect();
    let ids = Tensor::from_vec(flat, (b, p), device)?;
    let valid = batch.any_pad.then_some(key_valid.as_slice());
    // `(B, 1, 1, fed)` (None without padding: a single query at the end of a causal sequence masks nothing).
    let decode_bias = tf.attention_bias(valid, b, fed - 1, 1, fed)?;

    let prefill_bias = tf.attention_bias(valid, b, 0, p, p)?;
    let greedy = Greedy::new(tf.config().vocab_size, banned, device)?;

    // The host never waits inside the loop: each chosen id stays on the device and is the next forward's input,
    // and each token's end is a time mark (a CUDA event) read after the last token, so on a GPU the next token's
    // work is queued while the device runs this one's.
    let mut marks = Marks::start(device)?;
    let mut cache = tf.new_cache(fed);
    let rope = rope_all.narrow(0, p)?;
    let mut logits = tf.forward(&ids, &rope, prefill_bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
    let mut next = greedy.choose(&logits.squeeze(1)?)?;
    marks.mark()?;
    let mut chosen = vec![next.clone()];
    for s in 1..n_out {
        check_interrupted()?;
        // The token chosen at step s-1 sits at absolute index p + s - 1.
        let pos = p + s - 1;
        let rope = rope_all.narrow(pos, 1)?;
        let bias = decode_bias.as_ref().map(|m| m.narrow(3, 0, pos + 1)).transpose()?;
        logits = tf.forward(&next, &rope, bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
        next = greedy.choose(&logits.squeeze(1)?)?;
        chosen.push(next.clone());
        marks.mark()?;
    }
    // Waits for the device: the prefill (to the first token), then one lap per decode token.
    let token_ms = marks.laps_ms()?;
    let prefill_ms = token_ms[0];
    let e2e_ms = token_ms.iter().sum();
    let tokens = Tensor::cat(&chosen, 1)?.to_vec2::<u32>()?;
    // After the timed region: NaN anywhere upstream reaches the last step's logits.
    check_finite(&logits, "the logits of the last decode step")?;
    debug_assert!(tokens.iter().all(|r| r.len() == n_out));
    Ok(ArOutput { tokens, prefill_ms, e2e_ms, token_ms, prompt_len: p })
}
