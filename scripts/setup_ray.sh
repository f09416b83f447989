#!/usr/bin/env bash
# Create (idempotently) .venv-ray: judge-gateway (editable) with its `ray` extra (ray[serve]) plus
# the dev, redis and ocr extras, for the distributed mode (`judge-gateway serve --ray`) and its
# tests (tests/ray, run by scripts/test.sh under this venv). The single-machine mode never needs it.
# Head replicas still run their worker under the head's own venv (e.g. .venv-heads).
#
# Usage: scripts/setup_ray.sh [--force]   (JG_RAY_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_ray
VENV="${JG_RAY_VENV:-$REPO_ROOT/.venv-ray}"
IMPORTS="import ray, ray.serve, redis, rapidocr, judge_gateway.ray_mode.deploy"
HELP_TO=7
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"
log "installing judge-gateway[ray,dev,redis,ocr] (editable; ray[serve] from PyPI)"
pip_quiet install -q -e "$REPO_ROOT[ray,dev,redis,ocr]"
venv_done "$("$VENV/bin/python" -c 'import ray; print("ray", ray.__version__)' 2>/dev/null)"
