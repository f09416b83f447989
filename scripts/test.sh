#!/usr/bin/env bash
# The test command: set up what the tests need on a fresh machine, then run unit tests and the
# integration tests against a real vLLM OpenAI server on the CPU (a tiny Qwen2.5-VL the tests build)
# and the local heads (worker processes under .venv-heads, tiny models the tests build).
#
# Usage: scripts/test.sh [extra pytest args]
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

scripts/bootstrap.sh     # .venv: the gateway (no torch) with its dev, tune, redis, ocr and browse extras
scripts/setup_vllm_cpu.sh
scripts/setup_heads.sh  # .venv-heads: torch, open_clip, transformers, rapidocr for the head workers
scripts/setup_hpsv3.sh  # .venv-hpsv3: the hpsv3 package under its transformers 4.45.2 pin (~2.5 min)
scripts/setup_latents.sh   # torch worker venv for the cosmos-rl latent / torch-payload tests
scripts/setup_geneval.sh   # .venv-geneval: mmdet + mmcv (built once per machine, ~10-20 min) for the gen_eval head
scripts/setup_imagereward.sh   # .venv-imagereward: the image-reward package (transformers 4.45 stack), ~2.5 min
scripts/setup_cosmos_rl_client.sh   # .venv-cosmosrl: cosmos-rl's real trainer reward client (--no-deps + CPU torch), ~2.5 min
scripts/setup_ray.sh    # .venv-ray: the gateway with the `ray` extra (ray[serve]) for the Ray mode tests, ~1 min
# The Redis result-store tests start their own redis-server (a missing one is a failure).
if ! command -v redis-server >/dev/null 2>&1; then
    echo "== installing redis-server (Debian)"
    apt-get update -qq && apt-get install -y -qq redis-server
fi
# The results browser's tests drive Debian's chromium headless through its chromedriver (selenium).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "== installing chromium + chromium-driver (Debian)"
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
echo "== unit tests"
.venv/bin/python -m pytest tests/unit -q "$@"
echo "== docs site (mkdocs build --strict: a broken link, anchor or page fails; the reference pages' staleness is a unit test)"
.venv/bin/python -m pip install -q -e ".[docs]"   # the docs extra (mkdocs-material, mkdocstrings) into .venv
# (no --quiet: it hides the warnings that --strict counts, so a broken link would pass)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site
echo "== reliability suite (fuzz, backend / Redis / replica / head faults; a few minutes)"
# -s: each test prints its figures ([reliability] lines: cases, status codes, recovered in s, lost)
# --timeout (pytest-timeout, the dev extra): a test that hangs (a server that never answers, a lost
# process) fails after 15 min instead of stalling the run; the slowest takes ~2 min.
.venv/bin/python -m pytest tests/reliability -q -s --timeout=900 "$@"
echo "== integration tests (real vLLM on CPU, local heads)"
.venv/bin/python -m pytest tests/integration -q "$@"
echo "== Ray mode tests (.venv-ray; two-node local Ray cluster, real vLLM on CPU, replica kills)"
.venv-ray/bin/python -m pytest tests/ray -q -p no:warnings --timeout=900 "$@"
