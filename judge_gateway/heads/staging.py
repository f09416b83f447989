"""Worker side: a batch's uint8 pixels as one host tensor, and on CUDA one copy to the device.

The jobs of a batch are views of the shared-memory arena (shm.py). `batch_view` joins frames that
lie back to back in it (a request's images, written with one pwritev) into one [B, H, W, 3] view
without copying. `PixelStager.stage` turns a slice into one tensor on the head's device:
- CPU: a tensor over that view (no copy), or over one stacked array when the frames are apart;
- CUDA: the frames land in one pinned host buffer (reused from a small pool, and only once the
  copy out of it has finished), which goes to the device in one non-blocking copy on a side
  stream; the forward's stream waits for that copy's event only when it uses the tensor, so the
  copy of batch k+1 (staged on the worker's stager thread) overlaps the forward of batch k.
For a head's batched ("device") preprocessing from uint8.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def batch_view(frames: Sequence[np.ndarray]) -> np.ndarray | None:
    """One read-only [B, H, W, 3] view of equal-shaped, C-contiguous uint8 frames ([H, W, 3] or
    [n, H, W, 3] each) that lie back to back in memory, else None. Never copies."""
    if not frames:
        return None
    parts = [f if f.ndim == 4 else f[None] for f in frames]
    first = parts[0]
    if any(p.shape[1:] != first.shape[1:] or p.dtype != np.uint8 or not p.flags.c_contiguous for p in parts):
        return None
    pos = first.__array_interface__["data"][0]
    for p in parts:
        if p.__array_interface__["data"][0] != pos:
            return None
        pos += p.nbytes
    # Adjacency is checked above, so the view stays inside the buffer the frames share (and
    # keeps `first`, hence that buffer, alive).
    return np.lib.stride_tricks.as_strided(first, shape=(sum(len(p) for p in parts), *first.shape[1:]),
                                           strides=first.strides, writeable=False)


@dataclass
class StagedPixels:
    """A slice's pixels on the head's device: `tensor` [B, H, W, 3] uint8. Call `ready()` on the
    stream that uses it before the first use (a no-op off CUDA)."""

    tensor: Any
    copied: bool  # True when the pixels were copied (CUDA, or frames apart on the CPU)
    _event: Any = None

    def ready(self) -> Any:
        if self._event is not None:
            import torch

            stream = torch.cuda.current_stream(self.tensor.device)
            stream.wait_event(self._event)
            self.tensor.record_stream(stream)  # its memory is not reused before that stream is done
            self._event = None
        return self.tensor


class PixelStager:
    """Stages equal-shaped uint8 frames to `device` as one tensor (see the module doc)."""

    def __init__(self, device: str, pool_size: int = 3) -> None:
        import torch

        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._stream = torch.cuda.Stream(self.device) if self._cuda else None
        self._pool: list[tuple[Any, Any]] = []  # (pinned buffer, event of the copy out of it)
        self._pool_size = pool_size

    def stage(self, frames: Sequence[np.ndarray]) -> StagedPixels:
        import torch

        view = batch_view(frames)
        if not self._cuda:
            if view is not None:
                with warnings.catch_warnings():  # a read-only view: the head must not write to it
                    warnings.simplefilter("ignore", UserWarning)
                    return StagedPixels(torch.from_numpy(view), copied=False)
            return StagedPixels(torch.from_numpy(np.stack(_flat(frames))), copied=True)
        flat = _flat(frames)
        shape = (len(flat), *flat[0].shape)
        buf = self._pinned(int(np.prod(shape)))
        host = buf[: int(np.prod(shape))].view(shape)
        dst = host.numpy()
        if view is not None:
            np.copyto(dst, view)
        else:
            for i, f in enumerate(flat):
                dst[i] = f
        assert self._stream is not None
        with torch.cuda.stream(self._stream):
            dev = host.to(self.device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        self._pool.append((buf, event))
        return StagedPixels(dev, copied=True, _event=event)

    def _pinned(self, nbytes: int) -> Any:
        """A flat pinned uint8 buffer of at least `nbytes` whose last copy to the device has
        finished: one from the pool, or a new one."""
        import torch

        for i, (buf, event) in enumerate(self._pool):
            if buf.numel() >= nbytes and event.query():
                return self._pool.pop(i)[0]
        if len(self._pool) >= self._pool_size:
            _, event = self._pool.pop(0)
            event.synchronize()  # never free pinned memory a copy still reads
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def _flat(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    """[H, W, 3] frames, one per image."""
    return [g for f in frames for g in (f if f.ndim == 4 else f[None])]
