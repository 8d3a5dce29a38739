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
    /// Output folder: created, or replaced when it is an earlier site (never a folder holding other files, the
    /// current folder, the results or the explorer build).
    #[arg(long, short = 'o', default_value = "site/dist", value_name = "DIR")]
    pub out: PathBuf,
    /// Publish the bundles that read and leave out each `.json` file of --results that is not one (each named in
    /// a warning). Without it such a file stops the site, so that none is left out unseen.
    #[arg(long)]
    pub skip_invalid: bool,
}

/// The file that marks a folder as a site this command wrote, so that the next `site` may replace it.
const MARKER: &str = ".dllm-bench-site";

/// `p` as an absolute path, `.` and `..` taken out lexically and the symbolic links of its longest existing part
/// resolved (it need not exist): the folder the commands below act on, whatever folders they create first.
fn resolved(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut clean = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let mut rest = Vec::new();
    let mut head = clean.as_path();
    loop {
        if let Ok(real) = head.canonicalize() {
            return rest.iter().rev().fold(real, |acc, name| acc.join(name));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                head = parent;
            }
            _ => return clean,
        }
    }
}

/// Refuses an output folder whose replacement would lose anything: one that is or holds the current folder, the
/// results or the explorer build, or lies inside the explorer build (which is copied into it); a file; a folder
/// with files that is not an earlier site (its marker, or an `index.html` with `bundles/index.json`).
/// Returns the folder, resolved (see [`resolved`]).
fn check_out(args: &SiteArgs) -> Result<PathBuf> {
    let out = resolved(&args.out);
    let refuse = |why: String| -> Result<PathBuf> {
        Err(InputError(format!(
            "--out {}: {why}; fix: pass a new or empty folder for the site (default site/dist)",
            args.out.display()
        ))
        .into())
    };
    for (what, p) in [
        ("the current folder", Path::new(".")),
        ("the results folder", &args.results),
        ("the explorer build", &args.explorer),
    ] {
        let r = resolved(p);
        if r.starts_with(&out) {
            return refuse(format!("it is or holds {what} {}, which replacing it would delete", p.display()));
        }
    }
    if out.starts_with(resolved(&args.explorer)) {
        return refuse(format!(
            "it lies inside the explorer build {}, which is copied into it",
            args.explorer.display()
        ));
    }
    if out.exists() && !out.is_dir() {
        return refuse("it is a file, not a folder".into());
    }
    let site =
        out.join(MARKER).is_file() || (out.join("index.html").is_file() && out.join("bundles/index.json").is_file());
    let empty = std::fs::read_dir(&out).map_or(true, |mut d| d.next().is_none());
    if !site && !empty {
        return refuse(format!(
            "it holds files and is not a site `dllm-bench site` wrote (no {MARKER}, no index.html with \
             bundles/index.json): it is not replaced"
        ));
    }
    Ok(out)
}

/// Builds the site; returns the number of bundles it holds.
pub fn assemble(args: &SiteArgs) -> Result<usize> {
    crate::serve::check_explorer_built(&args.explorer)?;
    // As `serve`: a results folder that is not one is bad input with its fix, not a failure to resolve a path.
    if !args.results.is_dir() {
        return Err(InputError(format!(
            "--results {}: not a folder of bundles; fix: pass --results DIR, the folder `dllm-bench run` wrote its \
             bundles to (default results)",
            args.results.display()
        ))
        .into());
    }
    let (index, skipped) = serve::read_index(&args.results)?;
    if !skipped.is_empty() && !args.skip_invalid {
        let files: Vec<String> = skipped.iter().map(|(p, e)| format!("  {}: {e}", p.display())).collect();
        let (what, them) =
            if skipped.len() == 1 { ("a .json file is", "it") } else { ("some .json files are", "them") };
        return Err(InputError(format!(
            "--results {}: {what} not a bundle, and a site without {them} would leave {them} out unseen:\n{}\nfix: \
             mend each (`dllm-bench validate FILE` says how), move it out of {}, or pass --skip-invalid to publish the \
             rest",
            args.results.display(),
            files.join("\n"),
            args.results.display()
        ))
        .into());
    }
    for (path, e) in &skipped {
        tracing::warn!("--skip-invalid: leaving out {}: {e}", path.display());
    }
    if index.bundles.is_empty() {
        return Err(InputError(format!(
            "--results {}: no bundle in it (no .json file that reads as one); fix: pass --results the folder \
             `dllm-bench run` wrote its bundles to (default results)",
            args.results.display()
        ))
        .into());
    }
    // Built beside the output folder, then swapped in: a failure leaves the earlier site as it was.
    let out = check_out(args)?;
    let parent = out.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    output::create_folder(&parent)?;
    // A folder the user may not write (or a file system with no room for folders, /proc) is bad input, as for
    // every output (`output::write_atomic`).
    let in_parent = |e: std::io::Error| -> anyhow::Error {
        if output::unwritable_here(&e) || e.kind() == std::io::ErrorKind::NotFound {
            InputError(format!(
                "--out {}: cannot create a folder in {}: {e}; fix: pass --out a folder in a folder you can write \
                 (default site/dist)",
                args.out.display(),
                parent.display()
            ))
            .into()
        } else {
            anyhow::Error::new(e).context(format!("cannot create a folder in {}", parent.display()))
        }
    };
    let tmp = tempfile::Builder::new().prefix(".site-tmp-").tempdir_in(&parent).map_err(in_parent)?;
    copy_dir(&args.explorer, tmp.path())?;
    let bundles = tmp.path().join("bundles");
    for entry in &index.bundles {
        let from = args.results.join(&entry.file);
        let bytes = std::fs::read(&from).with_context(|| format!("cannot read {}", from.display()))?;
        output::write_atomic(&bundles.join(&entry.file), &bytes)?;
    }
    let json = serde_json::to_vec_pretty(&index)?;
    output::write_atomic(&bundles.join("index.json"), &json)?;
    std::fs::write(tmp.path().join(MARKER), "written by `dllm-bench site`: the next one replaces this folder\n")
        .with_context(|| format!("cannot write in {}", tmp.path().display()))?;
    let old = tempfile::Builder::new().prefix(".site-old-").tempdir_in(&parent).map_err(in_parent)?;
    // The earlier site moves into the folder that is deleted when `old` is dropped, and back if the new one
    // cannot take its place.
    let moved = out.exists();
    if moved {
        std::fs::rename(&out, old.path().join("site")).with_context(|| format!("cannot replace {}", out.display()))?;
    }
    let built = tmp.keep();
    if let Err(e) = std::fs::rename(&built, &out) {
        if moved {
            let _ = std::fs::rename(old.path().join("site"), &out);
        }
        let _ = std::fs::remove_dir_all(&built);
        return Err(e).with_context(|| format!("cannot create {}", out.display()));
    }
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
