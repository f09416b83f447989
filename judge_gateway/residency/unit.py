"""One thing that sleeps (a head's worker, or a backend's vLLM servers, with the judges on it) and
the contract that makes a sleeping judge safe for a trainer:

- **work waits for a wake, within its deadline.** A call (`use`) on a unit that is not awake
  starts a wake (once, shared by every call that waits) and waits for it at most until the call's
  deadline (`backends.call_deadline`: the judge's deadline_s, a cosmos-rl request's own). A wake
  that fails, runs past `wake_timeout_s`, or outlasts the call's deadline fails the call with
  `WakeFailed` (a `backend_unavailable` cell, with the reason), never a hang.
- **a sleep never drops work.** A sleep first stops admitting calls (they wait, as for a wake),
  then waits up to `drain_timeout_s` for the calls in flight when it was asked; calls still
  running then: the sleep is refused (`SleepRefused`, 409) and the unit is awake again. Only an
  idle unit is put to sleep.
- **a failed transition is visible and repaired.** A sleep or wake that fails or runs out of time
  marks the unit `failed` with the reason (its judges read not ready) and asks the driver to
  `recover` (a head's worker is restarted); the next call tries a wake again.
- **one transition at a time**; a wake asked while a sleep drains runs after it.

States: awake -> draining -> sleeping -> asleep -> waking -> awake, and failed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from ..backends import BackendUnavailable, call_deadline
from ..config import ResidencyConfig
from ..exceptions import InvalidInput, Unavailable
from .driver import SleepBusy, SleepDriver

log = logging.getLogger(__name__)

State = Literal["awake", "draining", "sleeping", "asleep", "waking", "failed"]
STATES: tuple[State, ...] = ("awake", "draining", "sleeping", "asleep", "waking", "failed")
# What asked for a sleep or a wake (the metrics' `trigger` label, the timeline's events).
Trigger = Literal["told", "header", "idle", "flow_factory", "request", "restart"]


class WakeFailed(BackendUnavailable):
    """A call waited for its judge to wake and it did not, in time: a `backend_unavailable` cell
    whose message says why (the wake's error, its timeout, or the call's deadline)."""


class SleepRefused(Unavailable):
    """A sleep that did not happen now: work still in flight after drain_timeout_s, or the server
    refused; the judge is awake and nothing was dropped (HTTP 409)."""


class SleepFailed(Unavailable):
    """A sleep that failed part way: the judge is marked failed (not ready) and recovered."""


class NotColocated(InvalidInput):
    """A residency call named a judge that is resident (it never sleeps) or not configured."""


@dataclass
class WakeWait:
    """One call's passage through its unit: whether it had to wait for a wake, and since when (a
    cell that runs out of time while waiting is reported as the wake's failure, not as slow)."""

    unit: "ResidencyUnit"
    since: float | None = None

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def why(self) -> str:
        waited = time.monotonic() - (self.since or time.monotonic())
        return self.unit.waiting_reason(waited)


@dataclass
class UnitCounts:
    wakes: int = 0
    wake_failures: int = 0
    sleeps: int = 0
    sleeps_refused: int = 0
    sleep_failures: int = 0
    last_wake_s: float | None = None
    asleep_s: float = 0.0  # finished spans; the current one is added when read
    waiting: int = 0  # calls waiting for the unit to be awake
    last: dict[str, Any] = field(default_factory=dict)  # the last transition's facts


# Told about every transition (residency/controller.py: metrics and the timeline).
Observer = Callable[["ResidencyUnit", str, Trigger, dict[str, Any]], None]


