"""A contact sheet of the frames a judge saw, cut from the sample's video file."""

from __future__ import annotations

import io
import math
from pathlib import Path

from PIL import Image

from ..media.container import open_container

THUMB_WIDTH = 160
MAX_SHOWN = 32  # more would make an unreadable sheet; evenly spaced ones are shown


def contact_sheet(video: Path, indices: list[int]) -> bytes:
    """PNG of the given source frames (decoded in one pass), in a grid of up to 8 columns."""
    if len(indices) > MAX_SHOWN:
        step = len(indices) / MAX_SHOWN
        indices = [indices[int(k * step)] for k in range(MAX_SHOWN)]
    wanted = set(indices)
    got: dict[int, Image.Image] = {}
    # The file came with the samples: opened under the media allow-list like a request's video.
    with open_container(video.read_bytes()) as container:
        for n, frame in enumerate(container.decode(video=0)):
            if n in wanted:
                img = frame.to_image()
                img.thumbnail((THUMB_WIDTH, THUMB_WIDTH))
                got[n] = img
            if n >= max(wanted):
                break
    thumbs = [got[i] for i in indices if i in got]
    if not thumbs:
        raise ValueError(f"{video.name}: none of frames {indices[:4]}... could be decoded")
    cols = min(8, len(thumbs))
    rows = math.ceil(len(thumbs) / cols)
    w, h = thumbs[0].size
    sheet = Image.new("RGB", (cols * (w + 2), rows * (h + 2)), "white")
    for k, img in enumerate(thumbs):
        sheet.paste(img, ((k % cols) * (w + 2), (k // cols) * (h + 2)))
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    return buf.getvalue()
