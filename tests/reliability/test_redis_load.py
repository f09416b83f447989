"""The Redis store under load and under a kill: a real redis-server, cosmos-rl requests pending.

- 200 trainers polling at once (and 34 enqueueing meanwhile) with Redis healthy: no 503 (the
  client library's default pool raised MaxConnectionsError past 100 operations at once).
- redis-server SIGKILLed while trainers enqueue, restarted as `serve` starts it (AOF, fsync every
  second): every uuid the gateway gave out resolves with a real result.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import httpx
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.server import create_app
from tests.support.cosmos_client import HEADERS, enqueue_body, image_batch
from tests.support.fake_openai import FakeOpenAIServer, free_port
from tests.support.redis_server import RedisServer
from tests.support.reliability import META, enqueue, figures, lost, resolve_all, slow_cosmos_config

PULLERS = 200
PULLS_EACH = 4
ENQUEUES = 34


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=3.0).start()  # requests stay pending while the pullers poll
    yield server
    server.stop()


async def test_200_pullers_at_once_get_no_503(slow_backend, tmp_path):
    redis = RedisServer(tmp_path)
    gw = Gateway(validate_config(slow_cosmos_config(slow_backend.base_url, redis.url, f"jg-storm-{free_port()}:",
                                                    queue=False)))
    app = create_app(gw)
    pulls: Counter[int] = Counter()
    reasons: Counter[str] = Counter()
    enqueued: list[int] = []
    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as client:
            uids = await enqueue(client, 4)
            start = asyncio.Event()

            async def puller(seed: int) -> None:
                rng = random.Random(seed)
                await start.wait()
                for _ in range(PULLS_EACH):
                    r = await client.post("/api/reward/pull", data={"uuid": rng.choice(uids), "type": "slow"})
                    pulls[r.status_code] += 1
                    if r.status_code >= 500:
                        reasons[r.json().get("message", "")[:120]] += 1

            async def trainer() -> None:
                await start.wait()
                r = await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)),
                                      headers=HEADERS)
                enqueued.append(r.status_code)

            tasks = [asyncio.ensure_future(puller(i)) for i in range(PULLERS)]
            tasks += [asyncio.ensure_future(trainer()) for _ in range(ENQUEUES)]
            started = time.monotonic()
            start.set()
            await asyncio.gather(*tasks)
            wall = time.monotonic() - started
    finally:
        await gw.aclose()
        redis.stop()
    codes = Counter(enqueued)
    figures("200-puller storm", pullers=PULLERS, pulls=sum(pulls.values()), pull_codes=dict(pulls),
            enqueues=dict(codes), wall_s=f"{wall:.1f}", errors=dict(reasons))
    assert pulls[503] == 0 and not reasons, reasons
    assert set(pulls) <= {200, 425}  # scored, or still pending (cosmos_rl.pending_status's default, 425)
    assert codes == {200: ENQUEUES}, codes


# ---- Redis killed while trainers enqueue ----------------------------------------------------------

ENQUEUERS = 4
BEFORE_KILL_S = 2.0
OUTAGE_S = 1.0
AFTER_S = 1.0


async def kill_redis_while_enqueueing(client: httpx.AsyncClient, kill, restart) -> dict:
    """Trainers enqueue back to back; Redis is SIGKILLed after BEFORE_KILL_S, restarted OUTAGE_S
    later, and they go on for AFTER_S. Every uuid given out is then pulled until it is final."""
    accepted: list[str] = []
    refused: Counter[int] = Counter()
    stop = asyncio.Event()

    async def trainer() -> None:
        while not stop.is_set():
            try:
                r = await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)),
                                      headers=HEADERS)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                accepted.append(r.json()["uuid"])
            else:
                refused[r.status_code] += 1
                await asyncio.sleep(0.1)

    trainers = [asyncio.ensure_future(trainer()) for _ in range(ENQUEUERS)]
    await asyncio.sleep(BEFORE_KILL_S)
    before_kill = len(accepted)
    kill()
    await asyncio.sleep(OUTAGE_S)
    restart()
    await asyncio.sleep(AFTER_S)
    stop.set()
    await asyncio.gather(*trainers)
    results = await resolve_all(client, accepted, timeout=90)
    missing = lost(accepted, results)
    never = sum(1 for u in missing if results.get(u, {}).get("code") == 404)
    return {"accepted": len(accepted), "accepted_before_kill": before_kill, "refused": dict(refused),
            "lost": len(missing), "never_accepted_404": never}


async def test_a_redis_sigkill_loses_no_accepted_request(tmp_path):
    """The Redis `serve` starts for a rewards.toml (AOF, appendfsync everysec), SIGKILLed while
    4 trainers enqueue and restarted the same way: every uuid the gateway gave out resolves with a
    real result (with RDB snapshots alone, 7 of 37 were lost: bench/RESULTS.md; the gateway now
    refuses such a Redis, test_redis_outage.py)."""
    from judge_gateway.cli import local_redis

    port = free_port()
    procs = [local_redis.ensure_redis("127.0.0.1", port, tmp_path)]
    backend = FakeOpenAIServer(stall_s=0.2).start()
    config = slow_cosmos_config(backend.base_url, f"redis://127.0.0.1:{port}/0", "jg-kill:", queue=False)
    del config["store"]["persistence"]  # the default: refuse a Redis that would lose accepted work
    gw = Gateway(validate_config(config))
    app = create_app(gw)

    def kill() -> None:
        procs[-1].kill()  # SIGKILL: no save on the way out
        procs[-1].wait()

    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as client:
            got = await kill_redis_while_enqueueing(
                client, kill, lambda: procs.append(local_redis.ensure_redis("127.0.0.1", port, tmp_path)))
    finally:
        await gw.aclose()
        backend.stop()
        local_redis.stop(procs[-1])
    figures("redis SIGKILL (AOF everysec, as serve starts it)", **got)
    assert got["accepted_before_kill"] > 0 and got["accepted"] > got["accepted_before_kill"]
    assert got["lost"] == 0, got


async def test_a_redis_that_drops_its_aof_gets_no_more_accepted_work(tmp_path, monkeypatch):
    """A Redis that drops its AOF while the gateway runs: enqueues are answered 503 (no uuid) from
    the next look at it on (a Redis without AOF at start-up: the gateway does not start,
    test_redis_outage.py)."""
    import judge_gateway.store as store_module

    aof = RedisServer(tmp_path, persist=True)
    backend = FakeOpenAIServer().start()
    config = slow_cosmos_config(backend.base_url, aof.url, "jg-drop:", queue=False)
    del config["store"]["persistence"]
    gw = Gateway(validate_config(config))
    app = create_app(gw)
    try:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://localhost", timeout=60) as client:
            ok = await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)), headers=HEADERS)
            await app.state.cosmos_rl.store._redis.config_set("appendonly", "no")
            monkeypatch.setattr(store_module, "PERSISTENCE_RECHECK_S", 0.0)
            refused = await client.post("/api/reward/enqueue", content=enqueue_body(META, image_batch(2)),
                                        headers=HEADERS)
    finally:
        await gw.aclose()
        backend.stop()
        aof.stop()
    assert ok.status_code == 200
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "2", refused.text
    assert "appendonly" in refused.json()["message"] and "uuid" not in refused.json()
