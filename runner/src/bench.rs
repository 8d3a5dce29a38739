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
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use metrics::roofline::{self, Forward};
use schema::ModelShape;
use schema::grid::{DeviceSpec, ModelKind, Precision};
use serde::Serialize;

use crate::InputError;
use crate::device::dtype_of;
use crate::device::peaks::{Reps, copy_bandwidth, matmul_rate, median_ms, random};
use crate::device::timing::Stopwatch;
use crate::model::transformer::Greedy;
use crate::model::{
    LogitsSpan, ModelConfig, Part, PartTotals, Positions, Probe, Rope, Transformer, TransformerOptions, WeightNames,
};
use crate::plan::DtypeArg;
use crate::synth::rng::SplitMix64;
use crate::synth::{Preset, SynthSpec};

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

/// What `bench-kernels --plan` prints: the shapes and the work per forward of this run, nothing measured.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Precision (`--dtype`, else bf16 on CUDA and f32 on the CPU).
    pub dtype: String,
    /// Bytes per element of that precision.
    pub element_bytes: u64,
    /// The AR decode token (the Llama shape).
    pub decode: PlannedPhase,
    /// The LLaDA step (the LLaDA shape).
    pub llada_step: PlannedPhase,
}

/// One phase of a [`Plan`]: the keys of [`Phase`] that do not depend on a clock, and the profile's parts.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedPhase {
    /// Model shape.
    pub shape: ModelShape,
    /// Batch.
    pub batch: usize,
    /// Tokens per row (decode: the context at the last token).
    pub seq_len: usize,
    /// Weights read per token / step (bytes), as [`Phase::weights_bytes`].
    pub weights_bytes: u64,
    /// FLOPs per token / step, as [`Phase::flops`].
    pub flops: u64,
    /// The forward the profile's parts are counted on (decode: one token at the timed tokens' mean context).
    pub profile_forward: PlannedForward,
    /// Every part's bytes and FLOPs on that forward ([`part_work`]), in forward order.
    pub parts: Vec<PlannedPart>,
}

/// [`roofline::Forward`] as printed.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PlannedForward {
    pub batch: u64,
    pub tokens: u64,
    pub context: u64,
    pub logits: u64,
    /// Keys and values go to a KV cache.
    pub cached: bool,
}

/// One part of a [`PlannedPhase`].
#[derive(Debug, Clone, Serialize)]
pub struct PlannedPart {
    pub part: Part,
    /// Bytes read and written per token / step.
    pub bytes: u64,
    /// FLOPs per token / step.
    pub flops: u64,
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

/// One phase (an AR decode token, a LLaDA step) part by part: means over the profiled repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseProfile {
    /// Ops dispatched per token / step (candle operations that compute: kernel launches on CUDA).
    pub ops: u64,
    /// The parts' times summed, ms per token / step.
    pub profiled_ms: f64,
    /// The same work timed without part boundaries (the phase's `ms`): `profiled_ms` above it is the probe's
    /// cost (a clock reading per part on the CPU; a CUDA event per part on a GPU).
    pub unprofiled_ms: f64,
    /// Every part that dispatched an op, in forward order.
    pub parts: Vec<PartProfile>,
}

