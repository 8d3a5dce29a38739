//! Quality: the continuations of each group's largest-B cell (text statistics at once), then each evaluator's
//! perplexity of them, then their BERTScore; a value that cannot be computed is recorded, never skipped silently.

use anyhow::{Context, Result};
use schema::bundle::{Cell, CellKey, EncoderInfo, Generation, Sampler};
use schema::grid::{BertScoreSpec, GridConfig, ModelKind, ModelSpec, Precision};

use super::Env;
use super::measure::generate_rows;
use super::models::model_info;
use super::tokens::TokenCache;
use crate::device::dtype_of;
use crate::journal::{Journal, Record};
use crate::model::encoder::Encoder;
use crate::model::{LoadedModel, ModelFiles};
use crate::prompts::PromptSet;
use crate::signals::Stop;
use crate::{device, quality};

/// Every evaluator scores what it has not scored yet, then the BERTScore encoder; returns the signal of a stop.
pub(super) fn score_all(
    env: &Env<'_>,
    evaluators: &[(&ModelSpec, ModelFiles)],
    encoder: Option<&(&BertScoreSpec, ModelFiles)>,
    journal: &mut Journal,
    planned: &[CellKey],
) -> Result<Option<&'static str>> {
    for (e, files) in evaluators {
        let stopped = score_perplexity(env, e, files, journal)?;
        env.write_partial(journal, planned)?;
        if stopped.is_some() {
            return Ok(stopped);
        }
    }
    if let Some((spec, files)) = encoder {
        let stopped = score_bertscore(env, spec, files, journal)?;
        env.write_partial(journal, planned)?;
        if stopped.is_some() {
            return Ok(stopped);
        }
    }
    Ok(None)
}

/// Loads the BERTScore encoder and scores every finished cell's continuations against their prompts' true
/// continuations, where it has not yet (a value or the error that prevented one: a resumed run scores only what is
/// missing). Returns the signal when a stop was requested. A resume with another snapshot of the encoder than the
/// one the run started with is refused, as for the models.
pub(super) fn score_bertscore(
    env: &Env<'_>,
    spec: &BertScoreSpec,
    files: &ModelFiles,
    journal: &mut Journal,
) -> Result<Option<&'static str>> {
    let settled_by = metrics::coverage::BERTSCORE_SETTLED_BY;
    let pending: Vec<Cell> = journal
        .state
        .cells
        .iter()
        .filter(|c| !c.generations.is_empty() && !metrics::coverage::settled(c, settled_by, &spec.id))
        .cloned()
        .collect();
    if pending.is_empty() {
        return Ok(None);
    }
    if let Some(old) = journal.state.encoders.iter().find(|e| e.id == spec.id)
        && old.commit != files.commit
    {
        return Err(crate::InputError(format!(
            "cannot resume {}: the BERTScore encoder {} changed since the run started (snapshot {} then, {} now); \
             fix: restore that snapshot (refs/{} in the model cache), or start a new run folder",
            journal.path().display(),
            spec.id,
            old.commit,
            files.commit,
            files.revision
        ))
        .into());
    }
    // Checked against the encoder's layers before anything was measured (`models::encoder_files`).
    let layer = spec.layer().unwrap_or(0) as usize;
    tracing::info!(encoder = %spec.id, layer, cells = pending.len(), "scoring BERTScore");
    let precision = env.resolved.config.quality.as_ref().map_or(Precision::F32, |q| q.evaluator_dtype());
    let encoder = Encoder::load(files, env.device, dtype_of(precision)).with_context(|| {
        format!("cannot load the BERTScore encoder {} from {}", spec.id, files.snapshot_dir.display())
    })?;
    if !journal.state.encoders.iter().any(|e| e.id == spec.id) {
        journal.append(Record::Encoder(encoder_info(spec, &encoder, files, layer, precision)))?;
    }
    let (opts, n) = (env.opts, pending.len());
    for (i, cell) in pending.iter().enumerate() {
        if let Some(sig) = opts.stop.requested() {
            return Ok(Some(sig));
        }
        let outcome = quality::bertscore::bertscore_values(&encoder, &spec.id, layer, &cell.generations);
        let message = match outcome {
            Ok(values) if !values.is_empty() => {
                if opts.progress
                    && let Some(f1) = values.iter().find(|v| v.metric == settled_by)
                {
                    crate::say!("[{}/{n}] BERTScore F1 of {} under {}: {:.4}", i + 1, cell.key, spec.id, f1.value);
                }
                for value in values {
                    journal.append(Record::Quality { key: cell.key.clone(), value })?;
                }
                continue;
            }
            Ok(_) => "no continuation has a true continuation of its prompt to compare with (the prompt text ends \
                      where the model's prompt was cut, or the continuation is empty)"
                .to_string(),
            Err(e) => format!("cannot score BERTScore: {}", crate::error_text(&e)),
        };
        tracing::warn!(cell = %cell.key, encoder = %spec.id, "{message}");
        if opts.progress {
            crate::say!("[{}/{n}] BERTScore of {} under {}: FAILED: {message}", i + 1, cell.key, spec.id);
        }
        let error =
            schema::bundle::QualityError { metric: settled_by.into(), evaluator: Some(spec.id.clone()), message };
        journal.append(Record::QualityError { key: cell.key.clone(), error })?;
    }
    Ok(None)
}

