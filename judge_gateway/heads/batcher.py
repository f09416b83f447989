"""Cross-request micro-batching inside a head worker.

Jobs (one per request message, each with n frames) arrive on a queue from the reader thread.
The batcher takes the first job, then keeps collecting until it holds `max_batch_size` items or
`max_wait_ms` has passed since the first one, runs the model in slices of at most
`max_batch_size` items, and hands every job its own outputs. With `pipeline_min_batch`, a batch
is closed as soon as it holds that many items while the device is idle (`collect`'s `idle`): the
forward starts on the first images of a step while the rest arrive.

Two stages: a head may split its work into `prepare` (preprocessing: resize, normalise; the
CLIP family also its prompts' text rows; safe to run beside a forward on another thread) and
`infer(images, prompts, prepared)` (the forward pass). `stage(jobs)` runs the first, `run(jobs, staged)` the second, so the worker can
prepare batch k+1 on another thread while batch k runs on the device (worker.py).

Small jobs are not starved by huge ones: the worker's `FairJobQueue` hands out the job with the
fewest pixels first (a job that has waited `FAIR_AGING_S` goes first whatever its size, so a
huge one is not starved either), and a batch never mixes items whose sizes differ by more than
`MAX_BATCH_SIZE_RATIO` (a small image in the batch of a 4096² one would wait for it: per-pixel
heads such as OCR take seconds on one).
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

FAIR_AGING_S = 2.0  # a job waiting this long is handed out next, whatever its size
MAX_BATCH_SIZE_RATIO = 16  # pixels per item: a batch's largest at most this many times its first

import numpy as np


@dataclass
class Job:
    msg_id: int
    frames: np.ndarray  # uint8 [n, H, W, 3]
    prompt: str
    items: list[Any] | None = None  # a brought head's samples (protocol.HeadItem), scored whole


@dataclass
class Control:
    """A non-scoring message handled in order with the jobs (`stats`, a colocated head's `sleep`
    and `wake`: after every job that came before it)."""

    msg_id: int
    op: str
    args: dict[str, Any] = field(default_factory=dict)


def job_pixels(job: Job) -> int:
    """Pixels of all of a job's frames (its cost for per-pixel heads)."""
    n, h, w = job.frames.shape[:3]
    return int(n * h * w)


def item_pixels(job: Job) -> int:
    return int(job.frames.shape[1] * job.frames.shape[2]) if job.frames.ndim >= 3 else 0


