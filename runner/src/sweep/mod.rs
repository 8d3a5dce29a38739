//! The sweep: for each model, for each cell of the plan (or of this shard), warm up, measure, record; then
//! write the bundle.
//!
//! One module per job: `folder` (run folder, lock, journal, same-run check), the orchestration here ([`run`]),
//! `models` (the model loop), `measure` (one cell), `tokens` (prompts as ids), `scoring` (quality), `search` (the
//! parity search), `assemble` (journal to bundle), `progress`.
//!
//! Models are loaded one at a time so that one model's weights never count in the other's memory figures.
//! Every model with cells to run is found in the cache (or written, when synthetic) before anything is
//! measured, so a missing file fails the run at once. Each finished cell is appended to the run's
//! [`journal`](crate::journal) (synced) and the partial bundle rewritten before the next cell starts; a resumed
//! run skips the cells its journal holds. A cell that fails is recorded with its status and message and the
//! sweep goes on; the exit status says whether any cell failed. A stop request ([`Stop`]) abandons the current
//! cell between two runs of it and ends the sweep with a valid partial bundle. Bundles are written atomically.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use schema::ShardInfo;
use schema::bundle::{Bundle, CellKey, CellStatus, PromptSetInfo};
use schema::grid::{AttentionKernel, DeviceSpec, GridConfig, ModelKind, ModelSpec};

use crate::device::dtype_of;
use crate::journal::Journal;
use crate::model::{LoadedModel, ModelFiles};
use crate::plan::ResolvedConfig;
use crate::prompts::PromptSet;
use crate::signals::Stop;
use crate::{InputError, output, shard};

mod assemble;
mod folder;
mod measure;
mod models;
mod progress;
mod scoring;
mod search;
mod tokens;

use assemble::assemble;
pub(crate) use assemble::{bundle_encoders, bundle_models};
use folder::{
    check_final_bundle, check_same_sources, create_journal, final_bundle_path, open_folder, remove_run_files,
};
use models::{chat_template, measure_keys, model_files};
use progress::Progress;
use scoring::score_all;
use search::parity_search_cells;

/// The attention both models use (the study's fairness rule), recorded in every bundle.
pub const ATTENTION: &str = "candle matmul-softmax-matmul attention in the run's precision, identical for both \
                             models; grouped-query heads by batched matmul over each KV head's group of queries \
                             (no KV head copied); causal mask for llama, no mask for llada; padding mask for \
                             left-padded rows; llama decodes with a KV cache preallocated for prompt + N_out - 1 \
                             positions and written in place, its greedy ids kept on the device; q/k/v and gate/up \
                             each one projection; on the CPU RMSNorm, RoPE and SwiGLU one fused kernel each";

/// The attention of a run as recorded in its bundle: [`ATTENTION`], or its f32, fused or cuDNN variant when the
/// config asks (the fused kernel widens q, k, v to f32 itself, so `attention_f32` changes nothing there), with the
/// fused CUDA kernels and the CUDA-graph decode when asked.
pub fn attention(cfg: &GridConfig) -> String {
    let mut kernel = attention_kernel(cfg);
    if cfg.run.cuda_fused_ops {
        kernel = kernel.replace(
            "on the CPU RMSNorm, RoPE and SwiGLU one fused kernel each",
            "RMSNorm, RoPE and SwiGLU one fused kernel each, on the CPU and on CUDA (run.cuda_fused_ops)",
        );
    }
    if cfg.run.cuda_graphs {
        format!(
            "{kernel}; llama's decode steps after the first with static shapes (the cache position on the device, \
             attention over the whole cache behind a length mask) captured once per generation as a CUDA graph and \
             replayed (run.cuda_graphs; the capture's host time is outside the timed tokens)"
        )
    } else {
        kernel
    }
}

