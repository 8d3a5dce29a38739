//! The model loop: each model with cells to run is found in the cache (or written, when synthetic), loaded once, and
//! its cells measured in grid order, each journaled and the partial bundle rewritten after it.

use std::path::Path;

use anyhow::{Context, Result};
use schema::bundle::{CellKey, CellStatus, ChatTemplateInfo, ModelInfo, TokenizerInfo};
use schema::grid::{AttentionKernel, BertScoreSpec, ModelSpec, Precision};
use sha2::{Digest, Sha256};

use super::Env;
use super::folder::check_same_sources;
use super::measure::measure_cell;
use super::progress::Progress;
use super::scoring::add_generations;
use super::tokens::TokenCache;
use crate::journal::{Journal, Record};
use crate::model::encoder::Encoder;
use crate::model::{ChatFrame, ChatTemplate, LoadedModel, ModelFiles, TransformerOptions};
use crate::{InputError, device, execution, synth};

/// Measures `keys`, model by model (each loaded once, in config order), journaling each cell and rewriting the
/// partial bundle after it. The first call records this process's execution. Returns the signal of a stop.
pub(super) fn measure_keys(
    env: &Env<'_>,
    keys: &[&CellKey],
    models: &[(&ModelSpec, ModelFiles)],
    journal: &mut Journal,
    progress: &mut Progress,
    planned: &[CellKey],
    exec: &mut Option<u32>,
) -> Result<Option<&'static str>> {
    let cfg = &env.resolved.config;
    // The energy counter read around each measured run, or why there is none (said once, and in the bundle).
    let meter = device::energy::Meter::open(env.device);
    let exec = match *exec {
        Some(e) => e,
        None => {
            let mut here = execution::current(env.spec, env.opts.shard);
            match &meter {
                Ok(m) => tracing::info!(source = ?m.source(), "energy: {}", m.scope()),
                // Expected on a CPU in a virtual machine or container; on a GPU a missing NVML is worth a warning.
                Err(reason) if env.device.is_cpu() => {
                    tracing::info!("energy is not measured (said in the bundle): {reason}")
                }
                Err(reason) => tracing::warn!("energy is not measured, the bundle says why: {reason}"),
            }
            // Before the probes and the first model, while the device idles.
            here.energy = Some(device::energy::record(&meter, env.device));
            // The roofline's ceilings, measured once before any cell (never a guess: absent when a probe fails).
            here.device_peaks = match crate::device::peaks::probe_peaks(env.device, cfg.run.dtype) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!("the device's copy and matmul probes failed, the bundle records no peaks: {e:#}");
                    None
                }
            };
            journal.append(Record::Execution(here))?;
            let e = (journal.state.executions.len() - 1) as u32;
            *exec = Some(e);
            e
        }
    };
    // Joules only under an execution that names its counter: a parity search's later round opens the counter again,
    // and one that opens where the first open failed would put energy under an execution that says it had none.
    let counted =
        journal.state.executions.get(exec as usize).and_then(|e| e.energy.as_ref()).is_some_and(|m| m.source.is_some());
    let meter = meter.ok().filter(|_| counted);
    let max_b = cfg.grid.batch_sizes.iter().copied().max().unwrap_or(1);
    let quality = cfg.quality.is_some();
    if cfg.run.attention == AttentionKernel::Cudnn && !cfg!(feature = "cudnn") {
        return Err(crate::InputError(crate::model::cudnn::NOT_BUILT.into()).into());
    }
    for (m, files) in models {
        tracing::info!(model = %m.id, commit = %files.commit, "loading");
        if env.opts.progress {
            crate::say!(
                "loading {} ({} to measure)",
                m.id,
                crate::counted(keys.iter().filter(|k| k.model == m.id).count(), "cell")
            );
        }
        let opts = TransformerOptions {
            attention_f32: cfg.run.attention_f32,
            fused_attention: cfg.run.attention == AttentionKernel::Fused,
            cudnn_attention: cfg.run.attention == AttentionKernel::Cudnn,
            decode_graph: cfg.run.cuda_graphs,
            cuda_fused_ops: cfg.run.cuda_fused_ops,
        };
        let model = LoadedModel::load_with(files, m.kind, env.device, env.dtype, opts)
            .with_context(|| format!("cannot load model {} from {}", m.id, files.snapshot_dir.display()))?;
        let chat = match cfg.prompts.chat_template {
            true => Some(chat_frame(m, files, &model)?),
            false => None,
        };
        let info = model_info(m, &model, files, cfg.run.dtype, chat.as_ref());
        // The run's snapshot (checked before the first cell too; the parity search resolves its files again).
        check_same_sources(journal, [(*m, files)], None)?;
        if !journal.state.models.iter().any(|x| x.id == info.id) {
            journal.append(Record::Model(info))?;
        }
        let mut tokens = TokenCache::new(chat.map(|(_, frame)| frame));
        for key in keys.iter().filter(|k| k.model == m.id) {
            if let Some(sig) = env.opts.stop.requested() {
                return Ok(Some(sig));
            }
            progress.start(key);
            let Some(mut cell) = measure_cell(&model, key, cfg, env.prompts, &mut tokens, env.opts, meter.as_ref())
            else {
                return Ok(env.opts.stop.requested().or(Some("a stop request")));
            };
            // Quality once per group: in its cell of the largest batch size, in batches of that size; when that
            // cell failed (out of memory), in batches of the grid's smaller B, the group's that ran first, then the
            // others largest first (another shard may hold the ones that ran), stored with the failed cell (its
            // status stays), so that the group still has its quality.
            if quality && key.batch_size == max_b {
                let batches: Vec<u32> = match cell.status {
                    CellStatus::Ok => vec![max_b],
                    _ => {
                        let group = metrics::parity::GroupKey::of(key);
                        let ran = |b: u32| {
                            journal.state.cells.iter().any(|c| {
                                c.status == CellStatus::Ok
                                    && c.key.batch_size == b
                                    && metrics::parity::GroupKey::of(&c.key) == group
                            })
                        };
                        let mut smaller: Vec<u32> =
                            cfg.grid.batch_sizes.iter().copied().filter(|&b| b < max_b).collect();
                        smaller.sort_unstable_by_key(|&b| (!ran(b), std::cmp::Reverse(b)));
                        smaller
                    }
                };
                add_generations(&mut cell, &model, cfg, env.prompts, &mut tokens, &batches, &env.opts.stop);
                if let Some(sig) = env.opts.stop.requested() {
                    // Interrupted while generating for quality: the cell is measured again on resume.
                    return Ok(Some(sig));
                }
            }
            cell.execution = Some(exec);
            journal.append(Record::Cell(cell.clone()))?;
            progress.finish(&cell);
            env.write_partial(journal, planned)?;
        }
    }
    Ok(None)
}

