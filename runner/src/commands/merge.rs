//! `dllm-bench merge`: the bundles of a grid's shards as one bundle.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::InputError;

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
    /// Merge shards written by different builds of dllm-bench (another commit, or other uncommitted changes); the
    /// merged bundle names the first shard's.
    #[arg(long)]
    pub allow_mixed_builds: bool,
}

pub fn main(args: MergeArgs) -> Result<ExitCode> {
    let mut inputs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for path in &args.bundles {
        // One bundle twice would be each of its cells twice: said as `export` says it.
        if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())) {
            return Err(crate::InputError(format!(
                "{}: given twice; fix: name each shard's bundle once",
                path.display()
            ))
            .into());
        }
        let read = crate::input::read_bundle_file(path)?;
        crate::input::note_recounted(path, &read);
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
    let opts = crate::merge::MergeOptions {
        allow_mixed_devices: args.allow_mixed_devices,
        allow_missing: args.allow_missing,
        allow_mixed_builds: args.allow_mixed_builds,
    };
    let merged = crate::merge::merge(&inputs, opts)?;
    crate::output::write_bundle(&args.output, &merged.bundle)?;
    println!("{}", args.output.display());
    let b = &merged.bundle;
    let failed = b.cells.iter().filter(|c| c.status != schema::CellStatus::Ok).count();
    eprintln!(
        "merged {}: {} ({failed} failed), {}, on {}",
        crate::counted(inputs.len(), "bundle"),
        crate::counted(b.cells.len(), "cell"),
        crate::counted(b.provenance.executions.len(), "execution"),
        merged.devices.join(" + ")
    );
    if !merged.missing.is_empty() {
        eprintln!(
            "warning: {} of the grid's {} cells are in no bundle (--allow-missing): a partial bundle, its \
             provenance.missing_cells naming them:\n{}",
            merged.missing.len(),
            b.provenance.planned_cells.unwrap_or_default(),
            crate::merge::list(merged.missing.iter(), 20)
        );
    }
    if !merged.unscored.is_empty() {
        eprintln!(
            "warning: continuations lack an evaluator's perplexity or BERTScore (--allow-missing: S_parity skips those K): {}",
            merged.unscored.join("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
