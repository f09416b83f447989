#!/usr/bin/env bash
# Set up (idempotently) .venv-geneval, the venv of the gen_eval head (mmdet 3.3, mmcv 2.1 built once per machine into $JG_WHEEL_CACHE).
# The packages, pins and steps are data: [envs.geneval] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build geneval` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_geneval.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_GENEVAL_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" geneval "${JG_GENEVAL_VENV:-$REPO_ROOT/.venv-geneval}" "$@"
