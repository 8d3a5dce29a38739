//! The one decoder-only transformer both architectures run on.
//!
//! Llama-3 and LLaDA share every kernel: embedding, N pre-norm blocks (RMSNorm, q/k/v projections, rotate-half
//! RoPE, attention with grouped queries, output projection, RMSNorm, SwiGLU MLP), final RMSNorm and an LM head
//! (untied, or the embedding itself). They differ only in the causal flag, the head counts and the tensor names
//! ([`WeightNames`]). What other checkpoints of the same layout need is read from their `config.json`, never
//! defaulted: q/k/v (and output) projection biases (Qwen2; Llama's `attention_bias`) and Llama-3.1's RoPE
//! frequency scaling ([`super::Llama3RopeScaling`]).
//!
//! Numerics, chosen once for both:
//! - RMSNorm is computed in f32 and cast back before the weight multiplies (as HF llama and OLMo do).
//! - RoPE tables and the rotation are computed in f32 (LLaDA's `rope_full_precision`; HF llama rotates in the
//!   model dtype, which differs by about 4e-3 of logit in bf16). `inv_freq` is computed in f64 and rounded.
//!
//! Layout, for few ops per token (`bench-kernels --profile` counts them): q, k and v are one projection and
//! gate and up another (the checkpoint's matrices stacked once at load, the separate ones dropped: no memory
//! doubled), every projection one matmul of 2-D rows; on the CPU, RMSNorm, RoPE (read from the projection's
//! columns, written in the attention's `(B, heads, T, head_dim)` layout) and SwiGLU are one fused kernel each
//! ([`super::ops`], the same numbers as the ops they replace, bit for bit). A forward counts its ops, and times
//! its parts when asked, through a [`Probe`].
//! - Attention runs in the model dtype unless [`TransformerOptions::attention_f32`] is set. The softmax is
//!   `candle_nn::ops::softmax_last_dim` in that dtype: its CUDA kernel accumulates in f32, the CPU kernel in the
//!   element type.
//! - `run.attention = "fused"` ([`TransformerOptions::fused_attention`], CPU only) replaces scores, mask, softmax
//!   and values with one kernel ([`super::attention`]: blocks of queries and keys, an online softmax in f32, the
//!   output written straight in rows): the same function, other roundings, so off by default.
//! - Masking is an additive bias (0 / -inf) in the model dtype. A query may always attend to itself, so the rows
//!   of left-padding positions stay finite (they never feed a real position: real queries never see pad keys).
//!
//! - Grouped-query attention copies no KV head: the queries of the `heads / kv_heads` query heads sharing a KV
//!   head are stacked, `(B, kv_heads, group * q_len, head_dim)`, and multiply that head's keys and values in one
//!   batched matmul (the same products as repeating the KV heads, without the copies).
//!
//! The KV cache ([`KvCache`]) is preallocated: each layer's keys and values get a `(B, kv_heads, capacity,
//! head_dim)` buffer at the first forward, written in place (`Tensor::slice_set`) as tokens arrive, and attention
//! reads a view of its filled prefix. A generation sizes it for exactly the tokens it feeds (prompt + N_out - 1),
//! the bytes `metrics::roofline::kv_cache_bytes` counts, as HF's static cache would hold them.

use candle_core::{D, DType, Device, Tensor};
use candle_nn::VarBuilder;
use schema::grid::ModelKind;

use super::attention;
use super::config::ModelConfig;
use super::ops;
use super::profile::{Part, Probe};

/// Tensor names of a checkpoint layout (one place, shared by the loader and the synthetic writer).
#[derive(Debug, Clone, Copy)]
pub struct WeightNames {
    pub embed: &'static str,
    pub final_norm: &'static str,
    pub lm_head: &'static str,
    pub layers: &'static str,
    pub attn_norm: &'static str,
    pub q: &'static str,
    pub k: &'static str,
    pub v: &'static str,
    pub o: &'static str,
    pub mlp_norm: &'static str,
    pub gate: &'static str,
    pub up: &'static str,
    pub down: &'static str,
}

impl WeightNames {
    pub fn for_kind(kind: ModelKind) -> Self {
        match kind {
            // Dream's checkpoint is Qwen2's: the same names.
            ModelKind::Llama | ModelKind::Dream => Self {
                embed: "model.embed_tokens",
                final_norm: "model.norm",
                lm_head: "lm_head",
                layers: "model.layers",
                attn_norm: "input_layernorm",
                q: "self_attn.q_proj",
                k: "self_attn.k_proj",
                v: "self_attn.v_proj",
                o: "self_attn.o_proj",
                mlp_norm: "post_attention_layernorm",
                gate: "mlp.gate_proj",
                up: "mlp.up_proj",
                down: "mlp.down_proj",
            },
            ModelKind::Llada => Self {
                embed: "model.transformer.wte",
                final_norm: "model.transformer.ln_f",
                lm_head: "model.transformer.ff_out",
                layers: "model.transformer.blocks",
                attn_norm: "attn_norm",
                q: "q_proj",
                k: "k_proj",
                v: "v_proj",
                o: "attn_out",
                mlp_norm: "ff_norm",
                gate: "ff_proj",
                up: "up_proj",
                down: "ff_out",
            },
        }
    }

