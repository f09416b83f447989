"""A torch-free transform for ProcessPreprocessor tests: records where it ran."""

from __future__ import annotations

import os
import threading

import numpy as np


def where_it_ran(scale: int = 1) -> object:
    def run(images: list[np.ndarray]) -> list[dict]:
        return [{"value": int(im[0, 0, 0]) * scale, "pid": os.getpid(), "thread": threading.current_thread().name}
                for im in images]

    return run


def mean_or_fail() -> object:
    """One float per image (its mean); an all-255 image is refused."""

    def run(images: list[np.ndarray]) -> np.ndarray:
        if any(im.min() == 255 for im in images):
            raise ValueError("all-255 image refused")
        return np.array([[float(im.mean())] for im in images])

    return run
