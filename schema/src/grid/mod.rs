//! Grid configuration files (`config/*.toml`): what to run, validated before any heavy work.
//!
//! A config names the models, the prompt set, and the axes of the grid (sequence length N, batch size B,
//! diffusion steps K). [`GridConfig::from_toml`] parses and validates; every error names the file, the
//! field and the fix. [`GridConfig::cells`] expands the grid into cell keys, the unit of measurement.
//! The fully resolved config is stored in each bundle's provenance, so a bundle says exactly what ran.
//!
//! Files by job: `types` (the serde types of each table), [`limits`] (the largest values allowed), `error`
//! ([`ConfigError`]), `parse` (TOML in and out), `validate` (one function per table) and `expand` (length
//! splits, cells and evaluators).

mod error;
mod expand;
pub mod limits;
pub(crate) mod parse;
mod types;
mod validate;

pub use crate::key::{BlockCache, DreamAlg, ModelKind, Precision, SamplerVariant, Threshold};
pub use error::ConfigError;
pub use types::{
    AttentionKernel, BertScoreSpec, Confidence, DEFAULT_BOOTSTRAP_RESAMPLES, DeviceSpec, EosPolicy, EvaluatorSpec,
    GridAxes, GridConfig, GumbelNoise, LengthSplit, ModelSpec, PromptConfig, PromptPreset, PromptSource, QualityConfig,
    Remasking, RunSettings, SynthLayout, SynthPreset, SyntheticEncoder, SyntheticWeights, bertscore_default_layer,
};
pub use validate::{hub_id_problem, revision_problem};
