"""A request's media work across the threads it runs on: a stop flag, and a count of the threads
still at work.

Decoding and encoding run in worker threads (the media pool, `asyncio.to_thread`), which a
timed-out or cancelled request cannot interrupt: without a flag such a thread kept decoding a
video nobody waited for any more, and held its frames. `Gateway.score` enters a `MediaScope` (a context
variable, so every task and thread it starts inherits it); each decode/encode loop runs
`with working():` and calls `check_stop()` once per frame, so when the request ends (answered,
timed out, cancelled) its threads stop at their next frame and drop what they hold.
`MediaScope.wait_idle` lets the request wait for that before it gives its decoded-media
reservation back (media/budget.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .limits import MediaError


class MediaCancelled(MediaError):
    """The request this media work belonged to has ended; nobody waits for the result."""


class MediaScope:
    def __init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._busy = 0
        self._idle: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def busy(self) -> int:
        """Threads inside `working()` now."""
        return self._busy

    def stop(self) -> None:
        self._stop.set()

    def check(self) -> None:
        if self._stop.is_set():
            raise MediaCancelled("the request ended (answered, timed out or cancelled) while its media was decoded")

    @contextmanager
    def working(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                idle, loop = (self._idle, self._loop) if self._busy == 0 else (None, None)
            if idle is not None and loop is not None:
                try:
                    loop.call_soon_threadsafe(idle.set)
                except RuntimeError:  # its loop has closed: nobody waits
                    pass

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no thread works for this scope (at most `timeout_s`); True when idle."""
        with self._lock:
            if self._busy == 0:
                return True
            self._loop = asyncio.get_running_loop()
            self._idle = idle = asyncio.Event()
        try:
            async with asyncio.timeout(timeout_s):
                while self._busy:
                    await idle.wait()
                    idle.clear()
            return True
        except TimeoutError:
            return False


_SCOPE: ContextVar[MediaScope | None] = ContextVar("media_scope", default=None)


def current_scope() -> MediaScope | None:
    return _SCOPE.get()


@contextmanager
def media_scope(scope: MediaScope) -> Iterator[MediaScope]:
    """Make `scope` the current one for this context (tasks and threads started inside inherit it)."""
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def check_stop() -> None:
    """Raise MediaCancelled when the current request has ended (no scope: never)."""
    scope = _SCOPE.get()
    if scope is not None:
        scope.check()


@contextmanager
def working() -> Iterator[None]:
    """Count this thread as working for the current request until the block ends."""
    scope = _SCOPE.get()
    if scope is None:
        yield
        return
    with scope.working():
        yield
