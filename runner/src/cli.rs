//! The command line: parse, turn arguments into a plan, dispatch. Exit status: 0 ok, 1 a failed run (a
//! cell failed, an I/O error), 2 bad input (config, flags, bundle).

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
    /// Folder for the bundle.
    #[arg(long, short = 'o', default_value = "results", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// No progress output.
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
    /// Precision of the written weights.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: DtypeArg,
    /// Number of safetensors shards (1: a single model.safetensors).
    #[arg(long, default_value_t = 1)]
    pub shards: u32,
    /// Where models are.
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// Model kind on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum KindArg {
    /// Autoregressive, HF llama layout.
    Llama,
    /// Masked diffusion, LLaDA layout.
    Llada,
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
    }
}

fn init_logging(filter: Option<&str>) {
    let filter = filter.map(str::to_string).or_else(|| std::env::var("DLLM_BENCH_LOG").ok()).unwrap_or("warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

fn run(args: RunArgs) -> Result<ExitCode> {
    let resolved = plan::resolve(&args.config)?;
    let cells = resolved.config.cells().len();
    if !args.quiet {
        eprintln!("dllm-bench: {} cells from {}", cells, resolved.source);
    }
    let opts =
        sweep::SweepOptions { output_dir: args.output_dir, model_cache_dir: args.cache.dir(), progress: !args.quiet };
    let outcome = sweep::run(&resolved, &opts)?;
    let synthetic = if outcome.bundle.provenance.synthetic_weights {
        " (SYNTHETIC weights: timing is real, quality is meaningless)"
    } else {
        ""
    };
    println!("{}", outcome.path.display());
    if !args.quiet {
        eprintln!("wrote {}{synthetic}", outcome.path.display());
    }
    if outcome.failed_cells > 0 {
        eprintln!("error: {} of {cells} cells failed; see their status in the bundle", outcome.failed_cells);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_cmd(args: PlanArgs) -> Result<ExitCode> {
    let resolved = plan::resolve(&args.config)?;
    let cfg = &resolved.config;
    let cells = cfg.cells();
    println!("# {} cells from {}", cells.len(), resolved.source);
    println!(
        "# device {}, {}, warm-up {}, repetitions {}, {} prompts ({:?})",
        cfg.run.device, cfg.run.dtype, cfg.run.warmup, cfg.run.repetitions, cfg.prompts.count, cfg.prompts.source
    );
    println!(
        "{:<36} {:<22} {:>5} {:>4} {:>6} {:>7} {:>7} {:>6}",
        "model", "sampler", "K", "B", "N", "prompt", "output", "block"
    );
    for c in &cells {
        let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        println!(
            "{:<36} {:<22} {:>5} {:>4} {:>6} {:>7} {:>7} {:>6}",
            c.model,
            format!("{:?}", c.sampler),
            opt(c.steps),
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
        let result = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|t| schema::read_bundle_detailed(&t).map_err(|e| e.to_string()));
        match result {
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
            }
            Err(e) => {
                bad += 1;
                eprintln!("{}: {e}", path.display());
            }
        }
    }
    if bad > 0 {
        return Err(InputError(format!("{bad} of {} bundles are invalid", args.bundles.len())).into());
    }
    Ok(ExitCode::SUCCESS)
}

fn synth_cmd(args: SynthArgs) -> Result<ExitCode> {
    let kind = match args.kind {
        KindArg::Llama => ModelKind::Llama,
        KindArg::Llada => ModelKind::Llada,
    };
    let weights = SyntheticWeights {
        preset: match args.preset {
            PresetArg::Tiny => SynthPreset::Tiny,
            PresetArg::Small => SynthPreset::Small,
            PresetArg::Real => SynthPreset::Real,
        },
        seed: args.seed,
        dtype: Some(Precision::from(args.dtype)),
        shards: Some(args.shards),
        layers: None,
        hidden: None,
    };
    let spec = synth::SynthSpec::from_config(&weights, Precision::from(args.dtype));
    let cache = args.cache.dir();
    let dir = synth::write_synthetic(&cache, &args.repo_id, kind, &spec)
        .with_context(|| format!("cannot write {} into {}", args.repo_id, cache.display()))?;
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}