/// One part of a [`PhaseProfile`].
#[derive(Debug, Clone, Serialize)]
pub struct PartProfile {
    pub part: Part,
    /// Ops per token / step.
    pub ops: u64,
    /// Mean ms per token / step.
    pub ms: f64,
    /// Bytes read and written per token / step (weights, activations, cache; analytic, [`part_work`]).
    pub bytes: u64,
    /// FLOPs per token / step (the matrix products only; element-wise parts count none).
    pub flops: u64,
    /// Achieved bytes/s.
    pub bytes_per_s: f64,
    /// Achieved FLOP/s (parts with FLOPs only).
    pub flops_per_s: Option<f64>,
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
        return bad("--repetitions must be at least 1".into());
    }
    if args.decode_tokens == 0 || args.decode_tokens >= args.seq_len {
        return bad(format!(
            "--decode-tokens ({}) must be at least 1 and below --seq-len ({}): the prompt is the rest",
            args.decode_tokens, args.seq_len
        ));
    }
    if args.block_length == 0 || args.block_length > args.seq_len {
        return bad(format!("--block-length ({}) must be in 1..=--seq-len ({})", args.block_length, args.seq_len));
    }
    if args.batch == 0 || args.decode_batch == 0 {
        return bad("--batch and --decode-batch must be at least 1".into());
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

/// Weights bytes and FLOPs of an AR decode token of `shape` in elements of `e` bytes, averaged over the timed
/// positions (the attention part grows with the context).
fn decode_work(args: &BenchArgs, shape: &ModelShape, e: u64) -> (u64, u64) {
    let (b, steps) = (args.decode_batch as u64, args.decode_tokens as u64);
    let prompt = (args.seq_len - args.decode_tokens) as u64;
    let work: Vec<roofline::Work> = (0..steps).map(|s| roofline::decode_step(shape, b, prompt + s + 1, e)).collect();
    let weights_bytes = work.iter().map(|w| w.weights_read_bytes).sum::<u64>() / steps;
    let flops = work.iter().map(|w| w.flops).sum::<u64>() / steps;
    (weights_bytes, flops)
}

/// The forward the AR decode profile's parts are counted on: one token at the mean context of the timed tokens.
fn decode_profile_forward(args: &BenchArgs) -> Forward {
    let prompt = args.seq_len - args.decode_tokens;
    Forward {
        batch: args.decode_batch as u64,
        tokens: 1,
        context: (prompt + args.decode_tokens.div_ceil(2)) as u64,
        logits: 1,
    }
}

/// The LLaDA step's forward: B x N tokens, logits for one block.
fn step_forward(args: &BenchArgs) -> Forward {
    let (b, n) = (args.batch as u64, args.seq_len as u64);
    Forward { batch: b, tokens: n, context: n, logits: args.block_length as u64 }
}

/// What [`run`] would measure, from the arguments alone: `--plan`.
pub fn plan(args: &BenchArgs) -> Result<Plan> {
    check(args)?;
    let spec = DeviceSpec::parse(&args.device)
        .ok_or_else(|| InputError(format!("--device {:?} is not a device; fix: cpu, cuda or cuda:N", args.device)))?;
    let precision = precision(args, spec);
    let e = dtype_of(precision).size_in_bytes() as u64;
    let planned = |shape: ModelShape, batch, (weights_bytes, flops), fwd: Forward, cached| {
        let parts = Part::ALL
            .iter()
            .map(|&part| {
                let (bytes, flops) = part_work(&shape, fwd, cached, e, part);
                PlannedPart { part, bytes, flops }
            })
            .collect();
        let Forward { batch: fb, tokens, context, logits } = fwd;
        let profile_forward = PlannedForward { batch: fb, tokens, context, logits, cached };
        PlannedPhase { shape, batch, seq_len: args.seq_len, weights_bytes, flops, profile_forward, parts }
    };
    let llama = bench_config(args, ModelKind::Llama)?.shape();
    let llada = bench_config(args, ModelKind::Llada)?.shape();
    let decode_work = decode_work(args, &llama, e);
    let fwd = step_forward(args);
    let step_work = (roofline::forward_weight_bytes(&llada, fwd, e), roofline::forward_flops(&llada, fwd));
    Ok(Plan {
        dtype: precision.to_string(),
        element_bytes: e,
        decode: planned(llama, args.decode_batch, decode_work, decode_profile_forward(args), true),
        llada_step: planned(llada, args.batch, step_work, fwd, false),
    })
}

/// The text of `--plan`.
fn plan_text(p: &Plan) -> String {
    let phase = |what: &str, x: &PlannedPhase| {
        format!(
            "{what:<16} {}\n\x20                B={} N={}; {:.2} MB of weights and {:.3} GFLOP per {}\n",
            shape_line(&x.shape),
            x.batch,
            x.seq_len,
            x.weights_bytes as f64 / 1e6,
            x.flops as f64 / 1e9,
            if x.profile_forward.cached { "token" } else { "step" },
        )
    };
    format!("bench-kernels plan ({}, nothing timed)\n", p.dtype)
        + &phase("AR decode token", &p.decode)
        + &phase("LLaDA step", &p.llada_step)
}

/// Measures everything [`Report`] holds.
pub fn run(args: &BenchArgs) -> Result<Report> {
    check(args)?;
    let spec = DeviceSpec::parse(&args.device)
        .ok_or_else(|| InputError(format!("--device {:?} is not a device; fix: cpu, cuda or cuda:N", args.device)))?;
    let device = crate::device::open(spec)?;
    let cuda = device.is_cuda();
    let precision = precision(args, spec);
    let dtype = dtype_of(precision);
    if args.drift && precision == Precision::F32 {
        return Err(InputError(
            "bench-kernels: --drift compares the run's precision with f32, and this run is f32; fix: --dtype bf16 \
             (or f16)"
                .into(),
        )
        .into());
    }
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
        framework: format!("candle {}", candle_version()),
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
    spec.model_config(kind).map_err(|e| InputError(format!("bench-kernels: shape: {e}")).into())
}

/// A transformer of `cfg` with synthetic weights made on `device`: N(0, std) matrices with std = max(0.02,
/// 1/sqrt(hidden)) and norm weights 1 + N(0, 0.05), as `dllm-bench synth` writes them.
pub fn synthetic_transformer(cfg: &ModelConfig, device: &Device, dtype: DType, seed: u64) -> Result<Transformer> {
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
    Ok(Transformer::load(vb, cfg, TransformerOptions::default())?)
}

fn random_ids(rows: usize, len: usize, vocab: usize, rng: &mut SplitMix64) -> Vec<u32> {
    (0..rows * len).map(|_| (rng.next_u64() % vocab as u64) as u32).collect()
}

fn decode_bench(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    copy_bytes_per_s: f64,
) -> Result<Phase> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed)?;
    let (b, n, steps) = (args.decode_batch, args.seq_len, args.decode_tokens);
    let ids = decode_prompt(args, cfg, device)?;
    let ms = median_ms(reps, || decode_run(&tf, &ids, steps, &mut Probe::idle()))?;
    let shape = cfg.shape();
    let (weights_bytes, flops) = decode_work(args, &shape, dtype.size_in_bytes() as u64);
    let floor_ms = weights_bytes as f64 / copy_bytes_per_s * 1e3;
    Ok(Phase {
        shape,
        batch: b,
        seq_len: n,
        ms,
        weights_bytes,
        flops,
        bytes_per_s: weights_bytes as f64 / (ms / 1e3),
        flops_per_s: flops as f64 / (ms / 1e3),
        ratio_to_floor: ms / floor_ms,
    })
}

