"""Result store of the async protocols: JSON entries with a TTL, a size bound, and a memory of
what has gone.

`MemoryStore` (one process) is the default; `RedisStore` is shared by gateway replicas and
survives a restart. Entries are small JSON documents (status + results), never pickles.

Retention (so that a slow trainer does not outlive its results):
- an entry lives `ttl_s` (or the ttl it was put with); after its first successful pull
  (`consumed`) at most `pulled_ttl_s` more;
- beyond `max_entries` (memory: or `max_bytes`), pulled entries are evicted first, oldest first;
  an unpulled one only when no pulled one is left (logged);
- a key that expired or was evicted is remembered for `forget_after_s`: `gone(key)` says why, so
  a pull can answer `expired` rather than `unknown`.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .config import StoreConfig
from .exceptions import Unavailable
from .extras import install_command

log = logging.getLogger(__name__)

DAY_S = 86400.0
PERSISTENCE_RECHECK_S = 10.0  # how long an accept trusts the last look at Redis's persistence
T = TypeVar("T")


class StoreError(Unavailable):
    """The store could not be reached or answered nonsense."""


async def retry_store_write(write: Callable[[], Awaitable[T]], what: str, *, give_up_after_s: float,
                            first_delay_s: float = 0.2, max_delay_s: float = 5.0) -> T:
    """`write()` again and again (backoff) while the store is unreachable: a Redis outage or
    restart delays an accepted request's result, it does not lose it. StoreError after
    `give_up_after_s` (the entry would have expired by then anyway)."""
    give_up_at = time.monotonic() + give_up_after_s
    delay = first_delay_s
    failures = 0
    while True:
        try:
            result = await write()
        except StoreError as err:
            failures += 1
            if time.monotonic() + delay > give_up_at:
                raise StoreError(f"{what}: gave up after {failures} attempts over {give_up_after_s:.0f} s: {err}") from err
            if failures == 1 or failures % 20 == 0:
                log.warning("%s: the store is unavailable (%s); retrying every <= %.0f s (attempt %d)",
                            what, err, max_delay_s, failures)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay_s)
            continue
        if failures:
            log.info("%s: stored after %d failed attempts", what, failures)
        return result


class ResultStore(Protocol):
    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None: ...

    async def put_final(self, key: str, value: dict[str, Any]) -> bool:
        """Store a request's final entry (result or failure) unless one was stored already (a
        request scored twice, by two replicas, writes one result): True when this one was written."""
        ...

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def check_persistence(self, policy: str) -> str | None:
        """Whether stored entries survive a restart of the store: None when they do, else why not
        (logged under policy = warn, StoreError under refuse)."""
        ...

    async def accept_refusal(self, policy: str) -> str | None:
        """Why accepted work must not be given a uuid now (under policy = refuse, the store does
        not persist what it is told as it stands), else None."""
        ...

    async def consumed(self, key: str) -> None:
        """The entry was pulled: it may go after `pulled_ttl_s`, and before unpulled ones."""
        ...

    async def gone(self, key: str) -> str | None:
        """Why a key that was stored is no longer there (expired / evicted), or None if never seen."""
        ...

    async def aclose(self) -> None: ...


def _expired_reason(ttl_s: float, pulled: bool) -> str:
    after = "after its first pull" if pulled else "unpulled"
    return f"expired: kept {ttl_s:.0f} s {after} (store.{'pulled_ttl_s' if pulled else 'ttl_s'})"


@dataclass
class _Entry:
    expires: float  # monotonic
    text: str
    ttl_s: float
    pulled: bool = False


class MemoryStore:
    """In-process store with per-entry expiry; evicts pulled entries before unpulled ones."""

    def __init__(self, *, ttl_s: float, max_entries: int, pulled_ttl_s: float | None = None,
                 max_bytes: int = 1 << 30, forget_after_s: float = 7 * DAY_S) -> None:
        self.ttl_s = ttl_s
        self.pulled_ttl_s = min(pulled_ttl_s if pulled_ttl_s is not None else ttl_s, ttl_s)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.forget_after_s = forget_after_s
        self._data: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._pulled: OrderedDict[str, None] = OrderedDict()  # pulled keys, first pulled first
        self._bytes = 0
        self._gone: OrderedDict[str, tuple[float, str]] = OrderedDict()  # key -> (forget at, why)
        self.evicted_unpulled = 0
        self._expiries: list[tuple[float, str]] = []  # heap of (expires, key); stale items skipped
        self._warned_at = -60.0

    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        # Stored serialised so a reader never shares (or mutates) the writer's objects.
        text = json.dumps(value)
        ttl = ttl_s or self.ttl_s
        self._drop(key)
        self._gone.pop(key, None)
        entry = self._data[key] = _Entry(time.monotonic() + ttl, text, ttl)
        heapq.heappush(self._expiries, (entry.expires, key))
        self._bytes += len(text)
        self._expire_and_evict(keep=key)

    async def put_final(self, key: str, value: dict[str, Any]) -> bool:
        await self.put(key, value)  # one process: nobody else scores its requests
        return True

    async def check_persistence(self, policy: str) -> str | None:
        return None  # results live as long as the process: nothing to configure

    async def accept_refusal(self, policy: str) -> str | None:
        return None

    async def get(self, key: str) -> dict[str, Any] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if time.monotonic() >= entry.expires:
            self._drop(key)
            self._remember(key, _expired_reason(entry.ttl_s, entry.pulled))
            return None
        self._data.move_to_end(key)
        return json.loads(entry.text)

    async def consumed(self, key: str) -> None:
        entry = self._data.get(key)
        if entry is None or entry.pulled:
            return
        entry.pulled = True
        entry.ttl_s = self.pulled_ttl_s
        entry.expires = min(entry.expires, time.monotonic() + self.pulled_ttl_s)
        heapq.heappush(self._expiries, (entry.expires, key))
        self._pulled[key] = None

    async def gone(self, key: str) -> str | None:
        item = self._gone.get(key)
        if item is None:
            entry = self._data.get(key)
            if entry is not None and time.monotonic() >= entry.expires:
                await self.get(key)  # expire it now
                item = self._gone.get(key)
            if item is None:
                return None
        forget_at, why = item
        if time.monotonic() >= forget_at:
            del self._gone[key]
            return None
        return why

    def _drop(self, key: str) -> None:
        entry = self._data.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry.text)
        self._pulled.pop(key, None)

    def _remember(self, key: str, why: str) -> None:
        self._gone[key] = (time.monotonic() + self.forget_after_s, why)
        self._gone.move_to_end(key)
        while len(self._gone) > self.max_entries:  # ~100 bytes each
            self._gone.popitem(last=False)

    def _expire_and_evict(self, keep: str) -> None:
        now = time.monotonic()
        while self._expiries and self._expiries[0][0] <= now:  # expired entries go first
            expires, key = heapq.heappop(self._expiries)
            entry = self._data.get(key)
            if entry is not None and entry.expires == expires:  # else a stale heap item
                self._drop(key)
                self._remember(key, _expired_reason(entry.ttl_s, entry.pulled))
        if len(self._expiries) > 2 * len(self._data) + 1024:  # stale items pile up: rebuild
            self._expiries = [(e.expires, k) for k, e in self._data.items()]
            heapq.heapify(self._expiries)
        while (len(self._data) > self.max_entries or self._bytes > self.max_bytes) and len(self._data) > 1:
            victim = next((k for k in self._pulled if k != keep), None)
            why = "evicted after its pull: the store was full"
            if victim is None:
                victim = next(k for k in self._data if k != keep)
                why = "evicted before anyone pulled it: the store was full"
                self.evicted_unpulled += 1
                if now - self._warned_at >= 60.0:  # once a minute, with the running count
                    self._warned_at = now
                    log.warning("result store full (store.max_entries = %d, store.max_bytes = %d): evicting "
                                "unpulled results (%d so far, e.g. %s); trainers are not pulling them",
                                self.max_entries, self.max_bytes, self.evicted_unpulled, victim)
            self._drop(victim)
            self._remember(victim, f"{why} (store.max_entries = {self.max_entries}, "
                                   f"store.max_bytes = {self.max_bytes})")

    def __len__(self) -> int:
        return len(self._data)

    async def aclose(self) -> None:
        return None


def _fair_pool_class() -> type:
    """redis-py's BlockingConnectionPool, with its waiters served in arrival order.

    Its own wait is a condition that a newly arriving operation can overtake whenever a
    connection comes free, so under a storm of operations some waiters starve past the pool's
    timeout (4 of 1,600 pulls by 200 pullers did, on 64 connections). Here an asyncio.Semaphore
    (first come, first served) of max_connections permits is taken before the pool is asked, so
    the pool always has a connection for whoever holds a permit."""
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError

    class FairBlockingConnectionPool(aioredis.BlockingConnectionPool):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._gate: asyncio.Semaphore | None = None
            self._given: set[int] = set()  # ids of the connections handed out with a permit

        async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            if self._gate is None:
                self._gate = asyncio.Semaphore(self.max_connections)
            try:
                async with asyncio.timeout(self.timeout):
                    await self._gate.acquire()
            except TimeoutError as err:
                raise RedisConnectionError(f"no Redis connection came free within store.pool_wait_s = "
                                           f"{self.timeout:g} s (all {self.max_connections} busy)") from err
            try:
                connection = await super().get_connection(*args, **kwargs)
            except BaseException:
                self._gate.release()
                raise
            self._given.add(id(connection))
            return connection

        async def release(self, connection: Any) -> None:
            await super().release(connection)
            if self._gate is not None and id(connection) in self._given:
                self._given.discard(id(connection))
                self._gate.release()

    return FairBlockingConnectionPool


class RedisStore:
    """Entries as Redis strings with PX; a sorted set of keys bounds their number (pulled keys
    score below every unpulled one, so they are evicted first); a `gone:` marker per key, living
    `forget_after_s` longer than its entry, tells an expired or evicted key from an unknown one."""

    PULLED_OFFSET = 1e12  # index score of a pulled key: its pull time minus this

    def __init__(self, url: str, *, prefix: str, ttl_s: float, max_entries: int,
                 pulled_ttl_s: float | None = None, forget_after_s: float = 7 * DAY_S,
                 max_connections: int = 64, pool_wait_s: float = 10.0) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - depends on the install
            raise StoreError(f"store.kind = 'redis' needs the `redis` package: {install_command('redis')}") from None
        # A pool that waits for a free connection (up to pool_wait_s) when all max_connections are
        # busy: the client's default pool raised MaxConnectionsError past 100 operations at once, a
        # 503 to trainers polling with Redis healthy (200 pullers: 1,549 pulls and 11 of 34 enqueues).
        pool = _fair_pool_class().from_url(
            url, max_connections=max_connections, timeout=pool_wait_s, socket_connect_timeout=5, socket_timeout=10)
        self._redis = aioredis.Redis.from_pool(pool)
        self.max_connections = max_connections
        self._gap: str | None = None  # why Redis would lose acknowledged writes (None: AOF is on)
        self._gap_checked_at = -PERSISTENCE_RECHECK_S
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.pulled_ttl_s = min(pulled_ttl_s if pulled_ttl_s is not None else ttl_s, ttl_s)
        self.max_entries = max_entries
        self.forget_after_s = forget_after_s
        self._index = prefix + "index"

    def _marker(self, key: str) -> str:
        return self.prefix + "gone:" + key

    def _entry(self, key: str) -> str:
        # Entries in their own namespace: no key a client names can read a marker or the index.
        return self.prefix + "entry:" + key

    def _final(self, key: str) -> str:
        return self.prefix + "final:" + key

    async def put(self, key: str, value: dict[str, Any], ttl_s: float | None = None) -> None:
        ttl = ttl_s or self.ttl_s
        ttl_ms = max(1, int(ttl * 1000))
        forget_ms = ttl_ms + int(self.forget_after_s * 1000)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(self._entry(key), json.dumps(value), px=ttl_ms)
                pipe.set(self._marker(key), _expired_reason(ttl, False), px=forget_ms)
                pipe.zadd(self._index, {key: time.time()}, nx=True)
                pipe.zcard(self._index)
                *_, count = await pipe.execute()
            await self._bound(count)
        except Exception as err:
            raise StoreError(f"redis put failed: {type(err).__name__}: {err}") from err

    # KEYS: entry, gone marker, final marker, index. ARGV: value, ttl ms, forget ms, reason, now, key.
    _PUT_FINAL = """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
