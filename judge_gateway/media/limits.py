"""`MediaError` and the bounds every medium is checked against before a pixel is decoded.

Declared sizes (image header, container stream info, array shape) are checked against
`MediaLimits`: pixels per image or frame, frames and decoded pixels per video, a frame rate's
range, and decoded pixels of all compressed media in one request (`request_limits`, which the
server enters per request; outside it the module defaults apply and nothing is summed).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..exceptions import InvalidInput

# Defaults of the [media] budgets (config.MediaConfig); read at each check, so tests may patch
# them here (on `media.limits`: the package face only holds copies).
MAX_IMAGE_PIXELS = 4096 * 4096  # one image or frame: 48 MiB of RGB
MAX_VIDEO_FRAMES = 4096
MAX_VIDEO_PIXELS = 2**28  # frames*W*H of one video: 768 MiB of RGB
MAX_REQUEST_PIXELS = 2**29  # decoded pixels of a request's compressed media: 1.5 GiB of RGB
# Upper bound on a declared frame rate: anything above is a unit mistake, not a video.
MAX_FPS = 1000.0


class MediaError(InvalidInput):
    """A medium could not be decoded, validated or encoded. The message says why."""


@dataclass(frozen=True)
class MediaLimits:
    """Decoded-size budgets (see the module docstring); `config.MediaConfig` builds one."""

    max_image_pixels: int = MAX_IMAGE_PIXELS
    max_video_frames: int = MAX_VIDEO_FRAMES
    max_video_pixels: int = MAX_VIDEO_PIXELS
    max_request_pixels: int = MAX_REQUEST_PIXELS


class _PixelBudget:
    """Decoded pixels promised so far in one request (validation may run in worker threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def charge(self, pixels: int, what: str) -> None:
        with self._lock:
            if self.used + pixels > self.limit:
                raise MediaError(
                    f"{what} would decode to {pixels} pixels; with the {self.used} already in this "
                    f"request that exceeds media.max_request_pixels = {self.limit}"
                )
            self.used += pixels


_LIMITS: ContextVar[MediaLimits | None] = ContextVar("media_limits", default=None)
_BUDGET: ContextVar[_PixelBudget | None] = ContextVar("media_budget", default=None)


def current_limits() -> MediaLimits:
    """The limits of the request being validated, else the module defaults."""
    limits = _LIMITS.get()
    if limits is not None:
        return limits
    return MediaLimits(MAX_IMAGE_PIXELS, MAX_VIDEO_FRAMES, max(MAX_VIDEO_PIXELS, MAX_IMAGE_PIXELS),
                       max(MAX_REQUEST_PIXELS, MAX_VIDEO_PIXELS, MAX_IMAGE_PIXELS))


@contextmanager
def request_limits(limits: MediaLimits) -> Iterator[None]:
    """Validate media under `limits`, summing decoded pixels of compressed media into one budget.
    Context variables: worker threads started inside (run_in_threadpool, to_thread) share it."""
    t_limits = _LIMITS.set(limits)
    t_budget = _BUDGET.set(_PixelBudget(limits.max_request_pixels))
    try:
        yield
    finally:
        _BUDGET.reset(t_budget)
        _LIMITS.reset(t_limits)


def request_pixels() -> int:
    """Decoded pixels charged so far in the current request (0 outside `request_limits`): what it
    reserves of the process-wide budget (media/budget.py) before it scores."""
    budget = _BUDGET.get()
    return budget.used if budget is not None else 0


def _charge(pixels: int, what: str) -> None:
    """Count a compressed medium's decoded size against the request (raw arrays are as large as
    the body that carried them, so only compression can amplify)."""
    budget = _BUDGET.get()
    if budget is not None:
        budget.charge(pixels, what)


def _check_size(w: int, h: int, what: str) -> None:
    if w <= 0 or h <= 0:
        raise MediaError(f"{what} has a zero side ({w}x{h})")
    limit = current_limits().max_image_pixels
    if w * h > limit:
        raise MediaError(
            f"{what} is {w}x{h} = {w * h} pixels, above the limit of {limit} "
            "(media.max_image_pixels)"
        )


def _check_video_pixels(n: int, w: int, h: int, what: str) -> None:
    limit = current_limits().max_video_pixels
    if n * w * h > limit:
        raise MediaError(
            f"{what} is {n} frames of {w}x{h} = {n * w * h} decoded pixels, above the limit of "
            f"{limit} (media.max_video_pixels)"
        )


def _check_fps(fps: Any, what: str = "fps") -> float:
    if isinstance(fps, bool) or not isinstance(fps, (int, float, Fraction, np.number)):
        raise MediaError(f"{what} must be a number > 0, got {fps!r}")
    f = float(fps)
    if not math.isfinite(f) or f <= 0 or f > MAX_FPS:
        raise MediaError(f"{what} must be a finite number in (0, {MAX_FPS:g}], got {fps!r}")
    return f


def _check_num_frames(n: int, what: str) -> None:
    if n < 1:
        raise MediaError(f"{what} has no frames")
    limit = current_limits().max_video_frames
    if n > limit:
        raise MediaError(f"{what} has {n} frames, above the limit of {limit} (media.max_video_frames)")
