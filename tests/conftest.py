"""Shared fixtures: small media, fake fault-injection backends, configs built in code."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# Everything outside tests/unit needs what scripts/test.sh sets up (the vLLM CPU server, head venvs,
# redis-server, chromium, a Ray cluster): `pytest -m "not integration"` runs the unit tests only.
SET_UP_DIRS = ("integration", "reliability", "ray")


def pytest_collection_modifyitems(config, items):
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        if any(Path(str(item.path)).resolve().is_relative_to(tests_dir / d) for d in SET_UP_DIRS):
            item.add_marker(pytest.mark.integration)


def png_bytes(seed: int = 0, size: tuple[int, int] = (64, 48)) -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="session")
def fake_backend():
    from tests.support.fake_openai import FakeOpenAIServer

    server = FakeOpenAIServer(stall_s=20.0, flaky_failures=1).start()
    yield server
    server.stop()
