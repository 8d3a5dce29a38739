//! The vocabulary shared by configs and bundles: model kinds, precisions, samplers, cell keys, and which way a
//! quality metric is better. It depends on nothing else in this crate, so `grid` and `bundle` both build on it
//! without importing each other in a circle.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The architecture family of a model, which decides how it generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Autoregressive decoder in the HF llama layout (Meta-Llama-3-8B): causal attention, GQA, KV cache.
    Llama,
    /// Masked-diffusion model in the LLaDA/OLMo layout (LLaDA-8B-Base): bidirectional attention, full MHA.
    Llada,
    /// Since 1.5: masked-diffusion model in the Qwen2 layout (Dream-v0-Base-7B): bidirectional attention, GQA,
    /// q/k/v biases, and Dream's shift: the logit at position i predicts token i + 1, so a masked position reads
    /// the logits of the position to its left.
    Dream,
}

impl ModelKind {
    /// The name a config and a bundle write (`llama`, `llada`, `dream`).
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Llama => "llama",
            ModelKind::Llada => "llada",
            ModelKind::Dream => "dream",
        }
    }

    /// `autoregressive` or `diffusion`.
    pub fn generation(self) -> &'static str {
        match self {
            ModelKind::Llama => "autoregressive",
            ModelKind::Llada | ModelKind::Dream => "diffusion",
        }
    }
}

/// Numeric precision of weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit float: the CPU validation configs.
    F32,
    /// bfloat16: the study's precision on GPUs.
    Bf16,
    /// IEEE half precision.
    F16,
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        })
    }
}

/// Which generation algorithm a cell ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// Autoregressive greedy decoding with a KV cache, exactly N_out tokens.
    ArGreedy,
    /// LLaDA's reference sampler with low-confidence remasking.
    LladaLowConfidence,
    /// LLaDA's reference sampler with random remasking.
    LladaRandom,
    /// Since 1.5: Dream's `diffusion_generate` with `alg = "origin"`: each masked position is committed with
    /// probability 1 - s/t at a step from time t to s (all at the last step).
    DreamOrigin,
    /// Since 1.5: Dream's sampler with `alg = "maskgit_plus"`: the most probable predictions are committed.
    DreamMaskgitPlus,
    /// Since 1.5: Dream's sampler with `alg = "topk_margin"`: ranked by the top-1 minus top-2 probability.
    DreamTopkMargin,
    /// Since 1.5: Dream's sampler with `alg = "entropy"`: ranked by the negative entropy of the prediction.
    DreamEntropy,
}

impl Sampler {
    /// The name a bundle writes (`ar_greedy`, `llada_low_confidence`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Sampler::ArGreedy => "ar_greedy",
            Sampler::LladaLowConfidence => "llada_low_confidence",
            Sampler::LladaRandom => "llada_random",
            Sampler::DreamOrigin => "dream_origin",
            Sampler::DreamMaskgitPlus => "dream_maskgit_plus",
            Sampler::DreamTopkMargin => "dream_topk_margin",
            Sampler::DreamEntropy => "dream_entropy",
        }
    }

    /// The architecture family that runs this sampler.
    pub fn kind(self) -> ModelKind {
        match self {
            Sampler::ArGreedy => ModelKind::Llama,
            Sampler::LladaLowConfidence | Sampler::LladaRandom => ModelKind::Llada,
            Sampler::DreamOrigin | Sampler::DreamMaskgitPlus | Sampler::DreamTopkMargin | Sampler::DreamEntropy => {
                ModelKind::Dream
            }
        }
    }
}

/// Since 1.5: the decoding rule of Dream's sampler (its `alg`), each a sampler series of the grid
/// (`grid.dream_algs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DreamAlg {
    /// Each masked position is committed with probability 1 - s/t (random, seeded).
    Origin,
    /// The positions whose prediction has the highest probability.
    MaskgitPlus,
    /// The positions with the largest margin between the top two probabilities.
    TopkMargin,
    /// The positions whose predictive distribution has the lowest entropy.
    Entropy,
}

