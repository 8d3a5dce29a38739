//! Models: config parsing, checkpoint files, chat templates, the shared transformer, and [`LoadedModel`] which ties
//! them together.
//!
//! Generation algorithms live in [`crate::generate`]; synthetic checkpoints in [`crate::synth`].

pub mod attention;
pub mod chat;
pub mod check;
pub mod config;
pub mod cudnn;
pub mod files;
pub mod ops;
pub mod profile;
pub mod transformer;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use schema::grid::ModelKind;

pub use chat::{ChatFrame, ChatTemplate};
pub use config::{Llama3RopeScaling, ModelConfig};
pub use files::ModelFiles;
pub use profile::{Part, PartTotals, Probe};
pub use transformer::{KvCache, LogitsSpan, Positions, Rope, Transformer, TransformerOptions, WeightNames};

/// The fix for a model file that cannot be read as what it must be: a download cut short, or another file.
const REFETCH: &str = "the file is damaged or not the hub's: delete it and download the model again (`dllm-bench \
                       fetch` fetches what is missing)";

/// Errors of loading a model. Messages are lower-case, name the file, and carry the fix when there is one.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("missing {}: {fix}", path.display())]
    MissingFile { path: PathBuf, fix: String },
    #[error("{}: field `{field}` is missing: {fix}", path.display())]
    MissingField { path: PathBuf, field: String, fix: String },
    #[error("{}: unsupported `{field}` = {value}: {fix}", path.display())]
    Unsupported { path: PathBuf, field: String, value: String, fix: String },
    // The causes below are in the message and not the error's source, so that a chain (`{:#}`) says them once.
    #[error("reading {}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    #[error("parsing {}: {error}; fix: {REFETCH}", path.display())]
    Json { path: PathBuf, error: serde_json::Error },
    #[error("loading tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    #[error("{}: special token {what}: {message}", path.display())]
    Special { path: PathBuf, what: &'static str, message: String },
    #[error("loading weights from {}: {error}", path.display())]
    Weights { path: PathBuf, error: candle_core::Error },
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
    /// A chat template that cannot be read or rendered; `message` names the template and carries the fix.
    #[error("{}: chat template: {message}", path.display())]
    ChatTemplate { path: PathBuf, message: String },
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
    /// LLaDA's `<|mdm_mask|>`, Dream's `<|mask|>`; `None` for Llama.
    pub mask: Option<u32>,
    /// Every id that ends a turn or a document (EOS, and `<|eot_id|>` when the tokenizer has it).
    pub stop: Vec<u32>,
    /// Where each id came from, e.g. `bos 128000 (config.json bos_token_id); eos ...`: recorded in the bundle.
    pub sources: String,
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

/// Token strings of each layout's special tokens: (bos, eos, mask, extra stop). The last resort when neither
/// `config.json`, `generation_config.json` nor `tokenizer_config.json` names an id.
fn special_tokens(kind: ModelKind) -> (&'static str, &'static str, Option<&'static str>, Option<&'static str>) {
    match kind {
        ModelKind::Llama => ("<|begin_of_text|>", "<|end_of_text|>", None, Some("<|eot_id|>")),
        ModelKind::Llada => ("<|startoftext|>", "<|endoftext|>", Some("<|mdm_mask|>"), Some("<|eot_id|>")),
        // Dream-v0: BOS = EOS = pad = 151643 (`<|endoftext|>`), the mask 151666.
        ModelKind::Dream => ("<|endoftext|>", "<|endoftext|>", Some("<|mask|>"), Some("<|im_end|>")),
    }
}

/// The optional files beside `config.json` that name special tokens, as read from a snapshot.
#[derive(Debug, Default)]
struct SpecialFiles {
    /// `generation_config.json`: `bos_token_id`, `eos_token_id` (one or a list), `pad_token_id`.
    generation: Option<serde_json::Value>,
    /// `tokenizer_config.json`: `bos_token`, `eos_token`, `pad_token`, `mask_token` (a string, or an object
    /// with `content`).
    tokenizer: Option<serde_json::Value>,
}

impl SpecialFiles {
    fn read(snapshot: &Path) -> Result<Self, ModelError> {
        let read = |name: &str| -> Result<Option<serde_json::Value>, ModelError> {
            let path = snapshot.join(name);
            if !path.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&path).map_err(|error| ModelError::Io { path: path.clone(), error })?;
            serde_json::from_str(&text).map(Some).map_err(|error| ModelError::Json { path, error })
        };
        Ok(Self { generation: read("generation_config.json")?, tokenizer: read("tokenizer_config.json")? })
    }

    /// The first id of `field` in generation_config.json (a number or a list).
    fn generation_id(&self, field: &str) -> Option<u32> {
        let v = self.generation.as_ref()?.get(field)?;
        let first = v.as_array().map_or(Some(v), |a| a.first())?;
        first.as_u64().and_then(|x| u32::try_from(x).ok())
    }

    /// Every id of `field` in generation_config.json.
    fn generation_ids(&self, field: &str) -> Vec<u32> {
        let Some(v) = self.generation.as_ref().and_then(|g| g.get(field)) else { return Vec::new() };
        let all = v.as_array().cloned().unwrap_or_else(|| vec![v.clone()]);
        all.iter().filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok())).collect()
    }

    /// The token string of `field` in tokenizer_config.json.
    fn token(&self, field: &str) -> Option<String> {
        let v = self.tokenizer.as_ref()?.get(field)?;
        v.as_str().or_else(|| v.get("content").and_then(|c| c.as_str())).map(str::to_string)
    }
}

