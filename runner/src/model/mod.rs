//! Models: config parsing, checkpoint files, the shared transformer, and [`LoadedModel`] which ties them together.
//!
//! Generation algorithms live in [`crate::generate`]; synthetic checkpoints in [`crate::synth`].

pub mod check;
pub mod config;
pub mod files;
pub mod transformer;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use schema::grid::ModelKind;

pub use config::{Llama3RopeScaling, ModelConfig};
pub use files::ModelFiles;
pub use transformer::{KvCache, LogitsSpan, Positions, Rope, Transformer, TransformerOptions, WeightNames};

/// Errors of loading a model. Messages are lower-case, name the file, and carry the fix when there is one.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("missing {}: {fix}", path.display())]
    MissingFile { path: PathBuf, fix: String },
    #[error("{}: field `{field}` is missing: {fix}", path.display())]
    MissingField { path: PathBuf, field: String, fix: String },
    #[error("{}: unsupported `{field}` = {value}: {fix}", path.display())]
    Unsupported { path: PathBuf, field: String, value: String, fix: String },
    #[error("reading {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("parsing {}: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("loading tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    #[error("{}: special token {what}: {message}", path.display())]
    Special { path: PathBuf, what: &'static str, message: String },
    #[error("loading weights from {}: {source}", path.display())]
    Weights { path: PathBuf, source: candle_core::Error },
    #[error("{}: tensor `{tensor}` is missing: {fix}", path.display())]
    MissingTensor { path: PathBuf, tensor: String, fix: String },
    /// `message` says the shape found and the shape `config.json` implies.
    #[error("{}: tensor `{tensor}` {message}", path.display())]
    TensorShape { path: PathBuf, tensor: String, message: String },
    #[error(
        "{}: tensor `{tensor}` is stored as {dtype}; fix: only float checkpoints (F32, BF16, F16) can be loaded: \
         use the original (unquantized) checkpoint",
        path.display()
    )]
    TensorDtype { path: PathBuf, tensor: String, dtype: String },
    #[error("{}: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("unsupported dtype {dtype:?}: use f32, bf16 or f16")]
    Dtype { dtype: DType },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// Special token ids of a loaded model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: u32,
    /// The primary end-of-sequence id.
    pub eos: u32,
    /// Left-padding id (attention never sees it; LLaDA: EOS, as the reference; Llama-3 has none: EOS).
    pub pad: u32,
    /// LLaDA's `<|mdm_mask|>`; `None` for Llama.
    pub mask: Option<u32>,
    /// Every id that ends a turn or a document (EOS, and `<|eot_id|>` when the tokenizer has it).
    pub stop: Vec<u32>,
}

/// A checkpoint loaded on a device: config, tokenizer, special ids and the transformer.
#[derive(Debug)]
pub struct LoadedModel {
    pub kind: ModelKind,
    pub config: ModelConfig,
    pub tokenizer: tokenizers::Tokenizer,
    pub special: SpecialIds,
    pub dtype: DType,
    pub device: Device,
    pub files: ModelFiles,
    pub transformer: Transformer,
}

/// Token strings of each layout's special tokens: (bos, eos, mask, extra stop).
fn special_tokens(kind: ModelKind) -> (&'static str, &'static str, Option<&'static str>, Option<&'static str>) {
    match kind {
        ModelKind::Llama => ("<|begin_of_text|>", "<|end_of_text|>", None, Some("<|eot_id|>")),
        ModelKind::Llada => ("<|startoftext|>", "<|endoftext|>", Some("<|mdm_mask|>"), Some("<|eot_id|>")),
    }
}

/// Takes the id from the config when given, else from the tokenizer; both present and different is an error.
fn resolve(
    path: &Path,
    what: &'static str,
    from_config: Option<u32>,
    token: Option<&str>,
    tok: &tokenizers::Tokenizer,
) -> Result<Option<u32>, ModelError> {
    let from_tok = token.and_then(|t| tok.token_to_id(t));
    match (from_config, from_tok) {
        (Some(c), Some(t)) if c != t => Err(ModelError::Special {
            path: path.to_path_buf(),
            what,
            message: format!("config.json says {c} but the tokenizer maps {} to {t}", token.unwrap_or_default()),
        }),
        (Some(c), _) => Ok(Some(c)),
        (None, t) => Ok(t),
    }
}

