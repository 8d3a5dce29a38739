#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine with rustup: installs what it needs (idempotently), then
# checks formatting, lints (native, CUDA and wasm), that the CUDA build compiles (no GPU needed) and its own
# kernels compute what naive references do (run on the host), docs, all
# native tests (the job scripts of jobs/ included, on a real one-node SLURM that the tests start on 127.0.0.1;
# jobs/hf_reference.py against the runner, with CPU torch and transformers from a venv under .tools/),
# and the explorer in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# No incremental caches: a run builds each crate once, and they were 1.4 GB of the 3.4 GB debug target. Set
# CARGO_INCREMENTAL=1 when iterating on the code with this script.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Disk: a run from scratch left 7.6 GB here (the torch venv 4.3 GB, target/ 2.9 GB, the CUDA compiler and npm's
# packages 0.4 GB) and peaked at 7.8 GB, besides the cargo registry; CI machines have had as little as 10 GB free.
# Every step prints what is left. (The CUDA check shares target/ with the CPU build: it adds only its own crates.)
free_gb() { df -Pk . | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
# Each step's wall time, printed as it ends and again as a table at the end: CI has a time limit, and this says
# where a slow run spent it.
STEP_NAME=""
STEP_START=$SECONDS
STEP_TIMES=""
end_step() {
    [ -n "$STEP_NAME" ] || return 0
    local took=$((SECONDS - STEP_START))
    printf '    (%d s: %s)\n' "$took" "$STEP_NAME"
    STEP_TIMES+="$(printf '%6d s  %s' "$took" "$STEP_NAME")"$'\n'
}
PASSED=""
trap '[ -n "$PASSED" ] || { end_step; printf "\n==> FAILED after %d s; the steps so far:\n%s" "$SECONDS" "$STEP_TIMES"; }' EXIT
step() {
    end_step
    STEP_NAME="$*"
    STEP_START=$SECONDS
    printf '\n==> %s  [%s GB free, %d s in]\n' "$*" "$(free_gb)" "$SECONDS"
}

step "toolchain components"
rustup component add rustfmt clippy >/dev/null
step "install test dependencies (skips what is present)"
scripts/install-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check
step "clippy (native, all targets)"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "CUDA build check: CUDA 13.0 compiler from PyPI wheels, clippy --features cuda (no GPU needed)"
# The native build's target dir: cargo keeps an artifact per feature set, so only the crates whose features
# differ with `cuda` (candle's, cudarc, the runner: 16 crates, where a target dir of its own checked 326) are
# checked again, and nothing of the CPU build is
# invalidated; candle's CUDA kernels (nvcc, most of this step's time) compile once. clippy checks everything
# `cargo check` would. CUDA_COMPUTE_CAP (90, Hopper) comes from env.sh: no nvidia-smi here.
scripts/install-cuda-toolchain.sh
(
    . .tools/cuda/env.sh
    cargo clippy -p runner --features cuda --all-targets --locked -- -D warnings
    # The runner's own CUDA kernels, run on the host against naive references (no GPU needed).
    scripts/check-cuda-kernels.sh
)
step "clippy (explorer and its charts, wasm32)"
cargo clippy -p explorer -p dllm-bench-charts --target wasm32-unknown-unknown --locked -- -D warnings
step "docs"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
step "tests: build (schema, runner incl. the SLURM job tests on a private cluster and hf_reference.py vs the runner, explorer charts)"
# The SLURM job tests (runner/tests/slurm.rs) skip loudly without SLURM, and the tests of jobs/hf_reference.py
# (runner/tests/hf_reference.rs) without the torch venv of install-deps.sh; here both must run.
cargo test --workspace --locked --no-run
step "tests: run"
DLLM_BENCH_REQUIRE_SLURM=1 DLLM_BENCH_REQUIRE_HF=1 cargo test --workspace --locked
step "explorer in headless Chromium (static server, site under a sub-path)"
scripts/e2e-browser.sh
# The other servers at one pixel ratio: the ratio is the browser's drawing, which the first run checks at both.
step "explorer in headless Chromium (dllm-bench serve, as the demo serves it)"
E2E_SKIP_BUILD=1 E2E_SERVER=dllm-bench E2E_DPRS=1 scripts/e2e-browser.sh
step "explorer in headless Chromium (trunk serve, its proxy forwarding bundles/ to dllm-bench serve)"
E2E_SKIP_BUILD=1 E2E_SERVER=trunk E2E_DPRS=1 scripts/e2e-browser.sh
end_step
PASSED=1
printf '\n==> all checks passed in %d s  [%s GB free]\n%s' "$SECONDS" "$(free_gb)" "$STEP_TIMES"
