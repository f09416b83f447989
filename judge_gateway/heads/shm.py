"""Shared memory between the gateway and a head worker: one anonymous memfd arena per worker process.

The gateway creates the arena (`os.memfd_create`: no name in /dev/shm, so nothing to unlink and
nothing to leak, whoever dies first; not bound by a container's small /dev/shm either), hands its
file descriptor to the worker at spawn (`pass_fds`), writes a frame's pixels into a region with one
`pwritev` and sends only the frame header (job ids, prompts, shapes, offsets) on the pipe. The
worker maps the arena read-only and scores views of it, copy-free.

Lifetimes: a region belongs to one frame; the gateway frees it when the worker has answered every
job of that frame (the worker never reads a job's pixels after sending its result), and drops the
whole arena when the worker process ends. `Arena.alloc` returns None when no gap is large enough;
the sender waits for a release (`Arena.released`) and never writes over a region in use.
"""

from __future__ import annotations

import asyncio
import bisect
import mmap
import os
from collections.abc import Callable, Sequence

import numpy as np

ALIGN = 64  # cache-line aligned regions
_IOV_MAX = 512  # well under Linux's IOV_MAX (1024)


def memfd_supported() -> bool:
    return hasattr(os, "memfd_create")


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class Arena:
    """Gateway side: the memfd, a first-fit allocator over it, and the writes into it."""

    def __init__(self, size: int, name: str = "jg-head") -> None:
        self.size = _aligned(size)
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC)  # pass_fds clears CLOEXEC in the child
        try:
            os.ftruncate(self.fd, self.size)  # sparse: pages exist once written
        except OSError:
            os.close(self.fd)
            raise
        self._starts: list[int] = []  # sorted starts of regions in use
        self._ends: dict[int, int] = {}  # start -> end
        self.released: asyncio.Event | None = None  # set by free(); created on the event loop
        self.high_water = 0  # most bytes in use at once

    @property
    def in_use(self) -> int:
        return sum(end - start for start, end in self._ends.items())

    def alloc(self, nbytes: int) -> int | None:
        """The offset of a free region of `nbytes` (first fit), or None while none is free."""
        need = _aligned(max(1, nbytes))
        if need > self.size:
            return None
        pos = 0
        for i, start in enumerate(self._starts):
            if start - pos >= need:
                return self._take(i, pos, need)
            pos = self._ends[start]
        if self.size - pos >= need:
            return self._take(len(self._starts), pos, need)
        return None

    def _take(self, index: int, start: int, need: int) -> int:
        self._starts.insert(index, start)
        self._ends[start] = start + need
        self.high_water = max(self.high_water, self.in_use)
        return start

    def free(self, start: int) -> None:
        if start not in self._ends:
            raise KeyError(f"no region in use at offset {start}")
        del self._ends[start]
        self._starts.pop(bisect.bisect_left(self._starts, start))
        if self.released is not None:
            self.released.set()

    def write(self, offset: int, arrays: Sequence[np.ndarray], fd: int | None = None) -> int:
        """Write C-contiguous uint8 arrays back to back at `offset` (through `fd`, a dup of the
        arena's, when given); returns the bytes written."""
        fd = self.fd if fd is None else fd
        views = [memoryview(a).cast("B") for a in arrays]
        total = sum(v.nbytes for v in views)
        if offset < 0 or offset + total > self.size:
            raise ValueError(f"{total} B at offset {offset} overflow the {self.size} B arena")
        done = 0
        for i in range(0, len(views), _IOV_MAX):
            chunk = views[i : i + _IOV_MAX]
            want = sum(v.nbytes for v in chunk)
            wrote = os.pwritev(fd, chunk, offset + done)
            while wrote < want:  # a short write (signals): finish it byte-exactly
                flat = b"".join(chunk)[wrote:]
                wrote += os.pwrite(fd, flat, offset + done + wrote)
            done += want
        return done

    def write_on_own_fd(self, offset: int, arrays: Sequence[np.ndarray]) -> tuple[int, Callable[[], int]]:
        """A write to run on another thread: it holds its own dup of the fd (closed when it ends),
        so closing the arena meanwhile can never make it write into a reused fd number."""
        fd = os.dup(self.fd)

        def run() -> int:
            try:
                return self.write(offset, arrays, fd)
            finally:
                os.close(fd)

        return fd, run

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._starts.clear()
        self._ends.clear()


class ArenaView:
    """Worker side: the arena mapped read-only; arrays are views of it (no copy)."""

    def __init__(self, fd: int, size: int) -> None:
        self.size = size
        self._map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        os.close(fd)  # the mapping keeps the memory; the fd is no longer needed
        self._buf = np.frombuffer(self._map, dtype=np.uint8)

    def array(self, offset: int, shape: Sequence[int]) -> np.ndarray:
        n = int(np.prod(shape))
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"region [{offset}, {offset + n}) is outside the {self.size} B arena")
        return self._buf[offset : offset + n].reshape(shape)
