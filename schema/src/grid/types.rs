//! The serde types of a grid config: the `[run]`, `[prompts]`, `[grid]`, `[[models]]` and `[quality]` tables,
//! their defaults and accessors, and the parsed device string.

use serde::{Deserialize, Serialize};

use crate::key::{DreamAlg, ModelKind, Precision, SamplerVariant};

/// What the AR model does when EOS is its greedy choice before N_out tokens (runner/MODEL.md, "Generation": the
/// study measures a fixed output length).
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

impl Remasking {
    /// Every rule, the default first.
    pub const ALL: [Remasking; 2] = [Self::LowConfidence, Self::Random];

    /// The name a config writes (`remasking = "random"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::LowConfidence => "low_confidence",
            Self::Random => "random",
        }
    }
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

impl Confidence {
    /// Every precision, the default first.
    pub const ALL: [Confidence; 3] = [Self::F32, Self::F64, Self::Logits];

    /// The name a config writes (`confidence = "f64"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::Logits => "logits",
        }
    }
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

impl GumbelNoise {
    /// Every source, the default first.
    pub const ALL: [GumbelNoise; 2] = [Self::Device, Self::Host];

    /// The name a config writes (`gumbel_noise = "host"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Device => "device",
            Self::Host => "host",
        }
    }
}

/// How attention is computed (`run.attention`), for both models alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttentionKernel {
    /// candle's ops: the scores as one batched matmul, the mask added, a softmax, the product with the values,
    /// each rounded to the attention's dtype (the default; the numbers the tests pin).
    #[default]
    Ops,
    /// One fused kernel per layer (the CPU's; a CUDA device refuses it): blocks of queries and keys with an
    /// online softmax in f32, the scores never stored. The same function with other roundings: tokens may differ
    /// from the ops path's in the last bits of a logit.
    Fused,
    /// cuDNN's fused attention on CUDA (a dllm-bench built with the `cudnn` feature; bf16 or f16) for forwards of
    /// more than one query (a prefill, a LLaDA step); a decode token keeps the ops. Flash attention: the scores
    /// never in memory, softmax and sums in f32.
    Cudnn,
}

impl AttentionKernel {
    /// Every kernel, in the order the docs list them.
    pub const ALL: [AttentionKernel; 3] = [Self::Ops, Self::Fused, Self::Cudnn];

    /// The name a config (and `--attention`) writes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ops => "ops",
            Self::Fused => "fused",
            Self::Cudnn => "cudnn",
        }
    }

    /// The kernel a name stands for (one of [`AttentionKernel::ALL`]'s names).
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|k| k.name()).collect();
            let (last, rest) = names.split_last().expect("ALL is not empty");
            format!("{name:?} is not an attention; use {} or {last}", rest.join(", "))
        })
    }

    /// Whether this is the default (left out of a written config).
    pub fn is_default(&self) -> bool {
        *self == Self::Ops
    }
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

pub(super) fn default_revision() -> String {
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

impl PromptSource {
    /// Every source, in the order the docs list them.
    pub const ALL: [PromptSource; 3] = [Self::Embedded, Self::Wikitext, Self::File];

    /// The name a config writes (`source = "wikitext"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Wikitext => "wikitext",
            Self::File => "file",
        }
    }
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
    /// Every preset, smallest first.
    pub const ALL: [PromptPreset; 3] = [Self::Small, Self::Medium, Self::Large];

    /// The name a config writes (`preset = "small"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }

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

pub(super) fn is_default_samplers(v: &[SamplerVariant]) -> bool {
    v == [SamplerVariant::Reference]
}

fn default_dream_algs() -> Vec<DreamAlg> {
    vec![DreamAlg::Entropy]
}

pub(super) fn is_default_dream_algs(v: &[DreamAlg]) -> bool {
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
    /// `ops` (default: candle's matmul, softmax, matmul), `fused` (one CPU kernel with an online softmax; refused
    /// on CUDA) or `cudnn` (cuDNN's fused attention; CUDA only). Recorded in the bundle's `attention`.
    #[serde(default, skip_serializing_if = "AttentionKernel::is_default")]
    pub attention: AttentionKernel,
    /// Llama's decode steps with static shapes (the cache position on the device, attention over the whole
    /// preallocated cache behind a length mask), captured once per generation as a CUDA graph and replayed: one
    /// launch a token instead of a thousand. CUDA only (refused on the CPU); off by default until a GPU run shows
    /// the same tokens as the eager decode and a speedup. Recorded in the bundle's `attention`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cuda_graphs: bool,
    /// RMSNorm, RoPE and SwiGLU as one CUDA kernel each (the runner's own, each computing what candle's CUDA ops
    /// compute) instead of candle's two to four ops. CUDA only (the CPU always fuses them); off by default until a
    /// GPU run shows the same tokens and a speedup. Recorded in the bundle's `attention`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cuda_fused_ops: bool,
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
    /// Since 1.9: BERTScore of each continuation against its prompt's true continuation, by a BERT or RoBERTa
    /// encoder (`[quality.bertscore]`); absent: not computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bertscore: Option<BertScoreSpec>,
}

