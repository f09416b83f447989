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
from tests.support.fake_openai import free_port
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
