//! Synthetic checkpoints: random weights with the real tensor names and config fields, in the hf-hub cache
//! layout, so the same loader reads them and the real models.
//!
//! [`write_synthetic`] writes `models--{org}--{name}/` with `blobs/<sha256>` files, `snapshots/<commit>/` relative
//! symlinks to them (plain copies where symlinks are unavailable) and `refs/main`, like the real cache. The
//! commit is derived from the resolved spec (and the generator's format version), so the same spec maps to the
//! same folder: a complete folder is reused, not rewritten. `config.json` uses each model's own field names and
//! carries `"dllm_bench_synthetic": {...}` so a synthetic folder is recognisable.
//!
//! Weights are N(0, std) with std = max(0.02, 1/sqrt(hidden)) (0.02 at the real size, a little larger on tiny
//! models so their logits are not flat), norm weights 1 + N(0, 0.05); never all zeros.
//!
//! With `chat_template` the checkpoint is an Instruct one: its tokenizer also has the chat header tokens
//! (`<|start_header_id|>`, `<|end_header_id|>`) and `tokenizer_config.json` carries the kind's chat template
//! ([`LLAMA3_CHAT_TEMPLATE`], [`LLADA_CHAT_TEMPLATE`]) with `bos_token` and `eos_token`, so the runner's chat path
//! is tested without a network.

/// The project's PRNG, shared with the schema crate's bootstrap.
pub use metrics::rng;
pub mod encoder;
mod progress;
mod tokenizer;
mod weights;

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use schema::grid::ModelKind;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use progress::Meter;
pub use progress::{PROGRESS_MIN_BYTES, Report};
pub use schema::grid::SynthPreset as Preset;
use schema::grid::{Precision, SynthLayout, SyntheticWeights};
pub use tokenizer::build_tokenizer;
use weights::{HashWriter, Init, TensorSpec, dtype_size, safetensors_len, torch_name, write_safetensors};

use crate::InputError;
use crate::model::files::repo_dir;
use crate::model::{ModelConfig, ModelError, WeightNames};

/// Bumped whenever the generator's output changes for the same spec (it is part of the commit hash).
pub const SYNTH_FORMAT: u32 = 1;

/// What synthetic checkpoint to write (the `[models.synthetic]` table of a grid config).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynthSpec {
    pub preset: Preset,
    pub seed: u64,
    /// Weight dtype; default f32 for tiny/small, bf16 for real.
    #[serde(default)]
    pub dtype: Option<Precision>,
    /// Number of safetensors shards (1: a single `model.safetensors`); default 1, real: 4 (Llama) / 6 (LLaDA).
    #[serde(default)]
    pub shards: Option<usize>,
    #[serde(default)]
    pub layers: Option<usize>,
    #[serde(default)]
    pub hidden: Option<usize>,
    #[serde(default)]
    pub heads: Option<usize>,
    #[serde(default)]
    pub kv_heads: Option<usize>,
    #[serde(default)]
    pub intermediate: Option<usize>,
    #[serde(default)]
    pub vocab: Option<usize>,
    /// The `llama`-kind checkpoint layout imitated (default: Meta-Llama-3's).
    #[serde(default)]
    pub layout: Option<SynthLayout>,
    /// Write the kind's Instruct chat template into `tokenizer_config.json` (and its tokens into the tokenizer).
    #[serde(default)]
    pub chat_template: bool,
}

impl SynthSpec {
    pub fn new(preset: Preset, seed: u64) -> Self {
        Self {
            preset,
            seed,
            dtype: None,
            shards: None,
            layers: None,
            hidden: None,
            heads: None,
            kv_heads: None,
            intermediate: None,
            vocab: None,
            layout: None,
            chat_template: false,
        }
    }

    /// The spec of a grid config's `[models.synthetic]` table; the weights' dtype defaults to the run's, the chat
    /// template to `chat` (the config's `prompts.chat_template`).
    pub fn from_config(w: &SyntheticWeights, run_dtype: Precision, chat: bool) -> Self {
        Self {
            dtype: Some(w.dtype.unwrap_or(run_dtype)),
            shards: w.shards.map(|n| n as usize),
            layers: w.layers.map(|n| n as usize),
            hidden: w.hidden.map(|n| n as usize),
            layout: w.layout,
            chat_template: w.chat_template.unwrap_or(chat),
            ..Self::new(w.preset, w.seed)
        }
    }

    /// The spec with every default filled in for `kind`.
    pub fn resolve(&self, kind: ModelKind) -> Resolved {
        // Dream has the Qwen2 layout (GQA): Llama's small shapes, Dream-v0-7B's real ones.
        let llama = kind != ModelKind::Llada;
        // (hidden, layers, heads, kv_heads, intermediate, vocab, max_positions)
        let (h, l, nh, nkv, i, v, max) = match (self.preset, llama) {
            (Preset::Real, true) if kind == ModelKind::Dream => (3584, 28, 28, 4, 18944, 152_064, 131_072),
            (Preset::Tiny, true) => (64, 2, 4, 2, 224, 512, 1024),
            (Preset::Tiny, false) => (64, 2, 4, 4, 192, 512, 1024),
            (Preset::Small, true) => (256, 4, 8, 2, 896, 1024, 2048),
            (Preset::Small, false) => (256, 4, 8, 8, 768, 1024, 2048),
            (Preset::Real, true) => (4096, 32, 32, 8, 14336, 128_256, 8192),
            (Preset::Real, false) => (4096, 32, 32, 32, 12288, 126_464, 4096),
        };
        let real = self.preset == Preset::Real;
        let heads = self.heads.unwrap_or(nh);
        Resolved {
            kind,
            preset: self.preset,
            seed: self.seed,
            dtype: self.dtype.unwrap_or(if real { Precision::Bf16 } else { Precision::F32 }),
            shards: self.shards.unwrap_or(match (real, llama) {
                (false, _) => 1,
                (true, true) => 4,
                (true, false) => 6,
            }),
            hidden: self.hidden.unwrap_or(h),
            layers: self.layers.unwrap_or(l),
            heads,
            kv_heads: self.kv_heads.unwrap_or(if llama { nkv.min(heads) } else { heads }),
            intermediate: self.intermediate.unwrap_or(i),
            vocab: self.vocab.unwrap_or(v),
            max_positions: max,
            layout: self.layout.filter(|&l| l != SynthLayout::Llama3),
            chat_template: self.chat_template,
        }
    }

