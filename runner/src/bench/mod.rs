//! `dllm-bench bench-kernels`: how fast the runner's forward passes are against what the device can do.
//!
//! For given shapes, with synthetic weights made in memory (normal, never all zeros; nothing is written to
//! disk), it times on the chosen device, with the runner's own [`Transformer`] and [`Stopwatch`]:
//! - the device's copy bandwidth (a device-to-device copy into an existing buffer: bytes read + written per
//!   second) and its matmul rate (a square matmul in the run's dtype);
//! - an AR decode token: one single-token forward with the KV cache, then the greedy choice on the host, as
//!   `generate_ar` does per token, over the last `decode_tokens` positions of an N-token sequence;
//! - a LLaDA step: one full bidirectional forward over B x N tokens with logits for one block, as
//!   `generate_llada` does per step (the forward only);
//! - the LLaDA selection that follows each step's forward, on B x block x vocab logits: the sampler's own
//!   `predict` (argmax and confidence, greedy in f32 and in f64, sampled with the Gumbel noise from either
//!   source) up to the B x block values that reach the host, so a step with its selection is the sum of the two.
//!
//! From the work per forward ([`metrics::roofline`]) it prints the achieved bandwidth and FLOP rate and the
//! ratio to the floors of issue 3: decode time / (weights bytes / copy bandwidth), and step FLOP rate / matmul
//! rate. Figures are medians over the repetitions. `runner/PERF.md` records what it measured.

use std::collections::HashMap;
use std::process::ExitCode;

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use schema::ModelShape;
use schema::grid::{AttentionKernel, DeviceSpec, ModelKind, Precision};
use serde::Serialize;

use crate::InputError;
use crate::device::dtype_of;
use crate::device::peaks::{Reps, copy_bandwidth, matmul_rate, random};
use crate::device::timing::Stopwatch;
use crate::model::{ModelConfig, Transformer, TransformerOptions, WeightNames};
use crate::plan::DtypeArg;
use crate::synth::rng::SplitMix64;
use crate::synth::{Preset, SynthSpec};

mod phases;
mod plan;
mod profile;
mod text;

pub use plan::{Plan, PlannedForward, PlannedPart, PlannedPhase, plan};
pub use profile::{PartProfile, PhaseProfile, part_work};
pub use text::text;

use phases::{decode_bench, dtype_drift, selection_bench, step_bench};
use plan::plan_text;
use profile::{decode_profile, step_profile};

/// Shape presets of `--shape`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShapeArg {
    /// The demo's tiny models (hidden 64, 2 layers).
    Tiny,
    /// A few million parameters (hidden 256, 4 layers).
    Small,
    /// The real shapes: Meta-Llama-3-8B for decoding, LLaDA-8B-Base for the diffusion step.
    #[value(name = "8b")]
    EightB,
}

