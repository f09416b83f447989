"""Worker-side head models: the interface every head implements (the worker builds them with
`heads.factory.build_head`, so this base module never imports a concrete head)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...config.head_options import HeadOptions
from ...exceptions import Unavailable


class HeadLoadError(Unavailable):
    """The model could not be loaded (bad path, missing dependency, offline hub ...)."""


class HeadModel(ABC):
    """Loads one scorer model and scores batches of (RGB uint8 image, prompt) items. `options` are
    the kind's typed options (config/head_options.py), validated once: a head reads them, with the
    defaults declared there, never from a dict of its own."""

    def __init__(self, kind: str, options: HeadOptions) -> None:
        self.kind = kind
        self.name = kind  # the configured judge's name (the worker sets it before load)
        self.options = options

    @abstractmethod
    def load(self) -> dict[str, Any]:
        """Load the model; return facts for the score's details (model, preprocessing ...)."""

    @abstractmethod
    def infer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[dict[str, Any]]:
        """One output dict per item. CLIP family: {"raw": float}; OCR: {"lines", "confidences"}."""

    # Optional preprocessing stage: `prepare(images, prompts) -> prepared`, then
    # `infer(images, prompts, prepared)`. A head that defines it has it run on the worker's stager
    # thread, overlapping the previous batch's forward pass (heads/batcher.py); the heavy part runs in
    # preprocessing processes or as a few batched kernels on the device, never as per-image work
    # in threads of this process.
    prepare: Callable[[Sequence[np.ndarray], Sequence[str]], Any] | None = None

    def close(self) -> None:
        """Release what the head started besides the model (preprocessing processes)."""

    def stats(self) -> dict[str, Any]:
        return {}

