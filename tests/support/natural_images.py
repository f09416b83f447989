"""Images for preprocessing fidelity checks (tests/support/preprocess_fidelity.py,
hpsv3_preprocess_fidelity.py): natural-looking content (colour gradients, rendered text, photos
and an upscaled crop of each) and noise, the worst case for resampling. numpy + PIL only, so any
worker venv can run it."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def gradients() -> list[np.ndarray]:
    out = []
    for h, w in ((512, 512), (480, 640), (700, 300)):
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        r = 255 * x / (w - 1)
        g = 255 * y / (h - 1)
        b = 255 * (0.5 + 0.5 * np.sin(np.hypot(x - w / 2, y - h / 2) / 40.0))
        out.append(np.stack([r, g, b], -1).round().astype(np.uint8))
    return out


def rendered_text() -> list[np.ndarray]:
    out = []
    for text, size, fg, bg in (("Hello World", (512, 256), "black", "white"),
                               ("GRPO 2026", (640, 640), (250, 220, 40), (20, 30, 90))):
        im = Image.new("RGB", size, bg)
        ImageDraw.Draw(im).text((30, size[1] // 2 - 40), text, fill=fg, font=ImageFont.load_default(size=72))
        out.append(np.asarray(im))
    return out


def photos(paths: list[str]) -> list[np.ndarray]:
    out = []
    for p in paths:
        arr = np.asarray(Image.open(p).convert("RGB"))
        out += [arr, arr[: arr.shape[0] // 5, : arr.shape[1] // 6].copy()]  # the crop is upscaled
    return out


def noise() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((512, 512), (384, 640))]
