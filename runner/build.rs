//! Records the git commit of the source tree for bundle provenance.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    if let Some(commit) = git(&["rev-parse", "HEAD"]) {
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        let suffix = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=DLLM_BENCH_GIT_COMMIT={commit}{suffix}");
    }
    if let Some(top) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={top}/HEAD");
        println!("cargo:rerun-if-changed={top}/index");
    }
}
