"""`preprocess = "reference"`: a head's exact reference transform, run in separate processes.

Per-image PIL / CLIPProcessor work in threads of the worker would take the GIL from the thread
that launches the forward's kernels (on an H100: 1,170 images/s bare, 90 with 8 such threads).
So the transform runs in a pool of spawned processes, each of which builds it once
(`TransformSpec`: "module:function" + kwargs, imported in the child). A batch's images are copied
once into a shared-memory block (numpy's copy releases the GIL); each process gets a slice as
(offset, shape) descriptors, reads its images from the block, and returns its result (torch
tensors come back through torch's shared-memory pickling, not through the pipe).

Torch-free on this side: what the children compute is the builder's business.
"""

from __future__ import annotations

import importlib
import itertools
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

_SPAWN = multiprocessing.get_context("spawn")  # never fork a process that holds CUDA / OpenMP state


@dataclass(frozen=True)
class TransformSpec:
    """`builder` ("package.module:function") called with `kwargs` in each child returns the
    transform: list of uint8 [H, W, 3] arrays -> one result for the list."""

    builder: str
    kwargs: dict[str, Any] = field(default_factory=dict)


# -- child side --------------------------------------------------------------------------------
_transform: Callable[[list[np.ndarray]], Any] | None = None
_attached: tuple[str, SharedMemory] | None = None


def _child_init(spec: TransformSpec) -> None:
    global _transform
    module, _, name = spec.builder.partition(":")
    _transform = getattr(importlib.import_module(module), name)(**spec.kwargs)


def _block(name: str) -> SharedMemory:
    global _attached
    if _attached is None or _attached[0] != name:
        if _attached is not None:
            _attached[1].close()
        _attached = (name, SharedMemory(name=name))
    return _attached[1]


def _child_run(block: str, items: list[tuple[int, tuple[int, ...]]]) -> tuple[int, Any]:
    assert _transform is not None
    buf = _block(block).buf
    images = [np.ndarray(shape, np.uint8, buffer=buf, offset=offset) for offset, shape in items]
    try:
        return os.getpid(), _transform(images)
    finally:
        del images


def _child_ping() -> int:
    return os.getpid()


# -- parent side -------------------------------------------------------------------------------
class ProcessPreprocessor:
    """Maps a transform over batches of images in `processes` spawned processes."""

    def __init__(self, spec: TransformSpec, processes: int) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.spec = spec
        self.processes = processes
        self.pids: set[int] = set()  # the processes that ran a transform (tests, stats)
        self._pool: ProcessPoolExecutor | None = None
        self._block: SharedMemory | None = None
        self._lock = threading.Lock()  # one batch at a time owns the input block

    def start(self) -> None:
        """Spawn the processes and build the transform in each (a load-time cost, not the
        first request's): one ping per process; a child that cannot build it fails here."""
        with self._lock:
            pool = self._ensure_pool()
            for f in [pool.submit(_child_ping) for _ in range(self.processes)]:
                f.result()

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=_SPAWN, initializer=_child_init,
                                             initargs=(self.spec,))
        return self._pool

    def _reserve(self, nbytes: int) -> SharedMemory:
        if self._block is None or self._block.size < nbytes:
            self._release_block()
            self._block = SharedMemory(create=True, size=max(nbytes, 1 << 20))
        return self._block

    def _release_block(self) -> None:
        if self._block is not None:
            self._block.close()
            self._block.unlink()
            self._block = None

    def map(self, images: Sequence[np.ndarray]) -> list[Any]:
        """The transform's results for consecutive slices of `images` (one per process used),
        in order."""
        if not images:
            return []
        with self._lock:
            offsets, total = [], 0
            for im in images:
                offsets.append(total)
                total += (im.nbytes + 63) // 64 * 64
            block = self._reserve(total)
            items = []
            for im, off in zip(images, offsets):
                dst = np.ndarray(im.shape, np.uint8, buffer=block.buf, offset=off)
                np.copyto(dst, im, casting="no")
                items.append((off, tuple(im.shape)))
            del dst
            n = len(items)
            k = min(self.processes, n)
            bounds = [n * i // k for i in range(k + 1)]
            pool = self._ensure_pool()
            try:
                futures = [pool.submit(_child_run, block.name, items[a:b]) for a, b in itertools.pairwise(bounds)]
                done = [f.result() for f in futures]
            except BrokenProcessPool as exc:
                self._pool = None  # the next batch gets fresh processes
                raise RuntimeError(f"a preprocessing process died: {exc}") from None
            self.pids.update(pid for pid, _ in done)
            return [result for _, result in done]

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            self._release_block()