    /// Every tensor of the checkpoint with its shape, in file order (embedding, blocks, final norm, head).
    /// Norm weights and projection biases (names ending in `.bias`) are the 1-D entries.
    pub fn tensors(&self, cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
        let h = cfg.hidden_size;
        let q = cfg.num_heads * cfg.head_dim;
        let kv = cfg.num_kv_heads * cfg.head_dim;
        let i = cfg.intermediate_size;
        let mut out = vec![(format!("{}.weight", self.embed), vec![cfg.vocab_size, h])];
        for l in 0..cfg.num_layers {
            let p = format!("{}.{l}", self.layers);
            for (name, shape) in [
                (self.attn_norm, vec![h]),
                (self.q, vec![q, h]),
                (self.k, vec![kv, h]),
                (self.v, vec![kv, h]),
                (self.o, vec![h, q]),
                (self.mlp_norm, vec![h]),
                (self.gate, vec![i, h]),
                (self.up, vec![i, h]),
                (self.down, vec![h, i]),
            ] {
                out.push((format!("{p}.{name}.weight"), shape));
            }
            for (name, len, on) in [(self.q, q, cfg.qkv_bias), (self.k, kv, cfg.qkv_bias), (self.v, kv, cfg.qkv_bias)]
                .into_iter()
                .chain([(self.o, h, cfg.o_bias)])
            {
                if on {
                    out.push((format!("{p}.{name}.bias"), vec![len]));
                }
            }
        }
        out.push((format!("{}.weight", self.final_norm), vec![h]));
        if !cfg.tied_lm_head {
            out.push((format!("{}.weight", self.lm_head), vec![cfg.vocab_size, h]));
        }
        out
    }
}

/// Numerical options of the forward pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransformerOptions {
    /// Upcast q, k, v to f32 for the attention product and softmax (off: attention in the model dtype).
    pub attention_f32: bool,
    /// Attention as one fused kernel ([`super::attention`]; CPU only): scores, mask, softmax and values over
    /// blocks with an online softmax in f32. Off: candle's matmul, softmax and matmul.
    pub fused_attention: bool,
    /// Llama's decode steps with static shapes (`run.cuda_graphs`; [`crate::generate::generate_ar`]): the cache
    /// position lives on the device ([`KvCache::set_cursor`]) and every step attends to the whole cache behind a
    /// length mask, so one step can be captured as a CUDA graph and replayed. On a CUDA device the steps after the
    /// first are replays; on the CPU (tests only: the config refuses it there) the same steps run eagerly.
    pub decode_graph: bool,
    /// cuDNN's fused attention (`run.attention = "cudnn"`; [`super::cudnn`]) for forwards of more than one query;
    /// CUDA, bf16 or f16 only.
    pub cudnn_attention: bool,
    /// RMSNorm, RoPE and SwiGLU as one kernel each on CUDA too (`run.cuda_fused_ops`; [`super::ops`]): the CPU
    /// always runs them fused.
    pub cuda_fused_ops: bool,
}

/// Which positions get logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsSpan {
    All,
    Last,
    /// `len` positions from `start`.
    Range {
        start: usize,
        len: usize,
    },
}

/// RoPE positions of the tokens fed to one forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Positions {
    /// Every row uses `start..start + len`.
    Range { start: usize, len: usize },
    /// One position per row and token (padding-aware positions).
    PerRow(Vec<Vec<u32>>),
}

/// f32 cos/sin tables for one forward, `(len, head_dim/2)` or `(batch, len, head_dim/2)`.
#[derive(Debug, Clone)]
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    /// The tables of the one position `cursor` (a `(1)` u32 tensor on the device) holds: `(1, head_dim/2)` of a
    /// [`Positions::Range`] table, `(batch, 1, head_dim/2)` of a per-row one. Nothing read back to the host.
    pub fn at(&self, cursor: &Tensor) -> candle_core::Result<Rope> {
        let d = self.cos.rank() - 2;
        Ok(Rope { cos: self.cos.index_select(cursor, d)?, sin: self.sin.index_select(cursor, d)? })
    }

    /// The tables of `len` positions from `start` (of a [`Positions::Range`] table).
    pub fn narrow(&self, start: usize, len: usize) -> candle_core::Result<Rope> {
        let d = self.cos.rank() - 2;
        Ok(Rope {
            cos: self.cos.narrow(d, start, len)?.contiguous()?,
            sin: self.sin.narrow(d, start, len)?.contiguous()?,
        })
    }
}