fn attention_kernel(cfg: &GridConfig) -> String {
    if cfg.run.attention == AttentionKernel::Fused {
        ATTENTION.replace(
            "candle matmul-softmax-matmul attention in the run's precision",
            &format!(
                "one fused attention kernel per layer on the CPU (run.attention = \"fused\": blocks of {} queries x {} \
                 keys, online softmax, f32 accumulation from q, k, v as stored, the scores never in memory)",
                crate::model::attention::BLOCK_Q,
                crate::model::attention::BLOCK_K
            ),
        )
    } else if cfg.run.attention == AttentionKernel::Cudnn {
        ATTENTION.replace(
            "candle matmul-softmax-matmul attention in the run's precision",
            "cuDNN's fused scaled-dot-product attention (run.attention = \"cudnn\": flash attention, the scores never \
             in memory, softmax and sums in f32, inputs and output in the run's precision) for every forward of more \
             than one query; candle matmul-softmax-matmul attention in the run's precision for llama's decode tokens",
        )
    } else if cfg.run.attention_f32 {
        ATTENTION.replace("in the run's precision", "with q, k, v upcast to f32 (run.attention_f32)")
    } else {
        ATTENTION.to_string()
    }
}

/// File name of the partial bundle in a run folder.
pub const PARTIAL: &str = "partial.json";

/// Where the run folder (journal, partial bundle) is, and where the final bundle goes.
#[derive(Debug, Clone)]
pub enum RunFolder {
    /// A new folder `OUTPUT/NAME-STAMP.run`; the final bundle is `OUTPUT/NAME-STAMP.json` (never replacing a file
    /// that is not this run's), after which the run's files in the folder are removed, and the folder when that
    /// empties it (a folder resumed elsewhere may hold the user's files: kept, with a warning).
    New {
        /// The results folder.
        output_dir: PathBuf,
    },
    /// This folder: a new run when it has no journal, else that run resumed (job scripts: the same command
    /// after a requeue). The final bundle is `DIR/bundle.json`; the folder is kept.
    At(PathBuf),
    /// Resume the run in this folder, which must have a journal; the bundle goes where the run said.
    Resume(PathBuf),
}

/// Where the sweep reads and writes.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// The run folder.
    pub folder: RunFolder,
    /// The HF hub cache (models--org--name folders).
    pub model_cache_dir: PathBuf,
    /// Show a progress bar (when stderr is a terminal) or progress lines.
    pub progress: bool,
    /// The shard of the grid to run; `None`: all of it.
    pub shard: Option<ShardInfo>,
    /// Which cells of a resumed journal are measured again instead of kept (`--retry-failed`, `--retry-oom`).
    pub retry: Retry,
    /// Resume a run that another build of the runner started (`--allow-other-build`).
    pub allow_other_build: bool,
    /// Set by signal handlers: stop cleanly.
    pub stop: Stop,
}

/// The cells a resume measures again: those whose recorded status is an error (a kernel error, NaN logits, a node
/// fault) and, asked for separately, those that ran out of memory (a measurement, unless something else held the
/// device's memory). Their new records replace the old ones; every other cell is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retry {
    /// Cells with `status = "error"`.
    pub failed: bool,
    /// Cells with `status = "oom"`.
    pub oom: bool,
}

impl Retry {
    /// Whether a recorded cell of this status is measured again.
    pub fn wants(&self, status: &schema::CellStatus) -> bool {
        match status {
            schema::CellStatus::Ok | schema::CellStatus::Skipped { .. } => false,
            schema::CellStatus::Oom { .. } => self.oom,
            schema::CellStatus::Error { .. } => self.failed,
        }
    }
}

/// How a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every planned cell has a result (some may have failed); the final bundle is written.
    Complete,
    /// Stopped early by this signal; the partial bundle is written and the run can be resumed.
    Interrupted(&'static str),
}

/// What a sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The bundle written (partial when interrupted).
    pub bundle: Bundle,
    /// Where: the final bundle, or the partial one.
    pub path: PathBuf,
    /// The run folder (already removed when a new run completed, unless it held files the run did not write).
    pub run_dir: PathBuf,
    /// Cells whose status is not `ok`.
    pub failed_cells: usize,
    /// Cells taken from the journal of an earlier attempt.
    pub resumed_cells: usize,
    /// Complete or interrupted.
    pub ending: Ending,
}

