"""Store writes through an outage and the queue/persistence options, without
a Redis (the real-Redis tests are in tests/reliability)."""

from __future__ import annotations

import pytest

from judge_gateway.config import ConfigError, validate_config
from judge_gateway.store import StoreError, retry_store_write


async def test_a_write_is_retried_until_the_store_is_back():
    calls = []

    async def write() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise StoreError("redis put failed: ConnectionError")
        return "stored"

    assert await retry_store_write(write, "result of u", give_up_after_s=10, first_delay_s=0.01) == "stored"
    assert len(calls) == 4


async def test_a_write_gives_up_with_the_reason_after_its_bound():
    async def write() -> None:
        raise StoreError("redis put failed: ConnectionError")

    with pytest.raises(StoreError, match=r"result of u: gave up after \d+ attempts over 0 s: redis put failed"):
        await retry_store_write(write, "result of u", give_up_after_s=0.1, first_delay_s=0.02)


@pytest.mark.parametrize("store, match", [
    ({"queue": {"enabled": True}}, "store.queue.enabled needs store.kind = 'redis'"),
    ({"kind": "redis", "url_env": None, "url": "redis://x", "queue": {"visibility_timeout_s": 0.5}},
     "visibility_timeout_s"),
    ({"persistence": "maybe"}, "persistence"),
])
def test_store_options_are_validated_at_load(store, match):
    with pytest.raises(ConfigError, match=match):
        validate_config({"store": store, "backends": {}, "judges": {}})
