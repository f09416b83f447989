"""Admission control of the synchronous APIs: bounded waiting, then a refusal with Retry-After.

Without it, at 10x a backend's capacity every request queued inside the backend pool and waited
(p50 5-10 s, all eventually 200): trainers' clients time out and retry, doubling the load. Here a
request either gets one of `max_active` slots, waits for one (at most `max_waiting` requests, each
at most `max_wait_s`), or is refused at once. The caller turns `Refused` into its protocol's
status (429 native, 503 Flow-Factory) with `Retry-After`. A request is also refused at once while
`busy` names a reason (the media pool's backlog past [media] max_pending): work already admitted
finishes, new work waits at the client instead of in an unbounded queue here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from ..config import AdmissionConfig
from ..metrics import Metrics


class Refused(Exception):
    """No slot now; `retry_after_s` says when to come back."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Admission:
    def __init__(self, cfg: AdmissionConfig, metrics: Metrics, busy: Callable[[], str | None] | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.busy = busy
        self._slots = asyncio.Semaphore(cfg.max_active)
        self.active = 0
        self.waiting = 0
        metrics.admission_limit.labels("max_active").set(cfg.max_active)
        metrics.admission_limit.labels("max_waiting").set(cfg.max_waiting)
        metrics.admission_limit.labels("max_wait_s").set(cfg.max_wait_s)

    def _refuse(self, api: str, reason: str, message: str) -> Refused:
        self.metrics.admission_refused.labels(api, reason).inc()
        return Refused(message, self.cfg.retry_after_s)

    async def _wait(self, api: str, until: Callable[[Awaitable[bool]], Awaitable[bool]] | None) -> None:
        if self.waiting >= self.cfg.max_waiting:
            raise self._refuse(api, "queue_full", (
                f"overloaded: {self.active} requests scoring (server.admission.max_active = {self.cfg.max_active}) "
                f"and {self.waiting} waiting (max_waiting = {self.cfg.max_waiting}); retry after "
                f"{self.cfg.retry_after_s} s"))
        self.waiting += 1
        self.metrics.admission_waiting.set(self.waiting)
        # Its own task, shielded: whoever gives up (timeout, client gone) gives back a slot taken
        # at that very moment, so a slot is never lost.
        acquired = asyncio.ensure_future(self._slots.acquire())
        try:
            async with asyncio.timeout(self.cfg.max_wait_s):
                await (until(asyncio.shield(acquired)) if until is not None else asyncio.shield(acquired))
        except BaseException as err:
            if acquired.done() and not acquired.cancelled() and acquired.exception() is None:
                self._slots.release()
            else:
                acquired.cancel()
            if isinstance(err, TimeoutError):
                raise self._refuse(api, "wait_timeout", (
                    f"overloaded: no scoring slot within server.admission.max_wait_s = {self.cfg.max_wait_s} s "
                    f"({self.cfg.max_active} requests scoring); retry after {self.cfg.retry_after_s} s")) from None
            raise
        finally:
            self.waiting -= 1
            self.metrics.admission_waiting.set(self.waiting)

    @asynccontextmanager
    async def slot(self, api: str,
                   until: Callable[[Awaitable[bool]], Awaitable[bool]] | None = None) -> AsyncIterator[None]:
        """A scoring slot. `until` wraps the wait (the caller's unless_disconnected): a client that
        leaves while waiting gives its waiting place back at once."""
        reason = self.busy() if self.busy is not None else None
        if reason is not None:
            raise self._refuse(api, "media_backlog", f"overloaded: {reason}; retry after {self.cfg.retry_after_s} s")
        if not self._slots.locked():
            await self._slots.acquire()  # a free slot: taken at once, before any other request looks
        else:
            await self._wait(api, until)
        self.active += 1
        self.metrics.admission_active.set(self.active)
        try:
            yield
        finally:
            self.active -= 1
            self.metrics.admission_active.set(self.active)
            self._slots.release()
