#!/bin/bash
# Submits a grid as a SLURM job array of N shards plus a merge that runs once every shard has ended (afterany:
# the merge itself checks that each shard's bundle is there, see jobs/merge.sbatch).
#
#   jobs/submit.sh [--shards N] [--config FILE] [--results DIR] [--name NAME] [-- extra `dllm-bench run` flags]
#
# Defaults: 4 shards, config/experiments.toml, results/. Shards run in RESULTS/runs/NAME-STAMP/shard-I; the
# merged bundle is RESULTS/NAME-STAMP.json. Extra sbatch options go through the environment (SBATCH_PARTITION,
# SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...), which sbatch reads for both jobs. Prints the array and merge job ids.
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
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) SHARDS="$2"; shift 2 ;;
        --config) CONFIG="$(from_caller "$2")"; shift 2 ;;
        --results) RESULTS="$(from_caller "$2")"; shift 2 ;;
        --name) NAME="$2"; shift 2 ;;
        --) shift; break ;;
        *) echo "submit.sh: unknown option $1 (see the header of jobs/submit.sh)" >&2; exit 2 ;;
    esac
done
case "$SHARDS" in ''|*[!0-9]*|0) echo "submit.sh: --shards must be a positive number" >&2; exit 2 ;; esac

# shellcheck source=jobs/env.sh
source jobs/env.sh
# Fail here, not in N jobs, on a bad config.
"$DLLM_BENCH" plan --config "$CONFIG" "$@" >/dev/null
NAME="${NAME:-$(basename "$CONFIG" .toml)-$(date -u +%Y%m%dT%H%M%SZ)}"
RUN_ROOT="$RESULTS/runs/$NAME"
mkdir -p "$RUN_ROOT"

array=$(sbatch --parsable --array=0-$((SHARDS - 1)) jobs/grid_array.sbatch "$CONFIG" "$RUN_ROOT" "$@")
array="${array%%;*}"
# afterany, not afterok: a task stopped by its time limit ends TIMEOUT (which would never satisfy afterok) and then
# requeues itself to resume; the merge waits for every task of the array (jobs/merge.sbatch).
merge=$(sbatch --parsable --dependency=afterany:"$array" --kill-on-invalid-dep=yes \
    jobs/merge.sbatch "$RUN_ROOT" "$RESULTS/$NAME.json" "$array")
merge="${merge%%;*}"
echo "array job $array: $SHARDS shards of $CONFIG in $RUN_ROOT" >&2
echo "merge job $merge: $RESULTS/$NAME.json once every shard succeeded" >&2
echo "logs: $(pwd)/dllm-bench-shard-${array}_*.out and $(pwd)/dllm-bench-merge-$merge.out" >&2
echo "$array $merge"
