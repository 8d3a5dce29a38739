#!/usr/bin/env bash
# One call on a lent GPU machine (no Rust, no network, no weights; PyTorch and transformers in python3): the
# stages of the first GPU measurements, each under its own time cap, all under one deadline, so that a stage that
# runs long or fails still leaves what the others measured. Everything lands in OUT_DIR (default $OUT):
# session.tar.gz (every bundle, log and JSON), summary.txt, and the main bundles beside them.
#
#   scripts/gpu-session.sh BIN [DEADLINE_S] [STAGE...]
#
# BIN is a dllm-bench built with `--features cuda` (CUDA_COMPUTE_CAP=90 for an H100/H200), or it gzipped. DEADLINE_S
# (default 560) bounds the whole script. Stages (default: all, in this order):
#   env      nvidia-smi, the binary's libraries, PyTorch's view of the device
#   check    config/gpu_check.toml (tiny synthetic models, f32) on the CPU and on CUDA: the same tokens
#            (`dllm-bench compare --tokens`), bf16 against f32, and `bench-kernels --drift` (bf16 logits against f32)
#   kernels  `bench-kernels --shape 8b` (copy bandwidth, matmul rate, AR decode token, LLaDA step) and
#            runner/bench/torch_reference.py (eager and SDPA) on the same shapes, both with --profile (each part of
#            the forward), side by side (scripts/compare_profiles.py)
#   fast     the switches that are off until a GPU confirms them (run.cuda_graphs, run.cuda_fused_ops,
#            run.attention = "cudnn"): the tiny check grid with each on (f32 tokens against the plain CUDA run's,
#            `compare --tokens`; cuDNN in bf16 against the plain bf16 run), then `bench-kernels --shape 8b` plain,
#            with graphs and fused ops, and with cuDNN attention (decode token B=1, LLaDA step B=8 N=1024) and the
#            ratios. BIN must be built with `--features cudnn` for the cuDNN runs.
#   grid     config/gpu_primary.toml (the primary grid on synthetic 8B weights) with W=$GRID_W R=$GRID_R
#            (default 1/1), CUDA-event e2e times beside the host clock (`runner::timing=debug`)
#   hf       jobs/hf_reference.py (HF transformers) on the grid with each attention of $HF_ATTN (default
#            "sdpa eager": SDPA, the fairer baseline, first), every K of the grid unless HF_STEPS names some (e.g.
#            32), W=$HF_W R=$HF_R (default 1/1), the time left (less what a later oom or energy stage needs)
#            shared between the attentions, at most $HF_CAP s each where set; a run its cap stops writes its
#            finished cells (a partial bundle, exit 75); then `dllm-bench compare` of the runner's grid with each
#   oom      config/gpu_oom.toml: a LLaDA cell that exhausts the card, then cells that must still run (measured
#            in issue 12: not in the default stages, name it to run it)
#   energy   the NVML check (runner/PERF.md, "The NVML check a GPU session must run"): the counter and the GPU it
#            names (`nvidia-smi -L`), idle power against 5 s of nvidia-smi samples, and config/gpu_energy.toml (one
#            Llama decode cell of about 10 s) with power sampled every 50 ms: its energy_j against the samples' mean
#            power x energy_window_ms (target: within 5%). Not in the default stages (about 60 s)
#   synth    write the synthetic 8B checkpoints (into HF_CACHE_DIR, default /tmp/dllm-hf) in the background and
#            wait for them before the script ends: grid, hf and oom start it too (and wait before they run)
#
# One call of the default stages does not fit 555 s (the stages need about 630 s). Two calls on a warm machine
# (the next within the machine's idle release, so the checkpoints in /tmp are still there), in issue 29's order:
#   OUT_DIR=$OUT scripts/gpu-session.sh .gpu/dllm-bench.gz 330 env check kernels fast synth
#   OUT_DIR=$OUT scripts/gpu-session.sh .gpu/dllm-bench.gz 540 grid hf      # GRID_R=3 for the issue's R; energy
# A cold second machine writes the checkpoints again first (about 130 s of the second call).
set -uo pipefail

