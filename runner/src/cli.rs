//! The command line: parse, turn arguments into a plan, dispatch. Exit status: 0 ok, 1 a failed run (a
//! cell failed, an I/O error), 2 bad input (config, flags, bundle), 75 a run stopped by a signal that
//! `--resume` continues (or the writing of synthetic weights, which the same command writes again).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::commands;
use crate::commands::fetch::FetchArgs;
use crate::commands::merge::MergeArgs;
use crate::commands::plan::PlanArgs;
use crate::commands::run::RunArgs;
use crate::commands::serve::ServeArgs;
use crate::commands::synth::SynthArgs;
use crate::commands::validate::ValidateArgs;

/// Measure LLaDA (masked diffusion) against Llama-3 (autoregressive): latency, throughput, memory.
///
/// With no arguments, `dllm-bench run` runs the embedded demo (tiny synthetic models, CPU) and writes a
/// bundle under results/; `dllm-bench serve` then shows it in the explorer (built by scripts/demo.sh, which does
/// both).
///
/// Exit status: 0 success; 1 a failed run (a cell failed: its status is in the bundle) or a failed check;
/// 2 bad input (config, flags, bundle, a refused resume or merge); 75 a run stopped by SIGTERM, SIGINT or
/// SIGUSR1 after writing its partial bundle: `dllm-bench run --resume DIR` (or the same `--run-dir`) continues it;
/// stopped while writing synthetic weights (`run`, `synth`), what they wrote is removed: run the same command
/// again.
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
        Command::Run(args) => commands::run::main(args),
        Command::Plan(args) => commands::plan::main(args),
        Command::Compare(args) => crate::compare::run(&args),
        Command::Validate(args) => commands::validate::main(args),
        Command::Synth(args) => commands::synth::main(args),
        Command::Serve(args) => commands::serve::main(args),
        Command::Site(args) => {
            let n = crate::site::assemble(&args)?;
            // As every command that writes a file or folder: its path on standard output, the rest on standard
            // error.
            crate::say!(
                "site: {} in {}; serve it from any static host (all paths are relative)",
                crate::counted(n, "bundle"),
                args.out.display()
            );
            println!("{}", args.out.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema => {
            print!("{}", schema::bundle_json_schema());
            Ok(ExitCode::SUCCESS)
        }
        Command::Merge(args) => commands::merge::main(args),
        Command::Fetch(args) => commands::fetch::main(args),
        Command::BenchKernels(args) => crate::bench::main(&args),
        Command::Report(args) => crate::report::main(&args),
        Command::Figures(args) => crate::figures::main(&args),
        Command::Export(args) => crate::export::main(&args),
    }
}

fn init_logging(filter: Option<&str>) {
    // By default, not tiny-skia's warnings about zero-length strokes (an error bar of equal min and max) while a
    // PNG figure is rendered: nothing is missing from the figure; nor fontdb's about a file that is no font, which
    // `figures --font` says itself.
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("DLLM_BENCH_LOG").ok())
        .unwrap_or("warn,tiny_skia=error,fontdb=error".into());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(crate::StderrEvent::default)
        .with_ansi(ansi)
        .event_format(UserLines { full: tracing_subscriber::fmt::format().with_ansi(ansi) })
        .try_init();
}

/// Log lines: warnings and errors as the user's other lines read (`warning: MESSAGE (cell: KEY)`, no timestamp or
/// module path: they are part of what a command says), the rest (`--log info` and finer, for debugging) in
/// tracing's full format with the time and the source.
struct UserLines {
    full: tracing_subscriber::fmt::format::Format,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for UserLines
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = *event.metadata().level();
        if level > tracing::Level::WARN {
            return self.full.format_event(ctx, writer, event);
        }
        let mut fields = UserFields::default();
        event.record(&mut fields);
        let kind = if level == tracing::Level::ERROR { "error" } else { "warning" };
        write!(writer, "{kind}: {}", fields.message)?;
        if !fields.rest.is_empty() {
            write!(writer, " ({})", fields.rest.join(", "))?;
        }
        writeln!(writer)
    }
}

/// An event's message and its other fields as `name: value`.
#[derive(Default)]
struct UserFields {
    message: String,
    rest: Vec<String>,
}

impl tracing::field::Visit for UserFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.rest.push(format!("{name}: {value:?}")),
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            name => self.rest.push(format!("{name}: {value}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::UserLines;

    /// What the subscriber writes, kept.
    #[derive(Clone, Default)]
    struct Kept(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Kept {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn warnings_read_as_the_users_lines_and_debugging_lines_keep_their_time_and_source() {
        let kept = Kept::default();
        let writer = kept.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .event_format(UserLines { full: tracing_subscriber::fmt::format().with_ansi(false) })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(cell = %"m N=48 B=1", "the quality generations failed: boom");
            tracing::error!("cannot write");
            tracing::info!(model = "m", "loading");
        });
        let text = String::from_utf8(kept.0.lock().expect("lock").clone()).expect("utf8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "warning: the quality generations failed: boom (cell: m N=48 B=1)");
        assert_eq!(lines[1], "error: cannot write");
        assert!(
            lines[2].contains(" INFO ") && lines[2].contains("loading") && lines[2].contains("model=\"m\""),
            "{text}"
        );
    }
}
