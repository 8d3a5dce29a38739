# shellcheck shell=bash
# Bootstrap for dllm-bench jobs; `source jobs/env.sh` from a job script (or a login shell).
#
# - loads the cluster's modules when `module` exists (DLLM_BENCH_MODULES, default "cuda/12.6"; "" for none);
# - finds the runner (DLLM_BENCH_BIN), or builds it with cargo when it is missing or older than its sources:
#   release profile, `--features cuda` when nvcc is on PATH (DLLM_BENCH_FEATURES overrides: "" for a CPU build);
# - sets the caches (HF_HOME, default ~/.cache/huggingface; HF_HUB_CACHE=$HF_HOME/hub) and, inside a SLURM
#   job, HF_HUB_OFFLINE=1: compute nodes have no internet, so `dllm-bench fetch --config F` runs on a login
#   node first and jobs only read the cache;
# - defines dllm_bench_resumable, which runs `dllm-bench run ...` so that a time limit or preemption resumes
#   instead of restarting (see jobs/README.md).
#
# Exports DLLM_BENCH (the binary) and DLLM_BENCH_ROOT (the repository).

DLLM_BENCH_ROOT="${DLLM_BENCH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export DLLM_BENCH_ROOT

if command -v module >/dev/null 2>&1 && [ -n "${DLLM_BENCH_MODULES-cuda/12.6}" ]; then
    # shellcheck disable=SC2086 # a list of modules
    module load ${DLLM_BENCH_MODULES-cuda/12.6} || echo "env.sh: warning: module load ${DLLM_BENCH_MODULES-cuda/12.6} failed" >&2
fi

# The command that resumes a cancelled run, set by the script that sources this (benchmark_gpu.sbatch), never
# inherited from the submitting shell.
DLLM_BENCH_RESUBMIT=""

export HF_HOME="${HF_HOME:-$HOME/.cache/huggingface}"
export HF_HUB_CACHE="${HF_HUB_CACHE:-$HF_HOME/hub}"
if [ -n "${SLURM_JOB_ID:-}" ]; then
    export HF_HUB_OFFLINE=1
fi

dllm_bench_build() {
    local features profile_dir
    if [ -n "${DLLM_BENCH_FEATURES+set}" ]; then
        features="$DLLM_BENCH_FEATURES"
    elif command -v nvcc >/dev/null 2>&1; then
        features=cuda
    else
        features=""
    fi
    profile_dir="$DLLM_BENCH_ROOT/target/release"
    DLLM_BENCH="$profile_dir/dllm-bench"
    local stale=""
    if [ ! -x "$DLLM_BENCH" ]; then
        stale="missing"
    elif [ -n "$(find "$DLLM_BENCH_ROOT/runner" "$DLLM_BENCH_ROOT/schema" "$DLLM_BENCH_ROOT/metrics" \
            "$DLLM_BENCH_ROOT/charts" "$DLLM_BENCH_ROOT/config" "$DLLM_BENCH_ROOT/Cargo.toml" \
            "$DLLM_BENCH_ROOT/Cargo.lock" \( -path '*/tests' -o -path '*/benches' \) -prune -o -newer "$DLLM_BENCH" \
            \( -name '*.rs' -o -name '*.toml' -o -name '*.cu' -o -name '*.cpp' -o -name '*.txt' -o -name 'Cargo.lock' \) \
            -print -quit 2>/dev/null)" ]; then
        # The binary's own sources (the crates it links, its configs and assets), not the tests' (which a build
        # does not relink: every job would run cargo again).
        stale="older than its sources"
    fi
    if [ -n "$stale" ]; then
        if [ -z "$features" ]; then
            echo "env.sh: no nvcc on PATH: building a CPU-only runner (set DLLM_BENCH_FEATURES=cuda to insist)" >&2
        fi
        echo "env.sh: $DLLM_BENCH is $stale: cargo build --release -p runner${features:+ --features $features}" >&2
        (cd "$DLLM_BENCH_ROOT" && cargo build --release --locked -p runner ${features:+--features "$features"}) || return 1
    fi
}

if [ -n "${DLLM_BENCH_BIN:-}" ]; then
    DLLM_BENCH="$DLLM_BENCH_BIN"
else
    dllm_bench_build || { echo "env.sh: cannot build the runner" >&2; return 1 2>/dev/null || exit 1; }
fi
export DLLM_BENCH
if [ ! -x "$DLLM_BENCH" ]; then
    echo "env.sh: $DLLM_BENCH is not an executable" >&2
    return 1 2>/dev/null || exit 1
fi

