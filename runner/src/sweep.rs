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

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use candle_core::DType;
use schema::bundle::{
    Bundle, Cell, CellKey, CellStatus, ModelInfo, ModelShape, PromptSetInfo, Provenance, Repetition, Sampler,
    TokenizerInfo,
};
use schema::grid::{DeviceSpec, GridConfig, ModelSpec, Precision};
use schema::{SchemaVersion, ShardInfo, derive};
use sha2::{Digest, Sha256};

use crate::generate::{self, LladaParams};
use crate::journal::{Header, JOURNAL_FORMAT, Journal, Record};
use crate::model::{LoadedModel, ModelFiles};
use crate::plan::{ResolvedConfig, config_diff};
use crate::prompts::PromptSet;
use crate::signals::Stop;
use crate::{InputError, device, execution, output, shard, synth, sysinfo};

/// The attention both models use (the study's fairness rule), recorded in every bundle.
pub const ATTENTION: &str = "candle matmul-softmax-matmul attention in the run's precision, identical for both \
                             models; causal mask for llama, no mask for llada; padding mask for left-padded rows";

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
            return Ok(Opened { dir, journal: None, new_header: Some(h) });
        }
        RunFolder::At(dir) if !Journal::exists(dir) => {
            return Ok(Opened {
                dir: dir.clone(),
                journal: None,
                new_header: Some(header(PathBuf::from("bundle.json"), false)),
            });
        }
        RunFolder::At(dir) | RunFolder::Resume(dir) => dir,
    };
    let journal = Journal::open(resume_dir)?;
    check_same_run(&journal, resolved, opts, prompts)?;
    Ok(Opened { dir: resume_dir.clone(), journal: Some(journal), new_header: None })
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
            short(&h.prompt_set.sha256),
            short(&prompts.sha256),
            prompts.source
        ));
    }
    Ok(())
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Creates a new run's folder (a fresh name if a run of the same second has it) and its journal.
fn create_journal(dir: &Path, header: &Header, unique: bool) -> Result<(PathBuf, Journal)> {
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
    let journal = Journal::create(&dir, header)?;
    Ok((dir, journal))
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
        sha256: prompts.sha256(),
    };
    let planned = shard::select(&cfg.cells(), opts.shard);
    let opened = open_folder(resolved, opts, &prompt_info)?;
    let done: HashSet<CellKey> =
        opened.journal.iter().flat_map(|j| j.state.cells.iter().map(|c| c.key.clone())).collect();
    let resumed_cells = planned.iter().filter(|k| done.contains(k)).count();
    let todo: Vec<&CellKey> = planned.iter().filter(|k| !done.contains(k)).collect();

    // Every model with cells to run is found (or written) before anything is measured or created.
    let mut to_load = Vec::new();
    for m in &cfg.models {
        if todo.iter().any(|k| k.model == m.id) {
            to_load.push((m, model_files(m, &opts.model_cache_dir, cfg.run.dtype)?));
        }
    }
    let (run_dir, mut journal) = match opened.journal {
        Some(j) => (opened.dir.clone(), j),
        None => {
            let unique = matches!(opts.folder, RunFolder::New { .. });
            create_journal(&opened.dir, opened.header(), unique)?
        }
    };
    if resumed_cells > 0 && opts.progress {
        eprintln!("resuming {}: {resumed_cells} of {} cells already done", run_dir.display(), planned.len());
    }
    let mut progress = Progress::new(planned.len(), resumed_cells, opts.progress);
    let mut stopped = opts.stop.requested();
    if !todo.is_empty() && stopped.is_none() {
        journal.append(Record::Execution(execution::current(spec, opts.shard)))?;
        let exec = (journal.state.executions.len() - 1) as u32;
        'models: for (m, files) in &to_load {
            tracing::info!(model = %m.id, commit = %files.commit, "loading");
            let model = LoadedModel::load(files, m.kind, &device, dtype)
                .with_context(|| format!("cannot load model {} from {}", m.id, files.snapshot_dir.display()))?;
            let info = model_info(m, &model, files, cfg.run.dtype);
            match journal.state.models.iter().find(|x| x.id == info.id) {
                Some(old) if old.commit != info.commit => {
                    return Err(InputError(format!(
                        "cannot resume {}: model {} changed since the run started (snapshot {} then, {} now); \
                         fix: restore that snapshot (refs/{}), or start a new run folder",
                        run_dir.display(),
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
            for key in todo.iter().filter(|k| k.model == m.id) {
                if let Some(sig) = opts.stop.requested() {
                    stopped = Some(sig);
                    break 'models;
                }
                progress.start(key);
                let Some(mut cell) = measure_cell(&model, key, cfg, &prompts, &mut tokens, &opts.stop) else {
                    stopped = opts.stop.requested();
                    break 'models;
                };
                cell.execution = Some(exec);
                journal.append(Record::Cell(cell.clone()))?;
                progress.finish(&cell);
                let partial = assemble(resolved, &journal, &planned, spec);
                output::write_atomic(&run_dir.join(PARTIAL), schema::write_bundle(&partial).as_bytes())?;
            }
        }
    }
    progress.done();

    let bundle = assemble(resolved, &journal, &planned, spec);
    let failed_cells = bundle.cells.iter().filter(|c| c.status != CellStatus::Ok).count();
    let complete = bundle.cells.len() == planned.len();
    let text = schema::write_bundle(&bundle);
    if !complete {
        let path = run_dir.join(PARTIAL);
        output::write_atomic(&path, text.as_bytes())?;
        let ending = Ending::Interrupted(stopped.unwrap_or("a stop request"));
        return Ok(SweepOutcome { bundle, path, run_dir, failed_cells, resumed_cells, ending });
    }
    let path = final_bundle_path(&run_dir, &journal.header);
    output::write_atomic(&path, text.as_bytes())?;
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
    let used: HashSet<&str> = cells.iter().map(|c| c.key.model.as_str()).collect();
    // Config order, and only models with cells (a model loaded just before a stop has none).
    let models: Vec<ModelInfo> = resolved
        .config
        .models
        .iter()
        .filter_map(|m| journal.state.models.iter().find(|x| x.id == m.id && used.contains(x.id.as_str())))
        .cloned()
        .collect();
    let mut bundle = Bundle {
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
            attention: ATTENTION.into(),
            config_sha256: Some(h.config_sha256.clone()),
            shard: h.shard,
            planned_cells: Some(planned.len() as u32),
            executions: journal.state.executions.clone(),
        },
        models,
        prompt_set: h.prompt_set.clone(),
        cells,
        parity: Vec::new(),
    };
    bundle.recompute_parity();
    bundle
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
        shape: ModelShape {
            layers: c.num_layers as u32,
            hidden: c.hidden_size as u32,
            heads: c.num_heads as u32,
            kv_heads: c.num_kv_heads as u32,
            intermediate: c.intermediate_size as u32,
            vocab: c.vocab_size as u32,
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Prompt token ids per prompt index, tokenized once per model.
#[derive(Default)]
struct TokenCache(HashMap<u32, Vec<u32>>);

impl TokenCache {
    /// BOS followed by the first `prompt_tokens - 1` tokens of the prompt. A prompt too short to fill the
    /// cell's prompt length is an error of the cell, never a silently shorter sequence: N must be real.
    fn prompt(&mut self, model: &LoadedModel, prompts: &PromptSet, index: u32, prompt_tokens: u32) -> Result<Vec<u32>> {
        let ids = match self.0.entry(index) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let text = &prompts.texts[index as usize];
                let enc =
                    model.tokenizer.encode(text.as_str(), false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
                e.insert(enc.get_ids().to_vec())
            }
        };
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
        if measured {
            if let Some(fault) = device::injected_oom(&key.to_string()) {
                return Err(fault);
            }
            device::reset_peaks(&model.device);
        }
        let mut rep = generate_once(model, key, cfg, &batch, i as u64)?;
        if measured {
            let peaks = device::read_peaks(&model.device);
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
            (status, _) => format!("{status:?}"),
        };
        eprintln!("[{}/{}] {}: {what} (eta {:.0} s)", self.done, self.total, cell.key, eta);
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
