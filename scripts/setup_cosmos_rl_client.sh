#!/usr/bin/env bash
# Set up (idempotently) .venv-cosmosrl, cosmos-rl's trainer-side reward client for the tests that drive the gateway with it.
# The packages, pins and steps are data: [envs.cosmosrl] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build cosmosrl` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_cosmos_rl_client.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_COSMOSRL_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" cosmosrl "${JG_COSMOSRL_VENV:-$REPO_ROOT/.venv-cosmosrl}" "$@"
