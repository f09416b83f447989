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
    assert set(pulls) <= {200, 400}  # scored, or still pending (cosmos_rl.pending_status)
    assert codes == {200: ENQUEUES}, codes
