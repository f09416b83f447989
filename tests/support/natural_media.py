"""Natural-looking test content for fidelity tests: the photo matplotlib ships (grace_hopper.jpg),
colour gradients and rendered text, panning a few pixels a frame (noise is the worst case for a
resampler or a codec, and nothing like what a generator makes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def photo() -> Image.Image:
    import matplotlib

    return Image.open(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg").convert("RGB")


def natural_frames(n: int, width: int, height: int) -> np.ndarray:
    """uint8 [n, height, width, 3]: the photo on the left half, a gradient with white and black
    text of several sizes on the right, shifted 4 pixels a frame."""
    half = width // 2
    canvas = Image.new("RGB", (width, height))
    canvas.paste(photo().resize((half, height), Image.Resampling.BICUBIC), (0, 0))
    yy, xx = np.mgrid[0:height, 0:width - half]
    gradient = np.stack([xx * 255 / (width - half), yy * 255 / height, (xx + yy) * 128 / (width - half + height)], -1)
    canvas.paste(Image.fromarray(gradient.astype(np.uint8)), (half, 0))
    draw = ImageDraw.Draw(canvas)
    big = max(10, height // 18)
    for i, line in enumerate(["The quick brown fox", "jumps over 12,345", "lazy dogs: 40 dB?"]):
        draw.text((half + big, big + i * 2 * big), line, fill=(255, 255, 255), font=ImageFont.load_default(size=big))
    draw.text((half + big, height * 2 // 3), "small text 0123456789", fill=(0, 0, 0),
              font=ImageFont.load_default(size=max(8, big // 2)))
    base = np.asarray(canvas)
    return np.stack([np.roll(base, 4 * i, axis=1) for i in range(n)])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 arrays, in dB (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)
