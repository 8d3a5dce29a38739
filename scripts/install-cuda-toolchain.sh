#!/usr/bin/env bash
# Installs the CUDA 13.0 compiler (nvcc, its NVVM back end, the CUDA headers) from PyPI wheels into a Python
# venv under .tools/cuda, so that `cargo check -p runner --features cuda` compiles candle's CUDA code on a
# machine with no GPU and no CUDA install (CI). Idempotent: a second run only checks the pinned versions.
#
#   scripts/install-cuda-toolchain.sh           # install (or check) and write .tools/cuda/env.sh
#   . .tools/cuda/env.sh                        # CUDA_HOME, PATH (nvcc), CUDA_COMPUTE_CAP (default 90)
#   cargo check -p runner --features cuda
#
# Pinned to CUDA 13.0: a newer nvcc emits PTX that a CUDA 13.0 driver (580) rejects, and cudarc 0.19.10
# does not know releases after 13.0. Only what `check` needs is installed: compiling candle-kernels' PTX needs
# nvcc, cicc (nvvm) and the headers; nothing is linked. Building a binary to run also needs cuBLAS, cuRAND,
# the runtime libraries and a link-time libcuda stub (see the GPU notes of the project, not done here).
#
# Env: SKIP_APT=1 never calls apt (python3-venv must then be present); CUDA_COMPUTE_CAP overrides 90 (Hopper)
# in env.sh, e.g. 80 for an A100.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.tools/cuda"
VENV="$DIR/venv"
PINS=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-nvvm==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-cuda-runtime==13.0.96
    nvidia-cuda-cccl==13.0.85
)
COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"

say() { printf '%-22s %s\n' "$1" "$2"; }

# --- python3 with venv (Debian splits it into python3-venv) ----------------------------------------
if python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    say python3-venv "ok"
elif [ -n "${SKIP_APT:-}" ]; then
    echo "install-cuda-toolchain: python3 with venv is missing and SKIP_APT is set; install python3-venv" >&2
    exit 1
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "apt: need root or sudo to install python3-venv" >&2; exit 1; }
        SUDO=sudo
    fi
    say python3-venv "installing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
fi

# --- the wheels --------------------------------------------------------------------------------------
mkdir -p "$DIR"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# `pip freeze` lists exactly `name==version`: every pin present means nothing to do (no network needed).
have="$("$VENV/bin/python" -m pip freeze 2>/dev/null || true)"
need=()
for p in "${PINS[@]}"; do
    grep -qixF "$p" <<<"$have" || need+=("$p")
done
if [ ${#need[@]} -eq 0 ]; then
    say cuda-wheels "ok (${PINS[*]})"
else
    say cuda-wheels "installing ${need[*]}"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
fi

# The wheels put CUDA 13 under site-packages/nvidia/cu13/{bin,include,lib,nvvm}.
CUDA="$("$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')"
if [ ! -x "$CUDA/bin/nvcc" ]; then
    echo "install-cuda-toolchain: no nvcc at $CUDA/bin/nvcc after installing ${PINS[*]}" >&2
    exit 1
fi
version="$("$CUDA/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
if [ "$version" != "13.0" ]; then
    echo "install-cuda-toolchain: $CUDA/bin/nvcc is CUDA $version, expected 13.0" >&2
    exit 1
fi
say nvcc "ok (CUDA $version, $CUDA)"

cat >"$DIR/env.sh" <<ENV
# Written by scripts/install-cuda-toolchain.sh: the CUDA 13.0 compiler from PyPI wheels.
export CUDA_HOME="$CUDA" CUDA_PATH="$CUDA" CUDA_ROOT="$CUDA"
export PATH="$CUDA/bin:\$PATH"
# No GPU here: candle-kernels would ask nvidia-smi for the compute capability. 90: Hopper (H100/H200).
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-$COMPUTE_CAP}"
# candle-kernels' build script (cudaforge) runs nvcc on half the cores unless told: on 2 cores, one nvcc at a
# time while the other core idles. Its kernels are most of a CUDA build's time; use every core cargo may use.
export CUDAFORGE_THREADS="\${CUDAFORGE_THREADS:-\${CARGO_BUILD_JOBS:-\$(nproc)}}"
ENV
say env "$DIR/env.sh"
