"""RemoteHead and HeadReplica with fake handles and workers (no Ray cluster): a head's failure
crosses the Serve boundary with its `crashed` flag, so cosmos-rl scores a crashed head's cells again."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from ray.exceptions import RayActorError

from judge_gateway.heads.supervisor import HeadError
from judge_gateway.ray_mode.heads import HeadReplica, RemoteHead

FRAMES = np.zeros((1, 4, 4, 3), dtype=np.uint8)


class _Method:
    def __init__(self, answer):
        self.answer = answer
        self.calls = 0

    async def remote(self, *args):
        self.calls += 1
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class _Handle:
    def __init__(self, **methods):
        for name, answer in methods.items():
            setattr(self, name, _Method(answer))


class _CrashingWorker:
    def __init__(self) -> None:
        self.info: dict = {}

    async def infer(self, frames, prompt):
        raise HeadError("worker died with the item in flight", crashed=True)

    async def wait_ready(self):
        raise HeadError("failed to load")


def _replica(worker, served: bool = False) -> object:
    """A replica as Serve would hold it (served: its __del__ closes the worker once) or as these
    tests make it (no Serve shutdown: marked closed, so the GC's __del__ makes no coroutine)."""
    replica = object.__new__(HeadReplica.func_or_class)
    replica.worker = worker
    if not served:
        replica._closing = True
    return replica


def test_a_crashed_worker_reaches_the_gateway_as_crashed():
    reply = asyncio.run(_replica(_CrashingWorker()).infer(FRAMES, "p"))
    assert reply == {"error": "worker died with the item in flight", "crashed": True}
    remote = RemoteHead("ocr", _Handle(infer=reply), retries=0)
    with pytest.raises(HeadError) as caught:
        asyncio.run(remote.infer(FRAMES, "p"))
    assert caught.value.crashed is True and str(caught.value) == "worker died with the item in flight"


def test_a_head_refusal_stays_not_crashed():
    reply = asyncio.run(_replica(_CrashingWorker()).wait_ready())
    assert reply == {"error": "failed to load", "crashed": False}
    remote = RemoteHead("ocr", _Handle(infer={"error": "bad frames", "crashed": False}), retries=0)
    with pytest.raises(HeadError) as caught:
        asyncio.run(remote.infer(FRAMES, "p"))
    assert caught.value.crashed is False


def test_a_replica_still_gone_after_the_retries_is_transient():
    handle = _Handle(infer=RayActorError())
    remote = RemoteHead("ocr", handle, retries=1)
    with pytest.raises(HeadError) as caught:
        asyncio.run(remote.infer(FRAMES, "p"))
    assert caught.value.crashed is True
    assert handle.infer.calls == 2 and remote.replica_retries == 1


def test_a_cluster_that_fails_to_start_is_shut_down(monkeypatch):
    from tests.support import ray_cluster

    shut = []

    class FakeCluster:
        address = "127.0.0.1:1"

        def __init__(self, **kwargs):
            pass

        def add_node(self, **kwargs):
            raise RuntimeError("no room for a second node")

        def shutdown(self):
            shut.append("cluster")

    monkeypatch.setattr(ray_cluster, "Cluster", FakeCluster)
    with pytest.raises(RuntimeError, match="no room"):
        ray_cluster.LocalRayCluster()
    assert shut == ["cluster"]


def test_the_replica_closes_its_worker_once_and_leaves_nothing_unawaited():
    closed = []

    class Worker:
        async def aclose(self):
            closed.append(True)

    replica = _replica(Worker(), served=True)
    first = replica.__del__()  # Serve's call at shutdown: it awaits what comes back
    asyncio.run(first)
    assert closed == [True]
    assert replica.__del__() is None  # the garbage collector's call: no coroutine left unawaited
    assert closed == [True]
