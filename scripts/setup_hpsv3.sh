#!/usr/bin/env bash
# Set up (idempotently) .venv-hpsv3, the venv of the hpsv3 head (its transformers 4.45.2 pin).
# The packages, pins and steps are data: [envs.hpsv3] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build hpsv3` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_hpsv3.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_HPSV3_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" hpsv3 "${JG_HPSV3_VENV:-$REPO_ROOT/.venv-hpsv3}" "$@"
