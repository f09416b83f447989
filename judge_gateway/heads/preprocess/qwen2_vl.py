"""Qwen2-VL's image preprocessing as batched tensor ops on the head's device (`preprocess =
"device"` for hpsv3): per image, what qwen_vl_utils' `fetch_image` and transformers'
`Qwen2VLImageProcessor` do on the CPU, for a whole batch at once:

1. resize to the smart size (the caller's, from the library's own `smart_resize`), bicubic with
   antialiasing, rounded and clamped to uint8 levels (PIL and torchvision hand back uint8 images);
2. rescale to [0, 1] and normalise with the processor's mean / std (float32);
3. tile a single image to the temporal patch (Qwen2-VL's patch embedding is 3-D) and cut it into
   patches in the processor's order: (t, h / merge, w / merge, merge, merge) rows of
   (channel, temporal, patch, patch) values.

Torch only: it runs in the worker that holds the model, on the device that runs it. The fidelity
bounds against the library's own path are tested (tests/support/hpsv3_preprocess_fidelity.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .device import host_to_device, resize_uint8_levels


@dataclass(frozen=True)
class PatchLayout:
    """The processor's patch constants and mean / std, read from the loaded processor (what this
    module assumes of it, a 1 / 255 rescale, the caller checks: `check_processor`)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @classmethod
    def of(cls, image_processor: object) -> PatchLayout:
        p = image_processor
        return cls(int(p.patch_size), int(p.merge_size), int(p.temporal_patch_size),  # type: ignore[attr-defined]
                   tuple(float(v) for v in p.image_mean), tuple(float(v) for v in p.image_std))  # type: ignore[attr-defined]


def patchify(x: torch.Tensor, layout: PatchLayout) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """Normalised [n, 3, H, W] images -> ([n * t * gh * gw, 3 * tp * ps * ps] patches, (t, gh, gw)
    of each image), the rows of image i following those of image i - 1."""
    n, c, h, w = x.shape
    ps, ms, tp = layout.patch_size, layout.merge_size, layout.temporal_patch_size
    if h % (ps * ms) or w % (ps * ms):
        raise ValueError(f"{h}x{w} is not a multiple of patch_size * merge_size = {ps * ms}")
    gh, gw = h // ps, w // ps
    x = x.unsqueeze(1).expand(n, tp, c, h, w)  # one image fills the temporal patch (grid_t = 1)
    x = x.reshape(n, 1, tp, c, gh // ms, ms, ps, gw // ms, ms, ps)
    # (n, t, tp, c, gh/m, m, ps, gw/m, m, ps) -> (n, t, gh/m, gw/m, m, m, c, tp, ps, ps)
    x = x.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return x.reshape(n * gh * gw, c * tp * ps * ps), (1, gh, gw)


class Qwen2VLImages:
    """uint8 [H, W, 3] images -> (pixel_values, image_grid_thw) on `device`, in input order."""

    def __init__(self, layout: PatchLayout, device: torch.device) -> None:
        self.layout = layout
        self.device = device
        self._mean = torch.tensor(layout.mean, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0
        self._std = torch.tensor(layout.std, dtype=torch.float32, device=device).view(1, 3, 1, 1) * 255.0

    def __call__(self, images: Sequence[np.ndarray],
                 sizes: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """`sizes[i]`: the (height, width) image i is resized to. -> (pixel_values on the device,
        image_grid_thw on the host: the text needs it there, and reading it back would wait for
        the resize kernels)."""
        if len(images) != len(sizes) or not images:
            raise ValueError(f"{len(images)} images, {len(sizes)} sizes")
        groups: dict[tuple[tuple[int, ...], tuple[int, int]], list[int]] = {}
        for i, (im, size) in enumerate(zip(images, sizes)):
            if im.ndim != 3 or im.shape[2] != 3 or im.dtype != np.uint8:
                raise ValueError(f"expected uint8 [H, W, 3] images, got {im.dtype} {list(im.shape)}")
            groups.setdefault((im.shape, tuple(size)), []).append(i)
        parts: list[torch.Tensor | None] = [None] * len(images)
        grids: list[tuple[int, int, int]] = [(0, 0, 0)] * len(images)
        for (_, size), idx in groups.items():
            x = host_to_device([images[i] for i in idx], self.device).permute(0, 3, 1, 2).float()
            x = resize_uint8_levels(x, (int(size[0]), int(size[1])))
            x = (x - self._mean) / self._std  # = (x / 255 - mean) / std, the processor's rescale + normalise
            patches, grid = patchify(x, self.layout)
            for i, rows in zip(idx, patches.chunk(len(idx))):
                parts[i] = rows
                grids[i] = grid
        pixel_values = torch.cat([p for p in parts if p is not None])
        return pixel_values, torch.tensor(grids, dtype=torch.int64)


def check_processor(image_processor: object, factor: int, pixels: int) -> str | None:
    """Why the device path would not be the processor's own, or None: it rescales by 1 / 255 and
    normalises, and its own second resize leaves a `factor`-aligned image of about `pixels` pixels
    (the caller's smart size: within 2x of it) as it is."""
    p = image_processor
    if not (getattr(p, "do_rescale", False) and abs(float(getattr(p, "rescale_factor", 0.0)) * 255.0 - 1.0) < 1e-6):
        return "the image processor does not rescale by 1/255"
    if not getattr(p, "do_normalize", False):
        return "the image processor does not normalise"
    ps, ms = int(getattr(p, "patch_size", 0)), int(getattr(p, "merge_size", 0))
    lo, hi = int(getattr(p, "min_pixels", 0)), int(getattr(p, "max_pixels", 0))
    if ps * ms != factor or not lo <= pixels // 2 or not 2 * pixels <= hi:
        return (f"the image processor would resize again (patch_size x merge_size {ps * ms}, min/max pixels "
                f"{lo}..{hi}; the images are {factor}-aligned, {pixels} pixels)")
    return None


def expand_image_pads(texts: Sequence[str], grids: torch.Tensor, merge_size: int,
                      pad: str = "<|image_pad|>") -> list[str]:
    """Each image's one `pad` token in the chat text -> one per merged patch (grid.prod() /
    merge_size^2), as Qwen2VLProcessor writes the text before it tokenizes it."""
    counts = (grids.prod(-1) // (merge_size * merge_size)).tolist()
    out, k = [], 0
    for text in texts:
        pieces = text.split(pad)
        if k + len(pieces) - 1 > len(counts):
            raise ValueError(f"the texts hold more {pad} than the {len(counts)} images")
        expanded = pieces[0]
        for piece in pieces[1:]:
            expanded += pad * int(counts[k]) + piece
            k += 1
        out.append(expanded)
    if k != len(counts):
        raise ValueError(f"the texts hold {k} {pad} for {len(counts)} images")
    return out


__all__ = ["PatchLayout", "Qwen2VLImages", "check_processor", "expand_image_pads", "patchify"]
