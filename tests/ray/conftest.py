"""Ray mode tests: run under .venv-ray (scripts/setup_ray.sh), which has the `ray` extra.

A real vLLM CPU server (the tiny Qwen2.5-VL the tests build), a real redis-server and a
two-node local Ray cluster. Under an interpreter without Ray (the plain .venv) this folder is not
collected: scripts/test.sh runs it with .venv-ray.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("ray") is None:
    collect_ignore_glob = ["test_*.py"]

# The one tiny model answers under the VLM judge's served name.
SERVED_NAMES = ["Qwen/Qwen2.5-VL-7B-Instruct"]


@pytest.fixture(scope="session")
def vllm(tmp_path_factory):
    from tests.support.vllm_server import build_tiny_model, start_cpu_vllm

    model = build_tiny_model()
    server = start_cpu_vllm(model, SERVED_NAMES, run_dir=tmp_path_factory.mktemp("vllm-run"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    from tests.support.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"), persist=True)  # AOF: store.persistence refuses Redis without it
    try:
        yield server
    finally:
        server.stop()
