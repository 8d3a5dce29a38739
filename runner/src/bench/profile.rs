//! `bench-kernels --profile`: the decode token and the step part by part, and each part's bytes and FLOPs.

use anyhow::Result;
use candle_core::{DType, Device};
use metrics::roofline;
use schema::ModelShape;
use serde::Serialize;

use super::phases::{decode_prompt, decode_run, step_inputs};
use super::plan::{decode_profile_forward, step_forward};
use super::{BenchArgs, bench_options, synthetic_transformer};
use crate::device::peaks::Reps;
use crate::model::{LogitsSpan, ModelConfig, Part, PartTotals, Probe};
use crate::synth::rng::SplitMix64;

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

/// `--profile` of the AR decode: the decode run with a timing probe, `reps` times after the warm-ups.
pub(super) fn decode_profile(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    unprofiled_ms: f64,
) -> Result<PhaseProfile> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed, bench_options(args))?;
    let ids = decode_prompt(args, cfg, device)?;
    let steps = args.decode_tokens;
    let p = profiled(device, reps, |p| decode_run(&tf, &ids, steps, p).map(drop))?;
    let per = (reps.measured * steps) as f64;
    let fwd = decode_profile_forward(args);
    Ok(phase_profile(&cfg.shape(), fwd, true, dtype, p.totals(), per, unprofiled_ms))
}

/// `--profile` of the LLaDA step: the step's forward and its greedy f32 selection with a timing probe.
pub(super) fn step_profile(
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
pub(super) fn profiled(device: &Device, reps: Reps, mut run: impl FnMut(&mut Probe) -> Result<()>) -> Result<Probe> {
    for _ in 0..reps.warmup {
        run(&mut Probe::idle())?;
    }
    let mut p = Probe::timing(device);
    for _ in 0..reps.measured {
        run(&mut p)?;
    }
    Ok(p)
}

/// The profile of a phase from a probe's totals over `per` tokens / steps.
pub(super) fn phase_profile(
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
        Part::Attention => {
            let keys_values = 2 * fwd.batch * fwd.context * kv;
            (l * (2 * rows * q + keys_values) * e, l * 4 * scores * d)
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
