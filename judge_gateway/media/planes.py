"""A decoded 4:2:0 frame straight to RGB at the size a judge sees: each YUV plane resized on its
own (the luma plane and the two half-size chroma planes, each to the target size), then the
YCbCr -> RGB matrix applied to the small frame (`cv2.transform`).

Against the decode loop's other route (libswscale converting the whole frame to RGB, then the
RGB resize) this converts ~12x fewer pixels and resizes 1.5 planes' worth instead of 3: measured
~1.2 ms a 720p frame to 392x224 against ~1.8 in the decode loop (bench/RESULTS.md). The matrix is
the one libswscale picks from the frame's tags (BT.709 when tagged so, BT.601 otherwise, full
range for JPEG-range frames); frames tagged with anything else (BT.2020, SMPTE 240M, ...) and
other pixel formats return None and take libswscale's route. Fidelity against that route
(libswscale RGB, then PIL's bicubic) is tested in tests/unit/test_media_fidelity.py (>= 40 dB on
natural clips); the resampler is media/resize.py's, per plane.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .native import cv2
from .resize import resize_rgb
from .sampling import Resampler

PLANAR_420 = frozenset({"yuv420p", "yuvj420p"})
# FFmpeg's AVColorSpace values (the frame's `colorspace`) and the (Kr, Kb) of their matrix:
# unspecified is converted as BT.601, as libswscale does.
_KR_KB = {1: (0.2126, 0.0722),  # BT.709
          2: (0.299, 0.114),    # unspecified
          4: (0.30, 0.11),      # FCC
          5: (0.299, 0.114),    # BT.470BG (BT.601 625)
          6: (0.299, 0.114)}    # SMPTE 170M (BT.601 525)
_RANGE_JPEG = 2  # AVColorRange: full-range samples


@functools.lru_cache(maxsize=16)
def ycbcr_to_rgb(kr: float, kb: float, full_range: bool) -> np.ndarray:
    """The 3x4 affine matrix (float32) taking (Y, Cb, Cr) samples to (R, G, B)."""
    kg = 1.0 - kr - kb
    y_scale, c_scale, y_offset = (1.0, 1.0, 0.0) if full_range else (255.0 / 219.0, 255.0 / 224.0, 16.0)
    m = np.array([[y_scale, 0.0, c_scale * 2 * (1 - kr)],
                  [y_scale, -c_scale * 2 * (1 - kb) * kb / kg, -c_scale * 2 * (1 - kr) * kr / kg],
                  [y_scale, c_scale * 2 * (1 - kb), 0.0]])
    offset = -m @ np.array([y_offset, 128.0, 128.0])
    return np.hstack([m, offset[:, None]]).astype(np.float32)


def frame_matrix(frame: Any) -> np.ndarray | None:
    """The matrix libswscale would convert this PyAV frame with, or None when the frame is not
    planar 4:2:0 or its colour space is one this module does not convert."""
    name = frame.format.name
    if name not in PLANAR_420:
        return None
    kr_kb = _KR_KB.get(int(frame.colorspace))
    if kr_kb is None:
        return None
    full = name == "yuvj420p" or int(frame.color_range) == _RANGE_JPEG
    return ycbcr_to_rgb(*kr_kb, full)


def _plane(plane: Any) -> np.ndarray:
    """A uint8 view of one plane, without its row padding (no copy)."""
    rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
    return rows[:, : plane.width]


def planes_to_rgb(frame: Any, width: int, height: int, resampler: Resampler) -> np.ndarray | None:
    """A PyAV 4:2:0 frame as uint8 RGB [height, width, 3]: each plane resized to (width, height),
    then converted; None when `frame_matrix` has no matrix for it."""
    matrix = frame_matrix(frame)
    if matrix is None:
        return None
    y, u, v = (_plane(p) for p in frame.planes[:3])
    ycc = cv2().merge([resize_rgb(p, width, height, resampler) for p in (y, u, v)])
    return cv2().transform(ycc, matrix)
