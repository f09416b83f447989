#!/usr/bin/env bash
# The whole heads table on a GPU machine, in one command: builds the ViT-H-14-shaped PickScore /
# HPSv2 models (random weights, ~60 s on 16 cores) and prints, for pickscore and hpsv2 in bf16,
# the single-image and GRPO-shaped (16 requests x 32 images, a new prompt each) rows with the bare
# forward rate of the same model measured in the same run, and Flow-Factory's in-trainer rows.
#
#   scripts/bench_heads_gpu.sh --download    # once, on a machine that reaches PyPI: fills .whl/
#   scripts/bench_heads_gpu.sh               # on the GPU machine (no network needed)
#   scripts/bench_heads_gpu.sh --preprocess reference    # extra args go to bench/heads.py
#
# The GPU machine's python3 must have torch (CUDA), transformers, numpy, pillow, httpx, aiohttp;
# what it lacks travels in .whl/: `--download` fetches the WHEELS below there (binary, no deps, for
# CPython 3.12 on manylinux x86_64, at the versions this repository's venvs resolve), and a run
# installs them with --no-index into /tmp/site, so the GPU machine needs no network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WHEELS="open_clip_torch ftfy wcwidth pydantic pydantic-core annotated-types typing-inspection openai jiter distro
sniffio tenacity fastapi starlette uvicorn httpx-aiohttp httpx2 httpcore2 truststore av"
if [[ "${1:-}" == "--download" ]]; then
    exclude="$(git rev-parse --git-common-dir)/info/exclude"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
    freeze="$(.venv/bin/python -m pip list --format=freeze 2>/dev/null; .venv-heads/bin/python -m pip list --format=freeze 2>/dev/null)"
    pins=()
    for w in $WHEELS; do  # the version the project's venvs resolve, else the newest
        pin="$(echo "$freeze" | grep -i -m1 "^${w//-/[-_]}==" || true)"
        pins+=("${pin:-$w}")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "${pins[@]}"
    du -sh .whl
    exit 0
fi

if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# A "venv" whose bin/python is this python3: the head workers' interpreter.
mkdir -p /tmp/hv/bin
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" > /tmp/hv/bin/python && chmod +x /tmp/hv/bin/python
export JG_HEADS_VENV="${JG_HEADS_VENV:-/tmp/hv}" JG_TEST_CACHE="${JG_TEST_CACHE:-/tmp/jgcache}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec python3 bench/heads.py --size h14 --heads pickscore,hpsv2 --device cuda:0 --dtype bf16 --load both \
    --batch-sizes 8,64 --requests 512 --grpo-batch-sizes 128,256 --groups 16 --group-size 32 --rounds 2 \
    --forward-seconds 3 "$@"
