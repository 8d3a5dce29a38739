//! The sweep: for each model, for each cell of the plan (or of this shard), warm up, measure, record; then
//! write the bundle.
//!
//! Models are loaded one at a time so that one model's weights never count in the other's memory figures.
//! Every model with cells to run is found in the cache (or written, when synthetic) before anything is
//! measured, so a missing file fails the run at once. Each finished cell is appended to the run's
//! [`journal`](crate::journal) (synced) and the partial bundle rewritten before the next cell starts; a resumed
//! run skips the cells its journal holds. A cell that fails is recorded with its status and message and the
//! sweep goes on; the exit status says whether any cell failed. A stop request ([`Stop`]) abandons the current
//! cell between two runs of it and ends the sweep with a valid partial bundle. Bundles are written atomically.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use schema::bundle::{
    Bundle, Cell, CellKey, CellStatus, Generation, ModelInfo, PromptSetInfo, Provenance, Repetition, Sampler,
    TokenizerInfo,
};
use schema::grid::{DeviceSpec, GridConfig, ModelKind, ModelSpec, Precision};
use schema::{SchemaVersion, ShardInfo, derive};
use sha2::{Digest, Sha256};

use crate::generate::{self, LladaParams};
use crate::journal::{Header, JOURNAL_FORMAT, Journal, Record, RunLock};
use crate::model::{LoadedModel, ModelFiles, TransformerOptions};
use crate::plan::{ResolvedConfig, config_diff};
use crate::prompts::PromptSet;
use crate::signals::Stop;
use crate::{InputError, device, execution, output, quality, shard, synth, sysinfo};

/// The attention both models use (the study's fairness rule), recorded in every bundle.
pub const ATTENTION: &str = "candle matmul-softmax-matmul attention in the run's precision, identical for both \
                             models; causal mask for llama, no mask for llada; padding mask for left-padded rows";

/// The attention of a run as recorded in its bundle: [`ATTENTION`], or its f32 variant when the config asks.
pub fn attention(cfg: &GridConfig) -> String {
    if cfg.run.attention_f32 {
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
    /// A new folder `OUTPUT/NAME-STAMP.run`; the final bundle is `OUTPUT/NAME-STAMP.json`, after which the
    /// folder is removed.
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
    /// Set by signal handlers: stop cleanly.
    pub stop: Stop,
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
    /// The run folder (already removed when a new run completed).
    pub run_dir: PathBuf,
    /// Cells whose status is not `ok`.
    pub failed_cells: usize,
    /// Cells taken from the journal of an earlier attempt.
    pub resumed_cells: usize,
    /// Complete or interrupted.
    pub ending: Ending,
}

/// The torch-like dtype of a precision.
pub fn dtype_of(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::Bf16 => DType::BF16,
        Precision::F16 => DType::F16,
    }
}

/// Opens the device a config asks for (moved to [`crate::device::open`], the one module with CUDA code).
pub use crate::device::open as open_device;

/// A run folder opened for this process.
struct Opened {
    dir: PathBuf,
    journal: Option<Journal>,
    /// For a new run: the header to create the journal with, once the models are found.
    new_header: Option<Header>,
    /// The folder's lock, taken before anything in it was read (a new run's folder is locked when created).
    lock: Option<RunLock>,
}

impl Opened {
    fn header(&self) -> &Header {
        match (&self.journal, &self.new_header) {
            (Some(j), _) => &j.header,
            (None, Some(h)) => h,
            // `open_folder` always sets one of them.
            (None, None) => unreachable!("a run folder has a journal or a header to create"),
        }
    }
}

/// Opens (resume) or plans (new run) the run folder, checking that a resumed run is the same run.
fn open_folder(resolved: &ResolvedConfig, opts: &SweepOptions, prompts: &PromptSetInfo) -> Result<Opened> {
    let cfg = &resolved.config;
    let header = |bundle: PathBuf, remove_when_done: bool| Header {
        journal_format: JOURNAL_FORMAT,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        config_sha256: resolved.sha256(),
        config_toml: resolved.toml(),
        config_source: resolved.source.clone(),
        config_dir: resolved.dir.clone(),
        shard: opts.shard,
        prompt_set: prompts.clone(),
        bundle,
        remove_when_done,
    };
    let resume_dir = match &opts.folder {
        RunFolder::New { output_dir } => {
            let h = header(PathBuf::new(), true);
            let stamp: String = h.created_at.chars().filter(|c| !matches!(c, '-' | ':')).collect();
            // Two runs of one config in the same second get -2, -3, ...: checked when the folder is created.
            let base = format!("{}-{stamp}", cfg.run.name);
            let dir = output_dir.join(format!("{base}.run"));
            let h = Header { bundle: PathBuf::from("..").join(format!("{base}.json")), ..h };
            return Ok(Opened { dir, journal: None, new_header: Some(h), lock: None });
        }
        RunFolder::At(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create the run folder {}", dir.display()))?;
            let lock = RunLock::acquire(dir)?;
            if !Journal::exists(dir) {
                return Ok(Opened {
                    dir: dir.clone(),
                    journal: None,
                    new_header: Some(header(PathBuf::from("bundle.json"), false)),
                    lock: Some(lock),
                });
            }
            (dir, lock)
        }
        RunFolder::Resume(dir) => {
            Journal::require(dir)?;
            (dir, RunLock::acquire(dir)?)
        }
    };
    let (resume_dir, lock) = resume_dir;
    let journal = Journal::open(resume_dir)?;
    check_same_run(&journal, resolved, opts, prompts)?;
    Ok(Opened { dir: resume_dir.clone(), journal: Some(journal), new_header: None, lock: Some(lock) })
}