# dllm_bench_resumable RUN_DIR [run flags...]
#
# Runs `dllm-bench run --run-dir RUN_DIR ...` in the background and waits for it, so that the batch shell can
# handle signals meanwhile: SLURM's warning (USR1, from `--signal=B:USR1@N`) and SIGTERM (preemption,
# `scontrol requeue`) are forwarded to the runner, which abandons the current cell, syncs its journal, writes
# RUN_DIR/partial.json and exits 75. Then:
# - 75 under SLURM, after the time-limit warning (USR1) or at the time limit itself (TERM, the job's Reason
#   TimeLimit): `scontrol requeue $SLURM_JOB_ID` and exit 0 (exiting non-zero would make the job FAILED); the
#   requeued job runs the same command and resumes. When SLURM requeued the job itself (`scontrol requeue`, a
#   preemption that requeues: its Restarts is already past SLURM_RESTART_COUNT) nothing more is done. After a
#   user's `scancel` the job stays cancelled, and the log says how to resume it.
# - 1 with RUN_DIR/bundle.json written: some cells failed; they are recorded in the bundle, and the job
#   succeeds so that the merge still runs.
# - anything else: the job fails with that status.
dllm_bench_resumable() {
    local run_dir="$1"
    shift
    mkdir -p "$run_dir"
    echo "dllm-bench: $(date -u +%FT%TZ) host $(hostname) job ${SLURM_JOB_ID:-none} restart ${SLURM_RESTART_COUNT:-0}: run --run-dir $run_dir $*" >&2
    "$DLLM_BENCH" run --run-dir "$run_dir" "$@" &
    local child=$!
    DLLM_BENCH_WARNED=""
    trap 'DLLM_BENCH_WARNED=1; echo "dllm-bench: USR1 (time limit near): checkpointing" >&2; kill -USR1 '"$child"' 2>/dev/null' USR1
    # SLURM sends SIGTERM (scancel, requeue, preemption) to every process of the job, the runner included; a
    # second TERM forwarded from here would make it exit at once instead of writing its partial bundle.
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        trap 'echo "dllm-bench: TERM: the runner checkpoints" >&2' TERM
    else
        trap 'echo "dllm-bench: TERM: checkpointing" >&2; kill -TERM '"$child"' 2>/dev/null' TERM
    fi
    local rc=0
    # `wait` returns early (status > 128) when a trapped signal arrives: wait again until the runner exits.
    while :; do
        wait "$child"
        rc=$?
        kill -0 "$child" 2>/dev/null || break
    done
    trap - USR1 TERM
    case "$rc" in
        0) return 0 ;;
        75)
            if [ -n "${SLURM_JOB_ID:-}" ]; then
                # This job alone: an array task by ARRAYID_TASK (the id of an array's first task names the whole
                # array, to `scontrol show` and to `scontrol requeue` alike).
                local self="$SLURM_JOB_ID" job restarts reason
                if [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
                    self="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
                fi
                job=$(scontrol show job "$self" -o 2>/dev/null | head -n 1)
                restarts=$(grep -o 'Restarts=[0-9]*' <<<"$job" | cut -d= -f2)
                reason=$(grep -o 'Reason=[^ ]*' <<<"$job" | cut -d= -f2)
                if [ "${restarts:-0}" -gt "${SLURM_RESTART_COUNT:-0}" ]; then
                    echo "dllm-bench: interrupted; SLURM requeued job $self (the rerun resumes from $run_dir)" >&2
                    exit 0
                fi
                if [ -n "$DLLM_BENCH_WARNED" ] || [ "$reason" = TimeLimit ] || [ "$reason" = Preempted ]; then
                    echo "dllm-bench: interrupted; requeueing job $self (the rerun resumes from $run_dir)" >&2
                    scontrol requeue "$self"
                    exit 0
                fi
                if [ -n "${DLLM_BENCH_RESUBMIT:-}" ]; then
                    echo "dllm-bench: cancelled; job $self is not requeued. Its work is kept in $run_dir: \
resubmit the same command to resume it: $DLLM_BENCH_RESUBMIT" >&2
                else
                    echo "dllm-bench: cancelled; job $self is not requeued. Its work is kept in $run_dir: \
resubmit the same command to resume it (for a grid, jobs/submit.sh with the same --name and --shards; --tasks \
${SLURM_ARRAY_TASK_ID:-I} for this shard alone)" >&2
                fi
                exit 0
            fi
            return 75
            ;;
        1)
            if [ -f "$run_dir/bundle.json" ]; then
                echo "dllm-bench: some cells failed; they are recorded in $run_dir/bundle.json" >&2
                return 0
            fi
            return 1
            ;;
        *) return "$rc" ;;
    esac
}
