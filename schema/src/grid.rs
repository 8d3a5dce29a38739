//! Grid configuration files (`config/*.toml`): what to run, validated before any heavy work.
//!
//! A config names the models, the prompt set, and the axes of the grid (sequence length N, batch size B,
//! diffusion steps K). [`GridConfig::from_toml`] parses and validates; every error names the file, the
//! field and the fix. [`GridConfig::cells`] expands the grid into cell keys, the unit of measurement.
//! The fully resolved config is stored in each bundle's provenance, so a bundle says exactly what ran.

use serde::{Deserialize, Serialize};

pub use crate::key::{BlockCache, DreamAlg, ModelKind, Precision, SamplerVariant, Threshold};
use crate::key::{CellKey, Sampler};

/// What the AR model does when EOS is its greedy choice before N_out tokens (models.md, "pitfalls").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EosPolicy {
    /// EOS is an ordinary token and generation carries on to N_out.
    #[default]
    Ignore,
    /// EOS's logit is set to -inf until N_out (HF `min_new_tokens`).
    Suppress,
}

/// LLaDA's remasking rule: which masked positions are committed at each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Remasking {
    /// Commit the positions whose chosen token has the highest softmax probability (the reference default).
    #[default]
    LowConfidence,
    /// Commit uniformly random positions (seeded).
    Random,
}

/// The precision in which LLaDA's sampler takes the argmax of a step's logits and the chosen token's softmax
/// probability (the low-confidence ranking).
///
/// The argmax is exact in each (f32 holds every bf16, f16 and f32 logit) and ties break towards the lower
/// position on every device; the choices differ only in the confidence's rounding, so a ranking can differ where
/// two positions' probabilities agree to within that rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// On the device in f32: the argmax and 1 / sum(exp(l - max)) reduced over the vocabulary; only B x block
    /// ids and confidences reach the host. The runner's default.
    #[default]
    F32,
    /// The block's logits copied to f64 (B x block x vocab) and the softmax taken there, as the reference sampler
    /// does: slower and memory-hungry (4 GB per step at B = 32, block 128, LLaDA's vocabulary). Runners before
    /// this option existed always ranked this way.
    F64,
    /// In the dtype the logits come out in (bf16 in a bf16 run): the argmax there, and the probability accumulated
    /// in f32 (as CUDA's softmax kernel does for bf16) and rounded to that dtype: a sampler that never keeps more
    /// precision than its logits.
    Logits,
}

/// Where LLaDA's Gumbel noise (temperature > 0) is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GumbelNoise {
    /// On the device from its seeded generator (candle's: cuRAND on CUDA), f32, nothing uploaded: the runner's
    /// default. The values are not the host stream's, so samples differ between devices; on the CPU, whose
    /// candle generator cannot be seeded, the host stream is used (the host is the device there).
    #[default]
    Device,
    /// On the host from the run's seeded SplitMix64 stream, f64, uploaded at every step (B x block x vocab
    /// values inside the timed region): the same samples on every device, for reproducibility checks.
    Host,
}

/// Size presets of synthetic checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SynthPreset {
    /// A few hundred thousand parameters: tests and the demo, fast on a CPU.
    Tiny,
    /// A few million parameters.
    Small,
    /// The real 8B shapes of each model (GPU timing with synthetic weights).
    Real,
}

/// Where a model's weights come from when they are not real: written by `dllm-bench synth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SyntheticWeights {
    /// Shape preset.
    pub preset: SynthPreset,
    /// Seed of the random weights (deterministic).
    #[serde(default)]
    pub seed: u64,
    /// Precision of the written weights (default: the run's precision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Precision>,
    /// Number of safetensors shards (default 1: a single `model.safetensors`; `real`: 4 for `llama` and `dream`,
    /// 6 for `llada`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Override of the number of layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
    /// Override of the hidden size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u32>,
    /// The checkpoint layout of a `llama`-kind model (default: Meta-Llama-3's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<SynthLayout>,
    /// Since 1.5: whether the checkpoint's `tokenizer_config.json` carries a chat template (its kind's Instruct
    /// template: Llama-3-Instruct's for `llama`, LLaDA-8B-Instruct's for `llada`, with their header and
    /// end-of-turn tokens in the tokenizer). Default: `prompts.chat_template`, so a grid that wraps its prompts
    /// gets synthetic models that can; `false` writes a checkpoint without one (a base model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<bool>,
}

/// Which checkpoint of the `llama` kind a synthetic model imitates: the layouts the loader reads by their
/// `config.json`, so that each is tested without a network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum SynthLayout {
    /// Meta-Llama-3 (`LlamaForCausalLM`, plain RoPE, untied head): the default.
    #[serde(rename = "llama3")]
    Llama3,
    /// Llama-3.1 (`rope_scaling` of type `llama3`, factor 8, original context = the preset's, 16 times that in
    /// all).
    #[serde(rename = "llama3.1")]
    Llama31,
    /// Llama-3.2-1B/3B (llama3 RoPE scaling with factor 32, tied LM head).
    #[serde(rename = "llama3.2")]
    Llama32,
    /// Qwen2 / Qwen2.5 (`Qwen2ForCausalLM`: biases on q, k and v, RoPE base 10^6, RMSNorm eps 10^-6).
    #[serde(rename = "qwen2")]
    Qwen2,
}

/// One model of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelSpec {
    /// Architecture family.
    pub kind: ModelKind,
    /// Hub repository id, e.g. `GSAI-ML/LLaDA-8B-Base`.
    pub id: String,
    /// Hub revision (branch, tag or commit).
    #[serde(default = "default_revision")]
    pub revision: String,
    /// When present, the runner writes (or reuses) synthetic weights of these shapes under `id`. Not read by
    /// wasm32 builds (the explorer takes synthetic-ness from the bundle's models; see `Bundle::parity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub synthetic: Option<SyntheticWeights>,
}

fn default_revision() -> String {
    "main".to_string()
}

/// Where prompts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PromptSource {
    /// The prompt set compiled into the runner (the demo).
    #[default]
    Embedded,
    /// Wikitext-103 validation from the HF dataset cache.
    Wikitext,
    /// A JSONL or plain-text file (`prompts.path`).
    File,
}

