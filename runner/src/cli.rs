//! The command line: parse, turn arguments into a plan, dispatch. Exit status: 0 ok, 1 a failed run (a
//! cell failed, an I/O error), 2 bad input (config, flags, bundle), 75 a run stopped by a signal that
//! `--resume` continues.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use schema::ModelKind;
use schema::grid::{Precision, SynthPreset, SyntheticWeights};

use crate::plan::{ConfigArgs, DtypeArg};
use crate::{InputError, plan, serve, sweep, synth};

/// Measure LLaDA (masked diffusion) against Llama-3 (autoregressive): latency, throughput, memory.
///
/// With no arguments, `dllm-bench run` runs the embedded demo (tiny synthetic models, CPU) and writes a
/// bundle under results/; `dllm-bench serve` then shows it in the explorer.
///
/// Exit status: 0 success; 1 a failed run (a cell failed: its status is in the bundle) or a failed check;
/// 2 bad input (config, flags, bundle, a refused resume or merge); 75 a run stopped by SIGTERM, SIGINT or
/// SIGUSR1 after writing its partial bundle: `dllm-bench run --resume DIR` (or the same `--run-dir`) continues it.
#[derive(Debug, Parser)]
#[command(name = "dllm-bench", version, about, long_about)]
pub struct Cli {
    /// Command.
    #[command(subcommand)]
    pub command: Command,
    /// Log level filter (error, warn, info, debug, trace), or a tracing directive; env: DLLM_BENCH_LOG.
    #[arg(long, global = true, value_name = "FILTER")]
    pub log: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a grid and write a result bundle (default: the embedded demo).
    Run(RunArgs),
    /// Print the cells a config expands to, without running anything.
    Plan(PlanArgs),
    /// Check bundles: read (upgrading older versions) and report; exit 2 if any is invalid.
    Validate(ValidateArgs),
    /// Write a synthetic checkpoint (random weights, real on-disk layout) into the HF cache.
    Synth(SynthArgs),
    /// Serve the explorer and the bundles of a results folder on a local address.
    Serve(ServeArgs),
    /// Assemble the static site for reviewers: the explorer's release build, the bundles, their index.
    Site(crate::site::SiteArgs),
    /// Print the JSON Schema of the bundle format (also committed as schema/bundle.schema.json).
    Schema,
    /// Merge the bundles of a grid's shards (`run --shard I/N`, a SLURM job array) into one bundle.
    Merge(MergeArgs),
    /// Download (or with --local-files-only, check) every model file a config needs, and its Wikitext prompts'
    /// dataset, into the HF cache.
    Fetch(FetchArgs),
    /// Time the runner's kernels on synthetic weights of given shapes: an AR decode token, a LLaDA step, the
    /// device's copy bandwidth and matmul rate, and how close the first two come to the last two.
    BenchKernels(crate::bench::BenchArgs),
    /// S_parity, the speedup at parity and the verdict per batch size of a bundle, as Markdown.
    Report(crate::report::ReportArgs),
    /// The study's figures of a bundle as SVG, PNG or PDF files (the explorer's views, drawn headless), the
    /// S_parity table as Markdown and LaTeX, and captions.md saying what each shows.
    Figures(crate::figures::FiguresArgs),
    /// Bundles as one tidy table (CSV, Parquet or JSON Lines) for pandas, polars or R: one row per (cell,
    /// repetition) with the cell's key, every raw measurement and the numbers `metrics` derives, or (--table
    /// parity) one per S_parity record and batch size. Unmeasured values are empty (CSV) or null, never 0.
    Export(crate::export::ExportArgs),
    /// Two bundles of one grid cell by cell: latency ratios (medians, ITL or step time, peak memory), or with
    /// --tokens the generated tokens, committed tokens per step, forward passes, output bytes and perplexities
    /// (exit 1 on any difference).
    Compare(crate::compare::CompareArgs),
}

/// Where models live.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// HF hub cache folder (models--org--name/...). Default: $HF_HUB_CACHE, else $HF_HOME/hub, else
    /// ~/.cache/huggingface/hub.
    #[arg(long, value_name = "DIR")]
    pub model_cache_dir: Option<PathBuf>,
}