BIN="${1:?usage: scripts/gpu-session.sh BIN [DEADLINE_S] [STAGE...]}"
DEADLINE="${2:-560}"
shift $(( $# < 2 ? $# : 2 ))
STAGES="${*:-env check kernels fast grid hf}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT_DIR="${OUT_DIR:-${OUT:?set OUT or OUT_DIR}}"
W="$OUT_DIR/work"
HF="${HF_CACHE_DIR:-/tmp/dllm-hf}"
mkdir -p "$W" "$HF"
START=$(date +%s)
SUMMARY="$OUT_DIR/summary.txt"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1

say() { printf '[%4ds] %s\n' "$(( $(date +%s) - START ))" "$*" | tee -a "$SUMMARY"; }
left() { echo $(( DEADLINE - ($(date +%s) - START) )); }

# Runs a command with at most CAP seconds (less where the deadline is nearer, keeping RESERVE seconds for what
# follows), its output into LOG. TERM first (the runner writes its partial bundle), KILL 20 s later. A LOG ending in
# .json is parsed later: its standard error goes beside it (NAME.err), since one warning line would make it unreadable.
capped() {
    local cap=$1 reserve=$2 log=$3
    shift 3
    local err=$log
    [[ "$log" == *.json ]] && err="${log%.json}.err"
    local t
    t=$(( $(left) - reserve ))
    (( t > cap )) && t=$cap
    if (( t < 10 )); then
        say "skipped (no time left): $*"
        return 124
    fi
    timeout --signal=TERM --kill-after=20 "$t" "$@" >>"$log" 2>>"$err"
    local rc=$?
    say "rc=$rc after at most ${t}s: $(basename "$1") ${*:2}"
    return $rc
}

collect() {
    say "collecting"
    tar czf "$OUT_DIR/session.tar.gz" -C "$OUT_DIR" work 2>/dev/null
    rm -rf "$W"
}
trap collect EXIT

# A gzipped binary (the carry limit) is unpacked first.
if [[ "$BIN" == *.gz ]]; then
    gzip -dc "$BIN" >/tmp/dllm-bench && chmod +x /tmp/dllm-bench && BIN=/tmp/dllm-bench || exit 1
fi

# The CUDA 13 libraries the binary links (cuBLAS, cuRAND, the runtime) from PyTorch's wheels.
CU13="$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))' 2>/dev/null)"
export LD_LIBRARY_PATH="${CU13:+$CU13:}${LD_LIBRARY_PATH:-}"
# cuDNN 9 (loaded at run time by run.attention = "cudnn"), from PyTorch's wheels too.
CUDNN_LIB="$(python3 -c 'import glob, nvidia, os
print(next((os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(os.path.join(d, "**", "libcudnn.so.9"), recursive=True)), ""))' 2>/dev/null)"
export LD_LIBRARY_PATH="${CUDNN_LIB:+$CUDNN_LIB:}$LD_LIBRARY_PATH"

has() { [[ " $STAGES " == *" $1 "* ]]; }

if has env; then
    say "stage env"
    {
        nvidia-smi
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
        uname -a
        nproc
        free -g
        df -h /tmp
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        ldd "$BIN"
        "$BIN" --version
        python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__, torch.cuda.get_device_name(0))'
    } >"$W/env.txt" 2>&1
    grep -E "not found|NVIDIA H|dllm-bench|^torch" "$W/env.txt" | tee -a "$SUMMARY"
fi

# The synthetic 8B checkpoints that grid, hf and oom read (about 16 GB each, CPU-bound) are written in the
# background on all but 4 cores while check and kernels use the GPU; run reuses a complete one.
SYNTH_PID=""
if has grid || has hf || has oom || has energy || has synth; then
    pin=()
    command -v taskset >/dev/null && (( $(nproc) > 8 )) && pin=(taskset -c "4-$(( $(nproc) - 1 ))")
    (
        s=$(date +%s)
        "${pin[@]}" "$BIN" synth --kind llama --preset real --repo-id dllm-bench/synthetic-llama-8b --seed 1 \
            --model-cache-dir "$HF" && \
        "${pin[@]}" "$BIN" synth --kind llada --preset real --repo-id dllm-bench/synthetic-llada-8b --seed 2 \
            --model-cache-dir "$HF"
        echo "synth rc=$? in $(( $(date +%s) - s )) s"
    ) >"$W/synth.log" 2>&1 &
    SYNTH_PID=$!
    say "writing the synthetic 8B checkpoints in the background (pid $SYNTH_PID, ${pin[*]:-all cores})"
fi
wait_synth() {
    [ -n "$SYNTH_PID" ] || return 0
    say "waiting for the synthetic checkpoints"
    wait "$SYNTH_PID"
    SYNTH_PID=""
    say "$(tail -1 "$W/synth.log")"
}

if has check; then
    say "stage check"
    for dev in cpu cuda; do
        capped 60 420 "$W/check-$dev.log" "$BIN" run --config config/gpu_check.toml --device "$dev" \
            --model-cache-dir "$HF" --run-dir "$W/check-$dev" -q
    done
    capped 40 400 "$W/check-cuda-bf16.log" "$BIN" run --config config/gpu_check.toml --device cuda --dtype bf16 \
        --model-cache-dir "$HF" --run-dir "$W/check-cuda-bf16" -q
    "$BIN" compare --tokens "$W/check-cpu/bundle.json" "$W/check-cuda/bundle.json" \
        >"$W/check-compare.txt" 2>&1
    say "cpu f32 against cuda f32 (rc=$?): $(tail -1 "$W/check-compare.txt")"
    "$BIN" compare --tokens --report-only "$W/check-cuda/bundle.json" \
        "$W/check-cuda-bf16/bundle.json" >"$W/check-compare-bf16.txt" 2>&1
    say "cuda f32 against cuda bf16: $(tail -1 "$W/check-compare-bf16.txt")"
    capped 30 380 "$W/drift-tiny.txt" "$BIN" bench-kernels --device cuda:0 --shape tiny --dtype bf16 --drift \
        --seq-len 256 --batch 4
    grep -E "against f32" "$W/drift-tiny.txt" | tee -a "$SUMMARY"
fi

if has kernels; then
    say "stage kernels"
    # Both arms part by part (issue 28), the runner beside PyTorch eager and SDPA on the same shapes.
    capped 90 330 "$W/profile-runner.json" "$BIN" bench-kernels --device cuda:0 --shape 8b --profile --json
    for attn in eager sdpa; do
        capped 60 300 "$W/torch-$attn.json" python3 runner/bench/torch_reference.py --device cuda --dtype bf16 \
            --dllm-bench "$BIN" --shape 8b --batch 8 --seq-len 1024 --attention "$attn" --profile --repetitions 3
    done
    python3 scripts/compare_profiles.py "$W/profile-runner.json" "$W/torch-eager.json" "$W/torch-sdpa.json" \
        >"$W/profiles.txt" 2>&1
    tee -a "$SUMMARY" <"$W/profiles.txt"
    capped 40 280 "$W/drift-8b.txt" "$BIN" bench-kernels --device cuda:0 --shape 8b --drift --batch 1 \
        --seq-len 512 --decode-tokens 8 --repetitions 2
    grep -E "against f32" "$W/drift-8b.txt" | tee -a "$SUMMARY"
fi

if has fast; then
    say "stage fast"
    # Correctness first: the tiny check grid (f32) with each switch, token for token against the plain CUDA run.
    for sw in cuda-graphs cuda-fused-ops; do
        capped 60 260 "$W/fast-$sw.log" "$BIN" run --config config/gpu_check.toml --device cuda "--$sw" \
            --model-cache-dir "$HF" --run-dir "$W/fast-$sw" -q
        if [ -f "$W/check-cuda/bundle.json" ] && [ -f "$W/fast-$sw/bundle.json" ]; then
            "$BIN" compare --tokens "$W/check-cuda/bundle.json" "$W/fast-$sw/bundle.json" \
                >"$W/fast-$sw-compare.txt" 2>&1
            say "--$sw against the plain cuda run, f32 (rc=$?): $(tail -1 "$W/fast-$sw-compare.txt")"
        fi
    done
    capped 60 240 "$W/fast-cudnn.log" "$BIN" run --config config/gpu_check.toml --device cuda --dtype bf16 \
        --attention cudnn --model-cache-dir "$HF" --run-dir "$W/fast-cudnn" -q
    if [ -f "$W/check-cuda-bf16/bundle.json" ] && [ -f "$W/fast-cudnn/bundle.json" ]; then
        "$BIN" compare --tokens --report-only "$W/check-cuda-bf16/bundle.json" "$W/fast-cudnn/bundle.json" \
            >"$W/fast-cudnn-compare.txt" 2>&1
        say "--attention cudnn against the plain cuda run, bf16: $(tail -1 "$W/fast-cudnn-compare.txt")"
    fi
    # Then speed at the 8B shapes: plain, both CUDA switches, cuDNN attention (one binary, the same shapes).
    for v in plain fast cudnn; do
        flags=()
        [ "$v" = fast ] && flags=(--cuda-graphs --cuda-fused-ops)
        [ "$v" = cudnn ] && flags=(--attention cudnn)
        capped 75 120 "$W/bench-$v.json" "$BIN" bench-kernels --device cuda:0 --shape 8b --json --repetitions 3 \
            "${flags[@]}"
    done
    python3 - "$W/bench-plain.json" "$W/bench-fast.json" "$W/bench-cudnn.json" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, sys
runs = {}
for path in sys.argv[1:]:
    try:
        runs[path] = json.load(open(path))
    except Exception as e:  # a run that failed or timed out leaves no JSON
        print(f"{path}: no result ({e})")
plain = runs.get(sys.argv[1])
for path, r in runs.items():
    for part in ("decode", "llada_step"):
        ms = r[part]["ms"]
        ratio = f", {plain[part]['ms'] / ms:.2f}x plain's speed" if plain else ""
        print(f"{r['framework']}: {part} {ms:.2f} ms (B={r[part]['batch']}, N={r[part]['seq_len']}){ratio}")
PY
fi

if has grid; then
    wait_synth
    say "stage grid (W=${GRID_W:-1} R=${GRID_R:-1})"
    capped 300 150 "$W/grid.log" "$BIN" --log "info,runner::timing=debug" run --config config/gpu_primary.toml \
        --warmup "${GRID_W:-1}" --repetitions "${GRID_R:-1}" --model-cache-dir "$HF" --run-dir "$W/grid"
    for f in bundle partial; do
        [ -f "$W/grid/$f.json" ] && cp "$W/grid/$f.json" "$OUT_DIR/gpu_primary-runner-$f.json"
    done
    grep -E "events_ms" "$W/grid.log" | tail -3 | tee -a "$SUMMARY"
fi

if has hf; then
    wait_synth
    attns=(${HF_ATTN:-sdpa eager})
    # What the stages after this one need (oom about 65 s, energy about 100 s), kept back from the shares.
    after=45
    has oom && after=$(( after + 65 ))
    has energy && after=$(( after + 100 ))
    steps=()
    [ -n "${HF_STEPS:-}" ] && steps=(--steps "$HF_STEPS")
    say "stage hf (${attns[*]}, K=${HF_STEPS:-every K of the grid}, W=${HF_W:-1} R=${HF_R:-1})"
    for i in "${!attns[@]}"; do
        attn=${attns[$i]}
        # An equal share of what is left (less the reserve, and the 20 s a stopped run may take to write its
        # cells) for this and each attention after it; at most HF_CAP seconds each where it is set.
        share=$(( ($(left) - after - 20 * (${#attns[@]} - i)) / (${#attns[@]} - i) ))
        [ -n "${HF_CAP:-}" ] && (( share > HF_CAP )) && share=$HF_CAP
        capped "$share" "$after" "$W/hf-$attn.log" python3 jobs/hf_reference.py --config config/gpu_primary.toml \
            --device cuda --attn "$attn" "${steps[@]}" --warmup "${HF_W:-1}" --repetitions "${HF_R:-1}" \
            --model-cache-dir "$HF" --dllm-bench "$BIN" --output "$W/hf-$attn.json"
        [ -f "$W/hf-$attn.json" ] || continue
        cp "$W/hf-$attn.json" "$OUT_DIR/gpu_primary-hf-$attn.json"
        grep -E "stopped by|cells \(" "$W/hf-$attn.log" | tee -a "$SUMMARY"
        if [ -f "$W/grid/bundle.json" ]; then
            "$BIN" compare --markdown "$W/grid/bundle.json" "$W/hf-$attn.json" >"$W/compare-$attn.txt" 2>&1
            tee -a "$SUMMARY" <"$W/compare-$attn.txt"
        fi
    done
fi

if has oom; then
    wait_synth
    say "stage oom"
    capped 60 5 "$W/oom.log" "$BIN" run --config config/gpu_oom.toml --model-cache-dir "$HF" --run-dir "$W/oom"
    for f in bundle partial; do
        [ -f "$W/oom/$f.json" ] && cp "$W/oom/$f.json" "$OUT_DIR/gpu_oom-$f.json"
    done
    python3 - "$W/oom" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, os, sys
d = sys.argv[1]
for f in ("bundle.json", "partial.json"):
    p = os.path.join(d, f)
    if os.path.exists(p):
        for c in json.load(open(p))["cells"]:
            k = c["key"]
            peaks = [r.get("peak_allocated_bytes") for r in c.get("repetitions", [])]
            print(k["model"].split("/")[-1], "B", k["batch_size"], "N", k["seq_len"], "K", k.get("steps"),
                  c["status"]["state"], (c["status"].get("message") or "")[:160], peaks)
        break
PY
fi
if has energy; then
    wait_synth
    say "stage energy"
    nvidia-smi -L >"$W/energy-gpus.txt" 2>&1
    field=power.draw.instant
    nvidia-smi --query-gpu=$field --format=csv,noheader >/dev/null 2>&1 || field=power.draw
    # Idle power: 5 s of samples on the idle GPU, just before.
    # One GPU's samples (-i 0, the run's cuda:0 on a one-GPU machine; a node of several would average them all).
    timeout 5 nvidia-smi -i 0 --query-gpu=$field --format=csv,noheader,nounits -lms 100 >"$W/energy-idle.csv" 2>&1
    nvidia-smi -i 0 --query-gpu=timestamp,$field --format=csv,noheader,nounits -lms 50 >"$W/energy-power.csv" 2>&1 &
    smi=$!
    capped 90 10 "$W/energy.log" "$BIN" run --config config/gpu_energy.toml --model-cache-dir "$HF" \
        --run-dir "$W/energy" -q
    kill "$smi" 2>/dev/null
    [ -f "$W/energy/bundle.json" ] && cp "$W/energy/bundle.json" "$OUT_DIR/gpu_energy-bundle.json"
    python3 - "$W" "$field" <<'PY' 2>&1 | tee -a "$SUMMARY"
import datetime, json, os, sys
w, field = sys.argv[1], sys.argv[2]
def num(x):
    try:
        return float(x)
    except ValueError:
        return None
try:
    path = os.path.join(w, "energy", "bundle.json")
    b = json.load(open(path))
except Exception as e:  # the run failed or timed out
    sys.exit(f"energy: no bundle ({e})")
m = b["provenance"]["executions"][0].get("energy") or {}
print("energy: source", m.get("source"), "| scope", m.get("scope"), "| unavailable", m.get("unavailable"))
print("energy: nvidia-smi -L:", open(os.path.join(w, "energy-gpus.txt")).read().strip().replace("\n", "; "))
idle = [v for v in map(num, open(os.path.join(w, "energy-idle.csv")).read().split()) if v is not None]
if m.get("idle_energy_j") is not None and m.get("idle_window_ms"):
    runner_w = m["idle_energy_j"] / (m["idle_window_ms"] / 1e3)
    smi_w = sum(idle) / len(idle) if idle else float("nan")
    print(f"energy: idle {runner_w:.1f} W (counter) against {smi_w:.1f} W ({field}, {len(idle)} samples)")
rep = b["cells"][0]["repetitions"][0]
if rep.get("energy_j") is None:
    sys.exit("energy: the repetition has no energy_j")
end = os.path.getmtime(path)
start = end - rep["energy_window_ms"] / 1e3
inside = []
for line in open(os.path.join(w, "energy-power.csv")):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 2 or num(parts[1]) is None:
        continue
    try:
        t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
    except ValueError:
        continue
    if start <= t <= end:
        inside.append(num(parts[1]))
if not inside:
    sys.exit("energy: no power sample inside the repetition's window")
mean = sum(inside) / len(inside)
est = mean * rep["energy_window_ms"] / 1e3
print(f"energy: cell {rep['energy_j']:.1f} J over {rep['energy_window_ms']:.0f} ms (e2e {rep['e2e_ms']:.0f} ms); "
      f"{field} mean {mean:.1f} W over {len(inside)} samples x the window = {est:.1f} J; ratio {rep['energy_j'] / est:.3f} "
      "(target: within 5%)")
PY
fi

# Checkpoints still being written (stage synth without grid, hf or oom): waited for within the deadline, so that
# the next call finds them whole.
if [ -n "$SYNTH_PID" ]; then
    say "waiting for the synthetic checkpoints (at most $(( $(left) - 15 )) s)"
    for _ in $(seq 1 $(( $(left) - 15 ))); do
        kill -0 "$SYNTH_PID" 2>/dev/null || break
        sleep 1
    done
    if kill -0 "$SYNTH_PID" 2>/dev/null; then
        say "the checkpoints are not finished: the next call writes them again"
    else
        wait_synth
    fi
fi
say "done"
