"""The process-wide decoded-media budget: decoded pixels that all requests scoring at once may hold.

The [media] budgets bound one request (media.max_request_pixels: ~1.6 GB of RGB by default) while
admission lets many score at once, so the sum was unbounded. Here each request reserves what
its compressed media decode to (what validation charged it: media.limits' request budget) before
it scores, and gives it back when it has ended and its decode/encode threads have stopped
(media/scope.py). A reservation that does not fit waits its turn (first come, first served), for
at most the caller's wait, then `BudgetSpent` says when to come back: the synchronous APIs answer
429 / 503 with Retry-After, accepted cosmos-rl work waits until its own deadline.

One request larger than the whole budget cannot exist: the config requires
max_process_pixels >= max_request_pixels. A request that reserves nothing (raw arrays only, no
compressed media) never waits.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..exceptions import Overloaded

BYTES_PER_PIXEL = 3  # RGB uint8: what a decoded pixel holds
AUTO_SHARE_OF_MEMORY = 0.25  # the auto budget: this share of the machine's (or cgroup's) memory


def machine_memory_bytes() -> int | None:
    """Physical memory, or the cgroup's limit when lower (a container)."""
    total = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (total or 1 << 62):
            total = int(text)
        break
    return total


def auto_process_pixels(max_request_pixels: int) -> int:
    """The default budget: a quarter of memory in decoded RGB pixels, at least one full request."""
    memory = machine_memory_bytes()
    if memory is None:
        return max_request_pixels * 4
    return max(max_request_pixels, int(memory * AUTO_SHARE_OF_MEMORY) // BYTES_PER_PIXEL)


class BudgetSpent(Overloaded):
    """The budget had no room within the wait; `retry_after_s` says when to come back."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class MediaBudget:
    """Decoded pixels reserved by the requests scoring now, at most `limit` (event-loop side)."""

    def __init__(self, limit: int, *, max_waiting: int = 1024, retry_after_s: int = 2) -> None:
        self.limit = limit
        self.max_waiting = max_waiting
        self.retry_after_s = retry_after_s
        self.in_use = 0
        self.released_total = 0  # pixels ever given back: the heap trim reads it (server/heap.py)
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _fits(self, pixels: int) -> bool:
        return self.in_use + pixels <= self.limit

    @asynccontextmanager
    async def reserve(self, pixels: int, *, wait_s: float | None) -> AsyncIterator[None]:
        """Hold `pixels` for the block; wait at most `wait_s` for room (None: as long as it takes)."""
        await self.acquire(pixels, wait_s=wait_s)
        try:
            yield
        finally:
            self.release(pixels)

    async def acquire(self, pixels: int, *, wait_s: float | None) -> None:
        """Take `pixels`, waiting at most `wait_s` (None: as long as it takes); BudgetSpent if not.
        Give them back with `release(pixels)`."""
        pixels = min(pixels, self.limit)  # the config keeps a request under the limit; never deadlock
        if pixels <= 0:
            return
        if not self._waiters and self._fits(pixels):
            self.in_use += pixels
            return
        if len(self._waiters) >= self.max_waiting:
            raise BudgetSpent(self._spent_message(pixels, "and too many requests wait for it"), self.retry_after_s)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (pixels, fut)
        self._waiters.append(entry)
        try:
            if wait_s is None:
                await fut
            else:
                async with asyncio.timeout(wait_s):
                    await fut
        except BaseException as err:
            if fut.done() and not fut.cancelled():  # granted as the wait ended: give it back
                self.release(pixels)
            else:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                self._grant()  # a large waiter leaving may let smaller ones behind it in
            if isinstance(err, TimeoutError):
                raise BudgetSpent(self._spent_message(pixels, f"for {wait_s:g} s"), self.retry_after_s) from None
            raise

    def _spent_message(self, pixels: int, how: str) -> str:
        return (f"overloaded: this request's media decode to {pixels} pixels and the process-wide budget "
                f"(media.max_process_pixels = {self.limit}) has {self.limit - self.in_use} free {how}; "
                f"retry after {self.retry_after_s} s")

    def release(self, pixels: int) -> None:
        if pixels > 0:
            self.in_use -= min(pixels, self.limit)
            self.released_total += min(pixels, self.limit)
            self._grant()

    def _grant(self) -> None:
        """Admit waiters in order while the first fits (no overtaking: a large one is not starved)."""
        while self._waiters and self._fits(self._waiters[0][0]):
            pixels, fut = self._waiters.popleft()
            if fut.done():
                continue
            self.in_use += pixels
            fut.set_result(None)
