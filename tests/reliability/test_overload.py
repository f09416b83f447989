"""10x overload with the shipped admission defaults (no [server.admission] bounds set): a backend
of 4 slots, a GRPO group of 4 samples per request, 10 requests at once (10x the backend's
capacity in calls), another backend configured for a judge the requests do not name, as the
shipped configs have. The excess is refused at once with 429 + Retry-After (native) and 503 +
Retry-After (Flow-Factory); what is admitted is answered in about the time the backend takes.
(Before: the bound was the summed capacity of every judge, 68 requests here: all 10 were queued
inside the backend pool and none refused.)"""

from __future__ import annotations

import asyncio
import base64
import statistics
import time

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.reliability import figures

STALL_S = 0.6  # the backend's answer time
SLOTS = 4  # its replicas x max_concurrency
GROUP = 4  # samples per request
REQUESTS = 10  # 10 x 4 calls at once: 10x the backend's slots


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=STALL_S).start()
    yield server
    server.stop()


def config(base_url: str) -> dict:
    return {
        "backends": {"vlm": {"model": "fake-stall", "base_urls": [base_url], "max_concurrency": SLOTS,
                             "timeout_s": 30},
                     "other": {"model": "fake-yes", "base_urls": [base_url], "max_concurrency": 64}},
        "judges": {"quality": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1"},
                   "aside": {"kind": "yes_no", "backend": "other", "template": "image_quality@1", "default": False}},
        "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}},
    }


def native(i: int) -> dict:
    return {"samples": [{"prompt": f"a cat {i}", "image": base64.b64encode(png_bytes(i * GROUP + k)).decode()}
                        for k in range(GROUP)]}


def flow(i: int) -> dict:
    images = [base64.b64encode(png_bytes(i * GROUP + k)).decode() for k in range(GROUP)]
    return {"prompt": [f"a cat {i}"] * GROUP, "image": images, "video": None, "condition_images": None,
            "condition_videos": None}


@pytest.mark.parametrize("api, path, body, refused_status", [
    ("native", "/v1/rewards", native, 429), ("flow_factory", "/flow-factory/t2i/compute", flow, 503)])
async def test_10x_overload_is_refused_with_retry_after_by_default(slow_backend, api, path, body, refused_status):
    gw = Gateway(validate_config(config(slow_backend.base_url)))
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=120) as client:
            async def one(i: int) -> tuple[httpx.Response, float]:
                t0 = time.monotonic()
                r = await client.post(path, json=body(i))
                return r, time.monotonic() - t0

            results = await asyncio.gather(*(one(i) for i in range(REQUESTS)))
            ready = (await client.get("/readyz")).json()
    finally:
        await gw.aclose()
    ok = [s for r, s in results if r.status_code == 200]
    refused = [(r, s) for r, s in results if r.status_code == refused_status]
    figures(f"10x overload, shipped admission defaults ({api})", requests=REQUESTS, calls_each=GROUP,
            backend_slots=SLOTS, ok=len(ok), refused=len(refused),
            ok_p50_s=f"{statistics.median(ok):.2f}" if ok else None,
            refused_max_s=f"{max(s for _, s in refused):.3f}" if refused else None,
            max_active=ready["admission"]["max_active"])
    assert len(ok) + len(refused) == REQUESTS, [r.status_code for r, _ in results]
    assert refused, "nothing refused at 10x the backend's capacity"
    assert all(r.headers["Retry-After"] == "2" for r, _ in refused)
    assert len(ok) >= 2  # the backend's slots and its waiting room are used
    assert ready["admission"]["backends"]["vlm"]["slots"] == SLOTS
