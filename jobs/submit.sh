#!/bin/bash
# Submits a grid as a SLURM job array of N shards plus a merge that runs once every shard has ended (afterany:
# the merge itself checks that each shard's bundle is there, see jobs/merge.sbatch).
#
#   jobs/submit.sh [--shards N] [--config FILE] [--results DIR] [--name NAME] [--tasks LIST]
#                  [--retry-failed] [--retry-oom] [-- extra `dllm-bench run` flags]
#
# Defaults: 4 shards, config/experiments.toml, results/. Shards run in RESULTS/runs/NAME-STAMP/shard-I; the
# merged bundle is RESULTS/NAME-STAMP.json. Extra sbatch options go through the environment (SBATCH_PARTITION,
# SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...), which sbatch reads for both jobs. Prints the array and merge job ids.
#
# Resubmitting: the same command with the same --name resumes the run (finished shards are kept and end at once,
# the others resume from their journals). --tasks LIST (shard indices: `2`, `1,3`, `0-2`) submits only those
# shards of that run, with a merge of all of them after; it needs the --name of a run submitted before and
# its shard count (--shards, the same as then: RUN_ROOT/shards records it). --retry-failed (--retry-oom) with the
# --name of a run submitted before measures again the cells its shards recorded as failed (out of memory), as
# `dllm-bench run --retry-failed` does, then merges.
# Builds the runner here first (jobs/env.sh), so that the array tasks do not race to build it.
set -euo pipefail
# --config and --results given relative are the caller's (the defaults, the repository's): made absolute before
# the jobs are submitted from the repository's root.
CALLER="$(pwd)"
from_caller() { case "$1" in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
cd "$(dirname "$0")/.."

SHARDS=4
CONFIG=config/experiments.toml
RESULTS=results
NAME=""
TASKS=""
RETRY=()
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) SHARDS="$2"; shift 2 ;;
        --config) CONFIG="$(from_caller "$2")"; shift 2 ;;
        --results) RESULTS="$(from_caller "$2")"; shift 2 ;;
        --name) NAME="$2"; shift 2 ;;
        --tasks) TASKS="$2"; shift 2 ;;
        --retry-failed|--retry-oom) RETRY+=("$1"); shift ;;
        --) shift; break ;;
        *) echo "submit.sh: unknown option $1 (see the header of jobs/submit.sh)" >&2; exit 2 ;;
    esac
done
case "$SHARDS" in ''|*[!0-9]*) echo "submit.sh: --shards must be a positive number" >&2; exit 2 ;; esac
SHARDS=$((10#$SHARDS))
[ "$SHARDS" -gt 0 ] || { echo "submit.sh: --shards must be a positive number" >&2; exit 2; }
if [ -n "$TASKS" ]; then
    [ -n "$NAME" ] || { echo "submit.sh: --tasks resubmits shards of a run submitted before: give its --name \
(the folder under RESULTS/runs/)" >&2; exit 2; }
    # Shard indices, as sbatch's --array takes them: numbers and ranges A-B, comma-separated, each below N.
    not_a_list() {
        echo "submit.sh: --tasks $TASKS: $1 (e.g. --tasks 2 or --tasks 1,3 or --tasks 0-2)" >&2
        exit 2
    }
    case "$TASKS" in ,*|*,|*,,*) not_a_list "an empty item" ;; esac
    IFS=, read -r -a items <<<"$TASKS"
    for item in "${items[@]}"; do
        case "$item" in
            ''|*[!0-9-]*|-*|*-|*-*-*) not_a_list "\"$item\" is not a shard index or a range A-B" ;;
        esac
        IFS=- read -r -a ends <<<"$item"
        if [ "${#ends[@]}" -eq 2 ] && [ "$((10#${ends[0]}))" -gt "$((10#${ends[1]}))" ]; then
            not_a_list "the range $item runs backwards (A-B with A <= B)"
        fi
        for i in "${ends[@]}"; do
            if [ "$((10#$i))" -ge "$SHARDS" ]; then
                echo "submit.sh: --tasks $TASKS: shard $i does not exist in a grid of $SHARDS shards (0 to \
$((SHARDS - 1))); fix: pass the run's --shards" >&2
                exit 2
            fi
        done
    done
