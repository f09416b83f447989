#!/usr/bin/env bash
# Create (idempotently) .venv-latents: CPU torch + diffusers for the torch worker
# (judge_gateway/latent_worker.py) that loads torch-saved tensors (weights_only=True) and decodes
# Wan VAE latents for the cosmos-rl adapter. Keeps torch out of the gateway's own venv.
# diffusers does not need torchvision; an unpinned torch would pull CUDA wheels.
#
# Usage: scripts/setup_latents.sh [--force]   (JG_LATENTS_VENV overrides the path)
# Then:  [cosmos_rl.latents] python = ".venv-latents/bin/python", checkpoint = "<AutoencoderKLWan dir>"
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_latents
VENV="${JG_LATENTS_VENV:-$REPO_ROOT/.venv-latents}"
IMPORTS="import torch, diffusers, numpy"
HELP_TO=8
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"
log "installing torch==2.13.0 (CPU), diffusers, numpy"
pip_quiet install -q "torch==2.13.0" diffusers numpy
venv_done "$("$VENV/bin/python" -c 'import torch, diffusers; print("torch", torch.__version__, "diffusers", diffusers.__version__)' 2>/dev/null)"
