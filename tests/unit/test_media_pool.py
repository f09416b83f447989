"""The media pool (media/pool.py) and the per-request media cache's content identities: work runs
off the event loop on a bounded pool, a backlog past [media] max_pending refuses new requests
(429 with Retry-After) while admitted ones finish, and equal content is encoded once."""

from __future__ import annotations

import asyncio
import base64
import threading

import httpx
import numpy as np

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.media import (
    ImageEncoding,
    ImageMedia,
    MediaCache,
    VideoMedia,
    VideoSampling,
)
from judge_gateway.media.pool import MediaPool
from judge_gateway.server import create_app
from tests.conftest import png_bytes
from tests.support.fake_openai import FakeOpenAIServer


async def test_the_pool_counts_pending_work_and_says_when_it_is_overloaded() -> None:
    pool = MediaPool(workers=1, max_pending=2)
    gate = threading.Event()
    first = asyncio.ensure_future(pool.run(gate.wait))
    second = asyncio.ensure_future(pool.run(lambda: threading.get_ident()))
    await asyncio.sleep(0.05)
    assert (pool.pending, pool.overloaded) == (2, True)  # one running, one queued behind it
    loop_thread = threading.get_ident()
    gate.set()
    assert await first is True and await second != loop_thread  # ran on the pool's thread
    assert (pool.pending, pool.done, pool.overloaded) == (0, 2, False)
    pool.shutdown()


async def test_a_media_backlog_refuses_new_requests_and_the_admitted_finish() -> None:
    backend = FakeOpenAIServer().start()
    try:
        cfg = validate_config({
            "media": {"workers": 1, "max_pending": 1},
            "server": {"admission": {"retry_after_s": 3}},
            "backends": {"vlm": {"model": "fake-yes", "base_urls": [backend.base_url], "max_retries": 0}},
            "judges": {"quality": {"kind": "yes_no", "backend": "vlm", "template": "image_quality@1",
                                   "image": {"format": "jpeg"}}}})
        gateway = Gateway(cfg)
        app = create_app(gateway, api_keys=[])
        body = {"samples": [{"prompt": "a cat", "image": base64.b64encode(png_bytes()).decode()}]}
        gate = threading.Event()
        async with app.router.lifespan_context(app), \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            blocker = asyncio.ensure_future(gateway.media_pool.run(gate.wait))  # the pool's one slot, taken
            await asyncio.sleep(0.05)
            refused = await client.post("/v1/rewards", json=body)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
            assert "media.max_pending = 1" in refused.json()["error"]["message"]
            gate.set()
            await blocker
            ok = await client.post("/v1/rewards", json=body)
            assert ok.status_code == 200 and ok.json()["results"][0]["valid"]
            metrics = (await client.get("/metrics")).text
            assert 'reason="media_backlog"' in metrics
    finally:
        backend.stop()


async def test_equal_content_is_encoded_once_and_shares_a_replica_key() -> None:
    cache = MediaCache(MediaPool(workers=2))
    a, b = ImageMedia.validate(png_bytes(1)), ImageMedia.validate(png_bytes(1))  # two objects, one content
    other = ImageMedia.validate(png_bytes(2))
    enc = ImageEncoding(format="jpeg")
    assert (await cache.image(a, enc)).data_url == (await cache.image(b, enc)).data_url
    await cache.image(other, enc)
    assert (cache.encodes, cache.hits) == (2, 1)
    assert cache.affinity(a) == cache.affinity(b) != cache.affinity(other)
    # arrays, and a large clip compared on the pool: equal content, one encode
    clip = np.random.default_rng(0).integers(0, 256, (6, 256, 256, 3), dtype=np.uint8)
    v1, v2 = VideoMedia.from_array(clip, 8), VideoMedia.from_array(clip.copy(), 8)
    v3 = VideoMedia.from_array(clip, 4)  # another frame rate is another video
    changed = clip.copy()
    changed[5, 255, 255, 0] ^= 1  # one byte, outside the sampled fingerprint's reach
    v4 = VideoMedia.from_array(changed, 8)
    sampling = VideoSampling()
    results = await asyncio.gather(*(cache.video(v, sampling) for v in (v1, v2, v3, v4, v1)))
    assert results[0] is results[1] is results[4]
    assert cache.encodes_by_kind["video"] == 3
    assert cache.affinity(v1) == cache.affinity(v2)


async def test_media_sharing_one_fingerprint_are_told_apart_in_linear_work() -> None:
    """Images crafted to share the cheap fingerprint (length and crc32) are told apart by their
    sha256, each hashed once: the work is each medium's bytes once, whatever the count (a byte
    comparison against every earlier candidate was quadratic). A medium alone in its bucket is
    never hashed; the same bytes sent again are the same content."""
    from judge_gateway.media.cache import fingerprint
    from tests.support.colliding_media import colliding_pngs

    files = colliding_pngs(300)
    media = [ImageMedia.validate(f) for f in files]
    assert len({fingerprint(m) for m in media}) == 1 and len(set(files)) == 300
    cache = MediaCache(MediaPool(workers=1))
    ids = [await cache._content_id(m) for m in media]
    assert len(set(ids)) == 300
    assert cache.digested_bytes == sum(len(f) for f in files)  # each once: linear
    again = ImageMedia.validate(bytes(files[123]))  # the same bytes in another object
    assert await cache._content_id(again) == ids[123]
    alone = MediaCache(MediaPool(workers=1))
    await alone._content_id(ImageMedia.validate(png_bytes(5)))
    await alone._content_id(ImageMedia.validate(png_bytes(6)))
    assert alone.digested_bytes == 0