/// What the bundle records of the BERTScore encoder.
fn encoder_info(
    spec: &BertScoreSpec,
    encoder: &Encoder,
    files: &ModelFiles,
    layer: usize,
    dtype: Precision,
) -> EncoderInfo {
    let c = &encoder.config;
    EncoderInfo {
        id: spec.id.clone(),
        revision: files.revision.clone(),
        commit: files.commit.clone(),
        architecture: c.model_type.to_string(),
        layers: c.layers as u32,
        layer: layer as u32,
        hidden: c.hidden as u32,
        parameters: encoder.parameter_count(),
        dtype,
        tokenizer_sha256: super::models::tokenizer_sha256(files),
        synthetic: files.is_synthetic(),
    }
}

/// Generates one continuation per prompt of the set with the cell's algorithm, in batches of each of `batches` in
/// turn until one succeeds (the cell's B; when its cell failed, the smaller B of the grid, largest first: a B that
/// runs out of memory hands over to the next; unmeasured runs after the timed ones), and computes the text
/// statistics. When none succeeds (or none is given), the cell's `quality_errors` says why (metric
/// `generations`): its status and timings stay. A stop request ends the attempts.
pub(super) fn add_generations(
    cell: &mut Cell,
    model: &LoadedModel,
    cfg: &GridConfig,
    prompts: &PromptSet,
    tokens: &mut TokenCache,
    batches: &[u32],
    stop: &Stop,
) {
    let key = cell.key.clone();
    let count = prompts.texts.len();
    let mut tried = Vec::new();
    for &batch in batches {
        let b = batch.max(1) as usize;
        let go = |indices: &[u32], run: u64| -> Result<Vec<Generation>> {
            let batch = indices
                .iter()
                .map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens))
                .collect::<Result<Vec<_>>>()?;
            let (rows, _) = generate_rows(model, &key, cfg, &batch, run)?;
            let mut out = Vec::with_capacity(indices.len());
            for (&p, row) in indices.iter().zip(rows) {
                let text = model.tokenizer.decode(&row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
                let (prompt_bytes, reference) = tokens.cut(model, prompts, p, key.prompt_tokens, key.output_tokens)?;
                // A diffusion model may fill a position with the mask token itself: it decodes to nothing.
                let masked_tokens = (key.sampler != Sampler::ArGreedy)
                    .then(|| row.iter().filter(|&&t| Some(t) == model.special.mask).count() as u32);
                out.push(Generation { prompt: p, prompt_bytes, text, reference, masked_tokens });
            }
            Ok(out)
        };
        match continuations(count, b, go) {
            Ok((generations, stalled)) if generations.is_empty() && !stalled.is_empty() => {
                // Nothing to score: said as a failure of the generations, with the prompts.
                cell.stalled_prompts = stalled;
                tried.push(format!(
                    "in batches of {b}: the sampler stalled on every prompt (a threshold block whose steps commit \
                     nothing: the model predicts the mask id)"
                ));
                break;
            }
            Ok((generations, stalled)) => {
                if !stalled.is_empty() {
                    tracing::warn!(
                        cell = %key,
                        "the sampler stalled on prompts {stalled:?} (a threshold block that commits nothing): their \
                         continuations are left out (stalled_prompts), the other {} are scored",
                        generations.len()
                    );
                }
                cell.quality = quality::text_quality(&generations);
                cell.generations = generations;
                cell.stalled_prompts = stalled;
                return;
            }
            Err(e) => {
                device::release(&model.device);
                // A stop request is not a failure: the cell is measured again on resume.
                if stop.requested().is_some() {
                    return;
                }
                let text = crate::error_text(&e);
                tracing::warn!(cell = %key, "the quality generations in batches of {b} failed: {text}");
                tried.push(format!("in batches of {b}: {text}"));
            }
        }
    }
    let message = match tried.is_empty() {
        true => {
            "no batch size to generate the continuations at: the cell failed and the grid has no smaller B".to_string()
        }
        false => format!("the quality generations failed {}", tried.join("; then ")),
    };
    cell.quality_errors.push(schema::bundle::QualityError { metric: "generations".into(), evaluator: None, message });
}

