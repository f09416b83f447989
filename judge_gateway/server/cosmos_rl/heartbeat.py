"""Each gateway process's heartbeat in the result store (`instance:<id>`, rewritten every
HEARTBEAT_S, gone HEARTBEAT_TTL_S after the process stops): a pull on any replica reads a pending
entry whose owner's heartbeat is gone as failed at once. In queue mode each beat also keeps this
process's stream entries claimed (consumer.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ...store import ResultStore, StoreError

log = logging.getLogger(__name__)
HEARTBEAT_S = 5.0
HEARTBEAT_TTL_S = 20.0


class Heartbeat:
    def __init__(self, store: ResultStore, instance: str, interval_s: float = HEARTBEAT_S,
                 also: Callable[[], Awaitable[None]] | None = None) -> None:
        self.store = store
        self.instance = instance
        self.interval_s = interval_s
        self.also = also  # done at each beat after the write (the queue's claims)
        self.task: asyncio.Task | None = None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def write(self) -> None:
        await self.store.put(self.key(self.instance), {"alive": True}, ttl_s=HEARTBEAT_TTL_S)

    def start(self) -> None:
        if not self.running:
            self.task = asyncio.create_task(self._beat())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def alive(self, instance: str | None) -> bool:
        """Whether the gateway process `instance` wrote its heartbeat within HEARTBEAT_TTL_S."""
        return await self.store.get(self.key(instance)) is not None

    @staticmethod
    def key(instance: str | None) -> str:
        return f"instance:{instance}"

    async def _beat(self) -> None:
        wait = 0.0
        while True:
            await asyncio.sleep(wait)
            try:
                await self.write()
                if self.also is not None:
                    await self.also()
                wait = self.interval_s
            except StoreError:
                log.warning("heartbeat write failed; retrying in 0.5 s", exc_info=True)
                wait = 0.5  # back soon after the store returns: others read a missing heartbeat as death
