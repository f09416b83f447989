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
TAG=setup_heads
VENV="${JG_HEADS_VENV:-$REPO_ROOT/.venv-heads}"
IMPORTS="import torch, torchvision, open_clip, transformers, safetensors, rapidocr, onnxruntime, judge_gateway.heads.worker"
HELP_TO=11
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"

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

venv_done "$("$VENV/bin/python" -c 'import torch, open_clip, transformers, rapidocr; print("torch", torch.__version__, "open_clip", open_clip.__version__, "transformers", transformers.__version__, "rapidocr", rapidocr.__version__ if hasattr(rapidocr, "__version__") else "?")' 2>/dev/null)"