impl CacheArgs {
    /// The cache folder to use.
    pub fn dir(&self) -> PathBuf {
        if let Some(d) = &self.model_cache_dir {
            return d.clone();
        }
        if let Some(d) = std::env::var_os("HF_HUB_CACHE") {
            return d.into();
        }
        if let Some(d) = std::env::var_os("HF_HOME") {
            return PathBuf::from(d).join("hub");
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        home.join(".cache/huggingface/hub")
    }
}

/// `dllm-bench run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The grid and its overrides.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where models are.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Folder for the bundle. The run works in OUTPUT_DIR/NAME-STAMP.run/ (journal, partial bundle), writes
    /// OUTPUT_DIR/NAME-STAMP.json at the end and removes the .run folder. Not with --run-dir or --resume (their
    /// folder says where the bundle goes).
    #[arg(long, short = 'o', default_value = "results", value_name = "DIR", conflicts_with_all = ["run_dir", "resume"])]
    pub output_dir: PathBuf,
    /// Run in this folder: start a new run if it has no journal, resume the one it has otherwise (what a job
    /// script wants: the same command after a requeue). The final bundle is DIR/bundle.json; the folder stays.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub run_dir: Option<PathBuf>,
    /// Resume the interrupted run in this folder (NAME-STAMP.run, or a --run-dir): cells in its journal are kept,
    /// the rest are measured. The config comes from the journal; a --config or override that changes it is
    /// refused, naming the fields.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Run only shard I of N of the grid (0-based; cells split by estimated cost B x NFE x N). Default inside a
    /// SLURM job array: from SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_STEP and
    /// SLURM_ARRAY_TASK_COUNT (task (ID - MIN) / STEP of COUNT).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Accepted for job scripts: `run` never uses the network (env HF_HUB_OFFLINE=1 is the same). A file
    /// missing from the cache fails the run before anything is measured, naming the file.
    #[arg(long)]
    pub offline: bool,
    /// No progress output.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `dllm-bench merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Shard bundles (each shard's bundle.json).
    #[arg(required = true, value_name = "BUNDLE")]
    pub bundles: Vec<PathBuf>,
    /// The merged bundle to write. An existing file there is replaced (atomically, once the merge succeeded),
    /// unless it is one of the shards: that is refused before anything is written.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
    /// Merge shards measured on different device models (the study keeps them apart).
    #[arg(long)]
    pub allow_mixed_devices: bool,
    /// Write the merged bundle even if cells of the grid are in no shard, or a shard's continuations lack an
    /// evaluator's perplexity (a partial bundle).
    #[arg(long)]
    pub allow_missing: bool,
}

/// `dllm-bench fetch`.
#[derive(Debug, clap::Args)]
pub struct FetchArgs {
    /// The grid whose models (and Wikitext dataset) to fetch, and its overrides.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where models and datasets go (the cache `run` reads).
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Another model to fetch as well (hub id, revision main); repeatable.
    #[arg(long, value_name = "ORG/NAME")]
    pub extra_model_id: Vec<String>,
    /// Only check the cache and list what is missing, by path; download nothing. Exit 1 if anything is missing.
    /// Implied by HF_HUB_OFFLINE=1.
    #[arg(long)]
    pub local_files_only: bool,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `dllm-bench plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The grid and its overrides.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the resolved config as TOML as well.
    #[arg(long)]
    pub show_config: bool,
    /// Print one JSON object instead: the resolved config, the cells (keys as a bundle writes them) with their
    /// roofline counts, each model's shape and every synthetic preset's shapes (what jobs/hf_reference.py reads).
    #[arg(long, conflicts_with = "show_config")]
    pub json: bool,
    /// With --json: count every model with this synthetic preset's shapes (the HF reference's --shapes).
    #[arg(long, value_enum, requires = "json", value_name = "PRESET")]
    pub shapes: Option<ShapesArg>,
    /// With --json: count every model with this many layers (the HF reference's --layers).
    #[arg(long, requires = "json", value_name = "L", value_parser = clap::value_parser!(u32).range(1..))]
    pub layers: Option<u32>,
}

/// A synthetic preset on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ShapesArg {
    /// The tiny preset.
    Tiny,
    /// The small preset.
    Small,
    /// The real 8B shapes.
    Real,
}

/// `dllm-bench validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Bundle files.
    #[arg(required = true, value_name = "BUNDLE")]
    pub bundles: Vec<PathBuf>,
}

