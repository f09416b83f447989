"""Worker-side head models: the interface every head implements (the worker builds them with
`heads.factory.build_head`, so this base module never imports a concrete head)."""

from __future__ import annotations

import sys
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

    # -- residency (a colocated head's sleep and wake: heads/sleeping.py) ----------------------------
    # A head that can drop its model and load it again in place sets this and implements
    # release_weights / reload_weights (the CLIP family); the others sleep by their worker exiting.
    reloads_in_place = False

    def weight_modules(self) -> list[Any]:
        """The torch modules that hold the head's weights (what an offload moves): every attribute
        of the head that is a `torch.nn.Module`. A head that keeps them deeper overrides this."""
        torch = sys.modules.get("torch")
        if torch is None:
            return []
        return [v for v in vars(self).values() if isinstance(v, torch.nn.Module)]

    def sleep_methods(self) -> tuple[str, str]:
        """How it sleeps at level 1 and at level 2: `offload` (its modules to pinned host memory:
        on an accelerator, with modules), `reload` (dropped and loaded again in place), `exit`
        (the worker process ends; a fresh one loads at the wake)."""
        level2 = "reload" if self.reloads_in_place else "exit"
        device = str(getattr(self.options, "device", "cpu"))
        on_accelerator = not device.startswith("cpu") and bool(self.weight_modules())
        return ("offload" if on_accelerator else level2), level2

    def release_weights(self) -> None:
        """Drop the model (nothing may reference its tensors after this); `reloads_in_place` heads."""
        raise NotImplementedError(f"{self.kind} cannot drop its model in place")

    def reload_weights(self) -> None:
        """Load the model again from the files and with the loader of `load`."""
        raise NotImplementedError(f"{self.kind} cannot reload its model in place")

    def device_tensors_to(self, device: Any) -> None:
        """Move the head's device tensors outside its modules (caches) with its weights."""

