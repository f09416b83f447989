"""Per-backend admission of the synchronous APIs: the cells (sample x judge calls) a request sends
to each VLM backend, bounded by what that backend can work on at once.

A request-count bound alone cannot protect a backend: a request of 8 samples is 8 calls, and
the judges' summed capacity (every backend's slots plus every head's batch) says nothing about the
one backend a request uses. So at 10x one backend's capacity, with the shipped defaults, every
request was admitted and queued inside the backend pool (p50 5 s, nothing refused). Here each
backend is a lane of `slots` cells (replicas x max_concurrency); a request takes, in each lane it
uses, the cells it sends there (at most the lane's slots, so one large request still runs alone),
waits first come first served while they are busy, at most `waiting_per_slot` x slots cells
wait in a lane, and the rest is refused at once (the caller answers 429 / 503 with Retry-After).
Head judges are bounded by their own queues (judges/queue.py), not here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..exceptions import Overloaded


class LaneFull(Overloaded):
    """A lane's waiting room is full, or the wait took too long; the message says which."""


class Lane:
    def __init__(self, name: str, slots: int, max_waiting: int) -> None:
        self.name = name
        self.slots = slots
        self.max_waiting = max_waiting  # cells
        self.in_use = 0
        self.waiting = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, cells: int) -> bool:
        return self.in_use == 0 or self.in_use + cells <= self.slots

    async def take(self, cells: int) -> None:
        """`cells` of this lane, at once when they fit and nobody waits, else after those ahead;
        LaneFull at once when the waiting room has no place for them."""
        if not self._queue and self._fits(cells):
            self.in_use += cells
            return
        if self.waiting + cells > self.max_waiting:
            raise LaneFull(f"backend {self.name!r} is busy: {self.in_use} of its {self.slots} slots in use and "
                           f"{self.waiting} calls waiting (at most {self.max_waiting})")
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (cells, granted)
        self._queue.append(entry)
        self.waiting += cells
        try:
            await asyncio.shield(granted)
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.give(cells)  # granted as the waiter gave up: the cells go to the next
            else:
                granted.cancel()
                self._queue.remove(entry)
                self._wake()  # those behind it may fit now
            raise
        finally:
            self.waiting -= cells

    def give(self, cells: int) -> None:
        self.in_use -= cells
        self._wake()

    def _wake(self) -> None:
        while self._queue and self._fits(self._queue[0][0]):
            cells, granted = self._queue.popleft()
            self.in_use += cells
            granted.set_result(None)

    def describe(self) -> dict[str, int]:
        return {"slots": self.slots, "in_use": self.in_use, "waiting": self.waiting, "max_waiting": self.max_waiting}


class Lanes:
    """One lane per VLM backend; `take` holds a request's calls in every lane it uses."""

    def __init__(self, slots: Mapping[str, int], waiting_per_slot: float) -> None:
        self.lanes = {name: Lane(name, n, int(n * waiting_per_slot)) for name, n in slots.items() if n > 0}

    async def take(self, demand: Mapping[str, int], wait_s: float) -> list[tuple[Lane, int]]:
        """Take `demand` (backend -> calls, each at most its lane's slots) and return what was
        taken, for `give`; LaneFull when a lane's waiting room is full or the cells did not come
        within `wait_s`, with nothing held. Lanes are taken in name order, so two requests never
        wait on each other's lanes in a circle."""
        taken: list[tuple[Lane, int]] = []
        try:
            async with asyncio.timeout(wait_s):
                for name in sorted(demand):
                    lane = self.lanes.get(name)
                    if lane is None or demand[name] <= 0:
                        continue
                    cells = min(demand[name], lane.slots)
                    await lane.take(cells)
                    taken.append((lane, cells))
        except TimeoutError:
            self.give(taken)
            raise LaneFull(f"no room on backend(s) {', '.join(sorted(demand))} within "
                           f"server.admission.max_wait_s = {wait_s:g} s") from None
        except BaseException:
            self.give(taken)
            raise
        return taken

    @staticmethod
    def give(taken: list[tuple[Lane, int]]) -> None:
        for lane, cells in taken:
            lane.give(cells)

    def describe(self) -> dict[str, Any]:
        return {name: lane.describe() for name, lane in self.lanes.items()}