/// Named sizes of a prompt set (the study's section 4.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PromptPreset {
    /// 8 prompts: quick validation.
    Small,
    /// 32 prompts: the primary configuration.
    Medium,
    /// 128 prompts: the comprehensive evaluation.
    Large,
}

impl PromptPreset {
    /// The number of prompts of the preset.
    pub fn count(self) -> u32 {
        match self {
            PromptPreset::Small => 8,
            PromptPreset::Medium => 32,
            PromptPreset::Large => 128,
        }
    }
}

/// The prompt set.
///
/// Its size is `count` or `preset`, exactly one of them in a hand-written file; a resolved config (what bundles
/// and journals store) carries `count` always, beside the `preset` it came from, and the two agree.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PromptConfig {
    /// Source of the prompts.
    pub source: PromptSource,
    /// Number of prompts; 0 or absent when `preset` gives it.
    #[serde(default)]
    pub count: u32,
    /// Named size instead of `count`: small 8, medium 32, large 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<PromptPreset>,
    /// File of prompts when `source = "file"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Seed of the deterministic selection (Wikitext: which documents; files keep their order).
    #[serde(default)]
    pub seed: u64,
    /// Wikitext: the hub dataset repository (default `Salesforce/wikitext`, formerly `wikitext`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// Wikitext: the dataset's revision (branch, tag or commit; default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Wikitext: the shortest document (characters) a prompt may come from (default 6000: room for the prompt
    /// and the true continuation at N = 1024 with Llama-3's tokenizer, about 4 characters per token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_chars: Option<u32>,
    /// Since 1.5: wrap each prompt in its model's chat template (Instruct checkpoints), read from the
    /// checkpoint's `tokenizer_config.json` (`chat_template`) and rendered with one user message whose content is
    /// the cell's cut of the prompt text, and the generation prompt. A cell's `prompt_tokens` counts the whole
    /// wrapped prompt (BOS and the template's tokens included), so N stays the tokens the model processes: the
    /// prompt text's share is `prompt_tokens` minus the template's. A model without a template is refused before
    /// anything runs. Default false: the prompt text as is, after BOS.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub chat_template: bool,
}

impl PromptConfig {
    /// Default of `dataset`.
    pub const DEFAULT_DATASET: &str = "Salesforce/wikitext";
    /// Default of `revision`.
    pub const DEFAULT_REVISION: &str = "main";
    /// Default of `min_chars`.
    pub const DEFAULT_MIN_CHARS: u32 = 6000;

    /// The number of prompts: `count`, else the preset's.
    pub fn prompt_count(&self) -> u32 {
        match (self.count, self.preset) {
            (0, Some(p)) => p.count(),
            (n, _) => n,
        }
    }

    /// The Wikitext dataset's hub id.
    pub fn dataset(&self) -> &str {
        self.dataset.as_deref().unwrap_or(Self::DEFAULT_DATASET)
    }

    /// The Wikitext dataset's revision.
    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or(Self::DEFAULT_REVISION)
    }

    /// The shortest Wikitext document, in characters.
    pub fn min_chars(&self) -> u32 {
        self.min_chars.unwrap_or(Self::DEFAULT_MIN_CHARS)
    }

    /// The rules of the `[prompts]` table; `bad(field, problem, fix)` builds the error.
    fn validate(&self, bad: impl Fn(&str, String, &str) -> ConfigError) -> Result<(), ConfigError> {
        match (self.count, self.preset) {
            (0, None) => {
                return Err(bad(
                    "prompts.count",
                    "no prompts: neither count (1 or more) nor preset is set".into(),
                    "set preset = \"small\", \"medium\" or \"large\" (8, 32 or 128 prompts), or count = N",
                ));
            }
            (n, Some(p)) if n != 0 && n != p.count() => {
                return Err(bad(
                    "prompts.preset",
                    format!("count = {n} and preset = {p:?} ({} prompts) are both set", p.count()),
                    "keep one of them: preset for the study's sizes, count for any other",
                ));
            }
            _ => {}
        }
        let source = self.source;
        if source == PromptSource::File && self.path.is_none() {
            return Err(bad(
                "prompts.path",
                "source = \"file\" needs a path".into(),
                "set path = \"prompts.jsonl\" (JSONL with a \"prompt\" and an optional \"reference\" field, or \
                 plain text)",
            ));
        }
        if source != PromptSource::File && self.path.is_some() {
            return Err(bad(
                "prompts.path",
                format!("a path is only read with source = \"file\" (source is {source:?})"),
                "remove path, or set source = \"file\"",
            ));
        }
        let wikitext_only = [
            ("prompts.dataset", self.dataset.is_some()),
            ("prompts.revision", self.revision.is_some()),
            ("prompts.min_chars", self.min_chars.is_some()),
        ];
        if source != PromptSource::Wikitext
            && let Some((field, _)) = wikitext_only.iter().find(|(_, set)| *set)
        {
            return Err(bad(
                field,
                format!("only used with source = \"wikitext\" (source is {source:?})"),
                "remove it, or set source = \"wikitext\"",
            ));
        }
        let id = self.dataset();
        if id.split('/').count() > 2 || id.split('/').any(str::is_empty) || id.contains(char::is_whitespace) {
            return Err(bad(
                "prompts.dataset",
                format!("{id:?} is not a hub dataset id"),
                "use ORG/NAME, e.g. dataset = \"Salesforce/wikitext\"",
            ));
        }
        if self.revision().trim().is_empty() {
            return Err(bad("prompts.revision", "empty revision".into(), "use a branch, tag or commit, e.g. \"main\""));
        }
        if self.min_chars == Some(0) {
            return Err(bad(
                "prompts.min_chars",
                "0 would admit empty documents".into(),
                "use e.g. 6000 (the default), or more for N above 1024",
            ));
        }
        Ok(())
    }
}

/// How a sequence length N splits into prompt and output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthSplit {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens (N_out).
    pub output_tokens: u32,
}

