"""The durable queue of accepted async (cosmos-rl) work: a Redis Stream with one consumer group,
beside the result store, shared by every gateway replica on that Redis.

    enqueue (any replica)  XADD   {uuid, body, deadline}            the request is accepted
    each replica           XREADGROUP > (as far as it has room)     it scores the entry
                           XCLAIM JUSTID its running entries        "still mine" (resets idle time)
                           XAUTOCLAIM entries idle > visibility     a dead replica's work, scored again
    after the result is stored                  XACK + XDEL          only then

A replica that dies (kill -9, lost node) leaves its entries pending in the group; they go idle,
and another replica claims and scores them. A request scored twice (claimed from a replica that
was slow, not dead) writes one result: the store's `put_final` keeps the first.

The stream keeps the request body as sent (validated already): a claiming replica prepares it
again, exactly as the accepting one did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .protocol_config import QueueConfig
from .store import RedisStore, StoreError

log = logging.getLogger(__name__)


class BacklogFull(RuntimeError):
    pass


@dataclass
class QueuedWork:
    entry_id: str
    uid: str
    body: bytes
    deadline: float  # wall time (time.time()) by which the request must be finished
    claimed: bool  # taken over from another consumer


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisWorkQueue:
    def __init__(self, store: RedisStore, cfg: QueueConfig, consumer: str) -> None:
        self._redis = store._redis
        self.cfg = cfg
        self.stream = store.prefix + "queue"
        self.group = "scorers"
        self.consumer = consumer
        self._group_ready = False

    async def _call(self, what: str, coro):
        try:
            return await coro
        except StoreError:
            raise
        except Exception as err:
            if "NOGROUP" in str(err):  # the stream was lost (a Redis restart without persistence)
                self._group_ready = False
            raise StoreError(f"redis {what} failed: {type(err).__name__}: {err}") from err

    async def ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # From id 0: entries added before the group existed are read too.
            await self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except Exception as err:
            if "BUSYGROUP" not in str(err):
                raise StoreError(f"redis XGROUP CREATE failed: {type(err).__name__}: {err}") from err
        self._group_ready = True

    async def check_room(self) -> None:
        """BacklogFull when the stream holds max_backlog unfinished entries (acknowledged ones are deleted)."""
        await self.ensure_group()
        backlog = await self._call("XLEN", self._redis.xlen(self.stream))
        if backlog >= self.cfg.max_backlog:
            raise BacklogFull(f"{backlog} accepted requests are waiting to be scored (store.queue.max_backlog = "
                              f"{self.cfg.max_backlog}); retry shortly")

    async def add(self, uid: str, body: bytes, deadline: float) -> str:
        await self.ensure_group()
        entry_id = await self._call("XADD", self._redis.xadd(
            self.stream, {"uuid": uid, "body": body, "deadline": repr(deadline)}))
        return _text(entry_id)

    def _work(self, entry_id: Any, fields: dict, claimed: bool) -> QueuedWork | None:
        if not fields:  # deleted meanwhile (XAUTOCLAIM reports such ids apart; XREADGROUP as empty)
            return None
        f = {_text(k): v for k, v in fields.items()}
        return QueuedWork(_text(entry_id), _text(f["uuid"]), f["body"], float(_text(f["deadline"])), claimed)

    async def read(self, count: int, block_ms: int) -> list[QueuedWork]:
        await self.ensure_group()
        reply = await self._call("XREADGROUP", self._redis.xreadgroup(
            self.group, self.consumer, {self.stream: ">"}, count=count, block=block_ms))
        out = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                work = self._work(entry_id, fields, claimed=False)
                if work is not None:
                    out.append(work)
        return out

    async def claim_idle(self, count: int) -> list[QueuedWork]:
        """Entries no consumer has touched for visibility_timeout_s: a dead replica's."""
        await self.ensure_group()
        reply = await self._call("XAUTOCLAIM", self._redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_time=int(self.cfg.visibility_timeout_s * 1000),
            start_id="0-0", count=count))
        entries = reply[1] if reply else []
        out = []
        for entry_id, fields in entries:
            work = self._work(entry_id, fields, claimed=True)
            if work is not None:
                out.append(work)
        return out

    async def keep(self, entry_ids: list[str]) -> None:
        """Still being scored here: reset their idle time so nobody claims them."""
        if entry_ids:
            await self._call("XCLAIM", self._redis.xclaim(self.stream, self.group, self.consumer, 0, entry_ids,
                                                          justid=True))

    async def done(self, entry_id: str) -> None:
        """Its result is stored: acknowledge and drop the body."""
        async def both() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, self.group, entry_id)
                pipe.xdel(self.stream, entry_id)
                await pipe.execute()
        await self._call("XACK", both())

    async def forget_dead_consumers(self, idle_s: float) -> list[str]:
        """Drop consumers (one per gateway process ever started) with nothing pending that have not
        read for `idle_s`: a live replica reads at least every second."""
        await self.ensure_group()
        infos = await self._call("XINFO CONSUMERS", self._redis.xinfo_consumers(self.stream, self.group))
        dead = [_text(c["name"]) for c in infos
                if _text(c["name"]) != self.consumer and int(c["pending"]) == 0 and int(c["idle"]) >= idle_s * 1000]
        for name in dead:
            await self._call("XGROUP DELCONSUMER", self._redis.xgroup_delconsumer(self.stream, self.group, name))
        return dead

    async def pending_of(self, consumer: str) -> int:
        """Entries delivered to `consumer` and not acknowledged (for tests and `status`)."""
        info = await self._call("XPENDING", self._redis.xpending(self.stream, self.group))
        for c in info.get("consumers", []):
            if _text(c["name"]) == consumer:
                return int(c["pending"])
        return 0


def make_work_queue(store: Any, cfg: QueueConfig, consumer: str) -> RedisWorkQueue | None:
    if not cfg.enabled:
        return None
    if not isinstance(store, RedisStore):
        raise StoreError("store.queue.enabled needs the Redis store (store.kind = 'redis')")
    return RedisWorkQueue(store, cfg, consumer)