/// Every cell of `model` to run fits its positions (`max_position_embeddings`, LLaDA's `max_sequence_length`):
/// refused before anything is measured (each such cell would fail when it runs, as generation checks it too).
fn check_positions(model: &ModelSpec, files: &ModelFiles, todo: &[CellKey]) -> Result<()> {
    let max = crate::model::ModelConfig::from_file(&files.config, model.kind)?.max_position_embeddings;
    let long: BTreeSet<u32> = todo
        .iter()
        .filter(|k| k.model == model.id && (k.prompt_tokens + k.output_tokens) as usize > max)
        .map(|k| k.seq_len)
        .collect();
    if long.is_empty() {
        return Ok(());
    }
    let n: Vec<String> = long.iter().map(u32::to_string).collect();
    Err(InputError(format!(
        "model {}: N = {} (prompt + output tokens) is more than its {max} positions ({}); fix: leave those lengths out \
         of grid.seq_lengths (or --seq-len), or use a model with a longer context",
        model.id,
        n.join(", "),
        files.config.display()
    ))
    .into())
}

/// What `run` checks of a model before its weights load, and `plan` of a model in the cache: its chat template
/// (when prompts are wrapped), its files ([`LoadedModel::check_files`]) and that every cell of `todo` fits its
/// positions. Answers what [`check_prompts`] needs, which every model's files are checked before. Each error is bad
/// input naming the fix.
pub fn check_model(m: &ModelSpec, files: &ModelFiles, todo: &[CellKey], cfg: &GridConfig) -> Result<CheckedModel> {
    let template = if cfg.prompts.chat_template { Some(chat_template(m, files)?) } else { None };
    let checked = LoadedModel::check_files(files, m.kind).with_context(|| format!("model {}", m.id))?;
    check_positions(m, files, todo)?;
    let frame = match &template {
        Some(t) => Some(t.frame(&checked.tokenizer, checked.special.bos).with_context(|| format!("model {}", m.id))?),
        None => None,
    };
    Ok(CheckedModel { tokenizer: checked.tokenizer, frame })
}

/// A model's tokenizer and chat frame, from [`check_model`].
pub struct CheckedModel {
    tokenizer: tokenizers::Tokenizer,
    frame: Option<crate::model::ChatFrame>,
}

/// That every prompt a cell of `todo` reads is long enough in the model's tokens for the cell's N (checked after
/// every model's files: a missing template or a broken checkpoint is said first).
pub fn check_prompts(
    m: &ModelSpec,
    checked: CheckedModel,
    prompts: &PromptSet,
    todo: &[CellKey],
    cfg: &GridConfig,
) -> Result<()> {
    tokens::check_prompt_lengths(m, &checked.tokenizer, checked.frame, prompts, todo, cfg)
}