/// A resume must be the same run: same tool version, config, shard and prompts.
fn check_same_run(
    journal: &Journal,
    resolved: &ResolvedConfig,
    opts: &SweepOptions,
    prompts: &PromptSetInfo,
) -> Result<()> {
    let h = &journal.header;
    let path = journal.path().display();
    let refuse = |what: String| -> Result<()> { Err(InputError(format!("cannot resume {path}: {what}")).into()) };
    if h.tool_version != env!("CARGO_PKG_VERSION") {
        return refuse(format!(
            "it was started by dllm-bench {} and this is {}; fix: finish it with the version that started it, \
             or start a new run folder",
            h.tool_version,
            env!("CARGO_PKG_VERSION")
        ));
    }
    if h.config_sha256 != resolved.sha256() {
        return refuse(format!(
            "the config changed since the run started (config sha256 {} then, {} now; started from {}, now {}).\n\
             These fields differ (- then, + now):\n{}\n  fix: resume with the same config and overrides (or with \
             no --config: the journal has it), or start a new run folder",
            short(&h.config_sha256),
            short(&resolved.sha256()),
            h.config_source,
            resolved.source,
            config_diff(&h.config_toml, &resolved.toml())
        ));
    }
    if h.shard != opts.shard {
        let show = |s: Option<ShardInfo>| s.map_or("the whole grid".to_string(), |s| format!("shard {s}"));
        return refuse(format!(
            "it ran {} and this run asks for {}; fix: pass the same --shard (or none)",
            show(h.shard),
            show(opts.shard)
        ));
    }
    if h.prompt_set.sha256 != prompts.sha256 {
        return refuse(format!(
            "the prompt set changed (sha256 {} then, {} now, from {}); fix: restore the prompts, or start a new \
             run folder",
            short(h.prompt_set.sha256.as_deref().unwrap_or("absent")),
            short(prompts.sha256.as_deref().unwrap_or("absent")),
            prompts.source
        ));
    }
    Ok(())
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Creates a new run's folder (a fresh name if a run of the same second has it), locks it unless `lock` is
/// its lock already, and creates its journal.
fn create_journal(
    dir: &Path,
    header: &Header,
    unique: bool,
    lock: Option<RunLock>,
) -> Result<(PathBuf, Journal, RunLock)> {
    let mut dir = dir.to_path_buf();
    let mut header = header.clone();
    if unique {
        let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        std::fs::create_dir_all(&parent).with_context(|| format!("cannot create the folder {}", parent.display()))?;
        let base = dir.file_name().and_then(|n| n.to_str()).unwrap_or("run.run").trim_end_matches(".run").to_string();
        for n in 1.. {
            let name = if n == 1 { base.clone() } else { format!("{base}-{n}") };
            let candidate = parent.join(format!("{name}.run"));
            match std::fs::create_dir(&candidate) {
                Ok(()) => {
                    dir = candidate;
                    header.bundle = PathBuf::from("..").join(format!("{name}.json"));
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create the folder {}", candidate.display())),
            }
        }
    } else {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the folder {}", dir.display()))?;
    }
    let lock = match lock {
        Some(l) => l,
        None => RunLock::acquire(&dir)?,
    };
    let journal = Journal::create(&dir, header)?;
    Ok((dir, journal, lock))
}

/// The final bundle's path for a run folder.
pub fn final_bundle_path(dir: &Path, header: &Header) -> PathBuf {
    match header.bundle.strip_prefix("..") {
        Ok(rest) => dir.parent().map(Path::to_path_buf).unwrap_or_default().join(rest),
        Err(_) => dir.join(&header.bundle),
    }
}

/// Runs the plan (or this shard of it), resuming what the run folder's journal holds, and writes the bundle.
pub fn run(resolved: &ResolvedConfig, opts: &SweepOptions) -> Result<SweepOutcome> {
    let cfg = &resolved.config;
    let spec = resolved.device();
    let device = open_device(spec)?;
    let dtype = dtype_of(cfg.run.dtype);
    let prompts = PromptSet::load(&cfg.prompts, &resolved.dir, &opts.model_cache_dir)?;
    let prompt_info = PromptSetInfo {
        source: prompts.source.clone(),
        selection: prompts.selection.clone(),
        count: prompts.texts.len() as u32,
        sha256: Some(prompts.sha256()),
    };
    let search = cfg.quality.as_ref().is_some_and(|q| q.parity_search);
    if search && opts.shard.is_some() {
        return Err(InputError(
            "quality.parity_search needs the whole grid's quality, and this run is one shard; fix: run the parity \
             search after merging, as one run without --shard (or turn parity_search off for the shards)"
                .into(),
        )
        .into());
    }
    let mut planned = shard::select(&cfg.cells(), opts.shard);
    let opened = open_folder(resolved, opts, &prompt_info)?;
    let done: HashSet<CellKey> =
        opened.journal.iter().flat_map(|j| j.state.cells.iter().map(|c| c.key.clone())).collect();
    if search {
        // A resumed parity search: the cells it added are part of the run.
        let grid: HashSet<CellKey> = planned.iter().cloned().collect();
        let extra = opened.journal.iter().flat_map(|j| &j.state.cells).filter(|c| !grid.contains(&c.key));
        planned.extend(extra.map(|c| c.key.clone()).collect::<Vec<_>>());
    }
    let resumed_cells = planned.iter().filter(|k| done.contains(k)).count();
    let todo: Vec<CellKey> = planned.iter().filter(|k| !done.contains(k)).cloned().collect();

    // Every model with cells to run, and every evaluator, is found (or written) before anything is measured or
    // created.
    let mut to_load = Vec::new();
    for m in &cfg.models {
        if todo.iter().any(|k| k.model == m.id) {
            to_load.push((m, model_files(m, &opts.model_cache_dir, cfg.run.dtype)?));
        }
    }
    let evaluators = cfg.evaluators();
    let mut evaluator_files = Vec::new();
    if cfg.quality.is_some() {
        for e in &evaluators {
            evaluator_files.push((e, model_files(e, &opts.model_cache_dir, cfg.run.dtype)?));
        }
    }
    let header = opened.header().clone();
    let unique = matches!(opts.folder, RunFolder::New { .. });
    // Held until the sweep returns: no other process runs this folder meanwhile.
    let (run_dir, mut journal, _lock) = match (opened.journal, opened.lock) {
        (Some(j), Some(lock)) => (opened.dir.clone(), j, lock),
        // A journal is only opened under the folder's lock; without one this is a new run.
        (_, lock) => create_journal(&opened.dir, &header, unique, lock)?,
    };
    if resumed_cells > 0 && opts.progress {
        eprintln!("resuming {}: {resumed_cells} of {} cells already done", run_dir.display(), planned.len());
    }
    let mut progress = Progress::new(planned.len(), resumed_cells, opts.progress);
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
        let r = score_all(&env, &evaluator_files, &mut journal, &planned);
        stopped = env.keep_partial(r, &journal, &planned)?;
    }
    // --parity-search: bisect K between each S_parity and the K below it, measuring the new cells like any other.
    while search && stopped.is_none() {
        let mut now = assemble(resolved, &journal, &planned, spec);
        now.recompute_parity();
        let extra = parity_search_cells(cfg, &now, &planned);
        if extra.is_empty() {
            break;
        }
        if opts.progress {
            let ks: BTreeSet<String> =
                extra.iter().map(|k| format!("N={} K={}", k.seq_len, k.steps.unwrap_or(0))).collect();
            eprintln!("parity search: {} more cells ({})", extra.len(), ks.into_iter().collect::<Vec<_>>().join(", "));
        }
        planned.extend(extra.iter().cloned());
        let keys: Vec<&CellKey> = extra.iter().collect();
        let mut files = Vec::new();
        for m in cfg.models.iter().filter(|m| extra.iter().any(|k| k.model == m.id)) {
            files.push((m, model_files(m, &opts.model_cache_dir, cfg.run.dtype)?));
        }
        let mut p = Progress::new(extra.len(), 0, opts.progress);
        let r = measure_keys(&env, &keys, &files, &mut journal, &mut p, &planned, &mut exec);
        stopped = env.keep_partial(r, &journal, &planned)?;
        p.done();
        if stopped.is_none() {
            let r = score_all(&env, &evaluator_files, &mut journal, &planned);
            stopped = env.keep_partial(r, &journal, &planned)?;
        }
    }

    let mut bundle = assemble(resolved, &journal, &planned, spec);
    bundle.recompute_parity();
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
    output::write_bundle(&path, &bundle)?;
    if journal.header.remove_when_done {
        drop(journal);
        std::fs::remove_dir_all(&run_dir)
            .with_context(|| format!("wrote {} but cannot remove {}", path.display(), run_dir.display()))?;
    } else {
        let _ = std::fs::remove_file(run_dir.join(PARTIAL));
    }
    Ok(SweepOutcome { bundle, path, run_dir, failed_cells, resumed_cells, ending: Ending::Complete })
}

/// The bundle of what the journal holds: the planned cells done so far, in grid order.
fn assemble(resolved: &ResolvedConfig, journal: &Journal, planned: &[CellKey], spec: DeviceSpec) -> Bundle {
    let h = &journal.header;
    let by_key: HashMap<&CellKey, &Cell> = journal.state.cells.iter().map(|c| (&c.key, c)).collect();
    let cells: Vec<Cell> = planned.iter().filter_map(|k| by_key.get(k).map(|c| (*c).clone())).collect();
    let mut used: HashSet<&str> = cells.iter().map(|c| c.key.model.as_str()).collect();
    used.extend(cells.iter().flat_map(|c| c.quality.iter().filter_map(|q| q.evaluator.as_deref())));
    // Config order (measured models, then evaluators), and only models with cells or quality values (a model
    // loaded just before a stop has none).
    let mut models: Vec<ModelInfo> = Vec::new();
    for m in resolved.config.models.iter().chain(&resolved.config.evaluators()) {
        if let Some(x) = journal.state.models.iter().find(|x| x.id == m.id && used.contains(x.id.as_str()))
            && !models.iter().any(|y| y.id == x.id)
        {
            models.push(x.clone());
        }
    }
    Bundle {
        schema_version: SchemaVersion::CURRENT,
        provenance: Provenance {
            tool: "dllm-bench".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: sysinfo::git_commit(),
            created_at: h.created_at.clone(),
            host: sysinfo::host(),
            device: journal.state.executions.last().map_or_else(|| execution::device_info(spec), |e| e.device.clone()),
            synthetic_weights: models.iter().any(|m| m.synthetic),
            config_source: h.config_source.clone(),
            config: resolved.config.clone(),
            attention: attention(&resolved.config),
            config_sha256: Some(h.config_sha256.clone()),
            shard: h.shard,
            planned_cells: Some(planned.len() as u32),
            executions: journal.state.executions.clone(),
        },
        models,
        prompt_set: h.prompt_set.clone(),
        cells,
        parity: Vec::new(),
    }
}

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
    fn keep_partial<T>(&self, r: Result<T>, journal: &Journal, planned: &[CellKey]) -> Result<T> {
        if r.is_err()
            && let Err(e) = self.write_partial(journal, planned)
        {
            tracing::warn!("cannot write the partial bundle after the error: {e:#}");
        }
        r
    }

    /// Rewrites the partial bundle from the journal.
    fn write_partial(&self, journal: &Journal, planned: &[CellKey]) -> Result<()> {
        let partial = assemble(self.resolved, journal, planned, self.spec);
        output::write_bundle(&self.run_dir.join(PARTIAL), &partial)
    }
}