/// The axes of the grid and the generation settings shared by every cell.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GridAxes {
    /// Total sequence lengths N (prompt + output tokens).
    pub seq_lengths: Vec<u32>,
    /// Batch sizes B.
    pub batch_sizes: Vec<u32>,
    /// LLaDA diffusion steps K of the K-driven sampler series (`reference`, `prefix`, `dual`).
    #[serde(default)]
    pub steps: Vec<u32>,
    /// Since 1.5: the LLaDA sampler series, each a series of its own: `reference` (one full forward per step, the
    /// default), `prefix` and `dual` (a block KV cache refreshed by a full forward at every block's start), run at
    /// every K of `steps`; `threshold`, `prefix+threshold` and `dual+threshold` (confidence-threshold parallel
    /// decoding, forwards measured), run at every value of `thresholds`. Written only when it is not the default.
    #[serde(default = "default_samplers", skip_serializing_if = "is_default_samplers")]
    pub samplers: Vec<SamplerVariant>,
    /// Since 1.5: confidence thresholds of the threshold series (each finite and >= 0; above 1 commits one token
    /// per step, 0 a whole block per step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<f64>,
    /// Since 1.5: the decoding rules of Dream's sampler (its `alg`) to measure, each a series of its own, run at
    /// every K of `steps`: `origin`, `maskgit_plus`, `topk_margin`, `entropy` (the default, the rule Dream's
    /// examples use). Used by `dream` models only; written only when it is not the default.
    #[serde(default = "default_dream_algs", skip_serializing_if = "is_default_dream_algs")]
    pub dream_algs: Vec<DreamAlg>,
    /// Since 1.5: Dream's nucleus filter: before a step's prediction, only the most probable tokens whose
    /// cumulative probability first reaches `top_p` are kept (in (0, 1]; absent or 1: none). Used by `dream`
    /// models only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Fixed number of generated tokens N_out; prompt tokens = N - N_out. Exclusive with `prompt_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u32>,
    /// Fraction of N given to the prompt (e.g. 0.5); the rest is generated. Exclusive with `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_fraction: Option<f64>,
    /// LLaDA block length; default: the whole output is one block (the paper's Base setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_length: Option<u32>,
    /// LLaDA remasking rule.
    #[serde(default)]
    pub remasking: Remasking,
    /// Sampling temperature; 0 is greedy (the study's setting).
    #[serde(default)]
    pub temperature: f64,
    /// LLaDA classifier-free guidance scale (the reference sampler's `cfg_scale`); 0 (the default, the study's
    /// setting) is none. With s > 0 every step also runs the unconditional pass (the prompt masked) and uses
    /// `un + (s + 1) * (cond - un)`: twice the forward evaluations, recorded per repetition.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cfg_scale: f64,
    /// LLaDA: the precision of the low-confidence ranking (`f32`, the default; `f64` as the reference sampler;
    /// `logits`). Always written into a bundle's embedded config; bundles of formats before 1.4 read as `f64`,
    /// what their runners did.
    #[serde(default)]
    pub confidence: Confidence,
    /// LLaDA with temperature > 0: where the Gumbel noise is drawn (`device`, the default; `host`, the same samples
    /// on every device). Always written into a bundle's embedded config; bundles of formats before 1.4 read as
    /// `host`, what their runners did.
    #[serde(default)]
    pub gumbel_noise: GumbelNoise,
    /// AR behaviour at EOS.
    #[serde(default)]
    pub eos: EosPolicy,
}

fn default_samplers() -> Vec<SamplerVariant> {
    vec![SamplerVariant::Reference]
}

fn is_default_samplers(v: &[SamplerVariant]) -> bool {
    v == [SamplerVariant::Reference]
}

fn default_dream_algs() -> Vec<DreamAlg> {
    vec![DreamAlg::Entropy]
}

fn is_default_dream_algs(v: &[DreamAlg]) -> bool {
    v == [DreamAlg::Entropy]
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// How runs are executed and measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSettings {
    /// Name of the run: prefix of the bundle's file name.
    pub name: String,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
    /// Precision of the run.
    pub dtype: Precision,
    /// Unmeasured runs before each cell's measurements.
    pub warmup: u32,
    /// Measured runs per cell.
    pub repetitions: u32,
    /// Seed for everything random in the run (prompt selection, random remasking, sampling).
    #[serde(default)]
    pub seed: u64,
    /// Upcast q, k and v to f32 for the attention product and softmax, for both models (default: attention in
    /// the run's precision). Recorded in the bundle's `attention`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attention_f32: bool,
}

fn default_device() -> String {
    "cpu".to_string()
}

/// A whole grid configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GridConfig {
    /// Run settings.
    pub run: RunSettings,
    /// The prompt set. Not read by wasm32 builds, nor are `grid` and `models`: the explorer shows the bundle's
    /// own cells, models and prompt set, and from the config reads only `run` and `quality` (S_parity's options).
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub prompts: PromptConfig,
    /// The grid's axes.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub grid: GridAxes,
    /// The models compared.
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub models: Vec<ModelSpec>,
    /// Quality measurement; absent: quality is not measured (timing only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualityConfig>,
}

/// How the quality of the generations is measured (the `[quality]` table).
///
/// In each group of cells that differ only in the batch size (same model, sampler, N and K), the cell with the
/// largest B generates one continuation per prompt of the set (its timed repetitions, then unmeasured batches for
/// the prompts they did not cover). Text statistics (unigram entropy, distinct-n, overlap with the reference) are
/// computed at once; after every model's cells, each evaluator is loaded and scores the continuations'
/// perplexity. S_parity and the speedup come from these values (see `metrics::parity`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QualityConfig {
    /// Models that score the generative perplexity (Llama-layout checkpoints); the first is the primary. An entry
    /// with only the `id` of a llama model of `[[models]]` reuses that model.
    #[serde(default)]
    pub evaluators: Vec<EvaluatorSpec>,
    /// Metric that defines S_parity: `perplexity` (of the primary evaluator) or a text metric such as
    /// `rouge_l_f1`.
    #[serde(default = "default_parity_metric")]
    pub parity_metric: String,
    /// Bootstrap resamples over prompts for the 95% intervals (seeded with `run.seed`).
    #[serde(default = "default_resamples")]
    pub bootstrap_resamples: u32,
    /// Refine S_parity by bisection: run extra K values between the grid's last miss and S_parity, recorded like
    /// any other cells (`dllm-bench run --parity-search`).
    #[serde(default)]
    pub parity_search: bool,
    /// Precision the evaluators score perplexity in (default `f32`, whatever the run's precision: bf16 moves a
    /// perplexity by up to 1.4% on small models, which is not the model's quality). A resolved config (the one a
    /// bundle embeds) always states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Precision>,
}

