//! The sweep: for each model, for each cell of the plan, warm up, measure, record; then write the bundle.
//!
//! Models are loaded one at a time so that one model's weights never count in the other's memory figures.
//! A cell that fails is recorded with its status and message and the sweep goes on; the exit status says
//! whether any cell failed. The bundle is written atomically at the end.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use schema::bundle::{
    Bundle, Cell, CellKey, CellStatus, DeviceInfo, ModelInfo, ModelShape, PromptSetInfo, Provenance, Repetition,
    Sampler, TokenizerInfo,
};
use schema::grid::{DeviceSpec, GridConfig, ModelSpec, Precision};
use schema::{SchemaVersion, derive};
use sha2::{Digest, Sha256};

use crate::generate::{self, LladaParams};
use crate::model::{LoadedModel, ModelFiles};
use crate::plan::ResolvedConfig;
use crate::prompts::PromptSet;
use crate::{InputError, output, synth, sysinfo};

/// The attention both models use (the study's fairness rule), recorded in every bundle.
pub const ATTENTION: &str = "candle matmul-softmax-matmul attention in the run's precision, identical for both \
                             models; causal mask for llama, no mask for llada; padding mask for left-padded rows";

/// Where the sweep reads and writes.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// Folder of the bundle.
    pub output_dir: PathBuf,
    /// The HF hub cache (models--org--name folders).
    pub model_cache_dir: PathBuf,
    /// Show a progress bar (when stderr is a terminal) or progress lines.
    pub progress: bool,
}

/// What a sweep produced.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The bundle written.
    pub bundle: Bundle,
    /// Where.
    pub path: PathBuf,
    /// Cells whose status is not `ok`.
    pub failed_cells: usize,
}

/// The torch-like dtype of a precision.
pub fn dtype_of(p: Precision) -> DType {
    match p {
        Precision::F32 => DType::F32,
        Precision::Bf16 => DType::BF16,
        Precision::F16 => DType::F16,
    }
}

/// Opens the device a config asks for; a CPU-only build says so instead of failing obscurely.
pub fn open_device(spec: DeviceSpec) -> Result<Device> {
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(i) => {
            if !candle_core::utils::cuda_is_available() {
                return Err(InputError(format!(
                    "--device cuda:{i}: this dllm-bench was built without CUDA; fix: rebuild with \
                     `cargo build --release -p runner --features cuda`, or run with --device cpu"
                ))
                .into());
            }
            Device::new_cuda(i).with_context(|| format!("cannot open CUDA device {i}"))
        }
    }
}

/// Facts about the device for provenance.
fn device_info(spec: DeviceSpec) -> DeviceInfo {
    match spec {
        DeviceSpec::Cpu => DeviceInfo {
            kind: "cpu".into(),
            name: sysinfo::cpu_name(),
            memory_bytes: sysinfo::memory_bytes(),
            threads: Some(candle_core::utils::get_num_threads() as u32),
            ..DeviceInfo::default()
        },
        DeviceSpec::Cuda(i) => DeviceInfo { kind: "cuda".into(), ordinal: Some(i as u32), ..DeviceInfo::default() },
    }
}

