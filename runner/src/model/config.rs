//! `config.json` parsing: one serde struct per file format, converted once into [`ModelConfig`].
//!
//! Llama checkpoints use the HF llama field names (`hidden_size`, `num_hidden_layers`, ...); LLaDA uses the OLMo
//! names (`d_model`, `n_layers`, ...). Each raw struct mirrors its file; `into_config` applies the defaults the
//! upstream code applies, and refuses what the shared transformer cannot run (MLP biases, other activations,
//! RoPE scaling other than Llama-3.1's, sliding windows), naming the file, the field and the way out. RoPE's base
//! is never defaulted: a file with neither `rope_theta` nor transformers-5 `rope_parameters.rope_theta` is
//! refused.
//!
//! The `llama` kind is a layout, not a name: HF's `LlamaForCausalLM` and `Qwen2ForCausalLM` (the same causal
//! decoder; Qwen2 always has biases on the q, k and v projections, Llama when `attention_bias` is true, then on
//! the output projection too) both load as `llama`.

use std::path::Path;

use schema::grid::ModelKind;
use serde::Deserialize;

use super::ModelError;

/// The architecture-independent description the transformer runs from.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub kind: ModelKind,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    /// Special ids the config file states (checked against the tokenizer by the loader).
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    pub mask_token_id: Option<u32>,
    /// `torch_dtype` (or transformers-5 `dtype`) as written, e.g. "bfloat16"; informational.
    pub checkpoint_dtype: Option<String>,
    /// The `dllm_bench_synthetic` marker of a synthetic checkpoint, if any.
    pub synthetic: Option<serde_json::Value>,
    /// The LM head is the token embedding (`tie_word_embeddings` / OLMo's `weight_tying`: Llama-3.2-1B/3B and
    /// most small models): the checkpoint has no LM head tensor of its own.
    pub tied_lm_head: bool,
    /// The q, k and v projections have biases (Qwen2 always; Llama with `attention_bias`).
    pub qkv_bias: bool,
    /// The attention's output projection has a bias (Llama with `attention_bias`; never Qwen2).
    pub o_bias: bool,
    /// Llama-3.1's RoPE frequency scaling (`rope_type: "llama3"`), when the checkpoint asks for it.
    pub rope_scaling: Option<Llama3RopeScaling>,
}

/// Llama-3.1's RoPE frequency scaling (`rope_scaling` / `rope_parameters` with `rope_type: "llama3"`): long
/// wavelengths are divided by `factor`, short ones kept, and those in between interpolated smoothly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3RopeScaling {
    /// 8 for Llama-3.1 and 3.2 (3.2: 32).
    pub factor: f64,
    /// 1 for Llama-3.1.
    pub low_freq_factor: f64,
    /// 4 for Llama-3.1.
    pub high_freq_factor: f64,
    /// The context the model was first trained at: 8192 for Llama-3.1.
    pub original_max_position_embeddings: f64,
}

impl Llama3RopeScaling {
    /// The scaled inverse frequency of one RoPE pair whose unscaled inverse frequency is `inv_freq` (the formula
    /// of Meta's reference code and transformers' `_compute_llama3_parameters`).
    pub fn scale(&self, inv_freq: f64) -> f64 {
        let old = self.original_max_position_embeddings;
        let low_freq_wavelen = old / self.low_freq_factor;
        let high_freq_wavelen = old / self.high_freq_factor;
        let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
        if wavelen < high_freq_wavelen {
            inv_freq
        } else if wavelen > low_freq_wavelen {
            inv_freq / self.factor
        } else {
            let smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor);
            (1.0 - smooth) * inv_freq / self.factor + smooth * inv_freq
        }
    }
}

