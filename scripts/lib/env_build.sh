#!/usr/bin/env bash
# Build one environment of judge_gateway/envs/specs.toml: `judge-gateway env build NAME --venv VENV`
# under the project venv (.venv, made by scripts/bootstrap.sh when it is missing), with this
# checkout's code first on the path. The scripts/setup_*.sh call it; so can you.
#
# Usage: scripts/lib/env_build.sh NAME VENV [--force] [--dry-run] [--torch auto|cuda|cpu] [--torch-index URL]
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
name="$1" venv="$2"
shift 2
PROJECT_VENV="${JG_VENV:-$REPO_ROOT/.venv}"
[[ -x "$PROJECT_VENV/bin/python" ]] || "$REPO_ROOT/scripts/bootstrap.sh" >&2
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PROJECT_VENV/bin/python" -m judge_gateway.cli \
    env build "$name" --venv "$venv" "$@"