class FairJobQueue:
    """The worker's queue (filled by its reader thread): jobs smallest first (pixels), a job older
    than FAIR_AGING_S first of all; other messages (controls, end of stream) in arrival order
    after every job that arrived before them. The `queue.Queue` calls the batcher uses."""

    def __init__(self, aging_s: float = FAIR_AGING_S) -> None:
        self.aging_s = aging_s
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._jobs: dict[int, tuple[float, Job]] = {}  # seq -> (arrived, job), in arrival order
        self._by_size: list[tuple[int, int]] = []  # heap of (pixels, seq); stale entries skipped
        self._others: deque[tuple[int, Any]] = deque()

    def put(self, msg: Any) -> None:
        self._put(next(self._seq), time.monotonic(), msg)

    def put_back(self, msg: Any, seq: int, arrived: float) -> None:
        """Return a job taken out (kept for the next batch) with its place in line."""
        self._put(seq, arrived, msg)

    def _put(self, seq: int, arrived: float, msg: Any) -> None:
        with self._cond:
            if isinstance(msg, Job):
                self._jobs[seq] = (arrived, msg)
                heapq.heappush(self._by_size, (job_pixels(msg), seq))
            else:
                self._others.append((seq, msg))
            self._cond.notify()

    def qsize(self) -> int:
        with self._cond:
            return len(self._jobs) + len(self._others)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.get_entry(block, timeout)[0]

    def get_nowait(self) -> Any:
        return self.get(block=False)

    def get_entry(self, block: bool = True, timeout: float | None = None) -> tuple[Any, int, float]:
        """(message, its sequence number, when it arrived): what put_back needs."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                entry = self._next()
                if entry is not None:
                    return entry
                if not block:
                    raise queue.Empty
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise queue.Empty
                self._cond.wait(remaining)

    def _next(self) -> tuple[Any, int, float] | None:
        oldest_job = next(iter(self._jobs), None)
        if self._others and (oldest_job is None or self._others[0][0] < oldest_job):
            seq, msg = self._others.popleft()
            return msg, seq, 0.0
        if oldest_job is None:
            return None
        arrived, _ = self._jobs[oldest_job]
        if time.monotonic() - arrived >= self.aging_s:
            seq = oldest_job
        else:
            while self._by_size[0][1] not in self._jobs:
                heapq.heappop(self._by_size)
            seq = heapq.heappop(self._by_size)[1]
        arrived, job = self._jobs.pop(seq)
        return job, seq, arrived


InferFn = Callable[..., list[dict[str, Any]]]
PrepareFn = Callable[[Sequence[np.ndarray], Sequence[str]], Any]


@dataclass
class Staged:
    """What `stage` prepared for a list of jobs: one entry per slice (or the slice's exception)."""

    slices: list[Any]


class MicroBatcher:
    def __init__(self, infer: InferFn, max_batch_size: int, max_wait_ms: float,
                 prepare: PrepareFn | None = None, pipeline_min_batch: int | None = None) -> None:
        """`infer(images, prompts)`, or `infer(images, prompts, prepared)` when `prepare` is given."""
        self.infer = infer
        self.prepare = prepare
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self.pipeline_min_batch = pipeline_min_batch
        self.batches = 0
        self.items = 0
        self.batch_sizes: dict[int, int] = {}
        self.prepare_s = 0.0  # time in `prepare` (preprocessing) and in `infer` (forward passes)
        self.infer_s = 0.0
        self._held: Job | None = None  # a job kept for the next batch (a plain FIFO queue's)

    def collect(self, q: "queue.Queue[Any] | FairJobQueue",
                idle: Callable[[], bool] | None = None) -> tuple[list[Job], list[Any]]:
        """Block for one message, then gather jobs until the batch is full or the wait is over
        (or, with `pipeline_min_batch`, holds that many items while `idle()` says the device waits).
        Returns (jobs, other messages that arrived meanwhile, in order after the jobs). A job
        whose items are over MAX_BATCH_SIZE_RATIO times the first's is left for the next batch."""
        if self._held is not None:
            first, self._held = self._held, None
        else:
            first = q.get()
        if not isinstance(first, Job):
            return [], [first]
        jobs, others = [first], []
        items = self.job_size(first)
        largest = max(1, item_pixels(first)) * MAX_BATCH_SIZE_RATIO
        deadline = time.monotonic() + self.max_wait_s
        early = self.pipeline_min_batch if idle is not None else None
        while items < self.max_batch_size:
            if early is not None and items >= early and idle():  # type: ignore[misc]
                break  # the device waits: start it on what has arrived
            remaining = deadline - time.monotonic()
            if early is not None and items >= early:
                remaining = min(remaining, 0.001)  # look at the device again soon
            try:
                if isinstance(q, FairJobQueue):
                    msg, seq, arrived = q.get_entry(timeout=remaining) if remaining > 0 else q.get_entry(False)
                else:
                    msg = q.get(timeout=remaining) if remaining > 0 else q.get_nowait()
            except queue.Empty:
                if early is not None and items >= early and deadline > time.monotonic():
                    continue
                break
            if not isinstance(msg, Job):
                others.append(msg)  # control / end of stream: run what we have first
                break
            if item_pixels(msg) > largest:  # it would hold the small ones back: next batch
                if isinstance(q, FairJobQueue):
                    q.put_back(msg, seq, arrived)
                else:
                    self._held = msg
                break
            jobs.append(msg)
            items += self.job_size(msg)
        return jobs, others

    def job_size(self, job: Job) -> int:
        """How much of a batch a job takes: one item per frame (images are one frame)."""
        return len(job.frames)

    def record(self, size: int) -> None:
        self.batches += 1
        self.items += size
        self.batch_sizes[size] = self.batch_sizes.get(size, 0) + 1

    @staticmethod
    def _flatten(jobs: list[Job]) -> tuple[list[np.ndarray], list[str]]:
        images = [f for job in jobs for f in job.frames]
        prompts = [job.prompt for job in jobs for _ in range(len(job.frames))]
        return images, prompts

    def stage(self, jobs: list[Job]) -> Staged | None:
        """Run `prepare` on every slice `run` will infer (None without a `prepare`). A slice whose
        preparation fails holds its exception: `run` then retries its jobs one by one."""
        if self.prepare is None or not jobs:
            return None
        images, prompts = self._flatten(jobs)
        slices: list[Any] = []
        t0 = time.perf_counter()
        for i in range(0, len(images), self.max_batch_size):
            try:
                slices.append(self.prepare(images[i : i + self.max_batch_size],
                                           prompts[i : i + self.max_batch_size]))
            except Exception as exc:
                slices.append(exc)
        self.prepare_s += time.perf_counter() - t0
        return Staged(slices)

    def run(self, jobs: list[Job], staged: Staged | None = None) -> dict[int, list[dict[str, Any]] | Exception]:
        """Outputs per job id; a failing batch is retried job by job so one bad input cannot
        fail its neighbours. `staged`: what `stage(jobs)` prepared (prepared here if absent)."""
        images, prompts = self._flatten(jobs)
        try:
            if staged is None:
                staged = self.stage(jobs)
            outputs = self._infer_sliced(images, prompts, staged)
        except Exception as exc:
            if len(jobs) == 1:
                return {jobs[0].msg_id: exc}
            result: dict[int, list[dict[str, Any]] | Exception] = {}
            for job in jobs:
                result.update(self.run([job]))
            return result
        result, start = {}, 0
        for job in jobs:
            result[job.msg_id] = outputs[start : start + len(job.frames)]
            start += len(job.frames)
        return result

    def _infer_sliced(self, images: list[np.ndarray], prompts: list[str],
                      staged: Staged | None) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = []
        for n, i in enumerate(range(0, len(images), self.max_batch_size)):
            chunk = images[i : i + self.max_batch_size]
            t0 = time.perf_counter()
            if staged is None:
                out = self.infer(chunk, prompts[i : i + self.max_batch_size])
            else:
                prepared = staged.slices[n]
                if isinstance(prepared, Exception):
                    raise prepared
                out = self.infer(chunk, prompts[i : i + self.max_batch_size], prepared)
            self.infer_s += time.perf_counter() - t0
            if len(out) != len(chunk):
                raise RuntimeError(f"head returned {len(out)} outputs for {len(chunk)} inputs")
            outputs.extend(out)
            self.record(len(chunk))
        return outputs

    def stats(self) -> dict[str, Any]:
        return {"batches": self.batches, "items": self.items,
                "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
                "prepare_s": round(self.prepare_s, 4), "infer_s": round(self.infer_s, 4)}
