"""A real vLLM OpenAI server on the CPU, serving a tiny Qwen2.5-VL the tests build.

Started once per test session through scripts/start_vllm.sh --cpu (so the script is tested
too). A failed start is a test failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.vllm_server import build_tiny_model, start_cpu_vllm

ROOT = Path(__file__).resolve().parents[2]

# The one tiny model answers under every judge model's served name.
SERVED_NAMES = [
    "nvidia/Cosmos-Reason1-7B-Reward",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "RationalRewards-8B-T2I",
    "CodeGoat24/UnifiedReward-qwen-7b",
]

# JSON-schema replies (the critic) with no free whitespace between tokens: a random tiny model
# otherwise fills the reply with newlines, which the schema allows. vLLM takes this per server
# (xgrammar ignores the per-request flag); regex constraints are unaffected.
STRUCTURED_OUTPUTS_ARGS = ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    cache = Path(os.environ.get("JG_TEST_CACHE", ROOT / ".cache"))
    return build_tiny_model(cache / "tiny-qwen25vl")


@pytest.fixture(scope="session")
def vllm(tiny_model_dir, tmp_path_factory):
    server = start_cpu_vllm(tiny_model_dir, SERVED_NAMES, run_dir=tmp_path_factory.mktemp("vllm-run"),
                            extra_args=STRUCTURED_OUTPUTS_ARGS)
    try:
        yield server
    finally:
        server.stop()
