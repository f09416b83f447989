"""What the integration session shares: a real vLLM OpenAI server on the CPU, serving a tiny
Qwen2.5-VL the tests build, and one gateway of the CLIP-family heads on the tiny models (their
worker processes start once for every module that scores them); a second vLLM server, serving a
tiny Qwen3-VL, for the tests of the Qwen3-VL-era judges only.

The vLLM servers are started once per test session through scripts/start_vllm.sh --cpu (so the
script is tested too). A failed start is a test failure, not a skip. The Qwen3-VL server (~2 GB)
starts when the first test that needs it runs and stops after the last of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.clip_heads_gateway import ClipHeads
from tests.support.heads_env import build_tiny_heads
from tests.support.vllm_server import build_tiny_model, build_tiny_qwen3vl_model, start_cpu_vllm

# The one tiny model answers under every judge model's served name.
SERVED_NAMES = [
    "nvidia/Cosmos-Reason1-7B-Reward",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "RationalRewards-8B-T2I",
    "RationalRewards-8B-Edit",
    "CodeGoat24/UnifiedReward-qwen-7b",
]

# The tiny Qwen3-VL answers under the names of the Qwen3-VL-based judges' models.
QWEN3VL_SERVED_NAMES = [
    "nvidia/Cosmos-Reason2-8B",
    "CodeGoat24/UnifiedReward-2.0-qwen3vl-8b",
    "CodeGoat24/UnifiedReward-Think-qwen3vl-8b",
    "Qwen/Qwen3-VL-8B-Instruct",
]

# JSON-schema replies (the critic) with no free whitespace between tokens: a random tiny model
# otherwise fills the reply with newlines, which the schema allows. vLLM takes this per server
# (xgrammar ignores the per-request flag); regex constraints are unaffected.
STRUCTURED_OUTPUTS_ARGS = ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
# Per-request media_io_kwargs / mm_processor_kwargs, as `up` starts a backend whose judges send JPEG
# frame lists (backends.NAME.video_input; tests/integration/test_media_vllm.py).
TRUST_REQUEST_MM_KWARGS = ["--trust-request-mm-kwargs"]

# The tiny model's whole max_position_embeddings: test_cancel_vllm abandons a 30000-token reply.
# Every judge request caps its reply (templates' max_tokens), so no other test runs longer for it.
MAX_MODEL_LEN = 32768


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return build_tiny_model()


# vLLM's dev endpoints (/server_info, /sleep, ...): test_residency_vllm_cpu.py shows the gateway reading
# this server's platform and refusing a colocated judge on it. They change nothing the other tests use.
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


@pytest.fixture(scope="session")
def vllm(tiny_model_dir, tmp_path_factory):
    server = start_cpu_vllm(tiny_model_dir, SERVED_NAMES, run_dir=tmp_path_factory.mktemp("vllm-run"),
                            max_model_len=MAX_MODEL_LEN, extra_args=STRUCTURED_OUTPUTS_ARGS + TRUST_REQUEST_MM_KWARGS,
                            extra_env=DEV_MODE_ENV)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tiny_qwen3vl_dir() -> Path:
    return build_tiny_qwen3vl_model()


@pytest.fixture(scope="session")
def vllm_qwen3vl(tiny_qwen3vl_dir, tmp_path_factory):
    """The tiny Qwen3-VL on a CPU vLLM server of its own; stopped after the last test that uses it
    (pytest_collection_modifyitems), or here."""
    server = start_cpu_vllm(tiny_qwen3vl_dir, QWEN3VL_SERVED_NAMES, run_dir=tmp_path_factory.mktemp("vllm-qwen3vl"),
                            max_model_len=8192, extra_args=STRUCTURED_OUTPUTS_ARGS, wait_timeout=480)
    print(f"\n[vllm_qwen3vl] ready in {server.startup_seconds:.1f} s", flush=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _qwen3vl_server_stopped_after_its_last_test(request):
    """Its ~2 GB are not held through the rest of the session."""
    server = request.getfixturevalue("vllm_qwen3vl") if request.node.get_closest_marker(LAST_ON_QWEN3VL) else None
    yield
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def tiny_heads() -> Path:
    """The tiny CLIP-family models (tests/support/tiny_heads.py, cached)."""
    return build_tiny_heads("tiny")


@pytest.fixture(scope="session")
async def clip_heads(tiny_heads, vllm):
    """tests/support/clip_heads_gateway.py's gateway and its app, in the session's event loop: a
    module that needs other options for a head starts a gateway of its own. Its workers stop after
    the last test that uses it (see pytest_collection_modifyitems), or here."""
    heads = ClipHeads(tiny_heads, vllm.base_url)
    try:
        yield heads
    finally:
        await heads.aclose()  # a second close (after the last user's) finds everything closed


@pytest.fixture(autouse=True)
async def _heads_gateway_closed_after_its_last_test(request):
    """The heads workers are not held through the rest of the session (memory: one process each)."""
    heads = request.getfixturevalue("clip_heads") if request.node.get_closest_marker(LAST_ON_HEADS) else None
    yield
    if heads is not None:
        await heads.aclose()


LAST_ON_HEADS = "last_on_the_heads_gateway"
LAST_ON_QWEN3VL = "last_on_the_qwen3vl_server"


def pytest_configure(config):
    config.addinivalue_line("markers", "stops_the_session_vllm: stops the session's vLLM server, so it runs last")
    config.addinivalue_line("markers", "needs_geneval_venv: uses .venv-geneval, so it runs after the others "
                            "(scripts/test.sh may still be building it: JG_SETUP_PENDING)")
    config.addinivalue_line("markers", f"{LAST_ON_HEADS}: the last test of the session on clip_heads")
    config.addinivalue_line("markers", f"{LAST_ON_QWEN3VL}: the last test of the session on vllm_qwen3vl")


@pytest.hookimpl(trylast=True)  # after -k / -m deselected what does not run
def pytest_collection_modifyitems(config, items):
    # A test that stops the shared server runs after every test that needs it, and before it the tests
    # that need the GenEval venv, whose build (scripts/test.sh) may still run when the stage starts
    # (stable order otherwise).
    items.sort(key=lambda item: (item.get_closest_marker("stops_the_session_vllm") is not None,
                                 item.get_closest_marker("needs_geneval_venv") is not None))
    # The tests on the session's heads gateway run one after another, where the first of them stands
    # (the others keep their order), and the gateway closes after the last of them; so do the tests
    # on the Qwen3-VL server, which stops after the last of them.
    for fixture, marker in (("clip_heads", LAST_ON_HEADS), ("vllm_qwen3vl", LAST_ON_QWEN3VL)):
        users = [item for item in items if fixture in getattr(item, "fixturenames", ())]
        if users:
            first, chosen = items.index(users[0]), set(users)
            others = [item for item in items if item not in chosen]
            items[:] = others[:first] + users + others[first:]
            users[-1].add_marker(marker)