impl DreamAlg {
    /// Every rule, in the order series are listed.
    pub const ALL: [DreamAlg; 4] = [DreamAlg::Origin, DreamAlg::MaskgitPlus, DreamAlg::TopkMargin, DreamAlg::Entropy];

    /// The sampler (the cell key's) that runs this rule.
    pub fn sampler(self) -> Sampler {
        match self {
            DreamAlg::Origin => Sampler::DreamOrigin,
            DreamAlg::MaskgitPlus => Sampler::DreamMaskgitPlus,
            DreamAlg::TopkMargin => Sampler::DreamTopkMargin,
            DreamAlg::Entropy => Sampler::DreamEntropy,
        }
    }

    /// The rule of a Dream sampler; `None` for the other samplers.
    pub fn of(sampler: Sampler) -> Option<DreamAlg> {
        DreamAlg::ALL.into_iter().find(|a| a.sampler() == sampler)
    }

    /// The name written in configs (Dream's `alg`).
    pub fn name(self) -> &'static str {
        match self {
            DreamAlg::Origin => "origin",
            DreamAlg::MaskgitPlus => "maskgit_plus",
            DreamAlg::TopkMargin => "topk_margin",
            DreamAlg::Entropy => "entropy",
        }
    }
}

impl fmt::Display for DreamAlg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Since 1.5: the block KV cache of a LLaDA sampler (Fast-dLLM's, written from its paper's description). At the
/// start of every block one full forward refreshes the cache; the block's other steps reuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BlockCache {
    /// The keys and values of everything before the block are kept; the other steps compute the block and
    /// everything after it.
    Prefix,
    /// The keys and values before and after the block are kept; the other steps compute only the block.
    Dual,
}

impl BlockCache {
    /// `prefix` or `dual`.
    pub fn name(self) -> &'static str {
        match self {
            BlockCache::Prefix => "prefix",
            BlockCache::Dual => "dual",
        }
    }
}

/// Since 1.5: the confidence threshold of parallel decoding: at each step every masked position of the block whose
/// confidence is at least this is committed (at least one per step). A finite number >= 0; above 1 commits one
/// token per step, 0 the whole block at once. Ordered and hashed by its bits, so it can key a cell.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Threshold(pub f64);

impl Threshold {
    /// The number.
    pub fn value(self) -> f64 {
        self.0
    }
}

impl PartialEq for Threshold {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Threshold {}

impl std::hash::Hash for Threshold {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.to_bits().hash(h);
    }
}

impl PartialOrd for Threshold {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Threshold {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Since 1.5: a LLaDA sampler series of the grid (`grid.samplers`): a block cache or none, a fixed number of
/// steps K (`grid.steps`) or a confidence threshold (`grid.thresholds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
pub enum SamplerVariant {
    /// The reference sampler: one full forward per step, K steps.
    #[serde(rename = "reference")]
    Reference,
    /// K steps, a prefix cache refreshed at every block's start.
    #[serde(rename = "prefix")]
    Prefix,
    /// K steps, a dual cache refreshed at every block's start.
    #[serde(rename = "dual")]
    Dual,
    /// Confidence-threshold decoding, no cache.
    #[serde(rename = "threshold")]
    Threshold,
    /// Confidence-threshold decoding with a prefix cache (Fast-dLLM's headline setting).
    #[serde(rename = "prefix+threshold")]
    PrefixThreshold,
    /// Confidence-threshold decoding with a dual cache.
    #[serde(rename = "dual+threshold")]
    DualThreshold,
}

impl SamplerVariant {
    /// Every variant, in the order series are listed.
    pub const ALL: [SamplerVariant; 6] = [
        SamplerVariant::Reference,
        SamplerVariant::Prefix,
        SamplerVariant::Dual,
        SamplerVariant::Threshold,
        SamplerVariant::PrefixThreshold,
        SamplerVariant::DualThreshold,
    ];

