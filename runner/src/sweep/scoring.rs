//! Quality: the continuations of each group's largest-B cell (text statistics at once), then each evaluator's
//! perplexity of them; a value that cannot be computed is recorded, never skipped silently.

use super::*;

/// Every evaluator scores what it has not scored yet; returns the signal of a stop.
pub(super) fn score_all(
    env: &Env<'_>,
    evaluators: &[(&ModelSpec, ModelFiles)],
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
    Ok(None)
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
        let mut generations = Vec::with_capacity(count);
        let mut go = || -> Result<()> {
            for (run, start) in (0..count).step_by(b).enumerate() {
                let indices: Vec<u32> = (start..(start + b).min(count)).map(|i| i as u32).collect();
                let batch = indices
                    .iter()
                    .map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens))
                    .collect::<Result<Vec<_>>>()?;
                let (rows, _) = generate_rows(model, &key, cfg, &batch, run as u64)?;
                for (&p, row) in indices.iter().zip(rows) {
                    let text = model.tokenizer.decode(&row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
                    let (prompt_bytes, reference) =
                        tokens.cut(model, prompts, p, key.prompt_tokens, key.output_tokens)?;
                    // A diffusion model may fill a position with the mask token itself: it decodes to nothing.
                    let masked_tokens = (key.sampler != Sampler::ArGreedy)
                        .then(|| row.iter().filter(|&&t| Some(t) == model.special.mask).count() as u32);
                    generations.push(Generation { prompt: p, prompt_bytes, text, reference, masked_tokens });
                }
            }
            Ok(())
        };
        match go() {
            Ok(()) => {
                cell.quality = quality::text_quality(&generations);
                cell.generations = generations;
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
        .filter(|c| !c.generations.is_empty() && !quality::perplexity_settled(c, &spec.id))
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
