//! `dllm-bench validate`: bundles read (upgrading older versions) and reported.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::InputError;

/// `dllm-bench validate`.
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Bundle files.
    #[arg(required = true, value_name = "BUNDLE")]
    pub bundles: Vec<PathBuf>,
}

pub fn main(args: ValidateArgs) -> Result<ExitCode> {
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
                if let Some(opts) = metrics::parity::ParityOptions::from_config(b)
                    && !b.parity.is_empty()
                    && metrics::parity::parity(b, &opts) != b.parity
                {
                    println!(
                        "  stale: the stored S_parity records (`parity`) are not those its cells give (the bundle was \
                         edited, or written by an older version); `report`, `export` and the explorer use the cells'"
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