/// `dllm-bench bench-kernels`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Device: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,
    /// Precision (default: bf16 on CUDA, f32 on the CPU).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Shapes: the Llama-layout model for decoding, the LLaDA-layout one for the diffusion step.
    #[arg(long, value_enum, default_value = "tiny")]
    pub shape: ShapeArg,
    /// Override the number of layers of both shapes.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Override the hidden size of both shapes.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// Override the attention heads of both shapes.
    #[arg(long)]
    pub heads: Option<usize>,
    /// Override the KV heads of the Llama shape (LLaDA has as many KV heads as heads, as LLaDA-8B does).
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// Override the FFN size of both shapes.
    #[arg(long)]
    pub intermediate: Option<usize>,
    /// Override the vocabulary of both shapes.
    #[arg(long)]
    pub vocab: Option<usize>,
    /// Attention: candle's ops (matmul, softmax, matmul; the default), the fused CPU kernel (`run.attention =
    /// "fused"`: online softmax over blocks, the scores never in memory) or cudnn (cuDNN's on CUDA, bf16, for the
    /// LLaDA step; a build with the `cudnn` feature).
    #[arg(long, value_name = "KIND", default_value = "ops", value_parser = AttentionKernel::parse)]
    pub attention: AttentionKernel,
    /// Decode tokens as CUDA-graph replays (`run.cuda_graphs`: the first step eager, the second captured, the rest
    /// replayed; CUDA only). The decode profile (`--profile`) stays eager: a graph has no parts to time.
    #[arg(long)]
    pub cuda_graphs: bool,
    /// RMSNorm, RoPE and SwiGLU as one CUDA kernel each (`run.cuda_fused_ops`; CUDA only).
    #[arg(long)]
    pub cuda_fused_ops: bool,
    /// Batch of the LLaDA step (B).
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Batch of the AR decode.
    #[arg(long, default_value_t = 1)]
    pub decode_batch: usize,
    /// Sequence length N: the LLaDA step's tokens per row, and the AR context at the last decoded token.
    #[arg(long, default_value_t = 1024)]
    pub seq_len: usize,
    /// AR tokens decoded (and timed) per repetition, at the end of the N positions.
    #[arg(long, default_value_t = 32)]
    pub decode_tokens: usize,
    /// Positions of the LLaDA step that get logits (the sampler's block).
    #[arg(long, default_value_t = 32)]
    pub block_length: usize,
    /// Side of the square matmul that measures the matmul rate (default: 8192 on CUDA, 1024 on the CPU).
    #[arg(long)]
    pub matmul_size: Option<usize>,
    /// MiB copied to measure the copy bandwidth (default: 1024 on CUDA, 256 on the CPU).
    #[arg(long)]
    pub copy_mib: Option<usize>,
    /// Unmeasured runs of each benchmark first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Measured runs of each benchmark (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repetitions: usize,
    /// Batch of the LLaDA selection benchmark (default: `--batch`).
    #[arg(long)]
    pub selection_batch: Option<usize>,
    /// Seed of the synthetic weights and token ids.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Also compare the run's precision with f32 (a precision other than f32 only): the same synthetic weights
    /// (made in f32, then rounded) and ids through one forward of each shape in both, the logits of the last
    /// `--block-length` positions of `--batch` x `--seq-len` tokens compared.
    #[arg(long)]
    pub drift: bool,
    /// Also time each part of the forward (norms, projections, RoPE, cache write, attention, MLP, LM head, the
    /// selection, the next token's inputs) of an AR decode token and a LLaDA step, with the ops each dispatches
    /// and each part's bytes moved and FLOPs (CUDA events between parts on a GPU, the clock on the CPU).
    #[arg(long)]
    pub profile: bool,
    /// Print what this run would measure instead of running it: the Llama and LLaDA shapes and, per AR decode
    /// token and LLaDA step, the weights bytes and FLOPs (`metrics::roofline`) with each profile part's bytes and
    /// FLOPs; the device is not opened and nothing is timed. With `--json`, one JSON object (what
    /// runner/bench/torch_reference.py reads, so that both time the same shapes and count the same work).
    #[arg(long)]
    pub plan: bool,
}

/// What `bench-kernels` measured (the `--json` output; runner/bench/torch_reference.py prints the same keys).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `candle` (this runner).
    pub framework: String,
    /// `cpu` or `cuda:N`, with the device's name when known.
    pub device: String,
    /// CPU threads (CPU runs).
    pub threads: Option<usize>,
    /// Precision.
    pub dtype: String,
    /// Timer: `cuda-events` or `monotonic`.
    pub clock: String,
    /// Measured device copy bandwidth, bytes read + written per second.
    pub copy_bytes_per_s: f64,
    /// Measured matmul rate, FLOP/s.
    pub matmul_flops_per_s: f64,
    /// Side of the square matmul.
    pub matmul_size: usize,
    /// AR decode.
    pub decode: Phase,
    /// LLaDA step.
    pub llada_step: Phase,
    /// LLaDA selection after a step's forward.
    pub llada_selection: Selection,
    /// `--drift`: the run's precision against f32, the Llama shape then the LLaDA shape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// `--profile`: the AR decode token part by part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_profile: Option<PhaseProfile>,
    /// `--profile`: the LLaDA step (forward and greedy f32 selection) part by part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llada_step_profile: Option<PhaseProfile>,
}

