"""A head's queue is bounded (items and pixels) with Retry-After on the synchronous APIs (accepted
cosmos-rl work waits for room), and its worker schedules small jobs before huge ones (none
starved) without batching them together: before, a small OCR request waited 8 s behind one 4096²
image and over 30 s under the fuzz load."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from judge_gateway.config import validate_config
from judge_gateway.gateway import Gateway
from judge_gateway.heads import batcher
from judge_gateway.heads.protocol import images_header
from judge_gateway.server import create_app
from judge_gateway.workers.framing import encode_frame, read_frame
from tests.conftest import png_bytes
from tests.support.cosmos_client import HEADERS, enqueue_body, image_batch, poll

# ---- the worker: small jobs first, never batched with a huge one -------------------------------


def _serve(head_cls, options: dict):
    """worker.serve on pipes in a thread, with `head_cls` as its model: (send, recv, thread)."""
    from judge_gateway.heads import worker

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    stdin, stdout = os.fdopen(in_r, "rb"), os.fdopen(out_w, "wb", buffering=0)
    original = worker.build_head
    worker.build_head = lambda kind, opts: head_cls(kind, opts)
    thread = threading.Thread(target=worker.serve, args=(stdin, stdout), daemon=True)
    thread.start()
    send, recv = os.fdopen(in_w, "wb", buffering=0), os.fdopen(out_r, "rb")
    send.write(encode_frame({"op": "init", "kind": "clip", "name": "f", "options": options}))
    assert read_frame(recv)[0]["op"] == "ready"
    worker.build_head = original
    return send, recv, thread


def _score(send, msg_id: int, side: int) -> None:
    frames = np.zeros((1, side, side, 3), np.uint8)
    send.write(encode_frame({"op": "score", "id": msg_id, "prompt": str(msg_id), **images_header(frames)},
                            frames.tobytes()))


def test_the_worker_runs_a_small_job_before_queued_huge_ones_and_apart_from_them():
    from judge_gateway.heads.models.base import HeadModel

    started = threading.Event()
    batches: list[list[str]] = []

    class PerPixelHead(HeadModel):  # an OCR-like head: its time grows with the pixels
        def load(self):
            return {"model": "per-pixel"}

        def infer(self, images, prompts):
            batches.append(list(prompts))
            started.set()
            time.sleep(sum(im.shape[0] * im.shape[1] for im in images) / 1e6 * 0.3)  # 0.3 s per megapixel
            return [{"raw": 0.0} for _ in images]

    send, recv, thread = _serve(PerPixelHead, {"max_batch_size": 32, "max_wait_ms": 20})
    try:
        _score(send, 1, 1000)  # a huge job: the worker starts on it
        assert started.wait(10)
        for msg_id, side in ((2, 1000), (3, 1000), (4, 16)):  # two more huge ones, then a small one
            _score(send, msg_id, side)
        answered = [read_frame(recv)[0]["id"] for _ in range(4)]
    finally:
        send.close()
        thread.join(10)
    assert answered[:2] == [1, 4], answered  # the small one went next: it did not wait for 2 and 3
    assert ["4"] in batches, batches  # in a batch of its own, not behind a huge item in one


def test_a_job_that_waited_long_enough_goes_first_whatever_its_size():
    q = batcher.FairJobQueue(aging_s=0.05)
    big = batcher.Job(1, np.zeros((1, 64, 64, 3), np.uint8), "big")
    q.put(big)
    q.put(batcher.Job(2, np.zeros((1, 8, 8, 3), np.uint8), "small"))
    assert q.get().msg_id == 2  # smallest first while the big one is young
    q.put(batcher.Job(3, np.zeros((1, 8, 8, 3), np.uint8), "small"))
    time.sleep(0.06)
    q.put(batcher.Job(4, np.zeros((1, 8, 8, 3), np.uint8), "small"))
    assert [q.get().msg_id for _ in range(3)] == [1, 3, 4]  # the big one aged: not starved


# ---- the gateway: bounded queues, Retry-After, accepted work waits ------------------------------


@pytest.fixture
def slow_head_python(tmp_path: Path) -> tuple[Path, Path]:
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.support.slow_head_worker\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, tmp_path / "ran.txt"


def b64png(seed: int) -> str:
    return base64.b64encode(png_bytes(seed)).decode()


async def test_a_full_head_queue_refuses_with_retry_after_and_accepted_work_waits(slow_head_python):
    python, log = slow_head_python
    gw = Gateway(validate_config({
        "server": {"admission": {"retry_after_s": 3, "max_active": 8}},  # the head queue bounds, not admission
        "judges": {"head": {"kind": "clip", "options": {
            "python": str(python), "max_batch_size": 1, "max_wait_ms": 0, "max_queue_items": 2,
            # 2 s a batch: the queue stays full long enough for both refusals on a loaded machine
            "env": {"SLOW_HEAD_LOG": str(log), "SLOW_HEAD_S": "2.0"}}}},
        "flow_factory": {"profiles": {"t2i": {"judges": {"head": 1.0}}}},
    }))
    app = create_app(gw)
    two = {"samples": [{"prompt": "a cat", "image": b64png(i)} for i in range(2)]}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost",
                                     timeout=120) as client:
            assert (await client.post("/v1/rewards", json={"samples": [{"prompt": "a", "image": b64png(9)}]})
                    ).status_code == 200  # the worker is up
            first = asyncio.ensure_future(client.post("/v1/rewards", json=two))  # fills the queue: 2 items
            await asyncio.sleep(0.2)
            native = await client.post("/v1/rewards", json={"samples": [{"prompt": "a dog", "image": b64png(5)}]})
            flow = await client.post("/flow-factory/t2i/compute", json={
                "prompt": ["a dog"], "image": [b64png(6)], "video": None, "condition_images": None,
                "condition_videos": None})
            metrics = (await client.get("/metrics")).text
            assert (await first).status_code == 200
            # cosmos-rl: accepted work is never refused for a full queue; the second waits its turn
            meta = {"reward_fn": {"head": 1.0}, "prompts": ["a", "b"], "media_type": "image"}
            uids = []
            for _ in range(2):
                r = await client.post("/api/reward/enqueue", content=enqueue_body(meta, image_batch(2)),
                                      headers=HEADERS)
                assert r.status_code == 200, r.text
                uids.append(r.json()["uuid"])
            pulled = [(await poll(client, uid, "head", timeout=60)).json() for uid in uids]
    finally:
        await app.state.cosmos_rl.aclose()
        await gw.aclose()
    assert native.status_code == 429 and native.headers["Retry-After"] == "3", native.text
    assert "judge 'head' has 2 items" in native.text and "max_queue_items" in native.text
    assert flow.status_code == 503 and flow.headers["Retry-After"] == "3", flow.text
    assert 'judge_gateway_judge_queue{judge="head",measure="items",state="limit"} 2.0' in metrics
    assert 'judge_gateway_admission_refused_total{api="native",reason="judge_queue"} 1.0' in metrics
    for body in pulled:
        assert body["status"] == "done" and body["valid"] == [True, True], body