    /// Whether the runner can build and load this checkpoint (the shapes make a valid model config, and there
    /// are no more shards than tensors), without writing anything: plans check it before any work.
    pub fn check(&self, kind: ModelKind) -> Result<(), SynthError> {
        if kind != ModelKind::Llama && self.layout.is_some_and(|l| l != SynthLayout::Llama3) {
            return Err(SynthError::Spec(
                "a layout (llama3.1, llama3.2, qwen2) is a checkpoint of the llama kind; LLaDA and Dream have one \
                 layout each; fix: leave the layout out, or make the model of the llama kind"
                    .into(),
            ));
        }
        let r = self.resolve(kind);
        let cfg = self.model_config(kind)?;
        let tensors = WeightNames::for_kind(kind).tensors(&cfg).len();
        if r.shards == 0 || r.shards > tensors {
            return Err(SynthError::Spec(format!(
                "{} shards for the {tensors} tensors of this model; fix: use 1 to {tensors} shards",
                r.shards
            )));
        }
        Ok(())
    }

    /// The model config the checkpoint will have, without writing anything (for plans: parameter counts etc.).
    pub fn model_config(&self, kind: ModelKind) -> Result<ModelConfig, SynthError> {
        let r = self.resolve(kind);
        let ids = placeholder_special_ids(&r);
        let text = config_json(&r, &ids).to_string();
        Ok(ModelConfig::from_json_str(&text, Path::new("<synthetic config.json>"), kind)?)
    }
}

/// A [`SynthSpec`] with its defaults applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub kind: ModelKind,
    pub preset: Preset,
    pub seed: u64,
    pub dtype: Precision,
    pub shards: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub max_positions: usize,
    /// The `llama`-kind layout (absent: Meta-Llama-3's; absent from the commit hash then, so older synthetic
    /// checkpoints keep theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<SynthLayout>,
    /// An Instruct checkpoint with a chat template (absent from the commit hash when false, so base checkpoints
    /// keep theirs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat_template: bool,
}

/// Errors of writing a synthetic checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    // The cause is part of the message and not a `source`: a report of the error chain would say it twice.
    #[error("writing {}: {error}", path.display())]
    Io { path: PathBuf, error: std::io::Error },
    #[error("synthetic spec: {0}")]
    Spec(String),
    #[error("building the synthetic tokenizer: {0}")]
    Tokenizer(String),
    #[error(transparent)]
    Config(#[from] ModelError),
    /// The cache's `refs/main` of the repository points at a checkpoint without the synthetic marker (a real
    /// download): writing synthetic weights would point every reader of the cache at them instead.
    #[error(
        "{repo_id} in the cache {} is a real checkpoint (refs/main is snapshot {commit}, whose config.json has no \
         dllm_bench_synthetic marker): synthetic weights would replace it for every reader of this cache; fix: give \
         the synthetic model an id of its own (e.g. dllm-bench/synthetic-...), or use another cache \
         (--model-cache-dir)",
        cache.display()
    )]
    RealCheckpoint { repo_id: String, cache: PathBuf, commit: String },
    /// A stop signal (SIGTERM, SIGINT, SIGUSR1: a SLURM time limit, a preemption, Ctrl-C) arrived while the weights
    /// were written: what this attempt wrote is removed (a real-size checkpoint is 16 GB).
    #[error(
        "stopped by {signal} while writing the synthetic checkpoint: nothing of it is left in the cache; fix: run \
         the same command again to write it whole"
    )]
    Stopped { signal: &'static str },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |error| SynthError::Io { path: path.to_path_buf(), error }
}

impl SynthError {
    /// The path and the error of a write that failed because of where the cache is (no permission, a read-only
    /// file system, a path through a file): the user fixes it by choosing another cache folder.
    pub fn unwritable(&self) -> Option<(&Path, &std::io::Error)> {
        match self {
            // NotFound: a folder that cannot be made there (`/proc/x`), as `output::create_folder_for` counts it.
            SynthError::Io { path, error }
                if crate::output::unwritable_here(error) || error.kind() == std::io::ErrorKind::NotFound =>
            {
                Some((path, error))
            }
            _ => None,
        }
    }
}

/// The error of writing `repo_id`'s synthetic checkpoint into the cache `cache`, as a command reports it: a cache
/// folder that cannot be written is bad input (exit status 2), naming the path, the cause (once) and the fix.
pub fn cache_error(err: SynthError, repo_id: &str, cache: &Path) -> anyhow::Error {
    match err.unwritable() {
        Some((path, error)) => InputError(format!(
            "cannot write synthetic weights for {repo_id} into the model cache {}: cannot write {}: {error}; fix: \
             pass --model-cache-dir a folder you can write (or set HF_HUB_CACHE to one)",
            cache.display(),
            path.display()
        ))
        .into(),
        None => anyhow::Error::new(err)
            .context(format!("cannot write synthetic weights for {repo_id} into {}", cache.display())),
    }
}

