"""`MediaPool`: where media work (decoding, hashing, resizing, encoding) runs, off the event loop.

Threads, one per core by default: the work is native code that releases the GIL (OpenCV,
libjpeg-turbo, PIL's resampling, FFmpeg's codecs, zlib, hashlib), so threads use every core
without copying a clip into another process. The pool is bounded: `pending` counts the jobs
submitted and not finished, and `overloaded` says when that is past `max_pending`, which the
server's admission control reads to refuse new requests (429 / 503 with Retry-After) instead of
letting a backlog of encodes grow without limit. Work already submitted always runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# Jobs waiting per worker thread before new requests are refused: a 720p clip's encode is
# ~0.2-0.4 s of CPU, an image's a few ms; 32 deep keeps every core busy between requests.
PENDING_PER_WORKER = 32


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class MediaPool:
    """A bounded thread pool for media work (see the module docstring)."""

    def __init__(self, workers: int | None = None, max_pending: int | None = None) -> None:
        self.workers = workers or default_workers()
        self.max_pending = max_pending or PENDING_PER_WORKER * self.workers
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="jg-media")
        self._lock = threading.Lock()
        self.pending = 0  # submitted and not finished
        self.done = 0

    @property
    def overloaded(self) -> bool:
        return self.pending >= self.max_pending

    def _finished(self, _future: object) -> None:
        with self._lock:
            self.pending -= 1
            self.done += 1

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the pool; the caller's event loop keeps running meanwhile."""
        with self._lock:
            self.pending += 1
        try:
            # The caller's context goes along (media/scope.py: the request's stop flag and count).
            future = self._executor.submit(contextvars.copy_context().run, fn)
        except BaseException:
            self._finished(None)
            raise
        future.add_done_callback(self._finished)
        return await asyncio.wrap_future(future)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=False)


_default: MediaPool | None = None
_default_lock = threading.Lock()


def default_pool() -> MediaPool:
    """The process's pool (made at first use, sized to the cores), unless `configure` set one."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MediaPool()
        return _default


def configure(workers: int | None, max_pending: int | None) -> MediaPool:
    """Replace the process's pool with one of this size (the server does it from [media]); work
    on the old pool finishes there."""
    global _default
    with _default_lock:
        old, _default = _default, MediaPool(workers, max_pending)
    if old is not None:
        old.shutdown()
    return _default
