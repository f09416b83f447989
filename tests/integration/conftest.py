"""A real vLLM OpenAI server on the CPU, serving a tiny Qwen2.5-VL the tests build.

Started once per test session through scripts/start_vllm.sh --cpu (so the script is tested
too). A failed start is a test failure, not a skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.vllm_server import build_tiny_model, start_cpu_vllm

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

# The tiny model's whole max_position_embeddings: test_cancel_vllm abandons a 30000-token reply.
# Every judge request caps its reply (templates' max_tokens), so no other test runs longer for it.
MAX_MODEL_LEN = 32768


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return build_tiny_model()


@pytest.fixture(scope="session")
def vllm(tiny_model_dir, tmp_path_factory):
    server = start_cpu_vllm(tiny_model_dir, SERVED_NAMES, run_dir=tmp_path_factory.mktemp("vllm-run"),
                            max_model_len=MAX_MODEL_LEN, extra_args=STRUCTURED_OUTPUTS_ARGS)
    try:
        yield server
    finally:
        server.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "stops_the_session_vllm: stops the session's vLLM server, so it runs last")


def pytest_collection_modifyitems(config, items):
    # A test that stops the shared server runs after every test that needs it (stable order otherwise).
    items.sort(key=lambda item: item.get_closest_marker("stops_the_session_vllm") is not None)
