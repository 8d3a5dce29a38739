#!/usr/bin/env bash
# End-to-end test of the explorer in headless Chromium (Debian's, driven by playwright-core).
#
#   scripts/install-deps.sh && scripts/e2e-browser.sh
#
# 1. builds the explorer with trunk (release, offline, wasm-opt from npm's binaryen);
# 2. puts the site together: dist + bundles/ (the test bundle, broken bundles) + bundles/index.json,
#    under a sub-path, to prove the site only uses relative URLs;
# 3. serves it on 127.0.0.1 (free port) and runs explorer/e2e/explorer.spec.mjs with plain node;
# 4. stops the server by its PID. Exits non-zero on any failure.
#
# Environment:
#   E2E_BUNDLES     space-separated bundle files to test with, each listed in the index and checked
#                   (default: schema/tests/fixtures/v1.0/demo.json if present (CPU), and the hand-written
#                   fixtures explorer/e2e/fixtures/{demo,study-h200,study-a100}.json: CUDA provenance, an OOM
#                   cell, made-up memory, step times and quality; and schema/tests/fixtures/v1.2/demo-quality.json,
#                   a real run with the roofline counts; schema/tests/fixtures/v1.5/demo-series.json, sampler series; and
#                   schema/tests/fixtures/v1.4/demo-peaks.json, whose run
#                   measured its device's ceilings). The study fixtures and a 1.2 bundle must be among them.
#   E2E_SCREENSHOT  where to save the screenshot (default: target/e2e/screenshot.png)
#   E2E_SKIP_BUILD  set to 1 to reuse explorer/dist
#   E2E_DPRS        the device pixel ratios to run the spec at (default: "1 2")
#   E2E_SERVER      `python` (default: python3 -m http.server on the assembled site, under a sub-path),
#                   `dllm-bench` (`target/debug/dllm-bench serve`, which generates bundles/index.json itself;
#                   build it first: cargo build -p runner), or `trunk` (`trunk serve --release` in explorer/,
#                   as for local analysis, its proxy forwarding bundles/ to `dllm-bench serve` on
#                   127.0.0.1:8000, the backend Trunk.toml names; that port must be free)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
NODE_MODULES="$ROOT/.tools/node/node_modules"
export PATH="$NODE_MODULES/.bin:$HOME/.cargo/bin:$PATH"
export TRUNK_SKIP_VERSION_CHECK=true
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

OUT="$ROOT/target/e2e"
SCREENSHOT="${E2E_SCREENSHOT:-$OUT/screenshot.png}"
if [ -z "${E2E_BUNDLES:-}" ]; then
    F="$ROOT/explorer/e2e/fixtures"
    E2E_BUNDLES="$F/demo.json $F/study-h200.json $F/study-a100.json"
    LEAD_FIXTURE="$ROOT/schema/tests/fixtures/v1.0/demo.json"
    [ -f "$LEAD_FIXTURE" ] && E2E_BUNDLES="$LEAD_FIXTURE $E2E_BUNDLES"
    # A real 1.2 demo run: its repetitions record weights read and FLOPs (the roofline view).
    E2E_BUNDLES="$E2E_BUNDLES $ROOT/schema/tests/fixtures/v1.2/demo-quality.json"
    # A real 1.4 demo run: its execution records the device's measured copy bandwidth and matmul rate.
    E2E_BUNDLES="$E2E_BUNDLES $ROOT/schema/tests/fixtures/v1.4/demo-peaks.json"
    # A real 1.5 demo run: the reference sampler and a prefix+threshold series.
    E2E_BUNDLES="$E2E_BUNDLES $ROOT/schema/tests/fixtures/v1.5/demo-series.json"
fi
read -r -a BUNDLES <<<"$E2E_BUNDLES"
for b in "${BUNDLES[@]}"; do [ -f "$b" ] || { echo "e2e: no bundle at $b" >&2; exit 1; }; done
[ -d "$NODE_MODULES/playwright-core" ] || { echo "e2e: run scripts/install-deps.sh first" >&2; exit 1; }
[ -x /usr/bin/chromium ] || { echo "e2e: /usr/bin/chromium missing: run scripts/install-deps.sh" >&2; exit 1; }

# --- 1. build ------------------------------------------------------------------------------------
if [ "${E2E_SKIP_BUILD:-0}" != 1 ]; then
    echo "e2e: building the explorer (trunk, release)"
    start=$(date +%s)
    # trunk 0.21: --offline takes a value, and the HTML file goes before --release (see shared/WEB.md).
    (cd explorer && trunk build index.html --offline=true --release)
    echo "e2e: built in $(($(date +%s) - start)) s"
