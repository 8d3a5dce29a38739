//! A BERT / RoBERTa encoder (HF's `BertModel` / `RobertaModel` without the pooler), for the quality metrics that
//! embed text (BERTScore, [`crate::quality::bertscore`]).
//!
//! The architecture: token + absolute position + token type (type 0) embeddings and a LayerNorm, then
//! post-LayerNorm transformer layers with biases: bidirectional self-attention, `LayerNorm(x + attention(x))`,
//! then `LayerNorm(h + W2 gelu(W1 h))` with GELU in its erf form. RoBERTa's position ids start at
//! `pad_token_id + 1` (HF's `create_position_ids_from_input_ids` on a sequence without padding), BERT's at 0.
//!
//! Loaded from the safetensors of a [`ModelFiles`] snapshot with the names HF saves, with or without the
//! `roberta.` / `bert.` prefix (a `RobertaModel` save has none, a `RobertaForMaskedLM` one has it); the older
//! `LayerNorm.gamma` / `LayerNorm.beta` names are read too. Only single, unpadded sequences are encoded: no
//! attention mask. What is scored with the hidden states is left to the metrics.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::safetensors::{Load, MmapedSafetensors};
use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear};
use serde::Deserialize;

use super::{ModelError, ModelFiles};

/// The largest shapes accepted before anything is allocated (real encoders are far below them).
const MAX_LAYERS: usize = 1024;
const MAX_HIDDEN: usize = 131_072;
const MAX_VOCAB: usize = 4_000_000;
const MAX_POSITIONS: usize = 1 << 20;
const MAX_TYPE_VOCAB: usize = 1024;

/// The fix for a config.json of a model this encoder cannot run.
const ENCODER_FIX: &str = "use a BERT or RoBERTa checkpoint (e.g. roberta-large, bert-base-uncased) for the \
                           embedding-based metrics";

/// The two encoder families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderType {
    /// `model_type` "roberta": byte-level BPE, `<s> .. </s>`, positions from `pad_token_id + 1`.
    Roberta,
    /// `model_type` "bert": WordPiece, `[CLS] .. [SEP]`, positions from 0.
    Bert,
}

impl EncoderType {
    /// The `model_type` of config.json.
    pub fn name(self) -> &'static str {
        match self {
            EncoderType::Roberta => "roberta",
            EncoderType::Bert => "bert",
        }
    }
}

impl std::fmt::Display for EncoderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `config.json` of a BERT / RoBERTa checkpoint as HF writes it (HF's defaults where a field may be absent).
#[derive(Debug, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    intermediate_size: Option<usize>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    pad_token_id: Option<u32>,
    position_embedding_type: Option<String>,
}

