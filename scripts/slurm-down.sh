#!/usr/bin/env bash
# Stops the test cluster of scripts/slurm-up.sh: cancels every job (job processes outlive the daemons), then
# stops slurmd, slurmctld and munged by their pid files, and removes munge's folder (DIR/munge-dir names it, outside
# DIR). The folder stays (logs); slurm-up starts afresh.
#
#   scripts/slurm-down.sh [DIR]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/target/slurm-test}"
[ -d "$DIR" ] || exit 0
CONF="$DIR/slurm.conf"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$DIR/slurmctld.pid"; then
    SLURM_CONF="$CONF" scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
    for _ in $(seq 1 50); do
        [ -z "$(SLURM_CONF="$CONF" squeue -h -t running,completing 2>/dev/null)" ] && break
        sleep 0.2
    done
fi
for name in slurmd slurmctld munged; do
    pidfile="$DIR/$name.pid"
    if alive "$pidfile"; then
        pid="$(cat "$pidfile")"
        kill "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
done
# munge's folder, made by slurm-up.sh: removed only when it is one of ours.
if [ -f "$DIR/munge-dir" ]; then
    munge_dir="$(cat "$DIR/munge-dir")"
    case "$munge_dir" in
        /run/dllm-bench-munge.* | /tmp/dllm-bench-munge.*) rm -rf -- "$munge_dir" ;;
    esac
    rm -f "$DIR/munge-dir"
fi
echo "slurm-down: stopped the cluster of $DIR"
