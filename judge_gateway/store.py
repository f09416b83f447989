"""Result store of the async protocols: JSON entries with a TTL and a size bound.

`MemoryStore` (one process, LRU) is the default; `RedisStore` is shared by gateway replicas and
survives a restart. Entries are small JSON documents (status + results), never pickles.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any, Protocol

from .protocol_config import StoreConfig


class StoreError(RuntimeError):
    """The store could not be reached or answered nonsense."""


class ResultStore(Protocol):
    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None: ...

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    """In-process LRU with per-entry expiry."""

    def __init__(self, *, ttl_s: float, max_entries: int) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._data: OrderedDict[str, tuple[float, str]] = OrderedDict()

    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        # Stored serialised so a reader never shares (or mutates) the writer's objects.
        self._data[key] = (time.monotonic() + (ttl_s or self.ttl_s), json.dumps(value))
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    async def get(self, key: str) -> dict[str, Any] | None:
        item = self._data.get(key)
        if item is None:
            return None
        expires, text = item
        if time.monotonic() >= expires:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return json.loads(text)

    def __len__(self) -> int:
        return len(self._data)

    async def aclose(self) -> None:
        return None


class RedisStore:
    """Entries as Redis strings with EX; a sorted set of keys by insertion time bounds their number."""

    def __init__(self, url: str, *, prefix: str, ttl_s: float, max_entries: int) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - depends on the install
            raise StoreError("store.kind = 'redis' needs the `redis` package: pip install 'judge-gateway[redis]'") from None
        self._redis = aioredis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._index = prefix + "index"

    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        ttl_ms = max(1, int((ttl_s or self.ttl_s) * 1000))
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(self.prefix + key, json.dumps(value), px=ttl_ms)
                pipe.zadd(self._index, {key: time.time()}, nx=True)
                pipe.zcard(self._index)
                _, _, count = await pipe.execute()
            if count > self.max_entries:
                evicted = await self._redis.zpopmin(self._index, count - self.max_entries)
                names = [self.prefix + (k.decode() if isinstance(k, bytes) else k) for k, _ in evicted]
                if names:
                    await self._redis.delete(*names)
        except Exception as err:
            raise StoreError(f"redis put failed: {type(err).__name__}: {err}") from err

    async def get(self, key: str) -> dict[str, Any] | None:
        try:
            text = await self._redis.get(self.prefix + key)
        except Exception as err:
            raise StoreError(f"redis get failed: {type(err).__name__}: {err}") from err
        if text is None:
            await self._redis.zrem(self._index, key)  # expired: keep the index honest
            return None
        return json.loads(text)

    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except Exception as err:
            raise StoreError(f"redis unreachable: {type(err).__name__}: {err}") from err

    async def aclose(self) -> None:
        await self._redis.aclose()


def make_store(cfg: StoreConfig) -> ResultStore:
    if cfg.kind == "redis":
        url = cfg.resolved_url()
        if not url:
            raise StoreError("store.url is required for kind = 'redis'")
        return RedisStore(url, prefix=cfg.key_prefix, ttl_s=cfg.ttl_s, max_entries=cfg.max_entries)
    return MemoryStore(ttl_s=cfg.ttl_s, max_entries=cfg.max_entries)