fn special_ids(
    cfg: &ModelConfig,
    tok: &tokenizers::Tokenizer,
    path: &Path,
    tokenizer_path: &Path,
) -> Result<SpecialIds, ModelError> {
    let (bos_t, eos_t, mask_t, eot_t) = special_tokens(cfg.kind);
    let need = |what: &'static str, v: Option<u32>, t: &str| {
        v.ok_or_else(|| ModelError::Special {
            path: path.to_path_buf(),
            what,
            message: format!(
                "neither config.json nor the tokenizer {} defines it (no token {t}); fix: use the model's own \
                 tokenizer.json, or set the id in config.json",
                tokenizer_path.display()
            ),
        })
    };
    let bos = need("bos", resolve(path, "bos", cfg.bos_token_id, Some(bos_t), tok)?, bos_t)?;
    let eos = need("eos", resolve(path, "eos", cfg.eos_token_ids.first().copied(), Some(eos_t), tok)?, eos_t)?;
    let mask = match mask_t {
        Some(t) => Some(need("mask", resolve(path, "mask", cfg.mask_token_id, Some(t), tok)?, t)?),
        None => None,
    };
    let pad = cfg.pad_token_id.unwrap_or(eos);
    let mut stop = cfg.eos_token_ids.clone();
    if !stop.contains(&eos) {
        stop.insert(0, eos);
    }
    if let Some(eot) = eot_t.and_then(|t| tok.token_to_id(t))
        && !stop.contains(&eot)
    {
        stop.push(eot);
    }
    let all = [Some(bos), Some(eos), Some(pad), mask];
    if let Some(id) = all.iter().flatten().chain(&stop).find(|&&id| id as usize >= cfg.vocab_size) {
        return Err(ModelError::Special {
            path: path.to_path_buf(),
            what: "id",
            message: format!("id {id} is outside the vocabulary of {}", cfg.vocab_size),
        });
    }
    if Some(pad) == mask {
        return Err(ModelError::Special {
            path: path.to_path_buf(),
            what: "pad",
            message: format!("the pad id equals the mask id {pad}: set pad_token_id to another id (LLaDA uses EOS)"),
        });
    }
    Ok(SpecialIds { bos, eos, pad, mask, stop })
}

/// Memory-maps the safetensors files into a `VarBuilder` of `dtype` on `device`.
#[allow(unsafe_code)]
fn mmap_weights(paths: &[PathBuf], dtype: DType, device: &Device) -> candle_core::Result<VarBuilder<'static>> {
    // SAFETY: the files are mapped read-only; they must not be modified while the model lives. They are snapshot
    // files of the hf-hub cache (content-addressed blobs), which nothing rewrites in place.
    unsafe { VarBuilder::from_mmaped_safetensors(paths, dtype, device) }
}

impl LoadedModel {
    /// Loads `files` as `kind` on `device` in `dtype` (f32, bf16 or f16).
    pub fn load(files: &ModelFiles, kind: ModelKind, device: &Device, dtype: DType) -> Result<Self, ModelError> {
        Self::load_with(files, kind, device, dtype, TransformerOptions::default())
    }

    pub fn load_with(
        files: &ModelFiles,
        kind: ModelKind,
        device: &Device,
        dtype: DType,
        opts: TransformerOptions,
    ) -> Result<Self, ModelError> {
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
            return Err(ModelError::Dtype { dtype });
        }
        let config = ModelConfig::from_file(&files.config, kind)?;
        let tokenizer = tokenizers::Tokenizer::from_file(&files.tokenizer)
            .map_err(|e| ModelError::Tokenizer { path: files.tokenizer.clone(), message: e.to_string() })?;
        let special = special_ids(&config, &tokenizer, &files.config, &files.tokenizer)?;
        check::check_weights(files, &config)?;
        let weights_err = |source| ModelError::Weights { path: files.snapshot_dir.clone(), source };
        let vb = mmap_weights(&files.weights, dtype, device).map_err(weights_err)?;
        let transformer = Transformer::load(vb, &config, opts).map_err(weights_err)?;
        Ok(Self { kind, config, tokenizer, special, dtype, device: device.clone(), files: files.clone(), transformer })
    }

    pub fn parameter_count(&self) -> u64 {
        self.config.parameter_count()
    }

    /// Bytes the weights take in the loaded dtype.
    pub fn weights_bytes(&self) -> u64 {
        self.parameter_count() * self.dtype.size_in_bytes() as u64
    }

    pub fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    /// Full forward without cache over `(batch, len)` ids at positions `0..len`, all logits `(batch, len, vocab)`.
    pub fn forward_full(&self, ids: &Tensor, key_valid: Option<&[Vec<bool>]>) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let rope = self.transformer.rope(&Positions::Range { start: 0, len: t })?;
        let bias = self.transformer.attention_bias(key_valid, b, 0, t, t)?;
        self.transformer.forward(ids, &rope, bias.as_ref(), None, LogitsSpan::All)
    }
}