/// The decode benchmark's prompt: `--decode-batch` rows of N - `--decode-tokens` random ids.
fn decode_prompt(args: &BenchArgs, cfg: &ModelConfig, device: &Device) -> Result<Tensor> {
    let (b, prompt) = (args.decode_batch, args.seq_len - args.decode_tokens);
    let mut rng = SplitMix64::new(args.seed ^ 0xDEC0DE);
    Ok(Tensor::from_vec(random_ids(b, prompt, cfg.vocab_size, &mut rng), (b, prompt), device)?)
}

/// A prefill of `ids`, then `steps` single-token forwards with the KV cache, each followed by the greedy choice
/// on the device whose ids are the next forward's input, exactly the per-token work of `generate_ar`; `p`
/// probes the decode tokens. Milliseconds per decode token.
fn decode_run(tf: &Transformer, ids: &Tensor, steps: usize, p: &mut Probe) -> Result<f64> {
    let device = tf.device();
    let (b, prompt) = ids.dims2()?;
    let mut cache = tf.new_cache(prompt + steps);
    // As `generate_ar`: the RoPE tables of every position made once, sliced per token.
    let rope_all = tf.rope(&Positions::Range { start: 0, len: prompt + steps })?;
    let bias = tf.attention_bias(None, b, 0, prompt, prompt)?;
    let greedy = Greedy::new(tf.config().vocab_size, &[], device)?;
    let logits = tf.forward(ids, &rope_all.narrow(0, prompt)?, bias.as_ref(), Some(&mut cache), LogitsSpan::Last)?;
    let mut next = greedy.choose(&logits.squeeze(1)?)?;
    let sw = Stopwatch::start(device)?;
    for s in 0..steps {
        let rope = rope_all.narrow(prompt + s, 1)?;
        let logits = tf.forward_probed(&next, &rope, None, Some(&mut cache), LogitsSpan::Last, p)?;
        p.enter(Part::Selection)?;
        // The greedy choice counts as one op (an argmax; with logits other than f32, a cast first).
        next = p.op(greedy.choose(&logits.squeeze(1)?))?;
    }
    let ms = sw.elapsed_ms()? / steps as f64;
    p.finish()?;
    Ok(ms)
}

