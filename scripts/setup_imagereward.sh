#!/usr/bin/env bash
# Set up (idempotently) the virtual environment the `image_reward` head's worker runs in
# (.venv-imagereward): the `image-reward` 1.5 package (ImageReward's own BLIP ViT + med BERT code)
# with what it needs and does not import under transformers 5: transformers 4.45.2, timm 0.6.13,
# fairscale 0.4.13, diffusers 0.31, openai-clip (the undeclared `clip` module its CLIPScore
# imports at package import) and setuptools < 81 (openai-clip imports pkg_resources); CPU torch
# 2.13 + torchvision 0.28 (patched, see scripts/patch_torchvision.py); judge-gateway (editable).
#
# Usage: scripts/setup_imagereward.sh [--force]
#   JG_IMAGEREWARD_VENV  venv path (default: <repo>/.venv-imagereward)
#   JG_PYTHON            interpreter used to create the venv (default: python3)
#   --force              run every step even when the venv already imports everything
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_imagereward
VENV="${JG_IMAGEREWARD_VENV:-$REPO_ROOT/.venv-imagereward}"
IMPORTS="import torch, torchvision, transformers, timm, fairscale, clip, ImageReward, judge_gateway.heads.worker"
HELP_TO=12
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"

# Without the torch pins timm / openai-clip (via torchvision) replace the CPU torch with PyPI's
# CUDA build and ~3 GB of nvidia wheels. transformers is pinned because ImageReward's med.py uses
# helpers transformers 5 removed; setuptools < 81 keeps pkg_resources (torch 2.13 wants >= 77).
constraints="$VENV/imagereward-constraints.txt"
printf 'torch==2.13.0\ntorchvision==0.28.0\ntransformers==4.45.2\nsetuptools>=77.0.3,<81\n' > "$constraints"

log "installing torch==2.13.0 (CPU)"
pip_quiet install -q -c "$constraints" "torch==2.13.0" "setuptools>=77.0.3,<81"
log "installing image-reward 1.5 and its pinned stack"
pip_quiet install -q -c "$constraints" "torchvision==0.28.0" "image-reward==1.5" "transformers==4.45.2" \
    "timm==0.6.13" "fairscale==0.4.13" "diffusers==0.31.0" "openai-clip==1.0.1"
# The worker runs `python -m judge_gateway.heads.worker`: install the package editable with its
# own (torch-free) dependencies, under the same pins.
log "installing judge-gateway (editable)"
pip_quiet install -q -c "$constraints" -e "$REPO_ROOT"

log "patching torchvision so it imports next to CPU torch"
"$VENV/bin/python" "$REPO_ROOT/scripts/patch_torchvision.py" setup_imagereward

venv_done "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("torch", "image-reward", "transformers", "timm", "fairscale", "diffusers", "openai-clip", "setuptools")))' 2>/dev/null)"
