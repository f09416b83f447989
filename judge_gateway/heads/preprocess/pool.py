"""`preprocess = "reference"`: a head's exact reference transform, run in separate processes.

Per-image PIL / CLIPProcessor work in threads of the worker would take the GIL from the thread
that launches the forward's kernels (on an H100: 1,170 images/s bare, 90 with 8 such threads).
So the transform runs in a pool of spawned processes, each of which builds it once
(`TransformSpec`: "module:function" + kwargs, imported in the child). A batch's images are copied
once into a shared-memory input block; each process gets a slice as (offset, shape) descriptors,
reads its images from the block and, for a transform that returns one array per image (probed at
start), writes them into a shared-memory output block, which the caller gets as one array (copied
out once, into memory of its choice). Only descriptors cross the pipes. Other results (tests'
fakes) come back pickled.

Torch-free on this side: what the children compute is the builder's business.
"""

from __future__ import annotations

import importlib
import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
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


def _child_init(spec: TransformSpec, parent: int) -> None:
    global _transform
    _exit_with(parent)
    # The worker's stdin is the gateway's pipe: a child must not hold it (nor outlive the worker).
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    module, _, name = spec.builder.partition(":")
    _transform = getattr(importlib.import_module(module), name)(**spec.kwargs)


def _exit_with(parent: int) -> None:
    """Exit as soon as the worker is gone, even when it was SIGKILLed: the pool's queues give the
    children no end of file then (each holds both ends), and an orphan would keep the worker's
    stderr open, so the gateway would not see the crash."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-worker").start()


def _block(name: str) -> SharedMemory:
    global _attached
    if _attached is None or _attached[0] != name:
        if _attached is not None:
            _attached[1].close()
        _attached = (name, SharedMemory(name=name))
    return _attached[1]


def _as_array(result: Any) -> np.ndarray | None:
    """A torch tensor or numpy array result as a numpy array (None for anything else)."""
    if isinstance(result, np.ndarray):
        return result
    if hasattr(result, "numpy") and hasattr(result, "shape"):
        return result.numpy()
    return None


def _child_run(block: str, items: list[tuple[int, tuple[int, ...]]],
               out: tuple[str, int, tuple[int, ...], str] | None) -> tuple[int, Any]:
    """Transform the images at `items` of `block`; with `out` = (block, offset, shape, dtype),
    write the result there and return only the pid."""
    assert _transform is not None
    buf = _block(block).buf
    images = [np.ndarray(shape, np.uint8, buffer=buf, offset=offset) for offset, shape in items]
    try:
        result = _transform(images)
    finally:
        del images
    if out is None:
        return os.getpid(), result
    name, offset, shape, dtype = out
    arr = _as_array(result)
    if arr is None or arr.shape != shape or arr.dtype.str != dtype:
        raise RuntimeError(f"the transform returned {getattr(arr, 'shape', type(result))}, expected {shape} {dtype}")
    target = SharedMemory(name=name)
    try:
        view = np.ndarray(shape, np.dtype(dtype), buffer=target.buf, offset=offset)
        np.copyto(view, arr)
        del view
    finally:
        target.close()
    return os.getpid(), None


def _child_probe() -> tuple[int, tuple[tuple[int, ...], str] | None]:
    """The pid, and the per-image shape and dtype of the transform's array result (None: not an array)."""
    assert _transform is not None
    arr = _as_array(_transform([np.zeros((8, 8, 3), np.uint8)]))
    return os.getpid(), (tuple(arr.shape[1:]), arr.dtype.str) if arr is not None else None


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
        self._out_block: SharedMemory | None = None
        self.item: tuple[tuple[int, ...], str] | None = None  # per-image result shape, dtype (arrays)
        self._lock = threading.Lock()  # one batch at a time owns the input block

    def start(self) -> None:
        """Spawn the processes and build the transform in each (a load-time cost, not the
        first request's): one ping per process; a child that cannot build it fails here."""
        with self._lock:
            pool = self._ensure_pool()
            for f in [pool.submit(_child_probe) for _ in range(self.processes)]:
                self.item = f.result()[1]

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.processes, mp_context=_SPAWN, initializer=_child_init,
                                             initargs=(self.spec, os.getpid()))
        return self._pool

    @staticmethod
    def _grown(block: SharedMemory | None, nbytes: int) -> SharedMemory:
        if block is not None and block.size >= nbytes:
            return block
        _release(block)
        return SharedMemory(create=True, size=max(nbytes, 1 << 20))

    def map(self, images: Sequence[np.ndarray], out: np.ndarray | None = None) -> list[Any]:
        """The transform's results for consecutive slices of `images` (one per process used),
        in order. A transform that returns arrays gives one [n, ...] array instead: `out` when
        given (e.g. a view of pinned memory), else a new one."""
        if not images:
            return []
        with self._lock:
            offsets, total = [], 0
            for im in images:
                offsets.append(total)
                total += (im.nbytes + 63) // 64 * 64
            block = self._block = self._grown(self._block, total)
            items = []
            for im, off in zip(images, offsets):
                dst = np.ndarray(im.shape, np.uint8, buffer=block.buf, offset=off)
                np.copyto(dst, im, casting="no")
                items.append((off, tuple(im.shape)))
            del dst
            n = len(items)
            k = min(self.processes, n)
            bounds = [n * i // k for i in range(k + 1)]
            outs: list[Any] = [None] * k
            result: np.ndarray | None = None
            if self.item is not None:
                shape, dtype = self.item
                row = int(np.prod(shape)) * np.dtype(dtype).itemsize
                self._out_block = self._grown(self._out_block, n * row)
                result = np.ndarray((n, *shape), np.dtype(dtype), buffer=self._out_block.buf)
                outs = [(self._out_block.name, a * row, (b - a, *shape), dtype) for a, b in itertools.pairwise(bounds)]
            pool = self._ensure_pool()
            try:
                futures = [pool.submit(_child_run, block.name, items[a:b], o)
                           for (a, b), o in zip(itertools.pairwise(bounds), outs)]
                wait(futures)  # every slice done (or failed) before the blocks can be reused
                done = [f.result() for f in futures]
            except BrokenProcessPool as exc:
                self._pool = None  # the next batch gets fresh processes
                del result  # no view of a block may outlive this call (a grown block is closed)
                raise RuntimeError(f"a preprocessing process died: {exc}") from None
            except BaseException:
                del result
                raise
            self.pids.update(pid for pid, _ in done)
            if result is None:
                return [r for _, r in done]
            if out is None:
                out = np.empty_like(result)
            np.copyto(out, result)  # out of the block before the next batch reuses it
            del result
            return [out]

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            _release(self._block)
            _release(self._out_block)
            self._block = self._out_block = None


def _release(block: SharedMemory | None) -> None:
    if block is not None:
        block.close()
        block.unlink()
