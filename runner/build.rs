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

/// With the `cudnn` feature: `src/model/cudnn_attention.cpp` against cuDNN's frontend headers into a static library
/// linked into the runner (C++ and `dlopen` from the system; cuDNN itself is loaded at run time).
fn compile_cudnn() {
    let src = "src/model/cudnn_attention.cpp";
    println!("cargo:rerun-if-changed={src}");
    for var in ["CUDNN_FRONTEND_INCLUDE", "CUDNN_INCLUDE", "CUDA_HOME", "CXX"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let dir = |var: &str| {
        std::env::var(var).unwrap_or_else(|_| {
            panic!(
                "the cudnn feature needs ${var}: run scripts/install-cudnn-headers.sh and `. .tools/cudnn/env.sh` \
                 (and the CUDA toolchain's env.sh for CUDA_HOME)"
            )
        })
    };
    let (frontend, cudnn, cuda) = (dir("CUDNN_FRONTEND_INCLUDE"), dir("CUDNN_INCLUDE"), dir("CUDA_HOME"));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("cudnn_attention.o");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-fPIC", "-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING", "-c", src, "-o"])
        .arg(&obj)
        .arg(format!("-I{frontend}"))
        .arg(format!("-I{cudnn}"))
        .arg(format!("-I{cuda}/include"))
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{cxx} failed on {src} ({s}): see its messages above"),
        Err(e) => panic!("cannot run {cxx} ({e}): the cudnn feature needs a C++17 compiler"),
    }
    let lib = out.join("libdllm_cudnn.a");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar").arg("crs").arg(&lib).arg(&obj).status();
    if !matches!(status, Ok(s) if s.success()) {
        panic!("ar could not archive {}", obj.display());
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=dllm_cudnn");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=dl");
}

fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        compile_kernels();
    }
    if std::env::var_os("CARGO_FEATURE_CUDNN").is_some() {
        compile_cudnn();
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
