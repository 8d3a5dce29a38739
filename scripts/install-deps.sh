#!/usr/bin/env bash
# Installs what the explorer's builds and tests need, on a fresh Debian machine that has rustup.
# Idempotent: prints one line per tool, "ok" when it is already there; re-running is quick.
#
#   scripts/install-deps.sh            # everything
#   SKIP_APT=1 scripts/install-deps.sh # no apt (e.g. no root); the rest still installs
#   SKIP_BROWSER=1 scripts/install-deps.sh  # only what building needs: no chromium, node >= 18 is enough
#
# Installs:
#   apt:    chromium chromium-driver pkg-config libfontconfig1-dev fonts-dejavu-core (+ nodejs npm g++ if missing)
#   apt:    slurmctld slurmd slurm-client munge (the SLURM job tests; daemons are not started by the install:
#           scripts/slurm-up.sh starts a private cluster; SKIP_SLURM=1 leaves SLURM out)
#   rustup: the wasm32-unknown-unknown target
#   cargo:  trunk 0.21.14 (0.22 needs a newer rustc), wasm-bindgen-cli at the Cargo.lock version
#   npm:    binaryen@132 (wasm-opt) and playwright-core into .tools/node (from explorer/e2e/package-lock.json)
#   pip:    torch and transformers (pinned) into a venv at .tools/hf-reference/venv, for the tests of
#           jobs/hf_reference.py (runner/tests/hf_reference.rs, on the CPU); SKIP_HF=1 leaves it out
# Never downloads a browser: tests drive Debian's /usr/bin/chromium.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRUNK_VERSION=0.21.14
NODE_DIR="$ROOT/.tools/node"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

say() { printf '%-22s %s\n' "$1" "$2"; }
# `cargo install` of a build tool, timed: the packages' release profiles are made quick to build (no LTO, many
# codegen units); what the tools do here (orchestrate a build, rewrite one wasm file) does not need more.
fast_install() {
    local start=$SECONDS
    CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=false \
        cargo install "$@"
    say "" "installed in $((SECONDS - start)) s"
}

# --- apt ---------------------------------------------------------------------------------------
APT_PKGS=(pkg-config libfontconfig1-dev fonts-dejavu-core)
[ -n "${SKIP_BROWSER:-}" ] || APT_PKGS+=(chromium chromium-driver)
command -v node >/dev/null 2>&1 || APT_PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || APT_PKGS+=(npm)
# The e2e and benchmark scripts use python3 (free port, fixtures) and curl (waiting for the server).
command -v python3 >/dev/null 2>&1 || APT_PKGS+=(python3)
command -v curl >/dev/null 2>&1 || APT_PKGS+=(curl)
# The venvs under .tools/ (Debian ships venv and ensurepip apart from python3).
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || APT_PKGS+=(python3-venv)
# scripts/check-cuda-kernels.sh compiles the CUDA kernels' host harness with g++ (C++20).
command -v g++ >/dev/null 2>&1 || APT_PKGS+=(g++)
missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    say apt "ok (${APT_PKGS[*]})"
elif [ -n "${SKIP_APT:-}" ]; then
    say apt "SKIPPED (SKIP_APT set), missing: ${missing[*]}"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "apt: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        SUDO=sudo
    fi
    say apt "installing ${missing[*]}"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- SLURM for the job tests (runner/tests/slurm.rs) ----------------------------------------------