/// A model cache (made when missing) must be a folder: one that is a file, or lies under one, is bad input (exit
/// status 2), said once with the fix.
pub fn check_cache_folder(cache: &Path) -> Result<(), InputError> {
    match cache.ancestors().find(|a| !a.as_os_str().is_empty() && a.is_file()) {
        Some(file) => Err(InputError(format!(
            "the model cache {} is not a folder: {} is a file; fix: pass --model-cache-dir a folder (or set \
             HF_HUB_CACHE or HF_HOME to one)",
            cache.display(),
            file.display()
        ))),
        None => Ok(()),
    }
}

/// The chat template of a synthetic Llama-3-Instruct checkpoint: what Meta-Llama-3-8B-Instruct's renders (BOS,
/// each message as a header and its trimmed content ended by `<|eot_id|>`, the assistant's header when
/// `add_generation_prompt`), written anew.
pub const LLAMA3_CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}\
{{ '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\n\n' ~ (message['content'] | trim) ~ '<|eot_id|>' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/// The chat template of a synthetic LLaDA-8B-Instruct checkpoint: what LLaDA-8B-Instruct's renders (Llama-3's
/// format with LLaDA's BOS, and the assistant's header always, `add_generation_prompt` or not), written anew.
pub const LLADA_CHAT_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}\
{{ '<|start_header_id|>' ~ message['role'] ~ '<|end_header_id|>\n\n' ~ (message['content'] | trim) ~ '<|eot_id|>' }}\
{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

/// The chat template of a synthetic Dream-v0-Instruct checkpoint: ChatML (Qwen2's format), one user turn and
/// the assistant's header, written anew.
pub const DREAM_CHAT_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' ~ message['role'] ~ '\n' ~ message['content'] ~ '<|im_end|>\n' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Special tokens per layout, in the order they are added to the tokenizer: (name in config, token). An Instruct
/// checkpoint (`chat`) also has the chat headers' tokens.
fn special_tokens(kind: ModelKind, chat: bool) -> Vec<(&'static str, &'static str)> {
    let mut out = match kind {
        ModelKind::Llama => {
            vec![("bos_token_id", "<|begin_of_text|>"), ("eos_token_id", "<|end_of_text|>"), ("eot", "<|eot_id|>")]
        }
        ModelKind::Llada => vec![
            ("bos_token_id", "<|startoftext|>"),
            ("eos_token_id", "<|endoftext|>"),
            ("mask_token_id", "<|mdm_mask|>"),
            ("eot", "<|eot_id|>"),
        ],
        // Dream-v0's BOS is its EOS (`bos_token_id` is written from `eos_token_id`).
        ModelKind::Dream => {
            vec![("eos_token_id", "<|endoftext|>"), ("mask_token_id", "<|mask|>"), ("eot", "<|im_end|>")]
        }
    };
    match (chat, kind) {
        (false, _) => {}
        (true, ModelKind::Dream) => out.push(("im_start", "<|im_start|>")),
        (true, _) => out.extend([("start_header", "<|start_header_id|>"), ("end_header", "<|end_header_id|>")]),
    }
    out
}

/// `tokenizer_config.json` of an Instruct checkpoint: its BOS and EOS token strings and its chat template.
fn tokenizer_config_json(kind: ModelKind) -> serde_json::Value {
    let sp = special_tokens(kind, true);
    let token = |field: &str| sp.iter().find(|(f, _)| *f == field).map(|(_, t)| *t);
    let template = match kind {
        ModelKind::Llama => LLAMA3_CHAT_TEMPLATE,
        ModelKind::Llada => LLADA_CHAT_TEMPLATE,
        ModelKind::Dream => DREAM_CHAT_TEMPLATE,
    };
    // Meta-Llama-3-8B-Instruct's EOS is its end-of-turn token, in config.json and here.
    let eos = if kind == ModelKind::Llama { token("eot") } else { token("eos_token_id") };
    json!({
        "bos_token": token("bos_token_id").or(token("eos_token_id")),
        "eos_token": eos,
        "chat_template": template,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })
}

/// BPE tokens to train: the vocabulary minus the special tokens, capped (a small text cannot feed more merges).
fn bpe_vocab(r: &Resolved) -> usize {
    r.vocab.saturating_sub(special_tokens(r.kind, r.chat_template).len()).min(4096)
}

/// Special ids by config field name, for plan-level configs (no tokenizer trained): the last ids of the vocab.
fn placeholder_special_ids(r: &Resolved) -> BTreeMap<&'static str, u32> {
    let sp = special_tokens(r.kind, r.chat_template);
    sp.iter().enumerate().map(|(i, (k, _))| (*k, (r.vocab - sp.len() + i) as u32)).collect()
}

/// `config.json` with the model's own field names.
fn config_json(r: &Resolved, ids: &BTreeMap<&'static str, u32>) -> serde_json::Value {
    let mut marker = json!({
        "format": SYNTH_FORMAT,
        "preset": r.preset,
        "seed": r.seed,
        "dtype": r.dtype,
        "shards": r.shards,
    });
    if r.chat_template {
        marker["chat_template"] = json!(true);
    }
    let id = |k: &str| ids.get(k).copied();
    match r.kind {
        ModelKind::Llama => json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "attention_bias": false,
            "attention_dropout": 0.0,
            "bos_token_id": id("bos_token_id"),
            // An Instruct checkpoint's is its end-of-turn token, as Meta-Llama-3-8B-Instruct's (128009).
            "eos_token_id": if r.chat_template { id("eot") } else { id("eos_token_id") },
            "hidden_act": "silu",
            "hidden_size": r.hidden,
            "initializer_range": 0.02,
            "intermediate_size": r.intermediate,
            "max_position_embeddings": r.max_positions,
            "mlp_bias": false,
            "num_attention_heads": r.heads,
            "num_hidden_layers": r.layers,
            "num_key_value_heads": r.kv_heads,
            "pretraining_tp": 1,
            "rms_norm_eps": 1e-5,
            "rope_scaling": null,
            "rope_theta": 500000.0,
            "tie_word_embeddings": false,
            "torch_dtype": torch_name(r.dtype),
            "transformers_version": "4.40.0.dev0",
            "use_cache": true,
            "vocab_size": r.vocab,
            "dllm_bench_synthetic": marker,
        })
        .apply_layout(r),
        ModelKind::Llada => json!({
            "architectures": ["LLaDAModelLM"],
            "model_type": "llada",
            "activation_type": "silu",
            "alibi": false,
            "attention_dropout": 0.0,
            "attention_layer_norm": false,
            "block_type": "llama",
            "bos_token_id": id("bos_token_id"),
            "d_model": r.hidden,
            "embedding_size": r.vocab,
            "eos_token_id": id("eos_token_id"),
            "include_bias": false,
            "include_qkv_bias": false,
            "init_std": 0.02,
            "input_emb_norm": false,
            "layer_norm_type": "rms",
            "mask_token_id": id("mask_token_id"),
            "max_sequence_length": r.max_positions,
            "mlp_hidden_size": r.intermediate,
            "mlp_ratio": 4,
            "n_heads": r.heads,
            "n_kv_heads": r.kv_heads,
            "n_layers": r.layers,
            "pad_token_id": id("eos_token_id"),
            "rms_norm_eps": 1e-5,
            "rope": true,
            "rope_full_precision": true,
            "rope_theta": 500000.0,
            "scale_logits": false,
            "torch_dtype": torch_name(r.dtype),
            "use_cache": false,
            "vocab_size": r.vocab,
            "weight_tying": false,
            "dllm_bench_synthetic": marker,
        }),
        ModelKind::Dream => {
            // Qwen2's config with Dream's names and ids (Dream-v0: bos = eos = pad, the mask id beside them).
            let qwen2 = Resolved { kind: ModelKind::Llama, layout: Some(SynthLayout::Qwen2), ..r.clone() };
            let mut c = config_json(&qwen2, ids);
            c["architectures"] = json!(["DreamModel"]);
            c["model_type"] = json!("Dream");
            c["bos_token_id"] = json!(id("eos_token_id"));
            c["pad_token_id"] = json!(id("eos_token_id"));
            c["mask_token_id"] = json!(id("mask_token_id"));
            c["use_cache"] = json!(false);
            c["dllm_bench_synthetic"] = marker;
            c
        }
    }
}

