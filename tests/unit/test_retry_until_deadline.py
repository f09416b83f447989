"""Transient backend faults are retried with back-off until the call's own deadline, not a fixed
count: a fault shorter than the deadline gives real scores (cosmos-rl: no fills), one longer than
it ends at the deadline, never after. Scores never carry a backend's URL or its error body."""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from judge_gateway import backends
from judge_gateway.backends import BackendPool, BackendUnavailable
from judge_gateway.config import BackendConfig, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import FakeOpenAIServer, free_port
from tests.support.reliability import enqueue, lost, resolve_all

YES_NO = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 1, "logprobs": True, "top_logprobs": 5}
DOWN_S = 4.0  # longer than the old fixed retries (~2 s of back-off in all), far shorter than any deadline


async def test_a_503_window_shorter_than_the_deadline_is_waited_out():
    down_s = 2.5  # the old fixed count (2 retries) gave up after ~0.6 s
    server = FakeOpenAIServer(down_s=down_s).start()
    pool = BackendPool("p", BackendConfig(model="fake-down", base_urls=[server.base_url]))  # the defaults
    try:
        t0 = time.monotonic()
        with backends.deadline_at(time.monotonic() + 30):
            reply = await pool.chat(**YES_NO)
        waited = time.monotonic() - t0
    finally:
        await pool.aclose()
        server.stop()
    assert reply["choices"][0]["logprobs"]["content"], reply
    assert waited >= down_s * 0.9 and server.counters["down_refused"] >= 3, (waited, server.counters)


async def test_retries_stop_at_the_deadline_not_after():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    pool = BackendPool("p", BackendConfig(model="m", base_urls=[dead], connect_timeout_s=1, eject_cooldown_s=0))
    try:
        t0 = time.monotonic()
        with backends.deadline_at(time.monotonic() + 1.5), pytest.raises(BackendUnavailable) as err:
            await pool.chat(**YES_NO)
        took = time.monotonic() - t0
    finally:
        await pool.aclose()
    assert took < 2.5, took  # ended by its deadline (plus one attempt's connect), not retry_for_s = 30
    assert dead not in str(err.value) and "127.0.0.1" not in str(err.value), err.value


async def test_cosmos_rl_request_through_a_short_fault_comes_back_with_real_scores():
    """The issue's fills case: faults of 12-16 s turned 90 of 2,442 accepted requests into filled
    samples because the retries (a fixed count) ended first. Here, with the default retry
    settings, a 4 s fault is waited out: every sample scored, none filled."""
    server = FakeOpenAIServer(down_s=DOWN_S).start()
    cfg = {"backends": {"b": {"model": "fake-down", "base_urls": [server.base_url]}},
           "judges": {"slow": {"kind": "yes_no", "backend": "b", "template": "image_quality@1"}},
           "cosmos_rl": {"request_timeout_s": 60}}
    gw = Gateway(validate_config(cfg))
    app = create_app(gw)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as c:
            uids = await enqueue(c, 3)
            results = await resolve_all(c, uids, timeout=50)
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
        server.stop()
    assert lost(uids, results) == [], results  # done, every sample valid, none filled


async def test_scores_and_readiness_never_show_backend_urls_or_bodies():
    dead = f"http://127.0.0.1:{free_port()}/v1"
    fake = FakeOpenAIServer().start()
    cfg = {"backends": {"down": {"model": "m", "base_urls": [dead], "max_retries": 0, "connect_timeout_s": 1},
                        "refuses": {"model": "fake-400", "base_urls": [fake.base_url]}},
           "judges": {"down": {"kind": "yes_no", "backend": "down", "template": "image_quality@1"},
                      "refuses": {"kind": "yes_no", "backend": "refuses", "template": "image_quality@1"}},
           "flow_factory": {"profiles": {"t2i": {"judges": {"down": 1.0}}}}}
    gw = Gateway(validate_config(cfg))
    app = create_app(gw)
    image = base64.b64encode(png_bytes(0)).decode()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as c:
            scored = await c.post("/v1/rewards", json={"samples": [{"prompt": "a cat", "image": image}]})
            ready = await c.get("/readyz")
            judges = await c.get("/v1/judges")
            ff = await c.post("/flow-factory/t2i/compute", json={"prompt": ["a"], "image": [image], "video": None,
                                                                 "condition_images": None, "condition_videos": None})
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
        fake.stop()
    cells = scored.json()["results"][0]["scores"]
    assert cells["down"]["error"]["code"] == "backend_unavailable"
    assert cells["refuses"]["error"]["code"] == "backend_error" and "HTTP 400" in cells["refuses"]["error"]["message"]
    assert ready.status_code == 503 and "replica 1 of 1" in ready.text
    assert ff.status_code == 503
    for reply in (scored, ready, judges, ff):
        for secret in (dead, fake.base_url, "127.0.0.1", "bad request from fake"):
            assert secret not in reply.text, (secret, reply.text[:500])
