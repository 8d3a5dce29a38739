//! Measuring one cell: warm-ups, then timed repetitions, each one generation of a batch with the cell's algorithm;
//! its memory peaks, energy and analytic work; a failure (out of memory, NaN) becomes the cell's status.

use anyhow::Result;
use schema::bundle::{Cell, CellKey, CellStatus, Repetition, Sampler};
use schema::grid::{DreamAlg, GridConfig};

use super::tokens::TokenCache;
use crate::generate::{DreamParams, LladaParams};
use crate::model::LoadedModel;
use crate::prompts::PromptSet;
use crate::{device, generate};

/// A cell running longer than this (seconds) says each of its runs as it ends (`progress`).
const LONG_CELL_S: f64 = 60.0;

/// Warms up and measures one cell; failures become the cell's status. `None` when a stop was requested
/// before the cell finished: the cell is abandoned, not recorded, and measured again on resume. With an energy
/// `meter`, each measured run records the joules it used (absent where a reading fails, which is logged). With
/// progress on (`opts.progress`), a cell past [`LONG_CELL_S`] says each run as it ends.
pub(super) fn measure_cell(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    prompts: &PromptSet,
    tokens: &mut TokenCache,
    opts: &super::SweepOptions,
    meter: Option<&device::energy::Meter>,
) -> Option<Cell> {
    let (stop, progress) = (&opts.stop, opts.progress);
    let warmup = cfg.run.warmup;
    // The warm-ups that ran to the end (fewer than asked when the cell fails in one).
    let mut warmed = 0u32;
    let mut reps = Vec::new();
    let mut run = |i: usize, measured: bool| -> Result<()> {
        let indices = prompts.batch_indices(i, key.batch_size as usize);
        let batch =
            indices.iter().map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens)).collect::<Result<Vec<_>>>()?;
        if let Some(fault) = device::injected_oom(&key.to_string(), measured) {
            return Err(fault);
        }
        // On the CPU an allocation that fails aborts the process: a cell that cannot fit is refused first.
        if i == 0 {
            device::check_host_memory(&model.device, cell_bytes(model, key, &batch, cfg.grid.cfg_scale))?;
        }
        // Peaks that could not be reset would be an earlier run's: absent instead.
        let window = measured.then(|| device::reset_peaks(&model.device));
        // The energy window: from the idle device (after the peaks' synchronisation) to the last token.
        let energy = meter.filter(|_| measured).map(|m| m.start(&model.device));
        let (rows, rep) = generate_rows(model, key, cfg, &batch, i as u64)?;
        let used = match (meter, energy) {
            (Some(m), Some(start)) => start.and_then(|s| m.finish(&model.device, &s)).map(Some),
            _ => Ok(None),
        };
        let mut rep = count_output(model, key.sampler, &rows, rep)?;
        match used {
            Ok(used) => {
                rep.energy_j = used.map(|u| u.joules);
                rep.energy_window_ms = used.map(|u| u.window_ms);
            }
            Err(e) => tracing::warn!(cell = %key, "energy: this run's reading failed, its energy is absent: {e}"),
        }
        if measured {
            let peaks = match window {
                Some(w) => device::read_peaks(&model.device).within(w),
                None => device::MemoryPeaks::default(),
            };
            rep.prompt_indices = indices;
            rep.peak_allocated_bytes = peaks.allocated;
            rep.peak_reserved_bytes = peaks.reserved;
            rep.device_used_bytes = peaks.device_used;
            rep.peak_rss_bytes = peaks.rss;
            reps.push(rep);
        } else {
            warmed += 1;
        }
        Ok(())
    };
    let schedule = (0..warmup as usize).map(|i| (i, false)).chain((0..cfg.run.repetitions as usize).map(|i| (i, true)));
    // The pool starts the cell holding what is allocated (the weights) and no more, so that the reserved peaks of its
    // measured runs are this cell's (the warm-ups grow the pool back to the cell's own need), not the largest
    // earlier cell's: the pool keeps what it reserved (`device::prepare`) and a reset starts the high-water mark at
    // the current reservation.
    device::release(&model.device);
    let mut outcome = Ok(());
    let started = std::time::Instant::now();
    for (i, measured) in schedule {
        if stop.requested().is_some() {
            return None;
        }
        if let Err(e) = run(i, measured) {
            // A stop inside a repetition abandons it (and the cell), leaving the journal as it was.
            if stop.requested().is_some() {
                return None;
            }
            outcome = Err(e);
            break;
        }
        // A long cell (an 8B model at a large B, N and K) says how far it is, so that a job's log shows it alive;
        // the cell is journaled only once all its runs are done (a stop before then measures it again).
        let elapsed = started.elapsed().as_secs_f64();
        if progress && elapsed >= LONG_CELL_S {
            let (what, of) = if measured { ("repetition", cfg.run.repetitions) } else { ("warm-up", warmup) };
            crate::say!("  {key}: {what} {}/{of} done, {elapsed:.0} s into the cell", i + 1);
        }
    }
    let status = match outcome {
        Ok(()) => CellStatus::Ok,
        Err(e) => {
            // The failed run's tensors are dropped by now: give their memory back before the next cell.
            device::release(&model.device);
            let text = crate::error_text(&e);
            // The progress line says so (and the bundle keeps it): here only for `--log info`.
            tracing::info!(cell = %key, "cell failed: {text}");
            if device::is_out_of_memory(&e) {
                CellStatus::Oom { message: oom_message(key, &text) }
            } else {
                CellStatus::Error { message: text }
            }
        }
    };
    Some(Cell {
        key: key.clone(),
        status,
        warmup_runs: warmed,
        repetitions: reps,
        execution: None,
        quality: vec![],
        generations: vec![],
        quality_errors: vec![],
        stalled_prompts: vec![],
    })
}