/// The continuations of prompts `0..count` in batches of `b` (`generate(prompt indices, run)`, run = the batch's
/// number), and the prompts the sampler stalled on ([`crate::generate::GenerateError::Stalled`]): a batch that
/// stalls is generated again one prompt at a time, so that only the prompts that stall on their own are lost, and
/// the others are kept. Any other error ends it.
pub(super) fn continuations<G>(
    count: usize,
    b: usize,
    mut generate: impl FnMut(&[u32], u64) -> Result<Vec<G>>,
) -> Result<(Vec<G>, Vec<u32>)> {
    let stall = |e: &anyhow::Error| matches!(e.downcast_ref(), Some(crate::generate::GenerateError::Stalled(_)));
    let (mut out, mut stalled) = (Vec::with_capacity(count), Vec::new());
    for (run, start) in (0..count).step_by(b.max(1)).enumerate() {
        let indices: Vec<u32> = (start..(start + b.max(1)).min(count)).map(|i| i as u32).collect();
        match generate(&indices, run as u64) {
            Ok(g) => out.extend(g),
            Err(e) if stall(&e) && indices.len() == 1 => stalled.push(indices[0]),
            Err(e) if stall(&e) => {
                for &p in &indices {
                    match generate(&[p], run as u64) {
                        Ok(g) => out.extend(g),
                        Err(e) if stall(&e) => stalled.push(p),
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok((out, stalled))
}

/// Loads an evaluator and scores the perplexity of every finished cell's generations it has not scored yet
/// (a resumed run scores only what is missing). Returns the signal when a stop was requested.
pub(super) fn score_perplexity(
    env: &Env<'_>,
    spec: &ModelSpec,
    files: &ModelFiles,
    journal: &mut Journal,
) -> Result<Option<&'static str>> {
    let (opts, prompts) = (env.opts, env.prompts);
    let pending: Vec<Cell> = journal
        .state
        .cells
        .iter()
        // A failure is recorded once (in the bundle's `quality_errors`); a new run scores it again.
        .filter(|c| !c.generations.is_empty() && !metrics::coverage::perplexity_settled(c, &spec.id))
        .cloned()
        .collect();
    if pending.is_empty() {
        return Ok(None);
    }
    tracing::info!(evaluator = %spec.id, cells = pending.len(), "scoring perplexity");
    let precision = env.resolved.config.quality.as_ref().map_or(Precision::F32, |q| q.evaluator_dtype());
    let evaluator = LoadedModel::load(files, ModelKind::Llama, env.device, dtype_of(precision))
        .with_context(|| format!("cannot load the evaluator {} from {}", spec.id, files.snapshot_dir.display()))?;
    if !journal.state.models.iter().any(|m| m.id == spec.id) {
        journal.append(Record::Model(model_info(spec, &evaluator, files, precision, None)))?;
    }
    for (i, cell) in pending.iter().enumerate() {
        if let Some(sig) = opts.stop.requested() {
            return Ok(Some(sig));
        }
        match quality::perplexity(&evaluator, &spec.id, prompts, &cell.generations) {
            Ok(Some(value)) => {
                if opts.progress {
                    crate::say!(
                        "[{}/{}] perplexity of {} under {}: {:.3}",
                        i + 1,
                        pending.len(),
                        cell.key,
                        spec.id,
                        value.value
                    );
                }
                journal.append(Record::Quality { key: cell.key.clone(), value })?;
            }
            outcome => {
                let message = match outcome {
                    Err(e) => format!("cannot score perplexity: {}", crate::error_text(&e)),
                    _ => "no continuation has a token to score (every generated position decoded to nothing)".into(),
                };
                tracing::warn!(cell = %cell.key, evaluator = %spec.id, "{message}");
                if opts.progress {
                    crate::say!(
                        "[{}/{}] perplexity of {} under {}: FAILED: {message}",
                        i + 1,
                        pending.len(),
                        cell.key,
                        spec.id
                    );
                }
                let error = schema::bundle::QualityError {
                    metric: "perplexity".into(),
                    evaluator: Some(spec.id.clone()),
                    message,
                };
                journal.append(Record::QualityError { key: cell.key.clone(), error })?;
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::continuations;
    use crate::generate::GenerateError;

    #[test]
    fn a_stalled_prompt_loses_its_continuation_only() {
        // Prompts 2 and 5 stall wherever they are; prompt 6's batch fails otherwise.
        let stalls = |p: &[u32]| p.iter().any(|p| [2, 5].contains(p));
        let mut calls = Vec::new();
        let (out, stalled) = continuations(7, 3, |p, run| {
            calls.push((p.to_vec(), run));
            if stalls(p) {
                return Err(GenerateError::Stalled("block 0 committed nothing".into()).into());
            }
            Ok(p.to_vec())
        })
        .expect("stalls are recorded, not errors");
        assert_eq!(out, [0, 1, 3, 4, 6], "every other prompt's continuation is kept, in order");
        assert_eq!(stalled, [2, 5]);
        // Each stalled batch again one prompt at a time, with the batch's run number; a lone prompt not twice.
        assert_eq!(calls.len(), 3 + 3 + 3);
        assert!(calls.iter().filter(|(p, _)| p.len() == 1).all(|(p, run)| u64::from(p[0] / 3) == *run));
        let (_, stalled) = continuations(3, 1, |p, _| {
            if stalls(p) { Err(GenerateError::Stalled("x".into()).into()) } else { Ok(p.to_vec()) }
        })
        .expect("ok");
        assert_eq!(stalled, [2]);
        // Any other error is the generations' failure.
        let err = continuations(7, 3, |p, _| -> anyhow::Result<Vec<u32>> {
            if p.contains(&4) { Err(anyhow::anyhow!("out of memory")) } else { Ok(p.to_vec()) }
        });
        assert!(err.is_err());
    }
}
