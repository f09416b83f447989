"""Pipelined micro-batches (heads/batcher.py, pipeline_min_batch): while the device is idle, a
batch is closed as soon as it holds pipeline_min_batch items, so the forward starts on the first
images of a step while the rest arrive; while it is busy, batches still fill up to max_batch_size."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from judge_gateway.config import validate_config
from judge_gateway.heads.batcher import Job, MicroBatcher


def job(i: int, n: int = 4) -> Job:
    return Job(msg_id=i, frames=np.zeros((n, 2, 2, 3), np.uint8), prompt="p")


def feed(q: "queue.Queue", jobs: list[Job], every_s: float) -> threading.Thread:
    def run() -> None:
        for j in jobs:
            q.put(j)
            time.sleep(every_s)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_an_idle_device_starts_on_the_first_items_a_busy_one_gets_full_batches() -> None:
    batcher = MicroBatcher(lambda images, prompts: [{}] * len(images), max_batch_size=32, max_wait_ms=500,
                           pipeline_min_batch=8)
    q: queue.Queue = queue.Queue()
    feeder = feed(q, [job(i) for i in range(8)], every_s=0.02)  # 32 items over ~160 ms
    started = time.monotonic()
    first, _ = batcher.collect(q, idle=lambda: True)
    assert sum(len(j.frames) for j in first) == 8 and time.monotonic() - started < 0.2  # 2 jobs, not 8
    rest, _ = batcher.collect(q, idle=lambda: False)  # the device busy: it fills
    feeder.join()
    assert sum(len(j.frames) for j in rest) == 24
    # without the option: the same arrival waits for the full batch
    plain = MicroBatcher(lambda images, prompts: [{}] * len(images), max_batch_size=32, max_wait_ms=500)
    feeder = feed(q, [job(i) for i in range(8)], every_s=0.02)
    whole, _ = plain.collect(q, idle=lambda: True)
    feeder.join()
    assert sum(len(j.frames) for j in whole) == 32


def test_the_option_is_validated_per_head() -> None:
    cfg = validate_config({"judges": {"clip": {"kind": "clip", "options": {"pipeline_min_batch": 16}}}})
    assert cfg.judges["clip"].options.pipeline_min_batch == 16
