#!/usr/bin/env bash
# Set up (idempotently) .venv-heads, the venv the CLIP-family, videoalign and ocr head workers run in.
# The packages, pins and steps are data: [envs.heads] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build heads` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_heads.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_HEADS_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" heads "${JG_HEADS_VENV:-$REPO_ROOT/.venv-heads}" "$@"