/// The chat template of a model (`prompts.chat_template`) and the tokens it puts around every prompt. A model
/// without one, or whose template cannot be rendered, is bad input (exit 2) naming the model and the file.
pub(super) fn chat_template(m: &ModelSpec, files: &ModelFiles) -> Result<ChatTemplate> {
    let template = ChatTemplate::read(&files.snapshot_dir).with_context(|| format!("model {}", m.id))?;
    // Rendered once here, so a template that fails does before anything is measured.
    template.render("").with_context(|| format!("model {}", m.id))?;
    Ok(template)
}

/// [`chat_template`] and its frame in `model`'s tokens.
fn chat_frame(m: &ModelSpec, files: &ModelFiles, model: &LoadedModel) -> Result<(ChatTemplate, ChatFrame)> {
    let template = chat_template(m, files)?;
    let frame = template.frame(&model.tokenizer, model.special.bos).with_context(|| format!("model {}", m.id))?;
    Ok((template, frame))
}

/// Finds a model in the HF cache, first writing synthetic weights when the config asks for them (with a chat
/// template when the synthetic table says so, by default when `chat` - the config's `prompts.chat_template` - is
/// on). Writing a large checkpoint reports its progress when `progress` (not `--quiet`); a cache that cannot be
/// written is bad input.
pub(super) fn model_files(
    m: &ModelSpec,
    cache: &Path,
    run_dtype: Precision,
    chat: bool,
    progress: bool,
) -> Result<ModelFiles> {
    if let Some(s) = &m.synthetic {
        let spec = synth::SynthSpec::from_config(s, run_dtype, chat);
        synth::write_synthetic_with(cache, &m.id, m.kind, &spec, synth::Report::stderr(progress))
            .map_err(|e| synth::cache_error(e, &m.id, cache))?;
    }
    let what = format!("model {}", m.id);
    let instead = "; to run on synthetic weights instead, give the model a `synthetic` table in the config";
    from_cache(cache, &m.id, &m.revision, &what, m.synthetic.is_none().then_some(instead))
}

