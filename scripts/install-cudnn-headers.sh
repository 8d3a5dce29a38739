#!/usr/bin/env bash
# Installs the headers the `cudnn` cargo feature compiles against (`run.attention = "cudnn"`): cuDNN's frontend
# (header-only C++, PyPI `nvidia-cudnn-frontend`) and cuDNN 9's C headers (PyPI `nvidia-cudnn-cu13`), unpacked
# from the wheels into .tools/cudnn (only their include folders are kept). Nothing is linked: the runner loads
# libcudnn.so.9 at run time. Idempotent: a second run only checks that the headers are there.
#
#   scripts/install-cudnn-headers.sh            # then:
#   . .tools/cuda/env.sh && . .tools/cudnn/env.sh
#   cargo build --release -p runner --features cudnn
#
# The CUDA headers come from the CUDA toolchain (CUDA_HOME, scripts/install-cuda-toolchain.sh or a CUDA install).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/.tools/cudnn"
FRONTEND="nvidia-cudnn-frontend==1.32.0"
CUDNN="nvidia-cudnn-cu13==9.28.1.4"

if [ -f "$DIR/frontend/include/cudnn_frontend.h" ] && [ -f "$DIR/cudnn/include/cudnn.h" ]; then
    echo "cudnn headers          ok ($DIR)"
else
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    echo "cudnn headers          downloading $FRONTEND $CUDNN"
    python3 -m pip download -q --disable-pip-version-check --no-deps --dest "$tmp" "$FRONTEND" "$CUDNN"
    mkdir -p "$DIR/frontend" "$DIR/cudnn"
    python3 - "$tmp" "$DIR" <<'PY'
import pathlib, sys, zipfile
tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in tmp.glob("*.whl"):
    frontend = "frontend" in wheel.name
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            # The frontend keeps its headers under include/, cuDNN under nvidia/cudnn/include/.
            head = "include/" if frontend else "nvidia/cudnn/include/"
            if name.startswith(head) and not name.endswith("/"):
                dest = out / ("frontend" if frontend else "cudnn") / "include" / name[len(head):]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(z.read(name))
PY
    [ -f "$DIR/frontend/include/cudnn_frontend.h" ] && [ -f "$DIR/cudnn/include/cudnn.h" ] || {
        echo "install-cudnn-headers: the wheels held no cudnn_frontend.h / cudnn.h" >&2
        exit 1
    }
    echo "cudnn headers          installed ($DIR)"
fi

cat >"$DIR/env.sh" <<ENV
# Written by scripts/install-cudnn-headers.sh: where runner/build.rs finds the headers of the cudnn feature.
export CUDNN_FRONTEND_INCLUDE=$DIR/frontend/include
export CUDNN_INCLUDE=$DIR/cudnn/include
ENV