    /// The variant of a cache and a decoding rule.
    pub fn of(cache: Option<BlockCache>, threshold: bool) -> SamplerVariant {
        match (cache, threshold) {
            (None, false) => SamplerVariant::Reference,
            (Some(BlockCache::Prefix), false) => SamplerVariant::Prefix,
            (Some(BlockCache::Dual), false) => SamplerVariant::Dual,
            (None, true) => SamplerVariant::Threshold,
            (Some(BlockCache::Prefix), true) => SamplerVariant::PrefixThreshold,
            (Some(BlockCache::Dual), true) => SamplerVariant::DualThreshold,
        }
    }

    /// Its block cache.
    pub fn cache(self) -> Option<BlockCache> {
        match self {
            SamplerVariant::Reference | SamplerVariant::Threshold => None,
            SamplerVariant::Prefix | SamplerVariant::PrefixThreshold => Some(BlockCache::Prefix),
            SamplerVariant::Dual | SamplerVariant::DualThreshold => Some(BlockCache::Dual),
        }
    }

    /// True when a confidence threshold, not K, drives it.
    pub fn thresholded(self) -> bool {
        matches!(self, SamplerVariant::Threshold | SamplerVariant::PrefixThreshold | SamplerVariant::DualThreshold)
    }

    /// The name written in configs and legends.
    pub fn name(self) -> &'static str {
        match self {
            SamplerVariant::Reference => "reference",
            SamplerVariant::Prefix => "prefix",
            SamplerVariant::Dual => "dual",
            SamplerVariant::Threshold => "threshold",
            SamplerVariant::PrefixThreshold => "prefix+threshold",
            SamplerVariant::DualThreshold => "dual+threshold",
        }
    }
}

impl fmt::Display for SamplerVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What identifies a cell in the grid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CellKey {
    /// Model id (see [`crate::Bundle::models`]).
    pub model: String,
    /// Generation algorithm.
    pub sampler: Sampler,
    /// Diffusion steps K (diffusion samplers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// Batch size B.
    #[schemars(range(min = 1))]
    pub batch_size: u32,
    /// Sequence length N = prompt + output tokens.
    pub seq_len: u32,
    /// Prompt tokens per sequence.
    pub prompt_tokens: u32,
    /// Generated tokens per sequence (N_out).
    #[schemars(range(min = 1))]
    pub output_tokens: u32,
    /// Block length (diffusion samplers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_length: Option<u32>,
    /// Since 1.5: the diffusion sampler's block KV cache; absent: none (one full forward per step, the
    /// reference's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<BlockCache>,
    /// Since 1.5: confidence-threshold parallel decoding at this threshold (then `steps` is absent: the number of
    /// forwards is measured, not set); absent: a fixed schedule of `steps` steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<Threshold>,
}

impl CellKey {
    /// The diffusion sampler's series name: `reference`, `prefix`, `dual`, `threshold`, `prefix+threshold` or
    /// `dual+threshold` (see [`SamplerVariant`]); `None` for AR cells.
    pub fn variant(&self) -> Option<SamplerVariant> {
        (self.sampler.kind() == ModelKind::Llada).then(|| SamplerVariant::of(self.cache, self.threshold.is_some()))
    }
}

impl std::fmt::Display for CellKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} N={} B={}", self.model, self.seq_len, self.batch_size)?;
        if let Some(k) = self.steps {
            write!(f, " K={k}")?;
        }
        if let Some(t) = self.threshold {
            write!(f, " threshold={t}")?;
        }
        if let Some(b) = self.block_length {
            write!(f, " block={b}")?;
        }
        if let Some(c) = self.cache {
            write!(f, " cache={}", c.name())?;
        }
        Ok(())
    }
}

/// Whether larger or smaller values of a quality metric are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Perplexity and other losses.
    #[default]
    LowerIsBetter,
    /// BERTScore, ROUGE and other scores.
    HigherIsBetter,
}

impl Direction {
    /// True when `a` is at least as good as `b`.
    pub fn at_least_as_good(self, a: f64, b: f64) -> bool {
        match self {
            Direction::LowerIsBetter => a <= b,
            Direction::HigherIsBetter => a >= b,
        }
    }
}