fi
WASM="$(ls explorer/dist/*.wasm)"
echo "e2e: wasm $(stat -c %s "$WASM") bytes, $(gzip -9c "$WASM" | wc -c) gzipped"

# --- 2. site -------------------------------------------------------------------------------------
SITE_ROOT="$OUT/site"
SUB="sub/explorer"                       # served under a sub-path on purpose
SITE="$SITE_ROOT/$SUB"
RESULTS="$OUT/results"                   # what `dllm-bench serve --results` would get
rm -rf "$SITE_ROOT" "$RESULTS"
mkdir -p "$SITE" "$RESULTS" "$(dirname "$SCREENSHOT")"
cp -r explorer/dist/. "$SITE/"
# The test bundles as e2e-1.json, e2e-2.json, ...; the index lists them, first first.
python3 - "$RESULTS" "${BUNDLES[@]}" >"$OUT/bundles.json" <<'PY'
import json, shutil, sys
out, listed = sys.argv[1], []
for i, path in enumerate(sys.argv[2:], 1):
    shutil.copy(path, f"{out}/e2e-{i}.json")
    listed.append({"file": f"e2e-{i}.json", "path": path})
print(json.dumps(listed))
PY
# Malformed bundles the error paths are tested with (opened through ?bundle=, not listed in the index),
# and the message each must give (a regular expression), in $OUT/broken.json.
python3 - "$ROOT/explorer/e2e/fixtures/study-h200.json" "$RESULTS" >"$OUT/broken.json" <<'PY'
import copy, json, sys
good, out = json.load(open(sys.argv[1])), sys.argv[2]
cases = {}
def write(name, text, expect):
    if text is not None:
        open(f"{out}/{name}", "w").write(text)
    cases[name] = expect
def variant(name, change, expect):
    b = copy.deepcopy(good)
    change(b)
    write(name, json.dumps(b), expect)
write("broken-not-json.json", '{"schema_version": "1.0", "provenance": ', r"not a valid JSON file")
write("broken-empty.json", "", r"not a valid JSON file")
write("broken-array.json", "[1, 2]", r"not a dllm-bench bundle: the top level is not a JSON object")
variant("broken-future-version.json", lambda b: b.update(schema_version="9.0"), r"schema version 9\.0.*upgrade")
variant("broken-version-number.json", lambda b: b.update(schema_version=1.0), r"`schema_version` must be a string")
variant("broken-version-text.json", lambda b: b.update(schema_version="one"), r"is not MAJOR\.MINOR")
variant("broken-no-version.json", lambda b: b.pop("schema_version"), r"`schema_version` is missing")
variant("broken-missing-field.json", lambda b: b["cells"][0]["key"].pop("batch_size"), r"field `cells\[0\]\.key.*batch_size")
variant("broken-wrong-type.json", lambda b: b["cells"][0]["key"].update(batch_size="four"), r"cells\[0\]\.key\.batch_size")
variant("broken-unknown-model.json", lambda b: b["cells"][0]["key"].update(model="nobody/none"), r"not in `models`")
variant("broken-duplicate-cell.json", lambda b: b["cells"].__setitem__(1, b["cells"][0]), r"repeats the key")
variant("broken-negative-time.json", lambda b: b["cells"][0]["repetitions"][0].update(e2e_ms=-5), r"times must be finite and >= 0")
variant("broken-ok-without-reps.json", lambda b: b["cells"][0].update(repetitions=[]), r"is `ok` but has no repetitions")
variant("broken-bad-quality.json", lambda b: b["cells"][0]["quality"][0].update(value="high"), r"quality")
write("does-not-exist.json", None, r"could not fetch .*does-not-exist\.json.*404")
write("../escape.json", None, r"is not a plain bundle file name")
print(json.dumps(cases))
PY
# A bundle of a run stopped while its evaluators scored (opened through ?bundle=): every cell there, the
# evaluators' perplexity of some continuations not yet; the explorer must call it PARTIAL, as every reader does.
python3 - "$ROOT/schema/tests/fixtures/v1.2/demo-quality.json" "$RESULTS/stopped-scoring.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
cut = 0
for c in b["cells"]:
    if c["key"]["sampler"] != "ar_greedy" and c.get("generations"):
        c["quality"] = [q for q in c["quality"] if q.get("evaluator") is None]
        cut += 1
