"""What one request must not do to everyone else: stall the event loop with media crafted for the
media cache, or move a watched run's window clock so that every later sample is dropped."""

from __future__ import annotations

import asyncio
import base64
import time

import httpx

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import ImageMedia
from judge_gateway.media.cache import fingerprint
from judge_gateway.server import create_app
from tests.support.colliding_media import colliding_pngs
from tests.support.fake_openai import FakeOpenAIServer, free_port
from tests.support.reliability import figures

COLLIDING = 4096  # server.max_samples_per_request's default
HEALTHZ_EVERY_S = 0.02
# /healthz must answer at least this often while the request is scored: the quadratic
# confirmations held it for 34 s (bench/RESULTS.md); a bound this loose fails only on such a stall, not
# on the garbage collector's full passes over a request of 4,096 samples (0.5-0.9 s each here).
HEALTHZ_BOUND_S = 5.0


async def test_media_crafted_to_share_a_fingerprint_do_not_stall_the_gateway():
    """4,096 different PNG files of one length and one crc32 in one request: the media cache tells
    them apart by sha256, once each; /healthz keeps answering while the request is scored."""
    files = colliding_pngs(COLLIDING)
    assert len({fingerprint(ImageMedia.validate(f)) for f in files[:64]}) == 1
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: each cell fails within its deadline
    gw = Gateway(validate_config({
        "backends": {"dead": {"model": "m", "base_urls": [dead], "max_retries": 0, "connect_timeout_s": 1}},
        "judges": {"quality": {"kind": "yes_no", "backend": "dead", "template": "image_quality@1", "deadline_s": 1}},
        "server": {"admission": {"max_wait_s": 60}},
    }))
    app = create_app(gw)
    body = {"samples": [{"prompt": f"p{i}", "image": base64.b64encode(f).decode()} for i, f in enumerate(files)]}
    # The gaps between /healthz answers polled every 20 ms: the client shares the gateway's event
    # loop, so a loop held by one request shows as a gap (both the poll's sleep and its answer wait).
    gaps: list[float] = []
    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=600) as client:
            scoring = asyncio.ensure_future(client.post("/v1/rewards", json=body))
            started = last = time.monotonic()
            while not scoring.done():
                r = await client.get("/healthz")
                assert r.status_code == 200
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                await asyncio.sleep(HEALTHZ_EVERY_S)
            wall = time.monotonic() - started
            reply = scoring.result()
    finally:
        await gw.aclose()
    figures("colliding media", images=COLLIDING, body_mb=f"{sum(map(len, files)) * 4 / 3 / 1e6:.1f}",
            request_s=f"{wall:.1f}", healthz_answers=len(gaps), healthz_longest_gap_s=f"{max(gaps):.3f}",
            status=reply.status_code)
    assert reply.status_code == 200, reply.text[:500]
    results = reply.json()["results"]
    assert len(results) == COLLIDING
    assert {r["scores"]["quality"]["error"]["code"] for r in results} <= {"backend_unavailable", "timeout"}
    assert max(gaps) < HEALTHZ_BOUND_S, sorted(gaps)[-5:]


# ---- the watch's step clock ------------------------------------------------------------------------


def watch_config(base_url: str, folder) -> dict:
    backend = {"base_urls": [base_url], "timeout_s": 10}
    return {
        "backends": {"yes": {"model": "fake-yes", **backend}, "bright": {"model": "fake-p-from-image", **backend}},
        "judges": {"quality": {"kind": "yes_no", "backend": "yes", "template": "image_quality@1"},
                   "shade": {"kind": "yes_no", "backend": "bright", "template": "image_quality@1", "default": False}},
        "watch": {"enabled": True, "shadows": {"quality": ["shade"]}, "sample_rate": 1.0, "seed": 0,
                  "folder": str(folder), "window_s": 3600, "baseline_windows": 1},
    }


async def test_one_request_with_step_2_53_does_not_blind_the_watch(tmp_path):
    """Steps 0-2, one request with step 2^53, then steps 3-5 of the same run: the later steps are
    windowed (before: every later sample was dropped as late_window until the run left memory).
    A negative step is the request's bad input; a step back to a sealed window is late and moves
    nothing."""
    backend = FakeOpenAIServer().start()
    gw = Gateway(validate_config(watch_config(backend.base_url, tmp_path / "watch")))
    app = create_app(gw)
    watch = app.state.watch
    image = base64.b64encode(colliding_pngs(1)[0]).decode()

    def body(step: int) -> dict:
        return {"run": "exp", "step": step, "samples": [{"prompt": f"s{step}-{i}", "image": image} for i in range(3)]}

    async def send(client: httpx.AsyncClient, step: int) -> int:
        offered = watch._counts["offered"]
        r = await client.post("/v1/rewards", json=body(step))
        if r.status_code == 200:  # the watch takes the samples once the response is sent
            deadline = time.monotonic() + 20
            while watch._counts["offered"] < offered + 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return r.status_code

    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as client:
            codes = [await send(client, step) for step in (0, 1, 2)]
            huge = await send(client, 2**53)
            later = [await send(client, step) for step in (3, 4, 5)]
            negative = (await client.post("/v1/rewards", json=body(-1))).status_code
            deadline = time.monotonic() + 30  # steps 0-4 sealed (step 5's window is open)
            while len(watch.report(run="exp", windows=100).runs[0].windows) < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            back = await send(client, 1)
            six = await send(client, 6)
            deadline = time.monotonic() + 30  # every sample scored or shed, and steps 0-5 sealed
            while time.monotonic() < deadline:
                report = watch.report(run="exp", windows=100)
                if report.queue.scored + sum(report.queue.shed.values()) >= 27 and len(report.runs[0].windows) >= 6:
                    break
                await asyncio.sleep(0.05)
    finally:
        await gw.aclose()
        backend.stop()
    run = report.runs[0]
    sealed_steps = [w.steps for w in run.windows]
    shed = report.queue.shed
    figures("watch step 2^53", windowed_after_it=sum(w.judges["quality"].scored for w in run.windows[3:]),
            shed=dict(shed), sealed_windows=len(run.windows), negative_status=negative)
    assert codes == later == [200] * 3 and huge == back == six == 200
    assert negative == 422
    assert sealed_steps == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [5, 5]], sealed_steps
    assert all(w.judges["quality"].scored == 3 for w in run.windows)
    assert run.open_samples == 3  # step 6
    assert shed == {"step_jump": 3, "late_window": 3}, shed
