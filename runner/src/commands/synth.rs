//! `dllm-bench synth`: a synthetic checkpoint (random weights, real on-disk layout) in the HF cache.

use std::process::ExitCode;

use anyhow::Result;
use schema::ModelKind;
use schema::grid::{Precision, SynthPreset, SyntheticWeights};

use super::CacheArgs;
use crate::plan::DtypeArg;
use crate::{InputError, synth};

/// `dllm-bench synth`.
#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Architecture.
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// Repository id to write, e.g. dllm-bench/synthetic-llada-tiny.
    #[arg(long, value_name = "ORG/NAME")]
    pub repo_id: String,
    /// Size preset.
    #[arg(long, value_enum, default_value = "tiny")]
    pub preset: PresetArg,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Precision of the written weights [default: f32; bf16 for --preset real, as the real checkpoints].
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Number of safetensors shards (1: a single model.safetensors) [default: 1; for --preset real 4 for llama
    /// and dream, 6 for llada].
    #[arg(long)]
    pub shards: Option<u32>,
    /// Checkpoint layout of a llama-kind model (default: Meta-Llama-3's).
    #[arg(long, value_enum)]
    pub layout: Option<SynthLayoutArg>,
    /// An Instruct checkpoint: write the kind's chat template (Llama-3-Instruct's, LLaDA-8B-Instruct's) into
    /// tokenizer_config.json, with its header tokens in the tokenizer.
    #[arg(long)]
    pub chat_template: bool,
    /// Where models are.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// No progress output (a real-size checkpoint reports the weight files as it writes them).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `--layout` of `synth`: the llama-kind checkpoints the loader reads.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SynthLayoutArg {
    /// Meta-Llama-3: plain RoPE, untied head.
    #[value(name = "llama3")]
    Llama3,
    /// Llama-3.1: llama3 RoPE scaling (factor 8).
    #[value(name = "llama3.1")]
    Llama31,
    /// Llama-3.2-1B/3B: llama3 RoPE scaling (factor 32) and a tied LM head.
    #[value(name = "llama3.2")]
    Llama32,
    /// Qwen2 / Qwen2.5: q/k/v biases, RoPE base 10^6.
    #[value(name = "qwen2")]
    Qwen2,
}

impl SynthLayoutArg {
    fn layout(self) -> schema::grid::SynthLayout {
        match self {
            Self::Llama3 => schema::grid::SynthLayout::Llama3,
            Self::Llama31 => schema::grid::SynthLayout::Llama31,
            Self::Llama32 => schema::grid::SynthLayout::Llama32,
            Self::Qwen2 => schema::grid::SynthLayout::Qwen2,
        }
    }
}

/// Model kind on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Autoregressive, HF llama layout.
    Llama,
    /// Masked diffusion, LLaDA layout.
    Llada,
    /// Masked diffusion, Dream's (the Qwen2 layout with a mask token, bidirectional).
    Dream,
}

/// Synthetic size preset on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PresetArg {
    /// Fast on a CPU.
    Tiny,
    /// A few million parameters.
    Small,
    /// The real 8B shapes.
    Real,
}

pub fn main(args: SynthArgs) -> Result<ExitCode> {
    let (kind, spec) = args.spec()?;
    let cache = args.cache.dir();
    synth::check_cache_folder(&cache)?;
    // A stop signal ends the writing and removes what it wrote (a real-size checkpoint is 16 GB).
    crate::signals::Stop::install().map_err(|e| anyhow::anyhow!("cannot install the signal handlers: {e}"))?;
    let report = synth::Report::stderr(!args.quiet);
    let dir = synth::write_synthetic_with(&cache, &args.repo_id, kind, &spec, report)
        .map_err(|e| synth::cache_error(e, &args.repo_id, &cache))?;
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

impl SynthArgs {
    /// The kind and checkpoint spec these flags ask for, checked; what `--dtype` and `--shards` leave out is the
    /// preset's default (`SynthSpec::resolve`: the real checkpoints' dtype and shard count for `real`).
    pub fn spec(&self) -> Result<(ModelKind, synth::SynthSpec), InputError> {
        let kind = match self.kind {
            KindArg::Llama => ModelKind::Llama,
            KindArg::Llada => ModelKind::Llada,
            KindArg::Dream => ModelKind::Dream,
        };
        if self.layout.is_some() && kind != ModelKind::Llama {
            return Err(InputError(format!(
                "--layout: a layout is a llama-kind checkpoint's (--kind {} has its own); fix: use --kind llama \
                 with --layout, or leave --layout out",
                kind.name()
            )));
        }
        let weights = SyntheticWeights {
            preset: match self.preset {
                PresetArg::Tiny => SynthPreset::Tiny,
                PresetArg::Small => SynthPreset::Small,
                PresetArg::Real => SynthPreset::Real,
            },
            seed: self.seed,
            dtype: self.dtype.map(Precision::from),
            shards: self.shards,
            layers: None,
            hidden: None,
            layout: self.layout.map(SynthLayoutArg::layout),
            chat_template: Some(self.chat_template),
        };
        if let Some(problem) = schema::grid::hub_id_problem(&self.repo_id) {
            return Err(InputError(format!(
                "--repo-id: {problem}; fix: use ORG/NAME, e.g. dllm-bench/synthetic-llada-tiny"
            )));
        }
        // No --dtype: the preset's default (SynthSpec::resolve), not a run's dtype.
        let spec = synth::SynthSpec {
            dtype: weights.dtype,
            ..synth::SynthSpec::from_config(&weights, Precision::F32, self.chat_template)
        };
        // The flags set no shape: what check refuses is the shards or the layout, its message with the fix.
        spec.check(kind).map_err(|e| {
            let flags = match self.layout {
                Some(_) => format!("--shards {} / --layout", spec.resolve(kind).shards),
                None => format!("--shards {}", spec.resolve(kind).shards),
            };
            InputError(format!("{flags}: the runner cannot build this checkpoint: {e}"))
        })?;
        Ok((kind, spec))
    }
}
