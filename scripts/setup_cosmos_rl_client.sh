#!/usr/bin/env bash
# Create (idempotently) .venv-cosmosrl: cosmos-rl's real trainer-side reward client
# (cosmos_rl.reward.remote_calculator.RemoteRewardCalculator) for the tests that drive the gateway
# with it. cosmos-rl is installed with --no-deps: its package __init__ imports the whole trainer
# (vLLM, CUDA kernels); the tests load only the modules remote_calculator imports
# (tests/support/cosmos_rl_trainer.py), which need exactly torch, numpy, requests and pydantic.
#
# Usage: scripts/setup_cosmos_rl_client.sh [--force]   (JG_COSMOSRL_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_cosmos_rl_client
VENV="${JG_COSMOSRL_VENV:-$REPO_ROOT/.venv-cosmosrl}"
COSMOS_RL_VERSION=0.4.7
IMPORTS="import torch, numpy, requests, pydantic, importlib.util as u; assert u.find_spec('cosmos_rl')"
HELP_TO=9
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"
log "installing torch==2.13.0 (CPU; unpinned would pull CUDA wheels), numpy, requests, pydantic"
pip_quiet install -q "torch==2.13.0" numpy requests pydantic
log "installing cosmos-rl==$COSMOS_RL_VERSION --no-deps"
pip_quiet install -q --no-deps "cosmos-rl==$COSMOS_RL_VERSION"
venv_done "$("$VENV/bin/python" -c 'import torch, importlib.metadata as m; print("torch", torch.__version__, "cosmos-rl", m.version("cosmos-rl"))' 2>/dev/null)"
