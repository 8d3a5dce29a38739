//! Records the git commit of the source tree for bundle provenance, and what was dirty.
//!
//! The compiled sources are the workspace's crates and configs (`SOURCES`): a change there makes cargo run this
//! script again, so the commit, `-dirty` and the list of dirty paths are those of the tree the binary was built
//! from. Changes elsewhere (docs, tests, scripts) are not part of the binary and are not listed.

use std::process::Command;

/// The paths whose contents are compiled into the binary (relative to the repository's root).
const SOURCES: [&str; 13] = [
    "Cargo.toml",
    "Cargo.lock",
    "runner/Cargo.toml",
    "runner/build.rs",
    "runner/src",
    "runner/assets",
    "schema/Cargo.toml",
    "schema/src",
    "metrics/Cargo.toml",
    "metrics/src",
    "charts/Cargo.toml",
    "charts/src",
    "config",
];

fn main() {
    let git_in = |dir: Option<&str>, args: &[&str]| {
        let mut c = Command::new("git");
        if let Some(d) = dir {
            c.arg("-C").arg(d);
        }
        c.args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_string())
    };
    let Some(top) = git_in(None, &["rev-parse", "--show-toplevel"]) else { return };
    let git = |args: &[&str]| git_in(Some(top.as_str()), args);
    if let Some(commit) = git(&["rev-parse", "HEAD"]) {
        // Tracked compiled sources that differ from HEAD (staged or not); untracked files are not listed.
        let mut args = vec![
            "--no-optional-locks",
            "-c",
            "core.quotePath=false",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
        ];
        args.extend(SOURCES);
        let dirty: Vec<String> = git(&args)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.get(3..))
            .map(|p| p.rsplit(" -> ").next().unwrap_or(p).to_string())
            .collect();
        let suffix = if dirty.is_empty() { "" } else { "-dirty" };
        println!("cargo:rustc-env=DLLM_BENCH_GIT_COMMIT={commit}{suffix}");
        // One line: the paths separated by newlines would end the directive.
        println!("cargo:rustc-env=DLLM_BENCH_GIT_DIRTY={}", dirty.join("\t"));
    }
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
    }
    for s in SOURCES {
        println!("cargo:rerun-if-changed={top}/{s}");
    }
}