/// `--profile` of the AR decode: the decode run with a timing probe, `reps` times after the warm-ups.
fn decode_profile(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    unprofiled_ms: f64,
) -> Result<PhaseProfile> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed)?;
    let ids = decode_prompt(args, cfg, device)?;
    let steps = args.decode_tokens;
    let p = profiled(device, reps, |p| decode_run(&tf, &ids, steps, p).map(drop))?;
    let per = (reps.measured * steps) as f64;
    let fwd = decode_profile_forward(args);
    Ok(phase_profile(&cfg.shape(), fwd, true, dtype, p.totals(), per, unprofiled_ms))
}

/// `--profile` of the LLaDA step: the step's forward and its greedy f32 selection with a timing probe.
fn step_profile(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    unprofiled_ms: f64,
) -> Result<PhaseProfile> {
    use crate::generate::{LladaParams, predict};
    let (tf, ids, rope) = step_inputs(args, cfg, device, dtype)?;
    let (n, bl) = (args.seq_len, args.block_length);
    let params = LladaParams { block_length: bl, ..LladaParams::default() };
    let span = LogitsSpan::Range { start: n - bl, len: bl };
    let mut rng = SplitMix64::new(args.seed ^ 0x5E1EC7);
    let p = profiled(device, reps, |p| {
        let logits = tf.forward_probed(&ids, &rope, None, None, span, p)?;
        p.enter(Part::Selection)?;
        // The sampler's `predict` counts as one op (greedy, confidence in f32 on the device).
        p.op(predict(&logits, &params, false, &mut rng).map_err(candle_core::Error::wrap))?;
        p.finish()?;
        Ok(())
    })?;
    Ok(phase_profile(&cfg.shape(), step_forward(args), false, dtype, p.totals(), reps.measured as f64, unprofiled_ms))
}

/// `run` with an idle probe `reps.warmup` times, then `reps.measured` times with one timing probe: its totals.
fn profiled(device: &Device, reps: Reps, mut run: impl FnMut(&mut Probe) -> Result<()>) -> Result<Probe> {
    for _ in 0..reps.warmup {
        run(&mut Probe::idle())?;
    }
    let mut p = Probe::timing(device);
    for _ in 0..reps.measured {
        run(&mut p)?;
    }
    Ok(p)
}

/// The LLaDA step's model, `--batch` x `--seq-len` random ids and their RoPE tables.
fn step_inputs(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<(Transformer, Tensor, Rope)> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed.wrapping_add(1))?;
    let (b, n) = (args.batch, args.seq_len);
    let mut rng = SplitMix64::new(args.seed ^ 0x11ADA);
    let ids = Tensor::from_vec(random_ids(b, n, cfg.vocab_size, &mut rng), (b, n), device)?;
    let rope = tf.rope(&Positions::Range { start: 0, len: n })?;
    Ok((tf, ids, rope))
}

/// The profile of a phase from a probe's totals over `per` tokens / steps.
fn phase_profile(
    shape: &ModelShape,
    fwd: roofline::Forward,
    cached: bool,
    dtype: DType,
    totals: &std::collections::BTreeMap<Part, PartTotals>,
    per: f64,
    unprofiled_ms: f64,
) -> PhaseProfile {
    let e = dtype.size_in_bytes() as u64;
    let parts: Vec<PartProfile> = Part::ALL
        .iter()
        .filter_map(|&part| {
            let t = totals.get(&part)?;
            let (bytes, flops) = part_work(shape, fwd, cached, e, part);
            let ms = t.ms / per;
            let s = ms / 1e3;
            Some(PartProfile {
                part,
                ops: (t.ops as f64 / per).round() as u64,
                ms,
                bytes,
                flops,
                bytes_per_s: if s > 0.0 { bytes as f64 / s } else { 0.0 },
                flops_per_s: (flops > 0 && s > 0.0).then(|| flops as f64 / s),
            })
        })
        .collect();
    PhaseProfile {
        ops: parts.iter().map(|p| p.ops).sum(),
        profiled_ms: parts.iter().map(|p| p.ms).sum(),
        unprofiled_ms,
        parts,
    }
}

