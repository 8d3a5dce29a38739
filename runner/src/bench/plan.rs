//! `bench-kernels --plan`: the shapes and the work a run would time, without timing anything.

use anyhow::Result;
use metrics::roofline::{self, Forward};
use schema::ModelShape;
use serde::Serialize;

use super::profile::part_work;
use super::text::shape_line;
use super::{BenchArgs, bench_config, check, precision};
use crate::InputError;
use crate::device::dtype_of;
use crate::model::Part;
use schema::grid::{AttentionKernel, DeviceSpec, ModelKind};

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

/// One phase of a [`Plan`]: the keys of [`Phase`](super::Phase) that do not depend on a clock, and the profile's parts.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedPhase {
    /// Model shape.
    pub shape: ModelShape,
    /// Batch.
    pub batch: usize,
    /// Tokens per row (decode: the context at the last token).
    pub seq_len: usize,
    /// Weights read per token / step (bytes), as [`Phase::weights_bytes`](super::Phase::weights_bytes).
    pub weights_bytes: u64,
    /// FLOPs per token / step, as [`Phase::flops`](super::Phase::flops).
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

/// Weights bytes and FLOPs of an AR decode token of `shape` in elements of `e` bytes, averaged over the timed
/// positions (the attention part grows with the context).
pub(super) fn decode_work(args: &BenchArgs, shape: &ModelShape, e: u64) -> (u64, u64) {
    let (b, steps) = (args.decode_batch as u64, args.decode_tokens as u64);
    let prompt = (args.seq_len - args.decode_tokens) as u64;
    let work: Vec<roofline::Work> = (0..steps).map(|s| roofline::decode_step(shape, b, prompt + s + 1, e)).collect();
    let weights_bytes = work.iter().map(|w| w.weights_read_bytes).sum::<u64>() / steps;
    let flops = work.iter().map(|w| w.flops).sum::<u64>() / steps;
    (weights_bytes, flops)
}

/// The forward the AR decode profile's parts are counted on: one token at the mean context of the timed tokens.
pub(super) fn decode_profile_forward(args: &BenchArgs) -> Forward {
    let prompt = args.seq_len - args.decode_tokens;
    Forward {
        batch: args.decode_batch as u64,
        tokens: 1,
        context: (prompt + args.decode_tokens.div_ceil(2)) as u64,
        logits: 1,
    }
}

/// The LLaDA step's forward: B x N tokens, logits for one block.
pub(super) fn step_forward(args: &BenchArgs) -> Forward {
    let (b, n) = (args.batch as u64, args.seq_len as u64);
    Forward { batch: b, tokens: n, context: n, logits: args.block_length as u64 }
}

/// What [`run`](super::run) would measure, from the arguments alone: `--plan`.
pub fn plan(args: &BenchArgs) -> Result<Plan> {
    check(args)?;
    let spec = DeviceSpec::parse(&args.device)
        .ok_or_else(|| InputError(format!("--device {:?} is not a device; fix: cpu, cuda or cuda:N", args.device)))?;
    super::check_device_flags(args, spec)?;
    let precision = precision(args, spec);
    let e = dtype_of(precision).size_in_bytes() as u64;
    let planned = |shape: ModelShape, batch, (weights_bytes, flops), fwd: Forward, cached| {
        // cuDNN's attention is one part in forwards of more than one query (a decode token keeps the ops).
        let fused =
            args.attention == AttentionKernel::Fused || (args.attention == AttentionKernel::Cudnn && fwd.tokens > 1);
        let parts = Part::of_forward(fused)
            .map(|part| {
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
pub(super) fn plan_text(p: &Plan) -> String {
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
