"""Admission control of the synchronous APIs: bounded waiting, then a refusal with Retry-After.

Without it, at 10x a backend's capacity every request queued inside the backend pool and waited
(p50 5-10 s, all eventually 200): trainers' clients time out and retry, doubling the load. Here a
request either gets one of `max_active` slots, waits for one (at most `max_waiting` requests, each
at most `max_wait_s`), or is refused at once. The bounds default to the judges' capacity
(AdmissionConfig.bounds). An admitted request then takes, in each VLM backend it uses, the calls
it sends there (lanes.py: replicas x max_concurrency per backend, waiting first come first served,
the rest refused), so refusals engage in front of the backend whatever the request sizes and
the other judges configured.
A request is also refused at once while `busy` names a reason (the media pool's backlog past
[media] max_pending): work already admitted finishes, new work waits at the client instead of in
an unbounded queue here. Once validated, a request also reserves what its media decode to in the
process-wide decoded-media budget (`media`, waiting at most max_wait_s) and room in its head
judges' queues (Gateway.score raises QueueFull). The caller turns `Refused` into its protocol's
status (429 native, 503 Flow-Factory) with `Retry-After`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from ..config import AdmissionConfig
from ..exceptions import Overloaded
from ..gateway import Gateway
from ..judges.queue import QueueFull
from ..media import request_pixels
from ..media.budget import BudgetSpent, MediaBudget
from ..metrics import Metrics
from ..schema import RewardRequest, RewardResponse
from .lanes import Lanes, LaneFull


class Refused(Overloaded):
    """No slot now; `retry_after_s` says when to come back."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Admission:
    def __init__(self, cfg: AdmissionConfig, metrics: Metrics, *, capacity: dict[str, int] | None = None,
                 backend_slots: dict[str, int] | None = None, budget: MediaBudget | None = None,
                 busy: Callable[[], str | None] | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.capacity = capacity or {}
        self.max_active, self.max_waiting = cfg.bounds(sum(self.capacity.values()))
        self.budget = budget
        self.busy = busy
        # each VLM backend's calls, bounded by its slots (lanes.py)
        self.lanes = Lanes(backend_slots or {}, cfg.waiting_per_slot)
        self._slots = asyncio.Semaphore(self.max_active)
        self.active = 0
        self.waiting = 0
        metrics.admission_limit.labels("max_active").set(self.max_active)
        metrics.admission_limit.labels("max_waiting").set(self.max_waiting)
        metrics.admission_limit.labels("max_wait_s").set(cfg.max_wait_s)
        metrics.watch_admission(self)  # active / waiting: read at each scrape

    def describe(self) -> dict[str, Any]:
        """The bounds in force and where they came from (for /readyz)."""
        derived = [k for k in ("max_active", "max_waiting") if getattr(self.cfg, k) is None]
        out: dict[str, Any] = {
            "max_active": self.max_active, "max_waiting": self.max_waiting, "max_wait_s": self.cfg.max_wait_s,
            "retry_after_s": self.cfg.retry_after_s, "active": self.active, "waiting": self.waiting,
            "derived": derived, "capacity": self.capacity, "backends": self.lanes.describe(),
        }
        if self.budget is not None:
            out["media_budget_pixels"] = {"limit": self.budget.limit, "in_use": self.budget.in_use,
                                          "waiting": self.budget.waiting}
        return out

    def _refuse(self, api: str, reason: str, message: str) -> Refused:
        self.metrics.count(self.metrics.admission_refused, (api, reason))
        return Refused(message, self.cfg.retry_after_s)

    async def scored(self, api: str, gateway: Gateway, request: RewardRequest) -> RewardResponse:
        """Score an admitted, validated request: its calls held in its backends' lanes, what its
        media decode to held in the process-wide budget while it scores, room in its heads' queues
        taken (or Refused)."""
        try:
            calls = await self.lanes.take(gateway.backend_demand(request), self.cfg.max_wait_s)
        except LaneFull as err:
            raise self._refuse(api, "backend_busy", f"overloaded: {err}; retry after {self.cfg.retry_after_s} s") \
                from None
        try:
            async with self.media(api, request_pixels()):
                try:
                    return await gateway.score(request, when_busy="refuse")
                except QueueFull as err:
                    raise self._refuse(api, "judge_queue", f"{err}; retry after {self.cfg.retry_after_s} s") from None
        finally:
            self.lanes.give(calls)

    @asynccontextmanager
    async def media(self, api: str, pixels: int) -> AsyncIterator[None]:
        """Hold `pixels` of the process-wide decoded-media budget while the block scores."""
        if self.budget is None:
            yield
            return
        try:
            await self.budget.acquire(pixels, wait_s=self.cfg.max_wait_s)
        except BudgetSpent as err:
            raise self._refuse(api, "media_budget", str(err)) from None
        try:
            yield
        finally:
            self.budget.release(pixels)

    async def _wait(self, api: str, until: Callable[[Awaitable[bool]], Awaitable[bool]] | None) -> None:
        if self.waiting >= self.max_waiting:
            raise self._refuse(api, "queue_full", (
                f"overloaded: {self.active} requests scoring (server.admission.max_active = {self.max_active}) "
                f"and {self.waiting} waiting (max_waiting = {self.max_waiting}); retry after "
                f"{self.cfg.retry_after_s} s"))
        self.waiting += 1
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
                    f"({self.max_active} requests scoring); retry after {self.cfg.retry_after_s} s")) from None
            raise
        finally:
            self.waiting -= 1

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
        try:
            yield
        finally:
            self.active -= 1
            self._slots.release()