fi
NAME="${NAME:-$(basename "$CONFIG" .toml)-$(date -u +%Y%m%dT%H%M%SZ)}"
RUN_ROOT="$RESULTS/runs/$NAME"
# What the run folder says, before the runner is built and the config checked.
if [ -n "$TASKS" ] && [ ! -d "$RUN_ROOT" ]; then
    echo "submit.sh: --tasks $TASKS: no run $RUN_ROOT to resubmit shards of; fix: the --name (and --results) of a \
run submitted before, or leave --tasks out to submit every shard" >&2
    exit 2
fi
if [ ${#RETRY[@]} -gt 0 ] && [ ! -d "$RUN_ROOT" ]; then
    echo "submit.sh: ${RETRY[*]}: no run $RUN_ROOT whose cells to measure again; fix: the --name (and --results) of \
a run submitted before" >&2
    exit 2
fi
# The shard count is part of the run: the same shard index of another count holds other cells.
if [ -f "$RUN_ROOT/shards" ]; then
    before=$(cat "$RUN_ROOT/shards")
    if [ "$before" != "$SHARDS" ]; then
        echo "submit.sh: $RUN_ROOT was submitted with --shards $before, not $SHARDS; fix: --shards $before to resume \
it, or another --name for a new run" >&2
        exit 2
    fi
fi

# shellcheck source=jobs/env.sh
source jobs/env.sh
# Fail here, not in N jobs, on a bad config, on more shards than the grid has cells (a task would measure nothing),
# and on what would stop every task before it measures (`plan --check`: checkpoints or prompts not in the cache, a
# binary built without CUDA for a CUDA grid, a parity search split into shards). Its table is not wanted here; its
# errors are on stderr.
# The extra flags that are `run`'s alone stay out of the plan; those the job scripts set themselves are refused.
PLAN_FLAGS=()
for flag in "$@"; do
    case "$flag" in
        --offline|-q|--quiet|--allow-other-build|--retry-failed|--retry-oom) ;;
        --run-dir|--run-dir=*|--resume|--resume=*|--output-dir|--output-dir=*|-o|--shard|--shard=*)
            echo "submit.sh: $flag after --: the job scripts choose each shard's run folder and shard themselves; fix: \
leave it out (--results and --name choose where the run goes)" >&2
            exit 2 ;;
        *) PLAN_FLAGS+=("$flag") ;;
    esac
done
"$DLLM_BENCH" plan --check --config "$CONFIG" --shards "$SHARDS" ${PLAN_FLAGS[@]+"${PLAN_FLAGS[@]}"} >/dev/null
mkdir -p "$RUN_ROOT"
echo "$SHARDS" >"$RUN_ROOT/shards"

# --shards: the array's task ids are the shard indices (any subset can be resubmitted: --tasks).
array=$(sbatch --parsable --array="${TASKS:-0-$((SHARDS - 1))}" jobs/grid_array.sbatch --shards "$SHARDS" \
    "$CONFIG" "$RUN_ROOT" "$@" ${RETRY[@]+"${RETRY[@]}"})
array="${array%%;*}"
# afterany, not afterok: a task stopped by its time limit ends TIMEOUT (which would never satisfy afterok) and then
# requeues itself to resume; the merge waits for every task of the array (jobs/merge.sbatch).
merge=$(sbatch --parsable --dependency=afterany:"$array" --kill-on-invalid-dep=yes \
    jobs/merge.sbatch "$RUN_ROOT" "$RESULTS/$NAME.json" "$array")
merge="${merge%%;*}"
if [ -n "$TASKS" ]; then
    echo "array job $array: shard(s) $TASKS of $SHARDS of $CONFIG in $RUN_ROOT" >&2
else
    echo "array job $array: $SHARDS shards of $CONFIG in $RUN_ROOT" >&2
fi
echo "merge job $merge: $RESULTS/$NAME.json once every shard succeeded" >&2
if [ -n "${SBATCH_OUTPUT:-}" ]; then
    echo "logs: where SBATCH_OUTPUT=$SBATCH_OUTPUT puts them (array job $array, tasks ${array}_I; merge job $merge)" >&2
else
    echo "logs: $(pwd)/dllm-bench-shard-${array}_*.out and $(pwd)/dllm-bench-merge-$merge.out" >&2
fi
echo "$array $merge"
