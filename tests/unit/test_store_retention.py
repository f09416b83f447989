"""Retention of cosmos-rl results: a slow trainer must not outlive its results,
and a pull of a result that has gone says `expired`, not `unknown`."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from judge_gateway.config import load_config, validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.config import StoreConfig
from judge_gateway.server import create_app
from judge_gateway.store import MemoryStore, make_store
from tests.support.cosmos_client import (
    HEADERS,
    enqueue_body,
    image_batch,
    poll,
    small_config,
)


def test_defaults_outlive_a_slow_trainer():
    cfg = StoreConfig()
    assert cfg.ttl_s == 86400 and cfg.pulled_ttl_s == 3600  # a day unpulled, an hour after a pull
    assert cfg.max_entries == 100000  # cosmos-rl's bound
    store = make_store(cfg)
    assert isinstance(store, MemoryStore) and store.ttl_s == 86400 and store.pulled_ttl_s == 3600
    shipped = load_config(None).store  # the embedded default config does not shorten them
    assert (shipped.ttl_s, shipped.pulled_ttl_s, shipped.max_entries) == (86400, 3600, 100000)


async def test_pulled_results_are_evicted_before_unpulled_ones():
    s = MemoryStore(ttl_s=60, max_entries=3)
    for key in ("a", "b", "c"):
        await s.put(key, {"v": key})
    await s.consumed("b")  # b was pulled; a and c were not
    await s.put("d", {"v": "d"})
    assert await s.get("b") is None and "evicted after its pull" in await s.gone("b")
    assert [await s.get(k) for k in ("a", "c", "d")] == [{"v": "a"}, {"v": "c"}, {"v": "d"}]
    await s.put("e", {"v": "e"})  # nothing pulled left: the least recently used unpulled one goes, loudly
    assert await s.get("a") is None and "evicted before anyone pulled it" in await s.gone("a")
    assert s.evicted_unpulled == 1
    assert await s.gone("never-stored") is None


async def test_a_pull_shortens_the_ttl_and_expiry_is_remembered():
    s = MemoryStore(ttl_s=60, max_entries=10, pulled_ttl_s=0.05)
    await s.put("pulled", {"v": 1})
    await s.put("unpulled", {"v": 2})
    await s.consumed("pulled")
    await asyncio.sleep(0.1)
    assert await s.get("pulled") is None and await s.get("unpulled") == {"v": 2}
    assert await s.gone("pulled") == "expired: kept 0 s after its first pull (store.pulled_ttl_s)"
    await s.put("short", {"v": 3}, ttl_s=0.05)
    await asyncio.sleep(0.1)
    assert await s.gone("short") == "expired: kept 0 s unpulled (store.ttl_s)"  # found without a get first
    await s.put("short", {"v": 4})  # stored again: not gone any more
    assert await s.gone("short") is None and await s.get("short") == {"v": 4}


async def test_byte_bound_evicts_like_the_entry_bound():
    s = MemoryStore(ttl_s=60, max_entries=100, max_bytes=250)
    await s.put("a", {"blob": "x" * 100})
    await s.put("b", {"blob": "y" * 100})
    await s.consumed("a")
    await s.put("c", {"blob": "z" * 100})  # 3 x ~113 bytes > 250: the pulled one goes
    assert await s.get("a") is None and await s.get("b") and await s.get("c")
    await s.put("huge", {"blob": "w" * 1000})  # alone over the bound: kept, everything else goes
    assert await s.get("huge") and len(s) == 1


async def test_forgotten_after_forget_after_s():
    s = MemoryStore(ttl_s=0.01, max_entries=10, forget_after_s=0.05)
    await s.put("k", {"v": 1})
    await asyncio.sleep(0.02)
    assert await s.get("k") is None and (await s.gone("k")).startswith("expired")
    await asyncio.sleep(0.05)
    assert await s.gone("k") is None


async def test_pull_says_expired_for_a_result_that_has_gone_and_unknown_for_a_stranger(fake_backend):
    store = MemoryStore(ttl_s=60, max_entries=10, pulled_ttl_s=0.2)
    gw = Gateway(validate_config(small_config(fake_backend.base_url)))
    app = create_app(gw, store=store)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            meta = {"reward_fn": {"quality": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
            uid = (await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch()),
                                     headers=HEADERS)).json()["uuid"]
            first = await poll(client, uid, "quality")
            assert first.status_code == 200
            again = await client.post("/api/reward/pull", data={"uuid": uid, "type": "quality"})
            assert again.status_code == 200 and again.json()["scores"] == first.json()["scores"]  # re-pulls work
            await asyncio.sleep(0.3)  # past pulled_ttl_s
            r = await client.post("/api/reward/pull", data={"uuid": uid, "type": "quality"})
            assert r.status_code == 410 and r.json()["status"] == "expired"
            assert "store.pulled_ttl_s" in r.json()["message"] and "enqueue it again" in r.json()["message"]
            r = await client.post("/api/reward/pull", data={"uuid": "00000000-0000-4000-8000-00000000f000", "type": "quality"})
            assert r.status_code == 404 and r.json()["status"] == "unknown"
            assert "never accepted" in r.json()["message"]
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()


@pytest.mark.parametrize("field, value", [("pulled_ttl_s", 0), ("max_bytes", 0), ("forget_after_s", -1)])
def test_store_bounds_are_validated(field, value):
    from judge_gateway.config import ConfigError

    with pytest.raises(ConfigError, match=rf"store\.{field}"):
        validate_config({"store": {field: value}})


async def test_expired_entries_are_freed_by_the_next_put_not_held_until_read():
    s = MemoryStore(ttl_s=60, max_entries=1000)
    for i in range(100):
        await s.put(f"short{i}", {"v": i}, ttl_s=0.02)
    await s.put("long", {"v": "long"})
    await asyncio.sleep(0.05)
    await s.put("next", {"v": "next"})  # frees the expired ones (a heap by expiry, no full scan)
    assert len(s) == 2 and (await s.gone("short7")).startswith("expired")
    for _ in range(5000):  # repeated puts of one key leave no pile of stale heap items
        await s.put("same", {"v": 0})
    assert len(s._expiries) < 2 * len(s) + 1100