/// Per-layer keys and values: preallocated buffers of `capacity` positions, written in place. Not `Clone`: a clone
/// would share the buffers that the next forward writes.
///
/// A forward writes its tokens' keys and values at the write position ([`KvCache::seek`]; after a forward, just
/// past what it wrote) and attends to every filled position: `0..max(filled, write + tokens)`. Llama decoding
/// appends (the write position is always the end); LLaDA's block caches rewrite a span in the middle: a prefix
/// cache seeks to the block's start and feeds the block and everything after it, a dual cache seeks to the
/// block's start and feeds the block only, attending to the cached positions after it as well.
///
/// A static decode ([`TransformerOptions::decode_graph`]) moves the write position to the device
/// ([`KvCache::set_cursor`]): each forward of one token writes at the position the cursor holds and attends to the
/// whole buffer, the caller masking the positions not yet written; the host's position stops moving.
#[derive(Debug)]
pub struct KvCache {
    /// `(keys, values)` per layer, each `(batch, kv_heads, capacity, head_dim)`, allocated at the first forward.
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// The write position as a `(1)` u32 tensor on the device, when set.
    cursor: Option<Tensor>,
    /// Filled positions `0..len`.
    len: usize,
    /// Where the next forward writes.
    pos: usize,
    capacity: usize,
}

impl KvCache {
    /// A cache for `capacity` positions per row (the buffers are allocated at the first forward, which fixes the
    /// batch and the dtype).
    pub fn new(num_layers: usize, capacity: usize) -> Self {
        Self { layers: vec![None; num_layers], cursor: None, len: 0, pos: 0, capacity }
    }

