//! Records the git commit of the source tree for bundle provenance, and what was dirty; with the `cuda` feature,
//! compiles the runner's own CUDA kernels (`src/model/kernels.cu`) to PTX with nvcc.
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

/// `src/model/kernels.cu` to `OUT_DIR/kernels.ptx` for the GPU `CUDA_COMPUTE_CAP` names (as candle's kernels:
/// 90 for an H100 or H200), else the one `nvidia-smi` reports, else 80 (any GPU since the A100 runs it).
fn compile_kernels() {
    let src = "src/model/kernels.cu";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let cap = std::env::var("CUDA_COMPUTE_CAP")
        .ok()
        .or_else(|| {
            let out = Command::new("nvidia-smi").args(["--query-gpu=compute_cap", "--format=csv,noheader"]).output();
            let text = String::from_utf8_lossy(&out.ok()?.stdout).lines().next()?.trim().replace('.', "");
            (!text.is_empty()).then_some(text)
        })
        .unwrap_or_else(|| {
            println!("cargo:warning=no CUDA_COMPUTE_CAP and no nvidia-smi: the runner's kernels compile for sm_80");
            "80".into()
        });
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernels.ptx");
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17", "--expt-relaxed-constexpr", &format!("-arch=sm_{cap}"), src, "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{nvcc} failed on {src} ({s}): see its messages above"),
        Err(e) => panic!("cannot run {nvcc} ({e}): the cuda feature needs the CUDA toolkit's nvcc on PATH"),
    }
}

fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        compile_kernels();
    }
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
