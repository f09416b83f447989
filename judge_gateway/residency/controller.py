"""The gateway's colocated judges: one `ResidencyUnit` per thing that sleeps (a head's worker; a
backend's servers, shared by the judges on it), what the routes ask of them (sleep / wake, per
judge or all), what they report (per judge in /v1/judges and /readyz, the timeline, /metrics).

The gateway builds it (gateway.py: a head's unit gets its judge's driver, a backend's unit a
VllmSleepDriver) and the app's lifespan starts it (`start`: each server's sleep mode is checked,
ResidencyUnsupported refuses the start; the idle timers run).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..config import ResidencyConfig
from ..schema import ResidencyEvent, ResidencyInfo
from .driver import SleepDriver
from .unit import (
    STATES,
    NotColocated,
    ResidencyUnit,
    SleepFailed,
    SleepRefused,
    Trigger,
    WakeFailed,
)

if TYPE_CHECKING:
    from ..metrics import Metrics

EVENTS_KEPT = 2000  # the timeline's length (oldest dropped)


class Residency:
    def __init__(self, metrics: "Metrics | None" = None) -> None:
        self.units: dict[str, ResidencyUnit] = {}
        self.by_judge: dict[str, ResidencyUnit] = {}
        self.resident: set[str] = set()
        self.events: deque[ResidencyEvent] = deque(maxlen=EVENTS_KEPT)
        self.metrics = metrics
        if metrics is not None:
            metrics.watch_residency(self)

    # -- building ---------------------------------------------------------------------------------
    def add(self, name: str, judges: list[str], cfg: ResidencyConfig, driver: SleepDriver) -> ResidencyUnit:
        unit = ResidencyUnit(name, judges, cfg, driver, observer=self._observe)
        self.units[name] = unit
        for judge in judges:
            self.by_judge[judge] = unit
        return unit

    def add_resident(self, judge: str) -> None:
        self.resident.add(judge)

    @property
    def colocated(self) -> bool:
        return bool(self.units)

    async def verify(self) -> None:
        """Check every colocated server can sleep (ResidencyUnsupported names the first that cannot,
        with the fix; one that cannot be reached now is checked again before its first sleep)."""
        for unit in self.units.values():
            if not unit.verified:
                await unit.verify()

    async def start(self) -> None:
        """`verify`, then start the idle timers (on the serving loop)."""
        await self.verify()
        for unit in self.units.values():
            unit.start_idle_timer()

    async def aclose(self) -> None:
        await asyncio.gather(*(u.aclose() for u in self.units.values()))

    # -- what the routes ask ----------------------------------------------------------------------
    def units_for(self, judges: Sequence[str] | None) -> list[ResidencyUnit]:
        """The units of the named judges (all colocated ones for None), each once. A resident or
        unknown judge is refused (NotColocated: 400)."""
        if judges is None:
            return list(self.units.values())
        refused = []
        for name in judges:
            if name in self.resident:
                refused.append(f"{name!r} is resident (judges.{name}.residency): it never sleeps")
            elif name not in self.by_judge:
                refused.append(f"{name!r} is not a configured judge")
        if refused:
            raise NotColocated("; ".join(refused))
        return list(dict.fromkeys(self.by_judge[name] for name in judges))

    async def sleep(self, judges: Sequence[str] | None, trigger: Trigger = "told") -> dict[str, dict[str, Any]]:
        """Put the units to sleep side by side; per judge, what happened (never raises for one unit)."""
        return await self._each(self.units_for(judges), lambda u: u.sleep(trigger))

    async def wake(self, judges: Sequence[str] | None, trigger: Trigger = "told") -> dict[str, dict[str, Any]]:
        return await self._each(self.units_for(judges), lambda u: u.wake(trigger))

    async def _each(self, units: list[ResidencyUnit], act: Any) -> dict[str, dict[str, Any]]:
        results = await asyncio.gather(*(act(u) for u in units), return_exceptions=True)
        out: dict[str, dict[str, Any]] = {}
        for unit, result in zip(units, results):
            if isinstance(result, SleepRefused):
                entry = {"outcome": "refused", "reason": str(result)}
            elif isinstance(result, (SleepFailed, WakeFailed)):
                entry = {"outcome": "failed", "reason": str(result)}
            elif isinstance(result, BaseException):
                raise result  # a bug, or ResidencyUnsupported: the route answers it
            else:
                entry = {"outcome": "already" if result.get("already") else "done",
                         "seconds": result.get("seconds")}
            for judge in unit.judges:
                out[judge] = {"state": unit.state, **entry}
        return out

    # -- what is reported -------------------------------------------------------------------------
    def info(self, judge: str) -> ResidencyInfo | None:
        unit = self.by_judge.get(judge)
        if unit is None:
            return ResidencyInfo(mode="resident") if judge in self.resident else None
        c = unit.counts
        return ResidencyInfo(
            mode="colocated", state=unit.state, reason=unit.reason, unit=unit.name, judges=list(unit.judges),
            level=unit.cfg.level, idle_sleep_s=unit.cfg.idle_sleep_s, wakes=c.wakes, wake_failures=c.wake_failures,
            sleeps=c.sleeps, sleeps_refused=c.sleeps_refused, sleep_failures=c.sleep_failures,
            last_wake_s=round(c.last_wake_s, 4) if c.last_wake_s is not None else None,
            asleep_s=round(unit.asleep_seconds(), 3), in_flight=unit.in_flight, waiting=c.waiting,
            replicas=unit.driver.replicas(), last=dict(c.last))

    def readiness(self, judge: str, probed: tuple[bool, str | None]) -> tuple[bool, str | None]:
        """A judge asleep is ready (a call wakes it); one whose sleep or wake failed is not."""
        unit = self.by_judge.get(judge)
        if unit is None or not probed[0]:
            return probed
        if unit.state == "failed":
            return False, f"{unit.driver.label} {unit.reason}"
        return probed

    def skips_probe(self, judge: str) -> bool:
        """A head asleep is not probed (a probe would start its worker: a wake nobody asked for)."""
        unit = self.by_judge.get(judge)
        return unit is not None and unit.name.startswith("head:") and unit.state in ("asleep", "sleeping", "draining")

    def timeline(self, since: float | None = None) -> list[ResidencyEvent]:
        """Events at or after `since` (Unix time). Safe from another thread (a watch seal's): the
        deque is copied in one step first."""
        events = list(self.events)
        return [e for e in events if since is None or e.at >= since]

    # -- observing the units ----------------------------------------------------------------------
    def _observe(self, unit: ResidencyUnit, event: str, trigger: Trigger, facts: dict[str, Any]) -> None:
        self.events.append(ResidencyEvent(at=time.time(), unit=unit.name, judges=list(unit.judges), event=event,
                                          trigger=trigger, seconds=facts.get("seconds"), reason=facts.get("reason")))
        m = self.metrics
        if m is None:
            return
        for judge in unit.judges:
            if event == "wake":
                m.residency_wakes.labels(judge, "ok").inc()
                if facts.get("seconds") is not None:
                    m.residency_wake_seconds.labels(judge).observe(float(facts["seconds"]))
            elif event == "wake_failed":
                m.residency_wakes.labels(judge, "failed").inc()
            else:
                outcome = {"sleep": "ok", "sleep_refused": "refused", "sleep_failed": "failed"}[event]
                m.residency_sleeps.labels(judge, trigger, outcome).inc()

    def read_gauges(self, state: Any, asleep: Any, waiting: Any) -> None:
        """The metrics' gauges at a scrape (metrics.watch_residency)."""
        for unit in self.units.values():
            for judge in unit.judges:
                for s in STATES:
                    state.labels(judge, s).set(1 if unit.state == s else 0)
                asleep.labels(judge).set(unit.asleep_seconds())
                waiting.labels(judge).set(unit.counts.waiting)