/// The encoder's shape, read from `config.json` (and `tokenizer_config.json`'s `model_max_length`).
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderConfig {
    /// `model_type`.
    pub model_type: EncoderType,
    /// `vocab_size`: rows of the token embedding.
    pub vocab_size: usize,
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_hidden_layers`: the transformer layers (hidden states 0 ..= layers).
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `intermediate_size`: the feed-forward width.
    pub intermediate: usize,
    /// `max_position_embeddings`: rows of the position embedding.
    pub max_positions: usize,
    /// `type_vocab_size`: rows of the token type embedding (type 0 is used).
    pub type_vocab_size: usize,
    /// `layer_norm_eps`.
    pub layer_norm_eps: f64,
    /// `pad_token_id` (RoBERTa's positions start after it).
    pub pad_token_id: u32,
    /// The most tokens a sequence may have, specials included: the positions there are (RoBERTa's minus its
    /// offset of `pad_token_id + 1`, so `max_positions - 2` for every RoBERTa checkpoint; all of BERT's), or
    /// `tokenizer_config.json`'s `model_max_length` where that is smaller (what HF's truncation cuts at).
    pub max_tokens: usize,
}

impl EncoderConfig {
    /// The position id of the first token: `pad_token_id + 1` for RoBERTa, 0 for BERT.
    pub fn position_offset(&self) -> usize {
        match self.model_type {
            EncoderType::Roberta => self.pad_token_id as usize + 1,
            EncoderType::Bert => 0,
        }
    }

    /// The longest sequence the position embedding holds.
    pub fn position_limit(&self) -> usize {
        self.max_positions - self.position_offset()
    }

    /// The parameters the encoder loads (embeddings and transformer layers; no pooler, no masked-LM head).
    pub fn parameter_count(&self) -> u64 {
        let (h, i) = (self.hidden as u64, self.intermediate as u64);
        let embeddings = (self.vocab_size + self.max_positions + self.type_vocab_size) as u64 * h + 2 * h;
        // Q, K, V and the attention output (weights and biases), the feed-forward pair, two LayerNorms.
        let layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h;
        embeddings + self.layers as u64 * layer
    }

    /// Reads and checks `config.json` at `path`.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|error| ModelError::Io { path: path.into(), error })?;
        Self::from_json_str(&text, path)
    }

    /// Parses and checks the text of `config.json` (`path` names it in errors).
    pub fn from_json_str(text: &str, path: &Path) -> Result<Self, ModelError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|error| ModelError::Json { path: path.into(), error })?;
        let unsupported = |field: &str, value: String, fix: String| ModelError::Unsupported {
            path: path.into(),
            field: field.into(),
            value,
            fix,
        };
        let model_type = match raw.model_type.as_deref() {
            Some("roberta") => EncoderType::Roberta,
            Some("bert") => EncoderType::Bert,
            Some(other) => {
                return Err(unsupported(
                    "model_type",
                    format!("{other:?}"),
                    format!("only \"roberta\" and \"bert\" encoders can be loaded; fix: {ENCODER_FIX}"),
                ));
            }
            None => {
                return Err(ModelError::MissingField {
                    path: path.into(),
                    field: "model_type".into(),
                    fix: format!("it must say \"roberta\" or \"bert\"; fix: {ENCODER_FIX}"),
                });
            }
        };
        let need = |field: &str, v: Option<usize>| {
            v.ok_or_else(|| ModelError::MissingField {
                path: path.into(),
                field: field.into(),
                fix: format!(
                    "a {} config.json states it; fix: use the checkpoint's own config.json",
                    model_type.name()
                ),
            })
        };
        let vocab_size = need("vocab_size", raw.vocab_size)?;
        let hidden = need("hidden_size", raw.hidden_size)?;
        let layers = need("num_hidden_layers", raw.num_hidden_layers)?;
        let heads = need("num_attention_heads", raw.num_attention_heads)?;
        let intermediate = need("intermediate_size", raw.intermediate_size)?;
        let max_positions = need("max_position_embeddings", raw.max_position_embeddings)?;
        // HF's defaults (BertConfig, RobertaConfig) for the fields a config.json may leave out.
        let type_vocab_size = raw.type_vocab_size.unwrap_or(2);
        let layer_norm_eps = raw.layer_norm_eps.unwrap_or(1e-12);
        let pad_token_id = raw.pad_token_id.unwrap_or(match model_type {
            EncoderType::Roberta => 1,
            EncoderType::Bert => 0,
        });
        let act = raw.hidden_act.unwrap_or_else(|| "gelu".into());
        if act != "gelu" {
            return Err(unsupported(
                "hidden_act",
                format!("{act:?}"),
                format!("only \"gelu\" (the erf form, as BERT and RoBERTa use) is implemented; fix: {ENCODER_FIX}"),
            ));
        }
        if let Some(p) = raw.position_embedding_type.filter(|p| p != "absolute") {
            return Err(unsupported(
                "position_embedding_type",
                format!("{p:?}"),
                format!("only \"absolute\" position embeddings are implemented; fix: {ENCODER_FIX}"),
            ));
        }
        let bound = |field: &str, v: usize, lo: usize, hi: usize| {
            if v < lo || v > hi {
                Err(unsupported(field, v.to_string(), format!("it must be {lo} to {hi}; fix: {ENCODER_FIX}")))
            } else {
                Ok(())
            }
        };
        bound("num_hidden_layers", layers, 1, MAX_LAYERS)?;
        bound("hidden_size", hidden, 1, MAX_HIDDEN)?;
        bound("num_attention_heads", heads, 1, hidden)?;
        bound("intermediate_size", intermediate, 1, 8 * hidden)?;
        bound("vocab_size", vocab_size, 1, MAX_VOCAB)?;
        bound("type_vocab_size", type_vocab_size, 1, MAX_TYPE_VOCAB)?;
        bound("max_position_embeddings", max_positions, 1, MAX_POSITIONS)?;
        if !hidden.is_multiple_of(heads) {
            return Err(unsupported(
                "num_attention_heads",
                heads.to_string(),
                format!("hidden_size {hidden} is not a multiple of it; fix: use the checkpoint's own config.json"),
            ));
        }
        if !(layer_norm_eps.is_finite() && layer_norm_eps > 0.0) {
            return Err(unsupported(
                "layer_norm_eps",
                layer_norm_eps.to_string(),
                "it must be a small positive number (BERT: 1e-12, RoBERTa: 1e-5); fix: use the checkpoint's own \
                 config.json"
                    .into(),
            ));
        }
        let mut cfg = EncoderConfig {
            model_type,
            vocab_size,
            hidden,
            layers,
            heads,
            intermediate,
            max_positions,
            type_vocab_size,
            layer_norm_eps,
            pad_token_id,
            max_tokens: 0,
        };
        // A sequence needs its two special tokens and one more.
        if cfg.position_offset() + 3 > max_positions {
            return Err(unsupported(
                "max_position_embeddings",
                max_positions.to_string(),
                format!(
                    "it leaves no room for a sequence after the position offset of {} (pad_token_id + 1); fix: use \
                     the checkpoint's own config.json",
                    cfg.position_offset()
                ),
            ));
        }
        cfg.max_tokens = cfg.position_limit();
        Ok(cfg)
    }
}

/// `model_max_length` of the snapshot's `tokenizer_config.json`, when it has one that is a length (HF writes
/// 1e30 for "none").
fn model_max_length(snapshot: &Path) -> Result<Option<usize>, ModelError> {
    let path = snapshot.join("tokenizer_config.json");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|error| ModelError::Json { path, error })?;
    Ok(json.get("model_max_length").and_then(|v| v.as_f64()).filter(|v| *v >= 3.0 && *v < 1e15).map(|v| v as usize))
}

/// An encoder loaded on a device.
#[derive(Debug)]
pub struct Encoder {
    /// The checkpoint's tokenizer, with its own padding off and truncation at [`EncoderConfig::max_tokens`]
    /// (special tokens counted, the text's tokens cut at the end: HF's `truncation=True, max_length=...`).
    pub tokenizer: tokenizers::Tokenizer,
    /// The shape.
    pub config: EncoderConfig,
    /// The ids the tokenizer's post-processor puts around a text (`<s>`, `</s>` / `[CLS]`, `[SEP]`): what an
    /// empty text encodes to.
    pub special_ids: Vec<u32>,
    /// Where the weights are.
    pub device: Device,
    /// The weights' dtype (hidden states are answered in f32).
    pub dtype: DType,
    /// The files it was loaded from.
    pub files: ModelFiles,
    embeddings: Embeddings,
    layers: Vec<Layer>,
}

#[derive(Debug)]
struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Tensor,
    norm: LayerNorm,
}

#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

/// The safetensors files of a snapshot, memory-mapped while the tensors are copied out of them.
struct Weights<'a> {
    files: &'a ModelFiles,
    maps: Vec<(PathBuf, MmapedSafetensors)>,
    names: HashSet<String>,
    prefix: &'static str,
    device: Device,
    dtype: DType,
}

impl Weights<'_> {
    /// Where a missing or wrong tensor is reported: the weights file, or the snapshot when there are shards.
    fn where_(&self) -> PathBuf {
        match self.files.weights.as_slice() {
            [one] => one.clone(),
            _ => self.files.snapshot_dir.clone(),
        }
    }

    fn refetch(&self) -> String {
        if self.files.is_synthetic() {
            "write the synthetic encoder again (delete the snapshot first)".into()
        } else {
            format!(
                "use the checkpoint's own weights: download {} again (`huggingface-cli download {}`)",
                self.files.repo_id, self.files.repo_id
            )
        }
    }

    /// The tensor `name` (after the prefix), of `shape`, in the encoder's dtype on its device. `alt`: an older
    /// name of the same tensor.
    fn get(&self, name: &str, alt: Option<&str>, shape: &[usize]) -> Result<Tensor, ModelError> {
        let full = format!("{}{name}", self.prefix);
        let found = std::iter::once(full.clone())
            .chain(alt.map(|a| format!("{}{a}", self.prefix)))
            .find(|n| self.names.contains(n))
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.where_(),
                tensor: full.clone(),
                fix: format!(
                    "the checkpoint is not a complete {} encoder of config.json's shape; fix: {}",
                    self.files.repo_id,
                    self.refetch()
                ),
            })?;
        for (path, st) in &self.maps {
            let Ok(view) = st.get(&found) else { continue };
            if view.shape() != shape {
                return Err(ModelError::TensorShape {
                    path: path.clone(),
                    tensor: found,
                    message: format!(
                        "has shape {:?} but {} implies {shape:?}; fix: {}",
                        view.shape(),
                        self.files.config.display(),
                        self.refetch()
                    ),
                });
            }
            let dtype = format!("{:?}", view.dtype());
            if !matches!(dtype.as_str(), "F32" | "F16" | "BF16" | "F64") {
                return Err(ModelError::TensorDtype { path: path.clone(), tensor: found, dtype });
            }
            let weights_err = |error| ModelError::Weights { path: path.clone(), error };
            return view.load(&self.device).and_then(|t| t.to_dtype(self.dtype)).map_err(weights_err);
        }
        // The names were read from these files.
        Err(ModelError::Corrupt { path: self.where_(), message: format!("tensor `{found}` vanished from the files") })
    }

    fn linear(&self, name: &str, out: usize, inp: usize) -> Result<Linear, ModelError> {
        let w = self.get(&format!("{name}.weight"), None, &[out, inp])?;
        let b = self.get(&format!("{name}.bias"), None, &[out])?;
        Ok(Linear::new(w, Some(b)))
    }

    fn norm(&self, name: &str, hidden: usize, eps: f64) -> Result<LayerNorm, ModelError> {
        let w = self.get(&format!("{name}.weight"), Some(&format!("{name}.gamma")), &[hidden])?;
        let b = self.get(&format!("{name}.bias"), Some(&format!("{name}.beta")), &[hidden])?;
        Ok(LayerNorm::new(w, b, eps))
    }
}

/// Memory-maps one safetensors file.
#[allow(unsafe_code)]
fn mmap(path: &Path) -> candle_core::Result<MmapedSafetensors> {
    // SAFETY: the file is mapped read-only and only while the tensors are copied out of it ([`Encoder::load`]);
    // it is a snapshot file of the hf-hub cache (a content-addressed blob), which nothing rewrites in place.
    unsafe { MmapedSafetensors::new(path) }
}

impl Encoder {
    /// Reads and checks `config.json` and `tokenizer.json` (its ids inside the vocabulary, its post-processor
    /// adding the special tokens), without the weights: called before anything is measured.
    pub fn check_files(files: &ModelFiles) -> Result<EncoderConfig> {
        Self::checked(files).map(|(cfg, _, _)| cfg)
    }

    fn checked(files: &ModelFiles) -> Result<(EncoderConfig, tokenizers::Tokenizer, Vec<u32>)> {
        let mut cfg = EncoderConfig::from_file(&files.config)?;
        if let Some(m) = model_max_length(&files.snapshot_dir)? {
            cfg.max_tokens = cfg.max_tokens.min(m);
        }
        let tok_err = |message: String| ModelError::Tokenizer { path: files.tokenizer.clone(), message };
        let mut tok = tokenizers::Tokenizer::from_file(&files.tokenizer)
            .map_err(|e| tok_err(format!("{e}; fix: use the checkpoint's own tokenizer.json")))?;
        let vocab = tok.get_vocab(true);
        if let Some((token, &max)) = vocab.iter().max_by_key(|&(_, &id)| id)
            && max as usize >= cfg.vocab_size
        {
            return Err(tok_err(format!(
                "its ids go up to {max} ({token:?}) but {} has a vocabulary of {}: the two files are of different \
                 models; fix: use the checkpoint's own tokenizer.json and config.json",
                files.config.display(),
                cfg.vocab_size
            ))
            .into());
        }
        tok.with_padding(None);
        let truncation = tokenizers::TruncationParams { max_length: cfg.max_tokens, ..Default::default() };
        tok.with_truncation(Some(truncation)).map_err(|e| tok_err(format!("cannot set its truncation: {e}")))?;
        let specials =
            tok.encode("", true).map_err(|e| tok_err(format!("cannot encode an empty text: {e}")))?.get_ids().to_vec();
        if specials.len() != 2 {
            return Err(tok_err(format!(
                "an empty text encodes to {specials:?}, not the two special tokens a {} encoder puts around a text \
                 (its post-processor); fix: use the checkpoint's own tokenizer.json",
                cfg.model_type.name()
            ))
            .into());
        }
        Ok((cfg, tok, specials))
    }

    /// Loads the encoder of `files` on `device` in `dtype` (f32, bf16 or f16). A tensor that is missing or of
    /// another shape than `config.json` implies is an error naming it and its file.
    pub fn load(files: &ModelFiles, device: &Device, dtype: DType) -> Result<Encoder> {
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
            return Err(ModelError::Dtype { dtype }.into());
        }
        let (config, tokenizer, special_ids) = Self::checked(files)?;
        let mut maps = Vec::new();
        let mut names = HashSet::new();
        for path in &files.weights {
            let st = mmap(path).map_err(|error| ModelError::Weights { path: path.clone(), error })?;
            names.extend(st.tensors().into_iter().map(|(n, _)| n));
            maps.push((path.clone(), st));
        }
        let prefix = match config.model_type {
            EncoderType::Roberta => "roberta.",
            EncoderType::Bert => "bert.",
        };
        let prefix = if names.contains(&format!("{prefix}embeddings.word_embeddings.weight")) { prefix } else { "" };
        let w = Weights { files, maps, names, prefix, device: device.clone(), dtype };
        let (h, eps) = (config.hidden, config.layer_norm_eps);
        let embeddings = Embeddings {
            word: Embedding::new(w.get("embeddings.word_embeddings.weight", None, &[config.vocab_size, h])?, h),
            position: Embedding::new(
                w.get("embeddings.position_embeddings.weight", None, &[config.max_positions, h])?,
                h,
            ),
            token_type: w.get("embeddings.token_type_embeddings.weight", None, &[config.type_vocab_size, h])?,
            norm: w.norm("embeddings.LayerNorm", h, eps)?,
        };
        let layers = (0..config.layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}");
                Ok(Layer {
                    query: w.linear(&format!("{p}.attention.self.query"), h, h)?,
                    key: w.linear(&format!("{p}.attention.self.key"), h, h)?,
                    value: w.linear(&format!("{p}.attention.self.value"), h, h)?,
                    attn_out: w.linear(&format!("{p}.attention.output.dense"), h, h)?,
                    attn_norm: w.norm(&format!("{p}.attention.output.LayerNorm"), h, eps)?,
                    intermediate: w.linear(&format!("{p}.intermediate.dense"), config.intermediate, h)?,
                    output: w.linear(&format!("{p}.output.dense"), h, config.intermediate)?,
                    out_norm: w.norm(&format!("{p}.output.LayerNorm"), h, eps)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Encoder {
            tokenizer,
            config,
            special_ids,
            device: device.clone(),
            dtype,
            files: files.clone(),
            embeddings,
            layers,
        })
    }

    /// The hidden states after `layer` transformer layers for the token ids `ids` (one sequence, specials
    /// included): layer 0 is the embeddings' output, as HF's `hidden_states[layer]`. Shape `(len, hidden)`, f32.
    pub fn hidden_states(&self, ids: &[u32], layer: usize) -> Result<Tensor> {
        let cfg = &self.config;
        if layer > cfg.layers {
            anyhow::bail!(
                "layer {layer} of {}: the encoder has {} layers (hidden states 0 to {}); fix: choose a layer of 0 \
                 to {}",
                self.files.repo_id,
                cfg.layers,
                cfg.layers,
                cfg.layers
            );
        }
        let t = ids.len();
        if t == 0 || t > cfg.position_limit() {
            anyhow::bail!(
                "{t} tokens for {}, which encodes 1 to {} (its position embeddings); fix: truncate the sequence",
                self.files.repo_id,
                cfg.position_limit()
            );
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            anyhow::bail!("token id {bad} is outside the vocabulary of {} ({})", self.files.repo_id, cfg.vocab_size);
        }
        let input = Tensor::from_slice(ids, (1, t), &self.device)?;
        let offset = cfg.position_offset() as u32;
        let positions = Tensor::arange(offset, offset + t as u32, &self.device)?.unsqueeze(0)?;
        let e = &self.embeddings;
        let x = e.word.forward(&input)?.add(&e.position.forward(&positions)?)?;
        let x = x.broadcast_add(&e.token_type.narrow(0, 0, 1)?)?;
        let mut x = e.norm.forward(&x)?;
        for l in &self.layers[..layer] {
            x = self.layer_forward(l, &x).with_context(|| format!("encoder layer of {}", self.files.repo_id))?;
        }
        Ok(x.squeeze(0)?.to_dtype(DType::F32)?)
    }

    /// One post-LayerNorm transformer layer over `(1, len, hidden)`.
    fn layer_forward(&self, l: &Layer, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let heads = self.config.heads;
        let d = h / heads;
        let split = |y: Tensor| y.reshape((b, t, heads, d))?.transpose(1, 2)?.contiguous();
        let q = split(l.query.forward(x)?)?;
        let k = split(l.key.forward(x)?)?;
        let v = split(l.value.forward(x)?)?;
        let scores = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?;
        // The softmax in f32 (bf16 and f16 weights too).
        let probs = candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?.to_dtype(x.dtype())?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
        let a = l.attn_norm.forward(&(l.attn_out.forward(&ctx)? + x)?)?;
        let f = l.output.forward(&l.intermediate.forward(&a)?.gelu_erf()?)?;
        l.out_norm.forward(&(f + a)?)
    }

    /// The parameters loaded ([`EncoderConfig::parameter_count`]).
    pub fn parameter_count(&self) -> u64 {
        self.config.parameter_count()
    }

    /// [`Encoder::hidden_states`] with each row scaled to unit L2 norm (BERTScore's embeddings).
    pub fn normalized_states(&self, ids: &[u32], layer: usize) -> Result<Tensor> {
        let x = self.hidden_states(ids, layer)?;
        Ok(x.broadcast_div(&x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROBERTA: &str = r#"{"model_type": "roberta", "vocab_size": 50265, "hidden_size": 1024,
        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096, "hidden_act": "gelu",
        "max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-05, "pad_token_id": 1}"#;

    fn parse(text: &str) -> Result<EncoderConfig, ModelError> {
        EncoderConfig::from_json_str(text, Path::new("/snap/config.json"))
    }

    #[test]
    fn roberta_large_s_config_reads_with_its_position_offset() {
        let c = parse(ROBERTA).expect("roberta-large");
        assert_eq!((c.model_type, c.layers, c.hidden, c.heads), (EncoderType::Roberta, 24, 1024, 16));
        assert_eq!((c.position_offset(), c.max_tokens), (2, 512));
        let bert = ROBERTA.replace("\"roberta\"", "\"bert\"").replace("514", "512");
        let c = parse(&bert).expect("bert");
        assert_eq!((c.position_offset(), c.max_tokens), (0, 512));
    }

    #[test]
    fn configs_the_encoder_cannot_run_are_refused_with_the_file_and_field_named() {
        let cases = [
            ("\"roberta\"", "\"gpt2\"", "model_type"),
            ("\"gelu\"", "\"relu\"", "hidden_act"),
            ("\"num_attention_heads\": 16", "\"num_attention_heads\": 15", "num_attention_heads"),
            ("\"intermediate_size\": 4096", "\"intermediate_size\": 9000", "intermediate_size"),
            ("\"num_hidden_layers\": 24", "\"num_hidden_layers\": 5000", "num_hidden_layers"),
            ("\"vocab_size\": 50265", "\"vocab_size\": 5000000", "vocab_size"),
            ("\"vocab_size\": 50265,", "", "vocab_size"),
            ("\"max_position_embeddings\": 514", "\"max_position_embeddings\": 3", "max_position_embeddings"),
        ];
        for (from, to, field) in cases {
            let text = ROBERTA.replacen(from, to, 1);
            assert_ne!(text, ROBERTA, "{from}");
            let err = parse(&text).expect_err(field).to_string();
            assert!(err.contains("/snap/config.json") && err.contains(field) && err.contains("fix"), "{err}");
        }
    }
}
