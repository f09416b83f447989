#!/usr/bin/env bash
# Set up (idempotently) the virtual environment the local scorer heads run in (.venv-heads):
# CPU torch, open_clip, transformers, rapidocr + onnxruntime, and judge-gateway itself (editable,
# without dependencies beyond what the worker needs). Head workers run under this venv's
# interpreter (`python = ".venv-heads/bin/python"` in a head's config), so torch stays out of the
# gateway's venv. See shared/reference/offline_scorers.md ("The torchvision trap").
#
# Usage: scripts/setup_heads.sh [--force]
#   JG_HEADS_VENV  venv path (default: <repo>/.venv-heads)
#   JG_PYTHON      interpreter used to create the venv (default: python3)
#   --force        run every step even when the venv already imports everything
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JG_HEADS_VENV:-$REPO_ROOT/.venv-heads}"
BASE_PYTHON="${JG_PYTHON:-python3}"
FORCE=0
IMPORTS="import torch, torchvision, open_clip, transformers, safetensors, rapidocr, onnxruntime, judge_gateway.heads.worker"

for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup_heads: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "[setup_heads] $*"; }

check_import() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "$IMPORTS" >/dev/null 2>&1
}

pip_quiet() {
    local status
    set +e
    "$VENV/bin/python" -m pip "$@" 2>&1 | grep -v -E "Location .* is ignored|^\s*$"
    status=${PIPESTATUS[0]}
    set -e
    if [[ $status -ne 0 ]]; then
        echo "[setup_heads] pip $* failed (exit $status)" >&2
        return "$status"
    fi
}

if [[ $FORCE -eq 0 ]] && check_import; then
    log "heads venv ready at $VENV; nothing to do"
    exit 0
fi

start=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV with $BASE_PYTHON ($("$BASE_PYTHON" --version 2>&1))"
    "$BASE_PYTHON" -m venv "$VENV"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

# Without these pins open_clip_torch (via torchvision) replaces the CPU torch with PyPI's CUDA
# build and ~3 GB of nvidia wheels.
constraints="$VENV/heads-constraints.txt"
printf 'torch==2.13.0\ntorchvision==0.28.0\n' > "$constraints"

log "installing torch==2.13.0 (CPU)"
pip_quiet install -q "torch==2.13.0"
log "installing open_clip_torch, transformers, safetensors, rapidocr, onnxruntime"
pip_quiet install -q -c "$constraints" "torchvision==0.28.0" "open_clip_torch>=3.0" \
    "transformers>=4.45" "safetensors>=0.4" "rapidocr>=3.0" "onnxruntime>=1.17"
# The worker runs `python -m judge_gateway.heads.worker`: install the package editable with its
# own (torch-free) dependencies, under the same pins.
log "installing judge-gateway (editable)"
pip_quiet install -q -c "$constraints" -e "$REPO_ROOT"

log "patching torchvision so it imports next to CPU torch"
"$VENV/bin/python" "$REPO_ROOT/scripts/patch_torchvision.py" setup_heads

if ! check_import; then
    echo "[setup_heads] ERROR: '$IMPORTS' fails in $VENV:" >&2
    "$VENV/bin/python" -c "$IMPORTS" 2>&1 | tail -20 >&2 || true
    exit 1
fi
log "done in $((SECONDS - start)) s: $("$VENV/bin/python" -c 'import torch, open_clip, transformers, rapidocr; print("torch", torch.__version__, "open_clip", open_clip.__version__, "transformers", transformers.__version__, "rapidocr", rapidocr.__version__ if hasattr(rapidocr, "__version__") else "?")' 2>/dev/null)"
