"""Accepted work survives a dead replica: two gateway processes on one real
redis-server share the durable queue (store.queue); one is killed with -9 while it holds accepted
requests; the other claims every one after the visibility timeout and resolves it with a real
result (no fill, no failed). A request scored twice writes one result."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import redis

from judge_gateway.store import RedisStore
from tests.support.fake_openai import FakeOpenAIServer, free_port
from tests.support.gateway_process import GatewayProcess
from tests.support.redis_server import RedisServer
from tests.support.reliability import (
    enqueue,
    figures,
    lost,
    resolve_all,
    slow_cosmos_config,
)

ACCEPTED = 6
VISIBILITY_S = 3.0


@pytest.fixture(scope="module")
def slow_backend():
    server = FakeOpenAIServer(stall_s=4.0).start()  # replica A is killed mid-scoring
    yield server
    server.stop()


async def test_a_killed_replicas_accepted_work_is_claimed_and_scored(slow_backend, tmp_path):
    server = RedisServer(tmp_path, persist=True)
    prefix = f"jg-queue-{free_port()}:"
    config = slow_cosmos_config(slow_backend.base_url, server.url, prefix, queue=True,
                                visibility_timeout_s=VISIBILITY_S)
    r = redis.Redis.from_url(server.url)
    a = b = None
    try:
        a = GatewayProcess(config, tmp_path, "replica-a")
        async with httpx.AsyncClient(base_url=a.url, timeout=30) as client:
            uids = await enqueue(client, ACCEPTED)
        # A has read them all from the stream (and is scoring them) before it dies
        deadline = time.monotonic() + 20
        while (r.xpending(prefix + "queue", "scorers")["pending"] < ACCEPTED) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        held = r.xpending(prefix + "queue", "scorers")
        a.kill()
        killed_at = time.monotonic()
        assert held["pending"] == ACCEPTED and len(held["consumers"]) == 1, held
        b = GatewayProcess(config, tmp_path, "replica-b")
        async with httpx.AsyncClient(base_url=b.url, timeout=30) as client:
            results = await resolve_all(client, uids, timeout=60)
        recovered_s = time.monotonic() - killed_at
        after = r.xpending(prefix + "queue", "scorers")
        backlog = r.xlen(prefix + "queue")
        log_b = (tmp_path / "replica-b.log").read_text()
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.stop()
        r.close()
        server.stop()
    missing = lost(uids, results)
    figures("replica kill -9 (durable queue)", accepted=ACCEPTED, held_by_killed=held["pending"],
            resolved=len(results), recovered_in_s=f"{recovered_s:.1f}", accepted_lost=len(missing))
    assert missing == [], {u: results.get(u) for u in missing}
    for body in results.values():
        assert body["valid"] == [True, True] and all(s["valid"] for s in body["judge_scores"])
    assert after["pending"] == 0 and backlog == 0  # acknowledged and deleted once stored
    assert "claimed" in log_b


async def test_a_request_scored_twice_writes_one_result(tmp_path):
    server = RedisServer(tmp_path)
    store = RedisStore(server.url, prefix="jg-once:", ttl_s=60, max_entries=100)
    try:
        await store.put("u", {"status": "pending"})
        first = await store.put_final("u", {"status": "done", "by": "a"})
        second = await store.put_final("u", {"status": "done", "by": "b"})
        got = await store.get("u")
    finally:
        await store.aclose()
        server.stop()
    assert (first, second) == (True, False) and got == {"status": "done", "by": "a"}


async def test_consumers_of_gone_replicas_are_forgotten_once_idle_and_empty(tmp_path):
    from judge_gateway.config import QueueConfig
    from judge_gateway.work_queue import RedisWorkQueue

    server = RedisServer(tmp_path)
    store = RedisStore(server.url, prefix="jg-sweep:", ttl_s=60, max_entries=100)
    live = RedisWorkQueue(store, QueueConfig(enabled=True), "live")
    gone = RedisWorkQueue(store, QueueConfig(enabled=True), "gone")
    holder = RedisWorkQueue(store, QueueConfig(enabled=True), "holder")
    try:
        await live.add("u1", b"body", 0.0)
        await live.add("u2", b"body", 0.0)
        assert [w.uid for w in await holder.read(1, block_ms=10)] == ["u1"]  # holder keeps it pending
        (done,) = await gone.read(1, block_ms=10)  # gone: scored u2, then its process ended
        await gone.done(done.entry_id)
        await asyncio.sleep(0.05)
        assert await live.forget_dead_consumers(idle_s=0.01) == ["gone"]
        names = {c["name"].decode() for c in await store._redis.xinfo_consumers(live.stream, live.group)}
    finally:
        await store.aclose()
        server.stop()
    assert names == {"holder"}  # the one with a pending entry stays until it is claimed


async def test_keep_touches_only_entries_still_owned(tmp_path):
    """A slow replica's heartbeat must not take back an entry another replica claimed meanwhile
    (a plain XCLAIM min-idle 0 did: both scored it, again and again)."""
    from judge_gateway.config import QueueConfig
    from judge_gateway.work_queue import RedisWorkQueue

    server = RedisServer(tmp_path)
    store = RedisStore(server.url, prefix="jg-keep:", ttl_s=60, max_entries=100)
    slow = RedisWorkQueue(store, QueueConfig(enabled=True), "slow")
    other = RedisWorkQueue(store, QueueConfig(enabled=True), "other")
    try:
        await slow.add("u1", b"body", 0.0)
        await slow.add("u2", b"body", 0.0)
        mine, taken = await slow.read(2, block_ms=10)
        # `other` claims u2 as XAUTOCLAIM does once it has been idle the visibility timeout
        await store._redis.xclaim(other.stream, other.group, "other", 0, [taken.entry_id])
        lost = await slow.keep([mine.entry_id, taken.entry_id])
        owners = {r["message_id"].decode(): r["consumer"].decode()
                  for r in await store._redis.xpending_range(slow.stream, slow.group, "-", "+", 10)}
    finally:
        await store.aclose()
        server.stop()
    assert lost == [taken.entry_id]
    assert owners == {mine.entry_id: "slow", taken.entry_id: "other"}


async def test_claimed_entries_carry_how_often_they_were_handed_out(tmp_path):
    from judge_gateway.config import QueueConfig
    from judge_gateway.work_queue import RedisWorkQueue

    server = RedisServer(tmp_path)
    store = RedisStore(server.url, prefix="jg-deliveries:", ttl_s=60, max_entries=100)
    # visibility 0 (below the loaded bound of 2 s): every pending entry is claimable at once
    cfg = QueueConfig.model_construct(enabled=True, visibility_timeout_s=0.0, claim_interval_s=1.0,
                                      max_backlog=10, max_deliveries=3)
    a, b = RedisWorkQueue(store, cfg, "a"), RedisWorkQueue(store, cfg, "b")
    try:
        await a.add("u1", b"body", 0.0)
        (first,) = await a.read(1, block_ms=10)
        seen = [first.deliveries]
        for queue in (b, a, b):
            (work,) = await queue.claim_idle(1)
            seen.append(work.deliveries)
    finally:
        await store.aclose()
        server.stop()
    assert seen == [1, 2, 3, 4]
