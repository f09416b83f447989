"""Bounded queues of judges whose work waits for one worker (the heads): the items (images or
frames) and pixels accepted and not yet answered, per judge.

Without a bound a head's queue grew without limit under load, and a small request waited behind
everything queued before it (8 s behind one 4096² OCR image, 30 s under the fuzz load). A
request holds room for all it will send to each such judge before it scores (`hold_queues`,
atomic across its judges: nothing is held unless everything fits) and gives each sample's
share back as that sample's score ends. A request that does not fit is refused at once
(`QueueFull`: 429 / 503 with Retry-After on the synchronous APIs) or, for accepted work
(cosmos-rl), waits for room. An empty queue takes any request, however large: it would
otherwise never fit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..exceptions import Overloaded


class QueueFull(Overloaded):
    """A judge's queue has no room for the request now; come back later."""


class JudgeQueue:
    def __init__(self, judge: str, max_items: int, max_pixels: int) -> None:
        self.judge = judge
        self.max_items = max_items
        self.max_pixels = max_pixels
        self.items = 0
        self.pixels = 0
        self._room: asyncio.Event | None = None

    def fits(self, items: int, pixels: int) -> bool:
        return self.items == 0 or (self.items + items <= self.max_items and self.pixels + pixels <= self.max_pixels)

    def take(self, items: int, pixels: int) -> None:
        self.items += items
        self.pixels += pixels

    def give(self, items: int, pixels: int) -> None:
        self.items -= items
        self.pixels -= pixels
        if self._room is not None:
            self._room.set()

    async def room(self) -> None:
        """Wait until something is given back."""
        if self._room is None:
            self._room = asyncio.Event()
        self._room.clear()
        await self._room.wait()

    def full(self, items: int, pixels: int) -> str:
        return (f"overloaded: judge {self.judge!r} has {self.items} items ({self.pixels} pixels) queued; this request "
                f"adds {items} ({pixels} pixels), over its bound of {self.max_items} items / {self.max_pixels} pixels "
                "(options.max_queue_items / max_queue_pixels)")


@dataclass
class _Share:
    queue: JudgeQueue
    items: int
    pixels: int


class QueueHold:
    """What one request holds in its judges' queues, per (judge, sample index)."""

    def __init__(self, shares: dict[tuple[str, int], _Share]) -> None:
        self._shares = shares

    def give(self, judge: str, index: int) -> None:
        share = self._shares.pop((judge, index), None)
        if share is not None:
            share.queue.give(share.items, share.pixels)

    def give_all(self) -> None:
        for key in list(self._shares):
            self.give(*key)


Demand = dict[str, tuple[JudgeQueue, list[tuple[int, int]]]]  # judge -> (its queue, (items, pixels) per sample)


async def hold_queues(demand: Demand, *, wait: bool) -> QueueHold:
    """Take room for every sample's share in every judge's queue, all or nothing (no await between
    the check and the taking). `wait`: wait for room instead of raising QueueFull."""
    while True:
        totals = {judge: (queue, sum(i for i, _ in per), sum(p for _, p in per))
                  for judge, (queue, per) in demand.items()}
        full = [(queue, items, pixels) for queue, items, pixels in totals.values() if not queue.fits(items, pixels)]
        if not full:
            shares = {}
            for judge, (queue, per) in demand.items():
                for index, (items, pixels) in enumerate(per):
                    if items or pixels:
                        queue.take(items, pixels)
                        shares[(judge, index)] = _Share(queue, items, pixels)
            return QueueHold(shares)
        queue, items, pixels = full[0]
        if not wait:
            raise QueueFull(queue.full(items, pixels))
        await queue.room()