fn special_ids(cfg: &ModelConfig, tok: &tokenizers::Tokenizer, files: &ModelFiles) -> Result<SpecialIds, ModelError> {
    let (path, tokenizer_path) = (&files.config, &files.tokenizer);
    let extra = SpecialFiles::read(&files.snapshot_dir)?;
    let (bos_t, eos_t, mask_t, eot_t) = special_tokens(cfg.kind);
    // One special id, from the first source that names it: config.json, generation_config.json,
    // tokenizer_config.json's token string, the layout's token string in tokenizer.json. An id config.json states
    // must be what the tokenizer maps the layout's token to, or one of the tokens `also` accepts (an Instruct
    // checkpoint's EOS is its end-of-turn token: Meta-Llama-3-8B-Instruct's config.json says 128009, `<|eot_id|>`);
    // another is a config and tokenizer of different models.
    let pick = |what: &'static str,
                from_config: Option<u32>,
                gen_field: Option<&str>,
                tok_field: &str,
                layout: Option<&str>,
                also: Option<&str>|
     -> Result<Option<(u32, String)>, ModelError> {
        let from_layout = layout.and_then(|t| tok.token_to_id(t).map(|id| (id, t)));
        let accepted = |c: u32| also.and_then(|t| tok.token_to_id(t)) == Some(c);
        if let (Some(c), Some((t, name))) = (from_config, from_layout)
            && c != t
            && !accepted(c)
        {
            let or = also.and_then(|a| tok.token_to_id(a).map(|id| format!(" and {a} to {id}"))).unwrap_or_default();
            return Err(ModelError::Special {
                path: path.to_path_buf(),
                what,
                message: format!(
                    "config.json says {c} but the tokenizer maps {name} to {t}{or}; fix: use the model's own \
                     tokenizer files, or its config.json"
                ),
            });
        }
        if let Some(c) = from_config {
            return Ok(Some((c, format!("config.json {what}_token_id"))));
        }
        if let Some(g) = gen_field.and_then(|f| extra.generation_id(f)) {
            return Ok(Some((g, format!("generation_config.json {what}_token_id"))));
        }
        if let Some(t) = extra.token(tok_field) {
            let id = tok.token_to_id(&t).ok_or_else(|| ModelError::Special {
                path: files.snapshot_dir.join("tokenizer_config.json"),
                what,
                message: format!(
                    "{tok_field} is {t:?}, which {} does not have; fix: use the model's own tokenizer files",
                    tokenizer_path.display()
                ),
            })?;
            return Ok(Some((id, format!("tokenizer_config.json {tok_field} {t:?}"))));
        }
        Ok(from_layout.map(|(id, t)| (id, format!("tokenizer.json {t:?} (the {:?} layout's token)", cfg.kind))))
    };
    let need = |what: &'static str, v: Option<(u32, String)>, t: &str| {
        v.ok_or_else(|| ModelError::Special {
            path: path.to_path_buf(),
            what,
            message: format!(
                "neither config.json, generation_config.json, tokenizer_config.json nor the tokenizer {} defines \
                 it (no token {t}); fix: use the model's own tokenizer files, or set the id in config.json",
                tokenizer_path.display()
            ),
        })
    };
    let (bos, bos_src) =
        need("bos", pick("bos", cfg.bos_token_id, Some("bos_token_id"), "bos_token", Some(bos_t), None)?, bos_t)?;
    let (eos, eos_src) = need(
        "eos",
        pick("eos", cfg.eos_token_ids.first().copied(), Some("eos_token_id"), "eos_token", Some(eos_t), eot_t)?,
        eos_t,
    )?;
    let mask = match mask_t {
        Some(t) => Some(need("mask", pick("mask", cfg.mask_token_id, None, "mask_token", Some(t), None)?, t)?),
        None => None,
    };
    let (pad, pad_src) = match pick("pad", cfg.pad_token_id, Some("pad_token_id"), "pad_token", None, None)? {
        Some(p) => p,
        None => (eos, "eos (no pad token given; left padding is masked out of attention)".to_string()),
    };
    let mut stop = cfg.eos_token_ids.clone();
    if !stop.contains(&eos) {
        stop.insert(0, eos);
    }
    for id in extra.generation_ids("eos_token_id") {
        if !stop.contains(&id) {
            stop.push(id);
        }
    }
    // The layout's end-of-text and end-of-turn tokens stop too (an Instruct config.json names only the latter).
    for t in [eos_t].into_iter().chain(eot_t) {
        if let Some(id) = tok.token_to_id(t)
            && !stop.contains(&id)
        {
            stop.push(id);
        }
    }
    let mut sources = format!("bos {bos} ({bos_src}); eos {eos} ({eos_src}); pad {pad} ({pad_src})");
    if let Some((m, src)) = &mask {
        sources.push_str(&format!("; mask {m} ({src})"));
    }
    let mask = mask.map(|m| m.0);
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
    Ok(SpecialIds { bos, eos, pad, mask, stop, sources })
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
        let (config, tokenizer, special) = Self::checked(files, kind)?;
        let weights_err = |error| ModelError::Weights { path: files.snapshot_dir.clone(), error };
        let vb = mmap_weights(&files.weights, dtype, device).map_err(weights_err)?;
        let transformer = Transformer::load(vb, &config, opts).map_err(weights_err)?;
        Ok(Self { kind, config, tokenizer, special, dtype, device: device.clone(), files: files.clone(), transformer })
    }

    /// Everything [`LoadedModel::load`] checks before it reads the weights: `config.json` for `kind`, the
    /// tokenizer, the special tokens, and every tensor's name, shape, dtype and bytes in the safetensors headers
    /// (milliseconds for the 8B checkpoints). A run calls it for every model before the first cell, so that a
    /// broken checkpoint is refused before hours of other models' cells.
    pub fn check_files(files: &ModelFiles, kind: ModelKind) -> Result<(), ModelError> {
        Self::checked(files, kind).map(|_| ())
    }

    /// The config, tokenizer and special tokens of `files`, after the weights' headers were checked against the
    /// config: what [`LoadedModel::load_with`] reads before the weights, and [`LoadedModel::check_files`] checks.
    fn checked(
        files: &ModelFiles,
        kind: ModelKind,
    ) -> Result<(ModelConfig, tokenizers::Tokenizer, SpecialIds), ModelError> {
        let config = ModelConfig::from_file(&files.config, kind)?;
        let tokenizer = tokenizers::Tokenizer::from_file(&files.tokenizer).map_err(|e| ModelError::Tokenizer {
            path: files.tokenizer.clone(),
            message: format!("{e}; fix: {REFETCH}"),
        })?;
        let special = special_ids(&config, &tokenizer, files)?;
        check::check_weights(files, &config)?;
        Ok((config, tokenizer, special))
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
