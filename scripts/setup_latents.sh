#!/usr/bin/env bash
# Create (idempotently) .venv-latents: CPU torch + diffusers for the torch worker
# (judge_gateway/latent_worker.py) that loads torch-saved tensors (weights_only=True) and decodes
# Wan VAE latents for the cosmos-rl adapter. Keeps torch out of the gateway's own venv.
# diffusers does not need torchvision; an unpinned torch would pull CUDA wheels.
#
# Usage: scripts/setup_latents.sh        (JG_LATENTS_VENV overrides the path)
# Then:  [cosmos_rl.latents] python = ".venv-latents/bin/python", checkpoint = "<AutoencoderKLWan dir>"
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${JG_LATENTS_VENV:-$REPO_ROOT/.venv-latents}"
TORCH="torch==2.13.0"
if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import torch, diffusers, numpy" >/dev/null 2>&1; then
    echo "[setup_latents] $VENV is ready"
    exit 0
fi
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install -q "$TORCH" diffusers numpy 2>&1 \
    | grep -v -E "Location .* is ignored" || true
"$VENV/bin/python" -c "import torch, diffusers; print('[setup_latents] torch', torch.__version__, 'diffusers', diffusers.__version__)"
