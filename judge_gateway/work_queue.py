"""The durable queue of accepted async (cosmos-rl) work: a Redis Stream with one consumer group,
beside the result store, shared by every gateway replica on that Redis.

    enqueue (any replica)  XADD   {uuid, body, deadline}            the request is accepted
    each replica           XREADGROUP > (as far as it has room)     it scores the entry
                           XCLAIM JUSTID its running entries        "still mine" (resets idle time), only
                                                                    those it still owns (one Lua script)
                           XAUTOCLAIM entries idle > visibility     a dead replica's work, scored again;
                                                                    past max_deliveries it is failed
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

from .config import QueueConfig
from .exceptions import Overloaded
from .store import RedisStore, StoreError

log = logging.getLogger(__name__)


class BacklogFull(Overloaded):
    pass


@dataclass
class QueuedWork:
    entry_id: str
    uid: str
    body: bytes
    deadline: float  # wall time (time.time()) by which the request must be finished
    claimed: bool  # taken over from another consumer
    deliveries: int = 1  # times the group handed it out (XPENDING times_delivered)
    malformed: str | None = None  # why its fields cannot be read (it is failed and acknowledged)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# Touch only the entries this consumer still owns: a plain XCLAIM (min-idle 0) would take back an
# entry another replica has just claimed, and both would score it again and again.
# KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry ids. Returns the ids not ours.
_KEEP_OWNED = """
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""


class RedisWorkQueue:
    def __init__(self, store: RedisStore, cfg: QueueConfig, consumer: str) -> None:
        self._redis = store._redis
        self.cfg = cfg
        self.stream = store.prefix + "queue"
        self.group = "scorers"
        self.consumer = consumer
        self._group_ready = False
        self._keep_owned = self._redis.register_script(_KEEP_OWNED)
        self._claim_cursor = "0-0"  # XAUTOCLAIM's next start: one sweep walks the whole pending list

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
        try:
            return QueuedWork(_text(entry_id), _text(f["uuid"]), f["body"], float(_text(f["deadline"])), claimed)
        except (KeyError, ValueError) as err:  # not written by add(): no reason to stop reading the rest
            return QueuedWork(_text(entry_id), _text(f.get("uuid", "")), b"", 0.0, claimed,
                              malformed=f"{type(err).__name__}: {err}")

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
            start_id=self._claim_cursor, count=count))
        self._claim_cursor = _text(reply[0]) if reply else "0-0"
        entries = reply[1] if reply else []
        out = []
        for entry_id, fields in entries:
            work = self._work(entry_id, fields, claimed=True)
            if work is not None:
                work.deliveries = await self.deliveries(work.entry_id)
                out.append(work)
        return out

    async def deliveries(self, entry_id: str) -> int:
        """How many times the group has handed the entry out (0: no longer pending)."""
        rows = await self._call("XPENDING", self._redis.xpending_range(
            self.stream, self.group, min=entry_id, max=entry_id, count=1))
        return int(rows[0]["times_delivered"]) if rows else 0

    async def keep(self, entry_ids: list[str]) -> list[str]:
        """Still being scored here: reset their idle time so nobody claims them. Returns the ids
        this consumer no longer owns (claimed by another replica, or acknowledged): stop those."""
        if not entry_ids:
            return []
        lost = await self._call("XCLAIM", self._keep_owned(keys=[self.stream],
                                                           args=[self.group, self.consumer, *entry_ids]))
        return [_text(i) for i in lost or []]

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