/// Bytes moved and FLOPs of one part of a forward `fwd` of `shape` in elements of `e` bytes: each input read
/// once and each output written once (weights included), FLOPs of the matrix products only (2 per multiply-add;
/// the parts' FLOPs add up to [`roofline::forward_flops`]). `cached`: keys and values go to a KV cache.
pub fn part_work(shape: &ModelShape, fwd: roofline::Forward, cached: bool, e: u64, part: Part) -> (u64, u64) {
    let l = u64::from(shape.layers);
    let h = u64::from(shape.hidden);
    let d = roofline::head_dim(shape);
    let (nh, nkv) = (u64::from(shape.heads), u64::from(shape.kv_heads));
    let (q, kv) = (nh * d, nkv * d);
    let i = u64::from(shape.intermediate);
    let v = u64::from(shape.vocab);
    let rows = fwd.batch * fwd.tokens;
    let logit_rows = fwd.batch * fwd.logits;
    let scores = fwd.batch * nh * fwd.tokens * fwd.context;
    // A projection: weights, its input rows and its output rows; 2 FLOPs per weight and row.
    let proj = |n_in: u64, n_out: u64, r: u64| ((n_in * n_out + r * (n_in + n_out)) * e, 2 * r * n_in * n_out);
    let layers = |(b, f): (u64, u64)| (l * b, l * f);
    match part {
        Part::Embed => (2 * rows * h * e, 0),
        Part::Norm => ((l * 2 * (2 * rows * h + h) + 2 * logit_rows * h + h) * e, 0),
        Part::QkvProj => layers(proj(h, q + 2 * kv, rows)),
        Part::Rope => (l * 2 * rows * (q + kv) * e, 0),
        Part::CacheWrite => (if cached { l * 2 * 2 * rows * kv * e } else { l * 2 * rows * kv * e }, 0),
        Part::Scores => {
            let keys = fwd.batch * fwd.context * kv;
            (l * (rows * q + keys + scores) * e, l * 2 * scores * d)
        }
        Part::Mask | Part::Softmax => (l * 2 * scores * e, 0),
        Part::AttnValues => {
            let values = fwd.batch * fwd.context * kv;
            (l * (scores + values + rows * q) * e, l * 2 * scores * d)
        }
        Part::OutProj => layers(proj(q, h, rows)),
        Part::GateUp => layers(proj(h, 2 * i, rows)),
        Part::Activation => (l * 3 * rows * i * e, 0),
        Part::Down => layers(proj(i, h, rows)),
        Part::Residual => (l * 2 * 3 * rows * h * e, 0),
        Part::LmHead => proj(h, v, logit_rows),
        Part::Selection => (logit_rows * v * e, 0),
    }
}

fn step_bench(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    matmul_flops_per_s: f64,
) -> Result<Phase> {
    let (tf, ids, rope) = step_inputs(args, cfg, device, dtype)?;
    let (b, n, bl) = (args.batch, args.seq_len, args.block_length);
    let ms = median_ms(reps, || {
        let sw = Stopwatch::start(device)?;
        let logits = tf.forward(&ids, &rope, None, None, LogitsSpan::Range { start: n - bl, len: bl })?;
        let ms = sw.elapsed_ms()?;
        drop(logits);
        Ok(ms)
    })?;
    let shape = cfg.shape();
    let f = step_forward(args);
    let weights_bytes = roofline::forward_weight_bytes(&shape, f, dtype.size_in_bytes() as u64);
    let flops = roofline::forward_flops(&shape, f);
    let flops_per_s = flops as f64 / (ms / 1e3);
    Ok(Phase {
        shape,
        batch: b,
        seq_len: n,
        ms,
        weights_bytes,
        flops,
        bytes_per_s: weights_bytes as f64 / (ms / 1e3),
        flops_per_s,
        ratio_to_floor: flops_per_s / matmul_flops_per_s,
    })
}