class ResidencyUnit:
    def __init__(self, name: str, judges: list[str], cfg: ResidencyConfig, driver: SleepDriver,
                 observer: Observer | None = None) -> None:
        self.name = name  # "head:clip", "backend:qwen_vl"
        self.judges = judges
        self.cfg = cfg
        self.driver = driver
        self.observer = observer
        self.state: State = "awake"
        self.reason: str | None = None
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.counts = UnitCounts()
        self.verified = False
        self._asleep_since: float | None = None
        self._lock: asyncio.Lock | None = None
        self._changed: asyncio.Event | None = None
        self._wake_task: asyncio.Task[dict[str, Any]] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle_task: asyncio.Task[None] | None = None

    # -- what the controller and the judges read ----------------------------------------------
    def asleep_seconds(self) -> float:
        current = time.monotonic() - self._asleep_since if self._asleep_since is not None else 0.0
        return self.counts.asleep_s + current

    def waiting_reason(self, waited_s: float) -> str:
        state = f"{self.state}: {self.reason}" if self.reason else self.state
        return (f"{self.driver.label} did not wake in time for this call (waited {waited_s:.1f} s; "
                f"the unit is {state}; wake_timeout_s = {self.cfg.wake_timeout_s:g})")

    # -- the loop's primitives (made on the loop that uses them) ------------------------------
    def _lock_(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _event(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _set(self, state: State, reason: str | None = None) -> None:
        self.state, self.reason = state, reason
        old, self._changed = self._changed, asyncio.Event()
        if old is not None:
            old.set()  # everyone waiting for a change looks again

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _tell(self, event: str, trigger: Trigger, facts: dict[str, Any]) -> None:
        self.counts.last = {"event": event, "trigger": trigger, **facts}
        if self.observer is not None:
            self.observer(self, event, trigger, facts)

    # -- calls ----------------------------------------------------------------------------------
    @asynccontextmanager
    async def use(self, wait: WakeWait | None = None) -> AsyncIterator[None]:
        """Hold the unit awake for one call: wait for it to be awake (starting a wake), within
        the call's deadline. Raises WakeFailed."""
        self.start_idle_timer()
        if self.state != "awake":
            await self._until_awake(wait or WakeWait(self))
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()
            if self.in_flight == 0:
                self._set(self.state, self.reason)  # a drain waits for this

    async def _until_awake(self, wait: WakeWait) -> None:
        deadline = call_deadline()
        wait.since = time.monotonic()
        self.counts.waiting += 1
        try:
            while self.state != "awake":
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WakeFailed(wait.why())
                if self.state in ("asleep", "failed"):
                    task = self._start_wake("request")
                    try:
                        await asyncio.wait_for(asyncio.shield(task), remaining)
                    except TimeoutError:
                        raise WakeFailed(wait.why()) from None
                else:  # draining, sleeping, waking: the next change decides
                    try:
                        await asyncio.wait_for(self._event().wait(), remaining)
                    except TimeoutError:
                        raise WakeFailed(wait.why()) from None
        finally:
            self.counts.waiting -= 1
        wait.since = None

    # -- wake -----------------------------------------------------------------------------------
    def _start_wake(self, trigger: Trigger) -> asyncio.Task[dict[str, Any]]:
        if self._wake_task is None or self._wake_task.done():
            self._wake_task = self._spawn(self._wake(trigger), "wake")
            self._wake_task.add_done_callback(_retrieve)
        return self._wake_task

    async def wake(self, trigger: Trigger = "told") -> dict[str, Any]:
        """Wake it now (a trainer about to roll out: the wake overlaps its generation). Raises
        WakeFailed."""
        self.start_idle_timer()
        if self.state == "awake":
            return {"state": "awake", "already": True}
        return await asyncio.shield(self._start_wake(trigger))

    async def _wake(self, trigger: Trigger) -> dict[str, Any]:
        async with self._lock_():
            if self.state == "awake":
                return {"state": "awake", "already": True}
            was = self.state
            self._set("waking", f"asked by {trigger}")
            started = time.monotonic()
            try:
                facts = await asyncio.wait_for(self.driver.wake(self.cfg.level), self.cfg.wake_timeout_s)
            except Exception as exc:  # noqa: BLE001 - every failure of a wake is reported the same way
                seconds = time.monotonic() - started
                why = (f"no wake within wake_timeout_s = {self.cfg.wake_timeout_s:g} s"
                       if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}")
                self.counts.wake_failures += 1
                self._fail(f"the wake failed after {seconds:.1f} s: {why}")
                self._tell("wake_failed", trigger, {"seconds": round(seconds, 3), "reason": why})
                raise WakeFailed(f"{self.driver.label} could not wake: {why}") from None
            seconds = time.monotonic() - started
            if self._asleep_since is not None:
                self.counts.asleep_s += started - self._asleep_since
                self._asleep_since = None
            self.counts.wakes += 1
            self.counts.last_wake_s = seconds
            self.last_used = time.monotonic()
            self._set("awake")
            self._tell("wake", trigger, {"seconds": round(seconds, 4), "from": was, **_flat(facts)})
            log.info("%s awake after %.3f s (%s)", self.driver.label, seconds, trigger)
            return {"state": "awake", "seconds": seconds, **facts}

    def _fail(self, reason: str) -> None:
        if self._asleep_since is not None:
            self.counts.asleep_s += time.monotonic() - self._asleep_since
            self._asleep_since = None
        self._set("failed", reason)
        log.error("%s: %s", self.driver.label, reason)
        self._spawn(self._recover(reason), "recover")

    async def _recover(self, reason: str) -> None:
        try:
            await self.driver.recover(reason)
        except Exception:  # noqa: BLE001 - logged; the next call tries a wake again
            log.exception("%s: recovery failed", self.driver.label)

    # -- sleep ----------------------------------------------------------------------------------
    async def sleep(self, trigger: Trigger = "told") -> dict[str, Any]:
        """Put it to sleep once the calls in flight now have finished (never dropping one).
        Raises SleepRefused (still awake) or SleepFailed (marked failed, being recovered)."""
        self.start_idle_timer()
        async with self._lock_():
            if self.state == "asleep":
                return {"state": "asleep", "already": True}
            if self.state == "failed":
                raise SleepRefused(f"{self.driver.label} is not serving ({self.reason}); nothing to put to sleep")
            if not self.verified:
                await self.verify()
                if not self.verified:  # a server that was not asked could be one that only pretends to sleep
                    self.counts.sleeps_refused += 1
                    raise SleepRefused(f"{self.driver.label}: could not check that its servers can sleep "
                                       "(unreachable); the judge stays awake")
            started = time.monotonic()
            self._set("draining", f"asked by {trigger}; {self.in_flight} call(s) in flight")
            if not await self._drained(self.cfg.drain_timeout_s):
                busy = self.in_flight
                self.counts.sleeps_refused += 1
                self._set("awake")
                why = (f"{busy} call(s) still in flight after drain_timeout_s = {self.cfg.drain_timeout_s:g} s; "
                       "nothing was dropped, the judge stays awake")
                self._tell("sleep_refused", trigger, {"reason": why})
                raise SleepRefused(f"{self.driver.label}: {why}")
            self._set("sleeping", f"asked by {trigger}")
            try:
                facts = await asyncio.wait_for(self.driver.sleep(self.cfg.level), self.cfg.sleep_timeout_s)
            except SleepBusy as exc:
                self.counts.sleeps_refused += 1
                self._set("awake")
                self._tell("sleep_refused", trigger, {"reason": str(exc)})
                raise SleepRefused(f"{self.driver.label}: {exc}") from None
            except Exception as exc:  # noqa: BLE001
                why = (f"no sleep within sleep_timeout_s = {self.cfg.sleep_timeout_s:g} s"
                       if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}")
                self.counts.sleep_failures += 1
                self._fail(f"the sleep failed: {why}")
                self._tell("sleep_failed", trigger, {"reason": why})
                raise SleepFailed(f"{self.driver.label} could not sleep: {why}") from None
            seconds = time.monotonic() - started
            self.counts.sleeps += 1
            self._asleep_since = time.monotonic()
            self._set("asleep", f"asked by {trigger}")
            self._tell("sleep", trigger, {"seconds": round(seconds, 4), **_flat(facts)})
            log.info("%s asleep after %.3f s (%s)", self.driver.label, seconds, trigger)
            return {"state": "asleep", "seconds": seconds, **facts}

    async def _drained(self, timeout_s: float) -> bool:
        """Whether the calls in flight finished within timeout_s (none are admitted meanwhile)."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._event().wait(), remaining)
            except TimeoutError:
                return self.in_flight == 0
        return True

    async def verify(self) -> None:
        """The driver's check that this thing can sleep at all (ResidencyUnsupported if not)."""
        self.verified = await self.driver.verify()

    # -- a process that came back ----------------------------------------------------------------
    def thing_restarted(self) -> None:
        """The driver's process started again (a crash's restart, a recovery): a fresh one holds its
        model. Asleep: put it back to sleep (the trainer still has the device); failed: recovered."""
        if self.state == "asleep":
            self._spawn(self._sleep_again(), "sleep-again")
        elif self.state == "failed" and (self._wake_task is None or self._wake_task.done()):
            self.last_used = time.monotonic()
            self._set("awake")
            self._tell("wake", "restart", {"from": "failed"})

    async def _sleep_again(self) -> None:
        async with self._lock_():
            if self.state != "asleep":
                return
            try:
                await asyncio.wait_for(self.driver.sleep(self.cfg.level), self.cfg.sleep_timeout_s)
            except Exception as exc:  # noqa: BLE001
                self._fail(f"its restarted process could not be put back to sleep: {type(exc).__name__}: {exc}")

    # -- the idle timer -------------------------------------------------------------------------
    def start_idle_timer(self) -> None:
        if self.cfg.idle_sleep_s is None or (self._idle_task is not None and not self._idle_task.done()):
            return
        self._idle_task = asyncio.get_running_loop().create_task(self._idle_loop(), name=f"{self.name}-idle")

    async def _idle_loop(self) -> None:
        idle = self.cfg.idle_sleep_s
        assert idle is not None
        while True:
            changed = self._event()
            due = self.last_used + idle - time.monotonic()
            if self.state != "awake" or self.in_flight > 0:
                await changed.wait()  # asleep, or busy: the next change (a wake, the last call ending)
                continue
            if due > 0:
                await asyncio.sleep(min(due, idle))
                continue
            try:
                await self.sleep("idle")
            except (SleepRefused, SleepFailed) as exc:
                log.info("%s: the idle sleep did not happen: %s", self.driver.label, exc)
                self.last_used = time.monotonic()  # try again after another idle period
            except Exception:  # noqa: BLE001 - a broken check must not end the timer silently
                log.exception("%s: the idle sleep failed", self.driver.label)
                self.last_used = time.monotonic()

    async def aclose(self) -> None:
        tasks = [t for t in (self._idle_task, *self._tasks) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A wake nobody awaited any more still has its exception read (no 'never retrieved' noise)."""
    if not task.cancelled():
        task.exception()


def _flat(facts: dict[str, Any]) -> dict[str, Any]:
    """Facts as the timeline keeps them: numbers and short strings only."""
    return {k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v) for k, v in facts.items()
            if isinstance(v, (int, float, str, bool)) or v is None}