/// An out-of-memory status names what the cell asked for, so the grid's limit can be read from the bundle.
pub(super) fn oom_message(key: &CellKey, error: &str) -> String {
    let steps = match (key.steps, key.threshold) {
        (Some(k), _) => format!(", K={k}"),
        (None, Some(t)) => format!(", threshold={t}"),
        (None, None) => String::new(),
    };
    format!(
        "out of memory at B={}, N={} ({} prompt + {} output tokens){steps}: {error}; fix: a smaller batch size or \
         sequence length, or a device with more memory",
        key.batch_size, key.seq_len, key.prompt_tokens, key.output_tokens
    )
}

/// A repetition's generated tokens and decoded bytes over the batch's `rows`. The study's T_gen counts valid output
/// tokens: a position a diffusion model left masked (it chose the mask id itself, which only random synthetic
/// weights practically do) generated none, and decodes to nothing.
fn count_output(model: &LoadedModel, sampler: Sampler, rows: &[Vec<u32>], mut rep: Repetition) -> Result<Repetition> {
    let mask = model.special.mask.filter(|_| sampler != Sampler::ArGreedy);
    rep.output_tokens = rows.iter().flatten().filter(|&&t| Some(t) != mask).count() as u64;
    for row in rows {
        let text = model.tokenizer.decode(row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        rep.output_bytes += text.len() as u64;
    }
    Ok(rep)
}

/// The largest working set of one generation of `batch` beyond the weights, in bytes, from the model's shape: the
/// attention scores of a full pass (B x heads x len x len, f32), the KV cache (AR, LLaDA's block caches), the logits (with the
/// selection's f64 copy for LLaDA) and the MLP activations. A lower bound of what the run allocates.
pub(super) fn cell_bytes(model: &LoadedModel, key: &CellKey, batch: &[Vec<u32>], cfg_scale: f64) -> u64 {
    let s = model.config.shape();
    let (b, prompt) = (batch.len() as u64, batch.iter().map(Vec::len).max().unwrap_or(0) as u64);
    // Guidance doubles the rows of a LLaDA forward.
    let b = if cfg_scale > 0.0 && key.sampler != Sampler::ArGreedy { 2 * b } else { b };
    let n_out = u64::from(key.output_tokens);
    let len = prompt + n_out;
    let (heads, hidden, inter, vocab) =
        (u64::from(s.heads), u64::from(s.hidden), u64::from(s.intermediate), u64::from(s.vocab));
    let dtype = model.dtype.size_in_bytes() as u64;
    let f32b = 4u64;
    let sat = |xs: &[u64]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x));
    match key.sampler {
        Sampler::ArGreedy => {
            let scores = sat(&[b, heads, prompt, prompt, f32b]);
            let kv = metrics::roofline::kv_cache_bytes(&s, b, len, dtype);
            let acts = sat(&[b, prompt, inter.max(hidden), dtype, 3]);
            scores.saturating_add(kv).saturating_add(acts).saturating_add(sat(&[b, vocab, f32b]))
        }
        _ => {
            let block = u64::from(key.block_length.unwrap_or(key.output_tokens));
            let scores = sat(&[b, heads, len, len, f32b]);
            let logits = sat(&[b, block, vocab, f32b + 8]);
            let acts = sat(&[b, len, inter.max(hidden), dtype, 3]);
            let cache = if key.cache.is_some() { metrics::roofline::kv_cache_bytes(&s, b, len, dtype) } else { 0 };
            scores.saturating_add(logits).saturating_add(acts).saturating_add(cache)
        }
    }
}