impl ModelConfig {
    /// Reads and converts `config.json` for `kind`.
    pub fn from_file(path: &Path, kind: ModelKind) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|error| ModelError::Io { path: path.to_path_buf(), error })?;
        Self::from_json_str(&text, path, kind)
    }

    /// Converts the JSON text of `config.json`; `path` is only used in error messages.
    pub fn from_json_str(text: &str, path: &Path, kind: ModelKind) -> Result<Self, ModelError> {
        let json_err = |error| ModelError::Json { path: path.to_path_buf(), error };
        check_architecture(&serde_json::from_str(text).map_err(json_err)?, path, kind)?;
        match kind {
            ModelKind::Llama | ModelKind::Dream => {
                serde_json::from_str::<LlamaConfigFile>(text).map_err(json_err)?.into_config(path, kind)
            }
            ModelKind::Llada => serde_json::from_str::<LladaConfigFile>(text).map_err(json_err)?.into_config(path),
        }
    }

    /// Parameters of one transformer block (attention + MLP + two norms): `metrics::roofline`'s formula, the one
    /// the bundles' roofline counts use.
    pub fn parameters_per_layer(&self) -> u64 {
        metrics::roofline::matrix_params_per_layer(&self.shape()) + 2 * self.hidden_size as u64
    }

    /// Total parameters the checkpoint holds: embedding, blocks, final norm, the LM head unless it is the
    /// embedding (`metrics::roofline::stored_parameters`), and the attention biases where it has them.
    pub fn parameter_count(&self) -> u64 {
        let (q, kv) = ((self.num_heads * self.head_dim) as u64, (self.num_kv_heads * self.head_dim) as u64);
        let biases = if self.qkv_bias { q + 2 * kv } else { 0 } + if self.o_bias { self.hidden_size as u64 } else { 0 };
        metrics::roofline::stored_parameters(&self.shape(), self.tied_lm_head) + self.num_layers as u64 * biases
    }

    /// The shape summary a bundle records (and `metrics::roofline` computes from).
    pub fn shape(&self) -> schema::ModelShape {
        schema::ModelShape {
            layers: self.num_layers as u32,
            hidden: self.hidden_size as u32,
            heads: self.num_heads as u32,
            kv_heads: self.num_kv_heads as u32,
            intermediate: self.intermediate_size as u32,
            vocab: self.vocab_size as u32,
        }
    }

    /// RoPE's inverse frequencies, one per pair of the head dimension: theta^(-2i / head_dim), then Llama-3.1's
    /// scaling when the checkpoint has it. Computed in f64 (the transformer rounds them to f32).
    pub fn rope_inv_freq(&self) -> Vec<f64> {
        (0..self.head_dim / 2)
            .map(|i| {
                let f = 1.0 / self.rope_theta.powf(2.0 * i as f64 / self.head_dim as f64);
                self.rope_scaling.map_or(f, |s| s.scale(f))
            })
            .collect()
    }

    /// Whether attention is causal (autoregressive) for this architecture.
    pub fn causal(&self) -> bool {
        matches!(self.kind, ModelKind::Llama)
    }

    /// Bytes of K and V for one token over all layers, at `dtype_bytes` per element
    /// (`metrics::roofline::kv_cache_bytes` of one row and one token).
    pub fn kv_bytes_per_token(&self, dtype_bytes: usize) -> u64 {
        metrics::roofline::kv_cache_bytes(&self.shape(), 1, 1, dtype_bytes as u64)
    }

    fn check(&self, path: &Path) -> Result<(), ModelError> {
        let bad = |field: &str, value: String, fix: &str| {
            Err(ModelError::Unsupported {
                path: path.to_path_buf(),
                field: field.to_string(),
                value,
                fix: fix.to_string(),
            })
        };
        if self.num_heads == 0 || !self.hidden_size.is_multiple_of(self.num_heads) {
            return bad(
                "num_attention_heads",
                self.num_heads.to_string(),
                "the hidden size must be a multiple of the head count",
            );
        }
        if self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(
                "num_key_value_heads",
                self.num_kv_heads.to_string(),
                "the head count must be a multiple of the KV head count",
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad("head_dim", self.head_dim.to_string(), "RoPE needs an even head dimension");
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad("rope_theta", self.rope_theta.to_string(), "RoPE's base must be positive");
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0 && self.rms_norm_eps < 1.0) {
            return bad(
                "rms_norm_eps",
                self.rms_norm_eps.to_string(),
                "RMSNorm's epsilon must be a small positive number (1e-5 or 1e-6 in these models)",
            );
        }
        // Sizes far past any real model's, before anything is allocated from them (the expected tensors' names, one
        // per layer, are listed before the weights are compared with them).
        // In the file's own spelling: LLaDA's config names them as OLMo does.
        let names = match self.kind {
            ModelKind::Llada => ["n_layers", "d_model", "mlp_hidden_size (or mlp_ratio x d_model)", "vocab_size"],
            _ => ["num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"],
        };
        for (field, value, most) in [
            (names[0], self.num_layers, MAX_LAYERS),
            (names[1], self.hidden_size, MAX_WIDTH),
            (names[2], self.intermediate_size, MAX_WIDTH * 8),
            (names[3], self.vocab_size, MAX_VOCAB),
        ] {
            if value == 0 || value > most {
                return bad(field, value.to_string(), &format!("it must be 1 to {most}: this is not a checkpoint's"));
            }
        }
        Ok(())
    }
}