/// One forward of `cfg` over `--batch` x `--seq-len` random ids (causal for the Llama kind) in `dtype` and in
/// f32 with the same weights; the logits of the last `--block-length` positions compared.
fn dtype_drift(args: &BenchArgs, cfg: &ModelConfig, device: &Device, dtype: DType) -> Result<Drift> {
    let (b, n, bl) = (args.batch, args.seq_len, args.block_length);
    let mut rng = SplitMix64::new(args.seed ^ 0xD81F7);
    let ids = Tensor::from_vec(random_ids(b, n, cfg.vocab_size, &mut rng), (b, n), device)?;
    let logits = |dtype: DType| -> Result<Tensor> {
        let tf = synthetic_transformer(cfg, device, dtype, args.seed.wrapping_add(2))?;
        let rope = tf.rope(&Positions::Range { start: 0, len: n })?;
        let bias = match cfg.kind {
            ModelKind::Llama => tf.attention_bias(None, b, 0, n, n)?,
            _ => None,
        };
        let span = LogitsSpan::Range { start: n - bl, len: bl };
        Ok(tf.forward(&ids, &rope, bias.as_ref(), None, span)?.to_dtype(DType::F32)?)
    };
    let reference = logits(DType::F32)?;
    let other = logits(dtype)?;
    let diff = (&other - &reference)?.abs()?;
    let count = diff.elem_count();
    let same = reference.argmax(2)?.eq(&other.argmax(2)?)?.to_dtype(DType::F32)?;
    let scalar = |t: Tensor| -> Result<f64> { Ok(f64::from(t.to_scalar::<f32>()?)) };
    Ok(Drift {
        model: format!("{:?}", cfg.kind).to_lowercase(),
        logits: count,
        max_abs_diff: scalar(diff.flatten_all()?.max(0)?)?,
        f32_max_abs: scalar(reference.abs()?.flatten_all()?.max(0)?)?,
        mean_abs_diff: scalar(diff.flatten_all()?.mean(0)?)?,
        argmax_agreement: scalar(same.flatten_all()?.mean(0)?)?,
    })
}

fn selection_bench(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
) -> Result<Selection> {
    use crate::generate::{Confidence, GumbelNoise, LladaParams, predict, seed_device_noise};
    let (b, bl, v) = (args.selection_batch.unwrap_or(args.batch), args.block_length, cfg.vocab_size);
    // Logits of a trained model's spread (normal, std 3), in the run's dtype on the device.
    let logits = (Tensor::randn(0f32, 3f32, (b, bl, v), &Device::Cpu)?.to_dtype(dtype)?).to_device(device)?;
    let mut rng = SplitMix64::new(args.seed ^ 0x5E1EC7);
    let mut time = |params: LladaParams| -> Result<f64> {
        let device_noise = seed_device_noise(device, &params)?;
        median_ms(reps, || {
            let sw = Stopwatch::start(device)?;
            let (ids, conf) = predict(&logits, &params, device_noise, &mut rng)?;
            let ms = sw.elapsed_ms()?;
            anyhow::ensure!(ids.len() == b * bl && conf.len() == b * bl, "selection returned {} ids", ids.len());
            Ok(ms)
        })
    };
    let greedy = LladaParams { block_length: bl, ..LladaParams::default() };
    let sampled = LladaParams { temperature: 1.0, seed: args.seed, ..greedy };
    Ok(Selection {
        batch: b,
        block: bl,
        vocab: v,
        greedy_f32_ms: time(LladaParams { confidence: Confidence::F32, ..greedy })?,
        greedy_f64_ms: time(LladaParams { confidence: Confidence::F64, ..greedy })?,
        sampled_device_noise_ms: time(LladaParams { gumbel_noise: GumbelNoise::Device, ..sampled })?,
        sampled_host_noise_ms: time(LladaParams { gumbel_noise: GumbelNoise::Host, ..sampled })?,
    })
}

fn shape_line(s: &ModelShape) -> String {
    format!(
        "layers {} hidden {} heads {}/{} kv ffn {} vocab {} ({:.3} B params)",
        s.layers,
        s.hidden,
        s.heads,
        s.kv_heads,
        s.intermediate,
        s.vocab,
        roofline::parameters(s) as f64 / 1e9
    )
}

