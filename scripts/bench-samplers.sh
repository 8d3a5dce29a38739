#!/usr/bin/env bash
# The LLaDA sampler series on the CPU (issue 16): runs runner/bench/samplers.toml (synthetic "small" weights:
# the timing is real, nothing else) and prints, per batch size, each series' forwards and median time per
# generated token against the reference sampler's at K = N_out (one token per step).
#
#   scripts/bench-samplers.sh [extra dllm-bench run flags, e.g. --device cuda --dtype bf16]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
BIN="${DLLM_BENCH_BIN:-}"
if [ -z "$BIN" ]; then
    cargo build --release -q -p runner
    BIN=target/release/dllm-bench
fi
OUT="$ROOT/target/bench-samplers"
rm -rf "$OUT"
mkdir -p "$OUT"
echo "bench: $BIN run -c runner/bench/samplers.toml -o $OUT -q $*" >&2
BUNDLE="$("$BIN" run -c runner/bench/samplers.toml -o "$OUT" -q "$@")"
python3 - "$BUNDLE" <<'PY'
import json, statistics, sys

b = json.load(open(sys.argv[1]))
dev = b["provenance"]["device"]
print(f"SYNTHETIC weights ({dev.get('kind')} {dev.get('name', '')}, {b['models'][1]['dtype']}); "
      f"N = {b['cells'][0]['key']['seq_len']}, N_out = {b['cells'][0]['key']['output_tokens']}")
rows = []
for c in b["cells"]:
    k = c["key"]
    if c["status"]["state"] != "ok" or k["sampler"] == "ar_greedy":
        continue
    reps = c["repetitions"]
    series = {(None, False): "reference", ("prefix", False): "prefix", ("dual", False): "dual",
              (None, True): "threshold", ("prefix", True): "prefix+threshold",
              ("dual", True): "dual+threshold"}[(k.get("cache"), "threshold" in k)]
    knob = f"K={k['steps']}" if "steps" in k else f"t={k['threshold']}"
    ms_per_token = statistics.median(r["e2e_ms"] / r["output_tokens"] for r in reps)
    forwards = statistics.median(r["forward_passes"] for r in reps)
    rows.append((k["batch_size"], series, knob, forwards, ms_per_token, "steps" in k and k["steps"] == k["output_tokens"]))
ar = {c["key"]["batch_size"]: statistics.median(r["e2e_ms"] / r["output_tokens"] for r in c["repetitions"])
      for c in b["cells"] if c["key"]["sampler"] == "ar_greedy" and c["status"]["state"] == "ok"}
for batch in sorted({r[0] for r in rows}):
    base = next(r[4] for r in rows if r[0] == batch and r[1] == "reference" and r[5])
    print(f"\nB = {batch}: reference at K = N_out {base:.3f} ms per generated token; AR greedy {ar.get(batch, float('nan')):.3f}")
    print(f"{'series':<18} {'K/threshold':>11} {'forwards':>9} {'ms/token':>10} {'vs reference':>13}")
    for r in (r for r in rows if r[0] == batch):
        print(f"{r[1]:<18} {r[2]:>11} {r[3]:>9g} {r[4]:>10.3f} {base / r[4]:>12.2f}x")
PY
