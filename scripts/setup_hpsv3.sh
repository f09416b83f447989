#!/usr/bin/env bash
# Set up (idempotently) the virtual environment the `hpsv3` head runs in (.venv-hpsv3): CPU torch,
# the `hpsv3` package (1.0.0, installed without its declared dependencies) with what its inference
# path imports, under hpsv3's transformers==4.45.2 pin, and judge-gateway itself (editable). The
# head's worker runs under this venv (`python = ".venv-hpsv3/bin/python"` in the head's options);
# hpsv3 needs its own venv because .venv-heads has transformers 5.x.
#
# Usage: scripts/setup_hpsv3.sh [--force]
#   JG_HPSV3_VENV  venv path (default: <repo>/.venv-hpsv3)
#   JG_PYTHON      interpreter used to create the venv (default: python3)
#   --force        run every step even when the venv already imports everything
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG=setup_hpsv3
VENV="${JG_HPSV3_VENV:-$REPO_ROOT/.venv-hpsv3}"
IMPORTS="import torch, torchvision, transformers, hpsv3; from hpsv3 import HPSv3RewardInferencer; import judge_gateway.heads.worker"
HELP_TO=11
# shellcheck source=scripts/lib/venv.sh
. "$REPO_ROOT/scripts/lib/venv.sh"
venv_begin "$@"

# hpsv3 declares torchvision (its image resizing imports it): without these pins pip replaces the
# CPU torch with PyPI's CUDA build and ~3 GB of nvidia wheels (see scripts/setup_heads.sh).
constraints="$VENV/hpsv3-constraints.txt"
printf 'torch==2.13.0\ntorchvision==0.28.0\ntransformers==4.45.2\n' > "$constraints"

log "installing torch==2.13.0 (CPU)"
pip_quiet install -q "torch==2.13.0"

# hpsv3 1.0.0 declares deepspeed, diffusers, timm, opencv-python, qwen-vl-utils, einops ... for
# training and image generation. `import hpsv3` (-> inference.py -> train.py ->
# model/qwen2vl_trainer.py) imports at module level: transformers (+ its Trainer, which needs
# accelerate), peft, trl, datasets, pandas, omegaconf, fire, matplotlib and torch.utils.tensorboard
# (tensorboard); none of those but transformers/omegaconf/yaml is used to score. deepspeed (only
# imported inside ZeRO-3 helpers), diffusers, timm, opencv-python, qwen-vl-utils (hpsv3 ships its
# own copy of the vision helpers) and einops are never imported on that path: not installed.
# trl 0.11.x is the last series that imports under transformers 4.45 (0.12 needs 4.46); peft
# 0.13.2 is the release of the same month.
log "installing hpsv3==1.0.0 (--no-deps) and what its inference path imports"
log "(pip then reports hpsv3's training-only requirements as missing: expected, see above)"
pip_quiet install -q --no-deps "hpsv3==1.0.0"
pip_quiet install -q -c "$constraints" "torchvision==0.28.0" "transformers==4.45.2" \
    "accelerate>=0.34,<1.2" "peft==0.13.2" "trl==0.11.4" "datasets>=2.20,<4" \
    "huggingface_hub>=0.23.2,<1.0" "safetensors>=0.4" "omegaconf>=2.3" "pyyaml>=6.0" "fire>=0.7" \
    "pandas" "matplotlib" "tensorboard" "pillow>=9" "numpy" "tqdm" "requests"
log "installing judge-gateway (editable)"
pip_quiet install -q -c "$constraints" -e "$REPO_ROOT"

log "patching torchvision so it imports next to CPU torch"
"$VENV/bin/python" "$REPO_ROOT/scripts/patch_torchvision.py" "$TAG"

venv_done "$("$VENV/bin/python" -c 'import torch, transformers, trl, peft, importlib.metadata as m; print("torch", torch.__version__, "transformers", transformers.__version__, "hpsv3", m.version("hpsv3"), "trl", trl.__version__, "peft", peft.__version__)' 2>/dev/null)"
