//! Generation: greedy autoregressive decoding with a KV cache ([`generate_ar`], Llama) and the reference LLaDA
//! masked-diffusion sampler ([`generate_llada`]), and Dream's sampler ([`generate_dream`]).
//!
//! Both take prompts as token ids WITHOUT a BOS (callers prepend it) and left-pad a batch to its longest prompt;
//! the padding is masked out of attention. Both return the generated ids and device-synchronised timings.

mod ar;
mod dream;
mod llada;

pub(crate) use ar::decode_greedy;
pub use ar::{ArOutput, generate_ar};
pub use dream::{
    DREAM_EPS, DreamOutput, DreamParams, dream_origin_probability, dream_timesteps, dream_transfer_count,
    generate_dream, predict_one as dream_predict_one,
};
pub use llada::{
    BlockCache, Confidence, GumbelNoise, LladaOutput, LladaParams, Remasking, generate_llada, generate_llada_observed,
    select_positions, threshold_count, transfer_schedule,
};
pub(crate) use llada::{predict, seed_device_noise};

/// What to do with EOS when exactly `n_out` tokens must come out: the config's enum, one type for both.
/// `Suppress` blocks every stop id (EOS and `<|eot_id|>`), not just EOS.
pub use schema::grid::EosPolicy;

/// Errors of generation: bad parameters (user-fixable) or a failed tensor operation.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("invalid generation parameters: {0}")]
    Params(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// NaN or infinity where numbers must be finite (broken weights, an overflow in f16).
    #[error("non-finite values (NaN or inf) in {0}")]
    NonFinite(String),
    /// A sampler that cannot finish: a threshold block whose steps commit nothing (the model predicts the mask id).
    #[error("the sampler cannot finish: {0}")]
    Stalled(String),
    /// A stop signal arrived during the generation (see [`crate::signals::interrupted`]).
    #[error("interrupted by a stop signal")]
    Interrupted,
}

/// Fails with [`GenerateError::Interrupted`] when a stop signal has arrived.
pub(crate) fn check_interrupted() -> Result<(), GenerateError> {
    if crate::signals::interrupted() { Err(GenerateError::Interrupted) } else { Ok(()) }
}

/// Fails when `t` holds a NaN or an infinity. `t - t` is 0 where `t` is finite and NaN elsewhere, so its sum
/// is 0 exactly when every value is finite, without the overflow a plain sum could hit. Called once per
/// generation on the last logits, after the timed region.
pub fn check_finite(t: &candle_core::Tensor, what: &str) -> Result<(), GenerateError> {
    let diff = t.broadcast_sub(t)?.to_dtype(candle_core::DType::F32)?.sum_all()?.to_scalar::<f32>()?;
    if diff == 0.0 { Ok(()) } else { Err(GenerateError::NonFinite(what.to_string())) }
}

fn params_err<T>(msg: impl Into<String>) -> Result<T, GenerateError> {
    Err(GenerateError::Params(msg.into()))
}

/// The working sequences of a masked-diffusion sampler (LLaDA's and Dream's): the left-padded prompts followed by
/// `n_out` mask tokens, which keys are real, and the mask id. Refuses a model without a mask token, a pad id equal to
/// it, a prompt containing it, and a sequence longer than the model's positions.
struct MaskedBatch {
    batch: Padded,
    mask: u32,
    x: Vec<Vec<u32>>,
    key_valid: Vec<Vec<bool>>,
}

fn masked_batch(
    model: &crate::model::LoadedModel,
    prompts: &[Vec<u32>],
    n_out: usize,
) -> Result<MaskedBatch, GenerateError> {
    let Some(mask) = model.special.mask else {
        return params_err("the model has no mask token");
    };
    if model.special.pad == mask {
        return params_err(format!("the pad id equals the mask id {mask}"));
    }
    if let Some(i) = prompts.iter().position(|p| p.contains(&mask)) {
        return params_err(format!("prompt {i} contains the mask id {mask}"));
    }
    let batch = left_pad(prompts, model.special.pad)?;
    let (p, max_pos) = (batch.len, model.config.max_position_embeddings);
    if p + n_out > max_pos {
        // As for the AR model: positions past what the model was trained on are not a measurement of it.
        return params_err(format!(
            "prompt ({p}) + n_out ({n_out}) exceeds the model's maximum sequence length ({max_pos})"
        ));
    }
    let x = batch.rows.iter().map(|r| r.iter().copied().chain(std::iter::repeat_n(mask, n_out)).collect()).collect();
    let key_valid =
        batch.valid.iter().map(|v| v.iter().copied().chain(std::iter::repeat_n(true, n_out)).collect()).collect();
    Ok(MaskedBatch { batch, mask, x, key_valid })
}

/// A left-padded batch: rows of equal length, `valid[b][j]` false on padding.
struct Padded {
    rows: Vec<Vec<u32>>,
    valid: Vec<Vec<bool>>,
    len: usize,
    any_pad: bool,
}

fn left_pad(prompts: &[Vec<u32>], pad: u32) -> Result<Padded, GenerateError> {
    if prompts.is_empty() {
        return params_err("no prompts");
    }
    if let Some(i) = prompts.iter().position(Vec::is_empty) {
        return params_err(format!("prompt {i} is empty"));
    }
    let len = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut rows = Vec::with_capacity(prompts.len());
    let mut valid = Vec::with_capacity(prompts.len());
    for p in prompts {
        let n_pad = len - p.len();
        let mut r = vec![pad; n_pad];
        r.extend_from_slice(p);
        rows.push(r);
        let mut v = vec![false; n_pad];
        v.extend(std::iter::repeat_n(true, p.len()));
        valid.push(v);
    }
    let any_pad = prompts.iter().any(|p| p.len() != len);
    Ok(Padded { rows, valid, len, any_pad })
}
