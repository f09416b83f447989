"""Redis outage and persistence: a real redis-server stopped for
~10 s while cosmos-rl requests are pending; every accepted request completes with a real result
after it returns. And the start-up check of Redis persistence (store.persistence)."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from judge_gateway.store import RedisStore, StoreError
from tests.support.cosmos_client import HEADERS, enqueue_body, image_batch
from tests.support.fake_openai import FakeOpenAIServer, free_port
from tests.support.redis_server import RedisServer
from tests.support.reliability import (
    META,
    enqueue,
    figures,
    lost,
    resolve_all,
    slow_cosmos_config,
)

OUTAGE_S = 10.0
PENDING = 6


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=3.0).start()  # requests are pending when Redis goes
    yield server
    server.stop()


@pytest.mark.parametrize("queue", [False, True], ids=["store", "durable-queue"])
async def test_pending_requests_survive_a_redis_outage(slow_backend, tmp_path, queue):
    redis = RedisServer(tmp_path, persist=True)
    gw = Gateway(validate_config(slow_cosmos_config(slow_backend.base_url, redis.url, f"jg-outage-{free_port()}:",
                                                    queue=queue)))
    app = create_app(gw)
    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30) as client:
            uids = await enqueue(client, PENDING)
            await asyncio.sleep(0.5)  # scoring has started (the backend answers after 3 s)
            redis.stop()
            down_at = time.monotonic()
            during = await client.post("/api/reward/pull", data={"uuid": uids[0], "type": "slow"})
            enq = await enqueue_once(client)  # a valid one: it reaches the store
            await asyncio.sleep(OUTAGE_S - (time.monotonic() - down_at))
            redis.start()
            back_at = time.monotonic()
            results = await resolve_all(client, uids, timeout=30)
            recovered_s = time.monotonic() - back_at
    finally:
        await gw.aclose()
        redis.stop()
    missing = lost(uids, results)
    figures(f"redis outage ({'durable queue' if queue else 'store only'})", accepted=PENDING,
            outage_s=OUTAGE_S, recovered_in_s=f"{recovered_s:.1f}", accepted_lost=len(missing),
            pull_during_outage=during.status_code)
    assert missing == [], {u: results.get(u) for u in missing}
    # during the outage: a result finished meanwhile is served from memory (200), else the store's 503
    assert during.status_code in (200, 503, 425), during.text  # 425: pending (cosmos_rl.pending_status)
    if during.status_code == 503:
        assert during.headers["Retry-After"] == "2"
    assert enq.status_code == 503 and enq.headers["Retry-After"] == "2", enq.text
    for body in results.values():
        assert body["status"] == "done" and body["valid"] == [True, True]
        assert all(s["valid"] and s["raw"] is not None for s in body["judge_scores"])


async def test_the_store_answers_503_with_retry_after_while_redis_is_down(slow_backend, tmp_path):
    redis = RedisServer(tmp_path)
    gw = Gateway(validate_config(slow_cosmos_config(slow_backend.base_url, redis.url, "jg-down:", queue=False)))
    app = create_app(gw)
    redis.stop()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=30) as client:
            r = await enqueue_once(client)
    finally:
        await gw.aclose()
    assert r.status_code == 503 and r.headers["Retry-After"] == "2"
    assert "result store unavailable" in r.json()["message"]


async def enqueue_once(client: httpx.AsyncClient) -> httpx.Response:
    return await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)), headers=HEADERS)


# ---- persistence ------------------------------------------------------------------------------


@pytest.mark.parametrize("persist", [False, True], ids=["no-persistence", "aof"])
async def test_persistence_is_checked_at_start_up(tmp_path, caplog, persist):
    redis = RedisServer(tmp_path, persist=persist)
    store = RedisStore(redis.url, prefix="jg-persist:", ttl_s=60, max_entries=10)
    try:
        with caplog.at_level(logging.WARNING, logger="judge_gateway.store"):
            warned = await store.check_persistence("warn")
        if persist:
            assert warned is None and await store.check_persistence("refuse") is None
            assert "AOF" not in caplog.text
        else:
            assert "neither AOF (appendonly = no) nor RDB snapshots" in warned
            assert "store.persistence = warn" in caplog.text
            with pytest.raises(StoreError, match="store.persistence = refuse: Redis has neither AOF"):
                await store.check_persistence("refuse")
        assert await store.check_persistence("off") is None
    finally:
        await store.aclose()
        redis.stop()


@pytest.mark.parametrize("extra, refusal", [
    ([], "neither AOF"),
    # redis-server's own snapshots when no config names others: a kill loses what came since the last
    (["--save", "3600 1 300 100 60 10000"], "RDB snapshots only"),
], ids=["no-persistence", "rdb-only"])
async def test_a_gateway_refuses_to_start_on_redis_without_aof(tmp_path, extra, refusal):
    """store.persistence = refuse (the default): no uuid is given out that a Redis kill would lose."""
    redis = RedisServer(tmp_path, extra=extra)
    config = slow_cosmos_config("http://127.0.0.1:9/v1", redis.url, "jg-refuse:", queue=False)
    del config["store"]["persistence"]
    gw = Gateway(validate_config(config))
    app = create_app(gw)
    try:
        with pytest.raises(StoreError, match=f"store.persistence = refuse: .*{refusal}"):
            async with app.router.lifespan_context(app):
                pass
    finally:
        await gw.aclose()
        redis.stop()


async def test_results_survive_a_redis_restart_with_aof(tmp_path):
    """What the docs ask of a deployment: with AOF, a killed Redis keeps every stored result."""
    redis = RedisServer(tmp_path, persist=True)
    store = RedisStore(redis.url, prefix="jg-aof:", ttl_s=600, max_entries=1000)
    try:
        for i in range(52):
            await store.put(f"k{i}", {"v": i})
        redis.proc.kill()  # SIGKILL: no save on the way out
        redis.proc.wait()
        redis.start()
        got = [await retrying_get(store, f"k{i}") for i in range(52)]
    finally:
        await store.aclose()
        redis.stop()
    assert got == [{"v": i} for i in range(52)]


async def retrying_get(store: RedisStore, key: str) -> dict | None:
    for _ in range(20):
        try:
            return await store.get(key)
        except StoreError:
            await asyncio.sleep(0.1)
    return await store.get(key)
