//! The timed phases of `bench-kernels`: an AR decode token, a LLaDA step, the selection after it, and the
//! logits of a precision against f32.

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use metrics::roofline;
use schema::ModelShape;

use super::plan::{decode_work, step_forward};
use super::{BenchArgs, Drift, Phase, Selection, bench_options, random_ids, synthetic_transformer};
use crate::device::peaks::{Reps, median_ms};
use crate::device::timing::Stopwatch;
use crate::generate::decode_greedy;
use crate::model::transformer::Greedy;
use crate::model::{LogitsSpan, ModelConfig, Part, Positions, Probe, Rope, Transformer};
use crate::synth::rng::SplitMix64;
use schema::grid::ModelKind;

pub(super) fn decode_bench(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
    reps: Reps,
    copy_bytes_per_s: f64,
) -> Result<Phase> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed, bench_options(args))?;
    let (b, n, steps) = (args.decode_batch, args.seq_len, args.decode_tokens);
    let ids = decode_prompt(args, cfg, device)?;
    // `generate_ar`'s own decoding (eager, or CUDA-graph replays with `--cuda-graphs`): the mean of its per-token
    // times after the prefill.
    let ms = median_ms(reps, || {
        let out = decode_greedy(&tf, &ids, None, steps + 1, &[])?;
        Ok(out.token_ms[1..].iter().sum::<f64>() / steps as f64)
    })?;
    let shape = cfg.shape();
    let (weights_bytes, flops) = decode_work(args, &shape, dtype.size_in_bytes() as u64);
    let floor_ms = weights_bytes as f64 / copy_bytes_per_s * 1e3;
    Ok(Phase::timed(shape, (b, n), ms, (weights_bytes, flops), ms / floor_ms))
}

/// The decode benchmark's prompt: `--decode-batch` rows of N - `--decode-tokens` random ids.
pub(super) fn decode_prompt(args: &BenchArgs, cfg: &ModelConfig, device: &Device) -> Result<Tensor> {
    let (b, prompt) = (args.decode_batch, args.seq_len - args.decode_tokens);
    let mut rng = SplitMix64::new(args.seed ^ 0xDEC0DE);
    Ok(Tensor::from_vec(random_ids(b, prompt, cfg.vocab_size, &mut rng), (b, prompt), device)?)
}

/// A prefill of `ids`, then `steps` single-token forwards with the KV cache, each followed by the greedy choice
/// on the device whose ids are the next forward's input, the per-token work of `generate_ar`'s eager decoding,
/// with `p` probing the decode tokens (`--profile`). Milliseconds per decode token.
pub(super) fn decode_run(tf: &Transformer, ids: &Tensor, steps: usize, p: &mut Probe) -> Result<f64> {
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

pub(super) fn step_bench(
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
    Ok(Phase::timed(shape, (b, n), ms, (weights_bytes, flops), flops_per_s / matmul_flops_per_s))
}

/// The LLaDA step's model, `--batch` x `--seq-len` random ids and their RoPE tables.
pub(super) fn step_inputs(
    args: &BenchArgs,
    cfg: &ModelConfig,
    device: &Device,
    dtype: DType,
) -> Result<(Transformer, Tensor, Rope)> {
    let tf = synthetic_transformer(cfg, device, dtype, args.seed.wrapping_add(1), bench_options(args))?;
    let (b, n) = (args.batch, args.seq_len);
    let mut rng = SplitMix64::new(args.seed ^ 0x11ADA);
    let ids = Tensor::from_vec(random_ids(b, n, cfg.vocab_size, &mut rng), (b, n), device)?;
    let rope = tf.rope(&Positions::Range { start: 0, len: n })?;
    Ok((tf, ids, rope))
}

/// One forward of `cfg` over `--batch` x `--seq-len` random ids (causal for the Llama kind) in `dtype` and in
/// f32 with the same weights; the logits of the last `--block-length` positions compared.
pub(super) fn dtype_drift(args: &BenchArgs, cfg: &ModelConfig, device: &Device, dtype: DType) -> Result<Drift> {
    let (b, n, bl) = (args.batch, args.seq_len, args.block_length);
    let mut rng = SplitMix64::new(args.seed ^ 0xD81F7);
    let ids = Tensor::from_vec(random_ids(b, n, cfg.vocab_size, &mut rng), (b, n), device)?;
    let logits = |dtype: DType| -> Result<Tensor> {
        let tf = synthetic_transformer(cfg, device, dtype, args.seed.wrapping_add(2), bench_options(args))?;
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
        model: cfg.kind.name().to_string(),
        logits: count,
        max_abs_diff: scalar(diff.flatten_all()?.max(0)?)?,
        f32_max_abs: scalar(reference.abs()?.flatten_all()?.max(0)?)?,
        mean_abs_diff: scalar(diff.flatten_all()?.mean(0)?)?,
        argmax_agreement: scalar(same.flatten_all()?.mean(0)?)?,
    })
}

pub(super) fn selection_bench(
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

impl Phase {
    /// A phase of `(batch, seq_len)` that took `ms` per token / step for its `(weights bytes, FLOPs)`, with its
    /// achieved rates and its ratio to the floor.
    fn timed(shape: ModelShape, (batch, seq_len): (usize, usize), ms: f64, work: (u64, u64), ratio: f64) -> Phase {
        let (weights_bytes, flops) = work;
        let s = ms / 1e3;
        Phase {
            shape,
            batch,
            seq_len,
            ms,
            weights_bytes,
            flops,
            bytes_per_s: weights_bytes as f64 / s,
            flops_per_s: flops as f64 / s,
            ratio_to_floor: ratio,
        }
    }
}