    /// From now on each forward feeds one token, writes it at the position `cursor` (a `(1)` u32 tensor) holds when
    /// the forward runs on the device, and attends to all `capacity` positions (see [`KvCache`]). Whoever runs the
    /// forwards advances the cursor. The buffers must exist (a forward with the host's position first).
    pub fn set_cursor(&mut self, cursor: Tensor) -> candle_core::Result<()> {
        if cursor.dims() != [1] || cursor.dtype() != DType::U32 {
            candle_core::bail!(
                "KV cache cursor: a (1) u32 tensor expected, got {:?} {:?}",
                cursor.dims(),
                cursor.dtype()
            );
        }
        if self.layers.iter().any(Option::is_none) {
            candle_core::bail!("KV cache cursor: the buffers are allocated by a first forward");
        }
        self.cursor = Some(cursor);
        Ok(())
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Makes the next forward write its tokens from position `pos` (at most [`KvCache::len`]: a cache has no holes);
    /// what is filled after them stays and is attended to.
    pub fn seek(&mut self, pos: usize) -> candle_core::Result<()> {
        if pos > self.len {
            candle_core::bail!("KV cache: seek to {pos} past the {} filled positions", self.len);
        }
        self.pos = pos;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions per row the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of the allocated buffers (0 before the first forward).
    pub fn allocated_bytes(&self) -> usize {
        self.layers.iter().flatten().map(|(k, v)| (k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()).sum()
    }
}

/// Writes one token's `k`, `v` `(batch, kv_heads, 1, head_dim)` of one layer at the position `at` holds
/// (`(batch, kv_heads, 1, head_dim)` u32, every entry the cursor) and returns the whole buffers.
fn cache_write_at(
    slot: &Option<(Tensor, Tensor)>,
    at: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &mut Probe,
) -> candle_core::Result<(Tensor, Tensor)> {
    let Some((ck, cv)) = slot.as_ref() else { candle_core::bail!("KV cache cursor set before the buffers exist") };
    let (k, v) = (p.contiguous(k)?, p.contiguous(v)?);
    p.op(ck.scatter_set(at, &k, 2))?;
    p.op(cv.scatter_set(at, &v, 2))?;
    Ok((ck.clone(), cv.clone()))
}

/// Writes `k`, `v` `(batch, kv_heads, t, head_dim)` of one layer at position `start` of its buffers (allocating
/// them at the first call) and returns views of the filled prefix `0..max(filled, start + t)`.
fn cache_write(
    slot: &mut Option<(Tensor, Tensor)>,
    capacity: usize,
    start: usize,
    filled: usize,
    k: &Tensor,
    v: &Tensor,
    p: &mut Probe,
) -> candle_core::Result<(Tensor, Tensor)> {
    let (b, kvh, t, d) = k.dims4()?;
    let end = start + t;
    if end > capacity {
        candle_core::bail!("KV cache full: {end} positions needed, capacity {capacity}");
    }
    if slot.is_none() {
        let zeros = || Tensor::zeros((b, kvh, capacity, d), k.dtype(), k.device());
        *slot = Some((p.op(zeros())?, p.op(zeros())?));
    }
    let Some((ck, cv)) = slot.as_ref() else { unreachable!("allocated above") };
    if ck.dims4()? != (b, kvh, capacity, d) {
        candle_core::bail!("KV cache of shape {:?} fed keys of shape {:?}", ck.shape(), k.shape());
    }
    let (k, v) = (p.contiguous(k)?, p.contiguous(v)?);
    p.op(ck.slice_set(&k, 2, start))?;
    p.op(cv.slice_set(&v, 2, start))?;
    let seen = end.max(filled);
    Ok((ck.narrow(2, 0, seen)?, cv.narrow(2, 0, seen)?))
}

#[derive(Debug, Clone)]
struct RmsNorm {
    weight: Tensor,
    /// f32 ones of the weight's length (the CUDA path normalises with them, then scales: [`ops::rms_norm`]).
    ones: Tensor,
    eps: f32,
}

impl RmsNorm {
    fn load(vb: VarBuilder, size: usize, eps: f64) -> candle_core::Result<Self> {
        let weight = vb.get(size, "weight")?;
        let ones = Tensor::ones(size, DType::F32, vb.device())?;
        Ok(Self { weight, ones, eps: eps as f32 })
    }

    /// Normalise in f32, round to the input dtype, then scale by the weight in that dtype ([`ops::rms_norm`]).
    fn forward(&self, x: &Tensor, cuda_fused: bool, p: &mut Probe) -> candle_core::Result<Tensor> {
        ops::rms_norm(x, &self.weight, &self.ones, self.eps, cuda_fused, p)
    }
}

/// Up to this many rows, a CPU projection multiplies the other way round (see [`Proj::forward`]).
const SMALL_ROWS: usize = 16;

/// A projection `y = x W^T (+ b)` of 2-D rows `(rows, in)`: one matmul (and one bias add).
#[derive(Debug, Clone)]
struct Proj {
    /// `(out, in)`.
    w: Tensor,
    b: Option<Tensor>,
}

impl Proj {
    /// The checkpoint's projections `names` (each `(out_i, in_dim)`, with a bias when `bias`) stacked along the
    /// output dimension into one (q/k/v, gate/up): the separate tensors are dropped once stacked.
    fn load(vb: &VarBuilder, parts: &[(&str, usize)], in_dim: usize, bias: bool) -> candle_core::Result<Self> {
        let stack = |ts: Vec<Tensor>| if ts.len() == 1 { Ok(ts[0].clone()) } else { Tensor::cat(&ts, 0) };
        let ws = parts.iter().map(|(n, out)| vb.pp(n).get((*out, in_dim), "weight")).collect::<Result<Vec<_>, _>>()?;
        let b = if bias {
            Some(stack(parts.iter().map(|(n, out)| vb.pp(n).get(*out, "bias")).collect::<Result<Vec<_>, _>>()?)?)
        } else {
            None
        };
        Ok(Self { w: stack(ws)?, b })
    }

    fn forward(&self, x: &Tensor, p: &mut Probe) -> candle_core::Result<Tensor> {
        // A few rows (a decode token) on the CPU: `(W x^T)^T`, so the rows go on the matmul's narrow side. The CPU
        // gemm pads the row count to its tile's height (16 rows with AVX2, 48 with AVX-512) and the column count
        // to its width (6 or 8): 8 rows as columns cost less than half the work. The same sums in the same order
        // (f32: the same bits, tested); the transposed result is copied by the caller's reshape (rows x out values).
        let y = if x.dim(0)? <= SMALL_ROWS && x.device().is_cpu() {
            p.op(self.w.matmul(&x.t()?))?.t()?
        } else {
            p.op(x.matmul(&self.w.t()?))?
        };
        match &self.b {
            Some(b) => p.op(y.broadcast_add(b)),
            None => Ok(y),
        }
    }
}

#[derive(Debug, Clone)]
struct Block {
    attn_norm: RmsNorm,
    /// q, k and v stacked: `(heads + 2 kv_heads) x head_dim` outputs.
    qkv: Proj,
    o: Proj,
    mlp_norm: RmsNorm,
    /// gate then up: `2 x intermediate` outputs.
    gate_up: Proj,
    down: Proj,
}

impl Block {
    fn load(vb: VarBuilder, cfg: &ModelConfig, n: &WeightNames) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let q = cfg.num_heads * cfg.head_dim;
        let kv = cfg.num_kv_heads * cfg.head_dim;
        let i = cfg.intermediate_size;
        Ok(Self {
            attn_norm: RmsNorm::load(vb.pp(n.attn_norm), h, cfg.rms_norm_eps)?,
            qkv: Proj::load(&vb, &[(n.q, q), (n.k, kv), (n.v, kv)], h, cfg.qkv_bias)?,
            o: Proj::load(&vb, &[(n.o, h)], q, cfg.o_bias)?,
            mlp_norm: RmsNorm::load(vb.pp(n.mlp_norm), h, cfg.rms_norm_eps)?,
            gate_up: Proj::load(&vb, &[(n.gate, i), (n.up, i)], h, false)?,
            down: Proj::load(&vb, &[(n.down, h)], i, false)?,
        })
    }
}

/// The shared transformer. Forward takes token ids `(batch, len)` and returns logits in the model dtype.
#[derive(Debug, Clone)]
pub struct Transformer {
    cfg: ModelConfig,
    opts: TransformerOptions,
    /// `(vocab, hidden)`.
    embed: Tensor,
    blocks: Vec<Block>,
    norm: RmsNorm,
    lm_head: Proj,
    inv_freq: Tensor,
    dtype: DType,
    device: Device,
}

impl Transformer {
    /// Loads the weights named by `cfg.kind`'s [`WeightNames`] from `vb` (whose dtype is the model dtype).
    pub fn load(vb: VarBuilder, cfg: &ModelConfig, opts: TransformerOptions) -> candle_core::Result<Self> {
        let n = WeightNames::for_kind(cfg.kind);
        let h = cfg.hidden_size;
        let embed = vb.pp(n.embed).get((cfg.vocab_size, h), "weight")?;
        let blocks = (0..cfg.num_layers)
            .map(|l| Block::load(vb.pp(format!("{}.{l}", n.layers)), cfg, &n))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = RmsNorm::load(vb.pp(n.final_norm), h, cfg.rms_norm_eps)?;
        // A tied head is the embedding matrix itself (shared, not copied). (A tied checkpoint that also holds a head
        // of its own must hold the embedding there: `check_weights` compares their bytes before anything loads.)
        let lm_head = if cfg.tied_lm_head {
            Proj { w: embed.clone(), b: None }
        } else {
            Proj::load(&vb, &[(n.lm_head, cfg.vocab_size)], h, false)?
        };
        let half = cfg.head_dim / 2;
        let inv_freq: Vec<f32> = cfg.rope_inv_freq().into_iter().map(|f| f as f32).collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), vb.device())?;
        Ok(Self {
            cfg: cfg.clone(),
            opts,
            embed,
            blocks,
            norm,
            lm_head,
            inv_freq,
            dtype: vb.dtype(),
            device: vb.device().clone(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn options(&self) -> TransformerOptions {
        self.opts
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A preallocated KV cache for `capacity` positions per row: the padded prompt plus every token fed after it
    /// (a generation of N_out tokens feeds N_out - 1).
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        KvCache::new(self.cfg.num_layers, capacity)
    }

    /// cos/sin tables (f32) for the given positions.
    pub fn rope(&self, positions: &Positions) -> candle_core::Result<Rope> {
        let half = self.cfg.head_dim / 2;
        let angles = match positions {
            Positions::Range { start, len } => {
                let p: Vec<f32> = (*start..start + len).map(|p| p as f32).collect();
                Tensor::from_vec(p, (*len, 1), &self.device)?.matmul(&self.inv_freq)?
            }
            Positions::PerRow(rows) => {
                let b = rows.len();
                let t = rows.first().map_or(0, Vec::len);
                if rows.iter().any(|r| r.len() != t) {
                    candle_core::bail!("positions: rows of different lengths");
                }
                let p: Vec<f32> = rows.iter().flatten().map(|&p| p as f32).collect();
                Tensor::from_vec(p, (b * t, 1), &self.device)?.matmul(&self.inv_freq)?.reshape((b, t, half))?
            }
        };
        Ok(Rope { cos: angles.cos()?.contiguous()?, sin: angles.sin()?.contiguous()? })
    }

    /// Additive attention bias in the attention dtype, `(batch | 1, 1, q_len | 1, k_len)`, or `None` when nothing
    /// is masked.
    ///
    /// `key_valid[b][j]` says whether key `j` of row `b` is a real token (false: left padding); queries sit at
    /// absolute positions `q_offset..q_offset + q_len` of the key sequence. Under a causal mask a query always
    /// sees itself, so the rows of padding positions stay finite.
    pub fn attention_bias(
        &self,
        key_valid: Option<&[Vec<bool>]>,
        batch: usize,
        q_offset: usize,
        q_len: usize,
        k_len: usize,
    ) -> candle_core::Result<Option<Tensor>> {
        let causal = self.cfg.causal();
        let any_pad = key_valid.is_some_and(|kv| kv.iter().any(|r| r.iter().take(k_len).any(|v| !v)));
        let needs_causal = causal && (q_len > 1 || q_offset + q_len < k_len);
        if !any_pad && !needs_causal {
            return Ok(None);
        }
        let key_ok =
            |b: usize, j: usize| key_valid.is_none_or(|kv| kv.get(b).and_then(|r| r.get(j)).copied().unwrap_or(true));
        if !needs_causal {
            // Only keys are masked (bidirectional, or one causal query at the end): a `(batch, 1, 1, k_len)` row
            // broadcast over queries. Every row has a real key (prompts are non-empty), so no row is all -inf.
            let bias: Vec<f32> = (0..batch)
                .flat_map(|b| (0..k_len).map(move |j| (b, j)))
                .map(|(b, j)| if key_ok(b, j) { 0f32 } else { f32::NEG_INFINITY })
                .collect();
            let t = Tensor::from_vec(bias, (batch, 1, 1, k_len), &self.device)?;
            return Ok(Some(t.to_dtype(self.attn_dtype())?));
        }
        let rows = if any_pad { batch } else { 1 };
        let mut bias = Vec::with_capacity(rows * q_len * k_len);
        for b in 0..rows {
            for i in 0..q_len {
                let qi = q_offset + i;
                for j in 0..k_len {
                    let allowed = (key_ok(b, j) && (!causal || j <= qi)) || j == qi;
                    bias.push(if allowed { 0f32 } else { f32::NEG_INFINITY });
                }
            }
        }
        let t = Tensor::from_vec(bias, (rows, 1, q_len, k_len), &self.device)?;
        Ok(Some(t.to_dtype(self.attn_dtype())?))
    }

    /// The dtype of the attention's scores and of its additive bias ([`Transformer::attention_bias`]).
    pub fn attn_dtype(&self) -> DType {
        if self.opts.attention_f32 { DType::F32 } else { self.dtype }
    }

    /// One forward pass. `ids`: `(batch, len)` u32; `rope` must cover `len` positions; with a cache, the new
    /// keys/values are written at its write position and attention sees every filled position (the bias then
    /// spans them all): see [`KvCache`].
    pub fn forward(
        &self,
        ids: &Tensor,
        rope: &Rope,
        bias: Option<&Tensor>,
        cache: Option<&mut KvCache>,
        span: LogitsSpan,
    ) -> candle_core::Result<Tensor> {
        self.forward_probed(ids, rope, bias, cache, span, &mut Probe::idle())
    }

    /// [`Transformer::forward`] with its ops counted, and with a timing probe each part timed, by `p`
    /// (`bench-kernels --profile`). The probe's last part is the LM head: call [`Probe::finish`] after the work
    /// that follows.
    pub fn forward_probed(
        &self,
        ids: &Tensor,
        rope: &Rope,
        bias: Option<&Tensor>,
        mut cache: Option<&mut KvCache>,
        span: LogitsSpan,
        p: &mut Probe,
    ) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let h = self.cfg.hidden_size;
        // The fused attention reads the bias as f32 rows, made once for every layer.
        let mask = match bias {
            Some(bias) if self.opts.fused_attention => Some(attention::Mask::from_bias(bias)?),
            _ => None,
        };
        let masking = Masking { bias, mask: mask.as_ref() };
        // A cache with a device cursor: where every layer writes, made once (see `cache_write_at`).
        let at = match cache.as_deref().and_then(|c| c.cursor.as_ref()) {
            Some(cursor) => {
                if t != 1 {
                    candle_core::bail!("a KV cache with a device cursor takes one token a forward, not {t}");
                }
                p.enter(Part::CacheWrite)?;
                let shape = (b, self.cfg.num_kv_heads, 1, self.cfg.head_dim);
                Some(p.contiguous(&cursor.reshape((1, 1, 1, 1))?.broadcast_as(shape)?)?)
            }
            None => None,
        };
        p.enter(Part::Embed)?;
        let mut x = p.op(self.embed.index_select(&ids.flatten_all()?, 0))?.reshape((b, t, h))?;
        for (l, block) in self.blocks.iter().enumerate() {
            let layer_cache = match cache.as_deref_mut() {
                Some(c) => Some(CacheSlot {
                    slot: &mut c.layers[l],
                    start: c.pos,
                    filled: c.len,
                    capacity: c.capacity,
                    at: at.as_ref(),
                }),
                None => None,
            };
            x = self.block_forward(block, &x, rope, masking, layer_cache, p)?;
        }
        if let Some(c) = cache.filter(|c| c.cursor.is_none()) {
            c.pos += t;
            c.len = c.len.max(c.pos);
        }
        let x = match span {
            LogitsSpan::All => x,
            LogitsSpan::Last => x.narrow(1, t - 1, 1)?,
            LogitsSpan::Range { start, len } => x.narrow(1, start, len)?,
        };
        p.enter(Part::Norm)?;
        let x = self.norm.forward(&x, self.opts.cuda_fused_ops, p)?;
        let rows = x.dim(1)?;
        p.enter(Part::LmHead)?;
        self.lm_head.forward(&x.reshape((b * rows, h))?, p)?.reshape((b, rows, self.cfg.vocab_size))
    }

    /// One pre-norm block on `x` `(b, t, hidden)` (contiguous).
    fn block_forward(
        &self,
        blk: &Block,
        x: &Tensor,
        rope: &Rope,
        masking: Masking<'_>,
        cache: Option<CacheSlot<'_>>,
        p: &mut Probe,
    ) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        p.enter(Part::Norm)?;
        let fused = self.opts.cuda_fused_ops;
        let hn = blk.attn_norm.forward(x, fused, p)?;
        let a = self.attention(blk, &hn.reshape((b * t, h))?, (b, t), rope, masking, cache, p)?;
        p.enter(Part::Residual)?;
        let x = p.op(x + a.reshape((b, t, h))?)?;
        p.enter(Part::Norm)?;
        let hn = blk.mlp_norm.forward(&x, fused, p)?.reshape((b * t, h))?;
        p.enter(Part::GateUp)?;
        let gu = blk.gate_up.forward(&hn, p)?;
        p.enter(Part::Activation)?;
        let act = ops::silu_mul(&gu, fused, p)?;
        p.enter(Part::Down)?;
        let m = blk.down.forward(&act, p)?;
        p.enter(Part::Residual)?;
        p.op(x + m.reshape((b, t, h))?)
    }

    /// Attention of the normed rows `x` `(b * t, hidden)`; returns the output projection `(b * t, hidden)`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        blk: &Block,
        x: &Tensor,
        (b, t): (usize, usize),
        rope: &Rope,
        masking: Masking<'_>,
        cache: Option<CacheSlot<'_>>,
        p: &mut Probe,
    ) -> candle_core::Result<Tensor> {
        let (nh, nkv, hd) = (self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim);
        p.enter(Part::QkvProj)?;
        // One projection for q, k and v; each a view `(b, t, heads, hd)` of its columns.
        let qkv = blk.qkv.forward(x, p)?.reshape((b, t, nh + 2 * nkv, hd))?;
        p.enter(Part::Rope)?;
        let fused = self.opts.cuda_fused_ops;
        let q = ops::rope_to_heads(&qkv.narrow(2, 0, nh)?, &rope.cos, &rope.sin, fused, p)?;
        let k = ops::rope_to_heads(&qkv.narrow(2, nh, nkv)?, &rope.cos, &rope.sin, fused, p)?;
        p.enter(Part::CacheWrite)?;
        let v = qkv.narrow(2, nh + nkv, nkv)?.transpose(1, 2)?;
        // cuDNN takes forwards of more than one query (a decode token keeps the ops: see `super::cudnn`).
        let cudnn = self.opts.cudnn_attention && t > 1;
        let (k, v) = match cache {
            Some(CacheSlot { slot, at: Some(at), .. }) => cache_write_at(slot, at, &k, &v, p)?,
            Some(c) => cache_write(c.slot, c.capacity, c.start, c.filled, &k, &p.contiguous(&v)?, p)?,
            // The fused kernel reads the values where the projection wrote them (rows of `hd`, strided): no copy.
            None if self.opts.fused_attention || cudnn => (k, v),
            None => (k, p.contiguous(&v)?),
        };
        let scale = 1.0 / (hd as f64).sqrt();
        if cudnn {
            // cuDNN reads q, k, v where they are and writes the rows the output projection reads.
            p.enter(Part::Attention)?;
            let y = p.op(super::cudnn::attention(&q, &k, &v, masking.bias, scale as f32))?.reshape((b * t, nh * hd))?;
            p.enter(Part::OutProj)?;
            return blk.o.forward(&y, p);
        }
        if self.opts.fused_attention {
            // One kernel from q, k, v to the rows the output projection reads (widened to f32 inside).
            p.enter(Part::Attention)?;
            let y = p.op(attention::fused(&q, &k, &v, masking.mask, scale as f32))?.reshape((b * t, nh * hd))?;
            p.enter(Part::OutProj)?;
            return blk.o.forward(&y, p);
        }
        let ad = self.attn_dtype();
        p.enter(Part::Scores)?;
        // The 1/sqrt(d) scale goes on q (t x d per head), not on the scores (t x keys): the same product, and one
        // pass over far fewer elements (on the CPU the scores' pass cost a quarter of a long sequence's step).
        let q = p.cast(&q, ad)?;
        let q = p.op(q * scale)?;
        let (k, v) = (p.cast(&k, ad)?, p.cast(&v, ad)?);
        // Grouped queries: head h uses KV head h / group, so the group's heads are adjacent and `q` (contiguous,
        // `(b, nh, t, hd)`) reshapes for free to `(b, nkv, group * t, hd)`. The keys and values stay as they are
        // (a strided view of the cache's filled prefix): no copy per token.
        let group = nh / nkv;
        let kl = k.dim(2)?;
        let q = q.reshape((b, nkv, group * t, hd))?;
        let mut att = p.op(q.matmul(&k.t()?))?.reshape((b, nh, t, kl))?;
        if let Some(bias) = masking.bias {
            p.enter(Part::Mask)?;
            att = p.op(att.broadcast_add(bias))?;
        }
        p.enter(Part::Softmax)?;
        let att = p.op(candle_nn::ops::softmax_last_dim(&att))?.reshape((b, nkv, group * t, kl))?;
        p.enter(Part::AttnValues)?;
        let y = p.op(att.matmul(&v))?.reshape((b, nh, t, hd))?;
        let y = p.cast(&y, self.dtype)?;
        // Back to rows of heads: a copy unless t = 1 (then the transpose is free).
        let y = p.contiguous(&y.transpose(1, 2)?)?.reshape((b * t, nh * hd))?;
        p.enter(Part::OutProj)?;
        blk.o.forward(&y, p)
    }
}

/// A forward's attention mask: the additive bias (ops path) and, for the fused kernel, the same read as f32.
#[derive(Clone, Copy)]
struct Masking<'a> {
    bias: Option<&'a Tensor>,
    mask: Option<&'a attention::Mask>,
}

