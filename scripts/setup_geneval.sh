#!/usr/bin/env bash
# Set up (idempotently) the virtual environment the GenEval head's worker runs in (.venv-geneval):
# CPU torch 2.13 + torchvision 0.28 (patched, see scripts/patch_torchvision.py), mmengine, mmcv 2.1
# (built from its sdist: there is no PyPI wheel), mmdet 3.3, open_clip, and judge-gateway itself
# (editable). The mmcv wheel is built once per machine and cached outside the repo in
# ${JG_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/judge-gateway/wheels}; later runs install it
# from there in seconds. A fresh build takes ~10-20 min on 2 cores (MAX_JOBS, default 2).
#
# Usage: scripts/setup_geneval.sh [--force]
#   JG_GENEVAL_VENV  venv path (default: <repo>/.venv-geneval)
#   JG_PYTHON        interpreter used to create the venv (default: python3)
#   JG_WHEEL_CACHE   where the built mmcv wheel is kept
#   --force          run every step even when the venv already imports everything
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_geneval
VENV="${JG_GENEVAL_VENV:-$REPO_ROOT/.venv-geneval}"
WHEELS="${JG_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/judge-gateway/wheels}"
MMCV_VERSION="2.1.0"
IMPORTS="import torch, torchvision, mmcv, mmcv.ops, mmengine, mmdet, mmdet.apis, open_clip, judge_gateway.heads.worker"
HELP_TO=13
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"

# Without these pins open_clip_torch / mmdet (via torchvision) replace the CPU torch with PyPI's
# CUDA build and ~3 GB of nvidia wheels.
constraints="$VENV/geneval-constraints.txt"
printf 'torch==2.13.0\ntorchvision==0.28.0\n' > "$constraints"

log "installing torch==2.13.0 (CPU), torchvision 0.28.0 and the mmcv build requirements"
pip_quiet install -q "torch==2.13.0"
pip_quiet install -q -c "$constraints" "torchvision==0.28.0" wheel packaging ninja
log "patching torchvision so it imports next to CPU torch"
"$VENV/bin/python" "$REPO_ROOT/scripts/patch_torchvision.py" setup_geneval

log "installing mmengine, open_clip_torch"
pip_quiet install -q -c "$constraints" "mmengine>=0.10,<1" "open_clip_torch>=3.0"

mkdir -p "$WHEELS"
pyver="$("$VENV/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
torchver="$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
# The wheel's compiled ops are tied to the torch ABI: keep one cache folder per torch version.
MMCV_CACHE="$WHEELS/mmcv-$MMCV_VERSION-torch$torchver"
mkdir -p "$MMCV_CACHE"
wheel="$(ls "$MMCV_CACHE"/mmcv-"$MMCV_VERSION"-"$pyver"-*.whl 2>/dev/null | head -1 || true)"
if [[ -z "$wheel" ]]; then
    log "building mmcv==$MMCV_VERSION from its sdist into $MMCV_CACHE (MAX_JOBS=${MAX_JOBS:-2}; ~10-20 min on 2 cores)"
    build_start=$SECONDS
    tmp="$(mktemp -d "$MMCV_CACHE/.build.XXXXXX")"
    # mmcv 2.1's setup.py needs setuptools<70; torch 2.13 declares setuptools>=77, so the old one
    # is there for the build only (pip warns about the conflict) and the new one comes back after.
    pip_quiet install -q "setuptools<70"
    MAX_JOBS="${MAX_JOBS:-2}" MMCV_WITH_OPS=1 FORCE_CUDA=0 pip_quiet wheel -q --no-build-isolation \
        --no-deps -c "$constraints" -w "$tmp" "mmcv==$MMCV_VERSION"
    pip_quiet install -q "setuptools>=77.0.3"
    mv "$tmp"/mmcv-*.whl "$MMCV_CACHE"/
    rm -rf "$tmp"
    wheel="$(ls "$MMCV_CACHE"/mmcv-"$MMCV_VERSION"-"$pyver"-*.whl | head -1)"
    log "built $wheel in $((SECONDS - build_start)) s"
else
    log "using cached $wheel"
fi
pip_quiet install -q -c "$constraints" "$wheel"
log "installing mmdet 3.3"
pip_quiet install -q -c "$constraints" "mmdet>=3.3,<3.4"
log "installing judge-gateway (editable)"
pip_quiet install -q -c "$constraints" -e "$REPO_ROOT"

venv_done "$("$VENV/bin/python" -c 'import torch, mmcv, mmdet, open_clip; print("torch", torch.__version__, "mmcv", mmcv.__version__, "mmdet", mmdet.__version__, "open_clip", open_clip.__version__)' 2>/dev/null)"
