#!/usr/bin/env bash
# Starts a real one-node SLURM cluster on 127.0.0.1 for the tests, with its state in one folder
# (default target/slurm-test), except munge's socket, key and seed: munged refuses a socket whose parent folders
# are not searchable by everyone (a checkout under `mktemp -d` or /root), so they live in a fresh folder of their
# own under /run (else /tmp), made 0755 and named in DIR/munge-dir, that slurm-down.sh removes. The cluster:
# munged, slurmctld, slurmd, a partition `debug`, 16 CPUs, 128 GiB and 4 fake
# GPUs (character devices, so `#SBATCH --gres=gpu:1` is accepted unchanged). Needs root and the Debian
# packages slurmctld slurmd slurm-client munge (scripts/install-deps.sh). Facts behind each setting:
# shared/SLURM.md. Stop it with scripts/slurm-down.sh (same folder).
#
#   scripts/slurm-up.sh [DIR]      # prints the file to source: `. DIR/env.sh` sets SLURM_CONF for sbatch etc.
#
# Idempotent: when the cluster of DIR is already up it only prints. Ports: SLURM_TEST_PORT (default 16817)
# and the next one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/target/slurm-test}"
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
PORT="${SLURM_TEST_PORT:-16817}"
CONF="$DIR/slurm.conf"

for tool in munged mungekey slurmctld slurmd sbatch scontrol sinfo; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "slurm-up: $tool not found; install with scripts/install-deps.sh (apt: slurmctld slurmd slurm-client munge)" >&2
        exit 1
    }
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$DIR/munged.pid" && alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" \
    && SLURM_CONF="$CONF" sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
    echo "$DIR/env.sh"
    exit 0
fi
"$ROOT/scripts/slurm-down.sh" "$DIR" >/dev/null 2>&1 || true

mkdir -p "$DIR"/{state,spool,log,gpus}
# munge's folder: fresh, outside the checkout, every parent searchable by all (/run and /tmp are), owned by us.
MUNGE="$(mktemp -d /run/dllm-bench-munge.XXXXXX 2>/dev/null || mktemp -d /tmp/dllm-bench-munge.XXXXXX)"
chmod 0755 "$MUNGE"
printf '%s\n' "$MUNGE" >"$DIR/munge-dir"
mungekey -c -k "$MUNGE/munge.key"
chmod 0600 "$MUNGE/munge.key"
munged -S "$MUNGE/munge.sock" --key-file="$MUNGE/munge.key" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$MUNGE/munge.seed"

# Fake GPUs: character devices (the null device's numbers) that gres.conf can point at.
GRES_NODE=""
GRES_CONF=""
if for i in 0 1 2 3; do [ -c "$DIR/gpus/nvidia$i" ] || mknod "$DIR/gpus/nvidia$i" c 1 3 || exit 1; done 2>/dev/null; then
    GRES_NODE="Gres=gpu:4"
    GRES_CONF="NodeName=localhost Name=gpu File=$DIR/gpus/nvidia[0-3]"
else
    echo "slurm-up: cannot mknod fake GPUs here: no GRES; submit with SBATCH_GRES=none" >&2
fi
printf '%s\n' "$GRES_CONF" >"$DIR/gres.conf"

cat >"$CONF" <<CONF
ClusterName=dllmtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
MailProg=/bin/true
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1
DependencyParameters=kill_invalid_depend
ReturnToService=2
KillWait=10
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=16 RealMemory=131072 $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

slurmctld -f "$CONF" -c
slurmd -f "$CONF" -N localhost
printf 'export SLURM_CONF=%q\n' "$CONF" >"$DIR/env.sh"

for _ in $(seq 1 100); do
    if SLURM_CONF="$CONF" sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
        echo "$DIR/env.sh"
        exit 0
    fi
    sleep 0.2
done
echo "slurm-up: the node did not become idle in 20 s; logs in $DIR/log:" >&2
tail -n 20 "$DIR"/log/*.log >&2 || true
exit 1