/// One layer's share of a [`KvCache`] during a forward: its buffers, where the new tokens go, the capacity.
struct CacheSlot<'a> {
    slot: &'a mut Option<(Tensor, Tensor)>,
    start: usize,
    filled: usize,
    capacity: usize,
    /// With a device cursor: where the token goes, `(batch, kv_heads, 1, head_dim)` u32 (instead of `start`).
    at: Option<&'a Tensor>,
}

/// The greedy choice on the device: the logits in f32, the banned ids' -inf mask (made once) added, the argmax.
#[derive(Debug, Clone)]
pub struct Greedy {
    /// `(vocab)`: 0, or -inf at a banned id; `None` when nothing is banned.
    mask: Option<Tensor>,
}

impl Greedy {
    pub fn new(vocab: usize, banned: &[u32], device: &Device) -> candle_core::Result<Self> {
        if banned.is_empty() {
            return Ok(Self { mask: None });
        }
        let mut m = vec![0f32; vocab];
        for &id in banned {
            if let Some(x) = m.get_mut(id as usize) {
                *x = f32::NEG_INFINITY;
            }
        }
        Ok(Self { mask: Some(Tensor::from_vec(m, vocab, device)?) })
    }

    /// The chosen ids `(batch, 1)` (u32, on the device) of logits `(batch, vocab)` in any float dtype.
    pub fn choose(&self, logits: &Tensor) -> candle_core::Result<Tensor> {
        let logits = logits.to_dtype(DType::F32)?;
        let logits = match &self.mask {
            Some(m) => logits.broadcast_add(m)?,
            None => logits,
        };
        logits.argmax_keepdim(D::Minus1)
    }
}

