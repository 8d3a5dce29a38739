//! `dllm-bench run`: a grid's sweep, started, resumed or continued in a run folder.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

use super::CacheArgs;
use crate::plan::ConfigArgs;
use crate::{plan, sweep};

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
    /// OUTPUT_DIR/NAME-STAMP.json at the end (NAME-shard-I-of-N-STAMP.json for a --shard; never over a file that
    /// is not this run's) and removes its own files
    /// from the .run folder, then the folder if that empties it. Not with --run-dir or --resume (their folder says
    /// where the bundle goes).
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
    /// With a run folder that has a journal (--resume, --run-dir): measure again its cells that failed (status
    /// `error`: a kernel error, NaN logits, a fault of the node), whose new records replace the old; the others
    /// are kept. In a SLURM grid: `jobs/submit.sh --retry-failed` with the run's --name and --shards.
    #[arg(long)]
    pub retry_failed: bool,
    /// Likewise for the cells that ran out of device memory (status `oom`): a measurement, unless something else
    /// held the device's memory then.
    #[arg(long)]
    pub retry_oom: bool,
    /// Resume a run folder whose journal another build of dllm-bench started (another commit, or other
    /// uncommitted changes): refused without this, since one bundle would hold two builds' timings under the
    /// name of one (this build's).
    #[arg(long)]
    pub allow_other_build: bool,
}

/// Where a shard came from when no `--shard` was given inside a SLURM job array (messages name it).
const SLURM_SHARD: &str = "the SLURM array task";

pub fn main(args: RunArgs) -> Result<ExitCode> {
    // First: a stop signal while the config resolves or a large journal is read (SLURM's USR1 included, whose
    // default action ends the process) must give the documented exit 75, not a death by signal.
    let stop = crate::signals::Stop::install().context("cannot install the signal handlers")?;
    // Resuming: the journal's config is the base, and its shard the default.
    let journal_header = match &args.resume {
        Some(dir) => Some(crate::journal::read(&crate::journal::Journal::require(dir)?)?.0),
        None => None,
    };
    let base = journal_header.as_ref().map(|h| (h.config_toml.clone(), h.config_source.clone(), h.config_dir.clone()));
    // A run folder with a journal continues a run: the config it started with is not held to newer new-run rules.
    let resuming = journal_header.is_some() || args.run_dir.as_deref().is_some_and(crate::journal::Journal::exists);
    let mut resolved = plan::resolve_with_base(&args.config, base, resuming)?;
    if let (Some(h), None) = (&journal_header, &args.config.config) {
        // Keep the original source (path and overrides), so a resume's bundle says the same as the first run's.
        if resolved.sha256() == h.config_sha256 {
            resolved.source = h.config_source.clone();
        }
    }
    let (shard, source) = match &args.shard {
        Some(s) => (Some(crate::shard::parse(s)?), "--shard"),
        None => match crate::shard::from_slurm_env(|k| std::env::var(k).ok())? {
            Some(s) => (Some(s), SLURM_SHARD),
            None => (journal_header.as_ref().and_then(|h| h.shard), "the run's journal"),
        },
    };
    // A shard without cells is refused here, before a run folder exists: it would write an empty bundle.
    let planned = crate::shard::select_some(&resolved.config.cells(), shard, source)?.len();
    if !args.quiet {
        let total = resolved.config.cells().len();
        // A shard taken from the SLURM variables says so: an array of the user's own would measure 1/N of the grid.
        let of = match shard {
            Some(s) if source == SLURM_SHARD => {
                format!(" (shard {s} of {total} cells, from {source}'s variables; --shard 0/1 runs the whole grid)")
            }
            Some(s) => format!(" (shard {s} of {total} cells)"),
            None => String::new(),
        };
        crate::say!("dllm-bench: {planned} cells{of} from {}", resolved.source);
    }
    let folder = match (&args.resume, &args.run_dir) {
        (Some(dir), _) => sweep::RunFolder::Resume(dir.clone()),
        (None, Some(dir)) => sweep::RunFolder::At(dir.clone()),
        (None, None) => sweep::RunFolder::New { output_dir: args.output_dir.clone() },
    };
    let retry = sweep::Retry { failed: args.retry_failed, oom: args.retry_oom };
    let opts = sweep::SweepOptions {
        folder,
        model_cache_dir: args.cache.dir(),
        progress: !args.quiet,
        shard,
        stop,
        retry,
        allow_other_build: args.allow_other_build,
    };
    let outcome = sweep::run(&resolved, &opts)?;
    // The bundle is written: a closed standard output loses this line, not the exit status.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), format!("{}\n", outcome.path.display()).as_bytes());
    // A parity search adds cells to the plan as it goes: the bundle's count is the one that holds.
    let planned = outcome.bundle.provenance.planned_cells.map_or(planned, |n| n as usize);
    if let sweep::Ending::Interrupted(signal) = outcome.ending {
        // As every reader counts it: cells done, and continuations not yet scored (a stop while scoring).
        let done = metrics::coverage::partial(&outcome.bundle)
            .map_or_else(|| format!("{} of {planned} cells", outcome.bundle.cells.len()), |p| p.counts());
        crate::say!(
            "interrupted by {signal} ({done}): partial bundle {}; continue with `dllm-bench run --resume {}` \
             (exit status {})",
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
