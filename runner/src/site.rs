//! `dllm-bench site`: assembles the static site for reviewers from a results folder: the explorer's release
//! build, the bundles under `bundles/`, and `bundles/index.json`. Every URL in it is relative, so the folder
//! works from any static host, including a sub-path (GitHub Pages).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::{InputError, output, serve};

/// `dllm-bench site`.
#[derive(Debug, clap::Args)]
pub struct SiteArgs {
    /// Folder of bundles.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results: PathBuf,
    /// The explorer's release build (`trunk build --release` in explorer/).
    #[arg(long, default_value = "explorer/dist", value_name = "DIR")]
    pub explorer: PathBuf,
    /// Output folder (replaced).
    #[arg(long, short = 'o', default_value = "site/dist", value_name = "DIR")]
    pub out: PathBuf,
}

/// Builds the site; returns the number of bundles it holds.
pub fn assemble(args: &SiteArgs) -> Result<usize> {
    if !args.explorer.join("index.html").is_file() {
        return Err(InputError(format!(
            "{} has no index.html: build the explorer first (`trunk build index.html --offline=true --release` \
             in explorer/), or pass --explorer DIR",
            args.explorer.display()
        ))
        .into());
    }
    let index = serve::bundle_index(&args.results)?;
    if args.out.exists() {
        std::fs::remove_dir_all(&args.out).with_context(|| format!("cannot replace {}", args.out.display()))?;
    }
    copy_dir(&args.explorer, &args.out)?;
    let bundles = args.out.join("bundles");
    for entry in &index.bundles {
        let from = args.results.join(&entry.file);
        let bytes = std::fs::read(&from).with_context(|| format!("cannot read {}", from.display()))?;
        output::write_atomic(&bundles.join(&entry.file), &bytes)?;
    }
    let json = serde_json::to_vec_pretty(&index)?;
    output::write_atomic(&bundles.join("index.json"), &json)?;
    Ok(index.bundles.len())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("cannot list {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {} to {}", entry.path().display(), target.display()))?;
        }
    }
    Ok(())
}
