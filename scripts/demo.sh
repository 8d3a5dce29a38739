#!/usr/bin/env bash
# The main job on its embedded default, then the explorer on the result:
#   1. installs the explorer's build tools if missing (wasm target, trunk, wasm-bindgen-cli, wasm-opt);
#   2. builds the runner (release) and the explorer (trunk, release);
#   3. runs `dllm-bench run` with no config: config/demo.toml, tiny SYNTHETIC models of both architectures,
#      the embedded prompts, the CPU. Timing is real; quality is meaningless (random weights);
#   4. serves the explorer on the results at http://127.0.0.1:8080/ (ADDR=host:port to change; Ctrl-C stops).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export PATH="$PWD/.tools/node/node_modules/.bin:$HOME/.cargo/bin:$PATH"
export TRUNK_SKIP_VERSION_CHECK=true

step() { printf '\n==> %s\n' "$*"; }

step "build tools (skips what is present; the first time takes about 8 minutes)"
SKIP_BROWSER=1 SKIP_SLURM=1 SKIP_HF=1 scripts/install-deps.sh
step "build the runner (release)"
cargo build --release --locked -p runner
step "build the explorer (trunk, release)"
(cd explorer && trunk build index.html --offline=true --release)
step "run the demo grid (synthetic weights, CPU)"
start=$(date +%s)
target/release/dllm-bench run --output-dir results
echo "demo run took $(($(date +%s) - start)) s"
step "serve the explorer"
exec target/release/dllm-bench serve --results results --explorer explorer/dist --addr "${ADDR:-127.0.0.1:8080}"