impl QualityConfig {
    /// The evaluators' precision: `dtype`, else f32.
    pub fn evaluator_dtype(&self) -> Precision {
        self.dtype.unwrap_or(Precision::F32)
    }
}

fn default_parity_metric() -> String {
    "perplexity".to_string()
}

fn default_resamples() -> u32 {
    DEFAULT_BOOTSTRAP_RESAMPLES
}

/// Bootstrap resamples when `quality.bootstrap_resamples` is not set.
pub const DEFAULT_BOOTSTRAP_RESAMPLES: u32 = 1000;

/// A model that scores generations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EvaluatorSpec {
    /// Hub repository id, e.g. `meta-llama/Meta-Llama-3-8B`.
    pub id: String,
    /// Hub revision; default: the revision of the `[[models]]` entry with this id, else `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Synthetic weights of these shapes under `id` (as for models; not read by wasm32 builds either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub synthetic: Option<SyntheticWeights>,
}

impl GridConfig {
    /// The evaluators as model specs (Llama layout), in config order; none without a `[quality]` table.
    pub fn evaluators(&self) -> Vec<ModelSpec> {
        let Some(q) = &self.quality else { return Vec::new() };
        q.evaluators
            .iter()
            .map(|e| match self.models.iter().find(|m| m.id == e.id) {
                Some(m) if e.revision.is_none() && e.synthetic.is_none() => m.clone(),
                _ => ModelSpec {
                    kind: ModelKind::Llama,
                    id: e.id.clone(),
                    revision: e.revision.clone().unwrap_or_else(default_revision),
                    synthetic: e.synthetic.clone(),
                },
            })
            .collect()
    }
}

/// A config that cannot be used, with the file, the field and the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, or a field of the wrong type, unknown, or missing.
    #[error("{file}: {message}\n  fix: compare with config/experiments.toml, which documents every field")]
    Parse {
        /// The file (or `--flag` / `embedded:NAME`).
        file: String,
        /// The parser's message, with line, column and key.
        message: String,
    },
    /// Parsed, but a value is not allowed.
    #[error("{file}: field `{field}`: {problem}\n  fix: {fix}")]
    Invalid {
        /// The file (or `--flag` / `embedded:NAME`).
        file: String,
        /// Dotted path of the field, e.g. `grid.steps`.
        field: String,
        /// What is wrong, with the value.
        problem: String,
        /// What to do.
        fix: String,
    },
}

/// Parsed device string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU.
    Cpu,
    /// CUDA device with this ordinal.
    Cuda(usize),
}

impl DeviceSpec {
    /// Parses `cpu`, `cuda` or `cuda:N`.
    pub fn parse(s: &str) -> Option<DeviceSpec> {
        match s {
            "cpu" => Some(DeviceSpec::Cpu),
            "cuda" => Some(DeviceSpec::Cuda(0)),
            _ => s.strip_prefix("cuda:")?.parse().ok().map(DeviceSpec::Cuda),
        }
    }
}

/// The largest values a config (and a bundle's embedded config) may hold. Beyond them no model or machine the
/// study runs on can hold the work, and the runner would abort on an allocation or run for days inside one
/// repetition; validation refuses them, naming the field and the limit.
pub mod limits {
    /// Longest sequence length N: the longest context of the model families the runner loads (Llama-3.1's 128K).
    pub const SEQ_LEN: u32 = 131_072;
    /// Largest batch size B.
    pub const BATCH_SIZE: u32 = 4096;
    /// Most diffusion steps per generated token: past one step per token a step commits nothing, so K above
    /// this multiple of N_out only repeats forward passes.
    pub const STEPS_PER_OUTPUT_TOKEN: u32 = 16;
    /// Most warm-up runs per cell.
    pub const WARMUP: u32 = 1000;
    /// Most measured runs per cell.
    pub const REPETITIONS: u32 = 10_000;
    /// Most prompts in a set.
    pub const PROMPTS: u32 = 1_000_000;
    /// Most bootstrap resamples.
    pub const BOOTSTRAP_RESAMPLES: u32 = 1_000_000;
    /// Most prompt draws of a whole bootstrap (resamples x prompts): each draw pools every cell group's
    /// per-prompt values, so this bounds the time `report` and the writers spend on intervals (minutes at most).
    pub const BOOTSTRAP_DRAWS: u64 = 100_000_000;
    /// Highest sampling temperature (logits divided by more than this are noise).
    pub const TEMPERATURE: f64 = 100.0;
    /// Highest classifier-free guidance scale.
    pub const CFG_SCALE: f64 = 100.0;
    /// Longest run name (it prefixes file names: NAME-STAMP.json must fit a file system's 255 bytes).
    pub const RUN_NAME_CHARS: usize = 100;
    /// Longest model id or revision.
    pub const ID_CHARS: usize = 200;
    /// Synthetic checkpoints: most layers.
    pub const SYNTH_LAYERS: u32 = 1024;
    /// Synthetic checkpoints: largest hidden size.
    pub const SYNTH_HIDDEN: u32 = 65_536;
    /// Synthetic checkpoints: most safetensors shards.
    pub const SYNTH_SHARDS: u32 = 1024;
    /// Most shards of a grid (`--shard I/N`).
    pub const SHARDS: u32 = 100_000;
}

/// Why `id` is not a usable hub repository id (`ORG/NAME` or `NAME`: letters, digits, `-`, `_`, `.`), if not.
pub fn hub_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("the id is empty".into());
    }
    if id.chars().count() > limits::ID_CHARS {
        return Some(format!("the id has {} characters, more than {}", id.chars().count(), limits::ID_CHARS));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_./".contains(*c))) {
        return Some(format!("{id:?} contains {c:?}; a hub id has only letters, digits, '-', '_', '.' and one '/'"));
    }
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 || parts.iter().any(|p| p.is_empty() || *p == "." || *p == ".." || p.starts_with('.')) {
        return Some(format!("{id:?} is not ORG/NAME"));
    }
    None
}