redis.call('ZADD', KEYS[4], 'NX', ARGV[5], ARGV[6])
return redis.call('ZCARD', KEYS[4])
"""

    async def put_final(self, key: str, value: dict[str, Any]) -> bool:
        ttl_ms = max(1, int(self.ttl_s * 1000))
        forget_ms = ttl_ms + int(self.forget_after_s * 1000)
        try:
            count = await self._redis.eval(
                self._PUT_FINAL, 4, self._entry(key), self._marker(key), self._final(key), self._index,
                json.dumps(value), ttl_ms, forget_ms, _expired_reason(self.ttl_s, False), time.time(), key)
            if count < 0:
                return False
            await self._bound(count)
            return True
        except Exception as err:
            raise StoreError(f"redis put failed: {type(err).__name__}: {err}") from err

    async def _bound(self, count: int) -> None:
        if count > self.max_entries:
            evicted = await self._redis.zpopmin(self._index, count - self.max_entries)
            names = [k.decode() if isinstance(k, bytes) else k for k, _ in evicted]
            if names:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.delete(*[self._entry(n) for n in names])
                    for n, (_, score) in zip(names, evicted):
                        pulled = score < time.time() - self.PULLED_OFFSET / 2
                        why = ("evicted after its pull" if pulled else "evicted before anyone pulled it")
                        pipe.set(self._marker(n), f"{why}: the store was full (store.max_entries = "
                                                  f"{self.max_entries})", px=int(self.forget_after_s * 1000))
                    await pipe.execute()

    async def _persistence_gap(self) -> str | None:
        """Why what Redis acknowledges would not survive a Redis kill (None: AOF is on); raises when
        CONFIG GET fails. Accepted work needs AOF: Redis appends a write to its AOF before it
        replies, so an acknowledged write outlives a killed Redis (appendfsync always: also a lost
        machine; everysec: all but the last second or so). RDB snapshots lose everything written
        since the last one (a Redis SIGKILL lost 3 of 194 accepted requests)."""
        conf = await self._redis.config_get("appendonly")
        conf.update(await self._redis.config_get("save"))
        aof, save = conf.get("appendonly"), (conf.get("save") or "").strip()
        if aof == "yes":
            return None
        fix = ("set `appendonly yes` (at run time: `redis-cli CONFIG SET appendonly yes`; docs: "
               "integrations/cosmos-rl.md, \"Redis in production\")")
        if save:
            return (f"Redis persists by RDB snapshots only (save = '{save}', appendonly = no): a Redis kill loses "
                    f"every request accepted and result stored since the last snapshot; {fix}")
        return ("Redis has neither AOF (appendonly = no) nor RDB snapshots (save = ''): a Redis restart loses every "
                f"stored result and accepted request; {fix}")

    async def check_persistence(self, policy: str) -> str | None:
        if policy == "off":
            return None
        try:
            why = await self._persistence_gap()
        except Exception as err:  # managed Redis often renames CONFIG: say we could not tell
            why = (f"cannot check Redis persistence (CONFIG GET failed: {type(err).__name__}: {err}); make sure "
                   "it has AOF (appendonly yes)")
            log.warning("store.persistence = %s: %s", policy, why)
            return why
        self._gap, self._gap_checked_at = why, time.monotonic()
        if why is None:
            return None
        if policy == "refuse":
            raise StoreError(f"store.persistence = refuse: {why}")
        log.warning("store.persistence = warn: %s", why)
        return why

    async def accept_refusal(self, policy: str) -> str | None:
        """Under refuse, looked up again every PERSISTENCE_RECHECK_S (Redis may have been restarted
        with another configuration since start-up); a Redis whose CONFIG cannot be read is not
        refused (start-up warned about it)."""
        if policy != "refuse":
            return None
        if time.monotonic() - self._gap_checked_at >= PERSISTENCE_RECHECK_S:
            try:
                self._gap = await self._persistence_gap()
            except Exception:
                self._gap = None
            self._gap_checked_at = time.monotonic()
        return f"store.persistence = refuse: {self._gap}" if self._gap else None

    async def get(self, key: str) -> dict[str, Any] | None:
        try:
            text = await self._redis.get(self._entry(key))
            if text is None:
                await self._redis.zrem(self._index, key)  # expired: keep the index honest
                return None
        except Exception as err:
            raise StoreError(f"redis get failed: {type(err).__name__}: {err}") from err
        try:
            return json.loads(text)
        except ValueError as err:
            raise StoreError(f"redis entry {key!r} is not JSON (written by something else?): {err}") from err

    async def consumed(self, key: str) -> None:
        ttl_ms = max(1, int(self.pulled_ttl_s * 1000))
        try:
            left = await self._redis.pttl(self._entry(key))
            if left is None or left < 0:  # gone, or no expiry
                return
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.zadd(self._index, {key: time.time() - self.PULLED_OFFSET}, xx=True)
                if left > ttl_ms:
                    pipe.pexpire(self._entry(key), ttl_ms)
                    pipe.set(self._marker(key), _expired_reason(self.pulled_ttl_s, True),
                             px=ttl_ms + int(self.forget_after_s * 1000))
                await pipe.execute()
        except Exception as err:
            raise StoreError(f"redis update failed: {type(err).__name__}: {err}") from err

    async def gone(self, key: str) -> str | None:
        try:
            if await self._redis.exists(self._entry(key)):
                return None
            why = await self._redis.get(self._marker(key))
        except Exception as err:
            raise StoreError(f"redis get failed: {type(err).__name__}: {err}") from err
        return why.decode() if isinstance(why, bytes) else why

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
        return RedisStore(url, prefix=cfg.key_prefix, ttl_s=cfg.ttl_s, max_entries=cfg.max_entries,
                          pulled_ttl_s=cfg.pulled_ttl_s, forget_after_s=cfg.forget_after_s,
                          max_connections=cfg.max_connections, pool_wait_s=cfg.pool_wait_s)
    return MemoryStore(ttl_s=cfg.ttl_s, max_entries=cfg.max_entries, pulled_ttl_s=cfg.pulled_ttl_s,
                       max_bytes=cfg.max_bytes, forget_after_s=cfg.forget_after_s)