/// Runs the whole plan and writes the bundle.
pub fn run(resolved: &ResolvedConfig, opts: &SweepOptions) -> Result<SweepOutcome> {
    let cfg = &resolved.config;
    let spec = resolved.device();
    let device = open_device(spec)?;
    let dtype = dtype_of(cfg.run.dtype);
    let prompts = PromptSet::load(&cfg.prompts, &resolved.dir)?;
    let cells = cfg.cells();
    let created = SystemTime::now();
    let mut progress = Progress::new(cells.len(), opts.progress);

    let mut models = Vec::new();
    let mut results: Vec<Cell> = Vec::with_capacity(cells.len());
    for m in &cfg.models {
        let files = model_files(m, &opts.model_cache_dir, cfg.run.dtype)?;
        tracing::info!(model = %m.id, commit = %files.commit, "loading");
        let model = LoadedModel::load(&files, m.kind, &device, dtype)
            .with_context(|| format!("cannot load model {} from {}", m.id, files.snapshot_dir.display()))?;
        models.push(model_info(m, &model, &files, cfg.run.dtype));
        let mut tokens = TokenCache::default();
        for key in cells.iter().filter(|c| c.model == m.id) {
            progress.start(key);
            let cell = measure_cell(&model, key, cfg, &prompts, &mut tokens);
            progress.finish(&cell);
            results.push(cell);
        }
    }
    progress.done();

    let synthetic = models.iter().any(|m| m.synthetic);
    let bundle = Bundle {
        schema_version: SchemaVersion::CURRENT,
        provenance: Provenance {
            tool: "dllm-bench".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: sysinfo::git_commit(),
            created_at: humantime::format_rfc3339_seconds(created).to_string(),
            host: sysinfo::host(),
            device: device_info(spec),
            synthetic_weights: synthetic,
            config_source: resolved.source.clone(),
            config: cfg.clone(),
            attention: ATTENTION.into(),
        },
        models,
        prompt_set: PromptSetInfo {
            source: prompts.source.clone(),
            selection: prompts.selection.clone(),
            count: prompts.texts.len() as u32,
            sha256: prompts.sha256(),
        },
        cells: results,
    };
    let stamp: String = bundle.provenance.created_at.chars().filter(|c| !matches!(c, '-' | ':')).collect();
    let path = opts.output_dir.join(format!("{}-{stamp}.json", cfg.run.name));
    output::write_atomic(&path, schema::write_bundle(&bundle).as_bytes())?;
    let failed_cells = bundle.cells.iter().filter(|c| c.status != CellStatus::Ok).count();
    Ok(SweepOutcome { bundle, path, failed_cells })
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
            "{e}; fix: download {} into the cache {} (e.g. `huggingface-cli download {}`), point \
             --model-cache-dir at the cache that has it, or add a [models.synthetic] table to the config",
            m.id,
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

/// Warms up and measures one cell; failures become the cell's status.
fn measure_cell(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    prompts: &PromptSet,
    tokens: &mut TokenCache,
) -> Cell {
    let warmup = cfg.run.warmup;
    let mut reps = Vec::new();
    let mut run = |i: usize, measured: bool| -> Result<()> {
        let indices = prompts.batch_indices(i, key.batch_size as usize);
        let batch =
            indices.iter().map(|&p| tokens.prompt(model, prompts, p, key.prompt_tokens)).collect::<Result<Vec<_>>>()?;
        if measured {
            sysinfo::reset_peak_rss();
        }
        let mut rep = generate_once(model, key, cfg, &batch, i as u64)?;
        if measured {
            rep.prompt_indices = indices;
            rep.peak_rss_bytes = if model.device.is_cpu() { sysinfo::peak_rss_bytes() } else { None };
            reps.push(rep);
        }
        Ok(())
    };
    let outcome = (0..warmup as usize)
        .try_for_each(|i| run(i, false))
        .and_then(|()| (0..cfg.run.repetitions as usize).try_for_each(|i| run(i, true)));
    let status = match outcome {
        Ok(()) => CellStatus::Ok,
        Err(e) => {
            let message = format!("{e:#}");
            tracing::warn!(cell = %key, "cell failed: {message}");
            if message.to_lowercase().contains("out of memory") {
                CellStatus::Oom { message }
            } else {
                CellStatus::Error { message }
            }
        }
    };
    Cell { key: key.clone(), status, warmup_runs: warmup, repetitions: reps }
}

/// One generation of a batch with the cell's algorithm.
fn generate_once(
    model: &LoadedModel,
    key: &CellKey,
    cfg: &GridConfig,
    batch: &[Vec<u32>],
    run: u64,
) -> Result<Repetition> {
    let n_out = key.output_tokens as usize;
    let (rows, mut rep) = match key.sampler {
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
    rep.output_tokens = rows.iter().map(|r| r.len() as u64).sum();
    for row in &rows {
        let text = model.tokenizer.decode(row, true).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        rep.output_bytes += text.len() as u64;
    }
    Ok(rep)
}

/// Progress: a bar on a terminal, one line per cell otherwise (logs, SLURM output files).
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    enabled: bool,
}

impl Progress {
    fn new(total: usize, enabled: bool) -> Progress {
        let bar = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} cells, eta {eta}  {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Progress { total, done: 0, started: Instant::now(), bar, enabled }
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
        let eta = elapsed / self.done as f64 * (self.total - self.done) as f64;
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
