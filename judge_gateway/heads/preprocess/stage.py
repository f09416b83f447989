"""The prepare stage of an image head, in either `options.preprocess` mode.

- `device`: DevicePreprocessor on the head's device. On CUDA its kernels (and the H2D copy) run
  on a side stream, so batch k+1's preparation overlaps batch k's forward on the GPU too; the
  forward's stream waits on an event before it reads the pixels.
- `reference`: the library's own transform in ProcessPreprocessor's processes; the pieces are
  concatenated into one (pinned, on CUDA) host tensor that goes to the device in one copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..models.base import HeadLoadError
from .device import DevicePreprocessor, Geometry
from .pool import ProcessPreprocessor, TransformSpec


@dataclass
class _OnDevice:
    pixels: torch.Tensor
    ready: Any  # torch.cuda.Event recorded on the side stream after the last preprocessing kernel


class ImageStage:
    def __init__(self, mode: str, device: torch.device, dtype: torch.dtype, geometry: Geometry | None,
                 reference: TransformSpec, processes: int) -> None:
        self.mode = mode
        self.device = device
        self.dtype = dtype
        self.geometry = geometry
        self._device_prep: DevicePreprocessor | None = None
        self._pool: ProcessPreprocessor | None = None
        # The side stream for work made ready ahead of a forward (device preprocessing, the text
        # tower): a non-blocking stream, so it neither waits for nor holds up the forward's stream.
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        if mode == "device":
            if geometry is None:
                raise HeadLoadError("this head's reference transform has no device equivalent: "
                                    "set preprocess = \"reference\"")
            self._device_prep = DevicePreprocessor(geometry, device, dtype)
        else:
            self._pool = ProcessPreprocessor(reference, processes)
            try:
                self._pool.start()
            except Exception as exc:  # noqa: BLE001 - a child that cannot import or build it: say so
                self._pool.close()
                raise HeadLoadError(f"the preprocessing processes could not build {reference.builder}: "
                                    f"{type(exc).__name__}: {exc}") from None

    @property
    def side_stream(self) -> Any:
        """The CUDA side stream (None off CUDA)."""
        return self._stream

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"preprocess_mode": self.mode}
        if self._pool is not None:
            facts["preprocess_processes"] = self._pool.processes
        return facts

    def prepare(self, images: Sequence[np.ndarray]) -> Any:
        if self._device_prep is not None:
            if self._stream is None:
                return self._device_prep(images)
            with torch.cuda.stream(self._stream):
                pixels = self._device_prep(images)
                ready = torch.cuda.Event()
                ready.record(self._stream)
            return _OnDevice(pixels, ready)
        assert self._pool is not None
        out = None
        if self.device.type == "cuda" and self._pool.item is not None:  # straight into pinned memory
            shape, dtype = self._pool.item
            torch_dtype = torch.from_numpy(np.empty(0, np.dtype(dtype))).dtype
            out = torch.empty((len(images), *shape), dtype=torch_dtype, pin_memory=True)
        parts = self._pool.map(images, None if out is None else out.numpy())
        if out is not None:
            return out
        if len(parts) == 1:
            return torch.from_numpy(parts[0])
        return torch.cat([torch.as_tensor(p) for p in parts])

    def pixels(self, prepared: Any) -> torch.Tensor:
        """The prepared batch on the device in the model's dtype, safe to read on the current stream."""
        if isinstance(prepared, _OnDevice):
            current = torch.cuda.current_stream(self.device)
            current.wait_event(prepared.ready)
            prepared.pixels.record_stream(current)  # its memory belongs to the side stream's pool
            return prepared.pixels
        return prepared.to(self.device, self.dtype, non_blocking=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    @property
    def pids(self) -> set[int]:
        return set(self._pool.pids) if self._pool is not None else set()