/// `dllm-bench synth`.
#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Architecture.
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// Repository id to write, e.g. dllm-bench/synthetic-llada-tiny.
    #[arg(long, value_name = "ORG/NAME")]
    pub repo_id: String,
    /// Size preset.
    #[arg(long, value_enum, default_value = "tiny")]
    pub preset: PresetArg,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Precision of the written weights [default: f32; bf16 for --preset real, as the real checkpoints].
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Number of safetensors shards (1: a single model.safetensors) [default: 1; for --preset real 4 for llama
    /// and dream, 6 for llada].
    #[arg(long)]
    pub shards: Option<u32>,
    /// Checkpoint layout of a llama-kind model (default: Meta-Llama-3's).
    #[arg(long, value_enum)]
    pub layout: Option<SynthLayoutArg>,
    /// An Instruct checkpoint: write the kind's chat template (Llama-3-Instruct's, LLaDA-8B-Instruct's) into
    /// tokenizer_config.json, with its header tokens in the tokenizer.
    #[arg(long)]
    pub chat_template: bool,
    /// Where models are.
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// `--layout` of `synth`: the llama-kind checkpoints the loader reads.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum SynthLayoutArg {
    /// Meta-Llama-3: plain RoPE, untied head.
    #[value(name = "llama3")]
    Llama3,
    /// Llama-3.1: llama3 RoPE scaling (factor 8).
    #[value(name = "llama3.1")]
    Llama31,
    /// Llama-3.2-1B/3B: llama3 RoPE scaling (factor 32) and a tied LM head.
    #[value(name = "llama3.2")]
    Llama32,
    /// Qwen2 / Qwen2.5: q/k/v biases, RoPE base 10^6.
    #[value(name = "qwen2")]
    Qwen2,
}

impl SynthLayoutArg {
    fn layout(self) -> schema::grid::SynthLayout {
        match self {
            Self::Llama3 => schema::grid::SynthLayout::Llama3,
            Self::Llama31 => schema::grid::SynthLayout::Llama31,
            Self::Llama32 => schema::grid::SynthLayout::Llama32,
            Self::Qwen2 => schema::grid::SynthLayout::Qwen2,
        }
    }
}

/// Model kind on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Autoregressive, HF llama layout.
    Llama,
    /// Masked diffusion, LLaDA layout.
    Llada,
    /// Masked diffusion, Dream's (the Qwen2 layout with a mask token, bidirectional).
    Dream,
}

/// Synthetic size preset on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PresetArg {
    /// Fast on a CPU.
    Tiny,
    /// A few million parameters.
    Small,
    /// The real 8B shapes.
    Real,
}

/// `dllm-bench serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Folder of bundles.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// The explorer's built site (trunk's output).
    #[arg(long, default_value = "explorer/dist", value_name = "DIR")]
    pub explorer: PathBuf,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub addr: String,
}