/// The most layers a `config.json` may declare (Llama-3.1-405B has 126).
const MAX_LAYERS: usize = 1024;
/// The widest hidden size (Llama-3.1-405B: 16,384); the MLP's may be 8 times it.
const MAX_WIDTH: usize = 1 << 17;
/// The largest vocabulary (Gemma's 256,000 and Llama 3's 128,256 fit many times).
const MAX_VOCAB: usize = 1 << 22;

/// The `architectures` and `model_type` pairs each layout loads (HF llama and Qwen2; LLaDA's remote code).
fn architecture_names(kind: ModelKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        ModelKind::Llama => &[("LlamaForCausalLM", "llama"), ("Qwen2ForCausalLM", "qwen2")],
        ModelKind::Llada => &[("LLaDAModelLM", "llada")],
        ModelKind::Dream => &[("DreamModel", "Dream")],
    }
}

/// Refuses a `config.json` whose `architectures` or `model_type` names another architecture than `kind`'s (a
/// file with neither is taken as `kind`). Naming the other supported kind when the file is one.
fn check_architecture(json: &serde_json::Value, path: &Path, kind: ModelKind) -> Result<(), ModelError> {
    let names = architecture_names(kind);
    let archs: Vec<&str> = json
        .get("architectures")
        .and_then(|a| a.as_array())
        .map_or(vec![], |a| a.iter().filter_map(|v| v.as_str()).collect());
    let mt = json.get("model_type").and_then(|v| v.as_str());
    let (field, value) = if !archs.is_empty() && !names.iter().any(|(a, _)| archs.contains(a)) {
        ("architectures", format!("{archs:?}"))
    } else if mt.is_some_and(|m| !names.iter().any(|&(_, t)| t == m)) {
        ("model_type", format!("{:?}", mt.unwrap_or_default()))
    } else {
        return Ok(());
    };
    let other = [ModelKind::Llama, ModelKind::Llada, ModelKind::Dream]
        .into_iter()
        .find(|&k| k != kind && architecture_names(k).iter().any(|(a, m)| archs.contains(a) || mt == Some(m)));
    let listed = |k: ModelKind| architecture_names(k).iter().map(|(a, _)| *a).collect::<Vec<_>>().join(" or ");
    let fix = match other {
        Some(k) => format!(
            "this is a {} checkpoint, not {}: give the model kind = \"{}\" in the config",
            listed(k),
            listed(kind),
            format!("{k:?}").to_lowercase()
        ),
        None => format!(
            "unknown architecture: the runner implements {} (kind \"llama\"), {} (kind \"llada\") and {} (kind \
             \"dream\") only",
            listed(ModelKind::Llama),
            listed(ModelKind::Llada),
            listed(ModelKind::Dream)
        ),
    };
    Err(ModelError::Unsupported { path: path.to_path_buf(), field: field.into(), value, fix })
}

/// `rope_theta` at the top level (transformers 4) or under `rope_parameters` (transformers 5).
fn rope_theta(path: &Path, top: Option<f64>, params: Option<&RopeParameters>) -> Result<f64, ModelError> {
    let nested = params.and_then(|p| p.rope_theta);
    match (top, nested) {
        (Some(a), Some(b)) if a != b => Err(ModelError::Unsupported {
            path: path.to_path_buf(),
            field: "rope_theta".into(),
            value: format!("{a} (top level) vs {b} (rope_parameters)"),
            fix: "make the two spellings agree or remove one".into(),
        }),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(ModelError::MissingField {
            path: path.to_path_buf(),
            field: "rope_theta".into(),
            fix: "add \"rope_theta\" (transformers 4) or \"rope_parameters\": {\"rope_theta\": ...} \
                  (transformers 5); Llama-3 and LLaDA use 500000. No default is assumed, since a wrong \
                  RoPE base runs silently"
                .into(),
        }),
    }
}