/// Why `rev` is not a usable revision (branch, tag or commit), if not.
pub fn revision_problem(rev: &str) -> Option<String> {
    if rev.trim().is_empty() {
        return Some("the revision is empty".into());
    }
    if rev.chars().count() > limits::ID_CHARS {
        return Some(format!("the revision has {} characters, more than {}", rev.chars().count(), limits::ID_CHARS));
    }
    if let Some(c) = rev.chars().find(|c| c.is_control() || c.is_whitespace() || "\\:*?\"<>|".contains(*c)) {
        return Some(format!("{rev:?} contains {c:?}, which no branch, tag or commit has"));
    }
    if rev.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return Some(format!("{rev:?} has an empty, '.' or '..' path component"));
    }
    None
}

/// The limits of a `synthetic` table (`field` names it).
fn validate_synthetic(
    s: &SyntheticWeights,
    field: &str,
    bad: &impl Fn(&str, String, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    for (name, value, limit) in [
        ("shards", s.shards, limits::SYNTH_SHARDS),
        ("layers", s.layers, limits::SYNTH_LAYERS),
        ("hidden", s.hidden, limits::SYNTH_HIDDEN),
    ] {
        match value {
            Some(0) => {
                return Err(bad(
                    &format!("{field}.{name}"),
                    "0 is not allowed".into(),
                    "use 1 or more, or remove it for the preset's value",
                ));
            }
            Some(v) if v > limit => {
                return Err(bad(
                    &format!("{field}.{name}"),
                    format!("{v} is more than the limit {limit}"),
                    "use a smaller value, or remove it for the preset's value",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first value of `values` that appears earlier in it: `(index, value)`.
fn first_duplicate(values: &[u32]) -> Option<(usize, u32)> {
    values.iter().enumerate().find(|(i, v)| values[..*i].contains(v)).map(|(i, &v)| (i, v))
}

impl GridConfig {
    /// Parses and validates a TOML config. `file` names it in errors.
    ///
    /// A hand-written config is strict: a field this version does not know is a typo, and an error. (The config
    /// embedded in a bundle is read leniently instead, as provenance: a bundle of a newer minor version may carry
    /// fields this build does not know, and the minor-version promise is that it still reads.)
    pub fn from_toml(text: &str, file: &str) -> Result<GridConfig, ConfigError> {
        let parse_err = |e: toml::de::Error| ConfigError::Parse {
            file: file.to_string(),
            // `[models]` for `[[models]]` fails wherever toml or serde notices it (often at the later, correct
            // table): named at the table that is wrong.
            message: table_for_array(text).unwrap_or_else(|| parse_message(text, &e)),
        };
        let mut unknown = Vec::new();
        let de = toml::Deserializer::parse(text).map_err(parse_err)?;
        let parsed: Result<GridConfig, _> = serde_ignored::deserialize(de, |path| unknown.push(path.to_string()));
        // An unknown field is reported first: a typo (`warmpu`) also makes its field missing.
        if let Some(path) = unknown.first() {
            let key = path.rsplit('.').next().unwrap_or(path);
            let line = text
                .lines()
                .position(|l| l.trim_start().trim_start_matches('"').starts_with(key))
                .map_or(String::new(), |i| format!("line {}: ", i + 1));
            return Err(ConfigError::Parse {
                file: file.to_string(),
                message: format!("{line}unknown field `{path}` (a typo, or a field of a newer dllm-bench)"),
            });
        }
        let mut config = parsed.map_err(parse_err)?;
        config.validate(file)?;
        config.check_used(file)?;
        // A preset is recorded as the count it stands for, so that every reader sees the number.
        config.prompts.count = config.prompts.prompt_count();
        Ok(config)
    }

    /// The TOML text of this config (the resolved form, overrides applied).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# config not representable as TOML: {e}"))
    }

    /// Refuses fields that would drive nothing: sampler series without a LLaDA model, Dream decoding rules
    /// without a Dream model, diffusion steps without either, a prompt seed without the Wikitext source. For a
    /// config given to the runner (and after its overrides), not for one a bundle embeds: bundles written before
    /// these rules stay readable.
    pub fn check_used(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: &str, fix: &str| ConfigError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            problem: problem.to_string(),
            fix: fix.to_string(),
        };
        let g = &self.grid;
        let has = |kind| self.models.iter().any(|m| m.kind == kind);
        let (has_llada, has_dream) = (has(ModelKind::Llada), has(ModelKind::Dream));
        if !has_llada && !is_default_samplers(&g.samplers) {
            return Err(bad(
                "grid.samplers",
                "sampler series apply to LLaDA models only, and the grid has none",
                "remove samplers (and --samplers), or add a LLaDA model to [[models]]",
            ));
        }
        if !has_dream && !is_default_dream_algs(&g.dream_algs) {
            return Err(bad(
                "grid.dream_algs",
                "Dream decoding rules apply to Dream models only, and the grid has none",
                "remove dream_algs, or add a Dream model to [[models]]",
            ));
        }
        if !has_llada && !has_dream && !g.steps.is_empty() {
            return Err(bad(
                "grid.steps",
                "diffusion steps drive LLaDA and Dream models only, and the grid has neither",
                "remove steps (and --steps), or add a diffusion model to [[models]]",
            ));
        }
        if self.prompts.seed != 0 && self.prompts.source != PromptSource::Wikitext {
            return Err(bad(
                "prompts.seed",
                "only the Wikitext selection is seeded (a file's and the embedded prompts are taken in order)",
                "remove seed, or set source = \"wikitext\"",
            ));
        }
        Ok(())
    }

    /// Checks every rule the runner relies on. `file` names the config in errors.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |field: &str, problem: String, fix: &str| ConfigError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            problem,
            fix: fix.to_string(),
        };
        let run = &self.run;
        if run.name.is_empty()
            || run.name.starts_with('.')
            || !run.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad(
                "run.name",
                format!("{:?} is not a usable file-name prefix", run.name),
                "use letters, digits, '-', '_' or '.' (not first), e.g. name = \"experiments\"",
            ));
        }
        if run.name.len() > limits::RUN_NAME_CHARS {
            return Err(bad(
                "run.name",
                format!(
                    "{} characters, more than {} (the name prefixes file names)",
                    run.name.len(),
                    limits::RUN_NAME_CHARS
                ),
                "use a shorter name",
            ));
        }
        if DeviceSpec::parse(&run.device).is_none() {
            return Err(bad(
                "run.device",
                format!("{:?} is not a device", run.device),
                "use \"cpu\", \"cuda\" or \"cuda:N\" (N = the GPU's ordinal)",
            ));
        }
        if run.repetitions == 0 {
            return Err(bad(
                "run.repetitions",
                "0 measured runs would measure nothing".into(),
                "set repetitions to 1 or more (the study uses 5 or more on GPUs)",
            ));
        }
        for (field, value, limit) in
            [("run.repetitions", run.repetitions, limits::REPETITIONS), ("run.warmup", run.warmup, limits::WARMUP)]
        {
            if value > limit {
                return Err(bad(field, format!("{value} is more than the limit {limit}"), "use a smaller value"));
            }
        }
        if self.prompts.prompt_count() > limits::PROMPTS {
            return Err(bad(
                "prompts.count",
                format!("{} prompts, more than the limit {}", self.prompts.prompt_count(), limits::PROMPTS),
                "use a smaller count (the study's largest set has 128)",
            ));
        }
        self.prompts.validate(bad)?;
        let g = &self.grid;
        for (field, values, limit) in [
            ("grid.seq_lengths", &g.seq_lengths, limits::SEQ_LEN),
            ("grid.batch_sizes", &g.batch_sizes, limits::BATCH_SIZE),
        ] {
            if values.is_empty() {
                return Err(bad(field, "the list is empty".into(), "list at least one value"));
            }
            if let Some(i) = values.iter().position(|&v| v == 0) {
                return Err(bad(&format!("{field}[{i}]"), "0 is not allowed".into(), "use values of 1 or more"));
            }
            if let Some(i) = values.iter().position(|&v| v > limit) {
                return Err(bad(
                    &format!("{field}[{i}]"),
                    format!("{} is more than the limit {limit}", values[i]),
                    "use smaller values",
                ));
            }
        }
        for (field, values) in
            [("grid.seq_lengths", &g.seq_lengths), ("grid.batch_sizes", &g.batch_sizes), ("grid.steps", &g.steps)]
        {
            if let Some((i, v)) = first_duplicate(values) {
                return Err(bad(
                    &format!("{field}[{i}]"),
                    format!("{v} is listed twice (two cells would have one key)"),
                    "list each value once",
                ));
            }
        }
        match (g.output_tokens, g.prompt_fraction) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(bad(
                    "grid.output_tokens",
                    "exactly one of output_tokens and prompt_fraction must be set".into(),
                    "set output_tokens = 128 (fixed N_out, prompt = N - N_out) or prompt_fraction = 0.5",
                ));
            }
            (Some(0), _) => {
                return Err(bad(
                    "grid.output_tokens",
                    "0 tokens: every cell generates at least one".into(),
                    "set output_tokens = 128 (the study's N_out), or another positive number",
                ));
            }
            (_, Some(f)) if !(f > 0.0 && f < 1.0) => {
                return Err(bad(
                    "grid.prompt_fraction",
                    format!("{f} is not strictly between 0 and 1"),
                    "use e.g. 0.5 (half prompt, half generation)",
                ));
            }
            _ => {}
        }
        if !(g.temperature >= 0.0 && g.temperature <= limits::TEMPERATURE) {
            return Err(bad(
                "grid.temperature",
                format!("{} is not a temperature", g.temperature),
                &format!(
                    "use 0 (greedy, the study's setting) or a small positive value such as 0.1 (at most {})",
                    limits::TEMPERATURE
                ),
            ));
        }
        if !(g.cfg_scale >= 0.0 && g.cfg_scale <= limits::CFG_SCALE) {
            return Err(bad(
                "grid.cfg_scale",
                format!("{} is not a guidance scale", g.cfg_scale),
                &format!("use 0 (no guidance, the default) or a positive scale up to {}", limits::CFG_SCALE),
            ));
        }
        if self.models.is_empty() {
            return Err(bad(
                "models",
                "no models".into(),
                "add [[models]] tables with kind = \"llama\", \"llada\" or \"dream\" and an id",
            ));
        }
        for (i, m) in self.models.iter().enumerate() {
            if let Some(problem) = hub_id_problem(&m.id) {
                return Err(bad(&format!("models[{i}].id"), problem, "use a hub id such as \"GSAI-ML/LLaDA-8B-Base\""));
            }
            if let Some(problem) = revision_problem(&m.revision) {
                return Err(bad(
                    &format!("models[{i}].revision"),
                    problem,
                    "use a branch, tag or commit, e.g. \"main\"",
                ));
            }
            if self.models[..i].iter().any(|o| o.id == m.id) {
                return Err(bad(
                    &format!("models[{i}].id"),
                    format!(
                        "{} is listed twice (cells are keyed by the model id, so two revisions would share keys)",
                        m.id
                    ),
                    "list each model once; compare two revisions of one model in two runs",
                ));
            }
            if let Some(s) = &m.synthetic {
                validate_synthetic(s, &format!("models[{i}].synthetic"), &bad)?;
            }
        }
        if let Some(q) = &self.quality {
            for (i, e) in q.evaluators.iter().enumerate() {
                let field = format!("quality.evaluators[{i}]");
                match self.models.iter().find(|m| m.id == e.id) {
                    Some(m) if m.kind != ModelKind::Llama => {
                        return Err(bad(
                            &format!("{field}.id"),
                            format!("{} is a {:?} model; an evaluator scores text left to right", e.id, m.kind),
                            "name a Llama-layout checkpoint, e.g. id = \"meta-llama/Meta-Llama-3-8B\"",
                        ));
                    }
                    Some(m) if e.synthetic.is_some() || e.revision.as_ref().is_some_and(|r| *r != m.revision) => {
                        return Err(bad(
                            &field,
                            format!("{} is also a measured model; it cannot have its own revision or weights", e.id),
                            "give only the id to reuse the measured model, or use another id",
                        ));
                    }
                    _ => {}
                }
                if let Some(problem) = hub_id_problem(&e.id) {
                    return Err(bad(
                        &format!("{field}.id"),
                        problem,
                        "use a hub id such as \"meta-llama/Meta-Llama-3-8B\"",
                    ));
                }
                if let Some(problem) = e.revision.as_deref().and_then(revision_problem) {
                    return Err(bad(
                        &format!("{field}.revision"),
                        problem,
                        "use a branch, tag or commit, e.g. \"main\"",
                    ));
                }
                if let Some(s) = &e.synthetic {
                    validate_synthetic(s, &format!("{field}.synthetic"), &bad)?;
                }
                if q.evaluators[..i].iter().any(|o| o.id == e.id) {
                    return Err(bad(&format!("{field}.id"), format!("{} is listed twice", e.id), "list it once"));
                }
            }
            let text_metrics = ["unigram_entropy", "distinct_1", "distinct_2", "rouge_l_f1", "token_f1"];
            let m = q.parity_metric.as_str();
            if m == "perplexity" && q.evaluators.is_empty() {
                return Err(bad(
                    "quality.parity_metric",
                    "perplexity needs an evaluator, and quality.evaluators is empty".into(),
                    "add [[quality.evaluators]] id = \"meta-llama/Meta-Llama-3-8B\", or use parity_metric = \
                     \"rouge_l_f1\"",
                ));
            }
            if m != "perplexity" && !text_metrics.contains(&m) {
                return Err(bad(
                    "quality.parity_metric",
                    format!("unknown metric {m:?}"),
                    &format!("use \"perplexity\" or one of {}", text_metrics.join(", ")),
                ));
            }
            let draws = u64::from(q.bootstrap_resamples) * u64::from(self.prompts.prompt_count());
            if draws > limits::BOOTSTRAP_DRAWS {
                return Err(bad(
                    "quality.bootstrap_resamples",
                    format!(
                        "{} resamples of {} prompts are {draws} draws, more than the limit {}",
                        q.bootstrap_resamples,
                        self.prompts.prompt_count(),
                        limits::BOOTSTRAP_DRAWS
                    ),
                    "use fewer resamples (1000, the default, gives stable 95% intervals)",
                ));
            }
            if q.bootstrap_resamples == 0 || q.bootstrap_resamples > limits::BOOTSTRAP_RESAMPLES {
                return Err(bad(
                    "quality.bootstrap_resamples",
                    format!(
                        "{} resamples: 0 give no interval, more than {} only take time",
                        q.bootstrap_resamples,
                        limits::BOOTSTRAP_RESAMPLES
                    ),
                    "use 1000 (the default), or up to 100000",
                ));
            }
        }
        let has_llada = self.models.iter().any(|m| m.kind == ModelKind::Llada);
        let has_dream = self.models.iter().any(|m| m.kind == ModelKind::Dream);
        if g.dream_algs.is_empty() {
            return Err(bad(
                "grid.dream_algs",
                "no Dream decoding rule".into(),
                "list at least one of \"origin\", \"maskgit_plus\", \"topk_margin\", \"entropy\" (default [\"entropy\"])",
            ));
        }
        if let Some(j) = (1..g.dream_algs.len()).find(|&j| g.dream_algs[..j].contains(&g.dream_algs[j])) {
            return Err(bad(
                &format!("grid.dream_algs[{j}]"),
                format!("{} is listed twice", g.dream_algs[j]),
                "list each rule once",
            ));
        }
        if let Some(p) = g.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(bad(
                "grid.top_p",
                format!("{p} is not in (0, 1]"),
                "use e.g. 0.95, or remove it (no nucleus filter)",
            ));
        }
        if has_dream && g.steps.is_empty() {
            return Err(bad(
                "grid.steps",
                "a Dream model needs diffusion steps".into(),
                "list steps, e.g. [32, 64, 128]",
            ));
        }
        if g.samplers.is_empty() {
            return Err(bad(
                "grid.samplers",
                "no sampler series".into(),
                "list at least one, e.g. [\"reference\"] (the default when the field is absent)",
            ));
        }
        if let Some(j) = (1..g.samplers.len()).find(|&j| g.samplers[..j].contains(&g.samplers[j])) {
            return Err(bad(
                &format!("grid.samplers[{j}]"),
                format!("{} is listed twice", g.samplers[j]),
                "list each series once",
            ));
        }
        let k_driven = g.samplers.iter().any(|v| !v.thresholded());
        let thresholded = g.samplers.iter().any(|v| v.thresholded());
        if has_llada && k_driven && g.steps.is_empty() {
            return Err(bad(
                "grid.steps",
                "a LLaDA model needs diffusion steps".into(),
                "list steps, e.g. [32, 64, 128]",
            ));
        }
        if has_llada && !has_dream && !k_driven && !g.steps.is_empty() {
            return Err(bad(
                "grid.steps",
                "only threshold series are listed in grid.samplers: steps would drive nothing".into(),
                "remove steps, or add a K-driven series (\"reference\", \"prefix\" or \"dual\") to samplers",
            ));
        }
        if has_llada && thresholded && g.thresholds.is_empty() {
            return Err(bad(
                "grid.thresholds",
                "a threshold series is listed in grid.samplers but no threshold".into(),
                "list thresholds, e.g. [0.9, 0.7, 0.5]",
            ));
        }
        if !thresholded && !g.thresholds.is_empty() {
            return Err(bad(
                "grid.thresholds",
                "thresholds drive only the threshold series, and grid.samplers lists none".into(),
                "add \"threshold\" or \"prefix+threshold\" to samplers, or remove thresholds",
            ));
        }
        for (j, &t) in g.thresholds.iter().enumerate() {
            if !(t.is_finite() && t >= 0.0) {
                return Err(bad(
                    &format!("grid.thresholds[{j}]"),
                    format!("{t} is not a finite number >= 0"),
                    "use a confidence in [0, 1], e.g. 0.9 (above 1 commits one token per step)",
                ));
            }
            if g.thresholds[..j].iter().any(|&u| u.to_bits() == t.to_bits()) {
                return Err(bad(&format!("grid.thresholds[{j}]"), format!("{t} is listed twice"), "list each once"));
            }
        }
        for (i, &n) in g.seq_lengths.iter().enumerate() {
            let split = self.split(n).ok_or_else(|| {
                bad(
                    &format!("grid.seq_lengths[{i}]"),
                    match g.output_tokens {
                        Some(out) => format!("N = {n} leaves no prompt tokens with output_tokens = {out}"),
                        None => format!("N = {n} leaves no prompt or no output tokens at this prompt_fraction"),
                    },
                    match g.output_tokens {
                        Some(_) => "use sequence lengths larger than output_tokens, or prompt_fraction for short N",
                        None => "use longer sequence lengths, or a prompt_fraction nearer 0.5",
                    },
                )
            })?;
            if !has_llada && !has_dream {
                continue;
            }
            // Dream generates its whole output as one block (its sampler has no blocks).
            let block = if has_llada { g.block_length.unwrap_or(split.output_tokens) } else { split.output_tokens };
            if block == 0 || split.output_tokens % block != 0 {
                return Err(bad(
                    "grid.block_length",
                    format!("{block} does not divide the {} output tokens of N = {n}", split.output_tokens),
                    "choose a block_length that divides output_tokens, or remove it (one block)",
                ));
            }
            let blocks = split.output_tokens / block;
            let most = split.output_tokens.saturating_mul(limits::STEPS_PER_OUTPUT_TOKEN);
            if let Some(j) = g.steps.iter().position(|&k| k > most) {
                return Err(bad(
                    &format!("grid.steps[{j}]"),
                    format!(
                        "{} steps for {} output tokens at N = {n}: more than {} steps per token, where steps past \
                         one per token commit nothing",
                        g.steps[j],
                        split.output_tokens,
                        limits::STEPS_PER_OUTPUT_TOKEN
                    ),
                    &format!("use at most {most} steps (K = N_out is one token per step)"),
                ));
            }
            for (j, &k) in g.steps.iter().enumerate() {
                if k == 0 || k % blocks != 0 {
                    return Err(bad(
                        &format!("grid.steps[{j}]"),
                        format!(
                            "{k} steps is not a positive multiple of the {blocks} blocks \
                             (output_tokens {} / block_length {block}) at N = {n}",
                            split.output_tokens
                        ),
                        &format!("use steps that are multiples of {blocks}, or a larger block_length"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Splits a sequence length into prompt and output tokens; `None` when either would be empty.
    pub fn split(&self, seq_len: u32) -> Option<LengthSplit> {
        let g = &self.grid;
        let (prompt, output) = match (g.output_tokens, g.prompt_fraction) {
            (Some(out), _) => (seq_len.checked_sub(out)?, out),
            (None, Some(f)) => {
                let prompt = (f64::from(seq_len) * f).round() as u32;
                (prompt, seq_len.checked_sub(prompt)?)
            }
            (None, None) => return None,
        };
        (prompt > 0 && output > 0).then_some(LengthSplit { prompt_tokens: prompt, output_tokens: output })
    }

    /// Every cell of the grid, in the order the runner measures them: per model, per N, per B, per sampler series, per K (or threshold).
    /// Call only on a validated config (invalid lengths are skipped).
    pub fn cells(&self) -> Vec<CellKey> {
        let g = &self.grid;
        let mut cells = Vec::new();
        for m in &self.models {
            for &n in &g.seq_lengths {
                let Some(split) = self.split(n) else { continue };
                for &b in &g.batch_sizes {
                    let key = |sampler, steps, block_length| CellKey {
                        model: m.id.clone(),
                        sampler,
                        steps,
                        batch_size: b,
                        seq_len: n,
                        prompt_tokens: split.prompt_tokens,
                        output_tokens: split.output_tokens,
                        block_length,
                        cache: None,
                        threshold: None,
                    };
                    match m.kind {
                        ModelKind::Llama => cells.push(key(Sampler::ArGreedy, None, None)),
                        ModelKind::Llada => {
                            let sampler = match g.remasking {
                                Remasking::LowConfidence => Sampler::LladaLowConfidence,
                                Remasking::Random => Sampler::LladaRandom,
                            };
                            let block = g.block_length.unwrap_or(split.output_tokens);
                            for v in &g.samplers {
                                let cache = v.cache();
                                if v.thresholded() {
                                    for &t in &g.thresholds {
                                        let threshold = Some(Threshold(t));
                                        cells.push(CellKey { cache, threshold, ..key(sampler, None, Some(block)) });
                                    }
                                } else {
                                    for &k in &g.steps {
                                        cells.push(CellKey { cache, ..key(sampler, Some(k), Some(block)) });
                                    }
                                }
                            }
                        }
                        ModelKind::Dream => {
                            for alg in &g.dream_algs {
                                for &k in &g.steps {
                                    cells.push(key(alg.sampler(), Some(k), Some(split.output_tokens)));
                                }
                            }
                        }
                    }
                }
            }
        }
        cells
    }
}

/// The first `[name]` table header where `name` is a list of tables (`[[models]]`, `[[quality.evaluators]]`, or
/// any name the text also writes as `[[name]]`), as an error message naming its line; `None` when there is none.
fn table_for_array(text: &str) -> Option<String> {
    const ARRAYS: [&str; 2] = ["models", "quality.evaluators"];
    let header = |line: &str| line.split('#').next().unwrap_or("").trim().to_string();
    let headers: Vec<String> = text.lines().map(header).collect();
    headers.iter().enumerate().find_map(|(i, h)| {
        let name = h.strip_prefix('[')?.strip_suffix(']')?.trim();
        if name.starts_with('[') {
            return None;
        }
        let listed = ARRAYS.contains(&name) || headers.iter().any(|g| *g == format!("[[{name}]]"));
        listed.then(|| {
            format!(
                "line {}: `[{name}]` is one table, but `{name}` is a list of tables; fix: write `[[{name}]]` (two \
                 brackets) before each entry",
                i + 1
            )
        })
    })
}

/// A toml error as one line with its position.
fn parse_message(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let snippet = text.lines().nth(line - 1).unwrap_or("").trim();
            format!("line {line}, column {col}: {msg} (at `{snippet}`)")
        }
        None => msg,
    }
}
