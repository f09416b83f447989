"""Give freed memory back to the OS after large requests.

Large request bodies, JSON parses and decodes are freed into glibc's heap, which keeps them: its
mmap threshold rises after each large free, so later large buffers come from the heap, and the
heap's top is rarely free to trim. Left alone, a gateway's RSS stays at its largest burst (a fuzz
run: 218 MB -> 619 MB, all of it given back by malloc_trim(0); no object retains it). So:
- a fixed mmap threshold (1 MiB): buffers at least that large are mmapped and unmapped on free;
- after a request whose body was large, or while which decoded media were given back to the
  process-wide budget (frames decoded from a small body: their buffers are freed into the heap
  the same way), malloc_trim(0) in a thread, at most once a second.
Only on glibc; elsewhere both are no-ops.

And the cyclic GC: the objects of a started gateway (its modules, FastAPI, pydantic, numpy: ~150k
tracked objects) are moved out of the collector's sight once (`freeze_startup_objects`), so a full
collection walks only what requests made since (~14k) instead of pausing the event loop for the
whole heap; and the young generation is collected every 10,000 allocations instead of 700
(`tune_gc_for_serving`), which cut the collector's CPU per request by more than half (figures in
bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..media.budget import MediaBudget

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20
TRIM_AFTER_BODY_BYTES = 1 << 20
TRIM_AFTER_DECODED_PIXELS = 1 << 19  # ~1.5 MB of RGB
TRIM_EVERY_S = 1.0


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only
        libc.mallopt  # noqa: B018
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def fix_mmap_threshold() -> None:
    if _LIBC is not None and not _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES):
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")


def freeze_startup_objects() -> None:
    """Collect, then exempt every object alive now from later collections (gc.freeze).

    For a process that serves one gateway until it exits (`judge-gateway serve`), called once
    after the app is built: what is alive then lives as long as the process. Not for a process
    that builds and drops apps (tests): what it drops after a freeze is never collected.
    """
    gc.collect()
    gc.freeze()


# The young generation's threshold while serving (gc.set_threshold's first value; CPython's default
# is 700): a yes/no request allocates some thousands of container objects, and at 64 requests in
# flight each young collection walks the live ones of all of them, so at 700 the collector took
# ~0.25 ms of CPU per request (~7% of it); at 10,000, ~0.1 ms, for a young collection of ~10 ms
# every few dozen requests (bench/RESULTS.md).
SERVING_GEN0_THRESHOLD = 10_000


def tune_gc_for_serving() -> None:
    """Collect the young generation less often (SERVING_GEN0_THRESHOLD), the older ones as before
    relative to it. For `judge-gateway serve`, after freeze_startup_objects."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(SERVING_GEN0_THRESHOLD, gen1, gen2)


def trim() -> None:
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class HeapTrimmer:
    """After a response to a request whose body reached TRIM_AFTER_BODY_BYTES, or while which
    `budget` got TRIM_AFTER_DECODED_PIXELS of decoded media back, trim the heap (rate-limited; in
    a worker thread, so the event loop never waits for it). The request guard (guards.py) calls
    `released()` when a request starts and `after` when it ends."""

    def __init__(self, budget: MediaBudget | None = None) -> None:
        self.budget = budget
        self.enabled = _LIBC is not None
        self._last = 0.0
        self._pending: asyncio.Task | None = None
        fix_mmap_threshold()

    def released(self) -> int:
        """Decoded pixels given back to the budget so far (a request's start mark)."""
        return self.budget.released_total if self.budget is not None else 0

    def after(self, body_bytes: int, released_at_start: int) -> None:
        if not self.enabled:
            return
        decoded = self.released() - released_at_start
        if body_bytes >= TRIM_AFTER_BODY_BYTES or decoded >= TRIM_AFTER_DECODED_PIXELS:
            self._schedule()

    def _schedule(self) -> None:
        if self._pending is not None and not self._pending.done():
            return
        self._pending = asyncio.ensure_future(self._trim_soon())

    async def _trim_soon(self) -> None:
        wait = self._last + TRIM_EVERY_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last = time.monotonic()
        await asyncio.to_thread(trim)