/// Greedy choice per row from logits `(batch, vocab)` (any float dtype); `banned` ids get -inf first.
pub fn argmax_rows(logits: &Tensor, banned: &[u32]) -> candle_core::Result<Vec<u32>> {
    let greedy = Greedy::new(logits.dim(D::Minus1)?, banned, logits.device())?;
    greedy.choose(logits)?.flatten_all()?.to_vec1::<u32>()
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::{Proj, SMALL_ROWS};
    use crate::model::profile::Probe;

    #[test]
    fn a_few_rows_multiplied_the_other_way_round_give_the_same_bits() {
        // At a real layer's width (the CPU gemm blocks its sums over `in`), and with a bias.
        let (inp, out) = (2048, 384);
        let w = Tensor::randn(0f32, 1.0, (out, inp), &Device::Cpu).unwrap();
        let b = Tensor::randn(0f32, 1.0, out, &Device::Cpu).unwrap();
        let proj = Proj { w: w.clone(), b: Some(b.clone()) };
        for rows in [1, 3, 8, SMALL_ROWS, SMALL_ROWS + 1] {
            let x = Tensor::randn(0f32, 1.0, (rows, inp), &Device::Cpu).unwrap();
            let got = proj.forward(&x, &mut Probe::idle()).unwrap();
            assert_eq!(got.dims(), [rows, out]);
            let want = x.matmul(&w.t().unwrap()).unwrap().broadcast_add(&b).unwrap();
            let (got, want) = (got.to_vec2::<f32>().unwrap(), want.to_vec2::<f32>().unwrap());
            assert!(got == want, "{rows} rows: the products differ");
        }
    }
}
