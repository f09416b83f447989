"""A brought head (heads/custom) behind Ray Serve, with fake handles and workers (no cluster): its
whole-sample items cross the Serve boundary (`infer_items`) as a built-in head's frames do, with the
same errors, and the gateway-side judge (groups included) runs unchanged over the remote worker."""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.heads.protocol import HeadItem
from judge_gateway.heads.supervisor import HeadError
from judge_gateway.judge_factory import build_judges
from judge_gateway.judges.base import ScoreContext
from judge_gateway.media import MediaCache
from judge_gateway.ray_mode.heads import HeadReplica, RemoteHead
from judge_gateway.schema import SampleInput

INFO = {"model": "m", "class": "m:C", "groupwise": True}


class _Method:
    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    async def remote(self, *args):
        self.calls += 1
        return await self.fn(*pickle.loads(pickle.dumps(args)))  # what Serve does to the arguments


class _Worker:
    """A HeadSupervisor's face as HeadReplica uses it: scores an item by its prompt's length."""

    def __init__(self, fail: str | None = None) -> None:
        self.info = INFO
        self.fail = fail

    async def infer_items(self, items):
        if self.fail:
            raise HeadError(self.fail, crashed=False)
        return [{"raw": float(len(i.prompt)), "details": {"group": i.group_id}} for i in items]

    async def wait_ready(self):
        return None


def _replica(worker) -> object:
    replica = object.__new__(HeadReplica.func_or_class)
    replica.worker = worker
    replica._closing = True  # no worker process to stop: the GC's __del__ makes no aclose() coroutine
    return replica


def _handle(replica) -> object:
    class Handle:
        infer_items = _Method(replica.infer_items)
        wait_ready = _Method(replica.wait_ready)

    return Handle()


def test_items_cross_the_serve_boundary_and_errors_keep_their_text():
    item = HeadItem("four", "image", np.zeros((1, 2, 2, 3), np.uint8), metadata={"k": 1}, group_id="g")
    remote = RemoteHead("mine", _handle(_replica(_Worker())), retries=0)
    assert asyncio.run(remote.infer_items([item])) == [{"raw": 4.0, "details": {"group": "g"}}]
    assert remote.info == INFO
    failing = RemoteHead("mine", _handle(_replica(_Worker(fail="failed to load: no module"))), retries=0)
    with pytest.raises(HeadError, match="no module") as caught:
        asyncio.run(failing.infer_items([item]))
    assert caught.value.crashed is False


def test_the_custom_judge_scores_groups_over_a_remote_worker():
    cfg = validate_config({"judges": {"mine": {"kind": "custom", "options": {"head": "m:C"}}}})
    judge = build_judges(cfg, {})["mine"]
    handle = _handle(_replica(_Worker()))
    judge.worker = RemoteHead("mine", handle, retries=0)  # as attach_remote_heads does
    samples = [SampleInput(prompt="x" * (i + 1), image=np.zeros((2, 2, 3), np.uint8), group_id="g") for i in range(3)]

    async def run():
        ctx = ScoreContext(MediaCache(), "r", samples=samples)
        return await asyncio.gather(*(judge.score(s, ctx) for s in samples))

    scores = asyncio.run(run())
    assert [s.raw for s in scores] == [1.0, 2.0, 3.0] and handle.infer_items.calls == 1
    assert all(s.valid and s.details["group_size"] == 3 and s.model == "m" for s in scores)