/// The RoPE scaling of a config: transformers 4's `rope_scaling` or transformers 5's `rope_parameters` (whose
/// `rope_type` is "default" when there is none). Only Llama-3.1's `llama3` is implemented; `allowed` is false for
/// a layout that never has scaling (LLaDA), where any type but "default" is refused.
fn rope_scaling(
    path: &Path,
    legacy: Option<&serde_json::Value>,
    params: Option<&RopeParameters>,
    allowed: bool,
) -> Result<Option<Llama3RopeScaling>, ModelError> {
    let unsupported = unsupported_in(path);
    let legacy = legacy.filter(|v| !v.is_null());
    let (field, obj) = match (legacy, params) {
        (Some(v), _) => ("rope_scaling", v.clone()),
        (None, Some(p)) => ("rope_parameters", serde_json::to_value(&p.rest).unwrap_or_default()),
        (None, None) => return Ok(None),
    };
    let kind = obj.get("rope_type").or_else(|| obj.get("type")).and_then(|t| t.as_str());
    let kind = kind.or(params.and_then(|p| p.rope_type.as_deref())).unwrap_or("default");
    if kind == "default" {
        return Ok(None);
    }
    if kind != "llama3" || !allowed {
        let supported = if allowed { "plain RoPE and Llama-3.1's \"llama3\" scaling are" } else { "plain RoPE is" };
        return Err(unsupported(
            &format!("{field}.rope_type"),
            kind.to_string(),
            &format!("only {supported} implemented"),
        ));
    }
    let num = |name: &str| -> Result<f64, ModelError> {
        let v = obj.get(name).and_then(|v| v.as_f64());
        match v {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            Some(x) => Err(unsupported(&format!("{field}.{name}"), x.to_string(), "must be a positive number")),
            None => Err(ModelError::MissingField {
                path: path.to_path_buf(),
                field: format!("{field}.{name}"),
                fix: "Llama-3.1's llama3 scaling needs factor, low_freq_factor, high_freq_factor and \
                      original_max_position_embeddings (8, 1, 4, 8192 in Meta's release)"
                    .into(),
            }),
        }
    };
    let s = Llama3RopeScaling {
        factor: num("factor")?,
        low_freq_factor: num("low_freq_factor")?,
        high_freq_factor: num("high_freq_factor")?,
        original_max_position_embeddings: num("original_max_position_embeddings")?,
    };
    if s.high_freq_factor <= s.low_freq_factor {
        return Err(unsupported(
            &format!("{field}.high_freq_factor"),
            s.high_freq_factor.to_string(),
            "must exceed low_freq_factor",
        ));
    }
    Ok(Some(s))
}

#[derive(Debug, Clone, Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
    /// The scaling's own fields (transformers 5 puts them beside `rope_theta`).
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

/// `eos_token_id` may be one id or a list (Llama-3 Instruct).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<u32> {
        match self {
            Self::One(x) => vec![x],
            Self::Many(v) => v,
        }
    }
}

/// HF llama `config.json` (Meta-Llama-3-8B).
#[derive(Debug, Clone, Deserialize)]
struct LlamaConfigFile {
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    vocab_size: usize,
    max_position_embeddings: usize,
    bos_token_id: Option<u32>,
    eos_token_id: Option<OneOrMany>,
    pad_token_id: Option<u32>,
    /// Dream: the mask token's id (`<|mask|>`, 151666 in Dream-v0).
    mask_token_id: Option<u32>,
    #[serde(default)]
    tie_word_embeddings: bool,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    hidden_act: Option<String>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    /// Qwen2: `qwen2`, whose q/k/v projections always have biases.
    model_type: Option<String>,
    architectures: Option<Vec<String>>,
    /// Qwen2's sliding-window attention (off in the released base models).
    #[serde(default)]
    use_sliding_window: bool,
    dllm_bench_synthetic: Option<serde_json::Value>,
}