assert cut > 0, "the fixture has diffusion cells with continuations"
b.pop("parity", None)
json.dump(b, open(sys.argv[2], "w"))
PY
mkdir -p "$SITE/bundles"
cp "$RESULTS"/*.json "$SITE/bundles/"
# What `dllm-bench serve` generates; written here while the python server stands in for it.
python3 - "$OUT/bundles.json" >"$SITE/bundles/index.json" <<'PY'
import json, sys
entries = []
for b in json.load(open(sys.argv[1])):
    p = json.load(open(b["path"]))["provenance"]
    title = f'{p["config"]["run"]["name"]} on {p["device"].get("name") or p["device"]["kind"]}'
    entries.append({"file": b["file"], "title": title, "created_at": p["created_at"],
                    "synthetic_weights": p["synthetic_weights"]})
print(json.dumps({"bundles": entries}))
PY

# --- 3. serve and test -----------------------------------------------------------------------------
PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
case "${E2E_SERVER:-python}" in
    python)
        python3 -m http.server --bind 127.0.0.1 --directory "$SITE_ROOT" "$PORT" >"$OUT/server.log" 2>&1 &
        SERVER_PID=$! ;;
    dllm-bench)
        SUB=""  # serves the explorer at /
        "$ROOT/target/debug/dllm-bench" serve --results "$RESULTS" --explorer "$ROOT/explorer/dist" \
            --addr "127.0.0.1:$PORT" >"$OUT/server.log" 2>&1 &
        SERVER_PID=$! ;;
    trunk)
        SUB=""
        # The backend Trunk.toml's [[proxy]] forwards bundles/ to; trunk serves the explorer itself.
        "$ROOT/target/debug/dllm-bench" serve --results "$RESULTS" --explorer "$ROOT/explorer/dist" \
            --addr 127.0.0.1:8000 >"$OUT/backend.log" 2>&1 &
        BACKEND_PID=$!
        # trunk 0.21's optional-value flags take their values after `=`. It builds again before serving (cargo
        # finds the release build of step 1 up to date; wasm-bindgen and wasm-opt run again: about 20 s).
        (cd explorer && exec trunk serve index.html --offline=true --release=true --no-autoreload=true \
            --address 127.0.0.1 --port "$PORT") >"$OUT/server.log" 2>&1 &
        SERVER_PID=$! ;;
    *) echo "e2e: E2E_SERVER must be python, dllm-bench or trunk" >&2; exit 2 ;;
esac
BACKEND_PID="${BACKEND_PID:-}"
trap 'kill $SERVER_PID $BACKEND_PID 2>/dev/null || true; wait $SERVER_PID $BACKEND_PID 2>/dev/null || true' EXIT
BASE_URL="http://127.0.0.1:$PORT/${SUB:+$SUB/}"
for _ in $(seq 1 300); do
    curl -fsS -o /dev/null "$BASE_URL" 2>/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "e2e: server died:" >&2; cat "$OUT/server.log" >&2; exit 1; }
    if [ -n "$BACKEND_PID" ] && ! kill -0 "$BACKEND_PID" 2>/dev/null; then
        echo "e2e: dllm-bench serve (trunk's proxy backend) died:" >&2; cat "$OUT/backend.log" >&2; exit 1
    fi
    sleep 0.2
done
curl -fsS -o /dev/null "$BASE_URL" 2>/dev/null || {
    echo "e2e: the server did not answer at $BASE_URL within 60 s:" >&2; cat "$OUT/server.log" >&2; exit 1
}
if [ -n "$BACKEND_PID" ]; then
    # The proxy: bundles/index.json through trunk must be the one dllm-bench serve generates.
    curl -fsS "${BASE_URL}bundles/index.json" | grep -q '"e2e-1.json"' \
        || { echo "e2e: trunk's proxy does not forward bundles/ to dllm-bench serve" >&2
             cat "$OUT/server.log" "$OUT/backend.log" >&2; exit 1; }
fi
echo "e2e: serving $BASE_URL (pid $SERVER_PID)"

# At devicePixelRatio 1 and 2: the canvas draws at device resolution, hit-testing scales back.
for dpr in ${E2E_DPRS:-1 2}; do
    E2E_BASE_URL="$BASE_URL" E2E_BUNDLES_JSON="$OUT/bundles.json" E2E_BROKEN_JSON="$OUT/broken.json" \
        E2E_DPR="$dpr" E2E_SCREENSHOT="$SCREENSHOT" E2E_NODE_MODULES="$NODE_MODULES" \
        node explorer/e2e/explorer.spec.mjs
done