/// BERTScore (Zhang et al., 2020, as the `bert_score` package computes it by default: greedy matching of the
/// contextual embeddings of one encoder layer, no idf weighting, no baseline rescaling) of each continuation
/// against the true continuation of its prompt. Stored as `bertscore_precision`, `bertscore_recall` and
/// `bertscore_f1` with the encoder's id as their evaluator; `quality.parity_metric = "bertscore_f1"` reads
/// S_parity on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BertScoreSpec {
    /// Hub repository id of a BERT or RoBERTa checkpoint, e.g. `FacebookAI/roberta-large` (the package's default
    /// for English).
    pub id: String,
    /// Hub revision (default `main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The encoder layer whose output is compared (the embeddings are layer 0). Default: the `bert_score`
    /// package's layer for the checkpoint ([`bertscore_default_layer`]); other checkpoints must name it. A resolved
    /// config (the one a bundle embeds) always states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// Random weights of a tiny RoBERTa under `id` (for tests and demos: the scores mean nothing). Not read by
    /// wasm32 builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(target_arch = "wasm32", serde(skip_deserializing))]
    pub synthetic: Option<SyntheticEncoder>,
}

impl BertScoreSpec {
    /// The layer compared: `layer`, else the `bert_score` package's for the checkpoint
    /// ([`bertscore_default_layer`]); `None` only for a config validation refuses.
    pub fn layer(&self) -> Option<u32> {
        self.layer.or_else(|| bertscore_default_layer(&self.id))
    }
}

/// A synthetic BERTScore encoder (`[quality.bertscore.synthetic]`): a RoBERTa of 2 layers and hidden size 64
/// unless said, random weights from `seed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyntheticEncoder {
    /// Seed of the random weights (deterministic).
    #[serde(default)]
    pub seed: u64,
    /// Number of layers (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<u32>,
}

/// The layer whose hidden states the `bert_score` package uses for a checkpoint (0.3.13, `bert_score/utils.py`
/// `model2layers`: its BERT and RoBERTa entries, chosen there by the correlation with human judgements); the hub's
/// namespaced ids of the same checkpoints (`FacebookAI/roberta-large`, `google-bert/bert-base-uncased`,
/// `distilbert/distilroberta-base`) get their old ids' layers. `None` for any other id, which must then name
/// `layer`.
pub fn bertscore_default_layer(id: &str) -> Option<u32> {
    let name = ["FacebookAI/", "google-bert/", "distilbert/"].iter().find_map(|ns| id.strip_prefix(ns)).unwrap_or(id);
    Some(match name {
        "bert-base-uncased" | "bert-base-cased-finetuned-mrpc" | "bert-base-multilingual-cased" => 9,
        "bert-large-uncased" => 18,
        "bert-base-chinese" => 8,
        "roberta-base" => 10,
        "roberta-large" => 17,
        "roberta-large-mnli" => 19,
        "roberta-base-openai-detector" => 7,
        "roberta-large-openai-detector" => 15,
        "distilroberta-base" => 5,
        _ => return None,
    })
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

#[cfg(test)]
mod tests {
    use super::{AttentionKernel, Confidence, GumbelNoise, PromptPreset, PromptSource, Remasking};

    #[test]
    fn the_default_bertscore_layers_are_the_packages() {
        for (id, layer) in [
            ("roberta-large", 17),
            ("FacebookAI/roberta-large", 17),
            ("roberta-base", 10),
            ("FacebookAI/roberta-base", 10),
            ("bert-base-uncased", 9),
            ("google-bert/bert-base-uncased", 9),
            ("bert-large-uncased", 18),
            ("google-bert/bert-large-uncased", 18),
            ("distilroberta-base", 5),
            ("distilbert/distilroberta-base", 5),
        ] {
            assert_eq!(super::bertscore_default_layer(id), Some(layer), "{id}");
        }
        assert_eq!(super::bertscore_default_layer("gpt2"), None);
        assert_eq!(super::bertscore_default_layer("someone/roberta-large"), None);
    }

    /// `value` serialized, and `name` quoted: equal when the name is the one a config writes.
    fn serde_and_name(value: impl serde::Serialize, name: &str) -> (String, String) {
        (serde_json::to_string(&value).unwrap(), format!("\"{name}\""))
    }

    #[test]
    fn names_in_messages_are_the_configs() {
        let mut pairs: Vec<(String, String)> = Vec::new();
        pairs.extend(PromptPreset::ALL.map(|v| serde_and_name(v, v.name())));
        pairs.extend(PromptSource::ALL.map(|v| serde_and_name(v, v.name())));
        pairs.extend(Remasking::ALL.map(|v| serde_and_name(v, v.name())));
        pairs.extend(Confidence::ALL.map(|v| serde_and_name(v, v.name())));
        pairs.extend(GumbelNoise::ALL.map(|v| serde_and_name(v, v.name())));
        for (serde, name) in pairs {
            assert_eq!(serde, name);
        }
    }

    #[test]
    fn attention_names_are_the_configs_and_parse_back() {
        for k in AttentionKernel::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
            assert_eq!(AttentionKernel::parse(k.name()), Ok(k));
        }
        assert_eq!(
            AttentionKernel::parse("flash").unwrap_err(),
            "\"flash\" is not an attention; use ops, fused or cudnn"
        );
    }
}