/// Measures `keys`, model by model (each loaded once, in config order), journaling each cell and rewriting the
/// partial bundle after it. The first call records this process's execution. Returns the signal of a stop.
fn measure_keys(
    env: &Env<'_>,
    keys: &[&CellKey],
    models: &[(&ModelSpec, ModelFiles)],
    journal: &mut Journal,
    progress: &mut Progress,
    planned: &[CellKey],
    exec: &mut Option<u32>,
) -> Result<Option<&'static str>> {
    let cfg = &env.resolved.config;
    let exec = match *exec {
        Some(e) => e,
        None => {
            journal.append(Record::Execution(execution::current(env.spec, env.opts.shard)))?;
            let e = (journal.state.executions.len() - 1) as u32;
            *exec = Some(e);
            e
        }
    };
    let max_b = cfg.grid.batch_sizes.iter().copied().max().unwrap_or(1);
    let quality = cfg.quality.is_some();
    for (m, files) in models {
        tracing::info!(model = %m.id, commit = %files.commit, "loading");
        let opts = TransformerOptions { attention_f32: cfg.run.attention_f32 };
        let model = LoadedModel::load_with(files, m.kind, env.device, env.dtype, opts)
            .with_context(|| format!("cannot load model {} from {}", m.id, files.snapshot_dir.display()))?;
        let info = model_info(m, &model, files, cfg.run.dtype);
        match journal.state.models.iter().find(|x| x.id == info.id) {
            Some(old) if old.commit != info.commit => {
                return Err(InputError(format!(
                    "cannot resume {}: model {} changed since the run started (snapshot {} then, {} now); \
                     fix: restore that snapshot (refs/{}), or start a new run folder",
                    env.run_dir.display(),
                    m.id,
                    old.commit.as_deref().unwrap_or("?"),
                    info.commit.as_deref().unwrap_or("?"),
                    m.revision
                ))
                .into());
            }
            Some(_) => {}
            None => journal.append(Record::Model(info))?,
        }
        let mut tokens = TokenCache::default();
        for key in keys.iter().filter(|k| k.model == m.id) {
            if let Some(sig) = env.opts.stop.requested() {
                return Ok(Some(sig));
            }
            progress.start(key);
            let Some(mut cell) = measure_cell(&model, key, cfg, env.prompts, &mut tokens, &env.opts.stop) else {
                return Ok(env.opts.stop.requested().or(Some("a stop request")));
            };
            // Quality once per group: in its cell of the largest batch size.
            if quality && cell.status == CellStatus::Ok && key.batch_size == max_b {
                add_generations(&mut cell, &model, cfg, env.prompts, &mut tokens);
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

/// Every evaluator scores what it has not scored yet; returns the signal of a stop.
fn score_all(
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

/// The next cells of the parity search: for each S_parity reached with a gap to the K below it (or to 0), the
/// valid K (a multiple of the blocks) nearest the middle of the gap, at every batch size of the grid. Empty when
/// every gap is closed.
fn parity_search_cells(cfg: &GridConfig, bundle: &Bundle, planned: &[CellKey]) -> Vec<CellKey> {
    let mut out: Vec<CellKey> = Vec::new();
    for r in &bundle.parity {
        let schema::derive::Parity::Reached { steps } = r.outcome else { continue };
        let below = r.curve.iter().map(|c| c.steps).filter(|&k| k < steps).max().unwrap_or(0);
        let Some(template) = planned.iter().find(|k| {
            k.model == r.diffusion_model
                && k.sampler == r.sampler
                && k.seq_len == r.seq_len
                && k.block_length == r.block_length
                && k.steps == Some(steps)
        }) else {
            continue;
        };
        let blocks = template.output_tokens / template.block_length.unwrap_or(template.output_tokens).max(1);
        let blocks = blocks.max(1);
        // Multiples of `blocks` strictly between `below` and `steps`; take the one nearest the middle.
        let lo = below / blocks + 1;
        let hi = (steps - 1) / blocks;
        if lo > hi {
            continue;
        }
        let mid = ((below + steps) / 2 / blocks).clamp(lo, hi) * blocks;
        for &b in &cfg.grid.batch_sizes {
            let key = CellKey { steps: Some(mid), batch_size: b, ..template.clone() };
            if !planned.contains(&key) && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// Generates one continuation per prompt of the set with the cell's algorithm and batch size (unmeasured runs
/// after the timed ones) and computes the text statistics. A failure makes the cell an error: its timings stay.
fn add_generations(
    cell: &mut Cell,
    model: &LoadedModel,
    cfg: &GridConfig,
    prompts: &PromptSet,
    tokens: &mut TokenCache,
) {
    let key = &cell.key;
    let b = key.batch_size as usize;
    let count = prompts.texts.len();
    let mut generations = Vec::with_capacity(count);
    let mut go = || -> Result<()> {
        for (run, start) in (0..count).step_by(b).enumerate() {
            let indices: Vec<u32> = (start..(start + b).min(count)).map(|i| i as u32).collect();
            let batch = indices
                .iter()
                .map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens))
                .collect::<Result<Vec<_>>>()?;
            let (rows, _) = generate_rows(model, key, cfg, &batch, run as u64)?;
            for (&p, row) in indices.iter().zip(rows) {
                let text = model.tokenizer.decode(&row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
                let (prompt_bytes, reference) = tokens.cut(model, prompts, p, key.prompt_tokens, key.output_tokens)?;
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
        }
        Err(e) => {
            let message = format!("the quality generations failed (the timed runs were fine): {e:#}");
            tracing::warn!(cell = %key, "{message}");
            cell.status = CellStatus::Error { message };
        }
    }
}

/// Loads an evaluator and scores the perplexity of every finished cell's generations it has not scored yet
/// (a resumed run scores only what is missing). Returns the signal when a stop was requested.
fn score_perplexity(
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
        .filter(|c| !c.generations.is_empty())
        .filter(|c| !c.quality.iter().any(|q| q.metric == "perplexity" && q.evaluator.as_deref() == Some(&spec.id)))
        // A failure is recorded once (in the bundle's `quality_errors`); a new run scores it again.
        .filter(|c| {
            !c.quality_errors.iter().any(|q| q.metric == "perplexity" && q.evaluator.as_deref() == Some(&spec.id))
        })
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
        journal.append(Record::Model(model_info(spec, &evaluator, files, precision)))?;
    }
    for (i, cell) in pending.iter().enumerate() {
        if let Some(sig) = opts.stop.requested() {
            return Ok(Some(sig));
        }
        match quality::perplexity(&evaluator, &spec.id, prompts, &cell.generations) {
            Ok(Some(value)) => {
                if opts.progress {
                    eprintln!(
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
                    Err(e) => format!("cannot score perplexity: {e:#}"),
                    _ => "no continuation has a token to score (every generated position decoded to nothing)".into(),
                };
                tracing::warn!(cell = %cell.key, evaluator = %spec.id, "{message}");
                if opts.progress {
                    eprintln!(
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

/// Finds a model in the HF cache, first writing synthetic weights when the config asks for them.
fn model_files(m: &ModelSpec, cache: &Path, run_dtype: Precision) -> Result<ModelFiles> {
    if let Some(s) = &m.synthetic {
        let spec = synth::SynthSpec::from_config(s, run_dtype);
        synth::write_synthetic(cache, &m.id, m.kind, &spec)
            .with_context(|| format!("cannot write synthetic weights for {} into {}", m.id, cache.display()))?;
    }
    ModelFiles::from_hf_cache(cache, &m.id, &m.revision).map_err(|e| {
        anyhow::Error::new(InputError(format!(
            "{e}; fix: download {} into the cache {} where there is network (`dllm-bench fetch --config \
             CONFIG --model-cache-dir {}` on a login node, or `huggingface-cli download {}`), point \
             --model-cache-dir at the cache that has it, or add a [models.synthetic] table to the config",
            m.id,
            cache.display(),
            cache.display(),
            m.id
        )))
    })
}

fn model_info(m: &ModelSpec, model: &LoadedModel, files: &ModelFiles, dtype: Precision) -> ModelInfo {
    let c = &model.config;
    let tokenizer_sha = std::fs::read(&files.tokenizer).ok().map(|b| hex(&Sha256::digest(b)));
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
            sha256: tokenizer_sha,
        },
        synthetic: files.is_synthetic(),
        shape: c.shape(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A prompt text's token ids and their byte ranges in the text.
type Encoded = (Vec<u32>, Vec<(usize, usize)>);

/// Each prompt text tokenized once per model.
#[derive(Default)]
struct TokenCache(HashMap<u32, Encoded>);

impl TokenCache {
    /// The ids and byte offsets of a whole prompt text.
    fn encoded(&mut self, model: &LoadedModel, prompts: &PromptSet, index: u32) -> Result<&Encoded> {
        Ok(match self.0.entry(index) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let text = &prompts.texts[index as usize];
                let enc =
                    model.tokenizer.encode(text.as_str(), false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
                e.insert((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
            }
        })
    }

    /// BOS followed by the first `prompt_tokens - 1` tokens of the prompt. A prompt too short to fill the
    /// cell's prompt length is an error of the cell, never a silently shorter sequence: N must be real.
    fn prompt(&mut self, model: &LoadedModel, prompts: &PromptSet, index: u32, prompt_tokens: u32) -> Result<Vec<u32>> {
        let (ids, _) = self.encoded(model, prompts, index)?;
        let take = (prompt_tokens as usize).saturating_sub(1);
        if ids.len() < take {
            anyhow::bail!(
                "prompt {index} has {} tokens but the cell needs {take} after BOS (prompt_tokens {prompt_tokens}); \
                 fix: use longer prompts, or shorter sequence lengths",
                ids.len()
            );
        }
        let mut row = Vec::with_capacity(take + 1);
        row.push(model.special.bos);
        row.extend_from_slice(&ids[..take]);
        Ok(row)
    }

    /// Where a cell's prompt ends in the prompt text (bytes; BOS + the first `prompt_tokens - 1` tokens), and the
    /// true continuation: the text after the cut, followed by the prompt's reference when the set has one, cut
    /// to the first `output_tokens` tokens.
    fn cut(
        &mut self,
        model: &LoadedModel,
        prompts: &PromptSet,
        index: u32,
        prompt_tokens: u32,
        output_tokens: u32,
    ) -> Result<(u32, Option<String>)> {
        let text = &prompts.texts[index as usize];
        let (_, offsets) = self.encoded(model, prompts, index)?;
        let take = (prompt_tokens as usize).saturating_sub(1);
        let mut cut = match take {
            0 => 0,
            _ => offsets.get(take - 1).map_or(text.len(), |o| o.1),
        };
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        let mut rest = text[cut..].to_string();
        if let Some(Some(r)) = prompts.references.get(index as usize) {
            if !rest.is_empty() && !rest.ends_with(char::is_whitespace) && !r.starts_with(char::is_whitespace) {
                rest.push(' ');
            }
            rest.push_str(r);
        }
        // Only the first `output_tokens` tokens are kept, and a Wikitext document runs to its article's end (tens
        // of kilobytes): tokenize a prefix that holds them with room to spare, the whole rest only when the prefix
        // does not (pre-tokenization splits locally, so tokens ending well before the prefix's end are the rest's).
        let encode = |t: &str| model.tokenizer.encode(t, false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"));
        let mut prefix = ((output_tokens as usize + 8) * 32).min(rest.len());
        while !rest.is_char_boundary(prefix) {
            prefix += 1;
        }
        let mut enc = encode(&rest[..prefix])?;
        let last = (output_tokens as usize).checked_sub(1).and_then(|i| enc.get_offsets().get(i).map(|o| o.1));
        if prefix < rest.len() && last.is_none_or(|end| end + 256 > prefix) {
            enc = encode(&rest)?;
        }
        let n = enc.get_offsets().len().min(output_tokens as usize);
        let reference = match n {
            0 => None,
            _ => {
                let mut end = enc.get_offsets()[n - 1].1.min(rest.len());
                while !rest.is_char_boundary(end) {
                    end += 1;
                }
                Some(rest[..end].trim().to_string()).filter(|r| !r.is_empty())
            }
        };
        Ok((cut as u32, reference))
    }
}

/// Warms up and measures one cell; failures become the cell's status. `None` when a stop was requested
/// before the cell finished: the cell is abandoned, not recorded, and measured again on resume.
fn measure_cell(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    prompts: &PromptSet,
    tokens: &mut TokenCache,
    stop: &Stop,
) -> Option<Cell> {
    let warmup = cfg.run.warmup;
    let mut reps = Vec::new();
    let mut run = |i: usize, measured: bool| -> Result<()> {
        let indices = prompts.batch_indices(i, key.batch_size as usize);
        let batch =
            indices.iter().map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens)).collect::<Result<Vec<_>>>()?;
        if measured && let Some(fault) = device::injected_oom(&key.to_string()) {
            return Err(fault);
        }
        // On the CPU an allocation that fails aborts the process: a cell that cannot fit is refused first.
        if i == 0 {
            device::check_host_memory(&model.device, cell_bytes(model, key, &batch))?;
        }
        // Peaks that could not be reset would be an earlier run's: absent instead.
        let window = measured.then(|| device::reset_peaks(&model.device));
        let mut rep = generate_once(model, key, cfg, &batch, i as u64)?;
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
        }
        Ok(())
    };
    let schedule = (0..warmup as usize).map(|i| (i, false)).chain((0..cfg.run.repetitions as usize).map(|i| (i, true)));
    let mut outcome = Ok(());
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
    }
    let status = match outcome {
        Ok(()) => CellStatus::Ok,
        Err(e) => {
            // The failed run's tensors are dropped by now: give their memory back before the next cell.
            device::release(&model.device);
            tracing::warn!(cell = %key, "cell failed: {e:#}");
            if device::is_out_of_memory(&e) {
                CellStatus::Oom { message: oom_message(key, &e) }
            } else {
                CellStatus::Error { message: format!("{e:#}") }
            }
        }
    };
    Some(Cell {
        key: key.clone(),
        status,
        warmup_runs: warmup,
        repetitions: reps,
        execution: None,
        quality: vec![],
        generations: vec![],
        quality_errors: vec![],
    })
}

/// An out-of-memory status names what the cell asked for, so the grid's limit can be read from the bundle.
fn oom_message(key: &CellKey, e: &anyhow::Error) -> String {
    let steps = key.steps.map_or(String::new(), |k| format!(", K={k}"));
    format!(
        "out of memory at B={}, N={} ({} prompt + {} output tokens){steps}: {e:#}; fix: a smaller batch size or \
         sequence length, or a device with more memory",
        key.batch_size, key.seq_len, key.prompt_tokens, key.output_tokens
    )
}

/// One generation of a batch with the cell's algorithm.
fn generate_once(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    batch: &[Vec<u32>],
    run: u64,
) -> Result<Repetition> {
    let (rows, mut rep) = generate_rows(model, key, cfg, batch, run)?;
    let work = roofline_work(model, key, batch);
    rep.weights_read_bytes = Some(work.weights_read_bytes);
    rep.flop_count = Some(work.flops);
    rep.kv_cache_bytes = work.kv_cache_bytes;
    rep.output_tokens = rows.iter().map(|r| r.len() as u64).sum();
    for row in &rows {
        let text = model.tokenizer.decode(row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        rep.output_bytes += text.len() as u64;
    }
    Ok(rep)
}

/// The largest working set of one generation of `batch` beyond the weights, in bytes, from the model's shape: the
/// attention scores of a full pass (B x heads x len x len, f32), the KV cache (AR), the logits (with the
/// selection's f64 copy for LLaDA) and the MLP activations. A lower bound of what the run allocates.
fn cell_bytes(model: &LoadedModel, key: &CellKey, batch: &[Vec<u32>]) -> u64 {
    let s = model.config.shape();
    let (b, prompt) = (batch.len() as u64, batch.iter().map(Vec::len).max().unwrap_or(0) as u64);
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
            let kv = schema::roofline::kv_cache_bytes(&s, b, len, dtype);
            let acts = sat(&[b, prompt, inter.max(hidden), dtype, 3]);
            scores.saturating_add(kv).saturating_add(acts).saturating_add(sat(&[b, vocab, f32b]))
        }
        Sampler::LladaLowConfidence | Sampler::LladaRandom => {
            let block = u64::from(key.block_length.unwrap_or(key.output_tokens));
            let scores = sat(&[b, heads, len, len, f32b]);
            let logits = sat(&[b, block, vocab, f32b + 8]);
            let acts = sat(&[b, len, inter.max(hidden), dtype, 3]);
            scores.saturating_add(logits).saturating_add(acts)
        }
    }
}

/// The analytic work of one generation of `batch` (left-padded to its longest prompt) for the roofline context.
fn roofline_work(model: &LoadedModel, key: &CellKey, batch: &[Vec<u32>]) -> schema::roofline::Work {
    let shape = model.config.shape();
    let dtype_bytes = model.dtype.size_in_bytes() as u64;
    let (b, prompt) = (batch.len() as u64, batch.iter().map(Vec::len).max().unwrap_or(0) as u64);
    let n_out = u64::from(key.output_tokens);
    match key.sampler {
        Sampler::ArGreedy => schema::roofline::autoregressive(&shape, b, prompt, n_out, dtype_bytes),
        Sampler::LladaLowConfidence | Sampler::LladaRandom => {
            let steps = u64::from(key.steps.unwrap_or(key.output_tokens));
            let block = u64::from(key.block_length.unwrap_or(key.output_tokens));
            schema::roofline::diffusion(&shape, b, prompt + n_out, block, steps, dtype_bytes)
        }
    }
}

/// One generation of a batch with the cell's algorithm: the generated ids of each row, and the timings.
pub(crate) fn generate_rows(
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
            let rep = Repetition {
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
            };
            let out = generate::generate_llada(model, batch, n_out, &params)?;
            let rep = Repetition {
                e2e_ms: out.e2e_ms,
                first_block_ms: Some(out.first_block_ms),
                step_ms: Some(out.step_ms.clone()),
                forward_passes: Some(out.nfe as u32),
                ..Repetition::default()
            };
            (out.tokens, rep)
        }
    };
    Ok((rows, rep))
}

/// Progress: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).
struct Progress {
    total: usize,
    done: usize,
    /// Cells done by earlier attempts: not part of this process's rate.
    resumed: usize,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    enabled: bool,
}

impl Progress {
    fn new(total: usize, done: usize, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_position(done as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} cells, eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Progress { total, done, resumed: done, started: Instant::now(), bar, enabled }
    }

    fn start(&mut self, key: &CellKey) {
        if let Some(bar) = &self.bar {
            bar.set_message(key.to_string());
        }
    }

    fn finish(&mut self, cell: &Cell) {
        self.done += 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
            return;
        }
        if !self.enabled {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let eta = elapsed / (self.done - self.resumed).max(1) as f64 * (self.total - self.done) as f64;
        let what = match (&cell.status, derive::cell_summary(cell).e2e_ms) {
            (CellStatus::Ok, Some(s)) => format!("median {:.1} ms over {} runs", s.median, s.n),
            (CellStatus::Ok, None) => "ok, no timing".to_string(),
            (CellStatus::Oom { message }, _) => format!("OUT OF MEMORY: {message}"),
            (CellStatus::Error { message }, _) => format!("FAILED: {message}"),
            (CellStatus::Skipped { reason }, _) => format!("skipped: {reason}"),
        };
        eprintln!("[{}/{}] {}: {what} (eta {:.0} s)", self.done, self.total, cell.key, eta);
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