/// How far one forward's logits in the run's precision are from the same forward in f32.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    /// `llama` (causal) or `llada` (bidirectional).
    pub model: String,
    /// Logits compared (rows x positions x vocab).
    pub logits: usize,
    /// Largest |logit - f32 logit|.
    pub max_abs_diff: f64,
    /// Largest |f32 logit|: the scale of the difference.
    pub f32_max_abs: f64,
    /// Mean |logit - f32 logit|.
    pub mean_abs_diff: f64,
    /// Share of the positions whose argmax (the greedy token) is the f32 one.
    pub argmax_agreement: f64,
}

/// The LLaDA selection of one step (the sampler's `predict`) on `(batch, block, vocab)` logits in the run's dtype.
#[derive(Debug, Clone, Serialize)]
pub struct Selection {
    /// Rows B.
    pub batch: usize,
    /// Positions per row that get logits (the block).
    pub block: usize,
    /// Vocabulary of the LLaDA shape.
    pub vocab: usize,
    /// Greedy, `confidence = "f32"` (the default): reduced on the device, B x block values to the host.
    pub greedy_f32_ms: f64,
    /// Greedy, `confidence = "f64"`: the block's logits copied to f64 first (the reference's precision).
    pub greedy_f64_ms: f64,
    /// Temperature 1, `gumbel_noise = "device"` (on the CPU this is the host stream: its generator cannot be
    /// seeded).
    pub sampled_device_noise_ms: f64,
    /// Temperature 1, `gumbel_noise = "host"`: B x block x vocab f64 values drawn on the host and uploaded.
    pub sampled_host_noise_ms: f64,
}

/// One timed phase: its shape, time, work and rates.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// Model shape.
    pub shape: ModelShape,
    /// Batch.
    pub batch: usize,
    /// Tokens per row (decode: the context at the last token).
    pub seq_len: usize,
    /// Median milliseconds per decode token / per step.
    pub ms: f64,
    /// Weights read per token / step (bytes).
    pub weights_bytes: u64,
    /// FLOPs per token / step.
    pub flops: u64,
    /// Achieved weights bandwidth, bytes/s.
    pub bytes_per_s: f64,
    /// Achieved FLOP rate.
    pub flops_per_s: f64,
    /// Decode: time / (weights bytes / copy bandwidth) (target <= 1.5). Step: FLOP rate / matmul rate
    /// (target >= 0.6).
    pub ratio_to_floor: f64,
}

