#!/usr/bin/env bash
# Runs the runner's CUDA kernels (runner/src/model/kernels.cu) on the host against naive references
# (runner/tests/cuda_kernels_on_host.cpp: each CUDA thread a std::thread, barriers for __syncthreads and the warp
# shuffles): their indexing, strides, tables and block reductions, on a machine without a GPU. Needs g++ (C++20)
# and CUDA's headers for the bf16/f16 types: CUDA_HOME, as `. .tools/cuda/env.sh` sets it
# (scripts/install-cuda-toolchain.sh). Exit status 1 when a kernel differs from its reference.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${CUDA_HOME:?set CUDA_HOME (. .tools/cuda/env.sh after scripts/install-cuda-toolchain.sh)}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
"${CXX:-g++}" -std=c++20 -O1 -pthread -I"$CUDA_HOME/include" -I"$ROOT/runner/src/model" \
    "$ROOT/runner/tests/cuda_kernels_on_host.cpp" -o "$OUT/cuda-kernels-on-host"
"$OUT/cuda-kernels-on-host"
