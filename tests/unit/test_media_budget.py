"""The process-wide decoded-media budget: requests reserve what their media decode to before they
score, wait for room (server.admission.max_wait_s) or are refused with Retry-After (429 native,
503 Flow-Factory), and a timed-out or cancelled request stops its decode threads and frees what
it held. Budget and bounds are in /metrics."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import VideoMedia
from judge_gateway.schema import RewardRequest, SampleInput
from judge_gateway.server import create_app
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.hostile_media import mp4_of_black_frames, png_declaring

ROOT = Path(__file__).resolve().parents[2]
PNG = base64.b64encode(png_declaring(1200, 1000)).decode()  # 1.2 M pixels decoded
MEDIA = {"max_image_pixels": 2_000_000, "max_video_pixels": 2_000_000, "max_request_pixels": 2_000_000,
         "max_process_pixels": 2_000_000}  # room for one such request at a time


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=0.6).start()
    yield server
    server.stop()


def budget_config(base_url: str, max_wait_s: float) -> dict:
    return {"media": MEDIA, "server": {"admission": {"max_wait_s": max_wait_s, "retry_after_s": 4}},
            "backends": {"slow": {"model": "fake-stall", "base_urls": [base_url]}},
            "judges": {"quality": {"kind": "yes_no", "backend": "slow", "template": "image_quality@1"}},
            "flow_factory": {"profiles": {"t2i": {"judges": {"quality": 1.0}}}}}


async def _two_at_once(client: httpx.AsyncClient, api: str) -> list[httpx.Response]:
    async def one() -> httpx.Response:
        if api == "native":
            return await client.post("/v1/rewards", json={"samples": [{"prompt": "a cat", "image": PNG}]})
        return await client.post("/flow-factory/t2i/compute", json={
            "prompt": ["a cat"], "image": [PNG], "video": None, "condition_images": None, "condition_videos": None})
    return list(await asyncio.gather(one(), one()))


@pytest.mark.parametrize("api, refused", [("native", 429), ("flow_factory", 503)])
async def test_a_spent_budget_is_waited_for_then_refused_with_retry_after(slow_backend, api, refused):
    for max_wait_s, expect in ((5.0, [200, 200]), (0.2, [200, refused])):
        gw = Gateway(validate_config(budget_config(slow_backend.base_url, max_wait_s)))
        app = create_app(gw)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                         timeout=60) as client:
                replies = await _two_at_once(client, api)
                metrics = (await client.get("/metrics")).text
        finally:
            await gw.aclose()
        assert sorted(r.status_code for r in replies) == expect, [r.text for r in replies]
        for r in replies:
            if r.status_code == refused:
                assert r.headers["Retry-After"] == "4"
                assert "media.max_process_pixels = 2000000" in r.text, r.text
        assert 'judge_gateway_media_budget_pixels{state="limit"} 2e+06' in metrics
        assert 'judge_gateway_media_budget_pixels{state="in_use"} 0.0' in metrics  # all given back
        if expect[1] == refused:
            assert f'judge_gateway_admission_refused_total{{api="{api}",reason="media_budget"}} 1.0' in metrics


async def test_budget_grants_in_order_and_a_waiter_that_leaves_takes_nothing():
    from judge_gateway.media.budget import BudgetSpent, MediaBudget

    budget = MediaBudget(10, retry_after_s=1)
    await budget.acquire(6, wait_s=None)
    big = asyncio.ensure_future(budget.acquire(8, wait_s=None))  # waits: 6 + 8 > 10
    small = asyncio.ensure_future(budget.acquire(2, wait_s=None))  # fits, but may not overtake the big one
    await asyncio.sleep(0.01)
    assert not big.done() and not small.done() and budget.waiting == 2
    with pytest.raises(BudgetSpent, match="media.max_process_pixels = 10"):
        await budget.acquire(5, wait_s=0.05)
    big.cancel()  # the client left: the one behind it goes in
    await asyncio.sleep(0.01)
    assert small.done() and budget.in_use == 8 and budget.waiting == 0
    budget.release(6)
    budget.release(2)
    assert budget.in_use == 0


def test_the_budget_holds_a_whole_request():
    with pytest.raises(ConfigError, match="max_process_pixels must be >= max_request_pixels"):
        validate_config({"media": {**MEDIA, "max_process_pixels": 1_000_000}})


def test_timed_out_requests_leave_no_memory_behind():
    """The issue: a request whose judge hit deadline_s mid-encode left 1.7 GB held by an idle
    gateway, 3.5 GB after two (this probe, 60 frames of 1080p, before the fix: +444 MB, +937 MB)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "tests.support.timeout_rss", "2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["cells"] == ["timeout", "timeout"], result
    assert max(result["rss_after_mb"]) < 100, result


async def test_a_cancelled_request_stops_decoding_at_the_next_frame(fake_backend, monkeypatch):
    """A client that leaves cancels its request; the thread decoding its video stops at the next
    frame (media/scope.py) instead of decoding a clip nobody waits for."""
    decoded: list[float] = []
    original = VideoMedia._decode_container

    def counting(self, idx, transform=None):
        for item in original(self, idx, transform):
            decoded.append(time.monotonic())
            time.sleep(0.02)  # a slow decoder: the cancel lands mid-clip
            yield item

    monkeypatch.setattr(VideoMedia, "_decode_container", counting)
    video = VideoMedia.from_mp4(mp4_of_black_frames(120, 64, 64))
    gw = Gateway(validate_config({
        "backends": {"yes": {"model": "fake-yes", "base_urls": [fake_backend.base_url]}},
        "judges": {"v": {"kind": "yes_no", "backend": "yes", "template": "cosmos_reason1@1",
                         "video": {"num_frames": 100}}}}))  # not every frame: decoded, not passed through
    try:
        task = asyncio.ensure_future(gw.score(RewardRequest(samples=[SampleInput(prompt="a", video=video)])))
        async with asyncio.timeout(30):
            while not decoded:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at_cancel = len(decoded)
        await asyncio.sleep(0.5)
    finally:
        await gw.aclose()
    assert 0 < at_cancel < 120 and len(decoded) == at_cancel, (at_cancel, len(decoded))
