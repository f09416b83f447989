#!/usr/bin/env bash
# Set up (idempotently) .venv-latents, the venv of the cosmos-rl latent decoder (torch + diffusers).
# The packages, pins and steps are data: [envs.latents] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build latents` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_latents.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_LATENTS_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" latents "${JG_LATENTS_VENV:-$REPO_ROOT/.venv-latents}" "$@"
