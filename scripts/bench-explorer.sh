#!/usr/bin/env bash
# Speed benchmark of the explorer: a SYNTHETIC bundle of 10,500 cells (explorer/bench/make-synthetic.py,
# generated numbers, labelled so in its provenance), served on 127.0.0.1, loaded in headless Chromium.
# Prints the time from page load to the first chart drawn, the time to redraw after a filter change
# (targets, issue 30: <= 150 ms and <= 50 ms) and the release wasm size (target <= 250 KB gzipped).
#
#   scripts/install-deps.sh && scripts/bench-explorer.sh
#
# Environment: BENCH_SKIP_BUILD=1 reuses explorer/dist; BENCH_RUNS (default 5) page loads.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
NODE_MODULES="$ROOT/.tools/node/node_modules"
export PATH="$NODE_MODULES/.bin:$HOME/.cargo/bin:$PATH" TRUNK_SKIP_VERSION_CHECK=true
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
[ -d "$NODE_MODULES/playwright-core" ] || { echo "bench: run scripts/install-deps.sh first" >&2; exit 1; }

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
    (cd explorer && trunk build index.html --offline=true --release) >/dev/null
fi
WASM="$(ls explorer/dist/*.wasm)"
echo "bench: release wasm $(stat -c %s "$WASM") bytes, $(gzip -9c "$WASM" | wc -c) bytes gzipped (target <= 250 KB)"

OUT="$ROOT/target/bench-explorer"
rm -rf "$OUT"
mkdir -p "$OUT/site/bundles"
cp -r explorer/dist/. "$OUT/site/"
python3 explorer/bench/make-synthetic.py explorer/e2e/fixtures/study-h200.json "$OUT/site/bundles/synthetic-10k.json"
echo "bench: bundle $(stat -c %s "$OUT/site/bundles/synthetic-10k.json") bytes of JSON"
echo '{"bundles": [{"file": "synthetic-10k.json", "title": "SYNTHETIC 10k-cell benchmark bundle", "created_at": "", "synthetic_weights": true}]}' \
    >"$OUT/site/bundles/index.json"

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
python3 -m http.server --bind 127.0.0.1 --directory "$OUT/site" "$PORT" >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -fsS -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null && break; sleep 0.2; done

BENCH_BASE_URL="http://127.0.0.1:$PORT/" BENCH_BUNDLE="synthetic-10k.json" BENCH_NODE_MODULES="$NODE_MODULES" \
    node explorer/bench/bench.mjs
