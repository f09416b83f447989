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
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Job:
    msg_id: int
    frames: np.ndarray  # uint8 [n, H, W, 3]
    prompt: str


@dataclass
class Control:
    """A non-scoring message handled in order with the jobs (e.g. `stats`)."""

    msg_id: int
    op: str


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

    def collect(self, q: "queue.Queue[Any]", idle: Callable[[], bool] | None = None) -> tuple[list[Job], list[Any]]:
        """Block for one message, then gather jobs until the batch is full or the wait is over
        (or, with `pipeline_min_batch`, holds that many items while `idle()` says the device waits).
        Returns (jobs, other messages that arrived meanwhile, in order after the jobs)."""
        first = q.get()
        if not isinstance(first, Job):
            return [], [first]
        jobs, others = [first], []
        items = self.job_size(first)
        deadline = time.monotonic() + self.max_wait_s
        early = self.pipeline_min_batch if idle is not None else None
        while items < self.max_batch_size:
            if early is not None and items >= early and idle():  # type: ignore[misc]
                break  # the device waits: start it on what has arrived
            remaining = deadline - time.monotonic()
            if early is not None and items >= early:
                remaining = min(remaining, 0.001)  # look at the device again soon
            try:
                msg = q.get(timeout=remaining) if remaining > 0 else q.get_nowait()
            except queue.Empty:
                if early is not None and items >= early and deadline > time.monotonic():
                    continue
                break
            if not isinstance(msg, Job):
                others.append(msg)  # control / end of stream: run what we have first
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
