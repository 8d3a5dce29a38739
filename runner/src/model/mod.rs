//! Models: config parsing, checkpoint files, chat templates, the shared transformer, and [`LoadedModel`] which ties
//! them together.
//!
//! Generation algorithms live in [`crate::generate`]; synthetic checkpoints in [`crate::synth`].

pub mod attention;
pub mod chat;
pub mod check;
pub mod config;
pub mod cudnn;
pub mod encoder;
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
    #[error("missing {}; fix: {fix}", path.display())]
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
    /// A snapshot with PyTorch weights (`found`) and no safetensors: downloading it again fetches the same files.
    #[error(
        "{}: the snapshot holds only PyTorch weights ({found}), and only safetensors checkpoints load (candle \
         memory-maps them; a .bin is a pickle); fix: pin a revision of {repo_id} that has model.safetensors (or its \
         index and shards), or convert the weights to safetensors into a snapshot of their own (transformers: \
         `save_pretrained(dir, safe_serialization=True)`)",
        path.display()
    )]
    NotSafetensors { path: PathBuf, found: String, repo_id: String },
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

/// What [`LoadedModel::check_files`] read of a checkpoint without its weights.
#[derive(Debug)]
pub struct CheckedFiles {
    pub tokenizer: tokenizers::Tokenizer,
    pub special: SpecialIds,
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

/// The fix for a config and a tokenizer of different models: the snapshot's own files (a synthetic snapshot:
/// deleted and written again, [`ModelFiles::redo_fix`]).
fn mismatch_fix(files: &ModelFiles, kind: ModelKind) -> String {
    if files.is_synthetic() {
        files.redo_fix(kind)
    } else {
        format!(
            "use the model's own files: delete the snapshot's file that is not the model's and download it again \
             (`dllm-bench fetch` fetches what is missing, or `huggingface-cli download {}`)",
            files.repo_id
        )
    }
}

/// The fix for a file of `files` that cannot be read as what it must be: [`REFETCH`], or for a synthetic snapshot
/// (nothing to download) [`ModelFiles::redo_fix`].
fn refetch(files: &ModelFiles, kind: ModelKind) -> String {
    if files.is_synthetic() { files.redo_fix(kind) } else { REFETCH.into() }
}

/// Checks that every id of the tokenizer indexes the embedding (`config.json`'s vocabulary), and answers the
/// tokenizer's largest id. A tokenizer smaller than the vocabulary is normal (the embedding is padded: LLaDA has
/// 126349 tokens of 126464 rows, Qwen2.5 and Dream 151665 of 152064); a larger one is another model's, whose ids
/// would index past the embedding mid-run (on CUDA possibly without a clean error).
fn tokenizer_fits(cfg: &ModelConfig, tok: &tokenizers::Tokenizer, files: &ModelFiles) -> Result<u32, ModelError> {
    let vocab = tok.get_vocab(true);
    let Some((token, &max)) = vocab.iter().max_by_key(|&(_, &id)| id) else {
        return Err(ModelError::Tokenizer {
            path: files.tokenizer.clone(),
            message: format!("it has no tokens; fix: {}", refetch(files, cfg.kind)),
        });
    };
    if max as usize >= cfg.vocab_size {
        return Err(ModelError::Corrupt {
            path: files.tokenizer.clone(),
            message: format!(
                "tokenizer.json and config.json are of different models: the tokenizer's ids go up to {max} \
                 ({token:?}) but {} has a vocabulary of {}, so its tokens would index past the embedding; fix: {}",
                files.config.display(),
                cfg.vocab_size,
                mismatch_fix(files, cfg.kind)
            ),
        });
    }
    Ok(max)
}

fn special_ids(cfg: &ModelConfig, tok: &tokenizers::Tokenizer, files: &ModelFiles) -> Result<SpecialIds, ModelError> {
    let (path, tokenizer_path) = (&files.config, &files.tokenizer);
    let max_id = tokenizer_fits(cfg, tok, files)?;
    let extra = SpecialFiles::read(&files.snapshot_dir)?;
    let generation_path = files.snapshot_dir.join("generation_config.json");
    let (bos_t, eos_t, mask_t, eot_t) = special_tokens(cfg.kind);
    // An id that config.json or generation_config.json states must be a token of the tokenizer (and so inside the
    // vocabulary, which the tokenizer fits): otherwise the file and tokenizer.json are of different models, e.g.
    // LLaDA's config (BOS 126080) beside a tokenizer without its added tokens (ids up to 126079).
    let stated = |id: u32, file: &Path, what: &'static str, field: &str| -> Result<(), ModelError> {
        let name = file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let problem = if id as usize >= cfg.vocab_size {
            format!("is outside the vocabulary of {} ({})", cfg.vocab_size, files.config.display())
        } else if tok.id_to_token(id).is_none() {
            format!("is not a token of {} (its ids go up to {max_id})", tokenizer_path.display())
        } else {
            return Ok(());
        };
        Err(ModelError::Special {
            path: file.to_path_buf(),
            what,
            message: format!(
                "{field} {id} {problem}: {name} and tokenizer.json are of different models; fix: {}",
                mismatch_fix(files, cfg.kind)
            ),
        })
    };
    // One special id, from the first source that names it: config.json, generation_config.json,
    // tokenizer_config.json's token string, the layout's token string in tokenizer.json. An id config.json states
    // for a role the layout has a token for must be what the tokenizer maps one of the role's tokens to:
    // tokenizer_config.json's (Dream's `<|beginoftext|>` 151665), the layout's (Dream-v0-Base's config.json says
    // BOS 151643, `<|endoftext|>`, although its tokenizer_config.json names `<|beginoftext|>`), or one `also`
    // accepts (an Instruct checkpoint's EOS is its end-of-turn token: Meta-Llama-3-8B-Instruct's config.json says
    // 128009, `<|eot_id|>`; LLaDA-8B-Instruct's says 126081 while its tokenizer_config.json names `<|eot_id|>`).
    // Another is a config and tokenizer of different models. The pad id is not compared: it only fills
    // positions attention never sees.
    let pick = |what: &'static str,
                from_config: Option<u32>,
                gen_field: Option<&str>,
                tok_field: &str,
                layout: Option<&str>,
                also: Option<&str>|
     -> Result<Option<(u32, String)>, ModelError> {
        let named = extra.token(tok_field);
        let from_layout = layout.and_then(|t| tok.token_to_id(t).map(|id| (id, t)));
        if let Some(c) = from_config {
            stated(c, path, what, &format!("{what}_token_id"))?;
            let mut known: Vec<(&str, u32)> = Vec::new();
            if layout.is_some() {
                for t in named.as_deref().into_iter().chain(layout).chain(also) {
                    if let Some(id) = tok.token_to_id(t)
                        && !known.iter().any(|&(k, _)| k == t)
                    {
                        known.push((t, id));
                    }
                }
            }
            if !known.is_empty() && !known.iter().any(|&(_, id)| id == c) {
                let maps: Vec<String> = known.iter().map(|(t, id)| format!("{t} to {id}")).collect();
                return Err(ModelError::Special {
                    path: path.to_path_buf(),
                    what,
                    message: format!(
                        "config.json says {c} but the tokenizer maps {}; fix: use the model's own tokenizer files, \
                         or its config.json",
                        maps.join(" and ")
                    ),
                });
            }
            return Ok(Some((c, format!("config.json {what}_token_id"))));
        }
        if let Some(g) = gen_field.and_then(|f| extra.generation_id(f)) {
            stated(g, &generation_path, what, &format!("{what}_token_id"))?;
            return Ok(Some((g, format!("generation_config.json {what}_token_id"))));
        }
        if let Some(t) = named {
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
    for &id in &cfg.eos_token_ids {
        stated(id, path, "eos", "eos_token_id")?;
    }
    let mut stop = cfg.eos_token_ids.clone();
    if !stop.contains(&eos) {
        stop.insert(0, eos);
    }
    for id in extra.generation_ids("eos_token_id") {
        stated(id, &generation_path, "eos", "eos_token_id")?;
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
    // Every id is now a token of the tokenizer, which fits the vocabulary: none indexes past the embedding.
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
    /// tokenizer (its ids inside config.json's vocabulary), the special tokens (each id a file states a token of
    /// the tokenizer), and every tensor's name, shape, dtype and bytes in the safetensors headers
    /// (milliseconds for the 8B checkpoints). A run calls it for every model before the first cell, so that a
    /// broken checkpoint is refused before hours of other models' cells. Answers the tokenizer and its special
    /// ids, for the checks a run makes of its prompts before the weights load.
    pub fn check_files(files: &ModelFiles, kind: ModelKind) -> Result<CheckedFiles, ModelError> {
        Self::checked(files, kind).map(|(_, tokenizer, special)| CheckedFiles { tokenizer, special })
    }

    /// The config, tokenizer and special tokens of `files`, after the weights' headers were checked against the
    /// config: what [`LoadedModel::load_with`] reads before the weights, and [`LoadedModel::check_files`] checks.
    fn checked(
        files: &ModelFiles,
        kind: ModelKind,
    ) -> Result<(ModelConfig, tokenizers::Tokenizer, SpecialIds), ModelError> {
        let config = ModelConfig::from_file(&files.config, kind)?;
        let mut tokenizer = tokenizers::Tokenizer::from_file(&files.tokenizer).map_err(|e| ModelError::Tokenizer {
            path: files.tokenizer.clone(),
            message: format!("{e}; fix: {}", refetch(files, kind)),
        })?;
        // The runner pads (left, to each batch's longest prompt) and cuts prompts (to the cell's prompt length)
        // itself: a tokenizer.json's own `padding` or `truncation` would turn the prompts into pad tokens or cut
        // them before the checks that count their tokens. Both are ignored, and said.
        let ignored: Vec<&str> =
            [("padding", tokenizer.get_padding().is_some()), ("truncation", tokenizer.get_truncation().is_some())]
                .into_iter()
                .filter_map(|(field, set)| set.then_some(field))
                .collect();
        if !ignored.is_empty() {
            crate::say_once(format!(
                "note: {} sets {}: ignored (the runner pads and cuts each prompt itself)",
                files.tokenizer.display(),
                ignored.join(" and ")
            ));
            tokenizer.with_padding(None);
            tokenizer.with_truncation(None).map_err(|e| ModelError::Tokenizer {
                path: files.tokenizer.clone(),
                message: format!("cannot turn its truncation off: {e}"),
            })?;
        }
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