/// Parses the command line and runs it.
pub fn main() -> Result<ExitCode> {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion) => {
            e.exit()
        }
        Err(e) => {
            let _ = e.print();
            return Ok(ExitCode::from(2));
        }
    };
    init_logging(cli.log.as_deref());
    match cli.command {
        Command::Run(args) => run(args),
        Command::Plan(args) => plan_cmd(args),
        Command::Compare(args) => crate::compare::run(&args),
        Command::Validate(args) => validate(args),
        Command::Synth(args) => synth_cmd(args),
        Command::Serve(args) => {
            serve::serve(&args.results, &args.explorer, &args.addr)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Site(args) => {
            let n = crate::site::assemble(&args)?;
            println!("{}: {n} bundles; serve it from any static host (all paths are relative)", args.out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema => {
            print!("{}", schema::bundle_json_schema());
            Ok(ExitCode::SUCCESS)
        }
        Command::Merge(args) => merge_cmd(args),
        Command::Fetch(args) => fetch_cmd(args),
        Command::BenchKernels(args) => crate::bench::main(&args),
        Command::Report(args) => crate::report::main(&args),
        Command::Figures(args) => crate::figures::main(&args),
        Command::Export(args) => crate::export::main(&args),
    }
}

fn init_logging(filter: Option<&str>) {
    // By default, not tiny-skia's warnings about zero-length strokes (an error bar of equal min and max) while a
    // PNG figure is rendered: nothing is missing from the figure.
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("DLLM_BENCH_LOG").ok())
        .unwrap_or("warn,tiny_skia=error".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn run(args: RunArgs) -> Result<ExitCode> {
    // Resuming: the journal's config is the base, and its shard the default.
    let journal_header = match &args.resume {
        Some(dir) => Some(crate::journal::read(&crate::journal::Journal::require(dir)?)?.0),
        None => None,
    };
    let base = journal_header.as_ref().map(|h| (h.config_toml.clone(), h.config_source.clone(), h.config_dir.clone()));
    let mut resolved = plan::resolve_with_base(&args.config, base)?;
    if let (Some(h), None) = (&journal_header, &args.config.config) {
        // Keep the original source (path and overrides), so a resume's bundle says the same as the first run's.
        if resolved.sha256() == h.config_sha256 {
            resolved.source = h.config_source.clone();
        }
    }
    let shard = match &args.shard {
        Some(s) => Some(crate::shard::parse(s)?),
        None => match crate::shard::from_slurm_env(|k| std::env::var(k).ok())? {
            Some(s) => Some(s),
            None => journal_header.as_ref().and_then(|h| h.shard),
        },
    };
    let planned = crate::shard::select(&resolved.config.cells(), shard).len();
    if !args.quiet {
        let of = shard.map_or(String::new(), |s| format!(" (shard {s} of {} cells)", resolved.config.cells().len()));
        crate::say!("dllm-bench: {planned} cells{of} from {}", resolved.source);
    }
    let folder = match (&args.resume, &args.run_dir) {
        (Some(dir), _) => sweep::RunFolder::Resume(dir.clone()),
        (None, Some(dir)) => sweep::RunFolder::At(dir.clone()),
        (None, None) => sweep::RunFolder::New { output_dir: args.output_dir.clone() },
    };
    let stop = crate::signals::Stop::install().context("cannot install the signal handlers")?;
    let opts = sweep::SweepOptions { folder, model_cache_dir: args.cache.dir(), progress: !args.quiet, shard, stop };
    let outcome = sweep::run(&resolved, &opts)?;
    // The bundle is written: a closed standard output loses this line, not the exit status.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", outcome.path.display()).as_bytes());
    // A parity search adds cells to the plan as it goes: the bundle's count is the one that holds.
    let planned = outcome.bundle.provenance.planned_cells.map_or(planned, |n| n as usize);
    if let sweep::Ending::Interrupted(signal) = outcome.ending {
        crate::say!(
            "interrupted by {signal}: {} of {planned} cells done, partial bundle {}; continue with \
             `dllm-bench run --resume {}` (exit status {})",
            outcome.bundle.cells.len(),
            outcome.path.display(),
            outcome.run_dir.display(),
            crate::EXIT_INTERRUPTED
        );
        return Ok(ExitCode::from(crate::EXIT_INTERRUPTED));
    }
    let synthetic = if outcome.bundle.provenance.synthetic_weights {
        " (SYNTHETIC weights: timing is real, quality is meaningless)"
    } else {
        ""
    };
    if !args.quiet {
        crate::say!("wrote {}{synthetic}", outcome.path.display());
    }
    let quality_errors: usize = outcome.bundle.cells.iter().map(|c| c.quality_errors.len()).sum();
    if outcome.failed_cells > 0 || quality_errors > 0 {
        if outcome.failed_cells > 0 {
            crate::say!("error: {} of {planned} cells failed; see their status in the bundle", outcome.failed_cells);
        }
        if quality_errors > 0 {
            crate::say!(
                "error: {quality_errors} quality values could not be computed (S_parity skips those K); see the \
                 cells' quality_errors in the bundle"
            );
        }
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn merge_cmd(args: MergeArgs) -> Result<ExitCode> {
    let mut inputs = Vec::new();
    for path in &args.bundles {
        let read = crate::input::read_bundle_file(path)?;
        // Merging writes the current format: the fields a newer minor added would be lost.
        if read.newer_minor() {
            return Err(InputError(format!(
                "{}: schema_version {} is newer than the {} this dllm-bench writes: merging would drop the fields \
                 it added; fix: merge with the dllm-bench that wrote it (or a newer one)",
                path.display(),
                read.file_version,
                schema::SchemaVersion::CURRENT.number()
            ))
            .into());
        }
        inputs.push((path.clone(), read.bundle));
    }
    let opts =
        crate::merge::MergeOptions { allow_mixed_devices: args.allow_mixed_devices, allow_missing: args.allow_missing };
    let merged = crate::merge::merge(&inputs, opts)?;
    crate::output::write_bundle(&args.output, &merged.bundle)?;
    println!("{}", args.output.display());
    let b = &merged.bundle;
    let failed = b.cells.iter().filter(|c| c.status != schema::CellStatus::Ok).count();
    eprintln!(
        "merged {} bundles: {} cells ({failed} failed), {} executions, on {}",
        inputs.len(),
        b.cells.len(),
        b.provenance.executions.len(),
        merged.devices.join(" + ")
    );
    if !merged.missing.is_empty() {
        eprintln!(
            "warning: {} cells of the grid are missing (--allow-missing): a partial bundle",
            merged.missing.len()
        );
    }
    if !merged.unscored.is_empty() {
        eprintln!(
            "warning: continuations lack an evaluator's perplexity (--allow-missing: S_parity skips those K): {}",
            merged.unscored.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn fetch_cmd(args: FetchArgs) -> Result<ExitCode> {
    use crate::fetch::Asset;
    let resolved = plan::resolve(&args.config)?;
    let cfg = &resolved.config;
    let cache = args.cache.dir();
    let offline_env = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    let local_only = args.local_files_only || offline_env;
    if offline_env && !args.local_files_only {
        crate::say!("HF_HUB_OFFLINE is set: checking the cache only, downloading nothing");
    }
    let mut wanted: Vec<Asset> = Vec::new();
    // The measured models, then the evaluators of [quality] that are not measured models.
    let evaluators = cfg.evaluators();
    let measured = cfg.models.iter().map(|m| (m, cfg.prompts.chat_template));
    for (m, chat_template) in measured.chain(evaluators.iter().filter(|e| !cfg.models.contains(e)).map(|e| (e, false)))
    {
        if m.synthetic.is_some() {
            crate::say!("{}: synthetic (a synthetic table): `dllm-bench run` writes it; nothing to fetch", m.id);
        } else if !wanted.iter().any(|w| w.id() == m.id) {
            wanted.push(Asset::Model { id: m.id.clone(), revision: m.revision.clone(), chat_template });
        }
    }
    for id in &args.extra_model_id {
        if let Some(problem) = schema::grid::hub_id_problem(id) {
            return Err(InputError(format!("--extra-model-id: {problem}; fix: use a hub id such as ORG/NAME")).into());
        }
        if !wanted.iter().any(|w| w.id() == id) {
            wanted.push(Asset::Model { id: id.clone(), revision: "main".into(), chat_template: false });
        }
    }
    if cfg.prompts.source == schema::grid::PromptSource::Wikitext {
        let (id, revision) = (cfg.prompts.dataset().to_string(), cfg.prompts.revision().to_string());
        wanted.push(Asset::Dataset { id, revision });
    }
    let mut missing = 0;
    let mut failed = 0;
    for asset in &wanted {
        let files = if local_only {
            asset.check(&cache)
        } else {
            match asset.download(&cache, !args.quiet) {
                Ok(files) => files,
                Err(e) => {
                    failed += 1;
                    crate::say!("error: {}: {e:#}", asset.id());
                    continue;
                }
            }
        };
        let complete = files.iter().all(|f| f.present);
        for f in files {
            let note = f.note.map_or(String::new(), |n| format!("  ({n})"));
            if f.present {
                crate::tell!("ok       {}", f.path.display());
            } else {
                missing += 1;
                crate::tell!("missing  {}{note}", f.path.display());
            }
        }
        // Present is not enough: the files are read as a run reads them before its first cell (config for the
        // model's kind, tokenizer, the safetensors headers and sizes). Evaluators and extra ids load as llama.
        if let (true, Asset::Model { id, revision, .. }) = (complete, asset) {
            let kind = cfg.models.iter().find(|m| m.id == *id).map_or(schema::ModelKind::Llama, |m| m.kind);
            let checked = crate::model::ModelFiles::from_hf_cache(&cache, id, revision)
                .and_then(|files| crate::model::LoadedModel::check_files(&files, kind));
            if let Err(e) = checked {
                failed += 1;
                crate::tell!("broken   {id}: {e}");
            }
        }
    }
    if missing + failed > 0 {
        crate::say!(
            "{missing} files missing{} in {}{}",
            if failed > 0 {
                format!(", {failed} models or datasets failed to download or are broken")
            } else {
                String::new()
            },
            cache.display(),
            match (local_only, offline_env) {
                (true, true) => "; fix: run `dllm-bench fetch` where there is network, without HF_HUB_OFFLINE set",
                (true, false) => "; fix: run `dllm-bench fetch` without --local-files-only where there is network",
                (false, _) => "",
            }
        );
        return Ok(ExitCode::from(1));
    }
    let datasets = wanted.iter().filter(|a| matches!(a, Asset::Dataset { .. })).count();
    let with = if datasets > 0 { format!(" and {datasets} dataset") } else { String::new() };
    crate::say!("all files of {} models{with} are in {}", wanted.len() - datasets, cache.display());
    Ok(ExitCode::SUCCESS)
}

/// A value's name as configs and bundles write it (`llada_low_confidence`, `embedded`), not Rust's.
fn file_name_of(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

fn plan_cmd(args: PlanArgs) -> Result<ExitCode> {
    let resolved = plan::resolve(&args.config)?;
    if args.json {
        use schema::grid::SynthPreset;
        let preset = args.shapes.map(|s| match s {
            ShapesArg::Tiny => SynthPreset::Tiny,
            ShapesArg::Small => SynthPreset::Small,
            ShapesArg::Real => SynthPreset::Real,
        });
        let over = plan::ShapeOverride { preset, layers: args.layers };
        println!("{}", serde_json::to_string_pretty(&plan::plan_json(&resolved, over))?);
        return Ok(ExitCode::SUCCESS);
    }
    let cfg = &resolved.config;
    let cells = cfg.cells();
    println!("# {} cells from {}", cells.len(), resolved.source);
    let wrapped = if cfg.prompts.chat_template { ", each in its model's chat template" } else { "" };
    println!(
        "# device {}, {}, warm-up {}, repetitions {}, {} prompts ({}){wrapped}",
        cfg.run.device,
        cfg.run.dtype,
        cfg.run.warmup,
        cfg.run.repetitions,
        cfg.prompts.prompt_count(),
        file_name_of(cfg.prompts.source)
    );
    println!(
        "{:<36} {:<40} {:>6} {:>4} {:>6} {:>7} {:>7} {:>6}",
        "model", "sampler", "K", "B", "N", "prompt", "output", "block"
    );
    for c in &cells {
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        println!(
            "{:<36} {:<40} {:>6} {:>4} {:>6} {:>7} {:>7} {:>6}",
            c.model,
            match c.variant() {
                Some(v) => format!("{} {v}", file_name_of(c.sampler)),
                None => file_name_of(c.sampler),
            },
            match (c.steps, c.threshold) {
                (None, Some(t)) => format!("t={t}"),
                (k, _) => opt(k),
            },
            c.batch_size,
            c.seq_len,
            c.prompt_tokens,
            c.output_tokens,
            opt(c.block_length)
        );
    }
    if args.show_config {
        println!("\n{}", cfg.to_toml());
    }
    Ok(ExitCode::SUCCESS)
}

fn validate(args: ValidateArgs) -> Result<ExitCode> {
    let mut bad = 0;
    for path in &args.bundles {
        match crate::input::read_bundle_file(path) {
            Ok(r) => {
                let b = &r.bundle;
                let ok = b.cells.iter().filter(|c| c.status == schema::CellStatus::Ok).count();
                let note = if r.upgraded() {
                    format!(" (schema {} upgraded to {})", r.file_version, schema::SchemaVersion::CURRENT)
                } else if r.newer_minor() {
                    format!(" (schema {}: newer minor version, unknown fields ignored)", r.file_version)
                } else {
                    String::new()
                };
                println!("{}: ok, {} cells ({ok} ok), {} models{note}", path.display(), b.cells.len(), b.models.len());
                // What a partial bundle lacks, said where a user checks it.
                if !b.provenance.missing_cells.is_empty() {
                    println!(
                        "  partial: {} cells of the grid are in no shard (merged with --allow-missing): {}",
                        b.provenance.missing_cells.len(),
                        b.provenance.missing_cells.iter().map(|k| k.to_string()).collect::<Vec<_>>().join("; ")
                    );
                }
                for c in b.cells.iter().filter(|c| !c.stalled_prompts.is_empty()) {
                    println!(
                        "  {}: {} prompts stalled (no continuation, not scored): {:?}",
                        c.key,
                        c.stalled_prompts.len(),
                        c.stalled_prompts
                    );
                }
            }
            Err(e) => {
                bad += 1;
                eprintln!("{e:#}");
            }
        }
    }
    if bad > 0 {
        return Err(InputError(format!("{bad} of {} bundles are invalid", args.bundles.len())).into());
    }
    Ok(ExitCode::SUCCESS)
}

fn synth_cmd(args: SynthArgs) -> Result<ExitCode> {
    let (kind, spec) = args.spec()?;
    let cache = args.cache.dir();
    let dir = synth::write_synthetic(&cache, &args.repo_id, kind, &spec)
        .with_context(|| format!("cannot write {} into {}", args.repo_id, cache.display()))?;
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

impl SynthArgs {
    /// The kind and checkpoint spec these flags ask for, checked; what `--dtype` and `--shards` leave out is the
    /// preset's default (`SynthSpec::resolve`: the real checkpoints' dtype and shard count for `real`).
    pub fn spec(&self) -> Result<(ModelKind, synth::SynthSpec), InputError> {
        let kind = match self.kind {
            KindArg::Llama => ModelKind::Llama,
            KindArg::Llada => ModelKind::Llada,
            KindArg::Dream => ModelKind::Dream,
        };
        if self.layout.is_some() && kind != ModelKind::Llama {
            return Err(InputError(format!(
                "--layout: a layout is a llama-kind checkpoint's (--kind {} has its own); fix: use --kind llama \
                 with --layout, or leave --layout out",
                format!("{:?}", self.kind).to_lowercase()
            )));
        }
        let weights = SyntheticWeights {
            preset: match self.preset {
                PresetArg::Tiny => SynthPreset::Tiny,
                PresetArg::Small => SynthPreset::Small,
                PresetArg::Real => SynthPreset::Real,
            },
            seed: self.seed,
            dtype: self.dtype.map(Precision::from),
            shards: self.shards,
            layers: None,
            hidden: None,
            layout: self.layout.map(SynthLayoutArg::layout),
            chat_template: Some(self.chat_template),
        };
        if let Some(problem) = schema::grid::hub_id_problem(&self.repo_id) {
            return Err(InputError(format!(
                "--repo-id: {problem}; fix: use ORG/NAME, e.g. dllm-bench/synthetic-llada-tiny"
            )));
        }
        // No --dtype: the preset's default (SynthSpec::resolve), not a run's dtype.
        let spec = synth::SynthSpec {
            dtype: weights.dtype,
            ..synth::SynthSpec::from_config(&weights, Precision::F32, self.chat_template)
        };
        spec.check(kind).map_err(|e| {
            InputError(format!(
                "--shards {} / --layout: the runner cannot build this checkpoint: {e}; fix: fewer shards, or a \
                 layout with --kind llama",
                spec.resolve(kind).shards
            ))
        })?;
        Ok((kind, spec))
    }
}