/// Rewrites a Meta-Llama-3 `config.json` into the layout `r` asks for, with each layout's own field names.
trait ApplyLayout {
    fn apply_layout(self, r: &Resolved) -> serde_json::Value;
}

impl ApplyLayout for serde_json::Value {
    fn apply_layout(mut self, r: &Resolved) -> serde_json::Value {
        let scaling = |factor: f64| {
            json!({
                "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": r.max_positions, "rope_type": "llama3"
            })
        };
        match r.layout {
            None | Some(SynthLayout::Llama3) => {}
            Some(SynthLayout::Llama31) => {
                self["rope_scaling"] = scaling(8.0);
                self["max_position_embeddings"] = json!(16 * r.max_positions);
            }
            Some(SynthLayout::Llama32) => {
                self["rope_scaling"] = scaling(32.0);
                self["max_position_embeddings"] = json!(16 * r.max_positions);
                self["tie_word_embeddings"] = json!(true);
            }
            Some(SynthLayout::Qwen2) => {
                let o = self.as_object_mut().expect("a JSON object");
                for f in ["attention_bias", "mlp_bias", "pretraining_tp"] {
                    o.remove(f);
                }
                self["architectures"] = json!(["Qwen2ForCausalLM"]);
                self["model_type"] = json!("qwen2");
                self["rope_theta"] = json!(1_000_000.0);
                self["rms_norm_eps"] = json!(1e-6);
                self["use_sliding_window"] = json!(false);
                self["sliding_window"] = json!(r.max_positions);
                self["max_window_layers"] = json!(r.layers);
            }
        }
        self
    }
}

