#!/usr/bin/env bash
# Set up (idempotently) .venv-imagereward, the venv of the image_reward head (image-reward 1.5, transformers 4.45.2).
# The packages, pins and steps are data: [envs.imagereward] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build imagereward` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_imagereward.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_IMAGEREWARD_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" imagereward "${JG_IMAGEREWARD_VENV:-$REPO_ROOT/.venv-imagereward}" "$@"
