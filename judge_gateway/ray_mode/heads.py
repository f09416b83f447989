"""A head judge as a Ray Serve deployment, and its gateway-side stand-in.

Each replica of `HeadReplica` owns one supervised head worker (heads/supervisor.py): the worker
process runs under the head's own interpreter (`options.python`), is restarted when it dies, and
batches across requests with its MicroBatcher. Many calls in flight on one replica (up to
`max_ongoing_requests`) reach that worker in the same loop turns, so cross-request batching works
inside each replica as on one machine.

`RemoteHead` has the methods a HeadJudge uses of a HeadSupervisor (infer, infer_items, probe,
wait_ready, stats, info), so the judge code is the same in both modes. A call whose replica died is sent again
(Serve routes it to a live replica); a head's own failure comes back as HeadError, as locally.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

from ..config import HEAD_KIND_OPTIONS
from ..heads.protocol import HeadItem
from ..heads.supervisor import HeadError, HeadSupervisor

log = logging.getLogger(__name__)

# The replica died or left mid-call: the same call on another replica gives the same answer.
REPLICA_GONE = (RayActorError, ReplicaUnavailableError, DeploymentUnavailableError)


@serve.deployment
class HeadReplica:
    """One head worker behind a Serve replica."""

    def __init__(self, name: str, kind: str, options: dict[str, Any]) -> None:
        self.worker = HeadSupervisor(name, kind, HEAD_KIND_OPTIONS[kind].model_validate(options))

    async def infer(self, frames: np.ndarray, prompt: str) -> dict[str, Any]:
        """{"outputs": per-frame outputs, "info": the worker's model facts} or {"error": why,
        "crashed": whether the worker died under it (it respawns: scoring again can work)}."""
        try:
            outputs = await self.worker.infer(frames, prompt)
        except HeadError as exc:
            return {"error": str(exc), "crashed": exc.crashed}
        return {"outputs": outputs, "info": self.worker.info}

    async def infer_items(self, items: list[HeadItem]) -> dict[str, Any]:
        """A brought head's samples (heads/custom): as `infer`, one output per item."""
        try:
            outputs = await self.worker.infer_items(items)
        except HeadError as exc:
            return {"error": str(exc), "crashed": exc.crashed}
        return {"outputs": outputs, "info": self.worker.info}

    async def probe(self) -> dict[str, Any]:
        ready, reason = await self.worker.probe()
        return {"ready": ready, "reason": reason, "info": self.worker.info}

    async def wait_ready(self) -> dict[str, Any]:
        try:
            await self.worker.wait_ready()
        except HeadError as exc:
            return {"error": str(exc), "crashed": exc.crashed}
        return {"info": self.worker.info}

    async def stats(self) -> dict[str, Any]:
        """The worker's batching counters (batch_sizes, ...) and this replica's state."""
        return {"worker": await self.worker.stats(), "pid": self.worker.pid, "state": self.worker.state,
                "restarts": self.worker.restarts}

    async def aclose(self) -> None:
        await self.worker.aclose()

    def __del__(self) -> Any:
        """Serve calls this once at replica shutdown and awaits the coroutine it returns (the worker
        process stopped). Not `async def`: the garbage collector calls it again later, and a
        coroutine made then is never awaited (a RuntimeWarning per replica)."""
        if getattr(self, "_closing", False) or not hasattr(self, "worker"):
            return None
        self._closing = True
        return self.aclose()


class RemoteHead:
    """The gateway replica's handle on a head deployment, in a HeadSupervisor's shape."""

    def __init__(self, name: str, handle: Any, retries: int) -> None:
        self.name = name
        self.handle = handle
        self.retries = retries
        self.info: dict[str, Any] = {}
        self.replica_retries = 0  # calls sent again because their replica died
        self._ready: tuple[bool, str | None] = (False, "not probed yet")

    async def _call(self, method: str, *args: Any) -> dict[str, Any]:
        for attempt in range(self.retries + 1):
            try:
                return await getattr(self.handle, method).remote(*args)
            except REPLICA_GONE as exc:
                if attempt == self.retries:
                    # Transient as a crashed worker: Serve starts a new replica, scoring again can work.
                    raise HeadError(f"head {self.name!r}: its Ray replica is gone ({type(exc).__name__}) "
                                    f"after {self.retries + 1} tries", crashed=True) from None
                self.replica_retries += 1
                log.warning("head %s: replica gone (%s); sending the call again", self.name, type(exc).__name__)
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def infer(self, frames: np.ndarray, prompt: str) -> list[dict[str, Any]]:
        reply = await self._call("infer", np.ascontiguousarray(frames), prompt)
        if "error" in reply:
            raise HeadError(reply["error"], crashed=bool(reply.get("crashed")))
        self.info = reply["info"]
        return reply["outputs"]

    async def infer_items(self, items: list[HeadItem]) -> list[dict[str, Any]]:
        reply = await self._call("infer_items", items)
        if "error" in reply:
            raise HeadError(reply["error"], crashed=bool(reply.get("crashed")))
        self.info = reply["info"]
        return reply["outputs"]

    async def probe(self) -> tuple[bool, str | None]:
        try:
            reply = await self._call("probe")
        except HeadError as exc:
            return False, str(exc)
        if reply["info"]:
            self.info = reply["info"]
        self._ready = (reply["ready"], reply["reason"])
        return self._ready

    def readiness(self) -> tuple[bool, str | None]:
        return self._ready

    async def wait_ready(self) -> None:
        reply = await self._call("wait_ready")
        if "error" in reply:
            raise HeadError(reply["error"], crashed=bool(reply.get("crashed")))
        self.info = reply["info"]

    async def stats(self) -> dict[str, Any]:
        return (await self._call("stats"))["worker"]

    async def aclose(self) -> None:
        """The replicas own the workers; Serve stops them with the deployment."""


def attach_remote_heads(gateway: Any, handles: dict[str, Any], retries: int) -> None:
    """Point each named head judge of a gateway at its deployment instead of a local worker."""
    for name, handle in handles.items():
        gateway.judges[name].worker = RemoteHead(name, handle, retries)