/// A checkpoint (`what`: how errors name it) from the HF cache, or bad input naming the file and its fix. Where a
/// checkpoint that is not synthetic (`not_synthetic`: then the hint at a synthetic one, or "") is in no folder of this
/// cache at all, the cache may be the wrong one: said once, after it.
fn from_cache(cache: &Path, id: &str, revision: &str, what: &str, not_synthetic: Option<&str>) -> Result<ModelFiles> {
    ModelFiles::from_hf_cache(cache, id, revision).map_err(|e| {
        let repo = crate::model::files::repo_dir(cache, id);
        let also = match (not_synthetic.filter(|_| !repo.exists()), &e) {
            (Some(instead), crate::model::ModelError::MissingFile { .. }) => format!(
                " ({id} is not in the cache {} at all: --model-cache-dir, HF_HUB_CACHE or HF_HOME choose the cache; \
                 `dllm-bench fetch --config CONFIG` fills it where there is network{instead})",
                cache.display()
            ),
            _ => String::new(),
        };
        anyhow::Error::new(InputError(format!("{what}: {e}{also}")))
    })
}

/// Finds the BERTScore encoder in the HF cache, first writing a synthetic one when the config asks for it, and checks
/// its files (`config.json`, `tokenizer.json`) and that it has the layer asked for, before anything is measured.
pub(super) fn encoder_files(b: &BertScoreSpec, cache: &Path) -> Result<ModelFiles> {
    if let Some(s) = &b.synthetic {
        let spec = synth::encoder::EncoderSynth {
            seed: s.seed,
            layers: s.layers.map_or(synth::encoder::EncoderSynth::tiny().layers, |n| n as usize),
            ..synth::encoder::EncoderSynth::tiny()
        };
        synth::encoder::write_synthetic_encoder(cache, &b.id, &spec)
            .map_err(|e| synth::cache_error(e, &b.id, cache))?;
    }
    let revision = b.revision.clone().unwrap_or_else(|| "main".into());
    let what = format!("the BERTScore encoder {}", b.id);
    let files = from_cache(cache, &b.id, &revision, &what, b.synthetic.is_none().then_some(""))?;
    let config = Encoder::check_files(&files)
        .map_err(|e| InputError(format!("the BERTScore encoder {}: {}", b.id, crate::error_text(&e))))?;
    let layer = b.layer().unwrap_or(0) as usize;
    if layer > config.layers {
        return Err(InputError(format!(
            "quality.bertscore.layer = {layer}, and the encoder {} has {} layers ({}); fix: name one of its layers (1 \
             to {})",
            b.id,
            config.layers,
            files.config.display(),
            config.layers
        ))
        .into());
    }
    Ok(files)
}

/// What the bundle records of a model, with the chat template its prompts were wrapped in.
pub(super) fn model_info(
    m: &ModelSpec,
    model: &LoadedModel,
    files: &ModelFiles,
    dtype: Precision,
    chat: Option<&(ChatTemplate, ChatFrame)>,
) -> ModelInfo {
    let c = &model.config;
    let tokenizer_sha = tokenizer_sha256(files);
    ModelInfo {
        id: m.id.clone(),
        revision: m.revision.clone(),
        commit: Some(files.commit.clone()),
        kind: m.kind,
        generation: m.kind.generation().into(),
        parameters: model.parameter_count(),
        weights_bytes: Some(model.weights_bytes()),
        dtype,
        tokenizer: TokenizerInfo {
            vocab_size: model.tokenizer.get_vocab_size(true) as u32,
            bos_id: Some(model.special.bos),
            eos_id: Some(model.special.eos),
            mask_id: model.special.mask,
            special_sources: Some(model.special.sources.clone()),
            sha256: tokenizer_sha,
        },
        synthetic: files.is_synthetic(),
        shape: c.shape(),
        chat_template: chat.map(|(t, frame)| ChatTemplateInfo {
            source: t.origin.clone(),
            sha256: t.sha256(),
            rendered: frame.rendered.clone(),
            frame_tokens: frame.len() as u32,
        }),
    }
}

/// SHA-256 (hex) of a checkpoint's `tokenizer.json`, as the bundle records it; `None` where it cannot be read.
pub(super) fn tokenizer_sha256(files: &ModelFiles) -> Option<String> {
    std::fs::read(&files.tokenizer).ok().map(|b| hex(&Sha256::digest(b)))
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
