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
}

impl ModelKind {
    /// `autoregressive` or `diffusion`.
    pub fn generation(self) -> &'static str {
        match self {
            ModelKind::Llama => "autoregressive",
            ModelKind::Llada => "diffusion",
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
}

impl Sampler {
    /// The architecture family that runs this sampler.
    pub fn kind(self) -> ModelKind {
        match self {
            Sampler::ArGreedy => ModelKind::Llama,
            Sampler::LladaLowConfidence | Sampler::LladaRandom => ModelKind::Llada,
        }
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
    pub batch_size: u32,
    /// Sequence length N = prompt + output tokens.
    pub seq_len: u32,
    /// Prompt tokens per sequence.
    pub prompt_tokens: u32,
    /// Generated tokens per sequence (N_out).
    pub output_tokens: u32,
    /// Block length (diffusion samplers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_length: Option<u32>,
}

impl std::fmt::Display for CellKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} N={} B={}", self.model, self.seq_len, self.batch_size)?;
        if let Some(k) = self.steps {
            write!(f, " K={k}")?;
        }
        if let Some(b) = self.block_length {
            write!(f, " block={b}")?;
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