SLURM_PKGS=(slurmctld slurmd slurm-client munge)
slurm_missing=()
for p in "${SLURM_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || slurm_missing+=("$p")
done
if [ ${#slurm_missing[@]} -eq 0 ]; then
    say slurm "ok (${SLURM_PKGS[*]})"
elif [ -n "${SKIP_APT:-}${SKIP_SLURM:-}" ]; then
    say slurm "SKIPPED, missing: ${slurm_missing[*]} (the SLURM job tests will not run)"
else
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "apt: need root or sudo to install ${slurm_missing[*]}" >&2; exit 1; }
        SUDO=sudo
    fi
    say slurm "installing ${slurm_missing[*]}"
    # The packages' init scripts would start daemons with the stock config: a policy-rc.d that says no (101)
    # keeps them stopped; an existing one is left as it is.
    POLICY=/usr/sbin/policy-rc.d
    made_policy=""
    if [ ! -e "$POLICY" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
        $SUDO chmod 755 "$POLICY"
        made_policy=1
    fi
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${slurm_missing[@]}" >/dev/null
    [ -z "$made_policy" ] || $SUDO rm -f "$POLICY"
fi

NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
# playwright-core 1.65 (explorer/e2e/package.json) needs node >= 20 (Debian 12's nodejs is 18); wasm-opt 18.
NODE_MIN=20
[ -z "${SKIP_BROWSER:-}" ] || NODE_MIN=18
if [ "$NODE_MAJOR" -lt "$NODE_MIN" ]; then
    echo "node: version $(node --version 2>/dev/null || echo none) is too old; need node >= $NODE_MIN" \
        "(the browser test needs 20: Debian 13's nodejs, or NodeSource's nodejs 20)" >&2
    exit 1
fi
say node "ok ($(node --version))"

# --- rust target -------------------------------------------------------------------------------
if rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say wasm32-target ok
else
    say wasm32-target installing
    rustup target add wasm32-unknown-unknown
fi

# --- trunk -------------------------------------------------------------------------------------
if command -v trunk >/dev/null 2>&1 && trunk --version 2>/dev/null | grep -q " $TRUNK_VERSION\$"; then
    say trunk "ok ($TRUNK_VERSION)"
else
    say trunk "installing $TRUNK_VERSION"
    # No default features: no TLS stack (ring) and no update check; the explorer's builds find wasm-bindgen and
    # wasm-opt installed here, and `trunk serve` proxies plain http. trunk's own release profile (fat LTO, one
    # codegen unit) is most of its build time on 2 cores; a build tool needs none of it.
    fast_install --locked --no-default-features "trunk@$TRUNK_VERSION"
fi

# --- wasm-bindgen-cli at the Cargo.lock version ---------------------------------------------------
WB_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock")"
if [ -z "$WB_VERSION" ]; then
    echo "wasm-bindgen: not found in $ROOT/Cargo.lock (run \`cargo fetch\` in the workspace first)" >&2
    exit 1
fi
if command -v wasm-bindgen >/dev/null 2>&1 && [ "$(wasm-bindgen --version | awk '{print $2}')" = "$WB_VERSION" ]; then
    say wasm-bindgen-cli "ok ($WB_VERSION)"
else
    # Without --locked: the crate's own lockfile pins a dependency version the registry no longer has.
    # No default features: no TLS stack (its test runner's webdriver downloads; the e2e drives Debian's chromium).
    say wasm-bindgen-cli "installing $WB_VERSION"
    fast_install --no-default-features wasm-bindgen-cli --version "$WB_VERSION"
fi

# --- npm tools (wasm-opt from binaryen, playwright-core) ------------------------------------------
LOCK="$ROOT/explorer/e2e/package-lock.json"
STAMP="$NODE_DIR/.installed-lock.sha256"
want="$(sha256sum "$LOCK" | awk '{print $1}')"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$NODE_DIR/node_modules/.bin/wasm-opt" ]; then
    say npm-tools "ok ($NODE_DIR)"
else
    say npm-tools "installing into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$ROOT/explorer/e2e/package.json" "$LOCK" "$NODE_DIR/"
    # --ignore-scripts: nothing may run an install hook (or fetch a browser).
    npm ci --prefix "$NODE_DIR" --ignore-scripts --no-audit --no-fund --loglevel=error
    echo "$want" >"$STAMP"
fi
say wasm-opt "$("$NODE_DIR/node_modules/.bin/wasm-opt" --version)"

# --- Python venv for the tests of jobs/hf_reference.py (runner/tests/hf_reference.rs) -----------------
# torch and transformers, used on the CPU. PyPI has no CPU-only torch for Linux x86_64: its wheel is the CUDA
# build and pulls the CUDA libraries, about 2.8 GB of downloads and 4.3 GB installed (triton removed), about 2
# minutes on a fast link. pip's cache is not used (it would keep a second copy). transformers 5.x: hf_reference.py
# relies on its bidirectional mask for `is_causal = False` (it checks it at start).
HF_VENV="$ROOT/.tools/hf-reference/venv"
HF_PINS=(torch==2.11.0 transformers==5.23.0)
if [ -n "${SKIP_HF:-}" ]; then
    say hf-reference "SKIPPED (SKIP_HF set): the jobs/hf_reference.py tests will not run"
elif ! python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
    echo "hf-reference: needs python3 >= 3.10 with venv (the oldest that torch 2.11 and transformers 5 support); found" \
        "$(python3 --version 2>&1)" >&2
    exit 1
else
    [ -x "$HF_VENV/bin/python" ] || python3 -m venv "$HF_VENV"
    # `pip freeze` lists exactly `name==version`: both pins present and importable means nothing to do.
    have="$("$HF_VENV/bin/python" -m pip freeze 2>/dev/null || true)"
    hf_need=()
    for p in "${HF_PINS[@]}"; do
        grep -qixF "$p" <<<"$have" || hf_need+=("$p")
    done
    if [ ${#hf_need[@]} -eq 0 ] && "$HF_VENV/bin/python" -c 'import torch, transformers' >/dev/null 2>&1; then
        say hf-reference "ok (${HF_PINS[*]}, $HF_VENV)"
    else
        say hf-reference "installing ${HF_PINS[*]} into $HF_VENV (about 2.8 GB to download)"
        # pip holds every downloaded wheel in its temporary folder until the install ends: on a RAM disk when one
        # has room, that 2.8 GB is not on the disk beside the 4.3 GB installed.
        pip_tmp=""
        if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
            [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -gt $((4 * 1024 * 1024)) ]; then
            pip_tmp="$(mktemp -d /dev/shm/dllm-bench-pip.XXXXXX)"
        fi
        TMPDIR="${pip_tmp:-${TMPDIR:-/tmp}}" "$HF_VENV/bin/python" -m pip install -q --no-cache-dir \
            --disable-pip-version-check "${HF_PINS[@]}"
        [ -z "$pip_tmp" ] || rm -rf "$pip_tmp"
        # triton (0.6 GB) compiles GPU kernels for torch.compile; the tests run torch eagerly on the CPU.
        "$HF_VENV/bin/python" -m pip uninstall -q -y --disable-pip-version-check triton
        "$HF_VENV/bin/python" -c 'import torch, transformers' ||
            { echo "hf-reference: torch or transformers does not import after the install" >&2; exit 1; }
    fi
fi

# --- crates, so that trunk's offline build finds them -------------------------------------------------
(cd "$ROOT" && cargo fetch --quiet)
say cargo-fetch ok