impl LlamaConfigFile {
    /// `kind` is `llama`, or `dream` (Dream's `config.json` is Qwen2's with a mask id: the same layout,
    /// bidirectional).
    fn into_config(self, path: &Path, kind: ModelKind) -> Result<ModelConfig, ModelError> {
        let unsupported = unsupported_in(path);
        let qwen2 = kind == ModelKind::Dream
            || self.model_type.as_deref() == Some("qwen2")
            || self.architectures.as_ref().is_some_and(|a| a.iter().any(|n| n == "Qwen2ForCausalLM"));
        if self.mlp_bias {
            return Err(unsupported("mlp_bias", "true".into(), "only bias-free MLP projections are implemented"));
        }
        if self.use_sliding_window {
            return Err(unsupported(
                "use_sliding_window",
                "true".into(),
                "sliding-window attention is not implemented: every layer attends to the whole sequence",
            ));
        }
        // transformers' "swish" is the same function as "silu".
        if let Some(act) = &self.hidden_act
            && act != "silu"
            && act != "swish"
        {
            return Err(unsupported("hidden_act", act.clone(), "only \"silu\" (SwiGLU) is implemented"));
        }
        let scaling = rope_scaling(path, self.rope_scaling.as_ref(), self.rope_parameters.as_ref(), true)?;
        let theta = rope_theta(path, self.rope_theta, self.rope_parameters.as_ref())?;
        let head_dim = self.hidden_size / self.num_attention_heads.max(1);
        if let Some(hd) = self.head_dim
            && hd != head_dim
        {
            return Err(unsupported(
                "head_dim",
                hd.to_string(),
                "head_dim must equal hidden_size / num_attention_heads",
            ));
        }
        let cfg = ModelConfig {
            kind,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim,
            vocab_size: self.vocab_size,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: theta,
            max_position_embeddings: self.max_position_embeddings,
            bos_token_id: self.bos_token_id,
            eos_token_ids: self.eos_token_id.map(OneOrMany::into_vec).unwrap_or_default(),
            pad_token_id: self.pad_token_id,
            mask_token_id: if kind == ModelKind::Dream { self.mask_token_id } else { None },
            checkpoint_dtype: self.torch_dtype.or(self.dtype),
            synthetic: self.dllm_bench_synthetic,
            tied_lm_head: self.tie_word_embeddings,
            qkv_bias: qwen2 || self.attention_bias,
            o_bias: !qwen2 && self.attention_bias,
            rope_scaling: scaling,
        };
        cfg.check(path)?;
        Ok(cfg)
    }
}

/// LLaDA's OLMo-style `config.json` (LLaDA-8B-Base).
#[derive(Debug, Clone, Deserialize)]
struct LladaConfigFile {
    d_model: usize,
    n_layers: usize,
    n_heads: usize,
    n_kv_heads: Option<usize>,
    mlp_hidden_size: Option<usize>,
    mlp_ratio: Option<usize>,
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope: Option<bool>,
    vocab_size: usize,
    embedding_size: Option<usize>,
    max_sequence_length: usize,
    activation_type: Option<String>,
    block_type: Option<String>,
    layer_norm_type: Option<String>,
    weight_tying: Option<bool>,
    #[serde(default)]
    include_bias: bool,
    #[serde(default)]
    include_qkv_bias: bool,
    #[serde(default)]
    alibi: bool,
    scale_logits: Option<bool>,
    #[serde(default)]
    input_emb_norm: bool,
    #[serde(default)]
    attention_layer_norm: bool,
    /// OLMo: the norms' bias (absent: `include_bias`).
    bias_for_layer_norm: Option<bool>,
    /// OLMo: the norms have a weight (absent or null: true).
    layer_norm_with_affine: Option<bool>,
    /// OLMo: one KV head (absent: `n_kv_heads` decides).
    multi_query_attention: Option<bool>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<OneOrMany>,
    pad_token_id: Option<u32>,
    mask_token_id: Option<u32>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    dllm_bench_synthetic: Option<serde_json::Value>,
}

