"""A small JPEG of what a watched sample showed: its image, or a few of its video's frames side by side."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from ..media import MediaError
from ..schema import SampleInput

JPEG_QUALITY = 80


def _fit(img: Image.Image, px: int) -> Image.Image:
    img = img.convert("RGB")
    img.thumbnail((px, px))
    return img


def thumbnail(sample: SampleInput, px: int, video_frames: int) -> tuple[bytes, str] | None:
    """(JPEG bytes, "image" | "video") or None when the sample has no medium or it cannot be
    decoded (the score already says why: a thumbnail is no place to fail)."""
    try:
        if sample.image is not None:
            return _jpeg(_fit(sample.image.to_pil(), px)), "image"
        if sample.video is not None:
            n = sample.video.num_frames
            picks = sorted({round(k * (n - 1) / max(1, video_frames - 1)) for k in range(video_frames)}) if n else []
            frames = sample.video.frames_array(picks)
            tiles = [_fit(Image.fromarray(np.ascontiguousarray(f)), px) for f in frames]
            if not tiles:
                return None
            strip = Image.new("RGB", (sum(t.width for t in tiles) + 2 * (len(tiles) - 1), max(t.height for t in tiles)),
                              "white")
            x = 0
            for tile in tiles:
                strip.paste(tile, (x, 0))
                x += tile.width + 2
            return _jpeg(strip), "video"
    except (MediaError, ValueError, OSError):
        return None
    return None


def _jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()
