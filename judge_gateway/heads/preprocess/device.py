"""`preprocess = "device"`: a head's image preprocessing as batched tensor ops on its own device.

From the uint8 [H, W, 3] arrays: one host tensor per input shape (pinned on CUDA, one copy to the
device), then resize with antialiasing, rounding to uint8 levels as the reference transforms do
(PIL and torchvision both hand back uint8 images), crop or pad, normalise. The geometry is each
head's reference one, down to its integer rounding:

- `shortest_crop`: shortest side to `size` (long side int(size * long / short)), then a centre
  crop; `crop_offset` "trunc" is transformers' CLIPImageProcessor (int((H - h) / 2)), "round" is
  torchvision's CenterCrop (round((H - h) / 2), Python's rounding) used by open_clip and BLIP.
- `longest_pad`: open_clip's ResizeKeepRatio(longest=1) + CenterCropOrPad(fill 0): longest side to
  `size` (each side round(side / ratio)), then padded to a square with black, (d // 2) on the
  left/top and the rest on the right/bottom (HPSv2).

Torch only (no PIL): it runs in the worker that holds the model, on the device that runs it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

# The frames are read-only views of the shared-memory arena; torch only reads them (one copy into
# the host tensor), so its "not writable" warning says nothing here.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


@dataclass(frozen=True)
class Geometry:
    mode: Literal["shortest_crop", "longest_pad"]
    size: int  # the square input of the image tower
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: Literal["bicubic", "bilinear"] = "bicubic"
    crop_offset: Literal["trunc", "round"] = "round"
    fill: int = 0  # longest_pad: the pad's colour (0-255, all channels)

    def describe(self) -> str:
        if self.mode == "shortest_crop":
            return f"resize_shortest({self.interpolation})+center_crop {self.size}"
        return f"resize_longest({self.interpolation})+pad_square_black {self.size}"


def resized_size(h: int, w: int, g: Geometry) -> tuple[int, int]:
    """(height, width) after the reference resize of an h x w image."""
    if g.mode == "shortest_crop":
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = g.size, int(g.size * long / short)
        return (new_long, new_short) if w <= h else (new_short, new_long)
    ratio = max(h / g.size, w / g.size)
    return round(h / ratio), round(w / ratio)


def host_to_device(images: Sequence[np.ndarray], device: torch.device) -> torch.Tensor:
    """Same-shape uint8 [H, W, 3] arrays -> one uint8 [n, H, W, 3] tensor on `device`: one copy
    into a host tensor (pinned on CUDA, so the copy to the device does not block the thread)."""
    pin = device.type == "cuda"
    h, w = images[0].shape[:2]
    host = torch.empty((len(images), h, w, 3), dtype=torch.uint8, pin_memory=pin)
    # torch copies with the GIL released, so the forward's thread keeps launching kernels (np.stack
    # held it for ~0.4 ms per 512 px image, which starved the GPU by a quarter on an H100).
    torch.stack([torch.from_numpy(im) for im in images], out=host)
    return host.to(device, non_blocking=pin)


def resize_uint8_levels(x: torch.Tensor, size: tuple[int, int],
                        mode: Literal["bicubic", "bilinear"] = "bicubic") -> torch.Tensor:
    """float [n, 3, h, w] in 0..255 -> [n, 3, *size], resized with antialiasing, rounded and
    clamped to uint8 levels as the reference transforms hand back uint8 images (kept as float:
    what follows is arithmetic). The same tensor when the size already matches."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    x = F.interpolate(x, size=size, mode=mode, antialias=True, align_corners=False)
    return x.round_().clamp_(0, 255)


def _offset(excess: int, how: str) -> int:
    return int(excess / 2.0) if how == "trunc" else round(excess / 2.0)


def _crop_or_pad(x: torch.Tensor, g: Geometry) -> torch.Tensor:
    """[n, 3, h, w] -> [n, 3, size, size]: pad what is short (d // 2 before, the rest after),
    then centre-crop what is long."""
    h, w = x.shape[-2:]
    s = g.size
    if h < s or w < s:
        dh, dw = max(0, s - h), max(0, s - w)
        x = F.pad(x, (dw // 2, dw - dw // 2, dh // 2, dh - dh // 2), value=float(g.fill))
        h, w = x.shape[-2:]
    top, left = _offset(h - s, g.crop_offset), _offset(w - s, g.crop_offset)
    return x[..., top : top + s, left : left + s]


class DevicePreprocessor:
    """Batched preprocessing of uint8 images into the image tower's input, on `device`."""

    def __init__(self, geometry: Geometry, device: torch.device, dtype: torch.dtype) -> None:
        self.geometry = geometry
        self.device = device
        self.dtype = dtype
        scale = torch.tensor(geometry.std, dtype=torch.float32) * 255.0
        shift = torch.tensor(geometry.mean, dtype=torch.float32) * 255.0
        self._shift = shift.view(1, 3, 1, 1).to(device)
        self._scale = scale.view(1, 3, 1, 1).to(device)

    def __call__(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """[n, 3, size, size] in `dtype` on the device, in input order."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, im in enumerate(images):
            if im.ndim != 3 or im.shape[2] != 3 or im.dtype != np.uint8:
                raise ValueError(f"expected uint8 [H, W, 3] images, got {im.dtype} {list(im.shape)}")
            groups.setdefault(im.shape, []).append(i)
        if len(groups) == 1:  # the usual batch (a GRPO group): one shape, no scatter
            return self._group(list(images), images[0].shape[0], images[0].shape[1])
        s = self.geometry.size
        out = torch.empty((len(images), 3, s, s), dtype=self.dtype, device=self.device)
        for shape, idx in groups.items():
            out[idx] = self._group([images[i] for i in idx], shape[0], shape[1])
        return out

    def _group(self, images: list[np.ndarray], h: int, w: int) -> torch.Tensor:
        x = host_to_device(images, self.device).permute(0, 3, 1, 2).float()
        g = self.geometry
        x = resize_uint8_levels(x, resized_size(h, w, g), g.interpolation)
        x = _crop_or_pad(x, g)
        return ((x - self._shift) / self._scale).to(self.dtype)