impl LladaConfigFile {
    fn into_config(self, path: &Path) -> Result<ModelConfig, ModelError> {
        let unsupported = unsupported_in(path);
        // The fields that choose the architecture, whose upstream defaults are not LLaDA-8B's (a tied head, no RoPE,
        // LayerNorm, OLMo's sequential SwiGLU block): a config that leaves one out is refused, not guessed at.
        // LLaDA-8B's config.json states every one.
        for (field, absent, value) in [
            ("weight_tying", self.weight_tying.is_none(), "false"),
            ("rope", self.rope.is_none(), "true"),
            ("layer_norm_type", self.layer_norm_type.is_none(), "\"rms\""),
            ("activation_type", self.activation_type.is_none(), "\"silu\""),
            ("block_type", self.block_type.is_none(), "\"llama\""),
        ] {
            if absent {
                return Err(ModelError::MissingField {
                    path: path.to_path_buf(),
                    field: field.into(),
                    fix: format!(
                        "add \"{field}\": {value} (LLaDA-8B's value; the upstream code's default for a config \
                         without it is another architecture, so the runner does not guess)"
                    ),
                });
            }
        }
        let checks: [(&str, bool, &str); 7] = [
            ("include_bias", self.include_bias, "only bias-free projections are implemented"),
            (
                "bias_for_layer_norm",
                self.bias_for_layer_norm.unwrap_or(false),
                "only RMSNorm without a bias is implemented",
            ),
            ("include_qkv_bias", self.include_qkv_bias, "only bias-free projections are implemented"),
            ("alibi", self.alibi, "only RoPE positions are implemented"),
            ("scale_logits", self.scale_logits.unwrap_or(false), "logit scaling is not implemented"),
            ("input_emb_norm", self.input_emb_norm, "embedding normalisation is not implemented"),
            ("attention_layer_norm", self.attention_layer_norm, "q/k layer norms are not implemented"),
        ];
        for (field, on, fix) in checks {
            if on {
                return Err(unsupported(field, "true".into(), fix));
            }
        }
        if self.rope == Some(false) {
            return Err(unsupported("rope", "false".into(), "only RoPE positions are implemented"));
        }
        if self.layer_norm_with_affine == Some(false) {
            return Err(unsupported(
                "layer_norm_with_affine",
                "false".into(),
                "only norms with a weight are implemented",
            ));
        }
        // OLMo's `effective_n_kv_heads`: `multi_query_attention` means one KV head, `false` as many as heads, and
        // stated beside `n_kv_heads` the two must agree.
        let kv_heads = match (self.n_kv_heads, self.multi_query_attention) {
            (None, Some(true)) => 1,
            (None, _) => self.n_heads,
            (Some(n), None) => n,
            (Some(n), Some(mqa)) => {
                let implied = if mqa { 1 } else { self.n_heads };
                if n != implied {
                    return Err(unsupported(
                        "multi_query_attention",
                        mqa.to_string(),
                        &format!("it implies {implied} KV heads but n_kv_heads is {n}: leave one of the two out"),
                    ));
                }
                n
            }
        };
        for (field, value, want) in [
            ("activation_type", &self.activation_type, "silu"),
            ("block_type", &self.block_type, "llama"),
            ("layer_norm_type", &self.layer_norm_type, "rms"),
        ] {
            if let Some(v) = value
                && v != want
            {
                return Err(unsupported(field, v.clone(), &format!("only \"{want}\" is implemented")));
            }
        }
        let theta = rope_theta(path, self.rope_theta, self.rope_parameters.as_ref())?;
        rope_scaling(path, None, self.rope_parameters.as_ref(), false)?;
        let intermediate = match (self.mlp_hidden_size, self.mlp_ratio) {
            (Some(h), _) => h,
            // Saturating: an absurd ratio is refused by the size check below, not wrapped into a plausible one.
            (None, Some(r)) => r.saturating_mul(self.d_model),
            (None, None) => {
                return Err(ModelError::MissingField {
                    path: path.to_path_buf(),
                    field: "mlp_hidden_size".into(),
                    fix: "add \"mlp_hidden_size\" (12288 for LLaDA-8B)".into(),
                });
            }
        };
        // OLMo sizes the embedding to `embedding_size` (padded vocab) when set; the LM head has the same rows.
        let vocab = self.embedding_size.unwrap_or(self.vocab_size).max(self.vocab_size);
        let cfg = ModelConfig {
            kind: ModelKind::Llada,
            hidden_size: self.d_model,
            intermediate_size: intermediate,
            num_layers: self.n_layers,
            num_heads: self.n_heads,
            num_kv_heads: kv_heads,
            head_dim: self.d_model / self.n_heads.max(1),
            vocab_size: vocab,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: theta,
            max_position_embeddings: self.max_sequence_length,
            bos_token_id: self.bos_token_id,
            eos_token_ids: self.eos_token_id.map(OneOrMany::into_vec).unwrap_or_default(),
            pad_token_id: self.pad_token_id,
            mask_token_id: self.mask_token_id,
            checkpoint_dtype: self.torch_dtype.or(self.dtype),
            synthetic: self.dllm_bench_synthetic,
            tied_lm_head: self.weight_tying == Some(true),
            qkv_bias: false,
            o_bias: false,
            rope_scaling: None,
        };
        cfg.check(path)?;
        Ok(cfg)
    }
}

/// The "this config asks for something the code cannot do" error of one file, for both layouts.
fn unsupported_in(path: &Path) -> impl Fn(&str, String, &str) -> ModelError + '_ {
    move |field, value, fix| ModelError::Unsupported {
        path: path.to_path_buf(),
        field: field.to_string(),
        value,
        fix: fix.to_string(),
    }
}
