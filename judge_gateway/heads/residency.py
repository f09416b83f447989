"""A colocated head's sleep driver on the gateway side: it asks the head's worker to sleep and to
wake (heads/sleeping.py does it inside the worker), or, for a head that can only sleep by exiting
(`info.sleep_methods`), stops the worker process and starts a fresh one at the wake.

The unit that drives it (residency/unit.py) sends no work to the worker between a sleep and its
wake, and bounds each call with the judge's sleep_timeout_s / wake_timeout_s; when one runs out,
`recover` kills the worker and its supervisor restarts it (a fresh worker loads its model: awake).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..residency import SleepDriver
from .supervisor import HeadError, HeadSupervisor


class HeadSleepDriver(SleepDriver):
    def __init__(self, worker: HeadSupervisor) -> None:
        self.worker = worker
        self.label = worker.label
        self._stopped_by_sleep = False

    def on_restart(self, callback: Callable[[], None]) -> None:
        """`callback()` each time a worker process becomes ready after the first (a crash's restart,
        a recovery): the unit puts a head that was asleep back to sleep (a fresh worker loads its model)."""
        self.worker.ready_listeners.append(callback)

    def _method(self, level: int) -> str:
        methods = self.worker.info.get("sleep_methods") or ["exit", "exit"]
        return str(methods[0 if level == 1 else 1])

    async def sleep(self, level: int) -> dict[str, Any]:
        worker = self.worker
        if worker.state in ("stopped", "failed", "closed"):
            # nothing loaded (never started, or its model failed to load): nothing to free
            return {"method": "not_loaded", "worker": worker.state}
        await worker.wait_ready()  # one starting or restarting: let it finish, then put it to sleep
        method = self._method(level)
        if method == "exit":
            pid = worker.pid
            await worker.stop(f"asleep (level {level}: the worker exited; a fresh one loads at the wake)")
            self._stopped_by_sleep = True
            return {"method": "exit", "level": level, "pid": pid}
        return await self._ask({"op": "sleep", "level": level})

    async def wake(self, level: int) -> dict[str, Any]:
        worker = self.worker
        if self._stopped_by_sleep or worker.state == "stopped":
            self._stopped_by_sleep = False
            await worker.wait_ready()  # a fresh process: the same loader, the same files
            return {"method": "exit", "pid": worker.pid}
        await worker.wait_ready()
        return await self._ask({"op": "wake"})

    async def _ask(self, header: dict[str, Any]) -> dict[str, Any]:
        reply, _ = await self.worker.request(header)  # bounded by the unit (wake_timeout_s ...)
        if not reply.get("ok"):
            raise HeadError(f"{self.label}: {header['op']} failed in the worker: {reply.get('error')}")
        return dict(reply.get("facts") or {})

    async def recover(self, reason: str) -> None:
        self.worker.log.warning("%s: %s; restarting its worker", self.label, reason)
        self._stopped_by_sleep = False
        if self.worker.state == "stopped":
            self.worker.ensure_started()
        else:
            self.worker.kill()  # the supervisor restarts it; a fresh worker is awake