/// Runs the benchmark and prints the report.
pub fn main(args: &BenchArgs) -> Result<ExitCode> {
    if args.plan {
        let plan = plan(args)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            print!("{}", plan_text(&plan));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn check(args: &BenchArgs) -> Result<()> {
    let bad = |what: String| -> Result<()> { Err(InputError(format!("bench-kernels: {what}")).into()) };
    if args.repetitions == 0 {
        return bad("--repetitions 0: nothing would be measured; fix: --repetitions 1 or more".into());
    }
    // The grid's own bounds (they keep every size below far from overflowing).
    let (max_b, max_n) = (schema::grid::limits::BATCH_SIZE as usize, schema::grid::limits::SEQ_LEN as usize);
    for (flag, v, max) in [
        ("--batch", args.batch, max_b),
        ("--decode-batch", args.decode_batch, max_b),
        ("--selection-batch", args.selection_batch.unwrap_or(1), max_b),
        ("--seq-len", args.seq_len, max_n),
        ("--matmul-size", args.matmul_size.unwrap_or(1), 1 << 16),
        ("--copy-mib", args.copy_mib.unwrap_or(1), 8192),
        ("--vocab", args.vocab.unwrap_or(1), 1 << 24),
        ("--layers", args.layers.unwrap_or(1), schema::grid::limits::SYNTH_LAYERS as usize),
        ("--hidden", args.hidden.unwrap_or(1), schema::grid::limits::SYNTH_HIDDEN as usize),
        ("--heads", args.heads.unwrap_or(1), schema::grid::limits::SYNTH_HIDDEN as usize),
        ("--kv-heads", args.kv_heads.unwrap_or(1), schema::grid::limits::SYNTH_HIDDEN as usize),
        ("--intermediate", args.intermediate.unwrap_or(1), 4 * schema::grid::limits::SYNTH_HIDDEN as usize),
    ] {
        if v > max {
            return bad(format!(
                "{flag} {v} is more than {max}, the largest this benchmark runs; fix: a smaller {flag}"
            ));
        }
        // Nothing measured is never a figure (a 0 x 0 matmul's rate, an empty copy's bandwidth).
        if v == 0 {
            return bad(format!("{flag} 0: nothing would be measured; fix: {flag} at least 1 (or leave it out)"));
        }
    }
    // After --seq-len's own bounds: these are relative to it.
    if args.decode_tokens == 0 || args.decode_tokens >= args.seq_len {
        return bad(format!(
            "--decode-tokens ({}) must be at least 1 and below --seq-len ({}): the prompt is the rest; fix: a \
             --decode-tokens in 1..{}",
            args.decode_tokens, args.seq_len, args.seq_len
        ));
    }
    if args.block_length == 0 || args.block_length > args.seq_len {
        return bad(format!(
            "--block-length ({}) must be in 1..=--seq-len ({}); fix: a --block-length in that range",
            args.block_length, args.seq_len
        ));
    }
    Ok(())
}

/// Bytes the copy bandwidth is measured on: `--copy-mib`, else 1 GiB on CUDA, 256 MiB on the CPU.
fn copy_bytes(args: &BenchArgs, cuda: bool) -> usize {
    args.copy_mib.unwrap_or(if cuda { 1024 } else { 256 }) << 20
}

/// Side of the square matmul of the matmul rate: `--matmul-size`, else 8192 on CUDA, 1024 on the CPU.
fn matmul_size(args: &BenchArgs, cuda: bool) -> usize {
    args.matmul_size.unwrap_or(if cuda { 8192 } else { 1024 })
}

/// The most memory one benchmark phase holds, in bytes (an estimate from the shapes, rounded up): the copy's two
/// buffers, the matmul's three matrices (made in f32), and per model the weights with the phase's activations,
/// KV cache, attention scores and logits (the selection's f64 copies).
fn working_set(args: &BenchArgs, llama: &ModelConfig, llada: &ModelConfig, dtype: DType, cuda: bool) -> f64 {
    let e = dtype.size_in_bytes() as f64;
    let copy = 2.0 * copy_bytes(args, cuda) as f64;
    let m = matmul_size(args, cuda) as f64;
    let matmul = 3.0 * m * m * 4.0_f64.max(e);
    let n = args.seq_len as f64;
    let weights = |c: &ModelConfig| c.parameter_count() as f64 * e;
    let decode = {
        let (b, c) = (args.decode_batch as f64, llama);
        let kv = b * n * c.num_layers as f64 * 2.0 * (c.num_kv_heads * c.head_dim) as f64 * e;
        weights(c)
            + kv
            + b * n * (4 * c.hidden_size + 2 * c.intermediate_size) as f64 * 4.0
            + b * c.vocab_size as f64 * 4.0
    };
    let step = {
        let (b, c) = (args.batch as f64, llada);
        let act = b * n * (8 * c.hidden_size + 3 * c.intermediate_size) as f64 * 4.0;
        let scores = b * c.num_heads as f64 * n * n * 4.0 * 2.0;
        weights(c) + act + scores + b * args.block_length as f64 * c.vocab_size as f64 * 4.0 * 3.0
    };
    let sel = args.selection_batch.unwrap_or(args.batch) as f64 * args.block_length as f64 * llada.vocab_size as f64;
    let selection = sel * (e + 8.0 * 3.0);
    [copy, matmul, decode, step, selection].into_iter().fold(0.0, f64::max)
}

/// The precision of a run on `spec`: `--dtype`, else bf16 on CUDA and f32 on the CPU.
fn precision(args: &BenchArgs, spec: DeviceSpec) -> Precision {
    let cuda = matches!(spec, DeviceSpec::Cuda(_));
    args.dtype.map(Precision::from).unwrap_or(if cuda { Precision::Bf16 } else { Precision::F32 })
}

/// Measures everything [`Report`] holds.
pub fn run(args: &BenchArgs) -> Result<Report> {
    check(args)?;
    let spec = DeviceSpec::parse(&args.device)
        .ok_or_else(|| InputError(format!("--device {:?} is not a device; fix: cpu, cuda or cuda:N", args.device)))?;
    check_device_flags(args, spec)?;
    let device = crate::device::open_with(spec, args.cuda_graphs)?;
    let cuda = device.is_cuda();
    let precision = precision(args, spec);
    let dtype = dtype_of(precision);
    let reps = Reps { warmup: args.warmup, measured: args.repetitions };

    let llama = bench_config(args, ModelKind::Llama)?;
    let llada = bench_config(args, ModelKind::Llada)?;
    // On the CPU a failed allocation aborts the process: refuse what cannot fit first (CUDA reports out of memory).
    if !cuda && let Some(available) = crate::sysinfo::available_memory_bytes() {
        let need = working_set(args, &llama, &llada, dtype, cuda);
        if need > available as f64 {
            return Err(InputError(format!(
                "bench-kernels: these sizes need about {:.1} GB at once and the system has {:.1} GB available; fix: \
                 smaller --batch, --seq-len, --shape (or its overrides), --matmul-size or --copy-mib",
                need / 1e9,
                available as f64 / 1e9
            ))
            .into());
        }
    }
    let copy_bytes_per_s = copy_bandwidth(&device, copy_bytes(args, cuda), reps).context("copy bandwidth")?;
    let matmul_size = matmul_size(args, cuda);
    let matmul_flops_per_s = matmul_rate(&device, dtype, matmul_size, args.seed, reps).context("matmul rate")?;
    let decode = decode_bench(args, &llama, &device, dtype, reps, copy_bytes_per_s).context("AR decode")?;
    let llada_step = step_bench(args, &llada, &device, dtype, reps, matmul_flops_per_s).context("LLaDA step")?;
    let llada_selection = selection_bench(args, &llada, &device, dtype, reps).context("LLaDA selection")?;
    let (decode_profile, llada_step_profile) = if args.profile {
        (
            Some(decode_profile(args, &llama, &device, dtype, reps, decode.ms).context("AR decode profile")?),
            Some(step_profile(args, &llada, &device, dtype, reps, llada_step.ms).context("LLaDA step profile")?),
        )
    } else {
        (None, None)
    };
    let drift = if args.drift {
        vec![
            dtype_drift(args, &llama, &device, dtype).context("AR logits against f32")?,
            dtype_drift(args, &llada, &device, dtype).context("LLaDA logits against f32")?,
        ]
    } else {
        Vec::new()
    };

    let clock = Stopwatch::start(&device)?.kind().to_string();
    let info = crate::execution::device_info(spec);
    let device_name = match (&info.name, spec) {
        (Some(n), DeviceSpec::Cuda(i)) => format!("cuda:{i} ({n})"),
        (None, DeviceSpec::Cuda(i)) => format!("cuda:{i}"),
        (Some(n), DeviceSpec::Cpu) => format!("cpu ({n})"),
        (None, DeviceSpec::Cpu) => "cpu".into(),
    };
    Ok(Report {
        framework: format!(
            "candle {} ({} attention{}{})",
            candle_version(),
            args.attention.name(),
            if args.cuda_graphs { ", CUDA-graph decode" } else { "" },
            if args.cuda_fused_ops { ", fused CUDA norm/RoPE/SwiGLU" } else { "" }
        ),
        device: device_name,
        threads: (!cuda).then(candle_core::utils::get_num_threads),
        dtype: precision.to_string(),
        clock,
        copy_bytes_per_s,
        matmul_flops_per_s,
        matmul_size,
        decode,
        llada_step,
        llada_selection,
        drift,
        decode_profile,
        llada_step_profile,
    })
}

fn candle_version() -> &'static str {
    // The workspace pins candle-core 0.11.1 (Cargo.toml); candle exposes no version constant.
    "0.11.1"
}

/// What the flags ask of the device and the precision, checked before the device is opened (and by `--plan`,
/// which opens none: a plan is only printed for a run that would start).
fn check_device_flags(args: &BenchArgs, spec: DeviceSpec) -> Result<()> {
    let cuda = matches!(spec, DeviceSpec::Cuda(_));
    let refuse = |what: &str| -> Result<()> { Err(InputError(format!("bench-kernels: {what}")).into()) };
    if args.attention == AttentionKernel::Fused && cuda {
        return refuse("--attention fused is the CPU's kernel; on CUDA use --attention ops or cudnn");
    }
    if (args.cuda_graphs || args.cuda_fused_ops) && !cuda {
        return refuse(
            "--cuda-graphs and --cuda-fused-ops are CUDA's (the CPU always fuses norm, RoPE and SwiGLU); drop them on \
             the CPU or run with --device cuda",
        );
    }
    if args.attention == AttentionKernel::Cudnn && !cuda {
        return refuse("--attention cudnn is cuDNN's, on CUDA (use --device cuda)");
    }
    if args.drift && precision(args, spec) == Precision::F32 {
        return refuse(
            "--drift compares the run's precision with f32, and this run is f32; fix: --dtype bf16 (or f16)",
        );
    }
    Ok(())
}

/// The forward's options `--attention` and the CUDA switches ask for ([`check_device_flags`] has refused what
/// the device cannot do).
fn bench_options(args: &BenchArgs) -> TransformerOptions {
    TransformerOptions {
        fused_attention: args.attention == AttentionKernel::Fused,
        cudnn_attention: args.attention == AttentionKernel::Cudnn,
        decode_graph: args.cuda_graphs,
        cuda_fused_ops: args.cuda_fused_ops,
        ..TransformerOptions::default()
    }
}

/// The config of `kind` at the chosen preset with the overrides.
fn bench_config(args: &BenchArgs, kind: ModelKind) -> Result<ModelConfig> {
    let preset = match args.shape {
        ShapeArg::Tiny => Preset::Tiny,
        ShapeArg::Small => Preset::Small,
        ShapeArg::EightB => Preset::Real,
    };
    let spec = SynthSpec {
        layers: args.layers,
        hidden: args.hidden,
        heads: args.heads,
        // LLaDA-8B has no grouped-query attention: its shape keeps as many KV heads as heads.
        kv_heads: if kind == ModelKind::Llama { args.kv_heads } else { None },
        intermediate: args.intermediate,
        vocab: args.vocab,
        ..SynthSpec::new(preset, args.seed)
    };
    spec.model_config(kind).map_err(|e| {
        let e = e.to_string().replace("<synthetic config.json>: ", "");
        InputError(format!(
            "bench-kernels: the shape of --shape {} with the given --layers/--hidden/--heads/--kv-heads/--intermediate/\
             --vocab: {e}; fix: --hidden a multiple of --heads with an even head size, --heads a multiple of \
             --kv-heads (or leave them out for the preset's)",
            clap::ValueEnum::to_possible_value(&args.shape).map_or(String::new(), |v| v.get_name().to_string())
        ))
        .into()
    })
}

/// A transformer of `cfg` with synthetic weights made on `device`: N(0, std) matrices with std = max(0.02,
/// 1/sqrt(hidden)) and norm weights 1 + N(0, 0.05), as `dllm-bench synth` writes them.
pub fn synthetic_transformer(
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    seed: u64,
    opts: TransformerOptions,
) -> Result<Transformer> {
    if device.is_cuda() {
        device.set_seed(seed)?;
    }
    let std = (1.0 / (cfg.hidden_size as f64).sqrt()).max(0.02) as f32;
    let mut tensors = HashMap::new();
    for (i, (name, shape)) in WeightNames::for_kind(cfg.kind).tensors(cfg).into_iter().enumerate() {
        let stream = crate::synth::rng::stream_seed(seed, &name).wrapping_add(i as u64);
        let t = if shape.len() == 1 {
            random(device, &shape, 1.0, 0.05, stream)?
        } else {
            random(device, &shape, 0.0, std, stream)?
        };
        tensors.insert(name, t.to_dtype(dtype)?);
    }
    let vb = VarBuilder::from_tensors(tensors, dtype, device);
    Ok(Transformer::load(vb, cfg, opts)?)
}

fn random_ids(rows: usize, len: usize, vocab: usize, rng: &mut SplitMix64) -> Vec<u32> {
    (0..rows * len).map(|_| (rng.next_u64() % vocab as u64) as u32).collect()
}
