//! Greedy autoregressive decoding with a KV cache (Llama).
//!
//! One prefill pass over the left-padded prompts yields the first token; then one single-token pass per further
//! token, each reading the cache. Exactly `n_out` tokens per row: EOS is either an ordinary token
//! ([`EosPolicy::Ignore`]) or never chosen ([`EosPolicy::Suppress`]).
//!
//! Positions are padding-aware, as HF llama computes them from the attention mask: a token's RoPE position is
//! its index among the row's real tokens (padding gets 0 and is never attended to). A row's tokens therefore do
//! not depend on how much padding the batch gave it.

use candle_core::{DType, Tensor};
use schema::grid::ModelKind;

use super::{EosPolicy, GenerateError, check_finite, check_interrupted, left_pad, params_err};
use crate::device::timing::Marks;
use crate::device::{Graph, GraphParams};
use crate::model::transformer::{Greedy, Rope, Transformer};
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
    let flat: Vec<u32> = batch.rows.iter().flatten().copied().collect();
    let ids = Tensor::from_vec(flat, (b, p), model.transformer.device())?;
    decode_greedy(&model.transformer, &ids, batch.any_pad.then_some(batch.valid.as_slice()), n_out, banned)
}

/// The decoding of [`generate_ar`] from prompt ids `(batch, p)` on the device: `valid[b][j]` says whether position
/// `j` of row `b` is a real token (left padding is not; `None`: no padding), `banned` ids are never chosen
/// (`bench-kernels` times its decode tokens with it).
pub(crate) fn decode_greedy(
    tf: &Transformer,
    ids: &Tensor,
    valid: Option<&[Vec<bool>]>,
    n_out: usize,
    banned: &[u32],
) -> Result<ArOutput, GenerateError> {
    let (b, p) = ids.dims2()?;
    if n_out == 0 {
        return params_err("n_out must be at least 1");
    }
    let device = tf.device();
    // Key validity over the whole run: padding, then real prompt tokens, then generated tokens.
    let key_valid: Vec<Vec<bool>> = match valid {
        Some(v) => v.iter().map(|v| v.iter().copied().chain(std::iter::repeat_n(true, n_out)).collect()).collect(),
        None => Vec::new(),
    };
    let n_pad: Vec<usize> = match valid {
        Some(v) => v.iter().map(|r| r.iter().filter(|&&ok| !ok).count()).collect(),
        None => vec![0; b],
    };
    // Every token fed: the padded prompt and the n_out - 1 generated tokens fed back (the KV cache's size).
    let fed = p + n_out - 1;
    // RoPE tables of every position fed, and the decode steps' key mask over all of them, made once before the
    // timed region (as a model's cos/sin cache is made at load): each forward takes a slice on the device and
    // nothing is computed on the host or uploaded per token. Left-padded rows count positions from their first
    // real token.
    let positions = if valid.is_some() {
        Positions::PerRow(n_pad.iter().map(|&c| (0..fed).map(|j| j.saturating_sub(c) as u32).collect()).collect())
    } else {
        Positions::Range { start: 0, len: fed }
    };
    let rope_all = tf.rope(&positions)?;
    let valid = valid.is_some().then_some(key_valid.as_slice());
    // `(B, 1, 1, fed)` (None without padding: a single query at the end of a causal sequence masks nothing).
    let decode_bias = tf.attention_bias(valid, b, fed - 1, 1, fed)?;

    let prefill_bias = tf.attention_bias(valid, b, 0, p, p)?;
    let greedy = Greedy::new(tf.config().vocab_size, banned, device)?;
    let static_steps = match tf.options().decode_graph && n_out > 1 {
        true => Some(StaticDecode::new(tf, decode_bias.clone(), b, p, n_out)?),
        false => None,
    };

    // The host never waits inside the loop: each chosen id stays on the device and is the next forward's input,
    // and each token's end is a time mark (a CUDA event) read after the last token, so on a GPU the next token's
    // work is queued while the device runs this one's.
    let mut marks = Marks::start(device)?;
    let mut cache = tf.new_cache(fed);
    let rope = rope_all.narrow(0, p)?;
    let mut logits = tf.forward(ids, &rope, prefill_bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
    let mut next = greedy.choose(&logits.squeeze(1)?)?;
    marks.mark()?;
    let mut chosen = vec![next.clone()];
    // A captured graph is kept until the device is done with its replays (`laps_ms` waits).
    let mut _graph = None;
    if let Some(st) = &static_steps {
        st.start(&next, p, &mut cache)?;
        _graph = st.run(tf, &rope_all, &greedy, &mut cache, &mut marks, n_out)?;
        logits = st.logits.unsqueeze(1)?;
        chosen = vec![st.out.narrow(1, p, n_out)?];
    } else {
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

/// The decode steps of [`TransformerOptions::decode_graph`](crate::model::TransformerOptions): every step has the
/// same shapes and reads what changes (the position, the last token) from buffers on the device, so one step can be
/// captured as a CUDA graph and replayed. Made before the timed region.
struct StaticDecode {
    /// `(1)` u32: the absolute index of the token a step feeds (the KV cache's cursor; its RoPE position's index).
    cursor: Tensor,
    /// `(batch, 1)` u32: the token a step feeds (the last one chosen).
    ids: Tensor,
    /// `(batch, p + n_out)` u32: each chosen token at its absolute index (`p..p + n_out`; the prompt's columns
    /// stay 0), so a step writes at `cursor + 1`, the cursor's next value.
    out: Tensor,
    /// `(batch, vocab)`: the last step's logits (their finiteness is checked after the timed region).
    logits: Tensor,
    /// `(batch | 1, 1, 1, fed)`: the padding's bias over every key, `None` without padding.
    pad_bias: Option<Tensor>,
    /// `(fed)` u32 `0..fed`, and the length mask's two values `(fed)` (0 and -inf in the attention dtype).
    keys: Tensor,
    visible: Tensor,
    hidden: Tensor,
    /// `(1)` u32: 1.
    one: Tensor,
}

impl StaticDecode {
    fn new(tf: &Transformer, pad_bias: Option<Tensor>, b: usize, p: usize, n_out: usize) -> candle_core::Result<Self> {
        let device = tf.device();
        let fed = p + n_out - 1;
        let u32s = |v: Vec<u32>| Tensor::from_vec(v, 1, device);
        let ad = tf.attn_dtype();
        Ok(Self {
            cursor: u32s(vec![p as u32])?,
            ids: Tensor::zeros((b, 1), DType::U32, device)?,
            out: Tensor::zeros((b, p + n_out), DType::U32, device)?,
            logits: Tensor::zeros((b, tf.config().vocab_size), tf.dtype(), device)?,
            pad_bias,
            keys: Tensor::arange(0u32, fed as u32, device)?,
            visible: Tensor::zeros(fed, ad, device)?,
            hidden: Tensor::full(f32::NEG_INFINITY, fed, device)?.to_dtype(ad)?,
            one: u32s(vec![1])?,
        })
    }

    /// After the prefill: the first chosen token is fed next and is the first output; the cache's cursor moves to
    /// the device.
    fn start(&self, next: &Tensor, p: usize, cache: &mut crate::model::KvCache) -> candle_core::Result<()> {
        self.ids.slice_set(next, 1, 0)?;
        self.out.slice_set(next, 1, p)?;
        cache.set_cursor(self.cursor.clone())
    }

    /// One decode step: feeds `ids` at `cursor`, writes the chosen token to `ids` and `out` and the logits to
    /// `logits`, advances `cursor`. Nothing read back, nothing uploaded, no shape that changes.
    fn step(
        &self,
        tf: &Transformer,
        rope_all: &Rope,
        greedy: &Greedy,
        cache: &mut crate::model::KvCache,
    ) -> candle_core::Result<()> {
        let rope = rope_all.at(&self.cursor)?;
        // Keys up to the cursor are visible (a causal query at the end of what is filled), the others hidden.
        let fed = self.keys.dim(0)?;
        let length = self.keys.broadcast_le(&self.cursor)?.where_cond(&self.visible, &self.hidden)?;
        let length = length.reshape((1, 1, 1, fed))?;
        let bias = match &self.pad_bias {
            Some(pad) => pad.broadcast_add(&length)?,
            None => length,
        };
        let logits = tf.forward(&self.ids, &rope, Some(&bias), Some(cache), LogitsSpan::Last)?.squeeze(1)?;
        let next = greedy.choose(&logits)?;
        self.ids.slice_set(&next, 1, 0)?;
        self.logits.slice_set(&logits, 0, 0)?;
        // The chosen token sits at `cursor + 1`, where the next step feeds it.
        let advanced = self.cursor.broadcast_add(&self.one)?;
        let column = advanced.reshape((1, 1))?.broadcast_as(next.shape())?.contiguous()?;
        self.out.scatter_set(&column, &next, 1)?;
        self.cursor.slice_set(&advanced, 0, 0)
    }

    /// Decode steps 1..n_out, one time mark each. On CUDA the first step runs eagerly (filling candle's upload
    /// cache), the second is captured and every later one replays it (the capture's host time is left out of the
    /// laps); the graph is returned, to outlive its queued launches. On the CPU every step runs eagerly.
    fn run(
        &self,
        tf: &Transformer,
        rope_all: &Rope,
        greedy: &Greedy,
        cache: &mut crate::model::KvCache,
        marks: &mut Marks,
        n_out: usize,
    ) -> Result<Option<Graph>, GenerateError> {
        let device = tf.device();
        if !device.is_cuda() {
            for _ in 1..n_out {
                check_interrupted()?;
                self.step(tf, rope_all, greedy, cache)?;
                marks.mark()?;
            }
            return Ok(None);
        }
        let _params = GraphParams::hold(device)?;
        self.step(tf, rope_all, greedy, cache)?;
        marks.mark()?;
        if n_out < 3 {
            return Ok(None);
        }
        let graph = Graph::capture(device, || self.step(tf, rope_all, greedy, cache))?;
        marks.restart()?;
        for _ in 2..n_out {
            check_interrupted()?;
            graph.launch()?;
            marks.mark()?;
        }
        Ok(Some(graph))
    }
}