/// The text report.
pub fn text(r: &Report) -> String {
    let threads = r.threads.map_or(String::new(), |t| format!(", {t} threads"));
    let d = &r.decode;
    let s = &r.llada_step;
    format!(
        "bench-kernels: {} on {}{threads}, {}, timed with {} (medians)\n\
         device copy bandwidth   {:>10.2} GB/s (read + write)\n\
         matmul rate             {:>10.2} GFLOP/s ({n}x{n}x{n}, {})\n\
         AR decode token         {:>10.3} ms  llama shape: {}\n\
         \x20                       B={} at context {}; reads {:.2} MB of weights and does {:.3} GFLOP per token\n\
         \x20                       {:.2} GB/s, {:.2} GFLOP/s; {:.2}x the bandwidth floor ({:.3} ms; target <= 1.5x)\n\
         LLaDA step              {:>10.3} ms  llada shape: {}\n\
         \x20                       B={} N={}; {:.3} GFLOP and {:.2} MB of weights per step\n\
         \x20                       {:.2} GFLOP/s = {:.0}% of the matmul rate (target >= 60%)\n\
         LLaDA selection         {:>10.3} ms  greedy, confidence f32 on the device; B={} block={} vocab={}\n\
         \x20                       {:>10.3} ms  greedy, confidence f64 (the block's logits copied to f64)\n\
         \x20                       {:>10.3} ms  temperature 1, Gumbel noise from the device{}\n\
         \x20                       {:>10.3} ms  temperature 1, Gumbel noise from the host (f64, uploaded)\n",
        r.framework,
        r.device,
        r.dtype,
        r.clock,
        r.copy_bytes_per_s / 1e9,
        r.matmul_flops_per_s / 1e9,
        r.dtype,
        d.ms,
        shape_line(&d.shape),
        d.batch,
        d.seq_len,
        d.weights_bytes as f64 / 1e6,
        d.flops as f64 / 1e9,
        d.bytes_per_s / 1e9,
        d.flops_per_s / 1e9,
        d.ratio_to_floor,
        d.ms / d.ratio_to_floor,
        s.ms,
        shape_line(&s.shape),
        s.batch,
        s.seq_len,
        s.flops as f64 / 1e9,
        s.weights_bytes as f64 / 1e6,
        s.flops_per_s / 1e9,
        100.0 * s.ratio_to_floor,
        r.llada_selection.greedy_f32_ms,
        r.llada_selection.batch,
        r.llada_selection.block,
        r.llada_selection.vocab,
        r.llada_selection.greedy_f64_ms,
        r.llada_selection.sampled_device_noise_ms,
        if r.threads.is_some() { " (the CPU's: the host stream)" } else { "" },
        r.llada_selection.sampled_host_noise_ms,
        n = r.matmul_size,
    ) + &drift_lines(r)
        + &profile_lines("AR decode token", r.decode_profile.as_ref(), r)
        + &profile_lines("LLaDA step", r.llada_step_profile.as_ref(), r)
}

/// The `--profile` table of one phase: per part its ops, time, share, bytes and FLOPs, and the achieved rates
/// beside the run's measured ceilings.
fn profile_lines(what: &str, p: Option<&PhaseProfile>, r: &Report) -> String {
    let Some(p) = p else { return String::new() };
    let mut out = format!(
        "\n{what}, part by part ({} ops; parts summed {:.3} ms, unprofiled {:.3} ms: the probe costs {:+.1}%)\n\
         \x20 {:<12} {:>5} {:>10} {:>6} {:>10} {:>10} {:>10} {:>12}\n",
        p.ops,
        p.profiled_ms,
        p.unprofiled_ms,
        100.0 * (p.profiled_ms / p.unprofiled_ms - 1.0),
        "part",
        "ops",
        "ms",
        "share",
        "MB",
        "GFLOP",
        "GB/s",
        "GFLOP/s",
    );
    for part in &p.parts {
        let rate = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.2}", x / 1e9));
        out += &format!(
            "  {:<12} {:>5} {:>10.4} {:>5.1}% {:>10.3} {:>10.4} {:>10.2} {:>12}\n",
            part.part.name(),
            part.ops,
            part.ms,
            100.0 * part.ms / p.profiled_ms,
            part.bytes as f64 / 1e6,
            part.flops as f64 / 1e9,
            part.bytes_per_s / 1e9,
            rate(part.flops_per_s),
        );
    }
    out + &format!(
        "  ceilings: copy {:.2} GB/s, matmul {:.2} GFLOP/s\n",
        r.copy_bytes_per_s / 1e9,
        r.matmul_flops_per_s / 1e9
    )
}

/// The `--drift` lines of the text report.
fn drift_lines(r: &Report) -> String {
    r.drift
        .iter()
        .map(|d| {
            format!(
                "{} against f32  {:<6} max |diff| {:.4} ({:.2}% of the largest f32 logit {:.3}), mean {:.5}; \
                 argmax agrees at {:.1}% of positions\n",
                r.dtype,
                d.model,
                d.max_abs_diff,
                100.0 * d.max_abs_diff / d.f32_max_abs,
                d.f32_max_abs,
                d.mean_abs_diff,
                100.0 * d.argmax_agreement
            )
        })
        .collect()
}
