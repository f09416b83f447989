"""Retention rules of the Redis result store on a real redis-server: a pull shortens an entry's
life, pulled entries are evicted before unpulled ones, and a key that has gone says why."""

from __future__ import annotations

import asyncio

import pytest

from judge_gateway.store import RedisStore
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis-retention"))
    try:
        yield server.url
    finally:
        server.stop()


async def test_redis_pulled_first_eviction_and_gone_reasons(redis_url):
    store = RedisStore(redis_url, prefix="jg-ret:", ttl_s=60, max_entries=3, pulled_ttl_s=0.2)
    try:
        for key in ("a", "b", "c"):
            await store.put(key, {"v": key})
            await asyncio.sleep(0.01)  # distinct insertion times
        await store.consumed("b")
        await store.put("d", {"v": "d"})
        assert await store.get("b") is None and "evicted after its pull" in await store.gone("b")
        assert [await store.get(k) for k in ("a", "c", "d")] == [{"v": "a"}, {"v": "c"}, {"v": "d"}]
        await store.put("e", {"v": "e"})  # no pulled entry left: the oldest unpulled goes
        assert await store.get("a") is None and "evicted before anyone pulled it" in await store.gone("a")
        await store.consumed("c")
        await asyncio.sleep(0.3)  # past pulled_ttl_s
        assert await store.get("c") is None
        assert await store.gone("c") == "expired: kept 0 s after its first pull (store.pulled_ttl_s)"
        assert await store.get("d") == {"v": "d"} and await store.gone("d") is None
        assert await store.gone("never") is None
        await store.put("short", {"v": 1}, ttl_s=0.05)
        await asyncio.sleep(0.1)
        assert await store.gone("short") == "expired: kept 0 s unpulled (store.ttl_s)"
    finally:
        await store.aclose()


async def test_redis_keys_a_client_names_never_reach_markers_or_the_index(redis_url):
    """A pull's uuid was once read at the store's own keys: `index` gave WRONGTYPE (503) and
    `gone:<key>` a marker's text that failed to parse (500). Entries have their own namespace."""
    store = RedisStore(redis_url, prefix="jg-ns:", ttl_s=60, max_entries=10)
    try:
        await store.put("a", {"v": "a"})
        store.max_entries = 0
        await store.put("b", {"v": "b"})  # evicts: markers for a and b, an index
        for key in ("index", "gone:a", "gone:b", "entry:a"):
            assert await store.get(key) is None, key
            assert await store.gone(key) is None, key
    finally:
        await store.aclose()
