#!/usr/bin/env bash
# Set up (idempotently) .venv-ray, judge-gateway with ray[serve] for the Ray mode (serve --ray) and its tests.
# The packages, pins and steps are data: [envs.ray] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build ray` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_ray.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_RAY_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" ray "${JG_RAY_VENV:-$REPO_ROOT/.venv-ray}" "$@"
