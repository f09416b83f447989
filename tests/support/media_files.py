"""Real media files on disk for folder-scoring and browser tests (written with PyAV / Pillow)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

# container suffix -> (PyAV codec, pixel format): what `score DIR` must read.
VIDEO_CODECS = {
    ".mp4": ("libx264", "yuv420p"),
    ".mov": ("libx264", "yuv420p"),
    ".avi": ("mpeg4", "yuv420p"),
    ".webm": ("libvpx", "yuv420p"),
}


# Clips a browser cannot play as they are: name -> (file suffix, PyAV encoder, pixel format).
# (libx265 corrupts its heap on frames as small as 40 x 30: keep them >= 48 x 32.)
UNPLAYABLE_CLIPS = {
    "mpeg4": (".mp4", "mpeg4", "yuv420p"),          # MPEG-4 Part 2
    "hevc": (".mp4", "libx265", "yuv420p"),
    "prores": (".mov", "prores", "yuv422p10le"),
    "ffv1": (".mkv", "ffv1", "yuv420p"),
    "mjpeg": (".avi", "mjpeg", "yuvj420p"),
    "h264_in_avi": (".avi", "libx264", "yuv420p"),   # a playable codec in a container browsers refuse
    "h264_444": (".mp4", "libx264", "yuv444p"),     # High 4:4:4: not decoded by browsers
}


def write_video(path: Path, *, frames: int = 8, fps: int = 8, size: tuple[int, int] = (64, 48),
                seed: int = 0, codec: str | None = None, pix_fmt: str | None = None) -> Path:
    """A short clip of moving noise in the container the suffix names (by default in the codec
    VIDEO_CODECS gives it)."""
    if codec is None:
        codec, pix_fmt = VIDEO_CODECS[path.suffix.lower()]
    assert pix_fmt is not None
    rng = np.random.default_rng(seed)
    w, h = size
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        stream.time_base = Fraction(1, fps)
        if codec == "libx265":
            stream.options = {"x265-params": "log-level=error"}
        for i in range(frames):
            arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            arr[:, : (i * w) // frames] = (40 * i) % 256  # a moving band, so frames differ visibly
            frame = av.VideoFrame.from_ndarray(arr, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def write_image(path: Path, *, seed: int = 0, size: tuple[int, int] = (64, 48)) -> Path:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr).save(path)
    return path