/// Runs the plan (or this shard of it), resuming what the run folder's journal holds, and writes the bundle.
pub fn run(resolved: &ResolvedConfig, opts: &SweepOptions) -> Result<SweepOutcome> {
    // The model cache is a folder (made when missing); a file there is bad input, said once with the fix.
    crate::synth::check_cache_folder(&opts.model_cache_dir)?;
    let cfg = &resolved.config;
    let spec = resolved.device();
    // A CUDA-graph decode captures on a stream of the device's own (see `device::open_with`).
    let device = crate::device::open_with(spec, cfg.run.cuda_graphs)?;
    let dtype = dtype_of(cfg.run.dtype);
    let prompts = resolved.load_prompts(&opts.model_cache_dir)?;
    let prompt_info = PromptSetInfo {
        source: prompts.source.clone(),
        selection: prompts.selection.clone(),
        count: prompts.texts.len() as u32,
        sha256: Some(prompts.sha256()),
    };
    if let Some(note) = prompts.repeated_rows_note(&cfg.grid.batch_sizes).filter(|_| opts.progress) {
        crate::say!("{note}");
    }
    for note in cfg.notes().into_iter().filter(|_| opts.progress) {
        crate::say!("{note}");
    }
    let search = cfg.quality.as_ref().is_some_and(|q| q.parity_search);
    check_parity_search_shards(cfg, opts.shard.is_some())?;
    let mut planned = shard::select(&cfg.cells(), opts.shard);
    let opened = open_folder(resolved, opts, &prompt_info)?;
    let recorded = || opened.journal.iter().flat_map(|j| &j.state.cells);
    let retried: Vec<&CellKey> = recorded().filter(|c| opts.retry.wants(&c.status)).map(|c| &c.key).collect();
    if !retried.is_empty() && opts.progress {
        crate::say!(
            "measuring again {} that {}: {}",
            crate::counted(retried.len(), "recorded cell"),
            match (opts.retry.failed, opts.retry.oom) {
                (true, true) => "failed or ran out of memory (--retry-failed, --retry-oom)",
                (true, false) => "failed (--retry-failed)",
                _ => "ran out of memory (--retry-oom)",
            },
            retried.iter().take(5).map(|k| k.to_string()).collect::<Vec<_>>().join("; ")
                + if retried.len() > 5 { "; ..." } else { "" }
        );
    }
    let done: HashSet<CellKey> = recorded().filter(|c| !opts.retry.wants(&c.status)).map(|c| c.key.clone()).collect();
    if search {
        // A resumed parity search: the cells it added are part of the run.
        let grid: HashSet<CellKey> = planned.iter().cloned().collect();
        let extra = opened.journal.iter().flat_map(|j| &j.state.cells).filter(|c| !grid.contains(&c.key));
        planned.extend(extra.map(|c| c.key.clone()).collect::<Vec<_>>());
    }
    // What the journal holds must make a bundle its readers accept, before anything more is measured: a cell
    // record edited by hand (or written by a runner with a bug) would otherwise fail every partial bundle after it,
    // and each resume would measure one more cell and fail again.
    if let Some(j) = opened.journal.as_ref().filter(|j| !j.state.cells.is_empty()) {
        let now = assemble(resolved, j, &planned, spec);
        if let Err(e) = schema::check_bundle(&now) {
            let text = e.to_string();
            let index =
                text.split("cells[").nth(1).and_then(|r| r.split(']').next()).and_then(|n| n.parse::<usize>().ok());
            let named =
                index.and_then(|i| now.cells.get(i)).map_or(String::new(), |c| format!(" (the cell {})", c.key));
            return Err(InputError(format!(
                "cannot resume {}: what its journal recorded breaks a rule of the bundle format{named}: {text}; fix: \
                 delete that cell's `cell` line from the journal (the cell is measured again), or start a new run \
                 folder",
                j.path().display()
            ))
            .into());
        }
    }
    let resumed_cells = planned.iter().filter(|k| done.contains(k)).count();
    let todo: Vec<CellKey> = planned.iter().filter(|k| !done.contains(k)).cloned().collect();

    // Every model with cells to run, and every evaluator, is found (or written) before anything is measured or
    // created.
    let chat = cfg.prompts.chat_template;
    let mut to_load = Vec::new();
    for m in &cfg.models {
        if todo.iter().any(|k| k.model == m.id) {
            let files = model_files(m, &opts.model_cache_dir, cfg.run.dtype, chat, opts.progress)?;
            let checked = check_model(m, &files, &todo, cfg)?;
            to_load.push((m, files, checked));
        }
    }
    let evaluators = cfg.evaluators();
    let mut evaluator_files = Vec::new();
    if cfg.quality.is_some() {
        for e in &evaluators {
            let files = model_files(e, &opts.model_cache_dir, cfg.run.dtype, chat, opts.progress)?;
            LoadedModel::check_files(&files, ModelKind::Llama).with_context(|| format!("evaluator {}", e.id))?;
            evaluator_files.push((e, files));
        }
    }
    let encoder = match cfg.quality.as_ref().and_then(|q| q.bertscore.as_ref()) {
        Some(b) => Some((b, models::encoder_files(b, &opts.model_cache_dir)?)),
        None => None,
    };
    // Then the prompts, in each model's tokens (a file problem of any model is said first).
    let to_load: Vec<(&ModelSpec, ModelFiles)> = to_load
        .into_iter()
        .map(|(m, files, checked)| check_prompts(m, checked, &prompts, &todo, cfg).map(|()| (m, files)))
        .collect::<Result<_>>()?;
    let header = opened.header().clone();
    let unique = matches!(opts.folder, RunFolder::New { .. });
    // Held until the sweep returns: no other process runs this folder meanwhile.
    let (run_dir, mut journal, _lock) = match (opened.journal, opened.lock) {
        (Some(j), Some(lock)) => (opened.dir.clone(), j, lock),
        // A journal is only opened under the folder's lock; without one this is a new run.
        (_, lock) => create_journal(&opened.dir, &header, unique, lock)?,
    };
    let loads = to_load.iter().chain(&evaluator_files).map(|(m, f)| (*m, f));
    // The device matters where cells remain to be measured, the parity search's included.
    check_same_sources(&journal, loads, (!todo.is_empty() || search).then_some(spec))?;
    if resumed_cells > 0 && opts.progress {
        crate::say!("resuming {}: {resumed_cells} of {} cells already done", run_dir.display(), planned.len());
    }
    let mut progress = Progress::new(&todo, planned.len(), resumed_cells, opts.progress);
    let env = Env { resolved, opts, spec, device: &device, dtype, prompts: &prompts, run_dir: &run_dir };
    let mut stopped = opts.stop.requested();
    let mut exec = None;
    if !todo.is_empty() && stopped.is_none() {
        let keys: Vec<&CellKey> = todo.iter().collect();
        let r = measure_keys(&env, &keys, &to_load, &mut journal, &mut progress, &planned, &mut exec);
        stopped = env.keep_partial(r, &journal, &planned)?;
    }
    progress.done();
    if stopped.is_none() {
        let r = score_all(&env, &evaluator_files, encoder.as_ref(), &mut journal, &planned);
        stopped = env.keep_partial(r, &journal, &planned)?;
    }
    // --parity-search: bisect K between each S_parity and the K below it, measuring the new cells like any other.
    while search && stopped.is_none() {
        let mut now = assemble(resolved, &journal, &planned, spec);
        metrics::parity::recompute(&mut now);
        let extra = parity_search_cells(cfg, &now, &planned);
        if extra.is_empty() {
            break;
        }
        if opts.progress {
            let ks: BTreeSet<String> =
                extra.iter().map(|k| format!("N={} K={}", k.seq_len, k.steps.unwrap_or(0))).collect();
            crate::say!(
                "parity search: {} more cells ({})",
                extra.len(),
                ks.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        planned.extend(extra.iter().cloned());
        let keys: Vec<&CellKey> = extra.iter().collect();
        let mut files = Vec::new();
        for m in cfg.models.iter().filter(|m| extra.iter().any(|k| k.model == m.id)) {
            files.push((
                m,
                model_files(m, &opts.model_cache_dir, cfg.run.dtype, cfg.prompts.chat_template, opts.progress)?,
            ));
        }
        let mut p = Progress::new(&extra, extra.len(), 0, opts.progress);
        let r = measure_keys(&env, &keys, &files, &mut journal, &mut p, &planned, &mut exec);
        stopped = env.keep_partial(r, &journal, &planned)?;
        p.done();
        if stopped.is_none() {
            let r = score_all(&env, &evaluator_files, encoder.as_ref(), &mut journal, &planned);
            stopped = env.keep_partial(r, &journal, &planned)?;
        }
    }

    let mut bundle = assemble(resolved, &journal, &planned, spec);
    metrics::parity::recompute(&mut bundle);
    let failed_cells = bundle.cells.iter().filter(|c| c.status != CellStatus::Ok).count();
    // A stop while evaluators score leaves every cell measured but some unscored: still partial (resumable).
    let complete = bundle.cells.len() == planned.len() && stopped.is_none();
    if !complete {
        let path = run_dir.join(PARTIAL);
        output::write_bundle(&path, &bundle)?;
        let ending = Ending::Interrupted(stopped.unwrap_or("a stop request"));
        return Ok(SweepOutcome { bundle, path, run_dir, failed_cells, resumed_cells, ending });
    }
    let path = final_bundle_path(&run_dir, &journal.header);
    // Checked again before writing: a file that appeared there during the run is not replaced either (the journal
    // keeps the cells, and the partial bundle says what they are).
    if let Err(e) = check_final_bundle(&run_dir, &journal) {
        return env.keep_partial(Err(e), &journal, &planned);
    }
    if let Err(e) = output::write_bundle(&path, &bundle) {
        // The cells are in the journal: say so, and how to finish (the partial bundle stays readable meanwhile).
        if let Err(w) = env.write_partial(&journal, &planned) {
            tracing::warn!("cannot write the partial bundle after the error: {w:#}");
        }
        return Err(e.context(format!(
            "the {} measured cells are kept in {}: make {} writable (or free its disk) and run `dllm-bench run \
             --resume {}` to write the bundle",
            bundle.cells.len(),
            run_dir.display(),
            path.parent().unwrap_or(&run_dir).display(),
            run_dir.display()
        )));
    }
    output::remove_temporaries_of(&path);
    if journal.header.remove_when_done {
        drop(journal);
        // Only what the run wrote there: a resumed folder may hold the user's files too.
        remove_run_files(&run_dir, &path)?;
    } else {
        let _ = std::fs::remove_file(run_dir.join(PARTIAL));
    }
    Ok(SweepOutcome { bundle, path, run_dir, failed_cells, resumed_cells, ending: Ending::Complete })
}

/// The context of a failed write of the partial bundle (the run stops; its journal keeps the cells).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PartialNotWritten(String);

/// What every step of a sweep reads.
struct Env<'a> {
    resolved: &'a ResolvedConfig,
    opts: &'a SweepOptions,
    spec: DeviceSpec,
    device: &'a Device,
    dtype: DType,
    prompts: &'a PromptSet,
    run_dir: &'a Path,
}

impl Env<'_> {
    /// On an error that ends the sweep (a model that cannot be loaded), first writes the partial bundle of what the
    /// journal holds, so the run folder has a readable bundle beside its journal; then returns the error.
    /// An error that is the partial bundle's own writing is not tried again.
    fn keep_partial<T>(&self, r: Result<T>, journal: &Journal, planned: &[CellKey]) -> Result<T> {
        if r.as_ref().is_err_and(|e| e.downcast_ref::<PartialNotWritten>().is_none())
            && let Err(e) = self.write_partial(journal, planned)
        {
            tracing::warn!("cannot write the partial bundle after the error: {e:#}");
        }
        r
    }

    /// Rewrites the partial bundle from the journal. Its error says that the cells are kept and how to go on.
    fn write_partial(&self, journal: &Journal, planned: &[CellKey]) -> Result<()> {
        let partial = assemble(self.resolved, journal, planned, self.spec);
        output::write_bundle(&self.run_dir.join(PARTIAL), &partial).map_err(|e| {
            e.context(PartialNotWritten(format!(
                "the partial bundle cannot be written; the {} cells measured are kept in the journal of {}, and \
                 `dllm-bench run --resume {}` goes on once it can be",
                journal.state.cells.len(),
                self.run_dir.display(),
                self.run_dir.display()
            )))
        })
    }
}

/// A parity search bisects between the K values of the whole grid's quality, which one shard does not have: `run
/// --shard` refuses it before measuring, and `plan --check --shards N` before the array is queued.
pub fn check_parity_search_shards(cfg: &schema::grid::GridConfig, sharded: bool) -> Result<(), InputError> {
    if sharded && cfg.quality.as_ref().is_some_and(|q| q.parity_search) {
        return Err(InputError(
            "quality.parity_search needs the whole grid's quality, and a shard has only its own cells; fix: set \
             quality.parity_search = false for a sharded run (S_parity is then read on the grid's K values), or run \
             the whole grid as one run without --shard"
                .into(),
        ));
    }
    Ok(())
}