/// The analytic work of one generation of `batch` (left-padded to its longest prompt) for the roofline context:
/// AR decoding, or a LLaDA sampler that ran `block_steps` steps per block. With classifier-free guidance
/// (`cfg_scale` > 0) a LLaDA step is one forward of 2B rows (the weights are read once per step, the FLOPs double).
pub(super) fn roofline_work(
    model: &LoadedModel,
    key: &CellKey,
    batch: &[Vec<u32>],
    cfg_scale: f64,
    block_steps: &[usize],
) -> metrics::roofline::Work {
    let shape = model.config.shape();
    let dtype_bytes = model.dtype.size_in_bytes() as u64;
    let (b, prompt) = (batch.len() as u64, batch.iter().map(Vec::len).max().unwrap_or(0) as u64);
    let guided_rows = if cfg_scale > 0.0 { 2 } else { 1 };
    let n_out = u64::from(key.output_tokens);
    match key.sampler {
        Sampler::ArGreedy => metrics::roofline::autoregressive(&shape, b, prompt, n_out, dtype_bytes),
        _ => {
            let block = u64::from(key.block_length.unwrap_or(key.output_tokens));
            let forwards: Vec<u64> = block_steps.iter().map(|&f| f as u64).collect();
            metrics::roofline::diffusion_sampler(
                &shape,
                b * guided_rows,
                prompt,
                block,
                &forwards,
                key.cache,
                dtype_bytes,
            )
        }
    }
}

/// One generation of a batch with the cell's algorithm: the generated ids of each row, and the timings.
pub(super) fn generate_rows(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    batch: &[Vec<u32>],
    run: u64,
) -> Result<(Vec<Vec<u32>>, Repetition)> {
    let n_out = key.output_tokens as usize;
    let (rows, rep) = match key.sampler {
        Sampler::ArGreedy => {
            let out = generate::generate_ar(model, batch, n_out, cfg.grid.eos)?;
            let work = roofline_work(model, key, batch, cfg.grid.cfg_scale, &[]);
            let rep = Repetition {
                weights_read_bytes: metrics::roofline::countable(work.weights_read_bytes),
                flop_count: metrics::roofline::countable(work.flops),
                kv_cache_bytes: work.kv_cache_bytes.and_then(metrics::roofline::countable),
                e2e_ms: out.e2e_ms,
                prefill_ms: Some(out.prefill_ms),
                forward_passes: Some(n_out as u32),
                ..Repetition::default()
            };
            (out.tokens, rep)
        }
        Sampler::LladaLowConfidence | Sampler::LladaRandom => {
            let params = LladaParams {
                steps: key.steps.unwrap_or(n_out as u32) as usize,
                block_length: key.block_length.unwrap_or(key.output_tokens) as usize,
                temperature: cfg.grid.temperature,
                remasking: match key.sampler {
                    Sampler::LladaRandom => generate::Remasking::Random,
                    _ => generate::Remasking::LowConfidence,
                },
                seed: cfg.run.seed.wrapping_add(run),
                cfg_scale: cfg.grid.cfg_scale,
                confidence: cfg.grid.confidence,
                gumbel_noise: cfg.grid.gumbel_noise,
                cache: key.cache,
                threshold: key.threshold.map(|t| t.value()),
            };
            let out = generate::generate_llada(model, batch, n_out, &params)?;
            let work = roofline_work(model, key, batch, cfg.grid.cfg_scale, &out.block_steps);
            let committed = out.transfers.iter().map(|t| t.iter().sum::<usize>() as u32).collect();
            let rep = Repetition {
                e2e_ms: out.e2e_ms,
                first_block_ms: Some(out.first_block_ms),
                step_ms: Some(out.step_ms.clone()),
                forward_passes: Some(out.nfe as u32),
                committed_per_step: Some(committed),
                weights_read_bytes: metrics::roofline::countable(work.weights_read_bytes),
                flop_count: metrics::roofline::countable(work.flops),
                // The cache's buffers as allocated (the analytic size is the same: K and V for every position).
                kv_cache_bytes: out
                    .cache_bytes
                    .map(|b| b as u64)
                    .or(work.kv_cache_bytes.and_then(metrics::roofline::countable)),
                ..Repetition::default()
            };
            (out.tokens, rep)
        }
        Sampler::DreamOrigin | Sampler::DreamMaskgitPlus | Sampler::DreamTopkMargin | Sampler::DreamEntropy => {
            let params = DreamParams {
                steps: key.steps.unwrap_or(n_out as u32) as usize,
                alg: DreamAlg::of(key.sampler).unwrap_or(DreamAlg::Entropy),
                temperature: cfg.grid.temperature,
                top_p: cfg.grid.top_p,
                seed: cfg.run.seed.wrapping_add(run),
            };
            let out = generate::generate_dream(model, batch, n_out, &params)?;
            // One block of N_out: the roofline of K full forwards, the LM head over the generated region.
            let work = roofline_work(model, key, batch, 0.0, &[out.nfe]);
            let committed = out.transfers.iter().map(|t| t.iter().sum::<usize>() as u32).collect();
            let rep = Repetition {
                e2e_ms: out.e2e_ms,
                first_block_ms: Some(out.e2e_ms),
                step_ms: Some(out.step_ms.clone()),
                forward_passes: Some(out.nfe as u32),
                committed_per_step: Some(committed),
                weights_read_bytes: metrics::roofline::countable(work.weights_read_bytes),
                flop_count: metrics::roofline::countable(work.flops),
                kv_cache_bytes: work.kv_cache_bytes.and_then(metrics::roofline::countable),
                ..Repetition::default()
            };
            (out.tokens, rep)
        }
    };
    Ok((rows, rep))
}