/// The deterministic commit hash of a resolved spec (40 hex digits, like a git commit).
fn commit_of(repo_id: &str, r: &Resolved) -> String {
    let canon = json!({ "format": SYNTH_FORMAT, "repo_id": repo_id, "spec": r }).to_string();
    let digest = Sha256::digest(canon.as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The writer's mark in its staging names: `HOST-PID` (the host's letters, digits and dashes), so that a later
/// writer on the same host can tell a dead writer's leftovers from a live one's.
fn writer_tag() -> String {
    let host: String = crate::sysinfo::host()
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .collect();
    format!("{host}-{}", std::process::id())
}

/// Whether the staging entry `name` is marked by a writer of this host ([`writer_tag`]) whose process is gone.
/// `false` where that cannot be told (another host's writer, a name of an older runner, no `/proc`).
fn writer_is_dead(name: &str) -> bool {
    // `.COMMIT.TAG.XXXXXX` (staging) or `.NAME.TAG.XXXXXX.partial` (a blob): the tag is the second field from the
    // right, read whole (a host named `node` is not `node-12`'s).
    let name = name.strip_suffix(".partial").unwrap_or(name);
    let Some(tag) = name.rsplit_once('.').and_then(|(rest, _)| rest.rsplit_once('.')).map(|(_, tag)| tag) else {
        return false;
    };
    let mine = writer_tag();
    let (Some((host, pid)), Some((mine, _))) = (tag.rsplit_once('-'), mine.rsplit_once('-')) else {
        return false;
    };
    let proc = Path::new("/proc");
    host == mine
        && !pid.is_empty()
        && pid.chars().all(|c| c.is_ascii_digit())
        && proc.join("self").exists()
        && !proc.join(pid).exists()
}

/// Removes what a writer killed mid-way (SIGKILL, a node failure) left in `repo`: staging snapshots
/// (`snapshots/.<commit>.*`) and partial blobs (`blobs/.*.partial`), which may be gigabytes for the real shapes.
/// Called with the repository's lock held, so no live writer owns them, except on a file system that ignores the
/// lock (the rename-based writing tolerates that). So an entry is taken for a dead writer's when its mark names a
/// process of this host that is gone, or (another host's, an older runner's) when it was last modified more than
/// [`STALE_STAGING`] ago.
fn remove_stale_staging(repo: &Path) {
    let stale = |e: &std::fs::DirEntry| {
        let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        writer_is_dead(&e.file_name().to_string_lossy()) || age.is_some_and(|a| a > STALE_STAGING)
    };
    let entries = |dir: PathBuf| std::fs::read_dir(dir).into_iter().flatten().flatten();
    for e in entries(repo.join("snapshots")) {
        if e.file_name().to_string_lossy().starts_with('.') && stale(&e) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    for e in entries(repo.join("blobs")) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".partial") && stale(&e) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// How long staging files go unmodified before [`remove_stale_staging`] takes them for a dead writer's.
const STALE_STAGING: std::time::Duration = std::time::Duration::from_secs(6 * 3600);

/// The blobs one writing of a checkpoint created (a blob already there before it, which another snapshot may
/// share, is not among them): removed when the writing fails or is stopped, kept once its snapshot is in place.
/// Dropped while the repository's lock is held; where a file system ignores the lock, another writer of the same
/// content may have linked a blob meanwhile, so one that any other snapshot (finished or staged) links to is kept.
struct NewBlobs {
    paths: Vec<PathBuf>,
    kept: bool,
    snapshots: PathBuf,
    own: PathBuf,
}

impl Drop for NewBlobs {
    fn drop(&mut self) {
        if !self.kept {
            for p in self.paths.iter().filter(|p| !linked_elsewhere(&self.snapshots, &self.own, p)) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Whether a snapshot folder under `snapshots` other than `own` links to `blob` (true where a folder cannot be
/// read: a blob is removed only when nothing can need it).
fn linked_elsewhere(snapshots: &Path, own: &Path, blob: &Path) -> bool {
    fn links(dir: &Path, name: &std::ffi::OsStr, depth: u32) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else { return true };
        entries.flatten().any(|e| {
            let p = e.path();
            match std::fs::read_link(&p) {
                Ok(target) => target.file_name() == Some(name),
                Err(_) => p.is_dir() && depth < 8 && links(&p, name, depth + 1),
            }
        })
    }
    let Some(name) = blob.file_name() else { return true };
    let Ok(entries) = std::fs::read_dir(snapshots) else { return true };
    entries.flatten().map(|e| e.path()).filter(|d| d != own && d.is_dir()).any(|d| links(&d, name, 0))
}

/// The error of a write that failed: [`SynthError::Stopped`] when a stop signal ended it (the blob writer checks
/// for one at each write), else the I/O error at `path`.
fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |error| match crate::signals::requested() {
        Some(signal) => SynthError::Stopped { signal },
        None => SynthError::Io { path: path.to_path_buf(), error },
    }
}

/// Writes a blob under `blobs/` by streaming through `write`, then links `snapshot/name` to it. A stop signal ends
/// the writing at the next chunk (the partial file is removed).
fn write_file(
    repo: &Path,
    snapshot: &Path,
    new_blobs: &mut NewBlobs,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), SynthError> {
    let blobs = repo.join("blobs");
    std::fs::create_dir_all(&blobs).map_err(io_err(&blobs))?;
    // A uniquely named temporary file (removed if anything fails), renamed to its content's hash: a blob is
    // complete or absent, and two writers of the same content write the same blob.
    let tmp =
        tempfile::Builder::new().prefix(&format!(".{name}.{}.", writer_tag())).suffix(".partial").tempfile_in(&blobs);
    let tmp = tmp.map_err(io_err(&blobs))?;
    let tmp_path = tmp.path().to_path_buf();
    let mut w = HashWriter { inner: BufWriter::with_capacity(1 << 20, tmp), hasher: Sha256::new() };
    write(&mut w).and_then(|()| w.flush()).map_err(write_err(&tmp_path))?;
    let HashWriter { inner, hasher } = w;
    let tmp = inner.into_inner().map_err(|e| write_err(&tmp_path)(e.into_error()))?;
    tmp.as_file().sync_all().map_err(io_err(&tmp_path))?;
    let sha = hex(&hasher.finalize());
    let blob = blobs.join(&sha);
    crate::output::set_readable(tmp.as_file());
    let existed = blob.exists();
    tmp.persist(&blob).map_err(|e| io_err(&blob)(e.error))?;
    if !existed {
        new_blobs.paths.push(blob.clone());
    }
    let link = snapshot.join(name);
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(&link).map_err(io_err(&link))?;
    }
    link_or_copy(&blob, &format!("../../blobs/{sha}"), &link)
}

#[cfg(unix)]
fn link_or_copy(_blob: &Path, relative: &str, link: &Path) -> Result<(), SynthError> {
    std::os::unix::fs::symlink(relative, link).map_err(io_err(link))
}

#[cfg(not(unix))]
fn link_or_copy(blob: &Path, _relative: &str, link: &Path) -> Result<(), SynthError> {
    std::fs::copy(blob, link).map(|_| ()).map_err(io_err(link))
}

/// Splits tensors into `n` contiguous groups of about equal bytes.
fn split_shards(tensors: Vec<TensorSpec>, n: usize) -> Vec<Vec<TensorSpec>> {
    let total: usize = tensors.iter().map(TensorSpec::elems).sum();
    let count = tensors.len();
    let mut out: Vec<Vec<TensorSpec>> = vec![Vec::new()];
    let mut acc = 0usize;
    for (i, t) in tensors.into_iter().enumerate() {
        let shard = out.len();
        let left_tensors = count - i;
        let left_shards = n - shard;
        let current_full = acc >= total * shard / n;
        let last = out.last().map_or(0, Vec::len);
        if shard < n && last > 0 && (current_full || left_tensors <= left_shards) {
            out.push(Vec::new());
        }
        acc += t.elems();
        if let Some(last) = out.last_mut() {
            last.push(t);
        }
    }
    out
}

/// The commit `refs/main` of `repo` points at when its snapshot holds a `config.json` without the synthetic
/// marker: a real checkpoint (`None` without a ref, a snapshot or a readable config, or with the marker).
fn real_snapshot(repo: &Path) -> Option<String> {
    let commit = std::fs::read_to_string(repo.join("refs/main")).ok()?.trim().to_string();
    let text = std::fs::read_to_string(repo.join("snapshots").join(&commit).join("config.json")).ok()?;
    let cfg: serde_json::Value = serde_json::from_str(&text).ok()?;
    cfg.get("dllm_bench_synthetic").is_none().then_some(commit)
}

/// Whether `snapshot` already holds a complete checkpoint written from `marker`.
fn complete(snapshot: &Path, marker: &serde_json::Value) -> bool {
    let Ok(text) = std::fs::read_to_string(snapshot.join("config.json")) else {
        return false;
    };
    let Ok(cfg) = serde_json::from_str::<serde_json::Value>(&text) else {
        return false;
    };
    if cfg.get("dllm_bench_synthetic") != Some(marker) || !snapshot.join("tokenizer.json").is_file() {
        return false;
    }
    if marker.get("chat_template").is_some() && !snapshot.join("tokenizer_config.json").is_file() {
        return false;
    }
    if let Ok(index) = std::fs::read_to_string(snapshot.join("model.safetensors.index.json")) {
        let Ok(index) = serde_json::from_str::<serde_json::Value>(&index) else {
            return false;
        };
        let Some(map) = index.get("weight_map").and_then(|m| m.as_object()) else {
            return false;
        };
        map.values().all(|f| f.as_str().is_some_and(|f| whole(&snapshot.join(f))))
    } else {
        whole(&snapshot.join("model.safetensors"))
    }
}

/// Whether a weights file is there and whole: its safetensors header describes the file as it is (a blob cut short
/// by a full disk or a copy is written again by the next writer, not refused by every run after it).
fn whole(path: &Path) -> bool {
    path.is_file() && crate::model::check::safetensors_whole(path)
}

/// Writes (or reuses) a synthetic `kind` checkpoint for `repo_id` under the hf-hub cache root `cache_dir`, and
/// points `refs/main` at it. Returns the snapshot directory. Writing a large checkpoint reports its progress on
/// standard error ([`Report::default`]; [`write_synthetic_with`] chooses).
pub fn write_synthetic(
    cache_dir: &Path,
    repo_id: &str,
    kind: ModelKind,
    spec: &SynthSpec,
) -> Result<PathBuf, SynthError> {
    write_synthetic_with(cache_dir, repo_id, kind, spec, Report::default())
}

/// [`write_synthetic`], reporting the progress of writing the weights as `report` says (a bar on a terminal, a
/// line per weight file otherwise; nothing for small checkpoints or when off).
pub fn write_synthetic_with(
    cache_dir: &Path,
    repo_id: &str,
    kind: ModelKind,
    spec: &SynthSpec,
    report: Report,
) -> Result<PathBuf, SynthError> {
    write_reporting(cache_dir, repo_id, kind, spec, report, None)
}

/// [`write_synthetic_with`], its progress lines to `sink` when one is given.
fn write_reporting(
    cache_dir: &Path,
    repo_id: &str,
    kind: ModelKind,
    spec: &SynthSpec,
    report: Report,
    sink: Option<&mut dyn FnMut(String)>,
) -> Result<PathBuf, SynthError> {
    let r = spec.resolve(kind);
    // Plan-level validation through the same config conversion the loader uses.
    spec.model_config(kind)?;
    if r.shards == 0 {
        return Err(SynthError::Spec("shards must be at least 1".into()));
    }
    let names = WeightNames::for_kind(kind);
    let repo = repo_dir(cache_dir, repo_id);
    let commit = commit_of(repo_id, &r);
    if let Some(real) = real_snapshot(&repo) {
        return Err(SynthError::RealCheckpoint { repo_id: repo_id.into(), cache: cache_dir.into(), commit: real });
    }

    let specials = special_tokens(kind, r.chat_template);
    let tok = build_tokenizer(bpe_vocab(&r), &specials.iter().map(|(_, t)| *t).collect::<Vec<_>>())
        .map_err(SynthError::Tokenizer)?;
    let mut ids = BTreeMap::new();
    for (field, token) in &specials {
        let id =
            tok.token_to_id(token).ok_or_else(|| SynthError::Tokenizer(format!("{token} missing after adding it")))?;
        ids.insert(*field, id);
    }
    if tok.get_vocab_size(true) > r.vocab {
        return Err(SynthError::Spec(format!(
            "the synthetic tokenizer has {} tokens, more than vocab {}",
            tok.get_vocab_size(true),
            r.vocab
        )));
    }
    let config = config_json(&r, &ids);
    let marker = config.get("dllm_bench_synthetic").cloned().unwrap_or_default();
    let mut meter = None;
    let final_snapshot = publish_snapshot(
        &repo,
        &commit,
        |snap| complete(snap, &marker),
        |snapshot, new_blobs| {
            let cfg_text = serde_json::to_string_pretty(&config).map_err(|e| SynthError::Spec(e.to_string()))?;
            write_file(&repo, snapshot, new_blobs, "config.json", |w| w.write_all(cfg_text.as_bytes()))?;
            let tok_text = tok.to_string(true).map_err(|e| SynthError::Tokenizer(e.to_string()))?;
            write_file(&repo, snapshot, new_blobs, "tokenizer.json", |w| w.write_all(tok_text.as_bytes()))?;
            if r.chat_template {
                let text = serde_json::to_string_pretty(&tokenizer_config_json(kind))
                    .map_err(|e| SynthError::Spec(e.to_string()))?;
                write_file(&repo, snapshot, new_blobs, "tokenizer_config.json", |w| w.write_all(text.as_bytes()))?;
            }

            let model_cfg = ModelConfig::from_json_str(&config.to_string(), &snapshot.join("config.json"), kind)?;
            let std = (1.0 / (r.hidden as f32).sqrt()).max(0.02);
            let tensors: Vec<TensorSpec> = names
                .tensors(&model_cfg)
                .into_iter()
                .map(|(name, shape)| {
                    let init = match shape.len() {
                        _ if name.ends_with(".bias") => Init { mean: 0.0, std },
                        1 => Init { mean: 1.0, std: 0.05 },
                        _ => Init { mean: 0.0, std },
                    };
                    TensorSpec { name, shape, init }
                })
                .collect();
            if r.shards > tensors.len() {
                return Err(SynthError::Spec(format!(
                    "{} shards for {} tensors: use at most {}",
                    r.shards,
                    tensors.len(),
                    tensors.len()
                )));
            }
            check_disk_space(&repo, tensors.iter().map(|t| (t.elems() * dtype_size(r.dtype)) as u64).sum())?;
            let weight_files: Vec<(String, Vec<TensorSpec>)> = if r.shards == 1 {
                vec![("model.safetensors".to_string(), tensors)]
            } else {
                let groups = split_shards(tensors, r.shards);
                let n = groups.len();
                groups
                    .into_iter()
                    .enumerate()
                    .map(|(i, g)| (format!("model-{:05}-of-{n:05}.safetensors", i + 1), g))
                    .collect()
            };
            let bytes = |g: &[TensorSpec]| safetensors_len(g, r.dtype);
            let total_bytes = weight_files.iter().map(|(_, g)| bytes(g)).sum();
            let meter = meter.insert(Meter::start(report, repo_id, total_bytes, weight_files.len(), sink));
            for (file, group) in &weight_files {
                meter.begin_file(file);
                write_file(&repo, snapshot, new_blobs, file, |w| {
                    write_safetensors(&mut meter.counting(w), group, r.dtype, r.seed)
                })?;
                meter.end_file(file, bytes(group));
            }
            if weight_files.len() > 1 {
                let mut weight_map = BTreeMap::new();
                let mut total = 0usize;
                for (file, group) in &weight_files {
                    for t in group {
                        weight_map.insert(t.name.clone(), file.clone());
                        total += t.elems() * dtype_size(r.dtype);
                    }
                }
                let index = json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
                let text = serde_json::to_string_pretty(&index).map_err(|e| SynthError::Spec(e.to_string()))?;
                write_file(&repo, snapshot, new_blobs, "model.safetensors.index.json", |w| {
                    w.write_all(text.as_bytes())
                })?;
            }
            Ok(())
        },
    )?;
    if let Some(mut meter) = meter {
        meter.finish(&final_snapshot);
    }
    Ok(final_snapshot)
}

/// Puts a checkpoint's snapshot `commit` of `repo` in place once: the snapshot when `is_complete` says it is
/// already whole, else written by `write(staging folder, new blobs)` under the repository's lock and renamed into
/// place; then `refs/main` points at it. Runs that share a cache (the shards of a job array) write one checkpoint
/// once: the others wait for the lock, then find it complete. A reader (or a writer whose file system ignores the
/// lock) sees the whole snapshot or none of it. Every synthetic writer (the models', the BERTScore encoder's) goes
/// through it.
fn publish_snapshot(
    repo: &Path,
    commit: &str,
    is_complete: impl Fn(&Path) -> bool,
    write: impl FnOnce(&Path, &mut NewBlobs) -> Result<(), SynthError>,
) -> Result<PathBuf, SynthError> {
    let snapshots = repo.join("snapshots");
    let final_snapshot = snapshots.join(commit);
    let refs = repo.join("refs");
    let ref_main = refs.join("main");
    if is_complete(&final_snapshot) {
        write_ref(&refs, &ref_main, commit)?;
        return Ok(final_snapshot);
    }
    let lock = crate::model::files::lock_repo(repo).map_err(io_err(repo))?;
    // A stop that came while another writer held the lock (the wait restarts after a signal).
    if let Some(signal) = crate::signals::requested() {
        return Err(SynthError::Stopped { signal });
    }
    if is_complete(&final_snapshot) {
        write_ref(&refs, &ref_main, commit)?;
        return Ok(final_snapshot);
    }
    std::fs::create_dir_all(&snapshots).map_err(io_err(&snapshots))?;
    remove_stale_staging(repo);
    let staging = tempfile::Builder::new().prefix(&format!(".{commit}.{}.", writer_tag())).tempdir_in(&snapshots);
    let staging = staging.map_err(io_err(&snapshots))?;
    // Declared after the lock: dropped (on an error, removing the blobs it holds) before the lock is released.
    let mut new_blobs =
        NewBlobs { paths: Vec::new(), kept: false, snapshots: snapshots.clone(), own: staging.path().to_path_buf() };
    write(staging.path(), &mut new_blobs)?;
    // Leftovers of an interrupted writer of an older version (files written in place) are replaced whole.
    if final_snapshot.exists() {
        std::fs::remove_dir_all(&final_snapshot).map_err(io_err(&final_snapshot))?;
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, &final_snapshot) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(io_err(&final_snapshot)(e));
    }
    new_blobs.kept = true;
    write_ref(&refs, &ref_main, commit)?;
    drop(lock);
    Ok(final_snapshot)
}

/// Points `refs/main` at `commit`: nothing when it already does, else a new file renamed over the old one, so a
/// reader never sees an empty or half-written ref.
fn write_ref(refs: &Path, ref_main: &Path, commit: &str) -> Result<(), SynthError> {
    if std::fs::read_to_string(ref_main).is_ok_and(|c| c.trim() == commit) {
        return Ok(());
    }
    std::fs::create_dir_all(refs).map_err(io_err(refs))?;
    let mut tmp = tempfile::Builder::new().prefix(".main.").tempfile_in(refs).map_err(io_err(refs))?;
    tmp.write_all(commit.as_bytes()).map_err(io_err(ref_main))?;
    crate::output::set_readable(tmp.as_file());
    tmp.persist(ref_main).map_err(|e| io_err(ref_main)(e.error))?;
    Ok(())
}

/// Refuses to start a checkpoint of `bytes` on a file system with less room (with a margin of 5% and 64 MiB), so
/// a too-large synthetic model fails at once with the sizes instead of filling the disk.
fn check_disk_space(dir: &Path, bytes: u64) -> Result<(), SynthError> {
    let Ok(free) = fs2::available_space(dir) else { return Ok(()) };
    let need = bytes + bytes / 20 + (64 << 20);
    if need > free {
        return Err(SynthError::Spec(format!(
            "the checkpoint needs {:.2} GB and {} has {:.2} GB free; fix: free space, point --model-cache-dir \
             (or HF_HUB_CACHE) at a larger file system, or use a smaller preset, hidden or layers",
            need as f64 / 1e9,
            dir.display(),
            free as f64 / 1e9
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(report: Report, shards: usize) -> (PathBuf, Vec<String>, tempfile::TempDir) {
        let cache = tempfile::tempdir().expect("temp dir");
        let spec = SynthSpec { shards: Some(shards), ..SynthSpec::new(Preset::Tiny, 1) };
        let mut lines = Vec::new();
        let mut sink = |l: String| lines.push(l);
        let snapshot = write_reporting(cache.path(), "t/progress", ModelKind::Llada, &spec, report, Some(&mut sink))
            .expect("written");
        (snapshot, lines, cache)
    }

    #[test]
    fn writing_the_weights_says_each_file_with_the_bytes_written_and_the_total() {
        let (snapshot, lines, _cache) = written(Report { enabled: true, min_bytes: 0 }, 3);
        let sizes: Vec<u64> = (1..=3)
            .map(|i| {
                std::fs::metadata(snapshot.join(format!("model-{i:05}-of-00003.safetensors"))).expect("file").len()
            })
            .collect();
        let total: u64 = sizes.iter().sum();
        let h = |b: u64| indicatif::HumanBytes(b).to_string();
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert!(lines[0].starts_with(&format!("writing synthetic weights for t/progress: {} in 3 files", h(total))));
        let mut so_far = 0;
        for (i, size) in sizes.iter().enumerate() {
            so_far += size;
            let want = format!(
                "  [{}/3] model-{:05}-of-00003.safetensors: {} written; {} of {} (",
                i + 1,
                i + 1,
                h(*size),
                h(so_far),
                h(total)
            );
            assert!(lines[i + 1].starts_with(&want), "{:?} is not {want:?}...", lines[i + 1]);
        }
        assert!(lines[3].contains("(100%)"), "every byte counted: {}", lines[3]);
        assert!(lines[4].starts_with(&format!("wrote {} of synthetic weights in ", h(total))), "{}", lines[4]);
        assert!(lines[4].ends_with(&snapshot.display().to_string()), "{}", lines[4]);
    }

    #[test]
    fn small_checkpoints_and_quiet_runs_write_without_a_word() {
        for report in [Report::stderr(true), Report::stderr(false), Report { enabled: false, min_bytes: 0 }] {
            let (_, lines, _cache) = written(report, 2);
            assert!(lines.is_empty(), "{report:?}: {lines:?}");
        }
    }
}

#[cfg(test)]
mod blob_cleanup {
    use super::NewBlobs;

    /// A failed writing removes the blobs it created, except one another snapshot links to (a writer of the same
    /// content on a file system that ignores the lock).
    #[cfg(unix)]
    #[test]
    fn a_failed_writing_keeps_a_blob_another_snapshot_links_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (blobs, snapshots) = (dir.path().join("blobs"), dir.path().join("snapshots"));
        let (own, other) = (snapshots.join(".c1.staging"), snapshots.join("c1"));
        for d in [&blobs, &own, &other] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let (shared, alone) = (blobs.join("aaaa"), blobs.join("bbbb"));
        for b in [&shared, &alone] {
            std::fs::write(b, b"weights").expect("blob");
            std::os::unix::fs::symlink(
                format!("../../blobs/{}", b.file_name().and_then(|n| n.to_str()).expect("name")),
                own.join(b.file_name().expect("name")),
            )
            .expect("own link");
        }
        std::os::unix::fs::symlink("../../blobs/aaaa", other.join("model.safetensors")).expect("other link");
        drop(NewBlobs { paths: vec![shared.clone(), alone.clone()], kept: false, snapshots: snapshots.clone(), own });
        assert!(shared.exists(), "linked by another snapshot: kept");
        assert!(!alone.exists(), "linked by the failed writing alone: removed");
        // Kept once the snapshot is in place.
        let kept = blobs.join("cccc");
        std::fs::write(&kept, b"w").expect("blob");
        drop(NewBlobs { paths: vec![kept.clone()], kept: true, snapshots, own: dir.path().join("none") });
        assert!(kept.exists());
    }
}
